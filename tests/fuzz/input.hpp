// A fuzzer's input read as a stream of small numbers: each harness decodes its operations from
// it. Past the end every read gives 0, so any input is a complete program.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace verbsim::fuzz {

class Input {
 public:
  Input(const std::uint8_t* data, std::size_t size) noexcept : p_(data), end_(data + size) {}
  bool empty() const noexcept { return p_ == end_; }
  std::uint8_t u8() noexcept { return p_ == end_ ? 0 : *p_++; }
  std::uint32_t u32() noexcept { return take<std::uint32_t>(); }
  std::uint64_t u64() noexcept { return take<std::uint64_t>(); }
  // A number below n (n > 0).
  std::uint32_t below(std::uint32_t n) noexcept { return u8() % n; }
  // Mostly small values, sometimes the edges hostile programs pass: 0, -1, INT_MAX, huge.
  std::uint64_t size() noexcept {
    switch (u8() % 8) {
      case 0: return 0;
      case 1: return UINT64_MAX;
      case 2: return 0x7fffffff;
      case 3: return std::uint64_t{1} << (u8() % 64);
      case 4: return u64();
      default: return u8();
    }
  }

 private:
  template <class T>
  T take() noexcept {
    T v{};
    const std::size_t n = static_cast<std::size_t>(end_ - p_) < sizeof v
                              ? static_cast<std::size_t>(end_ - p_) : sizeof v;
    std::memcpy(&v, p_, n);
    p_ += n;
    return v;
  }
  const std::uint8_t* p_;
  const std::uint8_t* end_;
};

}  // namespace verbsim::fuzz
