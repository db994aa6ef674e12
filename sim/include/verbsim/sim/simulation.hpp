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
#include <string_view>
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

// How a Simulation picks the next fiber among those ready. Every mode is deterministic: the
// seed (random, pct) or the choices (replay, exhaustive) fix the interleaving.
//   random      the world's RNG picks among every ready context (the default, unchanged);
//   pct         probabilistic concurrency testing: each fiber gets a random priority drawn from
//               the seed, the highest-priority ready fiber runs, and at `depth - 1` change
//               points drawn over the first `steps` scheduling steps the running fiber drops
//               below all others (finds a bug of depth d with probability >= 1/(n k^(d-1)));
//   replay      takes `choices[i]` at the i-th choice point (a step with more than one fiber
//               ready to work), the first fiber after them;
//   exhaustive  one run of a depth-first enumeration (see explore()): replays `choices`, then
//               takes the first fiber at each later choice point, up to `bound` of them.
// Fibers that polled an empty CQ (spinning) wait in pct, replay and exhaustive until no other
// fiber has work or the world moves; that ordering is not explored (docs/CAMPAIGNS.md).
struct Schedule {
  enum class Mode { random, pct, replay, exhaustive };
  Mode mode = Mode::random;
  int depth = 3;                       // pct: d
  int steps = 64;                      // pct: k, where the change points fall
  int bound = 16;                      // exhaustive: choice points explored
  std::vector<std::uint32_t> choices;  // replay, exhaustive: the prefix to replay

  // "random", "pct", "pct:d=3,k=64", "exhaustive:bound=12", "replay:0,1,1,0". Throws
  // std::invalid_argument naming what is wrong.
  static Schedule parse(std::string_view spec);
  // VERBSIM_SCHEDULE when set and not empty, else `fallback`.
  static Schedule from_env(Schedule fallback);
  static Schedule from_env();
  // The spec parse() reads back.
  std::string to_string() const;
};

// One choice point of a run: the fiber taken (0 = the first ready) of `of` ready to work.
struct Choice {
  std::uint32_t taken = 0;
  std::uint32_t of = 0;
};

// What a run under pct, replay or exhaustive scheduled.
struct ScheduleTrace {
  std::vector<Choice> choices;  // every choice point, in order
  std::uint64_t steps = 0;      // scheduling steps with a fiber ready to work
  bool beyond_bound = false;    // exhaustive: a choice point past `bound` (taken as the first)
};

class Simulation {
 public:
  // Installs the virtual-time scheduler on the calling thread (until destruction), with the
  // schedule VERBSIM_SCHEDULE names (random when unset).
  explicit Simulation(World& world);
  // With `schedule`, whatever VERBSIM_SCHEDULE says.
  Simulation(World& world, Schedule schedule);
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

  const Schedule& schedule() const noexcept;
  // The choices the last run() made (empty under random).
  const ScheduleTrace& trace() const noexcept;
  // The environment that reproduces the last run: `VERBSIM_SEED=7`, plus
  // `VERBSIM_SCHEDULE=pct:d=3,k=64` or `VERBSIM_SCHEDULE=replay:0,1,1` for its choices.
  std::string reproducer() const;

  struct Impl;

 private:
  World& world_;
  std::unique_ptr<Impl> impl_;
};

// Bounded exhaustive exploration: runs `scenario` once per interleaving, depth first. Each run
// replays a prefix of the previous run's choices and takes the next alternative at its last
// choice point that has one; choice points past `bound` take the first fiber. `scenario`
// builds its world (same seed every time), runs a Simulation with the schedule it is given and
// returns its trace(); it fails by throwing. Stops at the first failure or when the tree is
// exhausted, or after `max_runs`.
struct ExploreResult {
  std::uint64_t runs = 0;
  // Every interleaving within the bound ran, and no run had a choice point past it: every
  // interleaving of the scenario (up to the pruning in docs/CAMPAIGNS.md) ran.
  bool complete = false;
  bool failed = false;
  std::string failure;   // what the failing run threw
  Schedule failing;      // replay:<choices> of the failing run
  std::size_t deepest = 0;  // most choice points in one run
};
ExploreResult explore(int bound, const std::function<ScheduleTrace(const Schedule&)>& scenario,
                      std::uint64_t max_runs = 1'000'000);

// A scheduling point for a fiber of a running Simulation: under the random schedule the same
// as boost::this_fiber::yield() (another ready fiber runs); under pct, replay and exhaustive
// the schedule chooses between the caller and every other fiber with work, so the caller may
// go on (a yield of Boost.Fiber always hands over, which hides bugs that need one fiber to take
// several steps in a row). Outside a Simulation: boost::this_fiber::yield().
void yield(World& world);

// Sleeps `d` of virtual time: blocks the calling fiber under a running Simulation, otherwise
// runs the world forward.
void sleep_for(World& world, std::chrono::nanoseconds d);

}  // namespace verbsim::sim
