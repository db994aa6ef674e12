// Port counters (verbsim/sim/port_counters.hpp): the traffic part, counted through the
// observers' branches once World::count_port_traffic() is called. The error counters are kept
// where the transport meets each case (responder.cpp, completer.cpp, requester.cpp,
// faults/timed.cpp).
#include "fabric/world_impl.hpp"
#include "resources/cq_core.hpp"
#include "transport/qp.hpp"
#include "transport/wire.hpp"

namespace verbsim::sim {

void World::Impl::count_port_traffic() {
  wire_counters_.clear();
  for (const auto& d : devs_) {
    for (PortCore& p : d->ports) wire_counters_.push_back(&p.counters);
  }
  counting_ = true;
  start_observing();
}

void World::Impl::count_packet(const Event& e, PacketFate fate) {
  PortHwCounters& out = *wire_counters_[e.wire];
  if (fate == PacketFate::link_down) [[unlikely]] {
    const std::size_t ports = static_cast<std::size_t>(config_.ports_per_device);
    if (!port_up(static_cast<std::uint32_t>(e.wire / ports),
                 static_cast<std::uint8_t>(e.wire % ports + 1))) {
      ++out.xmit_discards;  // never left its port
      return;
    }
  }
  // The requester: the sender of a request, the receiver of a response. Its WQE says what data
  // the packet carries, and its path MTU how many packets that is on the wire.
  const bool request = e.kind == EvKind::deliver;
  SimQp* req = request ? find_qp(e.src_dev, e.src_qpn) : find_qp(e.dev, e.qpn);
  std::uint64_t bytes = 0;
  std::uint64_t packets = 1;
  if (req != nullptr && req->holds_wqe(e.index)) [[likely]] {
    const SendWqe& wq = req->sq_at(e.index);
    const bool ack = e.kind == EvKind::ack;
    if (request ? wq.opcode != WrOpcode::rdma_read && !is_atomic(wq.opcode)
                : ack && wq.opcode == WrOpcode::rdma_read) {
      bytes = wq.length;  // a SEND's or WRITE's payload, a READ's response
    } else if (ack && is_atomic(wq.opcode)) {
      bytes = 8;  // an atomic's original value
    }
    if (bytes > 256) {  // the smallest MTU: nothing shorter is more than one packet
      const std::uint32_t mtu = req->wire_mtu();
      if (bytes > mtu) packets = (bytes + mtu - 1) / mtu;
    }
  }
  // Each packet's data padded to 4 bytes: MTUs are multiples of 4, so only the last pads.
  const std::uint64_t words = (bytes + 3) / 4;
  out.xmit_packets += packets;
  out.xmit_words += words;
  if (fate == PacketFate::dropped || fate == PacketFate::link_down) return;
  // The receiver: the responder QP of a request, the requester of a response.
  SimQp* to = request ? find_qp(e.dev, e.qpn) : req;
  PortHwCounters& in = to != nullptr ? to->port_counters() : devs_[e.dev]->ports[0].counters;
  const std::uint64_t copies = fate == PacketFate::duplicated ? 2 : 1;
  in.rcv_packets += copies * packets;
  in.rcv_words += copies * words;
}

void World::Impl::count_completion(const CqEntry& e) {
  if (e.wc.status != WcStatus::success || e.qp == nullptr) return;
  if (!e.send) {
    ++e.qp->port_counters().rdma_recvs;
  } else if (e.wc.opcode == WcOpcode::send) {
    ++e.qp->port_counters().rdma_sends;
  }
}

void World::Impl::count_cm(const CmRecord& r) {
  // A MAD: 256 bytes on QP 1.
  constexpr std::uint64_t kMadWords = 256 / 4;
  if (r.src_dev < devs_.size()) {
    DevCore& from = *devs_[r.src_dev];
    PortHwCounters& out = from.ports[port_index(from, r.src_port)].counters;
    if (r.fate == PacketFate::link_down && !port_up(r.src_dev, r.src_port)) {
      ++out.xmit_discards;
      return;
    }
    ++out.xmit_packets;
    out.xmit_words += kMadWords;
  }
  if (r.fate != PacketFate::delivered || r.dst_dev >= devs_.size()) return;
  DevCore& to = *devs_[r.dst_dev];
  PortHwCounters& in = to.ports[port_index(to, r.dst_port)].counters;
  ++in.rcv_packets;
  in.rcv_words += kMadWords;
}

void World::count_port_traffic() { impl_->count_port_traffic(); }

PortHwCounters World::port_counters(int dev, int port) const {
  const auto& devs = impl_->devices();
  if (dev < 0 || static_cast<std::size_t>(dev) >= devs.size()) return {};
  const DevCore& d = *devs[static_cast<std::size_t>(dev)];
  if (port < 1 || static_cast<std::size_t>(port) > d.ports.size()) return {};
  return d.ports[static_cast<std::size_t>(port) - 1].counters;
}

}  // namespace verbsim::sim
