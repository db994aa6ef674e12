#include "observe/wire_numbers.hpp"

#include <algorithm>

namespace verbsim::sim::wire {

Family family_of(const PacketRecord& r) noexcept {
  switch (r.kind) {
    case PacketKind::read_response: return Family::read_response;
    case PacketKind::ack:
    case PacketKind::nak:
    case PacketKind::atomic_response: return Family::other;
    case PacketKind::request: break;
  }
  switch (r.opcode) {
    case WrOpcode::send:
    case WrOpcode::send_with_imm:
    case WrOpcode::send_with_inv: return Family::send;
    case WrOpcode::rdma_write:
    case WrOpcode::rdma_write_with_imm: return Family::write;
    case WrOpcode::rdma_read: return Family::read;
    case WrOpcode::atomic_cmp_and_swp:
    case WrOpcode::atomic_fetch_and_add: return Family::atomic;
    case WrOpcode::local_inv:
    case WrOpcode::bind_mw: break;
  }
  return Family::other;
}

std::uint32_t packets_of(const PacketRecord& r, Family f, std::uint32_t mtu) noexcept {
  if (f == Family::other && r.kind == PacketKind::request) return 0;
  const bool carries_data = f == Family::send || f == Family::write || f == Family::read_response;
  if (!carries_data || r.qp_type == QpType::ud) return 1;
  return static_cast<std::uint32_t>(
      std::max<std::uint64_t>(1, (std::uint64_t{r.length} + mtu - 1) / mtu));
}

std::uint32_t wire_packets(const PacketRecord& r, Family f, std::uint32_t packets,
                           std::uint32_t mtu) noexcept {
  if (f != Family::read) return packets;
  return static_cast<std::uint32_t>(
      std::max<std::uint64_t>(1, (std::uint64_t{r.length} + mtu - 1) / mtu));
}

void Numbers::number(PacketRecord& r) {
  r.msn = msn_after(r);
  const Family f = family_of(r);
  const std::uint32_t n = packets_of(r, f);
  r.wire_psn = n == 0 ? r.psn : wire_psn(r, wire_packets(r, f, n));
}

const Message* Numbers::message(std::uint16_t dev, std::uint32_t qpn, std::uint32_t psn) {
  return qp(dev, qpn).find(psn);
}

void Numbers::arrived(const PacketRecord& r, const Message& m) {
  msn_after(r);  // the responder was given it
  if (m.packets == 0 || r.qp_type != QpType::rc) return;
  QpState& q = qp(r.src_dev, r.src_qpn);
  q.remember(m);
  if (!q.sent || later(m.psn, q.newest)) {
    if (!q.sent) q.acked = (m.psn - 1) & kPsnMask;
    q.sent = true;
    q.newest = m.psn;
    q.next_wire = (m.wire + m.packets) & kPsnMask;
  }
}

void Numbers::given(QpState& q, std::uint32_t psn) {
  if (!q.given) {
    q.last_new_psn = psn;
    q.msn = 1;
    q.given = true;
  } else if (later(psn, q.last_new_psn)) {
    q.last_new_psn = psn;
    q.msn = (q.msn + 1) & kPsnMask;
  }
}

std::uint32_t Numbers::msn_after(const PacketRecord& r) {
  // A NAK of the last request counted takes it back: that request was not executed, and its
  // retry counts anew (rxe's RNR NAKs carry the MSN of the message before, each time).
  if (r.qp_type != QpType::rc) return 0;
  if (r.kind != PacketKind::request) {
    QpState& q = qp(r.src_dev, r.src_qpn);
    if (r.kind == PacketKind::nak && q.given && q.last_new_psn == r.psn) {
      q.last_new_psn = (r.psn - 1) & kPsnMask;
      q.msn = (q.msn - 1) & kPsnMask;
    }
    return q.msn;
  }
  const bool lost = r.fate == PacketFate::dropped || r.fate == PacketFate::link_down;
  if (!lost) given(qp(r.dst_dev, r.dst_qpn), r.psn);
  return 0;
}

const Message* Numbers::QpState::find(std::uint32_t psn) const noexcept {
  if (ring.empty()) return nullptr;
  const Message& m = ring[psn & (ring.size() - 1)];
  return m.used && m.psn == psn ? &m : nullptr;
}

void Numbers::QpState::grow_ring() {
  std::vector<Message> old(std::max<std::size_t>(16, ring.size() * 2));
  old.swap(ring);
  for (const Message& o : old) {
    if (o.used) ring[o.psn & (ring.size() - 1)] = o;
  }
}

std::uint32_t Numbers::wire_psn(const PacketRecord& r, std::uint32_t packets) {
  if (r.kind == PacketKind::request) {
    QpState& q = qp(r.src_dev, r.src_qpn);
    if (q.sent && !later(r.psn, q.newest)) {  // sent again: the PSNs it had
      const Message* m = q.find(r.psn);
      return m != nullptr ? m->wire : r.psn;
    }
    if (!q.sent) {  // the first message keeps the simulator's PSN
      q.sent = true;
      q.next_wire = r.psn;
      q.acked = (r.psn - 1) & kPsnMask;
    }
    const Message m{.psn = r.psn, .wire = q.next_wire, .packets = packets, .used = true};
    q.newest = r.psn;
    q.next_wire = (q.next_wire + m.packets) & kPsnMask;
    // Only RC sends a message again; UC and UD need no memory of their PSNs.
    if (r.qp_type == QpType::rc) q.remember(m);
    return m.wire;
  }
  // A response: the requester is its destination; its PSNs are those of the request.
  QpState& q = qp(r.dst_dev, r.dst_qpn);
  const Message* m = q.find(r.psn);
  if (m == nullptr) return r.psn;
  const bool lost = r.fate == PacketFate::dropped || r.fate == PacketFate::link_down;
  switch (r.kind) {
    case PacketKind::read_response: break;
    case PacketKind::nak:
      // The requester goes back to the NAK's PSN: a PSN sequence error names the message
      // expected, an RNR NAK the one refused, by their first packets.
      if (r.nak == NakCode::psn_seq || r.nak == NakCode::rnr) return m->wire;
      [[fallthrough]];
    case PacketKind::ack:
    case PacketKind::atomic_response:
    case PacketKind::request:
      if (!lost && r.kind != PacketKind::nak && later(r.psn, q.acked)) q.acked = r.psn;
      return (m->wire + m->packets - 1) & kPsnMask;
  }
  return m->wire;
}

Numbers::QpState& Numbers::add_qp(std::uint16_t dev, std::uint32_t qpn) {
  if (qpn >= kDirectQps) {  // any 24-bit number a UD packet names: kept apart, by hash
    const auto [it, added] =
        far_qps_.try_emplace(std::uint64_t{dev} << 32 | qpn, static_cast<std::uint32_t>(0));
    if (added) {
      qps_.emplace_back();
      it->second = static_cast<std::uint32_t>(qps_.size());
    }
    return qps_[it->second - 1];
  }
  if (dev >= qp_index_.size()) qp_index_.resize(dev + std::size_t{1});
  std::vector<std::uint32_t>& index = qp_index_[dev];
  if (qpn >= index.size()) index.resize(qpn + std::size_t{1}, 0);
  if (index[qpn] == 0) {
    qps_.emplace_back();
    index[qpn] = static_cast<std::uint32_t>(qps_.size());
  }
  return qps_[index[qpn] - 1];
}

}  // namespace verbsim::sim::wire
