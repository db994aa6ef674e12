// A world's side of a fabric shared with other processes (Config::fabric, VERBSIM_FABRIC).
//
// Every process of the fabric runs a world with the same devices; a QP lives in the process
// that made it, and its number is unique in the fabric (SharedFabric::take_qpn). A packet for
// a QP this world does not have is handed over, when it arrives, to the process that owns it
// (hand_over), as a parcel that carries what the packet would: the message's WQE fields and its
// payload, or a READ's or atomic's result. There it waits on the event heap until its time
// (run_parcel), and the responder executes it against a stand-in for the requester (a SimQp
// holding just the send-queue slots the parcels filled), so the transport is the same code for
// both cases.
//
// Time: a world runs no event later than SharedFabric::safe_time(); after each step it
// publishes how early it may still send (publish_bound). A program that waits in the library
// (passive) sends only when events make it; one that runs may post at any moment, a link
// latency from now. A parcel whose time this world has passed (its program posted after a
// passive spell) runs at once: times stay consistent (nothing arrives before it was sent) but
// are not reproducible across runs. docs/MULTIPROCESS.md says what is.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cm/fabric.hpp"
#include "fabric/shared_fabric.hpp"
#include "resources/cq_core.hpp"
#include "fabric/world_impl.hpp"
#include "transport/qp.hpp"
#include "transport/user_memory.hpp"
#include "transport/wire.hpp"

namespace verbsim::sim {

namespace {

// What crosses between processes: the packet's event (its first 8 bytes are its time, as
// SharedFabric needs), and for a message the fields of its WQE; `payload` bytes follow.
struct Parcel {
  Event event;
  SendWqe wqe;              // deliver
  AtomicOperands atomic;    // deliver of an atomic
  std::uint32_t payload;    // deliver: SEND or WRITE data; ack: a READ's data or atomic's value
  QpType type;              // deliver: the requester's QP type
  // deliver: the message's first PSN on the wire and its packets, as the sending world's
  // observers numbered them (packets 0: it has none), for the answering world's.
  std::uint32_t wire_psn;
  std::uint32_t wire_packets;
};
static_assert(offsetof(Parcel, event) == 0 && offsetof(Event, time) == 0);

constexpr std::uint32_t kStandInSlots = 1024;  // SimQp's stand-in constructor
constexpr std::uint64_t kNotWaitingNs = 1'000'000;  // shared_step
// A passive bound this far from now lets the others run ahead by more than an RC timeout of
// 67 ms (timeout 14, perftest's and the pingpongs'): catch_up moves the program's clock.
// Nearer bounds (a retransmission timer's) cost at most a spurious retry.
constexpr std::uint64_t kLetRunNs = 100'000'000;

std::uint64_t stand_in_key(std::uint32_t dev, std::uint32_t qpn) noexcept {
  return static_cast<std::uint64_t>(dev) << 32 | qpn;
}

// Why a packet's parcel of `bytes` bytes cannot be one a process of this fabric sent, or
// nullptr. Everything read from the shared file is checked before it is used: the devices it
// names exist here, its QP type and opcode are values, its payload is what it says and no
// larger than a parcel carries (a READ's length included: its response comes back in one).
const char* parcel_fault(const Parcel& p, std::size_t bytes, std::size_t devices) noexcept {
  const Event& e = p.event;
  if (e.dev >= devices) return "a packet's parcel for a device this fabric has not";
  if (p.payload != bytes - sizeof p) return "a packet's parcel whose payload is not its size";
  if (p.payload > SharedFabric::max_payload()) return "a packet's parcel larger than a parcel";
  if (e.kind != EvKind::deliver) return nullptr;
  if (e.src_dev >= devices) return "a packet's parcel from a device this fabric has not";
  if (p.type != QpType::rc && p.type != QpType::uc && p.type != QpType::ud) {
    return "a packet's parcel of no QP type";
  }
  if (p.wqe.opcode > WrOpcode::send_with_inv) return "a packet's parcel of no opcode";
  if (p.wqe.length > SharedFabric::max_payload()) return "a packet's parcel of a message larger than a parcel";
  const bool data = !is_read_or_atomic(p.wqe.opcode);
  if (data && !p.wqe.buffers_gone && p.payload != p.wqe.length) {
    return "a packet's parcel whose payload is not its message's length";
  }
  return nullptr;
}

}  // namespace

struct FabricLink {
  FabricLink(const std::string& name, int devices) : fabric(name, devices) {}
  SharedFabric fabric;
  struct StandIn {
    std::unique_ptr<SimQp> qp;
    std::vector<std::vector<std::uint8_t>> data{kStandInSlots};  // by slot
  };
  std::unordered_map<std::uint64_t, StandIn> stand_ins;  // by device and QPN
  std::vector<std::vector<std::uint8_t>> parcels;         // waiting, by Event::index
  std::vector<std::uint32_t> free_parcels;
  std::vector<std::uint8_t> scratch;  // a message's gathered payload
  std::vector<const CqCore*> cqs;  // the live CQs' (World::Impl::note_cq and forget_cq)
  std::uint64_t safe = 0;             // the last SharedFabric::safe_time
  std::uint64_t floor = 0;            // the program acts at this time or later (catch_up)
  bool passive = false;
  bool let_run = false;  // a bound far from now was published since the program last acted
  bool warned_large = false;
  bool left = false;
  bool corrupt = false;  // left_corrupt_fabric ran
};

void FabricLinkDeleter::operator()(FabricLink* l) const noexcept { delete l; }

SharedFabric* World::Impl::shared_fabric() noexcept {
  return link_ != nullptr ? &link_->fabric : nullptr;
}

void World::Impl::note_cq(const CqCore* cq) { link_->cqs.push_back(cq); }

void World::Impl::forget_cq(const CqCore* cq) noexcept {
  if (link_ != nullptr) std::erase(link_->cqs, cq);
}

namespace {
// Whether the program has taken everything the world gave it: no completion waits in a CQ,
// no event on a CM channel. Only then may a world be passive (SharedFabric::publish): a
// program that still has something to take may act on it at once.
bool all_taken(const FabricLink& l, const CmFabric* cm) {
  // Plain pointers, not weak ones: a weak_ptr's lock() is two locked read-modify-writes on
  // a count the progress thread's polls write too, and this runs at every empty poll.
  for (const CqCore* cq : l.cqs) {
    if (cq->count != 0) return false;
  }
  if (cm != nullptr) {
    for (const CmNode& n : cm->nodes) {
      if (n.alive && n.ch != nullptr && !n.ch->events.empty()) return false;
    }
  }
  return true;
}
}  // namespace

SimQp* World::Impl::stand_in(std::uint32_t dev, std::uint32_t qpn) noexcept {
  if (link_ == nullptr) return nullptr;
  const auto it = link_->stand_ins.find(stand_in_key(dev, qpn));
  return it != link_->stand_ins.end() ? it->second.qp.get() : nullptr;
}

void World::Impl::join_fabric() {
  link_.reset(new FabricLink(config_.fabric, static_cast<int>(devs_.size())));
  now_ = link_->fabric.clock_of_others();  // one clock: a world that joins starts there
  poll_slow_ = true;
  publish_bound();
}

void World::Impl::leave_fabric() {
  // A child's copy of its parent's world is no member (SharedFabric::detach_after_fork).
  if (link_ == nullptr || link_->left || link_->fabric.detached()) return;
  // A device answers what it received at once; a program that exits right after its last
  // completion must not take those ACKs with it. A few link latencies of virtual time, within
  // 200 ms of wall time (the others may be slow to let time pass).
  const std::uint64_t end = now_ + 10 * config_.link_latency_ns;
  const auto start = std::chrono::steady_clock::now();
  try {
    while (now_ < end && std::chrono::steady_clock::now() - start < std::chrono::milliseconds(200)) {
      shared_run_until(end, /*pace=*/false);
      if (now_ < end) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  } catch (...) {
    // A budget that ran out: leave all the same.
  }
  link_->left = true;
  link_->fabric.leave();
}

std::uint32_t World::Impl::take_qpn(const DevCore& dev) {
  return link_->fabric.take_qpn(dev.index);
}

void World::Impl::give_back_qpn(const DevCore& dev, std::uint32_t qpn) noexcept {
  link_->fabric.give_back_qpn(dev.index, qpn);
}

void World::Impl::publish_bound() {
  const std::uint64_t next = next_busy_time();
  // The program posts no earlier than the floor (catch_up), so its posts arrive no sooner
  // than the floor plus a link latency.
  const std::uint64_t base = std::max(now_, link_->floor);
  const std::uint64_t bound =
      link_->passive ? next : std::min(next, base + config_.link_latency_ns);
  // A passive bound far from now (its next event a long time away, or none) lets the others
  // run that far ahead: the program's next verb catches up (catch_up).
  link_->let_run = link_->let_run || (link_->passive && bound > now_ + kLetRunNs);
  link_->fabric.publish(now_, bound, next);
}

void World::Impl::catch_up() {
  FabricLink& l = *link_;
  if (l.let_run) [[unlikely]] {
    // While this world was passive its bound was its next event, far away or "never", and the
    // others may have run far ahead. What the program sends now must not reach them in their
    // past: its peer would answer at its present, after the program's timers (its retries)
    // ran out. The program acts at the others' present, or as near as is safe now.
    l.let_run = false;
    // shared_run_until stops at the safe time it reads: it never waits for the others.
    const std::uint64_t present = l.fabric.clock_of_others();
    if (present > now_) shared_run_until(present, /*pace=*/false);
  }
  if (now_ >= l.floor) return;
  // Events up to the floor run first; the others may still be short of it (spin: they are
  // running, as their bound lets them pass it).
  for (int spins = 0; now_ < l.floor; ++spins) {
    shared_run_until(l.floor, /*pace=*/false);
    if (now_ < l.floor && spins > 64) std::this_thread::yield();
  }
}

void World::Impl::fabric_corrupt(const std::string& what) {
  if (link_ != nullptr) link_->fabric.set_corrupt(what);
}

void World::Impl::left_corrupt_fabric() {
  FabricLink& l = *link_;
  l.corrupt = true;
  std::fprintf(stderr,
               "verbsim: fabric %s is corrupt: %s. This process leaves it: the other "
               "processes are unreachable from it from now on (its QPs' requests to them time "
               "out, its connections to them are disconnected), and it from them.\n",
               l.fabric.path().c_str(), l.fabric.corrupt().c_str());
  l.fabric.leave();
  if (cm_ != nullptr) {
    for (int s = 0; s < SharedFabric::kSlots; ++s) cm_->peer_gone(s);
  }
}

void World::Impl::catch_up_quietly() noexcept {
  try {
    catch_up();
  } catch (...) {
    // A budget that ran out: the next call that runs the world reports it.
  }
}

void World::Impl::take_parcels() {
  FabricLink& l = *link_;
  l.fabric.drain(
      [&](const void* p, std::size_t bytes) {
        std::uint32_t slot;
        if (l.free_parcels.empty()) {
          slot = static_cast<std::uint32_t>(l.parcels.size());
          l.parcels.emplace_back();
        } else {
          slot = l.free_parcels.back();
          l.free_parcels.pop_back();
        }
        const auto* b = static_cast<const std::uint8_t*>(p);
        Event head;  // a packet's Parcel or a CM message's (cm/remote.cpp) starts with it
        if (bytes < sizeof head) {
          fabric_corrupt("a parcel shorter than its header");
          l.free_parcels.push_back(slot);
          return;
        }
        std::memcpy(&head, b, sizeof head);
        if (head.kind != EvKind::cm && head.kind > EvKind::nak) {
          fabric_corrupt("a parcel of kind " + std::to_string(static_cast<int>(head.kind)));
          l.free_parcels.push_back(slot);
          return;
        }
        l.parcels[slot].assign(b, b + bytes);
        Event e{};
        e.time = std::max(now_, head.time);  // late: its sender's program ran ahead
        e.kind = EvKind::parcel;
        e.dev = head.dev;
        e.qpn = head.qpn;
        e.index = slot;
        schedule(e);
      },
      [&] { publish_bound(); });  // before their room is freed: SharedFabric::safe_time
}

bool World::Impl::shared_step(std::uint64_t limit, bool passive, bool may_throw) {
  FabricLink& l = *link_;
  // A program with something still to take acts at once: this world neither promises to be
  // quiet nor lets its clock run to the others' next event.
  if (!l.corrupt && !l.fabric.corrupt().empty()) [[unlikely]] left_corrupt_fabric();
  const bool waiting = all_taken(l, cm_.get());
  l.passive = passive && waiting;
  l.safe = l.fabric.safe_time(config_.link_latency_ns);
  if (const std::uint32_t gone = l.fabric.take_newly_gone(); gone != 0) [[unlikely]] {
    // Their connections here are disconnected, as their kernels' CM does for a process that
    // ends (CmFabric::peer_gone).
    for (int s = 0; s < SharedFabric::kSlots; ++s) {
      if ((gone & 1u << s) != 0 && cm_ != nullptr) cm_->peer_gone(s);
    }
  }
  take_parcels();
  const std::uint64_t until = std::min(limit, l.safe);
  bool ran;
  if (budgeted_) {
    ran = budgeted_step(until, may_throw);
  } else {
    ran = plain_step_until(until);
  }
  if (ran) {
    // What ran may have completed work: the program may post as soon as it sees it.
    l.passive = false;
  } else {
    // Nothing to run: time passes as far as another process has something to do (and may),
    // so that this process's bound lets it. A program with something still to take moves
    // on at once, or never takes it: its clock goes at most kNotWaitingNs a step, as if it
    // computed.
    std::uint64_t to = std::min(until, l.fabric.others_next());
    if (!waiting) to = std::min(to, now_ + kNotWaitingNs);
    if (to != UINT64_MAX && to > now_) now_ = to;
  }
  publish_bound();
  return ran;
}

void World::Impl::shared_run_until(std::uint64_t deadline, bool pace) {
  // Time passes for a program that computes too: it acts next at the deadline or later
  // (catch_up), which the bound tells the others at once, so that they need not creep up a
  // link latency at a time meanwhile.
  if (pace && deadline != UINT64_MAX) link_->floor = std::max(link_->floor, deadline);
  while (shared_step(deadline, /*passive=*/false, /*may_throw=*/true)) {
  }
  // Time passes up to the deadline, as far as the other processes allow (wall-clock pacing:
  // the program computes, its clock moves).
  const std::uint64_t to = std::min(deadline, link_->safe);
  if (to > now_ && to != UINT64_MAX) now_ = to;
  publish_bound();
}

void World::Impl::hand_over(const Event& e) {
  if (e.kind > EvKind::nak) return;  // a timer of a QP that is gone
  FabricLink& l = *link_;
  const int owner = l.fabric.remote_owner(e.dev, e.qpn);
  if (owner < 0) return;  // no such QP anywhere: lost, as on a real fabric
  Parcel p{};
  p.event = e;
  const std::uint8_t* data = nullptr;
  std::size_t length = 0;
  if (e.kind == EvKind::deliver) {
    SimQp* req = find_qp(e.src_dev, e.src_qpn);
    if (req == nullptr || req->epoch() != e.epoch || !req->holds_wqe(e.index)) return;
    const SendWqe& wq = req->sq_at(e.index);
    p.wqe = wq;
    p.type = req->type();
    if (is_atomic(wq.opcode)) p.atomic = req->sq_atomic(e.index);
    if (observing_) {
      if (const wire::Message* m = numbers_.message(e.src_dev, e.src_qpn, wq.psn)) {
        p.wire_psn = m->wire;
        p.wire_packets = m->packets;
      }
    }
    if (wq.length > SharedFabric::max_payload()) {
      // Its data, or a READ's response, would not fit a parcel.
      if (!l.warned_large) {
        std::fprintf(stderr, "verbsim: fabric: a message of %u bytes to a QP of another "
                     "process is lost: a shared fabric carries %zu bytes a message at most\n",
                     wq.length, SharedFabric::max_payload());
        l.warned_large = true;
      }
      return;
    }
    if (!is_read_or_atomic(wq.opcode) && !wq.buffers_gone && wq.length > 0) {
      if (wq.inlined) {
        data = req->sq_inline(e.index);
      } else {
        l.scratch.resize(wq.length);
        gather_to(l.scratch.data(), req->sq_sge(e.index), wq.num_sge);
        if (user_memory::faulted()) [[unlikely]] report_unmapped();
        data = l.scratch.data();
      }
      length = wq.length;
    }
  } else if (e.kind == EvKind::ack) {
    // A READ's or atomic's response carries the result the responder left in the stand-in.
    const auto it = l.stand_ins.find(stand_in_key(e.dev, e.qpn));
    if (it != l.stand_ins.end()) {
      SimQp& s = *it->second.qp;
      const SendWqe& wq = s.sq_at(e.index);
      if (s.holds_wqe(e.index) && s.epoch() == e.epoch && is_read_or_atomic(wq.opcode)) {
        data = it->second.data[e.index % kStandInSlots].data();
        length = wq.opcode == WrOpcode::rdma_read ? wq.length : 8;
      }
    }
  }
  p.payload = static_cast<std::uint32_t>(length);
  l.fabric.send(owner, &p, sizeof p, data, length);
}

void World::Impl::run_parcel(const Event& e) {
  FabricLink& l = *link_;
  std::vector<std::uint8_t> bytes = std::move(l.parcels[e.index]);
  l.free_parcels.push_back(e.index);
  Event head;
  std::memcpy(&head, bytes.data(), sizeof head);
  if (head.kind == EvKind::cm) {
    if (cm_ != nullptr) cm_->take_parcel(bytes.data(), bytes.size());
    return;
  }
  Parcel p;
  if (bytes.size() < sizeof p) return fabric_corrupt("a packet's parcel shorter than its header");
  std::memcpy(&p, bytes.data(), sizeof p);
  if (const char* why = parcel_fault(p, bytes.size(), devs_.size())) return fabric_corrupt(why);
  const std::uint8_t* data = bytes.data() + sizeof p;
  Event m = p.event;
  m.time = now_;
  if (faults_.links_changed() && !port_up(m.dev, 1)) return;  // down
  SimQp* qp = find_qp(m.dev, m.qpn);
  if (qp == nullptr) return;  // destroyed meanwhile: lost
  if (m.kind == EvKind::deliver) {
    auto [it, made] = l.stand_ins.try_emplace(stand_in_key(m.src_dev, m.src_qpn));
    FabricLink::StandIn& s = it->second;
    if (made) s.qp = std::make_unique<SimQp>(SimQp::StandIn{}, *this, *devs_[m.src_dev], m.src_qpn);
    std::vector<std::uint8_t>& buffer = s.data[m.index % kStandInSlots];
    // An atomic sent again (its response was lost; the requester's retry is a new epoch) is a
    // duplicate the responder does not execute again: its response carries the result of the
    // first execution, which is in the slot still (in one process it is in the requester's
    // SGEs already). A READ sent again reads the memory again (SimQp::reread). Any request
    // the responder executes overwrites the slot.
    const bool again = is_atomic(p.wqe.opcode) && !made && s.qp->holds_wqe(m.index) &&
                       s.qp->sq_at(m.index).psn == p.wqe.psn &&
                       s.qp->sq_at(m.index).opcode == p.wqe.opcode;
    // A READ brings no data: its slot keeps what it holds, the response of the READ's first
    // execution (a copy of the READ may come while that response is still on its way, and
    // find this QP in ERR: it must not empty the response). The READ's execution writes it.
    if (!again && p.wqe.opcode != WrOpcode::rdma_read) buffer.assign(data, data + p.payload);
    buffer.resize(std::max<std::size_t>({buffer.size(), p.wqe.length, 8}));
    s.qp->load_stand_in(m.index, m.epoch, p.type, p.wqe, p.atomic, buffer.data(), m.qpn);
    if (observing_) {
      // The responder's observers number its responses as the requester's numbered the
      // request (the capture's PSNs and MSNs).
      PacketRecord r = blank_packet_;
      r.kind = PacketKind::request;
      r.qp_type = p.type;
      r.src_dev = m.src_dev;
      r.src_qpn = m.src_qpn;
      r.dst_dev = m.dev;
      r.dst_qpn = m.qpn;
      r.psn = p.wqe.psn;
      numbers_.arrived(r, {p.wqe.psn, p.wire_psn, p.wire_packets, true});
    }
    qp->on_deliver_from(m, *s.qp);
    if (user_memory::faulted()) [[unlikely]] report_unmapped();
    return;
  }
  if (m.kind == EvKind::ack && qp->awaits_response(m)) {
    // The response's data lands in the requester's buffers, as the responder wrote it in one
    // process (SimQp::execute_read, execute_atomic), and only if it is the response the READ
    // or atomic waits for: not a late copy of one already taken (whose buffers are the
    // program's again), nor one that passes a READ whose response was lost (on_ack sends
    // again from that one). A response that came without its data is lost: the READ must not
    // complete without it.
    const SendWqe& wq = qp->sq_at(m.index);
    const std::uint32_t want = wq.opcode == WrOpcode::rdma_read ? wq.length : 8;
    if (p.payload != want) return;
    if (!wq.buffers_gone) {
      scatter(qp->sq_sge(m.index), wq.num_sge, data, p.payload);
      if (user_memory::faulted()) [[unlikely]] report_unmapped();
    }
  }
  if (m.kind == EvKind::ack) {
    qp->on_ack(m);
  } else if (m.kind == EvKind::nak) {
    qp->on_nak(m);
  }
}

}  // namespace verbsim::sim
