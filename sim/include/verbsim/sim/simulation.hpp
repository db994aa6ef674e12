// Hosts as fibers: server, client and poller threads of a test run as Boost.Fiber fibers in
// one thread over one World, scheduled by the world's seed and advancing virtual time instead
// of sleeping. Application code stays blocking-style and backend-agnostic: get_cq_event and
// get_async_event block the calling fiber, not the thread, and polling an empty CQ yields; the
// world moves one instant when every fiber is blocked or polling an empty CQ.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "verbsim/sim/world.hpp"

namespace verbsim::sim {

// Every fiber was blocked and the world had nothing left to run, and a fiber did not take
// its EDEADLK for an answer: it kept waiting (run() gave up on it) or never returned.
class DeadlockError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// How Simulation::run() ended when every fiber returned.
struct RunOutcome {
  // Every fiber was blocked once with nothing left to run; their blocked waits returned
  // EDEADLK, and the fibers handled it (returned).
  bool deadlocked = false;
  // What DeadlockError would have said: the blocked fibers, the seed, World::report().
  // Empty unless deadlocked.
  std::string report;
};

class Simulation {
 public:
  // Installs the virtual-time scheduler on the calling thread (until destruction).
  explicit Simulation(World& world);
  ~Simulation();
  Simulation(const Simulation&) = delete;
  Simulation& operator=(const Simulation&) = delete;

  // Starts `body` as a fiber named `name` (for reports); it runs once run() is called.
  void spawn(std::string name, std::function<void()> body);

  // Runs every fiber to completion. Which ready fiber runs next is drawn from the world's
  // RNG, so a seed fixes the interleaving. When every fiber is blocked and no event is pending,
  // blocked waits return EDEADLK; if the fibers then return, run() returns an outcome with
  // `deadlocked` set and the report (the seed, the blocked fibers, World::report()). Throws:
  // the first exception that escaped a fiber (rethrown); DeadlockError with that report if
  // fibers went on waiting after their EDEADLK.
  RunOutcome run();

  World& world() noexcept { return world_; }

  struct Impl;

 private:
  World& world_;
  std::unique_ptr<Impl> impl_;
};

// Sleeps `d` of virtual time: blocks the calling fiber under a running Simulation, otherwise
// runs the world forward.
void sleep_for(World& world, std::chrono::nanoseconds d);

}  // namespace verbsim::sim
