// Several hosts of one program, run the way each backend needs: as fibers of one
// sim::Simulation on the simulator (virtual time, one seeded interleaving), as threads on
// hardware. The host code is the same on both; where it waits, it calls pause() below rather
// than sleeping, so that the simulator's virtual time moves.
//
//   sim::World* world = dynamic_cast<sim::World*>(&backend);  // nullptr on hardware
//   sim::run_hosts(world, {{"server", [&] { serve(); }}, {"client", [&] { ask(); }}});
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace verbsim::sim {

class World;

struct HostBody {
  std::string name;  // names the fiber or thread in reports (a deadlock names blocked fibers)
  std::function<void()> body;
};

struct HostOptions {
  // On the simulator, fibers that wake every `tick` keep virtual time moving in small steps
  // while a host polls (see ticker.hpp), so that time spent polling means what it means on
  // hardware. Zero: none (a spinning poll jumps straight to the next event).
  std::chrono::nanoseconds tick = std::chrono::microseconds(1);
};

// Runs every host to completion. With `world` set: fibers under a sim::Simulation of it (a
// deadlock throws sim::DeadlockError); otherwise one thread per host. The first exception a
// host throws is rethrown here once every host has ended.
void run_hosts(World* world, std::vector<HostBody> hosts, HostOptions options = {});

// Waits `d`, from a host: virtual time with `world` set (blocking this fiber), real time
// otherwise.
void pause(World* world, std::chrono::nanoseconds d);

}  // namespace verbsim::sim
