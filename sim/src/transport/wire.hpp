// What the transport's roles share about messages: which opcodes read, write or run locally,
// and how a payload moves between SGE lists (a NIC's DMA, done when the message arrives).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "transport/send_wqe.hpp"
#include "transport/user_memory.hpp"
#include "verbsim/queue_pair.hpp"
#include "verbsim/types.hpp"

namespace verbsim::sim {

inline bool is_read_or_atomic(WrOpcode op) noexcept {
  return op == WrOpcode::rdma_read || op == WrOpcode::atomic_cmp_and_swp ||
         op == WrOpcode::atomic_fetch_and_add;
}

// What a send WQE's own buffers must allow, and how many of their bytes a message touches: a
// READ's response fills them, an atomic's the first 8 bytes (rxe takes longer buffers), other
// messages are read from them whole.
inline Access local_need(const SendWqe& wq) noexcept {
  return is_read_or_atomic(wq.opcode) ? Access::local_write : Access::none;
}
inline std::uint64_t touched_bytes(const SendWqe& wq) noexcept {
  return is_read_or_atomic(wq.opcode) && wq.opcode != WrOpcode::rdma_read ? 8 : wq.length;
}

// UD sends only SENDs; UC has no READ or atomics. (Profiles that check at post time never
// let anything else into the queue.)
inline bool opcode_supported(QpType type, WrOpcode op) noexcept {
  if (type == QpType::ud) {
    return op == WrOpcode::send || op == WrOpcode::send_with_imm || op == WrOpcode::send_with_inv;
  }
  return type == QpType::rc || !is_read_or_atomic(op);
}

// What a SEND-family message's receive completion says of `imm`: with_imm, with_inv or none.
inline WcFlags recv_flag_of(WrOpcode op) noexcept {
  if (op == WrOpcode::send_with_imm) return WcFlags::with_imm;
  return op == WrOpcode::send_with_inv ? WcFlags::with_inv : WcFlags::none;
}

// BIND_MW and LOCAL_INV run in the requester and put nothing on the wire.
inline bool is_local_op(WrOpcode op) noexcept {
  static_assert(static_cast<int>(WrOpcode::bind_mw) == static_cast<int>(WrOpcode::local_inv) + 1);
  return static_cast<unsigned>(op) - static_cast<unsigned>(WrOpcode::local_inv) < 2;
}


// memcpy where `dst` or `src` is memory of an MR, which the program may have unmapped while it
// was registered: a page gone reads as zeros and takes writes, as pinned memory would
// (user_memory.hpp); World::Impl::dispatch names the MR after the delivery.
[[gnu::always_inline]] inline void copy_mr(void* dst, const void* src, std::size_t n) noexcept {
  const user_memory::Touching touching;
  std::memcpy(dst, src, n);
}

// Scatters `len` bytes from `src` into the SGE list.
inline void scatter(const Sge* dst, std::uint32_t n, const std::uint8_t* src,
                    std::uint64_t len) noexcept {
  for (std::uint32_t i = 0; i < n && len > 0; ++i) {
    const std::uint64_t k = std::min<std::uint64_t>(dst[i].length, len);
    copy_mr(reinterpret_cast<void*>(dst[i].addr), src, k);
    src += k;
    len -= k;
  }
}

// Copies from one SGE list to another (sizes already checked), in general.
inline void sg_copy_lists(const Sge* dst, std::uint32_t nd, const Sge* src,
                          std::uint32_t ns) noexcept {
  std::uint32_t di = 0;
  std::uint64_t doff = 0;
  for (std::uint32_t si = 0; si < ns; ++si) {
    auto* s = reinterpret_cast<const std::uint8_t*>(src[si].addr);
    std::uint64_t left = src[si].length;
    while (left > 0 && di < nd) {
      const std::uint64_t k = std::min<std::uint64_t>(left, dst[di].length - doff);
      copy_mr(reinterpret_cast<std::uint8_t*>(dst[di].addr) + doff, s, k);
      s += k;
      left -= k;
      doff += k;
      if (doff == dst[di].length) {
        ++di;
        doff = 0;
      }
    }
  }
}

// Copies from one SGE list to another (sizes already checked).
[[gnu::always_inline]] inline void sg_copy(const Sge* dst, std::uint32_t nd, const Sge* src,
                                           std::uint32_t ns) noexcept {
  if (nd != 1 || ns != 1) return sg_copy_lists(dst, nd, src, ns);
  if (src->length == 0) return;  // its address may be anything
  copy_mr(reinterpret_cast<void*>(dst->addr), reinterpret_cast<const void*>(src->addr),
          src->length);
}

// What the network header of a UD message says beyond its addresses: the AH's traffic class,
// the TTL (hop limit), and whether the IPv4 checksum is filled in. (The flow label has no field
// in IPv4, where RoCE v2 puts it into the UDP source port; the IPv6 header leaves it 0.)
// The TTL a route gives (Linux's net.ipv4.ip_default_ttl).
inline constexpr std::uint8_t kRouteTtl = 64;

struct NetworkHeader {
  std::uint8_t tclass = 0;
  std::uint8_t ttl = 64;
  bool ipv4_checksum = true;
};

// The 40 bytes a UD receive gets before the payload. RoCE v2 over IPv4 (IPv4-mapped GIDs), as
// rxe's build_rdma_network_hdr and mlx5 lay it out: 20 unused bytes, then the IPv4 header (the
// traffic class is its TOS; it has no flow label); otherwise an IPv6 header (RoCE v2 over IPv6,
// next header UDP).
inline void build_grh(std::uint8_t* out, const Gid& sgid, const Gid& dgid, std::uint32_t length,
                      const NetworkHeader& h) noexcept {
  std::memset(out, 0, 40);
  // UDP (8) + BTH (12) + DETH (8) + payload + ICRC (4)
  const std::uint32_t udp_len = 8 + 12 + 8 + length + 4;
  if (sgid.is_ipv4_mapped() && dgid.is_ipv4_mapped()) {
    std::uint8_t* ip = out + 20;
    const std::uint32_t total = 20 + udp_len;
    ip[0] = 0x45;  // version 4, 5 words
    ip[1] = h.tclass;
    ip[2] = static_cast<std::uint8_t>(total >> 8);
    ip[3] = static_cast<std::uint8_t>(total);
    ip[6] = 0x40;  // don't fragment
    ip[8] = h.ttl;
    ip[9] = 17;    // UDP
    std::memcpy(ip + 12, sgid.raw.data() + 12, 4);
    std::memcpy(ip + 16, dgid.raw.data() + 12, 4);
    if (!h.ipv4_checksum) return;
    std::uint32_t sum = 0;
    for (int i = 0; i < 20; i += 2) sum += static_cast<std::uint32_t>(ip[i] << 8 | ip[i + 1]);
    while (sum > 0xffff) sum = (sum & 0xffff) + (sum >> 16);
    ip[10] = static_cast<std::uint8_t>(~sum >> 8);
    ip[11] = static_cast<std::uint8_t>(~sum);
    return;
  }
  out[0] = static_cast<std::uint8_t>(0x60 | h.tclass >> 4);
  out[1] = static_cast<std::uint8_t>((h.tclass & 0xf) << 4);
  out[4] = static_cast<std::uint8_t>(udp_len >> 8);
  out[5] = static_cast<std::uint8_t>(udp_len);
  out[6] = 17;  // UDP
  out[7] = h.ttl;
  std::memcpy(out + 8, sgid.raw.data(), 16);
  std::memcpy(out + 24, dgid.raw.data(), 16);
}

// Gathers from an SGE list into a plain buffer (for the GRH-prefixed UD receive path).
inline void gather_to(std::uint8_t* dst, const Sge* src, std::uint32_t ns) noexcept {
  for (std::uint32_t i = 0; i < ns; ++i) {
    copy_mr(dst, reinterpret_cast<const void*>(src[i].addr), src[i].length);
    dst += src[i].length;
  }
}

inline bool is_atomic(WrOpcode op) noexcept {
  return op == WrOpcode::atomic_cmp_and_swp || op == WrOpcode::atomic_fetch_and_add;
}

}  // namespace verbsim::sim
