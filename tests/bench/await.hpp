// What verbsim-bench's simulator benchmarks share: waiting for a batch's completions.
#pragma once

#include <cstdint>
#include <span>

#include "verbsim/sim/world.hpp"
#include "verbsim/verbsim.hpp"

namespace verbsim::bench {

// Polls `cq`, up to `Batch` completions at a time, until `n` arrived; false on an error
// completion or when the world has nothing left to run (a batch that can never complete).
template <std::uint32_t Batch>
bool await(sim::World& world, CompletionQueue& cq, std::uint32_t n) {
  WorkCompletion wc[Batch];
  while (n > 0) {
    const PollResult r = cq.poll(std::span(wc, n < Batch ? n : Batch));
    for (std::uint32_t i = 0; i < r.count; ++i) {
      if (wc[i].status != WcStatus::success) return false;
    }
    n -= r.count;
    if (r.count == 0 && world.pending_events() == 0) return false;
  }
  return true;
}

}  // namespace verbsim::bench
