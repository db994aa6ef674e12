// Seeing what a simulated run does: observers a world tells about every packet its fabric
// carries (with what the fault plan did to it) and every work request's completion. The
// packet capture (VERBSIM_PCAP) and the timeline (VERBSIM_TIMELINE) are observers; so can a
// test's own be. A world without observers pays nothing for them.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "verbsim/sim/faults.hpp"
#include "verbsim/types.hpp"

namespace verbsim::sim {

// What a packet is. The simulator moves a message as one unit; a capture may cut it into
// MTU-sized packets (FIRST/MIDDLE/LAST), as a NIC would.
enum class PacketKind : std::uint8_t {
  request,          // SEND, WRITE, READ request, atomic (`opcode` says which)
  ack,              // an ACK without data (`psn`: the last request it acknowledges)
  nak,              // a NAK: `nak` says which, `rnr_timer` for receiver-not-ready
  read_response,    // a READ's data
  atomic_response,  // an atomic's original value
};

// The AETH syndrome of a NAK (IBTA 9.7.5.2.7), as the simulator's responder sends them.
enum class NakCode : std::uint8_t {
  rnr,               // receiver not ready
  psn_seq,           // PSN sequence error: a message was lost
  rem_access,        // remote access error
  inv_req,           // invalid request
  rem_op,            // remote operational error
};

// What the fabric did with the packet.
enum class PacketFate : std::uint8_t {
  delivered,   // on time
  delayed,     // a delay or reorder rule held it back (arrives_ns says until when)
  duplicated,  // a duplicate rule: it arrives twice (the copy at duplicate_ns)
  dropped,     // a drop rule lost it
  link_down,   // lost: a port on its way is down
};

std::string_view to_string(PacketKind k) noexcept;
std::string_view to_string(NakCode c) noexcept;
std::string_view to_string(PacketFate f) noexcept;

struct PacketRecord {
  std::uint64_t sent_ns = 0;     // virtual time it left its port
  std::uint64_t arrives_ns = 0;  // when it arrives (lost: when it would have)
  std::uint64_t duplicate_ns = 0;  // duplicated: when the copy arrives
  PacketFate fate = PacketFate::delivered;
  PacketKind kind = PacketKind::request;
  QpType qp_type = QpType::rc;
  WrOpcode opcode = WrOpcode::send;  // a request's; a response's: of the request answered
  NakCode nak = NakCode::rnr;        // kind == nak
  std::uint8_t rnr_timer = 0;        // kind == nak, nak == rnr: the responder's timer code
  bool solicited = false;
  std::uint16_t src_dev = 0;  // device indices (sim0 is 0)
  std::uint16_t dst_dev = 0;
  std::uint8_t src_port = 1;
  std::uint8_t dst_port = 1;
  Gid src_gid{};  // the ports' RoCE v2 GIDs (IPv4-mapped)
  Gid dst_gid{};
  std::uint32_t src_qpn = 0;
  std::uint32_t dst_qpn = 0;
  std::uint32_t psn = 0;     // requests: the message's first PSN; responses: the request's
  // On the wire, where PSNs number packets (the simulator's number messages): the PSN of the
  // record's first packet (a request's; a READ response's, the READ's first; an ACK's, the
  // last of the message it acknowledges), and a response's MSN (AETH), as RoCE carries them.
  std::uint32_t wire_psn = 0;
  std::uint32_t msn = 0;
  std::uint32_t length = 0;  // bytes of the message (requests) or of the response's data
  std::uint64_t wr_id = 0;   // the requester's work request
  std::uint64_t remote_addr = 0;  // RETH, AtomicETH
  std::uint32_t rkey = 0;
  std::uint64_t compare_add = 0;  // AtomicETH
  std::uint64_t swap = 0;
  std::uint64_t atomic_original = 0;  // AtomicAckETH
  std::uint32_t imm = 0;   // ImmDt (..._WITH_IMM) or IETH (SEND_WITH_INV: the rkey)
  std::uint32_t qkey = 0;  // DETH (UD)
  // The data the packet carries (requests that carry data, READ responses). Valid only during
  // the call; empty when the capture of payloads is off or the bytes cannot be read.
  std::span<const std::uint8_t> payload;
};

// A work request the program posted (and the simulator took), with the time.
struct PostRecord {
  std::uint64_t time_ns = 0;
  std::uint16_t dev = 0;
  std::uint32_t qpn = 0;  // 0 for an SRQ's receive
  bool send = false;      // a send queue's WR, else a receive
  std::uint64_t wr_id = 0;
  WrOpcode opcode = WrOpcode::send;  // sends
  std::uint32_t length = 0;          // bytes its SGEs hold
  bool signaled = true;              // sends: whether it completes when it succeeds
};

// A completion the simulator generated (before the program polls it), with the time.
struct CompletionRecord {
  std::uint64_t time_ns = 0;
  std::uint16_t dev = 0;
  std::uint32_t cq = 0;  // the CQ's number on its device (1, 2, ... in creation order)
  bool send = false;  // a send-queue completion, else a receive
  WorkCompletion wc{};
  bool dropped = false;  // lost to a CQ overrun or a CQ in error
};

// A moment worth marking: a fault that fired, an async event, a CM event.
struct InstantRecord {
  std::uint64_t time_ns = 0;
  std::uint16_t dev = 0;
  std::uint32_t qpn = 0;  // 0: not about one QP
  std::string_view what;  // "fault: drop (rule 0)", "async: QP_FATAL", ...
};

// A connection manager message as the IB CM sends it: a MAD on QP 1 (UD) of its port. A UDP
// id's REQ and REP are the SIDR REQ and REP; its REJ is a SIDR REP that refuses.
struct CmRecord {
  std::uint64_t sent_ns = 0;
  std::uint64_t arrives_ns = 0;              // lost: when it would have
  PacketFate fate = PacketFate::delivered;   // delivered, dropped (cm_drop) or link_down
  CmMessage kind = CmMessage::req;           // never `any`
  bool sidr = false;                         // of a UDP id (PortSpace::udp)
  std::uint16_t src_dev = 0;
  std::uint16_t dst_dev = 0;
  std::uint8_t src_port = 1;
  std::uint8_t dst_port = 1;
  Gid src_gid{};  // the ports' RoCE v2 GIDs
  Gid dst_gid{};
  // The communication ids of the sender and of the receiver (0: not known to the sender yet,
  // as in a REQ, or a REJ the device sends for nobody).
  std::uint32_t local_comm_id = 0;
  std::uint32_t remote_comm_id = 0;
  // REQ: the address and port connected to (the service id's port); the rdma_cm addresses
  // of the two ends (IPv4-mapped when IPv4), ports in host order.
  std::array<std::uint8_t, 16> src_ip{};
  std::array<std::uint8_t, 16> dst_ip{};
  std::uint16_t src_ip_port = 0;
  std::uint16_t dst_ip_port = 0;
  std::uint32_t qpn = 0;  // REQ, REP: the sender's QP; SIDR REP: the server's
  std::uint32_t psn = 0;  // REQ, REP: the sender's starting PSN
  std::uint32_t qkey = 0;  // SIDR REP
  std::uint8_t responder_resources = 0;  // REQ, REP
  std::uint8_t initiator_depth = 0;
  std::uint8_t retry_count = 0;      // REQ
  std::uint8_t rnr_retry_count = 0;  // REQ, REP
  int reason = 0;                    // REJ: the IB CM reason (SIDR: the status)
  // The private data the program gave, zero-padded to the message's size. Valid only during
  // the call.
  std::span<const std::uint8_t> private_data;
};

class Observer {
 public:
  virtual ~Observer() = default;
  virtual void posted(const PostRecord&) {}
  virtual void packet(const PacketRecord&) {}
  virtual void completion(const CompletionRecord&) {}
  virtual void instant(const InstantRecord&) {}
  // Connection manager messages, when they are sent (also those a fault or a down link loses).
  virtual void cm(const CmRecord&) {}
  // The world is going away (flush files here).
  virtual void finished(std::uint64_t /*time_ns*/) {}
};

}  // namespace verbsim::sim

namespace verbsim::sim {

// Counters of a run (Config::stats, VERBSIM_STATS=1; World::stats()).
struct QpCounters {
  std::uint64_t packets_sent = 0;  // requests and responses this QP put on the wire
  std::uint64_t bytes_sent = 0;    // their payload bytes
  std::uint64_t packets_received = 0;  // that reached it (lost ones do not)
  std::uint64_t bytes_received = 0;
  std::uint64_t acks_sent = 0;      // ACKs, READ responses, atomic responses
  std::uint64_t acks_received = 0;
  std::uint64_t naks_sent[5] = {};  // by NakCode
  std::uint64_t naks_received[5] = {};
  std::uint64_t retransmissions = 0;  // requests sent again (a PSN it had sent before)
  std::uint64_t rnr_waits = 0;        // RNR NAKs it waited out or gave up on
  std::uint64_t timeouts = 0;         // local ACK timeouts that fired
  std::uint64_t lost_to_faults = 0;     // its packets a fault dropped or a down link lost
  std::uint64_t altered_by_faults = 0;  // its packets a fault delayed or duplicated
  std::uint64_t completions[22] = {};   // by WcStatus, send and receive side
};

struct PortCounters {
  std::uint64_t packets_sent = 0;
  std::uint64_t bytes_sent = 0;
  std::uint64_t packets_received = 0;
  std::uint64_t bytes_received = 0;
  std::uint64_t packets_lost = 0;  // sent, and lost to a fault or a down link
};

struct Stats {
  bool collected = false;  // false: the world was made without Config::stats
  // By (device index, QP number) and (device index, port number), in order.
  std::vector<std::pair<std::pair<int, std::uint32_t>, QpCounters>> qps;
  std::vector<std::pair<std::pair<int, int>, PortCounters>> ports;
  const QpCounters* qp(int dev, std::uint32_t qpn) const noexcept;
  // Readable, one line per port and per QP (what VERBSIM_STATS=1 prints).
  std::string to_string() const;
};

}  // namespace verbsim::sim

namespace verbsim::sim {

// One line for each kind of record, as the flight recorder and the determinism check print
// them: "t=1234 ns post sim0 qp 17 send wr_id=1 SEND 64 B" and so on.
std::string describe(const PostRecord& r);
std::string describe(const PacketRecord& r);
std::string describe(const CompletionRecord& r);
std::string describe(const InstantRecord& r);
std::string describe(const CmRecord& r);

// Counts what a world does (Config::stats makes one; so can a test).
class StatsObserver final : public Observer {
 public:
  // `print`: write the counters to stderr when the world ends.
  explicit StatsObserver(bool print = false) : print_(print) {}
  void packet(const PacketRecord& r) override;
  void completion(const CompletionRecord& r) override;
  void instant(const InstantRecord& r) override;
  void finished(std::uint64_t time_ns) override;
  Stats stats() const;

 private:
  using QpKey = std::pair<int, std::uint32_t>;
  bool print_;
  std::map<QpKey, QpCounters> qps_;
  std::map<std::pair<int, int>, PortCounters> ports_;
  std::map<QpKey, std::uint32_t> next_psn_;  // past the highest request PSN each QP sent
};

// Keeps the last `capacity` records of a run, and counts everything, for a failure report
// (the test kit's main attaches one to every world).
class FlightRecorder final : public Observer {
 public:
  explicit FlightRecorder(std::size_t capacity = 50) : capacity_(capacity) {}
  void posted(const PostRecord& r) override { keep(r); }
  void packet(const PacketRecord& r) override;
  void completion(const CompletionRecord& r) override;
  void instant(const InstantRecord& r) override;
  void cm(const CmRecord& r) override;
  // The last records, oldest first, then the counters of the QPs they name.
  std::string report() const;

 private:
  // An instant's text, kept (InstantRecord only points at it).
  struct Instant {
    InstantRecord record;
    std::string what;
  };
  using Record = std::variant<PostRecord, PacketRecord, CompletionRecord, Instant, CmRecord>;
  // describe(), for each kind of Record as kept.
  template <class R>
  static std::string describe_kept(const R& r) {
    return describe(r);
  }
  static std::string describe_kept(const Instant& i);
  void keep(Record r);
  std::size_t capacity_;
  std::deque<Record> records_;  // formatted only for a report
  std::vector<std::pair<int, std::uint32_t>> qps_;  // QPs the packets name, in order seen
  StatsObserver stats_;
};

}  // namespace verbsim::sim
