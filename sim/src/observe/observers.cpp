// What observers are told (verbsim/sim/observe.hpp): packets described from the event on the
// wire and the requester's WQE, completions, posts and instants. Runs only while a world has
// an observer.
#include <algorithm>
#include <cstring>
#include <string>

#include "fabric/world_impl.hpp"
#include "transport/memory_keys.hpp"
#include "transport/qp.hpp"
#include "transport/user_memory.hpp"
#include "transport/wire.hpp"

namespace verbsim::sim {

std::string_view to_string(PacketKind k) noexcept {
  switch (k) {
    case PacketKind::request: return "request";
    case PacketKind::ack: return "ack";
    case PacketKind::nak: return "nak";
    case PacketKind::read_response: return "read_response";
    case PacketKind::atomic_response: return "atomic_response";
  }
  return "unknown";
}

std::string_view to_string(NakCode c) noexcept {
  switch (c) {
    case NakCode::rnr: return "rnr";
    case NakCode::psn_seq: return "psn_seq";
    case NakCode::rem_access: return "rem_access";
    case NakCode::inv_req: return "inv_req";
    case NakCode::rem_op: return "rem_op";
  }
  return "unknown";
}

std::string_view to_string(PacketFate f) noexcept {
  switch (f) {
    case PacketFate::delivered: return "delivered";
    case PacketFate::delayed: return "delayed";
    case PacketFate::duplicated: return "duplicated";
    case PacketFate::dropped: return "dropped";
    case PacketFate::link_down: return "link_down";
  }
  return "unknown";
}

static_assert(static_cast<int>(NakCode::rem_op) == static_cast<int>(Nak::rem_op) &&
              static_cast<int>(NakCode::psn_seq) == static_cast<int>(Nak::psn_seq));

void World::Impl::add_observer(Observer* o, Takes takes) {
  observers_.push_back(o);
  if (takes == Takes::everything) wr_observers_.push_back(o);
  if (recorder_ == nullptr) recorder_ = dynamic_cast<const FlightRecorder*>(o);
  start_observing();
}

void World::Impl::start_observing() {
  observing_ = true;
  faults_.observe(
      [](void* world, Verb verb, std::uint32_t qpn, const DevCore* dev, int err) {
        static_cast<World::Impl*>(world)->observe_verb_fault(verb, qpn, dev, err);
      },
      this);
}

void World::Impl::own_observer(std::unique_ptr<Observer> o, Takes takes) {
  add_observer(o.get(), takes);
  owned_observers_.push_back(std::move(o));
}

void World::Impl::finish_observers() {
  for (Observer* o : observers_) o->finished(now_);
}

void World::Impl::observe_cm(const CmRecord& r) {
  if (counting_) count_cm(r);
  for (Observer* o : observers_) o->cm(r);
}

void World::Impl::observe_instant(std::uint16_t dev, std::uint32_t qpn, std::string_view what) {
  if (observers_.empty()) return;
  const InstantRecord r{now_, dev, qpn, what};
  for (Observer* o : observers_) o->instant(r);
}

void World::Impl::observe_verb_fault(Verb verb, std::uint32_t qpn, const DevCore* dev, int err) {
  const std::string what = "fault: " + std::string(to_string(verb)) + " fails with errno " +
                           std::to_string(err);
  observe_instant(dev != nullptr ? static_cast<std::uint16_t>(dev->index) : 0, qpn, what);
}

namespace {

// Copies the first `len` bytes an SGE list names (checked by the requester: response_written)
// to the start of `out`, which grows to hold them and never shrinks; returns how many there
// were. Pages the program unmapped meanwhile read as zeros (transport/user_memory.hpp).
std::size_t gather(std::vector<std::uint8_t>& out, const Sge* sges, std::uint32_t n,
                   std::uint64_t len) {
  const user_memory::Touching touching;
  if (out.size() < len) out.resize(len);
  std::uint64_t have = 0;
  for (std::uint32_t i = 0; i < n && have < len; ++i) {
    const std::uint64_t k = std::min<std::uint64_t>(sges[i].length, len - have);
    if (k != 0) std::memcpy(out.data() + have, reinterpret_cast<const void*>(sges[i].addr), k);
    have += k;
  }
  return have;
}

}  // namespace

void World::Impl::observe_packet(const Event& e, std::uint32_t psn, PacketFate fate,
                                 std::uint64_t arrives, std::uint64_t duplicate_at) {
  PacketRecord r = blank_packet_;
  r.sent_ns = now_;
  r.arrives_ns = arrives;
  r.duplicate_ns = duplicate_at;
  r.fate = fate;
  const std::size_t ports = static_cast<std::size_t>(config_.ports_per_device);
  r.src_dev = static_cast<std::uint16_t>(e.wire / ports);
  r.src_port = static_cast<std::uint8_t>(e.wire % ports + 1);
  r.dst_dev = e.dev;
  r.dst_qpn = e.qpn;
  std::size_t payload_bytes = 0;  // in payload_
  // The requester: the sender of a request, the receiver of a response.
  const bool request = e.kind == EvKind::deliver;
  SimQp* req = request ? find_qp(e.src_dev, e.src_qpn) : find_qp(e.dev, e.qpn);
  // A response to a requester of another process: its stand-in here holds the request.
  if (req == nullptr && !request && link_ != nullptr) req = stand_in(e.dev, e.qpn);
  const bool has_wqe = req != nullptr && req->holds_wqe(e.index);
  if (req != nullptr) r.qp_type = req->type();
  if (request) {
    r.kind = PacketKind::request;
    r.src_qpn = e.src_qpn;
    r.psn = psn;
    if (has_wqe) {
      const SendWqe& wq = req->sq_at(e.index);
      r.opcode = wq.opcode;
      r.length = wq.length;
      r.wr_id = wq.wr_id;
      r.solicited = any(wq.flags, SendFlags::solicited);
      r.imm = wq.imm;
      if (r.qp_type == QpType::ud) {
        r.qkey = wq.ud.remote_qkey;
      } else {
        r.remote_addr = wq.remote_addr;
        r.rkey = wq.rkey;
        if (is_atomic(wq.opcode)) {
          r.compare_add = req->sq_atomic(e.index).compare_add;
          r.swap = req->sq_atomic(e.index).swap;
        }
      }
      if (wq.opcode != WrOpcode::rdma_read && !is_atomic(wq.opcode)) {
        if (wq.inlined) {
          if (payload_.size() < wq.length) payload_.resize(wq.length);
          if (wq.length != 0) std::memcpy(payload_.data(), req->sq_inline(e.index), wq.length);
          payload_bytes = wq.length;
        } else {
          payload_bytes = gather(payload_, req->sq_sge(e.index), wq.num_sge, wq.length);
        }
      }
    }
  } else {
    r.src_qpn = req != nullptr ? req->peer_qpn() : 0;
    r.kind = e.kind == EvKind::nak ? PacketKind::nak : PacketKind::ack;
    if (e.kind == EvKind::nak) {
      r.nak = static_cast<NakCode>(e.code);
      r.rnr_timer = static_cast<std::uint8_t>(e.value);
    }
    if (has_wqe) {
      const SendWqe& wq = req->sq_at(e.index);
      r.opcode = wq.opcode;
      r.psn = wq.psn;
      r.wr_id = wq.wr_id;
      if (e.kind == EvKind::ack && wq.opcode == WrOpcode::rdma_read) {
        // The responder has written the data into the requester's buffers already.
        r.kind = PacketKind::read_response;
        r.length = wq.length;
        if (req->response_written(e.index)) {
          payload_bytes = gather(payload_, req->sq_sge(e.index), wq.num_sge, wq.length);
        } else {  // what the responder sent is not kept: zeros
          payload_.assign(std::max<std::size_t>(payload_.size(), wq.length), 0);
          payload_bytes = wq.length;
        }
      } else if (e.kind == EvKind::ack && is_atomic(wq.opcode)) {
        r.kind = PacketKind::atomic_response;
        r.length = 8;
        if (req->response_written(e.index) &&
            gather(payload_, req->sq_sge(e.index), wq.num_sge, 8) == 8) {
          std::memcpy(&r.atomic_original, payload_.data(), 8);
        }
      }
    }
  }
  const DevCore& src = *devs_[std::min<std::size_t>(r.src_dev, devs_.size() - 1)];
  r.src_gid = roce_gid(src, r.src_port);
  if (r.dst_dev < devs_.size()) {
    const DevCore& dst = *devs_[r.dst_dev];
    const SimQp* to = dst.qps.find(r.dst_qpn);
    r.dst_port = to != nullptr && to->port_num() != 0 ? to->port_num() : 1;
    r.dst_gid = roce_gid(dst, r.dst_port);
  }
  if (user_memory::faulted()) [[unlikely]] report_unmapped();
  r.payload = {payload_.data(), payload_bytes};
  numbers_.number(r);
  for (Observer* o : observers_) o->packet(r);
}

}  // namespace verbsim::sim
