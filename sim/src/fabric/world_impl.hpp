// The state of a simulated world: its configuration, clock and event queue, devices, fault
// plan at run time, accounting and the fibers running on it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "fabric/event.hpp"
#include "fabric/profile.hpp"
#include "fabric/rng.hpp"
#include "faults/rule_check.hpp"
#include "resources/ids.hpp"
#include "verbsim/sim/world.hpp"

namespace verbsim::sim {

struct CmFabric;
struct WaitQueue;
struct WaitQueueDeleter {
  void operator()(WaitQueue* q) const noexcept;
};
using WaitQueuePtr = std::unique_ptr<WaitQueue, WaitQueueDeleter>;

struct World::Impl {
  explicit Impl(Config c);

  Config config;
  const ProfileTraits* traits;
  Rng rng;
  Digest digest;
  std::uint64_t now = 0;
  std::uint64_t seq = 0;
  // Pending events: a binary heap of 16-byte keys (time, then sequence) over a slab of
  // payloads, so sifting moves keys, not whole events.
  struct HeapKey {
    std::uint64_t time;
    std::uint64_t seq_slot;  // sequence << 24 | slab slot: unique, ordered by sequence
  };
  std::vector<HeapKey> heap;
  std::vector<Event> slab;
  std::vector<std::uint32_t> free_slots;
  // Packets in flight, one FIFO per egress port: a port serialises, so what leaves it arrives
  // in order (time is non-decreasing) and needs no heap. Packets a fault delays or reorders go
  // through the heap instead.
  struct Fifo {
    std::vector<Event> events;
    std::uint32_t head = 0;
    std::uint32_t tail = 0;  // == events.size(), kept to avoid dividing by sizeof(Event)
    bool empty() const noexcept { return head == tail; }
    const Event& front() const noexcept { return events[head]; }
    Event& front() noexcept { return events[head]; }
    Event& push(const Event& e) {
      ++tail;
      return events.emplace_back(e);
    }
    void pop_into(Event& e) noexcept {
      e = events[head++];
      if (head == tail) {
        events.clear();
        head = tail = 0;
      }
    }
  };
  std::vector<Fifo> wires;
  std::size_t in_flight = 0;  // events in all wires
  // Bit i % 64 of word i / 64: wire i holds packets. next_event looks at those wires only.
  std::vector<std::uint64_t> busy_wires;
  // The earliest time of the events scheduled since step() last reset it.
  std::uint64_t earliest_scheduled = UINT64_MAX;
  // The wire the last event came from, while it holds more: no other source has an event
  // before min(hint_runner_up, earliest_scheduled). Or kNoEvent. See next_source().
  int hint_wire = -2;
  std::uint64_t hint_runner_up = 0;
  // Puts a packet on its wire (in sequence, like schedule()).
  void push_wire(const Event& e) {
    earliest_scheduled = std::min(earliest_scheduled, e.time);
    busy_wires[e.wire / 64] |= std::uint64_t{1} << (e.wire % 64);
    ++in_flight;
    wires[e.wire].push(e).seq = seq++;  // the copy in the FIFO gets the sequence number
  }
  void pop_wire(std::size_t i, Event& e) noexcept {
    Fifo& f = wires[i];
    f.pop_into(e);
    if (f.empty()) busy_wires[i / 64] &= ~(std::uint64_t{1} << (i % 64));
    --in_flight;
  }
  std::vector<std::unique_ptr<DevCore>> devs;
  int open_contexts = 0;
  FaultState faults;
  Accounting acct;
  void* fibers = nullptr;  // the running Simulation::Impl, if any
  bool deadlocked = false;  // every fiber blocked with nothing pending: waits return EDEADLK
  std::vector<WaitQueue*> wait_queues;
  // The queues of sim::sleep_for calls still waiting for their wake event. A sleep cut short
  // (deadlock) leaves its event behind; the event then finds its queue gone from here.
  std::vector<const WaitQueuePtr*> sleepers;
  // The connection manager's ids and messages (cm.cpp), made by the first create_cm_channel.
  std::shared_ptr<CmFabric> cm;
  void run_cm_event(const Event& e);
  // A CM timer whose wait was answered meanwhile: it would do nothing (drop_idle_timer_on_top).
  bool cm_timer_is_stale(const Event& e) const noexcept;
  std::vector<Event> history;  // ring of the last kHistory events run
  std::size_t history_next = 0;
  static constexpr std::size_t kHistory = 64;

  void schedule(Event e);
  // Schedules a packet on the wire, through the fault plan's packet rules and link states
  // (`psn` of a request packet, or kNoPsn). Returns the time of its last copy's arrival.
  std::uint64_t send_packet(const Event& e, std::uint32_t psn) {
    if (faults.packets) return send_faulty_packet(e, psn);
    push_wire(e);  // on time: joins its port's FIFO (times there never decrease)
    return e.time;
  }
  std::uint64_t send_faulty_packet(const Event& packet, std::uint32_t psn);
  // send_faulty_packet once rule `fired` fired: the rules from there on, then the actions.
  std::uint64_t apply_packet_faults(const Event& packet, std::uint32_t psn, std::size_t fired,
                                    std::uint32_t sender_qpn, int sender);
  // The errno a verb call fails with under the fault plan, or 0.
  int verb_fault(Verb verb, std::uint32_t qpn, const DevCore* dev) {
    if (!faults.verbs[static_cast<int>(verb)]) return 0;
    const int device = dev != nullptr ? dev->index : RuleCheck::kNoDevice;
    for (RuleCheck& r : faults.verb_rules[static_cast<std::size_t>(verb)]) {
      if (!r.matches_where(qpn, qpn, device) || !r.fires(rng)) continue;
      digest.add(0xfa000000ull | r.index);
      return config.faults.verbs[r.index].err;
    }
    return 0;
  }
  // `undo`: the end of a link_down ... for=.
  void run_timed_fault(const TimedFault& f, bool undo);
  bool port_up(std::uint32_t dev, std::uint8_t port) const noexcept;
  bool step();
  // step() if the earliest pending instant is at or before `limit`.
  bool step_until(std::uint64_t limit);
  // What an empty poll or a non-blocking wait runs: the next instant, if it is at most
  // poll_horizon away (World::set_poll_horizon).
  bool poll_step() {
    return poll_horizon == UINT64_MAX ? step() : step_until(now + poll_horizon);
  }
  std::uint64_t poll_horizon = UINT64_MAX;
  template <bool kLimited>
  bool step_impl(std::uint64_t limit);
  // Where the earliest pending event is: kHeapEvent, a wire's index, or kNoEvent; `time` is
  // its time, `runner_up` the earliest time among the other sources' first events.
  static constexpr int kNoEvent = -2;
  static constexpr int kHeapEvent = -1;
  int next_event(std::uint64_t& time, std::uint64_t& runner_up) const noexcept;
  // next_event(), or the hinted wire when it certainly comes first; drops idle timers on the
  // way (drop_idle_timer_on_top).
  int next_source(std::uint64_t& time, std::uint64_t& runner_up) noexcept;
  // Drops the heap's first event if it is a timer that would do nothing (SimQp::drop_idle_timer).
  bool drop_idle_timer_on_top();
  void dispatch(const Event& e);
  // The QP `qpn` of device `dev`, or nullptr. `dev` must be a device of this world, as the
  // device an event names always is (the simulator sets it, never the application).
  SimQp* find_qp(std::uint32_t dev, std::uint32_t qpn) const noexcept {
    return devs[dev]->qps.find(qpn);
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
  // Time a message of `bytes` leaving `port` of `dev` now arrives at the far end.
  std::uint64_t transmit_time(DevCore& dev, std::uint8_t port, std::uint64_t bytes) noexcept {
    return transmit_time(egress(dev, port), bytes);
  }
  std::uint64_t transmit_time(PortCore& p, std::uint64_t bytes) noexcept {
    const std::uint64_t wire = (bytes + 64) * 8 / config.link_gbps;  // + headers
    const std::uint64_t start = std::max(now, p.busy_until);
    p.busy_until = start + wire;
    return p.busy_until + config.link_latency_ns;
  }
  // Index in dev.ports of port number `port` (port 1's for a number out of range).
  static std::size_t port_index(const DevCore& dev, std::uint8_t port) noexcept {
    return port > 0 && port <= dev.ports.size() ? port - 1u : 0;
  }
  // The port a packet leaves `dev` by.
  static PortCore& egress(DevCore& dev, std::uint8_t port) noexcept {
    return dev.ports[port_index(dev, port)];
  }
  std::uint16_t wire_of(const DevCore& dev, std::uint8_t port) const noexcept {
    return static_cast<std::uint16_t>(static_cast<std::size_t>(dev.index) * dev.ports.size() +
                                      port_index(dev, port));
  }
  std::size_t pending() const noexcept { return heap.size() + in_flight; }
};

}  // namespace verbsim::sim
