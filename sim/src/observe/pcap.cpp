#include "observe/pcap.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <limits>
#include <system_error>

namespace verbsim::sim {

namespace {

using Bytes = std::vector<std::uint8_t>;

constexpr std::uint16_t kRoceV2Port = 4791;
constexpr std::uint32_t kPsnMask = 0xffffff;

// CRC-32 of IEEE 802.3 (reflected polynomial 0xedb88320), as zlib's crc32 computes it.
struct Crc32Table {
  std::array<std::uint32_t, 256> t{};
  constexpr Crc32Table() {
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) != 0 ? 0xedb88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
  }
};
constexpr Crc32Table kCrcTable;

// The running (not yet inverted) CRC over `n` bytes.
std::uint32_t crc_update(std::uint32_t crc, const std::uint8_t* p, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) crc = kCrcTable.t[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return crc;
}

void be16(Bytes& b, std::uint32_t v) {
  b.push_back(static_cast<std::uint8_t>(v >> 8));
  b.push_back(static_cast<std::uint8_t>(v));
}
void be24(Bytes& b, std::uint32_t v) {
  b.push_back(static_cast<std::uint8_t>(v >> 16));
  be16(b, v);
}
void be32(Bytes& b, std::uint32_t v) {
  be16(b, v >> 16);
  be16(b, v);
}
void be64(Bytes& b, std::uint64_t v) {
  be32(b, static_cast<std::uint32_t>(v >> 32));
  be32(b, static_cast<std::uint32_t>(v));
}
void le16(Bytes& b, std::uint32_t v) {
  b.push_back(static_cast<std::uint8_t>(v));
  b.push_back(static_cast<std::uint8_t>(v >> 8));
}
void le32(Bytes& b, std::uint32_t v) {
  le16(b, v);
  le16(b, v >> 16);
}
void pad4(Bytes& b) {
  while (b.size() % 4 != 0) b.push_back(0);
}

// A pcapng option: code, length, value padded to 4 bytes.
void option(Bytes& b, std::uint16_t code, const void* value, std::size_t len) {
  le16(b, code);
  le16(b, static_cast<std::uint32_t>(len));
  const auto* p = static_cast<const std::uint8_t*>(value);
  b.insert(b.end(), p, p + len);
  pad4(b);
}

// A block: type, total length, body, total length again.
Bytes block(std::uint32_t type, const Bytes& body) {
  Bytes b;
  const auto total = static_cast<std::uint32_t>(12 + body.size());
  le32(b, type);
  le32(b, total);
  b.insert(b.end(), body.begin(), body.end());
  le32(b, total);
  return b;
}

// BTH opcodes (IBTA table 38): the transport's base plus the operation.
enum Op : std::uint8_t {
  kSendFirst = 0x00,
  kSendMiddle = 0x01,
  kSendLast = 0x02,
  kSendLastImm = 0x03,
  kSendOnly = 0x04,
  kSendOnlyImm = 0x05,
  kWriteFirst = 0x06,
  kWriteMiddle = 0x07,
  kWriteLast = 0x08,
  kWriteLastImm = 0x09,
  kWriteOnly = 0x0a,
  kWriteOnlyImm = 0x0b,
  kReadRequest = 0x0c,
  kReadRespFirst = 0x0d,
  kReadRespMiddle = 0x0e,
  kReadRespLast = 0x0f,
  kReadRespOnly = 0x10,
  kAck = 0x11,
  kAtomicAck = 0x12,
  kCmpSwap = 0x13,
  kFetchAdd = 0x14,
  kSendLastInv = 0x16,
  kSendOnlyInv = 0x17,
};

// The AETH syndrome (IBTA 9.7.5.2.7): an ACK without credits, RNR NAK with its timer, NAK.
std::uint8_t syndrome(const PacketRecord& r) noexcept {
  if (r.kind != PacketKind::nak) return 0x1f;
  switch (r.nak) {
    case NakCode::rnr: return static_cast<std::uint8_t>(0x20 | (r.rnr_timer & 0x1f));
    case NakCode::psn_seq: return 0x60;
    case NakCode::inv_req: return 0x61;
    case NakCode::rem_access: return 0x62;
    case NakCode::rem_op: return 0x63;
  }
  return 0x60;
}

// One packet of a message: its opcode and what goes after the BTH.
struct Packet {
  std::uint8_t opcode = 0;
  std::uint32_t psn = 0;
  bool first = true;         // of the message: RETH, READ response AETH
  bool last = true;          // ImmDt, IETH, AckReq, solicited event
  std::uint32_t offset = 0;  // of its payload in the message
  std::uint32_t bytes = 0;   // of payload it carries
};

enum class Family { send, write, read, atomic, read_response, other };

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

// The opcode's top 3 bits: RC, UC (SENDs and WRITEs) or UD (SENDs). What a transport has not
// (a UC or UD QP cannot post it, nor do they have responses) is framed as RC.
std::uint8_t transport_base(QpType t, Family f) noexcept {
  if (t == QpType::uc && (f == Family::send || f == Family::write)) return 0x20;
  if (t == QpType::ud && f == Family::send) return 0x60;
  return 0x00;
}

// The opcode of the packet at this position of a message (first, last, both: only).
std::uint8_t opcode_of(const PacketRecord& r, Family f, bool first, bool last) noexcept {
  const bool imm = r.opcode == WrOpcode::send_with_imm || r.opcode == WrOpcode::rdma_write_with_imm;
  const bool inv = r.opcode == WrOpcode::send_with_inv && r.qp_type == QpType::rc;
  const std::uint8_t base = transport_base(r.qp_type, f);
  const auto pick = [&](std::uint8_t only, std::uint8_t fst, std::uint8_t mid, std::uint8_t lst) {
    const std::uint8_t op = first && last ? only : first ? fst : last ? lst : mid;
    return static_cast<std::uint8_t>(base | op);
  };
  switch (f) {
    case Family::send:
      if (inv) return pick(kSendOnlyInv, kSendFirst, kSendMiddle, kSendLastInv);
      if (imm) return pick(kSendOnlyImm, kSendFirst, kSendMiddle, kSendLastImm);
      return pick(kSendOnly, kSendFirst, kSendMiddle, kSendLast);
    case Family::write:
      if (imm) return pick(kWriteOnlyImm, kWriteFirst, kWriteMiddle, kWriteLastImm);
      return pick(kWriteOnly, kWriteFirst, kWriteMiddle, kWriteLast);
    case Family::read: return kReadRequest;
    case Family::atomic: return r.opcode == WrOpcode::atomic_cmp_and_swp ? kCmpSwap : kFetchAdd;
    case Family::read_response:
      return pick(kReadRespOnly, kReadRespFirst, kReadRespMiddle, kReadRespLast);
    case Family::other: break;
  }
  return r.kind == PacketKind::atomic_response ? kAtomicAck : kAck;
}

// The packets a message is cut into; none for a work request that puts nothing on the wire.
std::vector<Packet> cut(const PacketRecord& r, std::uint32_t mtu) {
  const Family f = family_of(r);
  if (f == Family::other && r.kind == PacketKind::request) return {};
  const bool carries_data = f == Family::send || f == Family::write || f == Family::read_response;
  const std::uint32_t n = carries_data && r.qp_type != QpType::ud
                              ? static_cast<std::uint32_t>(std::max<std::uint64_t>(
                                    1, (std::uint64_t{r.length} + mtu - 1) / mtu))
                              : 1;
  std::vector<Packet> out;
  out.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    Packet p;
    p.first = i == 0;
    p.last = i + 1 == n;
    p.psn = (r.psn + i) & kPsnMask;
    p.opcode = opcode_of(r, f, p.first, p.last);
    if (carries_data) {
      p.offset = i * mtu;
      p.bytes = p.last ? r.length - p.offset : mtu;
    }
    out.push_back(p);
  }
  return out;
}

std::array<std::uint8_t, 4> ipv4_of(const Gid& g) noexcept {
  return {g.raw[12], g.raw[13], g.raw[14], g.raw[15]};
}

void mac(Bytes& b, std::uint16_t dev, std::uint8_t port) {
  be16(b, 0x0200);  // locally administered
  b.push_back(0);
  be16(b, dev);
  b.push_back(port);
}

// The UDP source port of a QP pair, as the kernel picks it (rdma_calc_flow_label, then
// rdma_flow_label_to_udp_sport): stable per pair, the same both ways.
std::uint16_t udp_sport(std::uint32_t a, std::uint32_t b) noexcept {
  std::uint64_t v = static_cast<std::uint64_t>(a) * b;
  v ^= v >> 20;
  v ^= v >> 40;
  const auto fl = static_cast<std::uint32_t>(v & 0xfffff);
  const std::uint32_t low = (fl & 0x3fff) ^ ((fl & 0xfc000) >> 14);
  return static_cast<std::uint16_t>(low | 0xc000);
}

std::uint16_t ip_checksum(const std::uint8_t* p, std::size_t n) noexcept {
  std::uint32_t sum = 0;
  for (std::size_t i = 0; i + 1 < n; i += 2) sum += (p[i] << 8) | p[i + 1];
  while ((sum >> 16) != 0) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<std::uint16_t>(~sum);
}

constexpr std::size_t kEth = 14, kIp = 20, kUdp = 8, kBth = 12;

// The ICRC of a RoCE v2 packet over IPv4 (IBTA Annex A17.3.3): CRC-32 over 8 bytes of ones
// (the LRH RoCE v2 has not) and the packet from the IP header to the end of the payload and
// pad, with the fields that change on the way masked to ones: IP TOS, TTL and checksum, the
// UDP checksum, BTH byte 4 (FECN, BECN, reserved). Little-endian on the wire.
std::uint32_t icrc(const Bytes& frame) noexcept {
  std::array<std::uint8_t, kIp + kUdp + kBth> hdr{};
  std::copy_n(frame.begin() + kEth, hdr.size(), hdr.begin());
  hdr[1] = 0xff;                       // TOS (DSCP, ECN)
  hdr[8] = 0xff;                       // TTL
  hdr[10] = hdr[11] = 0xff;            // header checksum
  hdr[kIp + 6] = hdr[kIp + 7] = 0xff;  // UDP checksum
  hdr[kIp + kUdp + 4] = 0xff;          // FECN, BECN, resv6
  static constexpr std::array<std::uint8_t, 8> kLrh = {0xff, 0xff, 0xff, 0xff,
                                                       0xff, 0xff, 0xff, 0xff};
  std::uint32_t crc = crc_update(0xffffffffu, kLrh.data(), kLrh.size());
  crc = crc_update(crc, hdr.data(), hdr.size());
  const std::size_t rest = kEth + hdr.size();
  crc = crc_update(crc, frame.data() + rest, frame.size() - rest);
  return ~crc;
}

// One frame: Ethernet II / IPv4 / UDP / BTH / extension headers / payload / pad / ICRC.
Bytes frame_of(const PacketRecord& r, const Packet& p, std::uint32_t msn) {
  const std::uint8_t transport = p.opcode & 0xe0;
  const std::uint8_t op = p.opcode & 0x1f;
  const bool is_response = r.kind != PacketKind::request;
  Bytes ib;  // BTH to the end of the pad
  ib.reserve(kBth + 28 + p.bytes + 3);
  // BTH.
  const std::uint32_t pad = (4 - p.bytes % 4) % 4;
  const bool event_point =
      !is_response && p.last &&
      (r.opcode == WrOpcode::send || r.opcode == WrOpcode::send_with_imm ||
       r.opcode == WrOpcode::send_with_inv || r.opcode == WrOpcode::rdma_write_with_imm);
  const bool se = r.solicited && event_point;
  const bool ack_req = transport == 0x00 && !is_response && p.last;  // RC
  ib.push_back(p.opcode);
  ib.push_back(static_cast<std::uint8_t>((se ? 0x80 : 0) | (pad << 4)));  // MigReq 0, TVer 0
  be16(ib, 0xffff);                                                       // P_Key
  ib.push_back(0);                                                        // FECN, BECN, resv6
  be24(ib, r.dst_qpn);
  ib.push_back(ack_req ? 0x80 : 0);
  be24(ib, p.psn);
  // Extension headers, in the order IBTA 9.2 puts them.
  if (transport == 0x60) {  // DETH
    be32(ib, r.qkey);
    ib.push_back(0);
    be24(ib, r.src_qpn);
  }
  const bool write = op >= kWriteFirst && op <= kWriteOnlyImm;
  if ((write && p.first) || op == kReadRequest) {  // RETH
    be64(ib, r.remote_addr);
    be32(ib, r.rkey);
    be32(ib, r.length);
  }
  if (op == kCmpSwap || op == kFetchAdd) {  // AtomicETH
    be64(ib, r.remote_addr);
    be32(ib, r.rkey);
    be64(ib, op == kCmpSwap ? r.swap : r.compare_add);
    be64(ib, op == kCmpSwap ? r.compare_add : 0);
  }
  if (op == kAck || op == kAtomicAck || op == kReadRespFirst || op == kReadRespLast ||
      op == kReadRespOnly) {  // AETH
    ib.push_back(syndrome(r));
    be24(ib, msn);
  }
  if (op == kAtomicAck) be64(ib, r.atomic_original);  // AtomicAckETH
  const bool imm_here =
      op == kSendLastImm || op == kSendOnlyImm || op == kWriteLastImm || op == kWriteOnlyImm;
  if (imm_here || op == kSendLastInv || op == kSendOnlyInv) be32(ib, r.imm);  // ImmDt, IETH
  // Payload: the bytes the record carries; zeros where it carries none.
  const std::size_t start = ib.size();
  ib.resize(start + p.bytes + pad, 0);
  if (p.offset < r.payload.size()) {
    const std::size_t have = std::min<std::size_t>(p.bytes, r.payload.size() - p.offset);
    std::copy_n(r.payload.begin() + p.offset, have,
                ib.begin() + static_cast<std::ptrdiff_t>(start));
  }

  Bytes f;
  f.reserve(kEth + kIp + kUdp + ib.size() + 4);
  mac(f, r.dst_dev, r.dst_port);
  mac(f, r.src_dev, r.src_port);
  be16(f, 0x0800);
  // IPv4: no options, DSCP/ECN 0, id 0, DF, TTL 64, UDP.
  const auto ip_len = static_cast<std::uint32_t>(kIp + kUdp + ib.size() + 4);
  const std::size_t ip = f.size();
  be16(f, 0x4500);
  be16(f, ip_len);
  be16(f, 0);
  be16(f, 0x4000);
  be16(f, (64 << 8) | 17);  // TTL, protocol
  be16(f, 0);
  for (const std::uint8_t b : ipv4_of(r.src_gid)) f.push_back(b);
  for (const std::uint8_t b : ipv4_of(r.dst_gid)) f.push_back(b);
  const std::uint16_t sum = ip_checksum(f.data() + ip, kIp);
  f[ip + 10] = static_cast<std::uint8_t>(sum >> 8);
  f[ip + 11] = static_cast<std::uint8_t>(sum);
  // UDP, checksum 0 (RoCE v2 allows it).
  be16(f, udp_sport(r.src_qpn, r.dst_qpn));
  be16(f, kRoceV2Port);
  be16(f, ip_len - kIp);
  be16(f, 0);
  f.insert(f.end(), ib.begin(), ib.end());
  le32(f, icrc(f));
  return f;
}

std::string fate_comment(const PacketRecord& r) {
  switch (r.fate) {
    case PacketFate::delivered: return {};
    case PacketFate::delayed:
      return "verbsim: delayed by the fault plan, arrives at " + std::to_string(r.arrives_ns) +
             " ns";
    case PacketFate::duplicated:
      return "verbsim: duplicated by the fault plan, the copy arrives at " +
             std::to_string(r.duplicate_ns) + " ns";
    case PacketFate::dropped: return "verbsim: dropped by the fault plan";
    case PacketFate::link_down: return "verbsim: lost, a link on its way is down";
  }
  return {};
}

// Orders the held duplicates as a min-heap by time, then by when they were held.
struct HeldAfter {
  template <class H>
  bool operator()(const H& a, const H& b) const noexcept {
    return a.ts_ns != b.ts_ns ? a.ts_ns > b.ts_ns : a.seq > b.seq;
  }
};

bool later(std::uint32_t a, std::uint32_t b) noexcept {  // PSN a after b, modulo 2^24
  const std::uint32_t d = (a - b) & kPsnMask;
  return d != 0 && d < 0x800000;
}

}  // namespace

PcapWriter::PcapWriter(const std::string& path, Mtu mtu)
    : path_(path), file_(std::fopen(path.c_str(), "wb")), mtu_(mtu_bytes(mtu)) {
  if (file_ == nullptr) {
    throw std::system_error(errno, std::generic_category(),
                            "packet capture: cannot create " + path_);
  }
  // Section Header Block: byte-order magic, version 1.0, section length unknown.
  Bytes body;
  le32(body, 0x1a2b3c4d);
  le16(body, 1);
  le16(body, 0);
  le32(body, 0xffffffff);
  le32(body, 0xffffffff);
  static constexpr char kApp[] = "verbsim";
  option(body, 4, kApp, sizeof kApp - 1);  // shb_userappl
  option(body, 0, nullptr, 0);             // opt_endofopt
  write_block(block(0x0a0d0d0a, body));
}

PcapWriter::~PcapWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

std::uint32_t PcapWriter::interface_of(std::uint16_t dev, std::uint8_t port) {
  const auto [it, added] =
      interfaces_.try_emplace({dev, port}, static_cast<std::uint32_t>(interfaces_.size()));
  if (added) {
    // Interface Description Block: Ethernet, no snap length, nanosecond timestamps.
    Bytes body;
    le16(body, 1);  // LINKTYPE_ETHERNET
    le16(body, 0);
    le32(body, 0);
    const std::string name = "sim" + std::to_string(dev) + " port " + std::to_string(port);
    option(body, 2, name.data(), name.size());  // if_name
    const std::uint8_t nanoseconds = 9;
    option(body, 9, &nanoseconds, 1);  // if_tsresol
    option(body, 0, nullptr, 0);
    write_block(block(1, body));
  }
  return it->second;
}

void PcapWriter::write_block(const Bytes& block) {
  if (std::fwrite(block.data(), 1, block.size(), file_) != block.size()) write_failed_ = true;
}

void PcapWriter::write_epb(std::uint32_t interface, std::uint64_t ts_ns, const Bytes& frame,
                           const std::string& comment) {
  Bytes body;
  body.reserve(20 + frame.size() + comment.size() + 16);
  le32(body, interface);
  le32(body, static_cast<std::uint32_t>(ts_ns >> 32));
  le32(body, static_cast<std::uint32_t>(ts_ns));
  le32(body, static_cast<std::uint32_t>(frame.size()));  // captured
  le32(body, static_cast<std::uint32_t>(frame.size()));  // on the wire
  body.insert(body.end(), frame.begin(), frame.end());
  pad4(body);
  if (!comment.empty()) {
    option(body, 1, comment.data(), comment.size());  // opt_comment
    option(body, 0, nullptr, 0);
  }
  write_block(block(6, body));
  ++frames_;
}

void PcapWriter::write_held_until(std::uint64_t ts_ns) {
  while (!held_.empty() && held_.front().ts_ns <= ts_ns) {
    std::pop_heap(held_.begin(), held_.end(), HeldAfter{});
    Held h = std::move(held_.back());
    held_.pop_back();
    write_epb(h.interface, h.ts_ns, h.frame, "verbsim: duplicate");
  }
}

std::uint32_t PcapWriter::msn_after(const PacketRecord& r) {
  // A responder counts the RC requests it is given (ignoring the repeats of one it had); its
  // ACKs, READ and atomic responses carry the count. A NAK of the last request counted takes
  // it back: that request was not executed, and its retry counts anew (rxe's RNR NAKs carry
  // the MSN of the message before, each time).
  if (r.qp_type != QpType::rc) return 0;
  if (r.kind != PacketKind::request) {
    const auto it = msn_.find({r.src_dev, r.src_qpn});
    if (it == msn_.end()) return 0;
    if (r.kind == PacketKind::nak && it->second.first == r.psn) {
      it->second = {(r.psn - 1) & kPsnMask, (it->second.second - 1) & kPsnMask};
    }
    return it->second.second;
  }
  const bool lost = r.fate == PacketFate::dropped || r.fate == PacketFate::link_down;
  if (!lost) {
    const auto [it, added] = msn_.try_emplace({r.dst_dev, r.dst_qpn}, r.psn, 1);
    if (!added && later(r.psn, it->second.first)) {
      it->second = {r.psn, (it->second.second + 1) & kPsnMask};
    }
  }
  return 0;
}

void PcapWriter::packet(const PacketRecord& r) {
  write_held_until(r.sent_ns);
  const std::uint32_t msn = msn_after(r);
  const std::uint32_t interface = interface_of(r.src_dev, r.src_port);
  const std::string comment = fate_comment(r);
  for (const Packet& p : cut(r, mtu_)) {
    Bytes f = frame_of(r, p, msn);
    write_epb(interface, r.sent_ns, f, comment);
    if (r.fate == PacketFate::duplicated) {
      held_.push_back({r.duplicate_ns, seq_++, interface, std::move(f)});
      std::push_heap(held_.begin(), held_.end(), HeldAfter{});
    }
  }
}

void PcapWriter::finished(std::uint64_t /*time_ns*/) {
  write_held_until(std::numeric_limits<std::uint64_t>::max());
  if (std::fflush(file_) != 0) write_failed_ = true;
  if (write_failed_) {
    std::fprintf(stderr, "verbsim: packet capture %s: could not write every frame\n",
                 path_.c_str());
  }
}

}  // namespace verbsim::sim
