// The state of a simulated world: its configuration and profile, RNG and digest, clock and
// event queue, devices and their ports (routing), the fault plan at run time, accounting, the
// fibers running on it and its connection manager. Private members, reached through what each
// role needs; the event queue calls back into dispatch() and timer_is_idle().
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "fabric/event.hpp"
#include "fabric/event_queue.hpp"
#include "fabric/profile.hpp"
#include "fabric/rng.hpp"
#include "faults/injector.hpp"
#include "observe/wire_numbers.hpp"
#include "resources/ids.hpp"
#include "verbsim/sim/observe.hpp"
#include "verbsim/sim/world.hpp"

namespace verbsim::sim {

struct CmFabric;
struct FabricLink;
class SharedFabric;
// World::process_file, for a world that is (`shared`) or is not on a shared fabric.
std::string process_file(const std::string& path, bool shared);
struct FabricLinkDeleter {
  void operator()(FabricLink* l) const noexcept;
};
struct CqEntry;
struct CqCore;
class StatsObserver;
struct WaitQueue;
struct WaitQueueDeleter {
  void operator()(WaitQueue* q) const noexcept;
};
using WaitQueuePtr = std::unique_ptr<WaitQueue, WaitQueueDeleter>;

// What fibers/ keeps in the world while a Simulation runs on it.
struct FiberState {
  void* running = nullptr;  // the running Simulation::Impl, if any
  bool deadlocked = false;  // every fiber blocked with nothing pending: waits return EDEADLK
  std::vector<WaitQueue*> wait_queues;
  // The queues of sim::sleep_for calls still waiting for their wake event. A sleep cut short
  // (deadlock) leaves its event behind; the event then finds its queue gone from here.
  std::vector<const WaitQueuePtr*> sleepers;
};

struct World::Impl {
 public:
  explicit Impl(Config c);

  // Marks the calling thread inside the world while it lives (posts, and every step of the
  // world: polls and waits that run it). A world is single-threaded: a second thread that
  // enters while another is inside is a program error the simulator would turn into a
  // nondeterministic run, so it aborts with a message naming both threads (entered_twice).
  // Threads that take turns (the drop-in's lock) never meet here. The mark is the thread
  // pointer (one instruction to read); relaxed atomics are plain moves.
  class Entry {
   public:
    explicit Entry(World::Impl& w) noexcept
        : w_(w), prev_(w.inside_.load(std::memory_order_relaxed)) {
      const auto me = reinterpret_cast<std::uintptr_t>(__builtin_thread_pointer());
      if (prev_ != 0 && prev_ != me) [[unlikely]] w.entered_twice(prev_, me);
      w.inside_.store(me, std::memory_order_relaxed);
    }
    ~Entry() { w_.inside_.store(prev_, std::memory_order_relaxed); }
    Entry(const Entry&) = delete;
    Entry& operator=(const Entry&) = delete;

   private:
    World::Impl& w_;
    std::uintptr_t prev_;
  };
  // Entry's check without its mark, for posts (a load and a branch when no thread is inside):
  // a post while another thread runs the world aborts as Entry does.
  void check_entry() noexcept {
    const std::uintptr_t inside = inside_.load(std::memory_order_relaxed);
    if (inside != 0) [[unlikely]] {
      const auto me = reinterpret_cast<std::uintptr_t>(__builtin_thread_pointer());
      if (inside != me) entered_twice(inside, me);
    }
  }

  const Config& config() const noexcept { return config_; }
  const ProfileTraits& traits() const noexcept { return *traits_; }
  Rng& rng() noexcept { return rng_; }
  Digest& digest() noexcept { return digest_; }
  const Digest& digest() const noexcept { return digest_; }
  Accounting& acct() noexcept { return acct_; }
  const Accounting& acct() const noexcept { return acct_; }
  FaultInjector& faults() noexcept { return faults_; }
  FiberState& fibers() noexcept { return fibers_; }
  const FiberState& fibers() const noexcept { return fibers_; }
  // The connection manager's ids and messages (cm/), made by the first create_cm_channel.
  std::shared_ptr<CmFabric>& cm() noexcept { return cm_; }

  // ---- Clock and events
  std::uint64_t now() const noexcept { return now_; }
  void schedule(const Event& e) { events_.schedule(e); }
  // Schedules a packet on the wire, through the fault plan's packet rules and link states
  // (`psn` of a request packet, or kNoPsn). Returns the time of its last copy's arrival.
  std::uint64_t send_packet(const Event& e, std::uint32_t psn) {
    if (faults_.checks_packets()) return send_faulty_packet(e, psn);
    events_.push_wire(e);  // on time: joins its port's FIFO (times there never decrease)
    return e.time;
  }
  // The packet next to arrive by `wire`, or nullptr (ACK coalescing, SimQp::ack_successor).
  Event* wire_front(std::uint16_t wire) noexcept { return events_.wire_front(wire); }
  std::size_t pending() const noexcept { return events_.pending(); }
  // Runs the events at the earliest pending time (jumping the clock there). False if none.
  bool step();
  // step() if the earliest pending instant is at or before `limit`.
  bool step_until(std::uint64_t limit);
  // What an empty poll or a non-blocking wait runs: the next instant, if it is at most
  // poll_horizon away (World::set_poll_horizon). Never throws: returns 0, or ETIMEDOUT once the
  // world's Budget ran out (what the empty poll returns).
  int poll_step() noexcept {
    if (poll_slow_ == 0) {  // no horizon, no budget: the one check on an empty poll
      plain_step();
      return 0;
    }
    return limited_poll_step();
  }
  // The Budget ran out: the world runs nothing more; BudgetExceeded's message.
  bool budget_exceeded() const noexcept { return !budget_report_.empty(); }
  // Progress a stall budget cannot see in the accounting: a CM event or message.
  void note_progress() noexcept { ++progress_marks_; }
  // After the simulator touched MR memory the program had unmapped (transport/user_memory.hpp):
  // warns once per MR, naming it; aborts if no MR covers the address (a simulator bug).
  [[gnu::noinline, gnu::cold]] void report_unmapped();
  const std::string& budget_report() const noexcept { return budget_report_; }
  void set_poll_horizon(std::uint64_t ns) noexcept {
    poll_horizon_ = ns;
    poll_slow_ = ns != UINT64_MAX || budgeted_ || link_ != nullptr;
  }
  // The World this is the inside of (for reports made inside: BudgetExceeded).
  void set_owner(const World* w) noexcept { owner_ = w; }
  // Runs every event due at or before `deadline`, then sets the clock to it.
  void run_until(std::uint64_t deadline);
  const EventQueue& events() const noexcept { return events_; }

  // ---- A fabric shared with other processes (Config::fabric; fabric/multiprocess.cpp)
  bool shared() const noexcept { return link_ != nullptr; }
  SharedFabric* shared_fabric() noexcept;  // nullptr: this world alone
  // A shared fabric's world keeps its live CQs, to see whether the program took everything
  // (fabric/multiprocess.cpp): a CQ is noted when created, forgotten when its handle goes.
  void note_cq(const CqCore* cq);
  void forget_cq(const CqCore* cq) noexcept;
  void leave_fabric();  // World::leave_fabric
  // Whether this is a copy that a child of fork() inherited: the world, its files and its
  // membership of a fabric are the parent's, and the child's destruction of it leaves them be.
  bool inherited() const noexcept { return ::getpid() != made_in_; }
  void catch_up();      // World::catch_up
  // A verb that may send something (a post, a CM message): on a shared fabric the program acts
  // at the others' present, as far as is safe (catch_up; a budget that ran out is reported by
  // the next call that runs the world). Nothing without one.
  void program_acts() noexcept {
    if (link_ != nullptr) [[unlikely]] catch_up_quietly();
  }
  void catch_up_quietly() noexcept;
  // What another process of the shared fabric wrote cannot be (`what` names it): this world
  // leaves the fabric at its next step (multiprocess.cpp, left_corrupt_fabric).
  void fabric_corrupt(const std::string& what);
  void pace_until(std::uint64_t deadline) { shared_run_until(deadline, /*pace=*/true); }
  // A QP number unique in the fabric (0: none left), and giving it back.
  std::uint32_t take_qpn(const DevCore& dev);
  void give_back_qpn(const DevCore& dev, std::uint32_t qpn) noexcept;
  // The stand-in for QP `qpn` of `dev` of another process (a requester whose requests this
  // world answered), or nullptr: what observers describe a response to it from.
  SimQp* stand_in(std::uint32_t dev, std::uint32_t qpn) noexcept;

  // ---- Verb faults: the errno a verb call fails with under the fault plan, or 0.
  int verb_fault(Verb verb, std::uint32_t qpn, const DevCore* dev) noexcept {
    return faults_.verb(verb, qpn, dev);
  }

  // ---- Observers (verbsim/sim/observe.hpp; observe/*.cpp). Nothing below runs without one:
  // packets take the fault path's branch (FaultInjector::observe), the rest asks
  // observing() where it already branches.
  // What an observer is told: every kind of record, or (the capture) all but the work
  // requests' posts and completions, which are not made while no observer takes them.
  enum class Takes : std::uint8_t { everything, no_work_requests };
  void add_observer(Observer* o, Takes takes = Takes::everything);
  // Observers the world made itself from its config (capture and timeline files) and owns.
  void own_observer(std::unique_ptr<Observer> o, Takes takes = Takes::everything);
  bool observing() const noexcept { return observing_; }
  // The first FlightRecorder among the observers, or nullptr (World::report()).
  const FlightRecorder* recorder() const noexcept { return recorder_; }
  // How this world numbered its packets on the wire (observe/wire_numbers.hpp).
  wire::Numbers& wire_numbers() noexcept { return numbers_; }
  // Whether an observer is attached (observing() is also true while only counting).
  bool has_observers() const noexcept { return !observers_.empty(); }
  // Whether an observer takes posts and completions (observe_posted, observe_completion).
  bool observes_work_requests() const noexcept { return !wr_observers_.empty(); }
  bool counting() const noexcept { return counting_; }
  // Counts a completion into its QP's port (rdma_sends, rdma_recvs) while counting.
  void count_completion(const CqEntry& e);
  // World::count_port_traffic: packets and completions are counted into their ports'
  // PortHwCounters through the observers' branches (observe/port_counters.cpp).
  void count_port_traffic();
  // The counters' observer, made when Config::stats is set; else nullptr.
  const StatsObserver* stats_observer() const noexcept { return stats_; }
  // Inline: their callers run them once per work request while observing.
  void observe_completion(const CompletionRecord& r) {
    for (Observer* o : wr_observers_) o->completion(r);
  }
  void observe_instant(std::uint16_t dev, std::uint32_t qpn, std::string_view what);
  void observe_posted(const PostRecord& r) {
    for (Observer* o : wr_observers_) o->posted(r);
  }
  void observe_cm(const CmRecord& r);
  // Tells every observer the world is done (World's destructor).
  void finish_observers();

  // ---- Devices, ports and routing
  const std::vector<std::unique_ptr<DevCore>>& devices() const noexcept { return devs_; }
  // The QP `qpn` of device `dev`, or nullptr. `dev` must be a device of this world, as the
  // device an event names always is (the simulator sets it, never the application).
  SimQp* find_qp(std::uint32_t dev, std::uint32_t qpn) const noexcept {
    return devs_[dev]->qps.find(qpn);
  }
  // Where `gid` is in the fabric: the device (-1: nowhere), its port number and the GID's
  // index in that port's table.
  struct GidPlace {
    int dev = -1;
    std::uint8_t port = 0;
    std::uint8_t gid_index = 0;
  };
  GidPlace locate(const Gid& gid) const noexcept;
  // The device owning `gid`, or -1.
  int route(const Gid& gid) const noexcept { return locate(gid).dev; }
  bool port_up(std::uint32_t dev, std::uint8_t port) const noexcept;
  // Time a message of `bytes` leaving `port` of `dev` now arrives at the far end.
  std::uint64_t transmit_time(DevCore& dev, std::uint8_t port, std::uint64_t bytes) noexcept {
    return transmit_time(egress(dev, port), bytes);
  }
  std::uint64_t transmit_time(PortCore& p, std::uint64_t bytes) noexcept {
    const std::uint64_t wire = (bytes + 64) * 8 / config_.link_gbps;  // + headers
    const std::uint64_t start = std::max(now_, p.busy_until);
    p.busy_until = start + wire;
    return p.busy_until + config_.link_latency_ns;
  }
  // Index in dev.ports of port number `port` (port 1's for a number out of range).
  static std::size_t port_index(const DevCore& dev, std::uint8_t port) noexcept {
    return port > 0 && port <= dev.ports.size() ? port - 1u : 0;
  }
  // The RoCE v2 GID of port `port` of `dev` (its last, IPv4-mapped one), as packets carry it.
  static const Gid& roce_gid(const DevCore& dev, std::uint8_t port) noexcept {
    return dev.ports[port_index(dev, port)].gids.back();
  }
  // The port a packet leaves `dev` by.
  static PortCore& egress(DevCore& dev, std::uint8_t port) noexcept {
    return dev.ports[port_index(dev, port)];
  }
  std::uint16_t wire_of(const DevCore& dev, std::uint8_t port) const noexcept {
    return static_cast<std::uint16_t>(static_cast<std::size_t>(dev.index) * dev.ports.size() +
                                      port_index(dev, port));
  }

 private:
  friend class EventQueue;  // runs events through dispatch() and timer_is_idle()

  // Runs one event (EventQueue::step).
  void dispatch(const Event& e);
  // Would this timer on the heap's top do nothing (SimQp::drop_idle_timer, stale CM timers)?
  bool timer_is_idle(const Event& e);
  std::uint64_t send_faulty_packet(const Event& packet, std::uint32_t psn);
  // A timed fault (faults/timed.cpp); `undo`: the end of a link_down ... for=.
  void run_timed_fault(const TimedFault& f, bool undo);
  // The connection manager's messages and timers (cm/).
  void run_cm_event(const Event& e);
  // A CM timer whose wait was answered meanwhile: it would do nothing.
  bool cm_timer_is_stale(const Event& e) const noexcept;
  // Counts the packet `e` (count_port_traffic) and tells observers of it.
  void packet_seen(const Event& e, std::uint32_t psn, PacketFate fate, std::uint64_t arrives,
                   std::uint64_t duplicate_at) {
    if (counting_) count_packet(e, fate);
    if (!observers_.empty()) observe_packet(e, psn, fate, arrives, duplicate_at);
  }
  // The packet `e` as observers see it, and what became of it (observe/packets.cpp).
  void observe_packet(const Event& e, std::uint32_t psn, PacketFate fate, std::uint64_t arrives,
                      std::uint64_t duplicate_at);
  void observe_verb_fault(Verb verb, std::uint32_t qpn, const DevCore* dev, int err);
  // Counts packet `e` into the counters of the ports it leaves and reaches.
  void count_packet(const Event& e, PacketFate fate);
  void count_cm(const CmRecord& r);  // a MAD of 256 bytes
  // Packets take the path that tells observers (or counts them) from now on.
  void start_observing();
  // step_until(limit) within Config::budget. Past it: the world stops (no more events), and
  // this throws BudgetExceeded, or (!may_throw) writes the report to stderr once, sets
  // poll_errno_ and returns false.
  bool budgeted_step(std::uint64_t limit, bool may_throw);
  // The virtual time the budget lets the run reach, from its time limit and, for a stall
  // limit, the last progress seen (noted here when the counts changed since the last call).
  std::uint64_t budget_end() noexcept;
  // Two threads inside at once (Entry): writes what happened and what to do, and aborts.
  [[noreturn, gnu::cold]] void entered_twice(std::uintptr_t inside, std::uintptr_t entering) noexcept;
  // poll_step() with a horizon or a budget.
  int limited_poll_step() noexcept;
  // step() without a budget.
  bool plain_step();
  // One instant up to `limit`, without a budget (world.cpp: the event loop is inline there).
  bool plain_step_until(std::uint64_t limit);
  // A shared fabric's step: takes the parcels other processes sent, runs the next instant up
  // to `limit` and what they allow, and tells them how far this process may now send from
  // (`passive`: the program waits in the library, only events make it send).
  bool shared_step(std::uint64_t limit, bool passive, bool may_throw);
  void join_fabric();
  // `pace`: World::pace_until (the program computes meanwhile, and acts next no earlier).
  void shared_run_until(std::uint64_t deadline, bool pace);
  void take_parcels();
  // The fabric's file was found corrupt: reports why and leaves the fabric; the others are
  // unreachable from now on (their QPs time out, connections to them are disconnected).
  void left_corrupt_fabric();
  void publish_bound();
  // The time of the earliest event that would do something (idle timers are dropped).
  std::uint64_t next_busy_time();
  // A packet or response for a QP of another process: sent to it (else lost).
  void hand_over(const Event& e);
  // A parcel's turn (EvKind::parcel).
  void run_parcel(const Event& e);

  Config config_;
  std::unique_ptr<const ProfileTraits> own_traits_;  // from config_.profile_file, if set
  const ProfileTraits* traits_;
  Rng rng_;
  Digest digest_;
  std::uint64_t now_ = 0;
  std::uint64_t poll_horizon_ = UINT64_MAX;
  std::atomic<std::uintptr_t> inside_{0};  // the thread inside (Entry), or 0
  bool budgeted_ = false;  // config_.budget.enabled()
  bool poll_slow_ = false;  // a poll horizon or a budget: poll_step() takes its slow path
  std::string budget_report_;  // BudgetExceeded's message, once the budget ran out
  std::uint64_t progress_marks_ = 0;  // CM events and messages (note_progress)
  std::uint64_t progress_seen_ = 0;   // posted + completed + discarded + marks, last looked at
  std::uint64_t progress_at_ = 0;     // virtual time progress_seen_ was seen to change
  const World* owner_ = nullptr;
  const pid_t made_in_ = ::getpid();  // the process that made the world
  std::vector<std::unique_ptr<DevCore>> devs_;
  EventQueue events_;
  FaultInjector faults_;
  Accounting acct_;
  FiberState fibers_;
  std::vector<std::uint32_t> unmapped_warned_;  // keys of MRs report_unmapped named
  std::shared_ptr<CmFabric> cm_;
  std::unique_ptr<FabricLink, FabricLinkDeleter> link_;  // Config::fabric's, if set
  bool observing_ = false;
  bool counting_ = false;                       // count_port_traffic()
  std::vector<PortHwCounters*> wire_counters_;  // by Event::wire, while counting
  std::vector<Observer*> observers_;
  std::vector<Observer*> wr_observers_;  // those that take posts and completions
  std::vector<std::unique_ptr<Observer>> owned_observers_;
  std::vector<std::uint8_t> payload_;  // scratch for PacketRecord::payload: grows, never shrinks
  // What observe_packet starts a record from: a copy of it is a few moves, where the
  // compiler makes a `rep stos` of a record made anew, which takes long to start.
  const PacketRecord blank_packet_{};
  wire::Numbers numbers_;  // PacketRecord::wire_psn and msn, while observing
  StatsObserver* stats_ = nullptr;
  const FlightRecorder* recorder_ = nullptr;
};

}  // namespace verbsim::sim
