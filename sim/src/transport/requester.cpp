// The requester: posting to the send queue, and sending what it holds in order (PSNs, the
// limit on outstanding READs and atomics, fences, binds and local invalidations run in
// order), the local ACK timer and the retries it and RNR NAKs start.
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "transport/completions.hpp"
#include "transport/memory_keys.hpp"
#include "transport/qp.hpp"
#include "transport/wire.hpp"

namespace verbsim::sim {

namespace {

// A UD WQE's dst_dev when its AH belongs to another PD than the QP (ProfileTraits::
// ud_ah_pd_checked); route() gives -1 for an address no device has.
constexpr std::int32_t kAhOfAnotherPd = -2;

bool opcode_allowed(QpType type, WrOpcode op) noexcept {
  switch (type) {
    case QpType::rc: return true;
    case QpType::uc:
      return op != WrOpcode::rdma_read && op != WrOpcode::atomic_cmp_and_swp &&
             op != WrOpcode::atomic_fetch_and_add;
    case QpType::ud:
      return op == WrOpcode::send || op == WrOpcode::send_with_imm ||
             op == WrOpcode::send_with_inv;
  }
  return false;
}


}  // namespace

// ---------------------------------------------------------------------------------------------
// Posting

const char kDoorbellRefused[] = "QP is not in RTS";
const char kDoorbellRefusedWrRefused[] =
    "QP is not in RTS, and the WR did not fit the send queue or was invalid";

template <QpType Type>
[[gnu::always_inline]] inline int SimQp::check_send(const SendWr& wr, std::uint64_t& length,
                                                 const char*& reason,
                                                 std::uint32_t ahead) const noexcept {
  const ProfileTraits& t = traits();
  auto refuse = [&reason](int err, const char* why) {
    reason = why;
    return err;
  };
  if (sq_post_ + ahead - sq_retired_ >= sq_depth_) return refuse(ENOMEM, "send queue full");
  if (!opcode_allowed(Type, wr.opcode) && t.post_checks_opcode) {
    return refuse(EINVAL, "opcode not supported on this QP type");
  }
  if (wr.sg_list.size() > max_send_sge_) return refuse(t.send_limit_errno, "too many SGEs");
  length = sges_length(wr.sg_list);
  if (any(wr.flags, SendFlags::inline_data)) [[unlikely]] {
    if (length > reported_cap_.max_inline_data) {
      return refuse(t.send_limit_errno, "inline data larger than max_inline_data");
    }
    if (wr.opcode == WrOpcode::rdma_read || is_atomic(wr.opcode)) {
      return refuse(EINVAL, "inline is only for SEND and RDMA WRITE");
    }
  }
  // Atomics, the memory window operations and values that are no opcode come after every
  // other opcode: one test here.
  static_assert(WrOpcode::atomic_fetch_and_add > WrOpcode::rdma_read &&
                WrOpcode::local_inv > WrOpcode::atomic_fetch_and_add &&
                WrOpcode::send_with_inv > WrOpcode::bind_mw);
  if (wr.opcode >= WrOpcode::atomic_cmp_and_swp) [[unlikely]] {
    if (wr.opcode > WrOpcode::send_with_inv) return refuse(EINVAL, "unknown opcode");
    if (is_atomic(wr.opcode) && ((t.atomic_takes_longer_buffer ? length < 8 : length != 8) ||
                                 (wr.remote_addr & 7u) != 0)) {
      return refuse(EINVAL,
                    t.atomic_takes_longer_buffer
                        ? "atomics need 8 bytes of local buffer and an 8-byte aligned operand"
                        : "atomics need one 8-byte, 8-byte aligned operand");
    }
    if (const char* why = window_op_refusal(wr)) return refuse(EINVAL, why);
  }
  if (length > 0x80000000ull) return refuse(EINVAL, "message larger than 2 GiB");
  if (Type == QpType::ud) {
    const auto* ah = dynamic_cast<const SimAh*>(wr.ah);
    if (ah == nullptr) return refuse(EINVAL, "UD send without an address handle");
    const auto& port = dev_->ports[0];
    if (length > mtu_bytes(port.attr.active_mtu) && t.ud_oversize_refused) {
      return refuse(EINVAL, "UD message larger than the path MTU");
    }
  }
  return 0;
}

template <QpType Type>
[[gnu::always_inline]] inline void SimQp::enqueue_send(const SendWr& wr,
                                                      std::uint32_t length) noexcept {
  const std::uint32_t i = sq_post_++;
  SendWqe& w = sq_at(i);
  w.wr_id = wr.wr_id;
  if constexpr (Type == QpType::ud) {
    w.ud.remote_qpn = wr.remote_qpn;
    w.ud.remote_qkey = wr.remote_qkey;
    const auto* ah = static_cast<const SimAh*>(wr.ah);
    w.dst_dev = ah->pd() == pd_.get() || !traits().ud_ah_pd_checked ? ah->dst_dev()
                                                                     : kAhOfAnotherPd;
    w.tclass = ah->attr().grh.traffic_class;
    w.hop_limit = ah->attr().grh.hop_limit;
  } else {
    w.remote_addr = wr.remote_addr;
    w.rkey = wr.rkey;
  }
  w.length = length;
  w.imm = wr.imm_data;
  if constexpr (Type != QpType::ud) {
    if (wr.opcode >= WrOpcode::atomic_cmp_and_swp) [[unlikely]] {
      if (is_atomic(wr.opcode)) sq_atomic(i) = {wr.compare_add, wr.swap};
      if (wr.opcode == WrOpcode::bind_mw) enqueue_bind(wr, i);
    }
  }
  w.opcode = wr.opcode;
  w.flags = wr.flags;
  w.signaled = sq_sig_all_ || any(wr.flags, SendFlags::signaled);
  w.inlined = any(wr.flags, SendFlags::inline_data);
  if (w.inlined) {
    std::uint8_t* dst = sq_inline(i);
    for (const Sge& s : wr.sg_list) {
      if (s.length == 0) continue;  // its address may be anything
      std::memcpy(dst, reinterpret_cast<const void*>(s.addr), s.length);
      dst += s.length;
    }
    w.num_sge = 0;
  } else {
    copy_sges(wr.sg_list, sq_sge(i));
    sges_to_host(*dev_, sq_sge(i), wr.sg_list.size());
    w.num_sge = static_cast<std::uint32_t>(wr.sg_list.size());
  }
}

PostResult SimQp::post_send(std::span<const SendWr> wrs) noexcept {
  world().check_entry();
  world().program_acts();
  switch (type_) {
    case QpType::uc: return post_send_as<QpType::uc>(wrs);
    case QpType::ud: return post_send_as<QpType::ud>(wrs);
    case QpType::rc: break;
  }
  return post_send_as<QpType::rc>(wrs);
}

template <QpType Type>
PostResult SimQp::post_send_as(std::span<const SendWr> wrs) noexcept {
  const ProfileTraits& t = traits();
  const QpState s = hot_.qp_state;
  const bool early = s == QpState::reset || s == QpState::init || s == QpState::rtr;
  if (early && t.post_send_needs_rts && !t.rejected_send_stays_queued) {
    return {0, EINVAL, "QP is not in RTS"};
  }
  Accounting& acct = world().acct();
  const bool observed = world().observing();
  for (std::uint32_t i = 0; i < wrs.size(); ++i) {
    std::uint64_t length = 0;
    const char* reason = "";
    if (const int err = check_send<Type>(wrs[i], length, reason); err != 0) {
      if (observed && s != QpState::err) [[unlikely]] observe_posts(wrs.first(i));
      // rxe rings the doorbell after its loop whatever the loop found: in RTS the WRs before
      // this one (and any kept from before RTS) run; before RTS the doorbell's EINVAL is what
      // the post returns.
      if (early && t.rejected_send_stays_queued) return {i, EINVAL, kDoorbellRefusedWrRefused};
      if ((i > 0 || !t.rts_starts_send_queue) && s == QpState::rts) transmit();
      return {i, err, reason};
    }
    enqueue_send<Type>(wrs[i], static_cast<std::uint32_t>(length));
    ++acct.posted;
    if (s == QpState::err) {
      // Flushed at once: observers hear of the post before its completion.
      if (observed) [[unlikely]] observe_posts(wrs.subspan(i, 1));
      complete_next(WcStatus::wr_flush_err);
      sq_sent_ = sq_done_;
      if (!t.retire_on_poll) sq_retired_ = sq_done_;  // rxe: the slot frees on completion
    }
  }
  if (observed && s != QpState::err) [[unlikely]] observe_posts(wrs);
  if (early && t.post_send_needs_rts) {
    // rxe writes the WQEs into its queue before the kernel refuses the doorbell: they run
    // once the QP is in RTS and a later post_send rings the doorbell.
    return {0, EINVAL, kDoorbellRefused};
  }
  if (s == QpState::rts) transmit();
  check_queues();
  return {static_cast<std::uint32_t>(wrs.size()), 0, ""};
}

PostResult SimQp::check_posts(std::span<const SendWr> wrs) const noexcept {
  switch (type_) {
    case QpType::uc: return check_posts_as<QpType::uc>(wrs);
    case QpType::ud: return check_posts_as<QpType::ud>(wrs);
    case QpType::rc: break;
  }
  return check_posts_as<QpType::rc>(wrs);
}

template <QpType Type>
PostResult SimQp::check_posts_as(std::span<const SendWr> wrs) const noexcept {
  // In ERR each WR is flushed as it is posted; where the slot frees on completion (rxe) the
  // queue does not fill.
  const bool fills = hot_.qp_state != QpState::err || traits().retire_on_poll;
  for (std::uint32_t i = 0; i < wrs.size(); ++i) {
    std::uint64_t length = 0;
    const char* reason = "";
    if (const int err = check_send<Type>(wrs[i], length, reason, fills ? i : 0); err != 0) {
      return {i, err, reason};
    }
  }
  return {static_cast<std::uint32_t>(wrs.size()), 0, ""};
}

// Tells the world's observers of the send WRs `wrs`, just taken.
[[gnu::noinline]] void SimQp::observe_posts(std::span<const SendWr> wrs) {
  if (!world().observes_work_requests()) return;  // only counting ports, or only a capture
  for (const SendWr& wr : wrs) {
    PostRecord p;
    p.time_ns = world().now();
    p.dev = static_cast<std::uint16_t>(dev_->index);
    p.qpn = qpn_;
    p.send = true;
    p.wr_id = wr.wr_id;
    p.opcode = wr.opcode;
    p.length = static_cast<std::uint32_t>(sges_length(wr.sg_list));
    p.signaled = sq_sig_all_ || any(wr.flags, SendFlags::signaled);
    world().observe_posted(p);
  }
}

// ---------------------------------------------------------------------------------------------
// Sending

void SimQp::transmit() {
  if (sq_sent_ == sq_post_ || hot_.qp_state != QpState::rts || rnr_wait_) return;
  switch (type_) {
    case QpType::rc: return transmit_as<QpType::rc>();
    case QpType::uc: return transmit_as<QpType::uc>();
    case QpType::ud: return transmit_as<QpType::ud>();
  }
}

template <QpType Type>
void SimQp::transmit_as() {
  World::Impl& w = world();
  const bool had_outstanding = sq_done_ != sq_sent_;
  constexpr bool rc = Type == QpType::rc;
  constexpr bool ud = Type == QpType::ud;
  const std::uint8_t port = ud ? 1 : hot_.port_num;
  // What every packet of this QP has in common.
  Event e{};
  e.kind = EvKind::deliver;
  e.src_dev = static_cast<std::uint16_t>(dev_->index);
  e.wire = w.wire_of(*dev_, port);
  PortCore& egress = World::Impl::egress(*dev_, port);
  e.src_qpn = qpn_;
  e.epoch = epoch_;
  const bool local_on_response = rc && checks_local_on_response();
  while (sq_sent_ != sq_post_) {
    SendWqe& wq = sq_at(sq_sent_);
    const bool rd = is_read_or_atomic(wq.opcode);
    if (rc) {
      if (rd && rd_atomic_outstanding_ >= std::max<std::uint32_t>(hot_.max_rd_atomic, 1)) break;
      if (any(wq.flags, SendFlags::fence) && rd_atomic_outstanding_ > 0) break;
    }
    if (!opcode_supported(Type, wq.opcode) || (ud && wq.dst_dev == kAhOfAnotherPd)) {
      // rxe accepted it at post time; its requester finds no packet opcode, or no address
      // vector (an AH of another PD), for it.
      if (sq_done_ != sq_sent_) break;
      ++sq_sent_;
      complete_next(WcStatus::loc_qp_op_err);
      enter_error();
      return;
    }
    if constexpr (!ud) {
      if (is_local_op(wq.opcode)) [[unlikely]] {
        // A bind or local invalidate runs once everything before it has completed (a NIC
        // runs it when it reaches it: the same outcome, a little later in virtual time), so
        // it never has to be undone by a retry.
        if (sq_done_ != sq_sent_) break;
        if (!run_next_local_op()) return;
        continue;
      }
    }
    // Local protection: the NIC finds a bad lkey when it reads the WQE's buffers. Completions
    // stay in order, so wait for everything before it first. A READ's or atomic's buffers are
    // only written by its response, which is where rxe checks them (on_ack).
    if (!wq.inlined && !(rd && local_on_response) &&
        !sges_valid(sq_sge(sq_sent_), wq.num_sge, touched_bytes(wq), local_need(wq))) {
      if (sq_done_ != sq_sent_) break;
      const WcStatus status = local_fault_status(sq_sent_);
      ++sq_sent_;
      complete_next(status);
      enter_error();
      return;
    }
    wq.psn = (hot_.sq_psn + (sq_sent_ - sq_psn_base_index_)) & 0xffffff;
    wq.buffers_gone = false;  // the buffers were just found valid
    const int dst = ud ? wq.dst_dev : dst_dev_;
    const std::uint64_t bytes = wq.opcode == WrOpcode::rdma_read ? 0 : wq.length;
    if (rd) ++rd_atomic_outstanding_;
    e.index = sq_sent_;
    e.time = w.transmit_time(egress, bytes);
    // rxe completes a UD send larger than the MTU without sending anything.
    const bool oversize = ud && wq.length > mtu_bytes(dev_->ports[0].attr.active_mtu);
    if (dst >= 0 && !oversize) {
      e.dev = static_cast<std::uint16_t>(dst);
      e.qpn = ud ? wq.ud.remote_qpn : hot_.dest_qp_num;
      e.time = w.send_packet(e, wq.psn);
    }
    if (!rc) {
      // Unreliable: the send completes once the message is on the wire; ordered after the
      // delivery so the receiver reads the data before the slot can be reused.
      Event done = e;
      done.kind = EvKind::ack;
      done.dev = static_cast<std::uint16_t>(dev_->index);
      done.qpn = qpn_;
      w.schedule(done);
    }
    ++sq_sent_;
  }
  if (rc && !had_outstanding && sq_done_ != sq_sent_) arm_timer();
  check_queues();
}

// Runs the bind or local invalidate at sq_sent_, everything before it complete, and completes
// it; false when that took the QP to ERR. It takes no PSN: the next message gets the one it
// would have had.
[[gnu::noinline]] bool SimQp::run_next_local_op() {
  const WcStatus status = run_local_op(sq_sent_);
  hot_.sq_psn = (hot_.sq_psn + (sq_sent_ - sq_psn_base_index_)) & 0xffffff;
  sq_psn_base_index_ = ++sq_sent_;
  if (status != WcStatus::success) {
    complete_next(status);
    enter_error();
    return false;
  }
  return acknowledge_until(sq_sent_);  // false: its CQ overran
}

// Restarts the local ACK timer. At most one timer event per QP is in the heap: when it fires
// before the (since pushed back) deadline, it re-arms itself for the deadline.
void SimQp::arm_timer() {
  if (hot_.timeout == 0) return;  // infinite: a lost message waits forever, as on hardware
  timer_deadline_ = world().now() + ack_timeout_ns(hot_.timeout);
  if (!timer_armed_) schedule_timer();
}

void SimQp::schedule_timer() {
  World::Impl& w = world();
  timer_armed_ = true;
  Event e{};
  e.time = timer_deadline_;
  e.kind = EvKind::timeout;
  e.dev = static_cast<std::uint16_t>(dev_->index);
  e.qpn = qpn_;
  e.value = timer_gen_;
  w.schedule(e);
}

bool SimQp::drop_idle_timer(const Event& e) noexcept {
  if (e.value != timer_gen_) return true;  // armed before a RESET or ERR
  if (hot_.qp_state != QpState::err && !rnr_wait_ && sq_done_ != sq_sent_) return false;
  timer_armed_ = false;  // nothing outstanding (or an RNR wait, or ERR): the timer stops
  return true;
}

void SimQp::on_timeout(const Event& e) {
  if (drop_idle_timer(e)) return;
  timer_armed_ = false;
  if (world().now() < timer_deadline_) {
    schedule_timer();  // progress since it was armed: sleep until the current deadline
    return;
  }
  if (world().observing()) {
    world().observe_instant(static_cast<std::uint16_t>(dev_->index), qpn_, "timeout");
  }
  retry_or_fail();
}

void SimQp::retry_or_fail() {
  if (retry_left_ == 0) {
    ++port_counters().retry_exceeded_err;
    complete_next(WcStatus::retry_exc_err);
    enter_error();
    return;
  }
  --retry_left_;
  ++port_counters().completer_retry_err;
  rewind();
  transmit();
  if (sq_done_ != sq_sent_) arm_timer();
}

void SimQp::on_rnr_retry(const Event& e) {
  if (e.epoch != epoch_ || !rnr_wait_) return;
  rnr_wait_ = false;
  transmit();
}

// The simulator reads a message's buffers, and writes a READ or atomic response into them, when
// the message arrives. A program that deregisters (or re-registers) an MR while messages that
// use it are on the wire must not have them touch its memory then: those whose bytes the MR no
// longer covers are marked, and arrive as nothing (on_deliver). As on a NIC that had not yet
// read the buffers, the WR fails (local_fault_status): RC when it goes back and finds the key
// invalid, UC and UD when they complete (on_ack). A re-registration that still covers the
// bytes leaves them alone.
void SimQp::mr_changed(std::uint32_t key) noexcept {
  for (std::uint32_t i = sq_done_; i != sq_sent_; ++i) {
    SendWqe& wq = sq_at(i);
    if (wq.inlined || wq.buffers_gone) continue;
    const Sge* sges = sq_sge(i);
    bool names_key = false;
    for (std::uint32_t k = 0; k < wq.num_sge; ++k) {
      names_key |= sges[k].lkey == key && sges[k].length != 0;
    }
    if (names_key && !bytes_valid(sges, wq.num_sge, touched_bytes(wq), local_need(wq))) {
      wq.buffers_gone = true;
    }
  }
}

WcStatus SimQp::local_fault_status(std::uint32_t index) noexcept {
  const SendWqe& wq = sq_at(index);
  if (is_read_or_atomic(wq.opcode)) return WcStatus::loc_prot_err;
  return sge_keys_known(sq_sge(index), wq.num_sge, wq.length) ? WcStatus::loc_prot_err
                                                              : traits().bad_lkey_status;
}

}  // namespace verbsim::sim
