// The simulator backend: a whole RDMA fabric in one object.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "verbsim/backend.hpp"
#include "verbsim/sim/faults.hpp"
#include "verbsim/sim/observe.hpp"
#include "verbsim/sim/port_counters.hpp"
#include "verbsim/sim/profile.hpp"

namespace verbsim::sim {

// Which real stack the simulator imitates where stacks differ (see docs/FIDELITY.md).
enum class Profile : std::uint8_t {
  // Hardware-like and strict (the default): queue depths round up to a power of two, a send
  // slot frees only when its completion is polled, CQ overrun is a CQ error that takes its QPs
  // to ERR, posting sends before RTS is EINVAL.
  strict,
  // Soft-RoCE (rxe) as measured: depths 2^n - 1, slots free on completion, CQ overrun drops
  // completions silently with one CQ_ERR event each, post_recv on an ERR QP never completes.
  rxe,
  // mlx5 where it differs from strict: posting sends before RTS is accepted (the WR waits).
  mlx5,
};

std::string_view to_string(Profile p) noexcept;
// "strict", "rxe" or "mlx5"; throws std::invalid_argument otherwise.
Profile parse_profile(std::string_view name);

// A limit on a run that may make no progress: a forgotten receive with the default
// rnr_retry=7 retries forever. Zero: no limit (the default). Text form (VERBSIM_BUDGET, parse):
// "time=2s events=1000000 stall=10s" (times take ns, us, ms or s); "off" (or "none") is no
// limit.
struct Budget {
  std::uint64_t virtual_ns = 0;  // the run stops before virtual time passes this
  std::uint64_t events = 0;      // the run stops once this many events have run
  // The run stops when this much virtual time passes without progress: no work request posted,
  // completed or discarded, no CM event and no CM message sent. Packets do not count: an RNR or
  // retry loop sends them without end. A long run that keeps progressing is never stopped.
  std::uint64_t stall_ns = 0;
  bool enabled() const noexcept { return virtual_ns != 0 || events != 0 || stall_ns != 0; }
  // Throws std::invalid_argument naming the word that is wrong.
  static Budget parse(std::string_view text);
  std::string to_string() const;  // parse(to_string()) gives the same budget
};

// The world ran out of its Budget. what(): why, what every QP is waiting for (World::waiting()),
// then World::report(). Thrown by what runs the world and may throw: World::step, run_until,
// run_until_idle, blocking waits (get_cq_event, get_async_event, the CM's get_event) and
// Simulation::run. CQ polls and non-blocking waits (noexcept) return ETIMEDOUT instead, and
// the report is written to stderr once. Once exceeded, the world runs no more events.
class BudgetExceeded : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The budget of every world whose Config sets none, unless VERBSIM_BUDGET is set (it wins, and
// VERBSIM_BUDGET=off means no budget at all). None unless the program sets one: the test kit's
// main (verbsim::gtest_main) sets kTestKitBudget. Set it before making worlds.
void set_default_budget(const Budget& b) noexcept;
const Budget& default_budget() noexcept;
// What verbsim::gtest_main sets: a minute of virtual time without progress, far above the
// longest quiet stretch of a working test (the CM's retries wait seconds between messages), and
// reached within a second or so of wall time by a run that livelocks (an RNR loop).
inline constexpr std::string_view kTestKitBudget = "stall=60s";

struct Config {
  std::uint64_t seed = 1;
  Profile profile = Profile::strict;
  // A profile from a file (ProfileFile::load, or one a program builds): wins over `profile`,
  // which the world then sets to the file's family. VERBSIM_PROFILE=<path> sets it.
  std::optional<ProfileFile> profile_file;
  int devices = 2;  // named sim0, sim1, ...; every port is on one switch
  int ports_per_device = 1;
  std::uint64_t link_latency_ns = 1000;  // one way, port to port
  std::uint64_t link_gbps = 100;         // serialisation rate of every port
  FaultPlan faults;                      // see faults.hpp
  // Whether the world appends VERBSIM_FAULTS's rules to `faults` when it is made (a swarm's
  // drawn plan then reaches a test that builds its own config); false: `faults` alone.
  // from_env() has read them into `faults` already, so it sets this to false.
  bool env_faults = true;
  // What the world writes about itself (docs/OBSERVABILITY.md); none of it changes the run.
  std::string pcap;      // every packet as RoCE v2, in a pcapng file (Wireshark, tshark)
  std::string timeline;  // Trace Event Format JSON (Perfetto, chrome://tracing)
  bool stats = false;    // count packets, ACKs, NAKs, retries, completions (World::stats())
  Budget budget;         // none: default_budget(); VERBSIM_BUDGET replaces it in every world
  // A fabric shared with the other processes that name it (docs/MULTIPROCESS.md): their worlds
  // see each other's QPs. Empty: this world alone. VERBSIM_FABRIC sets it in every world.
  std::string fabric;

  // Defaults overridden by VERBSIM_SEED, VERBSIM_PROFILE, VERBSIM_SIM_DEVICES,
  // VERBSIM_SIM_PORTS (ports per device), VERBSIM_FAULTS, VERBSIM_PCAP, VERBSIM_TIMELINE and
  // VERBSIM_STATS (1: collect, and print them to stderr when the world ends),
  // VERBSIM_BUDGET and VERBSIM_FABRIC.
  static Config from_env();
};

// Where every posted work request is: the simulator's accounting invariant is
// posted == completed + discarded + outstanding, for sends and receives alike.
struct Accounting {
  std::uint64_t posted = 0;
  std::uint64_t completed = 0;    // a completion was generated (or a successful unsignaled send)
  std::uint64_t discarded = 0;    // dropped by a move to RESET or by destroying its QP/SRQ
  std::uint64_t outstanding = 0;  // still in a live queue
  std::uint64_t lost_to_overrun = 0;  // completions generated but dropped by a full CQ
  bool balanced() const noexcept { return posted == completed + discarded + outstanding; }
};

// A simulated fabric. Devices, queue pairs and the virtual clock live here; there are no
// globals, so a process may hold any number of worlds. A world is single-threaded: use it (and
// everything opened from it) from one thread at a time (threads taking turns under one lock
// are fine). A thread that posts or runs the world while another thread runs it makes the
// process abort with a message naming both threads. Contexts must go before the world.
//
// Progress: the world advances when application code polls a CQ or waits for an event, so code
// written against the core API alone runs unchanged. Virtual time jumps to the next event.
class World final : public Backend {
 public:
  // VERBSIM_SEED, when set, overrides config.seed (so any test can be replayed with a seed).
  explicit World(Config config = {});
  ~World() override;

  std::string_view name() const noexcept override { return "sim"; }
  std::vector<DeviceInfo> devices() override;
  std::unique_ptr<Context> open(std::string_view device = {}) override;
  // The simulated connection manager (verbsim/cm.hpp; sim/src/cm/).
  std::unique_ptr<CmEventChannel> create_cm_channel() override;

  // Names `qp` (of this world) for the fault plan's rules: those that say qp=<name>
  // (Filter::qp_name) match it from now on; a rule is checked against numbers, so naming costs
  // the data path nothing. Name a QP before the verbs a rule should fail. Throws
  // std::invalid_argument if `qp` is not a QP of this world, if `name` cannot be written in a
  // rule (a letter or '_', then letters, digits, '_', '-' or '.'), or if it names another QP.
  void name(const QueuePair& qp, const std::string& name);
  // The rules that name a QP no QP was given, one line each naming the rule ("" if none). The
  // world writes them to stderr when it is destroyed.
  std::string unnamed_rules() const;

  const Config& config() const noexcept;
  std::uint64_t seed() const noexcept;
  // Virtual time in nanoseconds since the world was created.
  std::uint64_t now() const noexcept;

  // Runs the events at the earliest pending time (jumping the clock there). False if none.
  bool step();
  // The same if that time is at or before `deadline_ns`; otherwise false, the clock unmoved.
  bool step_until(std::uint64_t deadline_ns);
  // How far an empty poll (or a non-blocking wait that finds nothing) may move the clock: it
  // runs the world's next instant only if that is at most `ns` away. The default, no limit,
  // is right for a program with one thread, whose empty poll means it waits; a host whose
  // threads share the world (the C drop-in) limits it and decides the longer jumps itself.
  void set_poll_horizon(std::uint64_t ns) noexcept;
  // Runs every event due at or before `deadline_ns`, then sets the clock to it.
  void run_until(std::uint64_t deadline_ns);
  // Runs until no event is pending or `max_events` have run; returns the number run.
  std::uint64_t run_until_idle(std::uint64_t max_events = UINT64_MAX);
  std::size_t pending_events() const noexcept;

  // Hash of everything that happened so far (events and completions, in order). Two runs with
  // the same seed and the same application behaviour have the same digest.
  std::uint64_t digest() const noexcept;
  std::string digest_hex() const;

  Accounting accounting() const noexcept;
  // Tells `observer` about every post, packet, completion and instant from now on
  // (verbsim/sim/observe.hpp); it must outlive the world. Costs nothing without observers.
  void add_observer(Observer& observer);
  // The same for an observer the world keeps until it ends; returns it.
  Observer& own_observer(std::unique_ptr<Observer> observer);
  // Tells the observers the run is over (they flush their files), as the world's destructor
  // does; for a world that lives until the process exits (the drop-in's). Call it once.
  void finish_observers();
  // Leaves the shared fabric (Config::fabric) after sending what the devices would still send
  // of what already arrived (ACKs), as the destructor does; for a world that lives until the
  // process exits (the drop-in's). Nothing without a shared fabric; once is enough.
  void leave_fabric();
  // Whether the world is part of a fabric shared with other processes (Config::fabric).
  bool shared() const noexcept;
  // run_until() for a program that computes meanwhile (the drop-in's progress thread, while
  // another thread of the program runs outside the library). On a shared fabric it also tells
  // the other processes that the program acts next at the deadline or later, so that they
  // need not creep up on this one a link latency at a time; catch_up() keeps that promise.
  void pace_until(std::uint64_t deadline_ns);
  // On a shared fabric, after pace_until(): runs the world up to the time promised, before the
  // program acts (the drop-in calls it as each verb that may send starts). Nothing otherwise.
  void catch_up();
  // The name of a file this process writes (a capture, a timeline, a verb log): "%p" in
  // `path` becomes the process id; on a shared fabric a name without it gets ".<pid>" before
  // its extension (run.pcapng: run.4711.pcapng), so that the processes do not write one file.
  // "stderr" and "-" stay as they are. scripts/merge-fabric.py merges the files by virtual time.
  std::string process_file(const std::string& path) const;
  // The run's counters so far; `collected` is false unless the world was made with
  // Config::stats (or VERBSIM_STATS=1).
  Stats stats() const;
  // Counts every port's traffic from now on (PortHwCounters' first part), at a small cost per
  // packet and completion; error counters are kept always. The drop-in calls it at once.
  void count_port_traffic();
  // The counters of port `port` (1, 2, ...) of device `dev` (0 for sim0); zeros for a port
  // the world does not have.
  PortHwCounters port_counters(int dev, int port) const;
  // The last events the world ran, oldest first, one per line (for failure reports).
  std::string recent_history() const;
  // What happened lately, for an error message (DeadlockError, the test main's failure
  // report): a line with the seed, profile, fault plan and virtual time, then the last records
  // of the first FlightRecorder attached to the world (verbs posted, packets, completions,
  // faults, CM messages; the test main attaches one to every world) and the counters of the
  // QPs they name; without a recorder, the last fabric events (recent_history()).
  std::string report() const;
  // What every live QP is waiting for, one line each: type and state, send WRs outstanding
  // (and how many are on the wire), an RNR wait and the RNR NAKs received, retries left, the
  // receives posted. The body of BudgetExceeded's message.
  std::string waiting() const;

  struct Impl;
  Impl& impl() noexcept { return *impl_; }
  const Impl& impl() const noexcept { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace verbsim::sim

namespace verbsim::sim {

// Test hook: told about every world created and destroyed on the calling thread. The test
// support library uses it to print the seed of a failing test and to check the accounting
// invariant of every world when it goes away. Thread-local; nullptr to remove.
class WorldObserver {
 public:
  virtual ~WorldObserver() = default;
  virtual void created(World& world) = 0;
  virtual void destroyed(World& world) = 0;
};
void set_world_observer(WorldObserver* observer) noexcept;

}  // namespace verbsim::sim
