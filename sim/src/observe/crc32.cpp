#include "observe/crc32.hpp"

#include <algorithm>
#include <array>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define VERBSIM_CRC32_PCLMUL 1
#include <immintrin.h>
#endif

namespace verbsim::sim {

namespace {

// t[0] is the byte-at-a-time table, t[k] a byte's effect k bytes further on. 16 KiB of tables;
// on frames of 100 bytes about 1.5x as fast as slicing-by-8 and 3x as fast as zlib's crc32.
struct Crc32Tables {
  std::array<std::array<std::uint32_t, 256>, 16> t{};
  constexpr Crc32Tables() {
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) != 0 ? 0xedb88320u ^ (c >> 1) : c >> 1;
      t[0][i] = c;
    }
    for (std::size_t k = 1; k < t.size(); ++k) {
      for (std::size_t i = 0; i < 256; ++i) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xff];
    }
  }
};
constexpr Crc32Tables kCrc;

std::uint32_t load_le32(const std::uint8_t* p) noexcept {
  return p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
}

#ifdef VERBSIM_CRC32_PCLMUL
__m128i load16(const std::uint8_t* at) noexcept {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(at));
}

// Carry-less multiplications by the paper's constants, bit-reflected: x^128 and x^192 mod P
// fold a 128-bit remainder into the next 16 bytes; x^64 mod P takes 64 bits to 32; mu and P
// are Barrett's. The remainder `x` folded into the next 16 bytes, `block`:
[[gnu::target("pclmul")]] inline __m128i fold16(__m128i x, __m128i block) noexcept {
  const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009e, 0x01751997d0);
  const __m128i lo = _mm_clmulepi64_si128(x, k3k4, 0x00);
  const __m128i hi = _mm_clmulepi64_si128(x, k3k4, 0x11);
  return _mm_xor_si128(_mm_xor_si128(lo, hi), block);
}

// The running CRC of the 128-bit remainder `x`: reduced to 64 bits, to 32, and Barrett-reduced.
[[gnu::target("pclmul")]] inline std::uint32_t reduce(__m128i x) noexcept {
  const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009e, 0x01751997d0);
  const __m128i k5 = _mm_set_epi64x(0, 0x0163cd6124);
  const __m128i poly = _mm_set_epi64x(0x01f7011641, 0x01db710641);  // mu, P
  const __m128i low32 = _mm_setr_epi32(-1, 0, -1, 0);
  // 128 bits to 64.
  x = _mm_xor_si128(_mm_srli_si128(x, 8), _mm_clmulepi64_si128(x, k3k4, 0x10));
  // 64 to 32.
  x = _mm_xor_si128(_mm_srli_si128(x, 4), _mm_clmulepi64_si128(_mm_and_si128(x, low32), k5, 0x00));
  // Barrett: the quotient by mu, times P.
  __m128i q = _mm_clmulepi64_si128(_mm_and_si128(x, low32), poly, 0x10);
  q = _mm_clmulepi64_si128(_mm_and_si128(q, low32), poly, 0x00);
  x = _mm_xor_si128(x, q);
  return static_cast<std::uint32_t>(_mm_cvtsi128_si32(_mm_srli_si128(x, 4)));
}

// The running CRC after the n / 16 whole blocks at `p` (n >= 16): each block folded into a
// 128-bit remainder, which is then reduced to the CRC.
[[gnu::target("pclmul")]] std::uint32_t fold_blocks(std::uint32_t crc, const std::uint8_t* p,
                                                    std::size_t n) noexcept {
  __m128i x = _mm_xor_si128(load16(p), _mm_cvtsi32_si128(static_cast<int>(crc)));
  for (p += 16, n -= 16; n >= 16; p += 16, n -= 16) x = fold16(x, load16(p));
  return reduce(x);
}
#endif

}  // namespace

std::uint32_t crc32_update_tables(std::uint32_t crc, const std::uint8_t* p,
                                  std::size_t n) noexcept {
  const auto& t = kCrc.t;
  // What the 4 bytes of `v` add when they are `at` to `at` + 3 bytes from the step's end.
  const auto word = [&t](std::uint32_t v, std::size_t at) {
    return t[at + 3][v & 0xff] ^ t[at + 2][(v >> 8) & 0xff] ^ t[at + 1][(v >> 16) & 0xff] ^
           t[at][v >> 24];
  };
  for (; n >= 16; n -= 16, p += 16) {
    crc = word(load_le32(p) ^ crc, 12) ^ word(load_le32(p + 4), 8) ^ word(load_le32(p + 8), 4) ^
          word(load_le32(p + 12), 0);
  }
  for (; n >= 4; n -= 4, p += 4) crc = word(load_le32(p) ^ crc, 0);
  for (; n > 0; --n, ++p) crc = t[0][(crc ^ *p) & 0xff] ^ (crc >> 8);
  return crc;
}

#ifdef VERBSIM_CRC32_PCLMUL
namespace {
// Set when this file's statics are initialised; until then (a call from another static
// initialiser) the tables serve.
const bool kMultiplies = [] {
  __builtin_cpu_init();
  return __builtin_cpu_supports("pclmul") != 0;
}();
}  // namespace
#endif

bool crc32_multiplies() noexcept {
#ifdef VERBSIM_CRC32_PCLMUL
  return kMultiplies;
#else
  return false;
#endif
}

#ifdef VERBSIM_CRC32_PCLMUL
namespace {
// The N jobs at `jobs` (crc32_jobs), folded side by side: block b of every job, then block
// b + 1. The whole blocks' CRCs, then each job's last bytes by the tables.
template <std::size_t N>
[[gnu::target("pclmul")]] void fold_side_by_side(Crc32Job* jobs, const Crc32Head& mask) noexcept {
  static_assert(kCrc32Head == 48);
  const __m128i head[3] = {load16(mask.data()), load16(mask.data() + 16),
                           load16(mask.data() + 32)};
  __m128i x[N];
  std::size_t blocks[N];
  std::size_t most = 0;
#pragma GCC unroll 4
  for (std::size_t i = 0; i < N; ++i) {
    blocks[i] = jobs[i].n / 16;
    most = std::max(most, blocks[i]);
    x[i] = _mm_xor_si128(_mm_or_si128(load16(jobs[i].p), head[0]),
                         _mm_cvtsi32_si128(static_cast<int>(jobs[i].crc)));
  }
  for (std::size_t b = 1; b < 3; ++b) {
#pragma GCC unroll 4
    for (std::size_t i = 0; i < N; ++i) {
      x[i] = fold16(x[i], _mm_or_si128(load16(jobs[i].p + 16 * b), head[b]));
    }
  }
  for (std::size_t b = 3; b < most; ++b) {
#pragma GCC unroll 4
    for (std::size_t i = 0; i < N; ++i) {
      if (b < blocks[i]) x[i] = fold16(x[i], load16(jobs[i].p + 16 * b));
    }
  }
#pragma GCC unroll 4
  for (std::size_t i = 0; i < N; ++i) {
    jobs[i].crc = reduce(x[i]);
    const std::size_t whole = blocks[i] * 16;
    if (whole != jobs[i].n) {
      jobs[i].crc = crc32_update_tables(jobs[i].crc, jobs[i].p + whole, jobs[i].n - whole);
    }
  }
}
}  // namespace
#endif

void crc32_jobs(std::span<Crc32Job> jobs, const Crc32Head& mask) noexcept {
#ifdef VERBSIM_CRC32_PCLMUL
  if (kMultiplies) {
    Crc32Job* j = jobs.data();
    std::size_t left = jobs.size();
    for (; left >= 4; left -= 4, j += 4) fold_side_by_side<4>(j, mask);
    switch (left) {
      case 3: fold_side_by_side<3>(j, mask); break;
      case 2: fold_side_by_side<2>(j, mask); break;
      case 1: fold_side_by_side<1>(j, mask); break;
      default: break;
    }
    return;
  }
#endif
  crc32_jobs_tables(jobs, mask);
}

void crc32_jobs_tables(std::span<Crc32Job> jobs, const Crc32Head& mask) noexcept {
  for (Crc32Job& j : jobs) {
    Crc32Head head;
    for (std::size_t k = 0; k < kCrc32Head; ++k) head[k] = j.p[k] | mask[k];
    j.crc = crc32_update_tables(crc32_update_tables(j.crc, head.data(), kCrc32Head),
                                j.p + kCrc32Head, j.n - kCrc32Head);
  }
}

std::uint32_t crc32_update(std::uint32_t crc, const std::uint8_t* p, std::size_t n) noexcept {
#ifdef VERBSIM_CRC32_PCLMUL
  if (n >= 16 && kMultiplies) {
    crc = fold_blocks(crc, p, n);
    if (n % 16 == 0) return crc;
    p += n & ~std::size_t{15};
    n &= 15;
  }
#endif
  return crc32_update_tables(crc, p, n);
}

}  // namespace verbsim::sim
