// The numbers packets carry on the wire that the simulator does not keep: RoCE numbers packets
// (PSNs), the simulator numbers messages, and a responder's AETH carries a message sequence
// number (MSN). A world that has observers numbers each packet record once (PacketRecord::
// wire_psn, msn) for all of them; on a shared fabric a request's numbers travel with its
// parcel, so that the process that answers it numbers its responses as the requester's
// process numbered the request (fabric/multiprocess.cpp).
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "verbsim/sim/observe.hpp"

namespace verbsim::sim::wire {

// What messages are cut into packets by (the capture's path MTU).
inline constexpr std::uint32_t kMtu = 1024;
inline constexpr std::uint32_t kPsnMask = 0xffffff;

enum class Family { send, write, read, atomic, read_response, other };

Family family_of(const PacketRecord& r) noexcept;
// How many packets a message is cut into; 0 for a work request that puts nothing on the wire.
std::uint32_t packets_of(const PacketRecord& r, Family f, std::uint32_t mtu = kMtu) noexcept;
// The PSNs a request takes on the wire: one per packet, and a READ request as many as its
// response has packets (IBTA 9.7.1).
std::uint32_t wire_packets(const PacketRecord& r, Family f, std::uint32_t packets,
                           std::uint32_t mtu = kMtu) noexcept;

// A message of a requester: its PSN in the simulator, which numbers messages, and the first
// of the `packets` PSNs it takes on the wire.
struct Message {
  std::uint32_t psn = 0;
  std::uint32_t wire = 0;
  std::uint32_t packets = 0;
  bool used = false;
};

class Numbers {
 public:
  // Sets r.wire_psn (the PSN of its first packet on the wire) and r.msn (a response's AETH):
  // a new request takes the PSNs after its QP's previous message (its first message keeps the
  // simulator's PSN); a request sent again, its first time's; a READ response, the READ's; an
  // ACK, the last of the message it acknowledges; a PSN sequence error or RNR NAK, the first of
  // the message it names. A responder counts the RC requests it is given (not lost on the way,
  // not repeats); its responses carry the count.
  void number(PacketRecord& r);
  // Message `psn` of requester `qpn` of `dev` as this world numbered it (it sent it), if it did.
  const Message* message(std::uint16_t dev, std::uint32_t qpn, std::uint32_t psn);
  // A request of a requester of another process reached responder `to_qpn` of `to_dev` here:
  // `r` describes it (kind request, its src and dst, psn, qp_type; fate delivered), `m` its
  // numbers in the requester's process (packets 0: not numbered there).
  void arrived(const PacketRecord& r, const Message& m);

 private:
  static bool later(std::uint32_t a, std::uint32_t b) noexcept {  // PSN a after b, mod 2^24
    const std::uint32_t d = (a - b) & kPsnMask;
    return d != 0 && d < 0x800000;
  }
  // What the numbers of a QP's packets depend on of its earlier packets.
  struct QpState {
    // As a responder: the first PSN of the last new RC request it was given, and its MSN;
    // `given`: it has been given one.
    std::uint32_t last_new_psn = 0;
    std::uint32_t msn = 0;
    bool given = false;
    // As a requester: `sent` a request yet; the simulator's PSN of its newest message; the
    // wire PSN after that message's last packet; the newest PSN an ACK that arrived named.
    bool sent = false;
    std::uint32_t newest = 0;
    std::uint32_t next_wire = 0;
    std::uint32_t acked = 0;
    // Its RC messages by simulator PSN modulo the size (a power of two), which doubles rather
    // than forget a message not yet acknowledged: at most about the send queue's depth.
    std::vector<Message> ring;
    const Message* find(std::uint32_t psn) const noexcept;
    void remember(const Message& m) {
      // Grow rather than forget a message not yet acknowledged (it may be sent again); the
      // same message again (a retry that reached another process) takes its own place.
      while (ring.empty() || (slot(m.psn).used && slot(m.psn).psn != m.psn &&
                              later(slot(m.psn).psn, acked))) {
        grow_ring();
      }
      slot(m.psn) = m;
    }
    Message& slot(std::uint32_t psn) { return ring[psn & (ring.size() - 1)]; }
    void grow_ring();
  };
  QpState& qp(std::uint16_t dev, std::uint32_t qpn) {
    if (dev < qp_index_.size() && qpn < qp_index_[dev].size() && qp_index_[dev][qpn] != 0) {
      return qps_[qp_index_[dev][qpn] - 1];
    }
    return add_qp(dev, qpn);
  }
  QpState& add_qp(std::uint16_t dev, std::uint32_t qpn);
  std::uint32_t msn_after(const PacketRecord& r);
  std::uint32_t wire_psn(const PacketRecord& r, std::uint32_t packets);
  void given(QpState& q, std::uint32_t psn);

  // By device, then QP number: the index of the QP's state in qps_, plus one (0: none yet).
  std::vector<std::vector<std::uint32_t>> qp_index_;
  std::vector<QpState> qps_;
  // QP numbers from kDirectQps up are found through far_qps_ ((device << 32 | QP) -> index
  // plus one), so that a packet naming QP 0xffffff does not grow a table to 16M entries.
  static constexpr std::uint32_t kDirectQps = 65536;
  std::unordered_map<std::uint64_t, std::uint32_t> far_qps_;
};

}  // namespace verbsim::sim::wire
