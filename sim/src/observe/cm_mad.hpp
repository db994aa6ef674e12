// A connection manager message as the MAD the IB CM sends (IBTA Vol 1, 13.4 and 12.6): the
// common MAD header (management class 0x07 CM, class version 2, method Send), then the CM
// attribute: REQ, REP, RTU, REJ, DREQ, DREP, SIDR_REQ or SIDR_REP, with rdma_cm's service id
// and, in a REQ or SIDR_REQ, its private data header (IP addresses and source port). The
// packet capture puts it in a UD SEND_ONLY to QP 1. docs/OBSERVABILITY.md, "Packet capture".
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "verbsim/sim/observe.hpp"

namespace verbsim::sim {

inline constexpr std::size_t kMadBytes = 256;
inline constexpr std::size_t kMadHeaderBytes = 24;     // the CM attribute starts here
inline constexpr std::uint32_t kGsiQkey = 0x80010000;  // QP 1's Q_Key (IBTA 13.5.1)

// CM attribute ids (IBTA table 101).
enum class CmAttribute : std::uint16_t {
  req = 0x0010,
  rej = 0x0012,
  rep = 0x0013,
  rtu = 0x0014,
  dreq = 0x0015,
  drep = 0x0016,
  sidr_req = 0x0017,
  sidr_rep = 0x0018,
};

// The attribute a record is sent as: a UDP id's REQ is a SIDR_REQ, its REP and REJ SIDR_REPs.
CmAttribute cm_attribute(const CmRecord& r) noexcept;

// Writes the MAD of `r` into `out`. `remote_qpn`: the QP of the end a DREQ goes to (the record
// does not carry it; 0 when not known).
void write_cm_mad(const CmRecord& r, std::uint32_t remote_qpn,
                  std::span<std::uint8_t, kMadBytes> out) noexcept;

}  // namespace verbsim::sim
