// What the world's event queue carries: packets on the wire, timers, faults, fiber wake-ups
// and the connection manager's messages.
#pragma once

#include <cstdint>

namespace verbsim::sim {

// fault, wake, cm and parcel are not for a QP (World::Impl::dispatch); cm carries the
// connection manager's messages and timers (cm.cpp), parcel a packet from another process of a
// shared fabric (fabric/multiprocess.cpp; index: where it waits).
enum class EvKind : std::uint8_t { deliver, ack, nak, timeout, rnr_retry, fault, wake, cm, parcel };

// NAK codes carried by EvKind::nak (code field; an RNR NAK has its timer in the value field).
enum class Nak : std::uint8_t { rnr, psn_seq, rem_access, inv_req, rem_op };

// What a response packet carries in the place of a request's PSN for the fault rules'
// packets= filter (send_packet): an ACK or NAK kNoPsn, a READ's or atomic's response, which
// carries data, kDataResponsePsn.
inline constexpr std::uint32_t kNoPsn = UINT32_MAX;
inline constexpr std::uint32_t kDataResponsePsn = UINT32_MAX - 1;

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

}  // namespace verbsim::sim
