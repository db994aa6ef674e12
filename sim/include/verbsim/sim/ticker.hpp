// Hosts that keep virtual time moving in small steps, for programs that poll under a
// sim::Simulation and measure time while they do (the hybrid poller's idle period, the share of
// a run spent polling).
//
// On the simulator the world moves one instant once every fiber is blocked or spinning on an
// empty poll. With nothing else scheduled a spinning poller therefore jumps straight to the
// next event however far away it is (the next message, a 67 ms ACK timer), and virtual time
// spent polling means little. spawn_tickers adds
// `n` fibers that wake on a fixed grid, out of phase (every `tick`, offset by tick/n), so that
// some event is always due within about tick/n: a poll then costs at most that much virtual
// time, like the real time a real poll takes. They keep to the grid when they run late, so they
// never bunch up into one instant. They add events, not behaviour: no verbs, no RNG draws.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "verbsim/sim/simulation.hpp"

namespace verbsim::sim {

// The tickers run while `running` is true; set it false when the hosts are done.
inline void spawn_tickers(Simulation& sim, std::chrono::nanoseconds tick, const bool& running,
                          int n = 8) {
  const auto period = static_cast<std::uint64_t>(tick.count() > 0 ? tick.count() : 1);
  const bool* flag = &running;
  for (int i = 0; i < n; ++i) {
    sim.spawn("tick-" + std::to_string(i), [&sim, period, flag, i, n] {
      World& world = sim.world();
      std::uint64_t next =
          world.now() + period * static_cast<std::uint64_t>(i) / static_cast<std::uint64_t>(n);
      while (*flag) {
        const std::uint64_t now = world.now();
        while (next <= now) next += period;
        sleep_for(world, std::chrono::nanoseconds(next - now));
      }
    });
  }
}

}  // namespace verbsim::sim
