#include "observe/pcap.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <span>
#include <system_error>

#include "observe/cm_mad.hpp"
#include "observe/crc32.hpp"
#include "observe/wire_numbers.hpp"

namespace verbsim::sim {

namespace {

using wire::Family;
using wire::family_of;


using Bytes = std::vector<std::uint8_t>;

constexpr std::uint16_t kRoceV2Port = 4791;
constexpr std::uint32_t kPsnMask = 0xffffff;

// Writes fields at a cursor into memory the caller made room for, a field a store.
struct Out {
  std::uint8_t* p;
  template <class T>
  void put(T v) noexcept {
    std::memcpy(p, &v, sizeof v);
    p += sizeof v;
  }
  // `v` with its bytes in the order `E` puts them.
  template <std::endian E, class T>
  static T in(T v) noexcept {
    if constexpr (E == std::endian::native) {
      return v;
    } else if constexpr (sizeof v == 2) {
      return __builtin_bswap16(v);
    } else if constexpr (sizeof v == 4) {
      return __builtin_bswap32(v);
    } else {
      return __builtin_bswap64(v);
    }
  }
  void u8(std::uint32_t v) noexcept { *p++ = static_cast<std::uint8_t>(v); }
  void be16(std::uint32_t v) noexcept { put(in<std::endian::big>(static_cast<std::uint16_t>(v))); }
  void be24(std::uint32_t v) noexcept {
    u8(v >> 16);
    be16(v);
  }
  void be32(std::uint32_t v) noexcept { put(in<std::endian::big>(v)); }
  void be64(std::uint64_t v) noexcept { put(in<std::endian::big>(v)); }
  void le16(std::uint32_t v) noexcept {
    put(in<std::endian::little>(static_cast<std::uint16_t>(v)));
  }
  void le32(std::uint32_t v) noexcept { put(in<std::endian::little>(v)); }
  void bytes(const void* v, std::size_t n) noexcept {
    if (n != 0) std::memcpy(p, v, n);
    p += n;
  }
  void zeros(std::size_t n) noexcept {
    std::memset(p, 0, n);
    p += n;
  }
  // Pads to 4 bytes with the n < 4 zeros it takes; stores 4, as the room frames and blocks
  // have for their padding holds.
  void pad(std::size_t n) noexcept {
    std::memset(p, 0, 4);
    p += n;
  }
};

constexpr std::size_t padded4(std::size_t n) noexcept { return (n + 3) / 4 * 4; }

// The bytes a pcapng option takes: code, length, value padded to 4 bytes.
constexpr std::size_t option_size(std::size_t len) noexcept { return 4 + padded4(len); }

void option(Out& o, std::uint16_t code, const void* value, std::size_t len) noexcept {
  o.le16(code);
  o.le16(static_cast<std::uint32_t>(len));
  o.bytes(value, len);
  o.zeros(padded4(len) - len);
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

// The extension headers a packet carries after its BTH (and a DETH), by its opcode's low 5
// bits: a write's first packet and a READ request a RETH, an atomic an AtomicETH, an ACK and
// a READ response's first and last packets an AETH (an atomic ACK also an AtomicAckETH), the
// last packet of a SEND or WRITE with immediate its ImmDt, of a SEND with invalidate its IETH.
constexpr std::uint8_t kReth = 1, kAtomicEth = 2, kAeth = 4, kAtomicAckEth = 8, kImmOrIeth = 16;
constexpr std::array<std::uint8_t, 32> kExtensionHeaders = [] {
  std::array<std::uint8_t, 32> h{};
  h[kWriteFirst] = h[kWriteOnly] = h[kReadRequest] = kReth;
  h[kWriteOnlyImm] = kReth | kImmOrIeth;
  h[kCmpSwap] = h[kFetchAdd] = kAtomicEth;
  h[kAck] = h[kReadRespFirst] = h[kReadRespLast] = h[kReadRespOnly] = kAeth;
  h[kAtomicAck] = kAeth | kAtomicAckEth;
  h[kSendLastImm] = h[kSendOnlyImm] = h[kWriteLastImm] = kImmOrIeth;
  h[kSendLastInv] = h[kSendOnlyInv] = kImmOrIeth;
  return h;
}();

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



// Packet `i` of the `n` a message is cut into, the first with PSN `psn`.
Packet packet_at(const PacketRecord& r, Family f, std::uint32_t psn, std::uint32_t i,
                 std::uint32_t n, std::uint32_t mtu) noexcept {
  Packet p;
  p.first = i == 0;
  p.last = i + 1 == n;
  p.psn = (psn + i) & kPsnMask;
  p.opcode = opcode_of(r, f, p.first, p.last);
  if (f == Family::send || f == Family::write || f == Family::read_response) {
    p.offset = i * mtu;
    p.bytes = p.last ? r.length - p.offset : mtu;
  }
  return p;
}

void mac(Out& o, std::uint16_t dev, std::uint8_t port) noexcept {
  o.be16(0x0200);  // locally administered
  o.u8(0);
  o.be16(dev);
  o.u8(port);
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

// Writes the IPv4 header checksum of the 20-byte header at `ip` (its checksum field 0): the
// ones' complement sum of its 16-bit words, summed here 32 bits at a time in the host's byte
// order, which gives the same bytes (RFC 1071, 2.(B)).
void put_ip_checksum(std::uint8_t* ip) noexcept {
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < 20; i += 4) {
    std::uint32_t word;
    std::memcpy(&word, ip + i, 4);
    sum += word;
  }
  sum = (sum & 0xffffffff) + (sum >> 32);
  sum = (sum & 0xffff) + (sum >> 16);
  sum = (sum & 0xffff) + (sum >> 16);
  sum = (sum & 0xffff) + (sum >> 16);
  const auto checksum = static_cast<std::uint16_t>(~sum);
  std::memcpy(ip + 10, &checksum, 2);
}

constexpr std::size_t kEth = 14, kIp = 20, kUdp = 8, kBth = 12;
// The most a frame adds to its payload: headers, the largest extension headers an opcode
// has (AtomicETH and DETH are never together), pad, ICRC.
constexpr std::size_t kFrameOverhead = kEth + kIp + kUdp + kBth + 8 + 28 + 4 + 8 + 4 + 3 + 4;

// The ICRC of a RoCE v2 packet over IPv4 (IBTA Annex A17.3.3): CRC-32 over 8 bytes of ones
// (the LRH RoCE v2 has not) and the packet from the IP header to the end of the payload and
// pad, with the fields that change on the way masked to ones: IP TOS, TTL and checksum, the
// UDP checksum, BTH byte 4 (FECN, BECN, resv6). Little-endian on the wire, after the pad. The
// CRC runs from the last 8 bytes of the Ethernet header, with this mask over its first bytes.
constexpr std::size_t kIcrcFrom = kEth - 8;
constexpr Crc32Head kIcrcMask = [] {
  Crc32Head m{};
  for (std::size_t i = 0; i < 8; ++i) m[i] = 0xff;  // for the LRH
  constexpr std::size_t ip = 8;
  m[ip + 1] = 0xff;                          // TOS (DSCP, ECN)
  m[ip + 8] = 0xff;                          // TTL
  m[ip + 10] = m[ip + 11] = 0xff;            // header checksum
  m[ip + kIp + 6] = m[ip + kIp + 7] = 0xff;  // UDP checksum
  m[ip + kIp + kUdp + 4] = 0xff;             // FECN, BECN, resv6
  return m;
}();
static_assert(8 + kIp + kUdp + kBth == kCrc32Head, "the mask ends with the BTH");

// Writes one frame at `f` (room for kFrameOverhead + p.bytes): Ethernet II / IPv4 / UDP / BTH /
// extension headers / payload / pad, and the ICRC's place (PcapWriter::icrc_later computes
// it). Returns its length, the ICRC's 4 bytes included.
std::size_t write_frame(std::uint8_t* f, const PacketRecord& r, const Packet& p,
                        std::uint32_t msn) noexcept {
  const std::uint8_t transport = p.opcode & 0xe0;
  const std::uint8_t op = p.opcode & 0x1f;
  const bool is_response = r.kind != PacketKind::request;
  std::uint8_t* const ib = f + kEth + kIp + kUdp;  // BTH to the end of the pad
  Out o{ib};
  // BTH.
  const std::uint32_t pad = (4 - p.bytes % 4) % 4;
  const bool event_point =
      !is_response && p.last &&
      (r.opcode == WrOpcode::send || r.opcode == WrOpcode::send_with_imm ||
       r.opcode == WrOpcode::send_with_inv || r.opcode == WrOpcode::rdma_write_with_imm);
  const bool se = r.solicited && event_point;
  const bool ack_req = transport == 0x00 && !is_response && p.last;  // RC
  o.u8(p.opcode);
  o.u8((se ? 0x80 : 0) | (pad << 4));  // MigReq 0, TVer 0
  o.be16(0xffff);                      // P_Key
  o.u8(0);                             // FECN, BECN, resv6
  o.be24(r.dst_qpn);
  o.u8(ack_req ? 0x80 : 0);
  o.be24(p.psn);
  // Extension headers, in the order IBTA 9.2 puts them.
  if (transport == 0x60) {  // DETH
    o.be32(r.qkey);
    o.u8(0);
    o.be24(r.src_qpn);
  }
  const std::uint8_t headers = kExtensionHeaders[op];
  if ((headers & kReth) != 0) {
    o.be64(r.remote_addr);
    o.be32(r.rkey);
    o.be32(r.length);
  }
  if ((headers & kAtomicEth) != 0) {
    o.be64(r.remote_addr);
    o.be32(r.rkey);
    o.be64(op == kCmpSwap ? r.swap : r.compare_add);
    o.be64(op == kCmpSwap ? r.compare_add : 0);
  }
  if ((headers & kAeth) != 0) {
    o.u8(syndrome(r));
    o.be24(msn);
  }
  if ((headers & kAtomicAckEth) != 0) o.be64(r.atomic_original);
  if ((headers & kImmOrIeth) != 0) o.be32(r.imm);
  // Payload: the bytes the record carries; zeros where it carries none.
  std::size_t have = 0;
  if (p.offset < r.payload.size()) {
    have = std::min<std::size_t>(p.bytes, r.payload.size() - p.offset);
    o.bytes(r.payload.data() + p.offset, have);
  }
  if (have < p.bytes) o.zeros(p.bytes - have);
  o.pad(pad);
  const auto ib_len = static_cast<std::uint32_t>(o.p - ib);

  Out h{f};
  mac(h, r.dst_dev, r.dst_port);
  mac(h, r.src_dev, r.src_port);
  h.be16(0x0800);
  // IPv4: no options, DSCP/ECN 0, id 0, DF, TTL 64, UDP.
  const std::uint32_t ip_len = kIp + kUdp + ib_len + 4;
  std::uint8_t* const ip = h.p;
  h.be16(0x4500);
  h.be16(ip_len);
  h.be16(0);
  h.be16(0x4000);
  h.be16((64 << 8) | 17);  // TTL, protocol
  h.be16(0);
  h.bytes(r.src_gid.raw.data() + 12, 4);  // the IPv4 address of an IPv4-mapped GID
  h.bytes(r.dst_gid.raw.data() + 12, 4);
  put_ip_checksum(ip);
  // UDP, checksum 0 (RoCE v2 allows it).
  h.be16(udp_sport(r.src_qpn, r.dst_qpn));
  h.be16(kRoceV2Port);
  h.be16(ip_len - kIp);
  h.be16(0);
  return static_cast<std::size_t>(o.p - f) + 4;
}

std::string_view fate_comment(const PacketRecord& r, std::string& buf) {
  switch (r.fate) {
    case PacketFate::delivered: return {};
    case PacketFate::delayed:
      buf =
          "verbsim: delayed by the fault plan, arrives at " + std::to_string(r.arrives_ns) + " ns";
      return buf;
    case PacketFate::duplicated:
      buf = "verbsim: duplicated by the fault plan, the copy arrives at " +
            std::to_string(r.duplicate_ns) + " ns";
      return buf;
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

constexpr std::size_t kOutBytes = std::size_t{1} << 20;
constexpr std::size_t kReserveBytes = std::size_t{64} << 20;
constexpr std::uint32_t kEpb = 6;

}  // namespace

PcapWriter::PcapWriter(const std::string& path)
    : path_(path), file_(std::fopen(path.c_str(), "wb")) {
  if (file_ == nullptr) {
    throw std::system_error(errno, std::generic_category(),
                            "packet capture: cannot create " + path_);
  }
  out_.resize(kOutBytes);
  struct stat st {};
  reserving_ = ::fstat(::fileno(file_), &st) == 0 && S_ISREG(st.st_mode);
  // Section Header Block: byte-order magic, version 1.0, section length unknown.
  static constexpr char kApp[] = "verbsim";
  Out o{begin_block(0x0a0d0d0a, 16 + option_size(sizeof kApp) + option_size(0))};
  o.le32(0x1a2b3c4d);
  o.le16(1);
  o.le16(0);
  o.le32(0xffffffff);
  o.le32(0xffffffff);
  option(o, 4, kApp, sizeof kApp - 1);  // shb_userappl
  option(o, 0, nullptr, 0);             // opt_endofopt
  end_block(o.p);
}

PcapWriter::~PcapWriter() {
  if (file_ == nullptr) return;
  flush();
  std::fflush(file_);
  give_back_reserve();
  std::fclose(file_);
}

inline std::uint8_t* PcapWriter::begin_block(std::uint32_t type, std::size_t body_max) {
  if (out_.size() - used_ < 12 + body_max) {
    flush();
    if (out_.size() < 12 + body_max) out_.resize(12 + body_max);
  }
  Out o{out_.data() + used_};
  o.le32(type);
  o.le32(0);  // the total length, when known
  return o.p;
}

inline void PcapWriter::end_block(std::uint8_t* body_end) {
  std::uint8_t* const start = out_.data() + used_;
  const auto total = static_cast<std::uint32_t>(body_end - start + 4);
  Out{body_end}.le32(total);
  Out{start + 4}.le32(total);
  used_ += total;
}

void PcapWriter::icrc_later(std::uint8_t* frame, std::size_t len) {
  icrcs_[icrcs_waiting_++] = {0xffffffffu, frame + kIcrcFrom, len - 4 - kIcrcFrom};
  if (icrcs_waiting_ == icrcs_.size()) write_icrcs();
}

void PcapWriter::write_icrcs() {
  const std::span<Crc32Job> jobs(icrcs_.data(), icrcs_waiting_);
  crc32_jobs(jobs, kIcrcMask);
  for (const Crc32Job& j : jobs) Out{out_.data() + (j.p + j.n - out_.data())}.le32(~j.crc);
  icrcs_waiting_ = 0;
}

void PcapWriter::flush() {
  if (icrcs_waiting_ != 0) write_icrcs();
  if (used_ == 0) return;
  // The space the next blocks take is reserved kReserveBytes at a time, beyond the file's end
  // (its length stays what has been written): ext4, for one, then finds their blocks
  // allocated, where it would reserve and account for every page written.
  if (reserving_ && written_ + used_ > reserved_) {
    reserved_ = written_ + kReserveBytes;
    if (::fallocate(::fileno(file_), FALLOC_FL_KEEP_SIZE, static_cast<off_t>(written_),
                    static_cast<off_t>(kReserveBytes)) != 0) {
      reserving_ = false;  // not on this file system: as before
    }
  }
  if (std::fwrite(out_.data(), 1, used_, file_) != used_) write_failed_ = true;
  written_ += used_;
  used_ = 0;
}

bool PcapWriter::give_back_reserve() {
  if (reserved_ <= written_) return true;
  reserved_ = written_;
  // To the length the file has (a write that failed may have left it shorter).
  struct stat st {};
  return ::fstat(::fileno(file_), &st) == 0 && ::ftruncate(::fileno(file_), st.st_size) == 0;
}

std::uint32_t PcapWriter::add_interface(std::uint16_t dev, std::uint8_t port) {
  const std::size_t at = std::size_t{dev} << 8 | port;
  if (at >= interfaces_.size()) interfaces_.resize(at + 1, 0);
  interfaces_[at] = ++interface_count_;
  // Interface Description Block: Ethernet, no snap length, nanosecond timestamps.
  const std::string name = "sim" + std::to_string(dev) + " port " + std::to_string(port);
  Out o{begin_block(1, 8 + option_size(name.size()) + option_size(1) + option_size(0))};
  o.le16(1);  // LINKTYPE_ETHERNET
  o.le16(0);
  o.le32(0);
  option(o, 2, name.data(), name.size());  // if_name
  const std::uint8_t nanoseconds = 9;
  option(o, 9, &nanoseconds, 1);  // if_tsresol
  option(o, 0, nullptr, 0);
  end_block(o.p);
  return interface_count_ - 1;
}


inline std::uint8_t* PcapWriter::begin_epb(std::uint32_t interface, std::uint64_t ts_ns,
                                           std::size_t frame_max, std::string_view comment) {
  Out o{begin_block(kEpb, 20 + frame_max + 3 + option_size(comment.size()) + option_size(0))};
  o.le32(interface);
  o.le32(static_cast<std::uint32_t>(ts_ns >> 32));
  o.le32(static_cast<std::uint32_t>(ts_ns));
  o.le32(0);  // captured and on the wire: the frame's length, when known
  o.le32(0);
  return o.p;
}

inline void PcapWriter::end_epb(std::size_t frame_len, std::string_view comment) {
  std::uint8_t* const frame = out_.data() + used_ + 28;
  Out lengths{frame - 8};
  lengths.le32(static_cast<std::uint32_t>(frame_len));
  lengths.le32(static_cast<std::uint32_t>(frame_len));
  Out o{frame + frame_len};
  o.pad(padded4(frame_len) - frame_len);
  if (!comment.empty()) {
    option(o, 1, comment.data(), comment.size());  // opt_comment
    option(o, 0, nullptr, 0);
  }
  end_block(o.p);
  ++frames_;
}

void PcapWriter::write_held(std::uint64_t ts_ns) {
  static constexpr std::string_view kDuplicate = "verbsim: duplicate";
  while (!held_.empty() && held_.front().ts_ns <= ts_ns) {
    std::pop_heap(held_.begin(), held_.end(), HeldAfter{});
    const Held& h = held_.back();
    std::uint8_t* const f = begin_epb(h.interface, h.ts_ns, h.frame.size(), kDuplicate);
    std::memcpy(f, h.frame.data(), h.frame.size());
    end_epb(h.frame.size(), kDuplicate);
    held_.pop_back();
  }
}


void PcapWriter::packet(const PacketRecord& r) {
  write_held_until(r.sent_ns);
  const std::uint32_t msn = r.msn;
  const std::uint32_t interface = interface_of(r.src_dev, r.src_port);
  std::string text;
  const std::string_view comment =
      r.fate == PacketFate::delivered ? std::string_view() : fate_comment(r, text);
  const Family f = family_of(r);
  const std::uint32_t n = wire::packets_of(r, f);
  if (n == 0) return;
  for (std::uint32_t i = 0; i < n; ++i) {
    const Packet p = packet_at(r, f, r.wire_psn, i, n, wire::kMtu);
    std::uint8_t* const frame = begin_epb(interface, r.sent_ns, kFrameOverhead + p.bytes, comment);
    const std::size_t len = write_frame(frame, r, p, msn);
    icrc_later(frame, len);
    if (r.fate == PacketFate::duplicated) {
      write_icrcs();  // the copy is taken whole
      held_.push_back({r.duplicate_ns, seq_++, interface, Bytes(frame, frame + len)});
      std::push_heap(held_.begin(), held_.end(), HeldAfter{});
    }
    end_epb(len, comment);
  }
}

void PcapWriter::cm(const CmRecord& r) {
  if (!r.sidr && (r.kind == CmMessage::req || r.kind == CmMessage::rep)) {
    cm_qpns_[r.local_comm_id] = r.qpn;
  }
  std::uint32_t remote_qpn = 0;
  if (r.kind == CmMessage::dreq) {
    const auto it = cm_qpns_.find(r.remote_comm_id);
    if (it != cm_qpns_.end()) remote_qpn = it->second;
  }
  write_cm_mad(r, remote_qpn, mad_);
  // A UD SEND_ONLY from QP 1 to QP 1, a PSN after the last of the sending device's QP 1.
  if (r.src_dev >= gsi_psns_.size()) gsi_psns_.resize(r.src_dev + std::size_t{1}, 0);
  PacketRecord p;
  p.sent_ns = r.sent_ns;
  p.arrives_ns = r.arrives_ns;
  p.fate = r.fate;
  p.kind = PacketKind::request;
  p.qp_type = QpType::ud;
  p.opcode = WrOpcode::send;
  p.src_dev = r.src_dev;
  p.dst_dev = r.dst_dev;
  p.src_port = r.src_port;
  p.dst_port = r.dst_port;
  p.src_gid = r.src_gid;
  p.dst_gid = r.dst_gid;
  p.src_qpn = 1;
  p.dst_qpn = 1;
  p.psn = gsi_psns_[r.src_dev];
  p.wire_psn = p.psn;  // UD: a packet a message
  gsi_psns_[r.src_dev] = (p.psn + 1) & kPsnMask;
  p.length = kMadBytes;
  p.qkey = kGsiQkey;
  p.payload = mad_;
  packet(p);
}

void PcapWriter::finished(std::uint64_t /*time_ns*/) {
  write_held_until(std::numeric_limits<std::uint64_t>::max());
  flush();
  if (std::fflush(file_) != 0) write_failed_ = true;
  if (!give_back_reserve()) write_failed_ = true;
  if (write_failed_) {
    std::fprintf(stderr, "verbsim: packet capture %s: could not write every frame\n",
                 path_.c_str());
  }
}

}  // namespace verbsim::sim
