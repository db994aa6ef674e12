// CRC-32 of IEEE 802.3 (reflected polynomial 0xedb88320), as zlib's crc32 computes it: the
// packet capture's ICRC (observe/pcap.cpp). On x86-64 CPUs with PCLMULQDQ (checked once, as
// the program starts) 16 bytes a step by carry-less multiplication (Intel, "Fast CRC Computation
// for Generic Polynomials Using PCLMULQDQ Instruction", 2009); on other CPUs, and for the bytes
// after the last 16-byte block, with tables (slicing-by-16). Both give the same CRC.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace verbsim::sim {

// The running CRC after `n` more bytes at `p`. Start from 0xffffffff and invert the result
// (zlib's crc32(0, p, n) is ~crc32_update(0xffffffff, p, n)).
std::uint32_t crc32_update(std::uint32_t crc, const std::uint8_t* p, std::size_t n) noexcept;

// The same with the tables alone: what crc32_update does on a CPU without PCLMULQDQ.
std::uint32_t crc32_update_tables(std::uint32_t crc, const std::uint8_t* p, std::size_t n) noexcept;

// Whether crc32_update multiplies on this CPU (PCLMULQDQ), or uses the tables alone.
bool crc32_multiplies() noexcept;

// A CRC of `n` >= kCrc32Head bytes at `p`, continued from `crc`, which the result replaces.
struct Crc32Job {
  std::uint32_t crc;
  const std::uint8_t* p;
  std::size_t n;
};
inline constexpr std::size_t kCrc32Head = 48;
using Crc32Head = std::array<std::uint8_t, kCrc32Head>;

// crc32_update of every job, as if each one's first kCrc32Head bytes were OR-ed with `mask`
// (fields a CRC takes as ones: the ICRC's masked fields); the bytes are only read. With
// PCLMULQDQ four jobs at a time, interleaved: each multiplication waits for the one before of
// its own job, and the others' fill that wait.
void crc32_jobs(std::span<Crc32Job> jobs, const Crc32Head& mask) noexcept;

// The same with the tables alone.
void crc32_jobs_tables(std::span<Crc32Job> jobs, const Crc32Head& mask) noexcept;

}  // namespace verbsim::sim
