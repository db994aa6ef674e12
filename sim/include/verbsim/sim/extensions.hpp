// Verbs of libibverbs that the core API does not have, for resources a sim::World opened. The
// libibverbs drop-in (backends/dropin/) offers them to C programs; they throw VerbError naming
// the verb, like the core verbs.
#pragma once

#include <cstddef>
#include <optional>

#include "verbsim/completion_queue.hpp"
#include "verbsim/memory_window.hpp"
#include "verbsim/memory_region.hpp"
#include "verbsim/protection_domain.hpp"
#include "verbsim/types.hpp"

namespace verbsim::sim {

// What ibv_rereg_mr changes; unset members stay as they are.
struct MrChange {
  ProtectionDomain* pd = nullptr;  // move the region to this PD (same device)
  void* addr = nullptr;            // with length: register this range instead
  std::size_t length = 0;
  std::optional<Access> access;
};

// ibv_rereg_mr: changes a registered region in place; its lkey and rkey stay. Work requests and
// remote peers using the keys see the new PD, range and access from now on. EINVAL for a PD of
// another device, an empty range, or REMOTE_WRITE/REMOTE_ATOMIC without LOCAL_WRITE;
// EOPNOTSUPP on the rxe profile (rxe has no rereg_mr).
void rereg_mr(MemoryRegion& mr, const MrChange& change);

// The key a C program believes a memory window has (its ibv_mw.rkey), which the next bind
// names: the device refuses a bind (MW_BIND_ERR) that names another key than the window's
// current one, as rxe does. The core API keeps it current itself; libibverbs programs keep it
// in ibv_mw.rkey, which a type 2 bind (IBV_WR_BIND_MW) does not update. False for a window
// that is not the simulator's.
bool set_window_key(MemoryWindow& mw, std::uint32_t rkey) noexcept;

}  // namespace verbsim::sim
