// The simulator's internal state. Public handles (SimContext, SimCq, ...) are thin: the state
// that other resources point at lives in *Core objects held by shared_ptr, so a handle dropped
// out of order (a CQ before its QPs) cannot leave a dangling pointer behind.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include "rng.hpp"
#include "verbsim/address_handle.hpp"
#include "verbsim/completion_channel.hpp"
#include "verbsim/completion_queue.hpp"
#include "verbsim/context.hpp"
#include "verbsim/memory_region.hpp"
#include "verbsim/memory_window.hpp"
#include "verbsim/protection_domain.hpp"
#include "verbsim/queue_pair.hpp"
#include "verbsim/shared_receive_queue.hpp"
#include "verbsim/sim/world.hpp"

namespace verbsim::sim {

class SimQp;
struct CtxCore;
struct CmFabric;

// Fibers blocked in a verb (get_cq_event, get_async_event); see wait.hpp.
struct WaitQueue;
struct WaitQueueDeleter {
  void operator()(WaitQueue* q) const noexcept;
};
using WaitQueuePtr = std::unique_ptr<WaitQueue, WaitQueueDeleter>;

// Where the profiles differ, as data chosen once per world (no profile branches elsewhere).
struct ProfileTraits {
  Profile profile;
  bool pow2_minus_one_depths;     // rxe: 2^n - 1; strict/mlx5: SQ/RQ 2^n, CQ/SRQ 2^n - 1
  bool post_checks_opcode;        // false on rxe: an opcode the QP type lacks fails later, in
                                  // its completion (LOC_QP_OP_ERR)
  bool ud_oversize_refused;       // false on rxe: a UD send above the MTU completes unsent
  bool create_reports_requested;  // rxe: create's cap echoes the request, query tells the truth
  bool retire_on_poll;            // send slot frees when its completion is polled (hardware)
  bool cq_overrun_is_error;       // strict: CQ error + QPs to ERR; rxe: drop + event per entry
  bool recv_cq_overrun_errors_qp;  // rxe: a receive lost to a full CQ takes the responder to
                                   // ERR unacknowledged (the requester runs out of retries)
  bool post_send_needs_rts;       // EINVAL for post_send in RESET/INIT/RTR
  bool rejected_send_stays_queued;  // rxe quirk: the EINVAL'd WR still runs once in RTS
  bool rts_starts_send_queue;     // false on rxe: WRs queued before RTS wait for a doorbell
  bool post_recv_in_err_completes;  // false on rxe: the receive is never completed
  bool modify_trusts_cur_state;   // rxe checks the transition from IBV_QP_CUR_STATE as given
  bool sqd_holds_while_draining;  // rxe: from SQD only ERR is allowed until the SQ has drained
  bool pkey_index_checked;        // false on rxe: any pkey_index is accepted
  bool clean_cq_on_qp_destroy;    // mlx5 removes a destroyed/reset QP's CQEs
  bool last_wqe_reached_event;    // QP_LAST_WQE_REACHED when a QP on an SRQ goes to ERR
  bool send_error_is_solicited;   // a send completing in error fires a solicited-only arm
  bool responder_error_events;    // QP_ACCESS_ERR / QP_REQ_ERR on the responder
  bool responder_errors_are_qp_op;  // rxe: a receive that cannot take the data (too small,
                                    // no LOCAL_WRITE) is LOC_QP_OP_ERR, NAK "remote op error"
  bool qp_access_nak_inv_req;     // rxe: a request the QP's access flags forbid is NAKed as
                                  // an invalid request (REM_INV_REQ_ERR), not an access error
  bool comm_est_event;            // COMM_EST when a QP in RTR receives its first packet
  bool error_wc_zeroed;           // rxe: an error completion has opcode 0 and byte_len 0
  bool recv_wc_grh;               // rxe: every receive completion says IBV_WC_GRH (RoCE)
  bool coalesce_acks;             // the responder ACKs only the last of back-to-back messages
                                  // of a QP (hardware); rxe ACKs every message
  bool atomic_takes_longer_buffer;  // rxe: an atomic's local SGEs may hold more than 8 bytes
                                    // (the value lands in the first 8; byte_len says them all)
  bool uc_on_srq;                 // rxe: a UC QP may receive from an SRQ
  bool imm_write_takes_recv_first;  // rxe: a WRITE with immediate whose rkey or range fails has
                                    // taken a receive, which completes with REM_ACCESS_ERR
  bool window_range_is_mr;  // rxe: an access through a window is checked against its MR's
                            // range, not the window's (rxe_resp's check_rkey)
  bool rereg_mr;            // false on rxe: ibv_rereg_mr is EOPNOTSUPP
  bool srq_resize;          // rxe: ibv_modify_srq may change max_wr (IBV_DEVICE_SRQ_RESIZE)
  bool type2_window_pins_qp;      // rxe: a bound type 2 window holds a reference on its QP, so
                                  // destroying the QP blocks 50 s and frees it under the window
                                  // (kernel 6.1): the simulator destroys it and warns
  bool free_type2_invalidate_oopses;  // rxe: LOCAL_INV or SEND_WITH_INV naming a type 2 window
                                      // that is not bound oopses the kernel: the simulator
                                      // fails the WR and warns
  WcStatus bad_lkey_status;       // a send SGE whose lkey is unknown or of another PD
                                  // (rxe: LOC_QP_OP_ERR; bounds are LOC_PROT_ERR everywhere)
  std::uint32_t max_qp_wr;
  std::uint32_t max_cqe;
  std::uint32_t max_sge;
  std::uint32_t max_inline;
  std::uint32_t min_inline_per_sge;  // rxe reports at least 16 bytes per SGE as inline room
  int gid_tbl_len;          // port's GID table size; entries past the two in use are empty
  std::uint32_t max_msg_sz;  // port's max_msg_sz
  int send_limit_errno;  // too many SGEs or inline too large: ENOMEM (mlx5), EINVAL (rxe)
  std::uint32_t max_mw;  // memory windows per device

  static const ProfileTraits& of(Profile p) noexcept;
  std::uint32_t round_wq(std::uint32_t n) const noexcept;  // SQ/RQ depth given for `n`
  std::uint32_t round_cq(std::uint32_t n) const noexcept;  // CQ/SRQ depth given for `n`
};

struct PortCore {
  PortAttr attr;
  std::vector<Gid> gids;
  std::uint64_t busy_until = 0;  // egress serialisation
};

struct MrCore;
struct MwCore;
struct SrqCore;

// Memory keys are an index and a random low byte. MRs take the indices from 1 up to
// kFirstMwIndex - 1 (the device's max_mr), memory windows those from kFirstMwIndex on, so a key
// names one table only (as rxe splits its MR and MW indices).
inline constexpr std::uint32_t kFirstMwIndex = (1u << 20) + 1;
inline constexpr std::uint32_t kMaxMwIndex = 0xffffff;

// Objects of a device by number (QPN, MR index): a vector indexed by `id - base`, since the
// simulator hands out numbers in sequence. O(1) on the data path, no hashing.
template <class T>
class IdTable {
 public:
  explicit IdTable(std::uint32_t base) : base_(base) {}
  T* find(std::uint32_t id) const noexcept {
    const std::uint32_t i = id - base_;
    return i < size_ ? slots_[i] : nullptr;
  }
  void insert(std::uint32_t id, T* p) {
    const std::uint32_t i = id - base_;
    if (i >= size_) {
      slots_.resize(i + 1, nullptr);
      size_ = i + 1;
    }
    slots_[i] = p;
  }
  void erase(std::uint32_t id) noexcept {
    const std::uint32_t i = id - base_;
    if (i < size_) slots_[i] = nullptr;
  }
  // Live objects in id order.
  template <class F>
  void for_each(F&& f) const {
    for (T* p : slots_) {
      if (p != nullptr) f(*p);
    }
  }

 private:
  std::uint32_t base_;
  std::uint32_t size_ = 0;  // slots_.size(), kept so that find() needs one load to compare
  std::vector<T*> slots_;
};

struct DevCore {
  int index = 0;
  std::string name;
  std::uint64_t guid = 0;
  std::vector<PortCore> ports;  // ports[0] is port 1
  IdTable<SimQp> qps{0x11};  // by QPN (rxe starts at 17 too)
  IdTable<MrCore> mrs{0};    // by key >> 8 (the MR's index); the low byte is a random key
  IdTable<MwCore> mws{kFirstMwIndex};  // memory windows, by key >> 8 likewise
  std::vector<CtxCore*> contexts;  // for device and port async events
  std::vector<SrqCore*> srqs;      // for the srq_limit fault
  std::uint32_t next_qpn = 0x11;
  std::uint32_t next_mr_index = 1;
  std::uint32_t next_mw_index = kFirstMwIndex;
  int live_mws = 0;
  // The MR or memory window whose key is `key` (index and random byte), or nullptr.
  MrCore* mr_of(std::uint32_t key) const noexcept;
  MwCore* window_of(std::uint32_t key) const noexcept;
  // Changes when an MR of the device is deregistered or re-registered: keys that QPs found
  // before (SimQp::find_mr) must be looked up again.
  std::uint64_t mr_generation = 1;
  std::uint32_t next_pd_id = 1;
  int live_qps = 0;
  int live_cqs = 0;
};

// Events for a QP first, then the others (dispatch() tells them apart with one compare).
// fault, wake and cm are not for a QP (World::Impl::dispatch); cm carries the connection
// manager's messages and timers (cm.cpp).
enum class EvKind : std::uint8_t { deliver, ack, nak, timeout, rnr_retry, fault, wake, cm };

// NAK codes carried by EvKind::nak (code field; an RNR NAK has its timer in the value field).
enum class Nak : std::uint8_t { rnr, psn_seq, rem_access, inv_req, rem_op };

inline constexpr std::uint32_t kNoPsn = UINT32_MAX;

struct Event {
  std::uint64_t time;
  std::uint64_t seq;
  EvKind kind;
  std::uint8_t code;        // Nak
  std::uint16_t dev;        // device of the QP the event is for
  std::uint32_t qpn;        // QP the event is for
  std::uint16_t src_dev;    // deliver: sender
  std::uint16_t wire;       // packets: the egress port they left by (its FIFO)
  std::uint32_t src_qpn;
  std::uint32_t index;      // send-queue index of the WQE concerned
  std::uint32_t epoch;      // requester epoch when the event was made (stale events drop)
  std::uint64_t value;      // rnr timer, timer generation; deliver: kAckOwed or 0
};

// Event::value of a message whose response is also owed to the message before it (ACK
// coalescing, SimQp::ack_successor). The mark travels with the message, so an ACK left to a
// message that is lost or arrives stale dies with it.
inline constexpr std::uint64_t kAckOwed = 1;

// A rule of the fault plan as the data path checks it: its filter resolved to numbers when
// the world is made, and its count of matches.
struct RuleCheck {
  static constexpr int kAnyDevice = -1;
  static constexpr int kNoDevice = -2;  // names a device the world does not have
  RuleCheck(const Trigger& when, const Filter& where, std::uint32_t index,
            const std::vector<std::unique_ptr<DevCore>>& devs);

  std::uint64_t matches = 0;
  std::uint64_t fire_at = 0;  // the match that fires next (nth=, every=); 0: none
  std::uint64_t every = 0;    // every=: how far the next one is
  double probability = 0;     // p=
  std::uint32_t index = 0;    // in the plan's verb or packet rules
  std::uint32_t qpn = 0;
  std::uint32_t psn = 0;      // packet rules
  bool any_qpn = true;
  bool any_psn = true;
  int dev = kAnyDevice;

  // Counts a match; does the rule fire on it? (The plan's Trigger, with the modulo of every=
  // replaced by a countdown.)
  bool fires(Rng& rng) noexcept {
    if (++matches == fire_at) {
      fire_at += every;
      return true;
    }
    return probability > 0 && rng.unit() < probability;
  }
  // Does a call on QP `q` of device `device` (or a packet from `q` to `other_q`) match? A
  // negative `device` is none.
  bool matches_where(std::uint32_t q, std::uint32_t other_q, int device) const noexcept {
    return (any_qpn || qpn == q || qpn == other_q) &&
           (dev == kAnyDevice || (device >= 0 && dev == device));
  }
  // Does a packet carrying `p` (or kNoPsn) match the psn= filter?
  bool matches_psn(std::uint32_t p) const noexcept {
    return any_psn || (p == psn && p != kNoPsn);
  }
  // A packet rule: does it match a packet carrying `p` from QP `from` (of device `device`) to
  // QP `to`, and fire on it?
  bool fires_on_packet(std::uint32_t p, std::uint32_t from, std::uint32_t to, int device,
                       Rng& rng) noexcept {
    return matches_psn(p) && matches_where(from, to, device) && fires(rng);
  }
};

// The fault plan's rules at run time (the plan itself stays in Config).
struct FaultState {
  std::vector<RuleCheck> verb_rules[kVerbCount];  // per verb, in plan order
  std::vector<RuleCheck> packet_rules;            // in plan order
  bool verbs[kVerbCount] = {};
  bool packets = false;  // any packet rule, or a link is or was down
  bool links_changed = false;  // a timed fault took a link or device down at some point
};

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

// ---------------------------------------------------------------------------------------------

struct CtxCore {
  World::Impl* world;
  DevCore* dev;
  DeviceInfo info;
  std::deque<AsyncEvent> async;
  int async_efd = -1;
  WaitQueuePtr waiters;
  void raise(const AsyncEvent& e);
  // Drops the pending events that name `object` (a QP, CQ or SRQ being destroyed), as the
  // kernel does when a verbs object goes (ib_uverbs_release_uevent): a program never gets an
  // event for an object it destroyed.
  void forget_events_of(const void* object) noexcept;
  ~CtxCore();
};

struct PdCore {
  std::shared_ptr<CtxCore> ctx;
  std::uint32_t id = 0;
  int users = 0;  // MRs, QPs, SRQs, AHs
};

struct MrCore {
  std::shared_ptr<PdCore> pd;
  DevCore* dev;
  char* addr;
  std::size_t length;
  Access access;
  std::uint32_t key;
  int windows = 0;  // memory windows bound to it: it cannot be deregistered meanwhile
};

// Does [addr, addr+len) lie within [base, base+size)?
inline bool spans(std::uint64_t base, std::uint64_t size, std::uint64_t addr,
                  std::uint64_t len) noexcept {
  return addr >= base && addr + len <= base + size && addr + len >= addr;
}

// Does `mr` cover [addr, addr+len) with every access bit of `need`? (The range test is spans',
// written out: calling spans here costs the responder 3 instructions per message.)
[[gnu::always_inline]] inline bool covers(const MrCore& mr, std::uint64_t addr, std::uint64_t len,
                                          Access need) noexcept {
  if (need != Access::none && !all(mr.access, need)) return false;
  const auto base = reinterpret_cast<std::uint64_t>(mr.addr);
  return addr >= base && addr + len <= base + mr.length && addr + len >= addr;
}

// A memory window. Type 1 is always valid (length 0: bound to nothing); type 2 is free until
// a BIND_MW binds it, and then serves only the QP that bound it, until it is invalidated.
struct MwCore {
  std::shared_ptr<PdCore> pd;
  DevCore* dev;
  MwType type;
  std::uint32_t key;          // the current rkey: a bind changes its low byte
  std::uint32_t mr_key = 0;   // the MR it is bound to (0: none)
  std::uint64_t addr = 0;
  std::uint64_t length = 0;
  Access access = Access::none;
  std::uint32_t qpn = 0;      // type 2: the QP that bound it
  bool bound = false;         // type 2: bound (valid), else free
};

inline MrCore* DevCore::mr_of(std::uint32_t key) const noexcept {
  MrCore* mr = mrs.find(key >> 8);
  return mr != nullptr && mr->key == key ? mr : nullptr;
}

inline MwCore* DevCore::window_of(std::uint32_t key) const noexcept {
  MwCore* mw = mws.find(key >> 8);
  return mw != nullptr && mw->key == key ? mw : nullptr;
}

struct ChannelCore {
  std::shared_ptr<CtxCore> ctx;
  std::deque<CompletionQueue*> events;
  int efd = -1;
  WaitQueuePtr waiters;
  int users = 0;  // CQs attached
  // Drops the pending events of `cq`, being destroyed (as the kernel does): the fd stops polling
  // readable for them.
  void forget_events_of(const CompletionQueue* cq) noexcept;
  ~ChannelCore();
};

// The QPs using a CQ, in creation order. A CQ's QPs all come from its device's QPN counter, so
// creation order is QPN order: removal finds the QP by binary search and leaves a hole, and the
// holes are squeezed out once they are half the list. O(log n) per destroyed QP instead of the
// O(n) of erasing from a vector (quadratic when 100,000 QPs share one CQ). Iteration skips holes.
class QpList {
  struct Entry {
    std::uint32_t qpn;
    SimQp* qp;  // nullptr: removed
  };

 public:
  class iterator {
   public:
    iterator(const Entry* p, const Entry* end) noexcept : p_(p), end_(end) { skip(); }
    SimQp* operator*() const noexcept { return p_->qp; }
    iterator& operator++() noexcept {
      ++p_;
      skip();
      return *this;
    }
    bool operator==(const iterator& o) const noexcept { return p_ == o.p_; }

   private:
    void skip() noexcept {
      while (p_ != end_ && p_->qp == nullptr) ++p_;
    }
    const Entry* p_;
    const Entry* end_;
  };

  // `qpn` is above every QPN in the list.
  void add(std::uint32_t qpn, SimQp* qp) { entries_.push_back({qpn, qp}); }
  void remove(std::uint32_t qpn) noexcept {
    auto it = std::lower_bound(entries_.begin(), entries_.end(), qpn,
                               [](const Entry& e, std::uint32_t n) { return e.qpn < n; });
    if (it == entries_.end() || it->qpn != qpn || it->qp == nullptr) return;
    it->qp = nullptr;
    if (++holes_ * 2 > entries_.size()) {
      std::erase_if(entries_, [](const Entry& e) { return e.qp == nullptr; });
      holes_ = 0;
    }
  }
  iterator begin() const noexcept { return {entries_.data(), entries_.data() + entries_.size()}; }
  iterator end() const noexcept {
    const Entry* e = entries_.data() + entries_.size();
    return {e, e};
  }

 private:
  std::vector<Entry> entries_;
  std::size_t holes_ = 0;
};

struct CqEntry {
  WorkCompletion wc;
  SimQp* qp;               // the QP it belongs to; nullptr once that QP is gone
  std::uint32_t sq_index;  // send completions: the slot it retires
  bool send;
};

struct CqCore {
  std::shared_ptr<CtxCore> ctx;
  World::Impl* world = nullptr;  // ctx->world
  std::shared_ptr<ChannelCore> channel;
  CompletionQueue* handle = nullptr;
  std::vector<CqEntry> ring;  // capacity == cqe
  std::uint32_t head = 0;
  std::uint32_t count = 0;
  int requested = 0;
  int reported = 0;  // cqe() as the provider reports it (the ring may be smaller under faults)
  int users = 0;  // QPs
  QpList qps;  // the QPs using this CQ (for overrun as a CQ error)
  enum class Arm : std::uint8_t { none, any, solicited } arm = Arm::none;
  bool error = false;        // strict profile after an overrun
  unsigned unacked_events = 0;  // taken from the channel, not yet acknowledged
  std::uint64_t dropped = 0;  // completions lost to overrun or to a CQ in error

  CqEntry spill{};  // where a completion the CQ drops is written (see next_slot)

  // Adding a completion is two steps, so that it is written once, in place: fill every field
  // of next_slot(), then commit() it; `solicited` marks a receive of a solicited SEND.
  // next_slot() is the ring's next free entry, or `spill` when the CQ will drop it (overrun,
  // or a CQ in error); commit() returns false then.
  CqEntry& next_slot() noexcept {
    const auto size = static_cast<std::uint32_t>(ring.size());
    if (error || count == size) return spill;
    const std::uint32_t i = head + count;
    return ring[i < size ? i : i - size];
  }
  bool commit(const CqEntry& e, bool solicited) {
    Digest& d = world->digest;
    d.add(e.wc.wr_id);
    d.add(static_cast<std::uint64_t>(e.wc.status) << 40 |
          static_cast<std::uint64_t>(e.wc.opcode) << 32 | e.wc.byte_len);
    d.add(e.wc.qp_num);
    if (&e == &spill) [[unlikely]] return drop();
    ++count;  // e is ring[head + count]
    if (arm != Arm::none) [[unlikely]] notify_if_armed(e, solicited);
    return true;
  }
  bool drop();  // the completion in `spill` is lost: overrun, or a CQ in error
  void notify_if_armed(const CqEntry& e, bool solicited);
  void notify();
};

// Bytes an SGE list covers; one SGE (the common case) without the loop.
inline std::uint64_t sges_length(std::span<const Sge> sges) noexcept {
  if (sges.size() == 1) return sges[0].length;
  std::uint64_t len = 0;
  for (const Sge& s : sges) len += s.length;
  return len;
}

// Copies a work request's SGEs into its queue slot; one SGE (the common case) without a
// call to memmove.
inline void copy_sges(std::span<const Sge> from, Sge* to) noexcept {
  if (from.size() == 1) {
    *to = from[0];
  } else {
    std::copy(from.begin(), from.end(), to);
  }
}

struct RecvWqe {
  std::uint64_t wr_id;
  std::uint32_t num_sge;
};

// A ring of receive WQEs with their SGEs, used by QPs and SRQs. One allocation holds the
// `slots` WQEs, then their SGEs (max_sge per slot).
struct RecvQueue {
  std::unique_ptr<std::byte[]> mem;  // the WQEs, then the SGEs
  Sge* sges = nullptr;
  std::uint32_t slots = 0;  // max(cap, 1) rounded up to a power of two
  std::uint32_t cap = 0;
  std::uint32_t max_sge = 0;
  std::uint32_t head = 0;  // next to consume
  std::uint32_t tail = 0;  // next to post
  std::uint32_t size() const noexcept { return tail - head; }
  void init(std::uint32_t capacity, std::uint32_t sge);
  RecvWqe& at(std::uint32_t i) noexcept {
    return reinterpret_cast<RecvWqe*>(mem.get())[i & (slots - 1)];
  }
  Sge* sge_at(std::uint32_t i) noexcept { return &sges[(i & (slots - 1)) * max_sge]; }
  void clear() noexcept { head = tail = 0; }
  // The same receives, oldest first, in a queue of `capacity`; capacity >= size().
  void resize(std::uint32_t capacity);
};

struct SrqCore {
  std::shared_ptr<PdCore> pd;
  SharedReceiveQueue* handle = nullptr;
  RecvQueue rq;
  std::uint32_t requested = 0;
  std::uint32_t limit = 0;  // armed while non-zero
  int users = 0;
  DevCore* dev = nullptr;
  void consumed();  // after a receive is taken: fires the limit event
};

// A send WQE: the head of its send queue slot (SimQp::sq_at), followed in the slot by its SGEs
// and its inline room. 48 bytes, so that a slot with one SGE and no inline room is 64 bytes:
// a batch of n WRs writes n + 1 lines (the ring is 16-byte aligned; aligning it to a line would
// cost about 30 bytes per QP, 496 in the worst case against the 512 target). What only some
// opcodes use shares room: UD has no remote buffer and keeps its destination there; an
// atomic's operands sit apart (SimQp::sq_atomic).
// A send WQE. A BIND_MW keeps the window's address in remote_addr, its new key in rkey, the
// MR's lkey in imm and the rest in its BindOperands; LOCAL_INV and SEND_WITH_INV keep the key
// to invalidate in imm.
struct SendWqe {
  std::uint64_t wr_id;
  union {
    std::uint64_t remote_addr;  // RDMA, atomics
    struct {
      std::uint32_t remote_qpn;
      std::uint32_t remote_qkey;
    } ud;
  };
  union {
    std::uint32_t rkey;    // RDMA, atomics
    std::int32_t dst_dev;  // UD: resolved from the AH
  };
  std::uint32_t length;  // total bytes
  std::uint32_t num_sge;
  std::uint32_t imm;
  std::uint32_t psn;
  SendFlags flags;
  WrOpcode opcode;
  bool signaled;
  bool inlined;
  // Sent, and an MR its SGEs name was deregistered or re-registered before it arrived
  // (SimQp::mr_changed): on arrival it may not touch them.
  bool buffers_gone;
};
static_assert(sizeof(SendWqe) == 48);

// The operands of an atomic WR, kept beside the send queue's slots rather than in them.
struct AtomicOperands {
  std::uint64_t compare_add;
  std::uint64_t swap;
};

// The rest of a BIND_MW, in the same place as an atomic's operands.
struct BindOperands {
  std::uint64_t length;
  std::uint32_t mw_key;  // the window's key when the bind was posted
  Access access;
};
static_assert(sizeof(BindOperands) == sizeof(AtomicOperands));

}  // namespace verbsim::sim
