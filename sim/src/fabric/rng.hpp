// The world's random source: xoshiro256** seeded through splitmix64, with our own
// distributions, so a seed gives the same stream on every standard library.
#pragma once

#include <cstdint>

namespace verbsim::sim {

class Rng {
 public:
  explicit Rng(std::uint64_t seed) noexcept {
    for (auto& word : s_) word = splitmix(seed);
  }

  std::uint64_t next() noexcept {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, n) without modulo bias; n > 0.
  std::uint64_t below(std::uint64_t n) noexcept {
    const std::uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    std::uint64_t x;
    do {
      x = next();
    } while (x >= limit);
    return x % n;
  }

  // Uniform in [0, 1), 53 bits.
  double unit() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

  bool chance(double p) noexcept { return p > 0 && unit() < p; }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) noexcept { return (x << k) | (x >> (64 - k)); }
  static std::uint64_t splitmix(std::uint64_t& x) noexcept {
    std::uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

  std::uint64_t s_[4];
};

// A running hash of the world's history: one multiply-xorshift per 64-bit word.
class Digest {
 public:
  void add(std::uint64_t v) noexcept {
    h_ = (h_ ^ v) * 0x9fb21c651e98df25ull;
    h_ ^= h_ >> 29;
  }
  std::uint64_t value() const noexcept { return h_; }

 private:
  std::uint64_t h_ = 0xcbf29ce484222325ull;
};

}  // namespace verbsim::sim
