// Memory windows: allocation, binding (QueuePair::bind_mw for type 1, BIND_MW for both types),
// invalidation (LOCAL_INV, SEND_WITH_INV, deallocation) and the responder's check of a
// window's rkey. The rules are rxe's (drivers/infiniband/sw/rxe/rxe_mw.c), which follow the
// IBA's type 1 and type 2B windows.
#include <cerrno>
#include <cstdio>
#include <string>

#include "transport/qp.hpp"
#include "verbsim/error.hpp"

namespace verbsim::sim {

namespace {

constexpr Access kWindowAccess = Access::local_write | Access::remote_read |
                                 Access::remote_write | Access::remote_atomic | Access::mw_bind |
                                 Access::zero_based;

// Forgets what `mw` is bound to.
void unbind(MwCore& mw) noexcept {
  if (mw.mr_key != 0) {
    if (MrCore* mr = mw.dev->mr_of(mw.mr_key)) --mr->windows;
  }
  mw.mr_key = 0;
  mw.addr = 0;
  mw.length = 0;
  mw.access = Access::none;
  mw.qpn = 0;
  mw.bound = false;
}

}  // namespace

bool invalidate_window(DevCore& dev, std::uint32_t key) noexcept {
  MwCore* mw = dev.window_of(key);
  // A type 1 window is invalidated by binding it with length 0, never by a key (o10-37.2.26);
  // an MR's key cannot be invalidated either (rxe invalidates only fast-registration MRs).
  if (mw == nullptr || mw->type != MwType::type2 || !mw->bound) return false;
  unbind(*mw);
  return true;
}

// ---------------------------------------------------------------------------------------------
// Allocation

std::unique_ptr<MemoryWindow> SimPd::alloc_mw(MwType type) {
  if (type != MwType::type1 && type != MwType::type2) {
    throw_verb_error("ibv_alloc_mw", EINVAL, "type " + std::to_string(static_cast<int>(type)));
  }
  DevCore& dev = *core_->ctx->dev;
  const std::uint32_t max_mw = core_->ctx->world->traits().limits.max_mw;
  if (dev.live_mws >= static_cast<int>(max_mw) || dev.next_mw_index > kMaxMwIndex) {
    throw_verb_error("ibv_alloc_mw", ENOMEM, "max_mw windows already allocated");
  }
  MwCore mw;
  mw.pd = core_;
  mw.dev = &dev;
  mw.type = type;
  const auto key_byte = static_cast<std::uint32_t>(core_->ctx->world->rng().next() & 0xff);
  mw.key = (dev.next_mw_index++ << 8) | key_byte;
  return std::make_unique<SimMw>(std::move(mw));
}

SimMw::SimMw(MwCore core) : core_(std::move(core)), rkey_(core_.key) {
  ++core_.pd->users;
  ++core_.dev->live_mws;
  core_.dev->mws.insert(core_.key >> 8, &core_);
}

SimMw::~SimMw() {
  if (!destroyed_) destroy();
}

// Deallocating a window invalidates it: requests naming its key fail from now on.
void SimMw::destroy() {
  if (destroyed_) return;
  unbind(core_);
  core_.dev->mws.erase(core_.key >> 8);
  --core_.dev->live_mws;
  --core_.pd->users;
  destroyed_ = true;
}

// ---------------------------------------------------------------------------------------------
// Posting

PostResult SimQp::bind_mw(MemoryWindow& window, const MwBind& bind) noexcept {
  // libibverbs' ibv_bind_mw checks these before it calls the provider.
  auto* mw = dynamic_cast<SimMw*>(&window);
  if (mw == nullptr || mw->core().dev != dev_) {
    return {0, EINVAL, "memory window of another device"};
  }
  if (mw->type() != MwType::type1) return {0, EINVAL, "ibv_bind_mw binds type 1 windows only"};
  const MwBindInfo& info = bind.info;
  if (info.mr == nullptr && (info.addr != 0 || info.length != 0)) {
    return {0, EINVAL, "a bind without an MR must have no address and length 0"};
  }
  if (info.mr != nullptr) {
    const auto* mr = dynamic_cast<const SimMr*>(info.mr);
    if (mr == nullptr || const_cast<SimMr*>(mr)->core().pd != mw->core().pd) {
      return {0, EPERM, "the MR and the window belong to different PDs"};
    }
  }
  // The providers' own check (rxe's and mlx5's bind_mw), o10-36.2.2.
  if (any(info.access, Access::zero_based)) {
    return {0, EINVAL, "a type 1 window cannot be zero-based"};
  }
  const BindMwWr what{mw, info};
  SendWr wr;
  wr.wr_id = bind.wr_id;
  wr.opcode = WrOpcode::bind_mw;
  wr.flags = bind.flags;
  wr.rkey = inc_rkey(mw->rkey());
  wr.bind_mw = &what;
  const PostResult r = post_send(std::span(&wr, 1));
  if (r) mw->set_rkey(wr.rkey);  // as the provider does: the program undoes it on an error
  return r;
}

const char* SimQp::window_op_refusal(const SendWr& wr) const noexcept {
  if (wr.opcode != WrOpcode::bind_mw) return nullptr;  // LOCAL_INV, SEND_WITH_INV: any key
  // rxe's provider refuses it on other QPs (its requester would find no operation for it).
  if (type_ != QpType::rc && type_ != QpType::uc) return "BIND_MW on a UD QP";
  if (!wr.sg_list.empty()) return "BIND_MW takes no SGEs";
  if (wr.bind_mw == nullptr || wr.bind_mw->mw == nullptr) return "BIND_MW without a window";
  auto* mw = dynamic_cast<SimMw*>(wr.bind_mw->mw);
  if (mw == nullptr || mw->core().dev != dev_) return "memory window of another device";
  const MwBindInfo& info = wr.bind_mw->info;
  if (info.mr != nullptr && dynamic_cast<const SimMr*>(info.mr) == nullptr) {
    return "MR of another backend";
  }
  if (info.length != 0 && info.mr == nullptr) return "BIND_MW without an MR";
  return nullptr;
}

// BIND_MW (RC and UC QPs only: window_op_refusal): the window's range and key in the WQE's RDMA
// fields, the rest in the place of an atomic's operands.
void SimQp::enqueue_bind(const SendWr& wr, std::uint32_t i) noexcept {
  SendWqe& w = sq_at(i);
  const MwBindInfo& info = wr.bind_mw->info;
  auto* mw = static_cast<SimMw*>(wr.bind_mw->mw);
  w.remote_addr = info.addr;
  w.imm = info.mr != nullptr ? info.mr->lkey() : 0;
  sq_bind(i) = BindOperands{info.length, mw->rkey(), info.access};
  // A type 2 window's key is the one the program gives (SendWr::rkey); a type 1 window's
  // handle moved on in bind_mw.
  if (mw->type() == MwType::type2) mw->set_rkey(wr.rkey);
}

// ---------------------------------------------------------------------------------------------
// Running a bind or a local invalidation (transmit, in send-queue order)

WcStatus SimQp::run_local_op(std::uint32_t index) noexcept {
  const SendWqe& wq = sq_at(index);
  if (wq.opcode == WrOpcode::local_inv) {
    return invalidate(wq.imm, "LOCAL_INV") ? WcStatus::success : WcStatus::loc_qp_op_err;
  }
  const BindOperands& b = sq_bind(index);
  MwCore* mw = dev_->window_of(b.mw_key);
  if (mw == nullptr) return WcStatus::mw_bind_err;  // deallocated, or a stale key
  MrCore* mr = nullptr;
  if (b.length != 0) {
    mr = dev_->mr_of(wq.imm);
    if (mr == nullptr) return WcStatus::mw_bind_err;
  }
  if (mw->type == MwType::type2) {
    // o10-37.2.30, C10-72, o10-37.2.40: free, bound by a QP of its PD, to a non-empty range.
    if (mw->bound || mw->pd.get() != pd_.get() || mr == nullptr) return WcStatus::mw_bind_err;
  }
  if (any(b.access, ~kWindowAccess)) return WcStatus::mw_bind_err;
  // o10-36.2.2: type 1 windows are never zero-based. QueuePair::bind_mw refuses it at post, as
  // the providers do; a BIND_MW work request naming a type 1 window gets here, as to rxe's kernel.
  if (mw->type == MwType::type1 && any(b.access, Access::zero_based)) return WcStatus::mw_bind_err;
  if (mr != nullptr && !bind_fits(*mr, wq.remote_addr, b.length, b.access)) {
    return WcStatus::mw_bind_err;
  }
  unbind(*mw);
  mw->key = (mw->key & 0xffffff00u) | (wq.rkey & 0xffu);
  if (mr != nullptr) {
    mw->mr_key = mr->key;
    mw->addr = wq.remote_addr;
    mw->length = b.length;
    mw->access = b.access;
    ++mr->windows;
  }
  if (mw->type == MwType::type2) {
    mw->bound = true;
    mw->qpn = qpn_;
  }
  return WcStatus::success;
}

bool SimQp::bind_fits(const MrCore& mr, std::uint64_t addr, std::uint64_t length,
                      Access access) const noexcept {
  // C10-73: the MR allows binds; rxe binds no window to an MR registered zero-based (mlx5's
  // provider refuses such a type 1 bind at post).
  if (!all(mr.access, Access::mw_bind) || any(mr.access, Access::zero_based)) return false;
  // C10-74
  if (any(access, Access::remote_write | Access::remote_atomic) &&
      !any(mr.access, Access::local_write)) {
    return false;
  }
  // C10-75: the window lies in the MR. rxe, which checks requests against the MR's range and
  // not the window's, checks only a zero-based window's length, not where it starts.
  if (any(access, Access::zero_based) && traits().window_range_is_mr) return length <= mr.length;
  return covers(mr, host_address(mr, addr), length, Access::none);
}

bool SimQp::invalidate(std::uint32_t key, const char* what) noexcept {
  if (invalidate_window(*dev_, key)) return true;
  // rxe_invalidate_mw lets a type 2 window that is not bound through, and rxe_do_invalidate_mw
  // then puts its NULL QP: the simulator fails the WR, as the spec says, and tells.
  const MwCore* mw = dev_->window_of(key);
  if (mw != nullptr && mw->type == MwType::type2 && traits().free_type2_invalidate_oopses) {
    std::fprintf(stderr,
                 "verbsim: %s on QP %u names type 2 memory window 0x%x, which is not bound; rxe "
                 "(kernel 6.1) oopses here (rxe_do_invalidate_mw puts the window's NULL QP)\n",
                 what, qpn_, key);
  }
  return false;
}

// ---------------------------------------------------------------------------------------------
// The responder's check

bool SimQp::window_covers(std::uint32_t key, std::uint64_t addr, std::uint64_t len, Access need,
                          std::uint64_t& target) const noexcept {
  const MwCore* mw = dev_->window_of(key);
  if (mw == nullptr || mw->length == 0 || mw->pd.get() != pd_.get()) return false;
  if (mw->type == MwType::type2 && (!mw->bound || mw->qpn != qpn_)) return false;
  if (!all(mw->access, need)) return false;
  // Its MR is gone only if the program dropped the MR's handle with the window bound.
  const MrCore* mr = dev_->mr_of(mw->mr_key);
  if (mr == nullptr) return false;
  // rxe checks the MR's range only (check_rkey adds a zero-based window's start and checks the
  // MR's bounds); the spec, the window's.
  if (!world().traits().window_range_is_mr && !spans(mw->base(), mw->length, addr, len)) {
    return false;
  }
  target = host_address(*mr, addr - mw->base() + mw->addr);
  return covers(*mr, target, len, Access::none);
}

}  // namespace verbsim::sim
