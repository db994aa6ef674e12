// Queue pairs: creation (ibv_create_qp, ibv_create_qp_ex), the state machine, queries, the data
// path behind verbs.h's inline ibv_post_send / ibv_post_recv / ibv_post_srq_recv, and the
// ibv_wr_* builder of ibv_qp_ex.
#include <arpa/inet.h>

#include <cerrno>

#include <cstring>
#include <span>
#include <vector>

#include "objects.hpp"
#include "ops.hpp"
#include "state.hpp"
#include "symver.hpp"
#include "verbsim/abi/translate.hpp"
#include "verbsim/sim/extensions.hpp"

using namespace verbsim;
using namespace verbsim::dropin;

namespace {

constexpr unsigned kSendFlags = IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED |
                                IBV_SEND_INLINE;

// The send operations the simulator executes, as IBV_QP_EX_WITH_* bits.
constexpr std::uint64_t kSupportedSendOps =
    IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |
    IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
    IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV |
    IBV_QP_EX_WITH_SEND_WITH_INV;
// Those that need type 2 memory windows (DeviceAttr::mw_type2).
constexpr std::uint64_t kWindowSendOps =
    IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_SEND_WITH_INV;

// An ibv_send_wr as a core SendWr (its sg_list the program's own array, abi::as_core; a
// BIND_MW's bind information in `bind`). 0 or the errno to return.
int to_send_wr(const DQp& q, const ibv_send_wr& in, SendWr& out, BindMwWr& bind) noexcept {
  switch (in.opcode) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
    case IBV_WR_RDMA_READ:
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
    case IBV_WR_LOCAL_INV:
    case IBV_WR_BIND_MW:
    case IBV_WR_SEND_WITH_INV: break;
    default: return EINVAL;  // TSO, DRIVER1, ATOMIC_WRITE, ...: not modelled
  }
  out = SendWr{};
  out.wr_id = in.wr_id;
  out.opcode = static_cast<WrOpcode>(in.opcode);
  out.flags = static_cast<SendFlags>(in.send_flags & kSendFlags);
  // LOCAL_INV and BIND_MW carry no data: providers ignore their sg_list.
  if (in.opcode == IBV_WR_LOCAL_INV) {
    out.imm_data = in.invalidate_rkey;  // the key (host order), as in SendWr
    return 0;
  }
  if (in.opcode == IBV_WR_BIND_MW) {
    if (const int err = to_bind_mw(in.bind_mw.mw, in.bind_mw.bind_info, bind)) return err;
    out.rkey = in.bind_mw.rkey;
    out.bind_mw = &bind;
    return 0;
  }
  out.sg_list = abi::as_core(in.sg_list, static_cast<std::size_t>(in.num_sge));
  if (in.opcode == IBV_WR_SEND_WITH_IMM || in.opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
    out.imm_data = ntohl(in.imm_data);
  }
  if (in.opcode == IBV_WR_SEND_WITH_INV) out.imm_data = in.invalidate_rkey;  // host order
  if (q.qp_base.qp_type == IBV_QPT_UD) {
    if (in.wr.ud.ah != nullptr) {
      if (check(in.wr.ud.ah, Kind::ah) != 0) return EINVAL;
      out.ah = DAh::from(in.wr.ud.ah)->impl.get();
    }
    out.remote_qpn = in.wr.ud.remote_qpn;
    out.remote_qkey = in.wr.ud.remote_qkey;
  } else if (in.opcode == IBV_WR_ATOMIC_CMP_AND_SWP || in.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
    out.remote_addr = in.wr.atomic.remote_addr;
    out.rkey = in.wr.atomic.rkey;
    out.compare_add = in.wr.atomic.compare_add;
    out.swap = in.wr.atomic.swap;
  } else {
    out.remote_addr = in.wr.rdma.remote_addr;
    out.rkey = in.wr.rdma.rkey;
  }
  return 0;
}

// Posts a list in batches of up to kWrs WRs and kSges SGEs (a WR with more SGEs than that, far
// beyond any device's max_sge, goes alone, so the simulator still names the error). The SGEs
// are not copied: the core WRs point at the program's sg_list arrays, which the simulator copies
// when it takes the WR. `translate(wr, core, i)` fills batch entry i from the stack array. On
// failure *bad is the first WR not posted.
constexpr std::size_t kPostBatch = DQp::kPostBatch;

template <class Wr, class Core, class Translate, class Post>
int post_list(Wr* wr, Wr** bad, Translate translate, Post post) {
  constexpr std::size_t kWrs = kPostBatch;
  constexpr std::size_t kSges = 64;
  Core batch[kWrs];
  Wr* src[kWrs];
  while (wr != nullptr) {
    std::size_t n = 0;
    std::size_t used = 0;  // SGEs in the batch
    int err = 0;
    for (; wr != nullptr && n < kWrs; wr = wr->next) {
      if (wr->num_sge < 0 || (wr->num_sge > 0 && wr->sg_list == nullptr)) {
        err = EINVAL;
        break;
      }
      const auto k = static_cast<std::size_t>(wr->num_sge);
      const bool alone = used + k > kSges;
      if (alone && n > 0) break;  // post what we have, then this one
      if ((err = translate(*wr, batch[n], n)) != 0) break;
      src[n++] = wr;
      used += k;
      if (alone) {
        wr = wr->next;
        break;
      }
    }
    if (n > 0) {
      const PostResult r = post(std::span<const Core>(batch, n));
      if (r.err != 0) {
        *bad = src[r.posted];
        return r.err;
      }
    }
    if (err != 0) {
      *bad = wr;
      return err;
    }
  }
  return 0;
}

// The data path's checks of the QP, SRQ (and AH): EINVAL, *bad_wr the first WR, for one that is
// not the object under its handle (no kernel is asked there; mlx5 and rxe would read their
// provider's data past the struct).
int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) noexcept {
  ibv_send_wr* ignored = nullptr;
  if (bad == nullptr) [[unlikely]] bad = &ignored;
  try {
    auto held = lock();
    if (held.refused() || check(qp, Kind::qp) != 0) [[unlikely]] {
      *bad = wr;
      return held.refused() ? EDEADLK : EINVAL;
    }
    DQp* q = DQp::from(qp);
    int in_errno = 0;  // a refusal the provider got from a system call (rxe's doorbell)
    const int err = post_list<ibv_send_wr, SendWr>(
        wr, bad,
        [q](const ibv_send_wr& in, SendWr& out, std::size_t i) {
          return to_send_wr(*q, in, out, q->post_binds[i]);
        },
        [q, &in_errno](std::span<const SendWr> b) {
          const PostResult r = q->impl->post_send(b);
          if (sim::post_error_in_errno(r)) in_errno = r.err;
          return r;
        });
    settle();
    if (in_errno != 0) errno = in_errno;
    return err;
  } catch (...) {
    *bad = wr;
    return errno_of_current_exception("ibv_post_send");
  }
}

int to_recv_wr(const ibv_recv_wr& in, RecvWr& out, std::size_t) noexcept {
  out.wr_id = in.wr_id;
  out.sg_list = abi::as_core(in.sg_list, static_cast<std::size_t>(in.num_sge));
  return 0;
}

int post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) noexcept {
  ibv_recv_wr* ignored = nullptr;
  if (bad == nullptr) [[unlikely]] bad = &ignored;
  try {
    auto held = lock();
    if (held.refused() || check(qp, Kind::qp) != 0) [[unlikely]] {
      *bad = wr;
      return held.refused() ? EDEADLK : EINVAL;
    }
    DQp* q = DQp::from(qp);
    const int err = post_list<ibv_recv_wr, RecvWr>(
        wr, bad, to_recv_wr, [q](std::span<const RecvWr> b) { return q->impl->post_recv(b); });
    settle();
    return err;
  } catch (...) {
    *bad = wr;
    return errno_of_current_exception("ibv_post_recv");
  }
}

int post_srq_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad) noexcept {
  ibv_recv_wr* ignored = nullptr;
  if (bad == nullptr) [[unlikely]] bad = &ignored;
  try {
    auto held = lock();
    if (held.refused() || check(srq, Kind::srq) != 0) [[unlikely]] {
      *bad = wr;
      return held.refused() ? EDEADLK : EINVAL;
    }
    DSrq* s = DSrq::from(srq);
    const int err = post_list<ibv_recv_wr, RecvWr>(
        wr, bad, to_recv_wr, [s](std::span<const RecvWr> b) { return s->impl->post_recv(b); });
    settle();
    return err;
  } catch (...) {
    *bad = wr;
    return errno_of_current_exception("ibv_post_srq_recv");
  }
}

// ---------------------------------------------------------------------------------------------
// The ibv_wr_* builder. Each call appends to or edits the last work request of the batch; the
// first invalid call is remembered and wr_complete returns it, posting nothing.

DQp& bq(ibv_qp_ex* qp) noexcept { return *DQp::from(qp); }

void wr_start(ibv_qp_ex* qp) noexcept {
  DQp& q = bq(qp);
  q.batch.clear();
  q.sges.clear();
  q.inline_bytes.clear();
  q.batch_error = 0;
  q.in_batch = true;
}

void add_wr(ibv_qp_ex* qp, WrOpcode op, std::uint64_t need) noexcept {
  DQp& q = bq(qp);
  if (!q.in_batch || (q.send_ops & need) == 0) {
    if (q.batch_error == 0) q.batch_error = EINVAL;
    return;
  }
  try {
    DQp::Pending p;
    p.wr.wr_id = qp->wr_id;
    p.wr.opcode = op;
    p.wr.flags = static_cast<SendFlags>(qp->wr_flags & kSendFlags);
    p.sge_begin = q.sges.size();
    q.batch.push_back(p);
  } catch (...) {
    if (q.batch_error == 0) q.batch_error = ENOMEM;
  }
}

SendWr* last(ibv_qp_ex* qp) noexcept {
  DQp& q = bq(qp);
  if (q.batch.empty() || q.batch_error != 0) {
    if (q.batch_error == 0) q.batch_error = EINVAL;
    return nullptr;
  }
  return &q.batch.back().wr;
}

void wr_rdma_write(ibv_qp_ex* qp, std::uint32_t rkey, std::uint64_t addr) noexcept {
  add_wr(qp, WrOpcode::rdma_write, IBV_QP_EX_WITH_RDMA_WRITE);
  if (SendWr* w = last(qp)) {
    w->rkey = rkey;
    w->remote_addr = addr;
  }
}

void wr_rdma_write_imm(ibv_qp_ex* qp, std::uint32_t rkey, std::uint64_t addr, __be32 imm) noexcept {
  add_wr(qp, WrOpcode::rdma_write_with_imm, IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM);
  if (SendWr* w = last(qp)) {
    w->rkey = rkey;
    w->remote_addr = addr;
    w->imm_data = ntohl(imm);
  }
}

void wr_rdma_read(ibv_qp_ex* qp, std::uint32_t rkey, std::uint64_t addr) noexcept {
  add_wr(qp, WrOpcode::rdma_read, IBV_QP_EX_WITH_RDMA_READ);
  if (SendWr* w = last(qp)) {
    w->rkey = rkey;
    w->remote_addr = addr;
  }
}

void wr_send(ibv_qp_ex* qp) noexcept { add_wr(qp, WrOpcode::send, IBV_QP_EX_WITH_SEND); }

void wr_send_imm(ibv_qp_ex* qp, __be32 imm) noexcept {
  add_wr(qp, WrOpcode::send_with_imm, IBV_QP_EX_WITH_SEND_WITH_IMM);
  if (SendWr* w = last(qp)) w->imm_data = ntohl(imm);
}

void wr_atomic_cmp_swp(ibv_qp_ex* qp, std::uint32_t rkey, std::uint64_t addr, std::uint64_t compare,
                       std::uint64_t swap) noexcept {
  add_wr(qp, WrOpcode::atomic_cmp_and_swp, IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP);
  if (SendWr* w = last(qp)) {
    w->rkey = rkey;
    w->remote_addr = addr;
    w->compare_add = compare;
    w->swap = swap;
  }
}

void wr_atomic_fetch_add(ibv_qp_ex* qp, std::uint32_t rkey, std::uint64_t addr,
                         std::uint64_t add) noexcept {
  add_wr(qp, WrOpcode::atomic_fetch_and_add, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD);
  if (SendWr* w = last(qp)) {
    w->rkey = rkey;
    w->remote_addr = addr;
    w->compare_add = add;
  }
}

// Type 2 windows (mlx5 builds every wr_bind_mw as a type 2 bind too): `rkey` becomes the
// window's key once the bind executes.
void wr_bind_mw(ibv_qp_ex* qp, ibv_mw* mw, std::uint32_t rkey,
                const ibv_mw_bind_info* info) noexcept {
  add_wr(qp, WrOpcode::bind_mw, IBV_QP_EX_WITH_BIND_MW);
  DQp& q = bq(qp);
  if (SendWr* w = last(qp)) {
    if (info == nullptr) {
      q.batch_error = EINVAL;
      return;
    }
    if (const int err = to_bind_mw(mw, *info, q.batch.back().bind)) {
      q.batch_error = err;
      return;
    }
    w->rkey = rkey;
  }
}

void wr_local_inv(ibv_qp_ex* qp, std::uint32_t invalidate_rkey) noexcept {
  add_wr(qp, WrOpcode::local_inv, IBV_QP_EX_WITH_LOCAL_INV);
  if (SendWr* w = last(qp)) w->imm_data = invalidate_rkey;
}

void wr_send_inv(ibv_qp_ex* qp, std::uint32_t invalidate_rkey) noexcept {
  add_wr(qp, WrOpcode::send_with_inv, IBV_QP_EX_WITH_SEND_WITH_INV);
  if (SendWr* w = last(qp)) w->imm_data = invalidate_rkey;
}

void wr_set_ud_addr(ibv_qp_ex* qp, ibv_ah* ah, std::uint32_t remote_qpn,
                    std::uint32_t remote_qkey) noexcept {
  if (SendWr* w = last(qp)) {
    w->ah = ah != nullptr ? DAh::from(ah)->impl.get() : nullptr;
    w->remote_qpn = remote_qpn;
    w->remote_qkey = remote_qkey;
  }
}

// The errno the ibv_wr_* builder remembers for a work request past the QP's limits (more
// SGEs than max_send_sge, more inline data than max_inline_data), as the profile says.
int builder_limit_errno() noexcept {
  const sim::World* w = global().world.get();
  return w != nullptr ? sim::dropin_traits(*w).builder_limit_errno : ENOMEM;
}

// The count is checked before the list is read: a count past the QP's max_send_sge (however
// large) is remembered for wr_complete, as providers do, and no entry of the list is touched.
void set_sges(ibv_qp_ex* qp, std::size_t n, const ibv_sge* list) noexcept {
  DQp& q = bq(qp);
  if (last(qp) == nullptr) return;
  if (n > q.max_send_sge) {
    q.batch_error = builder_limit_errno();
    return;
  }
  try {
    DQp::Pending& p = q.batch.back();
    p.sge_begin = q.sges.size();
    p.sge_count = n;
    p.is_inline = false;
    const std::span<const Sge> sges = abi::as_core(list, n);
    q.sges.insert(q.sges.end(), sges.begin(), sges.end());
  } catch (...) {
    q.batch_error = ENOMEM;
  }
}

void wr_set_sge(ibv_qp_ex* qp, std::uint32_t lkey, std::uint64_t addr, std::uint32_t length) noexcept {
  const ibv_sge s{addr, length, lkey};
  set_sges(qp, 1, &s);
}

void wr_set_sge_list(ibv_qp_ex* qp, size_t n, const ibv_sge* list) noexcept { set_sges(qp, n, list); }

// Inline data is copied now, as providers copy it into the WQE: the buffer may be reused at once.
// The total is summed in 64 bits and checked against max_inline_data before anything is copied
// (a sum past 4 GiB must not wrap into a small one): past it, the builder's limit errno.
void set_inline(ibv_qp_ex* qp, std::size_t n, const ibv_data_buf* bufs) noexcept {
  DQp& q = bq(qp);
  if (last(qp) == nullptr) return;
  std::size_t total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (bufs[i].length > q.max_inline_data - total) {
      q.batch_error = builder_limit_errno();
      return;
    }
    total += bufs[i].length;
  }
  try {
    DQp::Pending& p = q.batch.back();
    p.is_inline = true;
    p.inline_begin = q.inline_bytes.size();
    p.inline_len = total;
    for (std::size_t i = 0; i < n; ++i) {
      const auto* b = static_cast<const std::uint8_t*>(bufs[i].addr);
      q.inline_bytes.insert(q.inline_bytes.end(), b, b + bufs[i].length);
    }
    p.wr.flags |= SendFlags::inline_data;
  } catch (...) {
    q.batch_error = ENOMEM;
  }
}

void wr_set_inline_data(ibv_qp_ex* qp, void* addr, size_t length) noexcept {
  const ibv_data_buf b{addr, length};
  set_inline(qp, 1, &b);
}

void wr_set_inline_data_list(ibv_qp_ex* qp, size_t n, const ibv_data_buf* bufs) noexcept {
  set_inline(qp, n, bufs);
}

void wr_abort(ibv_qp_ex* qp) noexcept {
  DQp& q = bq(qp);
  q.batch.clear();
  q.in_batch = false;
  q.batch_error = 0;
}

int wr_complete(ibv_qp_ex* qp) noexcept {
  DQp& q = bq(qp);
  if (!q.in_batch) return EINVAL;
  q.in_batch = false;
  if (q.batch_error != 0) {
    const int err = q.batch_error;
    q.batch.clear();
    return err;
  }
  try {
    auto held = lock();
    if (held.refused()) {  // nothing posted, as for any failed wr_complete
      q.batch.clear();
      return EDEADLK;
    }
    // The pending WRs point into sges / inline_bytes only now that both have stopped growing.
    q.flat.clear();
    q.inline_sges.assign(q.batch.size(), Sge{});
    for (std::size_t i = 0; i < q.batch.size(); ++i) {
      DQp::Pending& p = q.batch[i];
      if (p.is_inline) {
        q.inline_sges[i] = {reinterpret_cast<std::uint64_t>(q.inline_bytes.data() + p.inline_begin),
                            static_cast<std::uint32_t>(p.inline_len), 0};
        p.wr.sg_list = std::span<const Sge>(&q.inline_sges[i], p.inline_len > 0 ? 1 : 0);
      } else {
        p.wr.sg_list = std::span<const Sge>(q.sges.data() + p.sge_begin, p.sge_count);
      }
      if (p.wr.opcode == WrOpcode::bind_mw) p.wr.bind_mw = &p.bind;
      q.flat.push_back(p.wr);
    }
    // All of the batch or none of it, as rxe and mlx5, whose builders check each WR as it is
    // built (a full send queue: ENOSPC on rxe, ENOMEM on mlx5).
    PostResult r = sim::check_post_send(*q.impl, q.flat);
    if (r.err == ENOMEM) r.err = builder_limit_errno();
    if (r.err == 0) r = q.impl->post_send(q.flat);
    q.batch.clear();
    settle();
    if (sim::post_error_in_errno(r)) errno = r.err;  // rxe's doorbell, as in post_send
    return r.err;
  } catch (...) {
    q.batch.clear();
    return errno_of_current_exception("ibv_wr_complete");
  }
}

void fill_wr_ops(DQp& q) noexcept {
  q.wr_start = wr_start;
  q.wr_complete = wr_complete;
  q.wr_abort = wr_abort;
  q.wr_rdma_write = wr_rdma_write;
  q.wr_rdma_write_imm = wr_rdma_write_imm;
  q.wr_rdma_read = wr_rdma_read;
  q.wr_send = wr_send;
  q.wr_send_imm = wr_send_imm;
  q.wr_atomic_cmp_swp = wr_atomic_cmp_swp;
  q.wr_atomic_fetch_add = wr_atomic_fetch_add;
  q.wr_bind_mw = wr_bind_mw;
  q.wr_local_inv = wr_local_inv;
  q.wr_send_inv = wr_send_inv;
  q.wr_set_ud_addr = wr_set_ud_addr;
  q.wr_set_sge = wr_set_sge;
  q.wr_set_sge_list = wr_set_sge_list;
  q.wr_set_inline_data = wr_set_inline_data;
  q.wr_set_inline_data_list = wr_set_inline_data_list;
}

QpType qp_type_of(ibv_qp_type t, int& err) noexcept {
  switch (t) {
    case IBV_QPT_RC: return QpType::rc;
    case IBV_QPT_UC: return QpType::uc;
    case IBV_QPT_UD: return QpType::ud;
    default: err = EOPNOTSUPP; return QpType::rc;  // RAW_PACKET, XRC, driver QPs
  }
}

}  // namespace

namespace verbsim::dropin {

int qp_post_send_op(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) noexcept {
  return post_send(qp, wr, bad);
}
int qp_post_recv_op(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) noexcept {
  return post_recv(qp, wr, bad);
}
int srq_post_recv_op(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad) noexcept {
  return post_srq_recv(srq, wr, bad);
}

ibv_qp* make_qp(ibv_context* context, ibv_qp_init_attr_ex& attr) {
  constexpr std::uint32_t kKnownMask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS |
                                       IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  if (const int err = check_context(context)) return fail_null<ibv_qp>(err);
  if ((attr.comp_mask & IBV_QP_INIT_ATTR_PD) == 0 || attr.pd == nullptr) {
    return fail_null<ibv_qp>(EINVAL);
  }
  // The PD, CQs and SRQ as the kernel's create_qp method looks them up (ENOENT, or EINVAL for a
  // handle of another kind); objects of another context are not found either.
  if (const int err = check(attr.pd, Kind::pd)) return fail_null<ibv_qp>(err);
  if (attr.pd->context != context) return fail_null<ibv_qp>(ENOENT);
  if ((attr.comp_mask & ~kKnownMask) != 0) return fail_null<ibv_qp>(EOPNOTSUPP);
  if ((attr.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) != 0 && attr.create_flags != 0) {
    return fail_null<ibv_qp>(EOPNOTSUPP);
  }
  const bool extended = (attr.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) != 0;
  if (extended && (attr.send_ops_flags & ~kSupportedSendOps) != 0) {
    return fail_null<ibv_qp>(EOPNOTSUPP);
  }
  if (extended && (attr.send_ops_flags & kWindowSendOps) != 0 &&
      !DContext::from(context)->impl->query_device().mw_type2) {
    return fail_null<ibv_qp>(EOPNOTSUPP);
  }
  int err = 0;
  QpInitAttr init;
  init.type = qp_type_of(attr.qp_type, err);
  if (err != 0) return fail_null<ibv_qp>(err);
  if (attr.send_cq == nullptr || attr.recv_cq == nullptr) return fail_null<ibv_qp>(EINVAL);
  for (const ibv_cq* cq : {attr.send_cq, attr.recv_cq}) {
    if (const int e = check(cq, Kind::cq)) return fail_null<ibv_qp>(e);
    if (cq->context != context) return fail_null<ibv_qp>(ENOENT);
  }
  if (attr.srq != nullptr) {
    if (const int e = check(attr.srq, Kind::srq)) return fail_null<ibv_qp>(e);
    if (attr.srq->context != context) return fail_null<ibv_qp>(ENOENT);
  }
  init.send_cq = DCq::from(attr.send_cq)->impl.get();
  init.recv_cq = DCq::from(attr.recv_cq)->impl.get();
  init.srq = attr.srq != nullptr ? DSrq::from(attr.srq)->impl.get() : nullptr;
  init.cap = abi::from_ibv(attr.cap);
  init.sq_sig_all = attr.sq_sig_all != 0;

  auto q = std::make_unique<DQp>();
  q->impl = DPd::from(attr.pd)->real().create_qp(init);
  attr.cap = abi::to_ibv(q->impl->cap());
  q->max_send_sge = attr.cap.max_send_sge;
  q->max_inline_data = attr.cap.max_inline_data;
  ibv_qp& b = q->qp_base;
  b.context = context;
  b.qp_context = attr.qp_context;
  b.pd = attr.pd;
  b.send_cq = attr.send_cq;
  b.recv_cq = attr.recv_cq;
  b.srq = attr.srq;
  b.handle = add_handle(q.get(), context, Kind::qp);
  b.qp_num = q->impl->qp_num();
  b.state = IBV_QPS_RESET;
  b.qp_type = attr.qp_type;
  init_sync(b.mutex, b.cond);
  b.events_completed = 0;
  q->extended = extended;
  q->send_ops = extended ? attr.send_ops_flags : 0;
  q->comp_mask = 0;
  if (extended) fill_wr_ops(*q);
  q->sq_sig_all = init.sq_sig_all;
  remember(q->impl.get(), q.get());
  return q.release()->ibv();
}

}  // namespace verbsim::dropin

extern "C" {

ibv_qp* ibv_create_qp_1_1(ibv_pd* pd, ibv_qp_init_attr* init) {
  return with_null<ibv_qp>("ibv_create_qp", [&]() -> ibv_qp* {
    if (pd == nullptr || init == nullptr) return fail_null<ibv_qp>(EINVAL);
    ibv_qp_init_attr_ex ex{};
    ex.qp_context = init->qp_context;
    ex.send_cq = init->send_cq;
    ex.recv_cq = init->recv_cq;
    ex.srq = init->srq;
    ex.cap = init->cap;
    ex.qp_type = init->qp_type;
    ex.sq_sig_all = init->sq_sig_all;
    ex.comp_mask = IBV_QP_INIT_ATTR_PD;
    ex.pd = pd;
    ibv_qp* qp = make_qp(pd->context, ex);
    if (qp != nullptr) init->cap = ex.cap;
    return qp;
  });
}
VERBSIM_DEFAULT_1_1(ibv_create_qp);
VERBSIM_SAME_TYPE(ibv_create_qp);

ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp* qp) {
  auto held = lock();
  if (held.refused()) return fail_null<ibv_qp_ex>(EDEADLK);
  if (check(qp, Kind::qp) != 0) return nullptr;
  DQp* q = DQp::from(qp);
  return q->extended ? q : nullptr;
}

// 0, or EINVAL for a transition the QP state table does not allow or a mask with missing or
// disallowed attributes (the QP is then unchanged); EOPNOTSUPP for unknown mask bits.
int ibv_modify_qp_1_1(ibv_qp* qp, ibv_qp_attr* attr, int mask) {
  return with_errno("ibv_modify_qp", [&] {
    // Bits past IBV_QP_DEST_QPN (IB_QP_ATTR_STANDARD_BITS) are refused before the QP is looked
    // up, as uverbs' modify_qp commands do.
    constexpr int kStandardBits = (1 << 21) - 1;
    if ((mask & ~kStandardBits) != 0) return EOPNOTSUPP;
    if (const int err = as_write_cmd(check(qp, Kind::qp))) return err;
    DQp* q = DQp::from(qp);
    // Only the masked fields are read (libibverbs' copy_modify_qp_fields): no mask, no attr
    // needed; a mask without attributes is EINVAL here (libibverbs would dereference NULL).
    if (attr == nullptr && mask != 0) return EINVAL;
    q->impl->modify(attr != nullptr ? abi::from_ibv(*attr) : QpAttr{},
                    static_cast<QpAttrMask>(mask));
    if (mask & IBV_QP_STATE) qp->state = attr->qp_state;
    settle();
    return 0;
  });
}
VERBSIM_DEFAULT_1_1(ibv_modify_qp);
VERBSIM_SAME_TYPE(ibv_modify_qp);

int ibv_query_qp_1_1(ibv_qp* qp, ibv_qp_attr* attr, int mask, ibv_qp_init_attr* init) {
  return with_errno("ibv_query_qp", [&] {
    if (const int err = as_write_cmd(check(qp, Kind::qp))) return err;
    if (attr == nullptr) return EINVAL;
    DQp* q = DQp::from(qp);
    const QpAttr a = q->impl->query(static_cast<QpAttrMask>(mask));
    *attr = abi::to_ibv(a);
    attr->qp_access_flags = abi::to_ibv(a.qp_access_flags);
    if (init != nullptr) {
      *init = {};
      init->qp_context = qp->qp_context;
      init->send_cq = qp->send_cq;
      init->recv_cq = qp->recv_cq;
      init->srq = qp->srq;
      init->cap = attr->cap;
      init->qp_type = qp->qp_type;
      init->sq_sig_all = q->sq_sig_all ? 1 : 0;
    }
    qp->state = attr->qp_state;
    return 0;
  });
}
VERBSIM_DEFAULT_1_1(ibv_query_qp);
VERBSIM_SAME_TYPE(ibv_query_qp);

// 0, or an errno.
int ibv_destroy_qp_1_1(ibv_qp* qp) {
  return with_errno("ibv_destroy_qp", [&] {
    if (const int err = check(qp, Kind::qp)) return err;
    DQp* q = DQp::from(qp);
    q->impl->destroy();
    drop_handle(qp->handle);
    forget(q->impl.get());
    destroy_sync(qp->mutex, qp->cond);
    delete q;
    return 0;
  });
}
VERBSIM_DEFAULT_1_1(ibv_destroy_qp);
VERBSIM_SAME_TYPE(ibv_destroy_qp);

// The simulator delivers every message whole and in order: 1.
int ibv_query_qp_data_in_order(ibv_qp*, ibv_wr_opcode, std::uint32_t) { return 1; }

// Enhanced connection establishment is vendor specific: none here.
int ibv_set_ece(ibv_qp*, ibv_ece*) { return EOPNOTSUPP; }
int ibv_query_ece(ibv_qp*, ibv_ece*) { return EOPNOTSUPP; }

}  // extern "C"
