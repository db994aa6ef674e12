// Simulator-only verbs (verbsim/sim/extensions.hpp).
#include "verbsim/sim/extensions.hpp"

#include <algorithm>
#include <cerrno>
#include <string>

#include "handles.hpp"

namespace verbsim::sim {

bool set_window_key(MemoryWindow& mw, std::uint32_t rkey) noexcept {
  auto* w = dynamic_cast<SimMw*>(&mw);
  if (w == nullptr) return false;
  w->set_rkey(rkey);
  return true;
}

}  // namespace verbsim::sim
