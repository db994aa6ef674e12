// Memory windows: the ibv_context_ops entries verbs.h's inline ibv_alloc_mw, ibv_dealloc_mw and
// ibv_bind_mw call (libibverbs exports no symbol for them), and the translation of
// ibv_mw_bind_info that ibv_bind_mw, IBV_WR_BIND_MW and ibv_wr_bind_mw share.
#include "objects.hpp"
#include "ops.hpp"
#include "state.hpp"
#include "verbsim/sim/extensions.hpp"

using namespace verbsim;
using namespace verbsim::dropin;

namespace verbsim::dropin {

int to_bind_info(const ibv_mw_bind_info& in, MwBindInfo& out) noexcept {
  // Remote rights, and IBV_ACCESS_ZERO_BASED: a request's address is an offset into the window.
  constexpr unsigned kWindow = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                               IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_ZERO_BASED;
  const unsigned access = in.mw_access_flags;
  // IBV_ACCESS_LOCAL_WRITE and IBV_ACCESS_MW_BIND, which programs pass along (pyverbs does),
  // mean nothing for a window and are ignored, as rxe does (conformance
  // MemoryWindows.Type1WindowAccessWithLocalFlags).
  if ((access & ~(kWindow | IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND)) != 0) return EINVAL;
  if (in.mr == nullptr && (in.addr != 0 || in.length != 0)) return EINVAL;
  if (in.mr != nullptr && check(in.mr, Kind::mr) != 0) return EINVAL;
  out = MwBindInfo{};
  out.mr = in.mr != nullptr ? DMr::from(in.mr)->impl.get() : nullptr;
  out.addr = in.addr;
  out.length = in.length;
  out.access = static_cast<Access>(access & kWindow);
  return 0;
}

int to_bind_mw(ibv_mw* mw, const ibv_mw_bind_info& info, BindMwWr& out) noexcept {
  if (check(mw, Kind::mw) != 0) return EINVAL;
  if (const int err = to_bind_info(info, out.info)) return err;
  out.mw = DMw::from(mw)->impl.get();
  // The bind names the key the program has in mw->rkey, stale or not (rxe refuses a stale one).
  sim::set_window_key(*out.mw, mw->rkey);
  return 0;
}

// ibv_alloc_mw: NULL with errno EINVAL for a type other than 1 and 2, EOPNOTSUPP when the device
// has no windows of that type, ENOMEM past max_mw.
ibv_mw* mw_alloc_op(ibv_pd* pd, ibv_mw_type type) noexcept {
  return with_null<ibv_mw>("ibv_alloc_mw", [&]() -> ibv_mw* {
    if (const int err = as_write_cmd(check(pd, Kind::pd))) return fail_null<ibv_mw>(err);
    MwType t{};
    switch (type) {
      case IBV_MW_TYPE_1: t = MwType::type1; break;
      case IBV_MW_TYPE_2: t = MwType::type2; break;
      default: return fail_null<ibv_mw>(EINVAL);
    }
    auto mw = std::make_unique<DMw>();
    mw->impl = DPd::from(pd)->real().alloc_mw(t);
    mw->context = pd->context;
    mw->pd = pd;
    mw->rkey = mw->impl->rkey();
    mw->type = type;
    mw->handle = add_handle(mw.get(), pd->context, Kind::mw);
    return mw.release();
  });
}

// ibv_dealloc_mw: invalidates the window if bound. 0 or an errno.
int mw_dealloc_op(ibv_mw* mw) noexcept {
  return with_errno("ibv_dealloc_mw", [&] {
    if (const int err = check(mw, Kind::mw)) return err;
    DMw* m = DMw::from(mw);
    m->impl->destroy();
    drop_handle(m->handle);
    delete m;
    return 0;
  });
}

// ibv_bind_mw (verbs.h has already refused a type 2 window, and an MR of another PD): posts the
// bind on the send queue and, once posted, gives mw->rkey the window's next key. 0 or an errno
// (EINVAL for bad bind information or a QP that cannot bind, as ibv_post_send otherwise).
int mw_bind_op(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* bind) noexcept {
  return with_errno<Refresh::no>("ibv_bind_mw", [&] {
    if (check(qp, Kind::qp) != 0 || check(mw, Kind::mw) != 0 || bind == nullptr) return EINVAL;
    if (mw->type != IBV_MW_TYPE_1) return EINVAL;
    MwBind b;
    b.wr_id = bind->wr_id;
    // The flags a bind can carry (ibv_bind_mw(3)); others are ignored, as providers do.
    b.flags = static_cast<SendFlags>(bind->send_flags & (IBV_SEND_FENCE | IBV_SEND_SIGNALED));
    if (const int err = to_bind_info(bind->bind_info, b.info)) return err;
    DMw* m = DMw::from(mw);
    sim::set_window_key(*m->impl, mw->rkey);  // the key this bind names, as in to_bind_mw
    const PostResult r = DQp::from(qp)->impl->bind_mw(*m->impl, b);
    if (r.err == 0) mw->rkey = m->impl->rkey();
    settle();
    return r.err;
  });
}

}  // namespace verbsim::dropin
