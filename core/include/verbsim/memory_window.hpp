#pragma once

#include <cstdint>

#include "verbsim/resource.hpp"
#include "verbsim/types.hpp"

namespace verbsim {

// A memory window (ibv_alloc_mw): a remote key for part of a memory region, bound and
// invalidated through a send queue (QueuePair::bind_mw for type 1, WrOpcode::bind_mw,
// local_inv and send_with_inv for type 2). Deallocating a window invalidates it.
class MemoryWindow : public Resource {
 public:
  virtual MwType type() const noexcept = 0;
  // The key of the last bind posted through this handle (type 1: QueuePair::bind_mw; type 2:
  // a BIND_MW work request, whose SendWr::rkey it becomes), or the key it was allocated with.
  virtual std::uint32_t rkey() const noexcept = 0;
};

}  // namespace verbsim
