// Completion queues: ibv_create_cq and ibv_create_cq_ex (every CQ is an ibv_cq_ex), polling
// (ibv_poll_cq and the ibv_start_poll family), completion events, resizing.
#include <arpa/inet.h>

#include <algorithm>
#include <span>

#include "objects.hpp"
#include "ops.hpp"
#include "state.hpp"
#include "symver.hpp"
#include "verbsim/abi/translate.hpp"
#include "verbsim/sim/extensions.hpp"

using namespace verbsim;
using namespace verbsim::dropin;

namespace {

constexpr std::uint64_t kSupportedWcFlags = IBV_WC_STANDARD_FLAGS;

// ibv_poll_cq: the number of completions (0..n), or a negative errno. The simulator writes
// straight into the program's array (abi::as_core), up to kChunk completions per polling()
// (which may run the world when a chunk finds nothing); each is then made an ibv_wc in place.
int poll_cq(ibv_cq* cq, int n, ibv_wc* wc) noexcept {
  if (n < 0) return -EINVAL;
  try {
    auto held = lock_waiting();
    if (held.refused()) [[unlikely]] return -EDEADLK;
    if (check(cq, Kind::cq) != 0) [[unlikely]] return -EINVAL;
    DCq* c = DCq::from(cq);
    constexpr int kChunk = 32;
    int total = 0;
    while (total < n) {
      const int want = std::min(kChunk, n - total);
      const std::span out(abi::as_core(wc) + total, static_cast<std::size_t>(want));
      const PollResult r = polling([&] { return c->impl->poll(out); });
      if (r.err != 0) return total > 0 ? total : -r.err;
      for (std::uint32_t i = 0; i < r.count; ++i) abi::to_ibv_in_place(out[i]);
      total += static_cast<int>(r.count);
      if (static_cast<int>(r.count) < want) break;
    }
    if (total > 0) note_activity();
    return total;
  } catch (...) {
    return -errno_of_current_exception("ibv_poll_cq");
  }
}

int req_notify_cq(ibv_cq* cq, int solicited_only) noexcept {
  return with_errno<Refresh::no>("ibv_req_notify_cq", [&] {
    if (check(cq, Kind::cq) != 0) return EINVAL;
    return DCq::from(cq)->impl->req_notify(solicited_only != 0).value();
  });
}

// ---------------------------------------------------------------------------------------------
// The extended polling interface: start_poll takes the oldest completion (ENOENT if none),
// next_poll the next, the read_* functions read fields of the one taken.

int poll_one(ibv_cq_ex* cq) noexcept {
  try {
    auto held = lock_waiting();
    if (held.refused()) [[unlikely]] return EDEADLK;
    if (check(ibv_cq_ex_to_cq(cq), Kind::cq) != 0) return EINVAL;
    DCq* c = DCq::from(cq);
    const PollResult r = polling([&] { return c->impl->poll(std::span(&c->cur, 1)); });
    if (r.err != 0) return r.err;
    if (r.count == 0) return ENOENT;
    note_activity();
    c->status = static_cast<ibv_wc_status>(c->cur.status);
    c->wr_id = c->cur.wr_id;
    return 0;
  } catch (...) {
    return errno_of_current_exception("ibv_start_poll");
  }
}

int start_poll(ibv_cq_ex* cq, ibv_poll_cq_attr* attr) noexcept {
  if (attr != nullptr && attr->comp_mask != 0) return EINVAL;
  return poll_one(cq);
}
int next_poll(ibv_cq_ex* cq) noexcept { return poll_one(cq); }
void end_poll(ibv_cq_ex*) noexcept {}

const WorkCompletion& cur(ibv_cq_ex* cq) noexcept { return DCq::from(cq)->cur; }
ibv_wc_opcode read_opcode(ibv_cq_ex* cq) noexcept {
  return static_cast<ibv_wc_opcode>(cur(cq).opcode);
}
std::uint32_t read_vendor_err(ibv_cq_ex* cq) noexcept { return cur(cq).vendor_err; }
std::uint32_t read_byte_len(ibv_cq_ex* cq) noexcept { return cur(cq).byte_len; }
// Also ibv_wc_read_invalidated_rkey, which returns what this returns as a host-order rkey.
__be32 read_imm_data(ibv_cq_ex* cq) noexcept {
  const WorkCompletion& w = cur(cq);
  return any(w.wc_flags, WcFlags::with_inv) ? w.invalidated_rkey() : htonl(w.imm_data);
}
std::uint32_t read_qp_num(ibv_cq_ex* cq) noexcept { return cur(cq).qp_num; }
std::uint32_t read_src_qp(ibv_cq_ex* cq) noexcept { return cur(cq).src_qp; }
unsigned int read_wc_flags(ibv_cq_ex* cq) noexcept {
  return static_cast<unsigned>(to_underlying(cur(cq).wc_flags));
}
std::uint32_t read_slid(ibv_cq_ex* cq) noexcept { return cur(cq).slid; }
std::uint8_t read_sl(ibv_cq_ex* cq) noexcept { return cur(cq).sl; }
std::uint8_t read_dlid_path_bits(ibv_cq_ex* cq) noexcept { return cur(cq).dlid_path_bits; }

}  // namespace

namespace verbsim::dropin {

ibv_cq_ex* make_cq(ibv_context* context, const ibv_cq_init_attr_ex& attr) {
  if (const int err = check_context(context)) return fail_null<ibv_cq_ex>(err);
  // The channel as the kernel's create_cq takes it, by fd: EBADF when it is no channel.
  if (const int err = check_channel(attr.channel, EBADF); attr.channel != nullptr && err != 0) {
    return fail_null<ibv_cq_ex>(err);
  }
  if (attr.cqe > static_cast<std::uint32_t>(INT32_MAX)) return fail_null<ibv_cq_ex>(EINVAL);
  if ((attr.wc_flags & ~kSupportedWcFlags) != 0) return fail_null<ibv_cq_ex>(EOPNOTSUPP);
  if ((attr.comp_mask & ~static_cast<std::uint32_t>(IBV_CQ_INIT_ATTR_MASK_FLAGS |
                                                     IBV_CQ_INIT_ATTR_MASK_PD)) != 0) {
    return fail_null<ibv_cq_ex>(EINVAL);
  }
  // libibverbs refuses flags it does not know; the provider decides on IGNORE_OVERRUN.
  const std::uint32_t flags = (attr.comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) != 0 ? attr.flags : 0;
  if ((flags & ~static_cast<std::uint32_t>(IBV_CREATE_CQ_ATTR_SINGLE_THREADED |
                                           IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN)) != 0) {
    return fail_null<ibv_cq_ex>(EOPNOTSUPP);
  }
  // A CQ may name a parent domain (for its allocators, which the simulator does not need).
  if ((attr.comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) != 0 &&
      (check(attr.parent_domain, Kind::pd) != 0 ||
       DPd::from(attr.parent_domain)->parent == nullptr)) {
    return fail_null<ibv_cq_ex>(EINVAL);
  }
  if (attr.comp_vector >= static_cast<std::uint32_t>(context->num_comp_vectors)) {
    return fail_null<ibv_cq_ex>(EINVAL);
  }
  auto cq = std::make_unique<DCq>();
  DChannel* ch = attr.channel != nullptr ? DChannel::from(attr.channel) : nullptr;
  const CqCreateFlags create_flags = (flags & IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN) != 0
                                         ? CqCreateFlags::ignore_overrun
                                         : CqCreateFlags::none;
  cq->impl = DContext::from(context)->impl->create_cq(
      static_cast<int>(attr.cqe), ch != nullptr ? ch->impl.get() : nullptr, 0, create_flags);
  cq->context = context;
  cq->channel = attr.channel;
  cq->cq_context = attr.cq_context;
  cq->handle = add_handle(cq.get(), context, Kind::cq);
  cq->cqe = cq->impl->cqe();
  init_sync(cq->mutex, cq->cond);
  cq->comp_events_completed = 0;
  cq->async_events_completed = 0;
  cq->wc_flags = attr.wc_flags;
  cq->start_poll = start_poll;
  cq->next_poll = next_poll;
  cq->end_poll = end_poll;
  cq->read_opcode = read_opcode;
  cq->read_vendor_err = read_vendor_err;
  cq->read_byte_len = read_byte_len;
  cq->read_imm_data = read_imm_data;
  cq->read_qp_num = read_qp_num;
  cq->read_src_qp = read_src_qp;
  cq->read_wc_flags = read_wc_flags;
  cq->read_slid = read_slid;
  cq->read_sl = read_sl;
  cq->read_dlid_path_bits = read_dlid_path_bits;
  if (ch != nullptr) ++ch->refcnt;
  remember(cq->impl.get(), cq.get());
  return cq.release();
}

int cq_poll_op(ibv_cq* cq, int n, ibv_wc* wc) noexcept { return poll_cq(cq, n, wc); }
int cq_notify_op(ibv_cq* cq, int solicited_only) noexcept { return req_notify_cq(cq, solicited_only); }

}  // namespace verbsim::dropin

extern "C" {

ibv_cq* ibv_create_cq_1_1(ibv_context* context, int cqe, void* cq_context,
                          ibv_comp_channel* channel, int comp_vector) {
  return with_null<ibv_cq>("ibv_create_cq", [&]() -> ibv_cq* {
    if (const int err = check_context(context)) return fail_null<ibv_cq>(err);
    if (cqe < 0 || comp_vector < 0) return fail_null<ibv_cq>(EINVAL);
    ibv_cq_init_attr_ex attr{};
    attr.cqe = static_cast<std::uint32_t>(cqe);
    attr.cq_context = cq_context;
    attr.channel = channel;
    attr.comp_vector = static_cast<std::uint32_t>(comp_vector);
    ibv_cq_ex* cq = make_cq(context, attr);
    return cq != nullptr ? ibv_cq_ex_to_cq(cq) : nullptr;
  });
}
VERBSIM_DEFAULT_1_1(ibv_create_cq);
VERBSIM_SAME_TYPE(ibv_create_cq);

// 0, or EINVAL for a size outside 1..max_cqe or below the completions the CQ holds.
int ibv_resize_cq_1_1(ibv_cq* cq, int cqe) {
  return with_errno("ibv_resize_cq", [&] {
    if (const int err = as_write_cmd(check(cq, Kind::cq))) return err;
    DCq* c = DCq::from(cq);
    c->impl->resize(cqe);
    c->cqe = c->impl->cqe();
    return 0;
  });
}
VERBSIM_DEFAULT_1_1(ibv_resize_cq);
VERBSIM_SAME_TYPE(ibv_resize_cq);

// 0, or EBUSY while QPs use the CQ. As libibverbs (ibv_cmd_destroy_cq), it first waits until
// every completion event ibv_get_cq_event returned for the CQ has been acknowledged (by another
// thread: a program that destroys a CQ whose events it holds waits forever, as on rxe).
int ibv_destroy_cq_1_1(ibv_cq* cq) {
  {
    int err = 0;
    {
      auto held = lock();
      err = held.refused() ? EDEADLK : check(cq, Kind::cq);
    }
    if (err != 0) {
      errno = err;
      return err;
    }
    DCq* c = DCq::from(cq);
    ::pthread_mutex_lock(&cq->mutex);
    while (cq->comp_events_completed < c->events_taken) ::pthread_cond_wait(&cq->cond, &cq->mutex);
    ::pthread_mutex_unlock(&cq->mutex);
  }
  return with_errno("ibv_destroy_cq", [&] {
    if (const int err = check(cq, Kind::cq)) return err;  // destroyed while this one waited
    DCq* c = DCq::from(cq);
    c->impl->destroy();
    drop_handle(c->handle);
    forget(c->impl.get());
    if (c->channel != nullptr) --c->channel->refcnt;
    destroy_sync(c->mutex, c->cond);
    delete c;
    return 0;
  });
}
VERBSIM_DEFAULT_1_1(ibv_destroy_cq);
VERBSIM_SAME_TYPE(ibv_destroy_cq);

// Reads one event from the channel: blocks unless the program set O_NONBLOCK on channel->fd
// (then -1 with errno EAGAIN when none is pending). 0, or -1 with errno.
int ibv_get_cq_event_1_1(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context) {
  {
    auto held = lock();
    if (held.refused() || check_channel(channel, EINVAL) != 0 || cq == nullptr ||
        cq_context == nullptr) {
      errno = held.refused() ? EDEADLK : EINVAL;
      return -1;
    }
  }
  struct Attempt {
    DChannel* ch;
    CompletionQueue* got = nullptr;
  } a{DChannel::from(channel)};
  int err = 0;
  try {
    err = shared_wait("ibv_get_cq_event", channel->fd, is_nonblocking(channel->fd), [](void* p) {
      auto* at = static_cast<Attempt*>(p);
      if (!readable(at->ch->fd)) return EAGAIN;
      return at->ch->impl->get_cq_event(at->got, Wait::nonblocking).value();
    }, &a);
  } catch (...) {
    err = errno_of_current_exception("ibv_get_cq_event");
  }
  if (err == 0) {
    auto held = lock();  // not refused: the first one was not
    DCq* c = wrapper_of<DCq>(a.got);
    if (c == nullptr) {
      err = EAGAIN;  // the CQ was destroyed after its event was queued
    } else {
      *cq = c->ibv();
      *cq_context = c->cq_context;
      ::pthread_mutex_lock(&c->mutex);
      ++c->events_taken;
      ::pthread_mutex_unlock(&c->mutex);
      return 0;
    }
  }
  errno = err;
  return -1;
}
VERBSIM_DEFAULT_1_1(ibv_get_cq_event);
VERBSIM_SAME_TYPE(ibv_get_cq_event);

void ibv_ack_cq_events_1_1(ibv_cq* cq, unsigned int nevents) {
  auto held = lock();
  // No error to report (a refused call, an object that is not one): nothing happens.
  if (held.refused() || check(cq, Kind::cq) != 0) return;
  DCq* c = DCq::from(cq);
  c->impl->ack_events(nevents);
  ::pthread_mutex_lock(&cq->mutex);
  cq->comp_events_completed += nevents;
  ::pthread_cond_broadcast(&cq->cond);  // an ibv_destroy_cq may wait for this (libibverbs too)
  ::pthread_mutex_unlock(&cq->mutex);
}
VERBSIM_DEFAULT_1_1(ibv_ack_cq_events);
VERBSIM_SAME_TYPE(ibv_ack_cq_events);

}  // extern "C"
