// Test and benchmark support: hosts that keep virtual time moving in small steps.
//
// On the simulator an empty poll runs the world's next instant. A poller spinning while nothing
// else is scheduled therefore jumps straight to the next event, however far away (the next
// message, a 67 ms ACK timer): virtual time spent polling, and an idle period measured in it,
// become meaningless. `spawn_tickers` adds `n` fibers that wake on a fixed grid, out of phase
// (every `tick`, offset by tick/n), so that some event is always due within about tick/n and a
// poll costs at most that much virtual time. They keep to the grid even when they run late, so
// they never bunch up into one instant.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "verbsim/sim/simulation.hpp"

namespace verbsim::testing {

// The tickers run while `*running` is true.
inline void spawn_tickers(sim::Simulation& sim, std::chrono::nanoseconds tick, const bool* running,
                          int n = 8) {
  const auto period = static_cast<std::uint64_t>(tick.count());
  for (int i = 0; i < n; ++i) {
    sim.spawn("tick-" + std::to_string(i), [&sim, period, running, i, n] {
      sim::World& world = sim.world();
      std::uint64_t next = world.now() + period * static_cast<std::uint64_t>(i) / static_cast<std::uint64_t>(n);
      while (*running) {
        const std::uint64_t now = world.now();
        while (next <= now) next += period;
        sim::sleep_for(world, std::chrono::nanoseconds(next - now));
      }
    });
  }
}

}  // namespace verbsim::testing
