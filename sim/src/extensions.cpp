// Simulator-only verbs (verbsim/sim/extensions.hpp).
#include "verbsim/sim/extensions.hpp"

#include <algorithm>
#include <cerrno>
#include <string>

#include "handles.hpp"

namespace verbsim::sim {

void rereg_mr(MemoryRegion& mr, const MrChange& change) {
  auto* m = dynamic_cast<SimMr*>(&mr);
  if (m == nullptr) fail("ibv_rereg_mr", EINVAL, "not a memory region of the simulator");
  MrCore& core = m->core();
  if (!core.pd->ctx->world->traits->rereg_mr) {
    fail("ibv_rereg_mr", EOPNOTSUPP, "the rxe profile has no rereg_mr, as rxe");
  }
  // A window bound to it would keep the range it was bound to, which the MR may no longer
  // cover: refused as deregistration is.
  if (core.windows > 0) {
    fail("ibv_rereg_mr", EINVAL, std::to_string(core.windows) + " memory windows are bound to the MR");
  }
  std::shared_ptr<PdCore> pd = core.pd;
  if (change.pd != nullptr) {
    auto* p = dynamic_cast<SimPd*>(change.pd);
    if (p == nullptr || p->core()->ctx->dev != core.dev) {
      fail("ibv_rereg_mr", EINVAL, "the new PD belongs to another device");
    }
    pd = p->core();
  }
  if (change.addr != nullptr || change.length != 0) {
    if (change.addr == nullptr || change.length == 0) {
      fail("ibv_rereg_mr", EINVAL, "null address or empty range");
    }
  }
  const Access access = change.access.value_or(core.access);
  if (any(access, Access::remote_write | Access::remote_atomic) && !any(access, Access::local_write)) {
    fail("ibv_rereg_mr", EINVAL, "REMOTE_WRITE or REMOTE_ATOMIC requires LOCAL_WRITE");
  }
  if (pd != core.pd) {
    --core.pd->users;
    ++pd->users;
    core.pd = std::move(pd);
  }
  if (change.addr != nullptr) {
    core.addr = static_cast<char*>(change.addr);
    core.length = change.length;
  }
  core.access = access;
  mr_changed(*core.dev, core.key);
}

bool set_window_key(MemoryWindow& mw, std::uint32_t rkey) noexcept {
  auto* w = dynamic_cast<SimMw*>(&mw);
  if (w == nullptr) return false;
  w->set_rkey(rkey);
  return true;
}

}  // namespace verbsim::sim
