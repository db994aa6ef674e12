// Port counters (verbsim/sim/port_counters.hpp): the traffic part, counted through the
// observers' branches once World::count_port_traffic() is called. The error counters are kept
// where the transport meets each case (responder.cpp, completer.cpp, requester.cpp,
// faults/timed.cpp).
#include "fabric/world_impl.hpp"
#include "transport/qp.hpp"
#include "transport/wire.hpp"

namespace verbsim::sim {

void World::Impl::count_port_traffic() {
  counting_ = true;
  start_observing();
}

void World::Impl::count_packet(const Event& e, PacketFate fate) {
  const std::size_t ports = static_cast<std::size_t>(config_.ports_per_device);
  const std::size_t src_dev = e.wire / ports;
  const auto src_port = static_cast<std::uint8_t>(e.wire % ports + 1);
  if (src_dev >= devs_.size()) return;
  PortCore& out = devs_[src_dev]->ports[e.wire % ports];
  if (fate == PacketFate::link_down && !port_up(static_cast<std::uint32_t>(src_dev), src_port)) {
    ++out.counters.xmit_discards;  // never left its port
    return;
  }
  // The data the packet carries, and the MTU its requester's messages are cut by.
  const bool request = e.kind == EvKind::deliver;
  SimQp* req = request ? find_qp(e.src_dev, e.src_qpn) : find_qp(e.dev, e.qpn);
  std::uint64_t bytes = 0;
  std::uint32_t mtu = 0;
  if (req != nullptr && req->holds_wqe(e.index)) {
    const SendWqe& wq = req->sq_at(e.index);
    const bool data_request = wq.opcode != WrOpcode::rdma_read && !is_atomic(wq.opcode);
    if (request && data_request) {
      bytes = wq.length;
    } else if (e.kind == EvKind::ack && wq.opcode == WrOpcode::rdma_read) {
      bytes = wq.length;  // the READ's response
    } else if (e.kind == EvKind::ack && is_atomic(wq.opcode)) {
      bytes = 8;  // the original value
    }
    mtu = req->wire_mtu();
  }
  const std::uint64_t packets = mtu != 0 && bytes > mtu ? (bytes + mtu - 1) / mtu : 1;
  // Each packet's data padded to 4 bytes: MTUs are multiples of 4, so only the last pads.
  const std::uint64_t words = (bytes + 3) / 4;
  out.counters.xmit_packets += packets;
  out.counters.xmit_words += words;
  if (fate == PacketFate::dropped || fate == PacketFate::link_down) return;
  if (e.dev >= devs_.size()) return;
  DevCore& to = *devs_[e.dev];
  const SimQp* qp = to.qps.find(e.qpn);
  PortCore& in = to.ports[port_index(to, qp != nullptr ? qp->port_num() : 1)];
  const std::uint64_t copies = fate == PacketFate::duplicated ? 2 : 1;
  in.counters.rcv_packets += copies * packets;
  in.counters.rcv_words += copies * words;
}

void World::Impl::count_completion(const CompletionRecord& r) {
  if (r.wc.status != WcStatus::success || r.dev >= devs_.size()) return;
  SimQp* qp = find_qp(r.dev, r.wc.qp_num);
  if (qp == nullptr) return;
  if (!r.send) {
    ++qp->port_counters().rdma_recvs;
  } else if (r.wc.opcode == WcOpcode::send) {
    ++qp->port_counters().rdma_sends;
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
