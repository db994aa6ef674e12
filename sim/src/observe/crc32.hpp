// CRC-32 of IEEE 802.3 (reflected polynomial 0xedb88320), as zlib's crc32 computes it: the
// packet capture's ICRC (observe/pcap.cpp). On x86-64 CPUs with PCLMULQDQ (checked once, as
// the program starts) 16 bytes a step by carry-less multiplication (Intel, "Fast CRC Computation
// for Generic Polynomials Using PCLMULQDQ Instruction", 2009); on other CPUs, and for the bytes
// after the last 16-byte block, with tables (slicing-by-16). Both give the same CRC.
#pragma once

#include <cstddef>
#include <cstdint>

namespace verbsim::sim {

// The running CRC after `n` more bytes at `p`. Start from 0xffffffff and invert the result
// (zlib's crc32(0, p, n) is ~crc32_update(0xffffffff, p, n)).
std::uint32_t crc32_update(std::uint32_t crc, const std::uint8_t* p, std::size_t n) noexcept;

// The same with the tables alone: what crc32_update does on a CPU without PCLMULQDQ.
std::uint32_t crc32_update_tables(std::uint32_t crc, const std::uint8_t* p, std::size_t n) noexcept;

// Whether crc32_update multiplies on this CPU (PCLMULQDQ), or uses the tables alone.
bool crc32_multiplies() noexcept;

}  // namespace verbsim::sim
