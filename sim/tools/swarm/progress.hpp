// A campaign's progress on stderr: seeds done, seeds per second, failures and the time left.
// On a terminal, one line redrawn in place; elsewhere (a CI log, a Slurm output file), a plain
// line every `interval` seconds.
#pragma once

#include <chrono>
#include <cstdint>

namespace verbsim::swarm {

class Progress {
 public:
  using Clock = std::chrono::steady_clock;

  // interval_s <= 0: no progress at all.
  Progress(std::uint64_t total, double interval_s);

  // After each finished seed, and now and then: draws when it is time to.
  void update(std::uint64_t done, std::uint64_t failed);

  // Before a line goes to the terminal: takes the redrawn line away (update() draws it again).
  void clear();

 private:
  void draw(std::uint64_t done, std::uint64_t failed, Clock::time_point now);

  std::uint64_t total_;
  bool terminal_;
  bool shown_ = false;
  bool on_ = true;
  Clock::duration interval_;
  Clock::time_point started_ = Clock::now();
  Clock::time_point drawn_ = started_;
};

}  // namespace verbsim::swarm
