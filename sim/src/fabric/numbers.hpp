#pragma once
// The numbers of the texts a user configures the simulator with (VERBSIM_* variables, fault
// plans, budgets), read strictly: digits only, no sign and no blanks, and nothing past 2^64 - 1.
// strtoull, which read them before, wraps "-1" to 2^64 - 1, saturates past it and skips
// leading blanks: each a value other than the one written, taken silently.

#include <charconv>
#include <cstdint>
#include <optional>
#include <string_view>

namespace verbsim::sim {

// `text` as a number: decimal, or "0x..." hexadecimal, or "0..." octal (as C, and strtoull's
// base 0, spell them) unless `decimal_only`. std::nullopt if it is not one, or past 2^64 - 1.
inline std::optional<std::uint64_t> read_u64(std::string_view text,
                                             bool decimal_only = false) noexcept {
  int base = 10;
  if (!decimal_only && text.size() > 1 && text[0] == '0') {
    const bool hex = text[1] == 'x' || text[1] == 'X';
    base = hex ? 16 : 8;
    text.remove_prefix(hex ? 2 : 1);
  }
  std::uint64_t n = 0;
  const char* end = text.data() + text.size();
  const auto [stop, ec] = std::from_chars(text.data(), end, n, base);
  if (text.empty() || ec != std::errc{} || stop != end) return std::nullopt;
  return n;
}

// a * b, or std::nullopt past 2^64 - 1 (a time in some unit, in nanoseconds).
inline std::optional<std::uint64_t> times(std::uint64_t a, std::uint64_t b) noexcept {
  std::uint64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) return std::nullopt;
  return product;
}

}  // namespace verbsim::sim
