// Time as a value passed in: code that measures or waits for a duration (the hybrid poller's
// idle period, benchmarks) reads a Clock instead of a global one, so on the simulator it runs
// in virtual time. Context::clock() gives the device's: steady_clock on hardware, the world's
// virtual clock on the simulator.
#pragma once

#include <chrono>
#include <cstdint>

namespace verbsim {

class Clock {
 public:
  virtual ~Clock() = default;
  // Nanoseconds since an arbitrary epoch; never decreases.
  virtual std::uint64_t now_ns() const noexcept = 0;
};

class SteadyClock final : public Clock {
 public:
  std::uint64_t now_ns() const noexcept override {
    const auto t = std::chrono::steady_clock::now().time_since_epoch();
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(t).count());
  }
};

}  // namespace verbsim
