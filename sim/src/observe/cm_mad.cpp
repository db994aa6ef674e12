#include "observe/cm_mad.hpp"

#include <algorithm>
#include <array>

namespace verbsim::sim {

namespace {

void be16(std::uint8_t* p, std::uint32_t v) noexcept {
  p[0] = static_cast<std::uint8_t>(v >> 8);
  p[1] = static_cast<std::uint8_t>(v);
}
void be24(std::uint8_t* p, std::uint32_t v) noexcept {
  p[0] = static_cast<std::uint8_t>(v >> 16);
  be16(p + 1, v);
}
void be32(std::uint8_t* p, std::uint32_t v) noexcept {
  be16(p, v >> 16);
  be16(p + 2, v);
}
void be64(std::uint8_t* p, std::uint64_t v) noexcept {
  be32(p, static_cast<std::uint32_t>(v >> 32));
  be32(p + 4, static_cast<std::uint32_t>(v));
}

// Values a Linux CM over RoCE sends and the record does not carry.
constexpr std::uint8_t kCmResponseTimeout = 20;  // rdma_cm's CMA_CM_RESPONSE_TIMEOUT
constexpr std::uint8_t kMaxCmRetries = 15;       // rdma_cm's CMA_MAX_CM_RETRIES
constexpr std::uint8_t kPathMtu1024 = 3;         // IBTA's MTU code of 1024 bytes
constexpr std::uint8_t kLocalAckTimeout = 14;    // 4.096 us << 14: the simulator's 67 ms
constexpr std::uint8_t kTargetAckDelay = 15;     // rxe's local CA ACK delay
constexpr std::uint8_t kHopLimit = 64;           // as the frames' IPv4 TTL
constexpr std::uint32_t kTidHigh = 1;            // the CM agent's half of transaction ids

// The rdma_cm service id (IBTA Annex A11.2): prefix 0x0000000001, the port space (TCP 0x0106,
// UDP 0x0111) and the port.
std::uint64_t service_id(bool udp, std::uint16_t port) noexcept {
  return std::uint64_t{0x0000000001} << 24 | std::uint64_t{udp ? 0x0111u : 0x0106u} << 16 | port;
}

// The device's CA GUID: the EUI-64 of its first port's made-up MAC (02:00:00:dd:dd:01).
std::uint64_t ca_guid(std::uint16_t dev) noexcept {
  return 0x020000fffe000001ull | std::uint64_t{dev} << 8;
}

bool ipv4_mapped(const std::array<std::uint8_t, 16>& a) noexcept {
  return std::all_of(a.begin(), a.begin() + 10, [](std::uint8_t b) { return b == 0; }) &&
         a[10] == 0xff && a[11] == 0xff;
}

// An address of rdma_cm's private data header (struct cma_hdr): IPv4 in the last 4 bytes
// after 12 of zeros, IPv6 as it is.
void cma_address(std::uint8_t* p, const std::array<std::uint8_t, 16>& a) noexcept {
  if (ipv4_mapped(a)) {
    std::copy(a.begin() + 12, a.end(), p + 12);
  } else {
    std::copy(a.begin(), a.end(), p);
  }
}

// rdma_cm's private data header of a REQ or SIDR_REQ (36 bytes): version 0, IP version in the
// top 4 bits, the source port, the source and destination addresses.
void cma_header(std::uint8_t* p, const CmRecord& r) noexcept {
  p[0] = 0;
  p[1] = ipv4_mapped(r.src_ip) ? 4 << 4 : 6 << 4;
  be16(p + 2, r.src_ip_port);
  cma_address(p + 4, r.src_ip);
  cma_address(p + 20, r.dst_ip);
}

void private_data(std::uint8_t* p, std::size_t room, const CmRecord& r) noexcept {
  std::copy_n(r.private_data.begin(), std::min(room, r.private_data.size()), p);
}

// The transaction id: the exchange's (REQ, REP, RTU, REJ; DREQ, DREP; SIDR) is the comm id of
// the end that started it, as Linux forms them; Wireshark pairs a REP with its REQ by it.
std::uint64_t transaction_id(const CmRecord& r) noexcept {
  const bool answer =
      r.kind == CmMessage::rep || r.kind == CmMessage::rej || r.kind == CmMessage::drep;
  const std::uint32_t id = answer && r.remote_comm_id != 0 ? r.remote_comm_id : r.local_comm_id;
  return std::uint64_t{kTidHigh} << 32 | id;
}

void req(std::uint8_t* a, const CmRecord& r) noexcept {
  be32(a + 0, r.local_comm_id);
  be64(a + 8, service_id(false, r.dst_ip_port));
  be64(a + 16, ca_guid(r.src_dev));
  // 28: local Q_Key, 0 for RC.
  be24(a + 32, r.qpn);
  a[35] = r.responder_resources;
  a[39] = r.initiator_depth;  // after the local EECN, 0
  // Remote CM response timeout, transport service type RC (0), end-to-end flow control.
  a[43] = static_cast<std::uint8_t>(kCmResponseTimeout << 3 | 1);
  be24(a + 44, r.psn);
  a[47] = static_cast<std::uint8_t>(kCmResponseTimeout << 3 | (r.retry_count & 7));
  be16(a + 48, 0xffff);  // P_Key
  a[50] = static_cast<std::uint8_t>(kPathMtu1024 << 4 | (r.rnr_retry_count & 7));
  a[51] = static_cast<std::uint8_t>(kMaxCmRetries << 4);  // no SRQ, no extended transport
  // The primary path: LIDs 0xffff (permissive: RoCE has none), the ports' GIDs.
  be16(a + 52, 0xffff);
  be16(a + 54, 0xffff);
  std::copy(r.src_gid.raw.begin(), r.src_gid.raw.end(), a + 56);
  std::copy(r.dst_gid.raw.begin(), r.dst_gid.raw.end(), a + 72);
  a[93] = kHopLimit;  // after the flow label, packet rate and traffic class, 0
  a[94] = 0;          // SL 0, not subnet local (the hop limit is over 1)
  a[95] = static_cast<std::uint8_t>(kLocalAckTimeout << 3);
  // 96: no alternate path. 140: 92 bytes of private data.
  cma_header(a + 140, r);
  private_data(a + 176, 56, r);
}

void rep(std::uint8_t* a, const CmRecord& r) noexcept {
  be32(a + 0, r.local_comm_id);
  be32(a + 4, r.remote_comm_id);
  be24(a + 12, r.qpn);
  be24(a + 20, r.psn);
  a[24] = r.responder_resources;
  a[25] = r.initiator_depth;
  // Target ACK delay, failover accepted (0), end-to-end flow control.
  a[26] = static_cast<std::uint8_t>(kTargetAckDelay << 3 | 1);
  a[27] = static_cast<std::uint8_t>((r.rnr_retry_count & 7) << 5);  // no SRQ
  be64(a + 28, ca_guid(r.src_dev));
  private_data(a + 36, 196, r);
}

void rej(std::uint8_t* a, const CmRecord& r) noexcept {
  be32(a + 0, r.local_comm_id);
  be32(a + 4, r.remote_comm_id);
  // 8: the message rejected, a REQ (0); 9: no additional reject information.
  be16(a + 10, static_cast<std::uint32_t>(r.reason));
  private_data(a + 84, 148, r);
}

void sidr_req(std::uint8_t* a, const CmRecord& r) noexcept {
  be32(a + 0, r.local_comm_id);  // the request id
  be16(a + 4, 0xffff);           // P_Key
  be64(a + 8, service_id(true, r.dst_ip_port));
  cma_header(a + 16, r);
  private_data(a + 52, 180, r);
}

void sidr_rep(std::uint8_t* a, const CmRecord& r) noexcept {
  be32(a + 0, r.remote_comm_id);  // the request id it answers
  a[4] = r.kind == CmMessage::rej ? static_cast<std::uint8_t>(r.reason) : 0;  // status
  be24(a + 8, r.qpn);
  be64(a + 12, service_id(true, r.src_ip_port));  // the server's port
  be32(a + 20, r.qkey);
  // 24: ClassPortInfo, 72 bytes, unused. 96: 136 bytes of private data.
  private_data(a + 96, 136, r);
}

}  // namespace

CmAttribute cm_attribute(const CmRecord& r) noexcept {
  switch (r.kind) {
    case CmMessage::req: return r.sidr ? CmAttribute::sidr_req : CmAttribute::req;
    case CmMessage::rep: return r.sidr ? CmAttribute::sidr_rep : CmAttribute::rep;
    case CmMessage::rej: return r.sidr ? CmAttribute::sidr_rep : CmAttribute::rej;
    case CmMessage::rtu: return CmAttribute::rtu;
    case CmMessage::dreq: return CmAttribute::dreq;
    case CmMessage::drep: return CmAttribute::drep;
    case CmMessage::any: break;
  }
  return CmAttribute::req;
}

void write_cm_mad(const CmRecord& r, std::uint32_t remote_qpn,
                  std::span<std::uint8_t, kMadBytes> out) noexcept {
  std::fill(out.begin(), out.end(), 0);
  std::uint8_t* const m = out.data();
  const CmAttribute attribute = cm_attribute(r);
  // The common MAD header: base version 1, class CM (0x07) version 2, method Send (0x03),
  // status 0, the transaction id, the attribute id, attribute modifier 0.
  m[0] = 1;
  m[1] = 0x07;
  m[2] = 2;
  m[3] = 0x03;
  be64(m + 8, transaction_id(r));
  be16(m + 16, static_cast<std::uint32_t>(attribute));
  std::uint8_t* const a = m + kMadHeaderBytes;
  switch (attribute) {
    case CmAttribute::req: req(a, r); break;
    case CmAttribute::rep: rep(a, r); break;
    case CmAttribute::rej: rej(a, r); break;
    case CmAttribute::sidr_req: sidr_req(a, r); break;
    case CmAttribute::sidr_rep: sidr_rep(a, r); break;
    case CmAttribute::dreq:
      be32(a + 0, r.local_comm_id);
      be32(a + 4, r.remote_comm_id);
      be24(a + 8, remote_qpn);
      private_data(a + 12, 220, r);
      break;
    case CmAttribute::rtu:
    case CmAttribute::drep:
      be32(a + 0, r.local_comm_id);
      be32(a + 4, r.remote_comm_id);
      private_data(a + 8, 224, r);
      break;
  }
}

}  // namespace verbsim::sim
