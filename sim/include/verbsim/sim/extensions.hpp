// What the libibverbs drop-in (backends/dropin/) needs of the simulator beyond the core API.
#pragma once

#include <cstdint>

#include "verbsim/memory_window.hpp"

namespace verbsim::sim {

// The key a C program believes a memory window has (its ibv_mw.rkey), which the next bind
// names: the device refuses a bind (MW_BIND_ERR) that names another key than the window's
// current one, as rxe does. The core API keeps it current itself; libibverbs programs keep it
// in ibv_mw.rkey, which a type 2 bind (IBV_WR_BIND_MW) does not update. False for a window
// that is not the simulator's.
bool set_window_key(MemoryWindow& mw, std::uint32_t rkey) noexcept;

}  // namespace verbsim::sim
