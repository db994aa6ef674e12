#include "observe/crc32.hpp"

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
// The running CRC after the n / 16 whole blocks at `p` (n >= 16): each block folded into a
// 128-bit remainder (x^128 and x^192 mod P), which is then reduced to 64 bits, to 32, and
// Barrett-reduced to the CRC. The constants are the paper's, bit-reflected.
[[gnu::target("pclmul")]] std::uint32_t fold_blocks(std::uint32_t crc, const std::uint8_t* p,
                                                    std::size_t n) noexcept {
  const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009e, 0x01751997d0);
  const __m128i k5 = _mm_set_epi64x(0, 0x0163cd6124);
  const __m128i poly = _mm_set_epi64x(0x01f7011641, 0x01db710641);  // mu, P
  const __m128i low32 = _mm_setr_epi32(-1, 0, -1, 0);
  const auto load = [](const std::uint8_t* at) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(at));
  };
  __m128i x = _mm_xor_si128(load(p), _mm_cvtsi32_si128(static_cast<int>(crc)));
  for (p += 16, n -= 16; n >= 16; p += 16, n -= 16) {
    const __m128i lo = _mm_clmulepi64_si128(x, k3k4, 0x00);
    const __m128i hi = _mm_clmulepi64_si128(x, k3k4, 0x11);
    x = _mm_xor_si128(_mm_xor_si128(lo, hi), load(p));
  }
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
