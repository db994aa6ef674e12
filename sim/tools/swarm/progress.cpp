#include "progress.hpp"

#include <unistd.h>

#include <cstdio>
#include <string>

namespace verbsim::swarm {
namespace {

std::string duration_text(double s) {
  const auto total = static_cast<unsigned long long>(s + 0.5);
  char buf[48];
  if (total >= 3600) {
    std::snprintf(buf, sizeof buf, "%lluh%02llum", total / 3600, total / 60 % 60);
  } else if (total >= 60) {
    std::snprintf(buf, sizeof buf, "%llum%02llus", total / 60, total % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%llus", total);
  }
  return buf;
}

}  // namespace

Progress::Progress(std::uint64_t total, double interval_s)
    : total_(total),
      terminal_(::isatty(STDERR_FILENO) == 1),
      on_(interval_s > 0),
      // A terminal's line moves twice a second, whatever the interval.
      interval_(std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(terminal_ ? 0.5 : interval_s))) {}

void Progress::update(std::uint64_t done, std::uint64_t failed) {
  const Clock::time_point now = Clock::now();
  if (!on_ || (now - drawn_ < interval_ && !(terminal_ && !shown_))) return;
  draw(done, failed, now);
}

void Progress::clear() {
  if (!terminal_ || !shown_) return;
  std::fputs("\r\033[K", stderr);
  std::fflush(stderr);
  shown_ = false;
}

void Progress::draw(std::uint64_t done, std::uint64_t failed, Clock::time_point now) {
  drawn_ = now;
  const double elapsed = std::chrono::duration<double>(now - started_).count();
  const double rate = elapsed > 0 ? static_cast<double>(done) / elapsed : 0;
  const std::string eta = done == 0 || rate <= 0
                              ? std::string("?")
                              : duration_text(static_cast<double>(total_ - done) / rate);
  std::fprintf(
      stderr, "%sswarm progress: %llu/%llu seeds (%.0f%%), %.1f seeds/s, %llu failed, ETA %s%s",
      terminal_ ? "\r\033[K" : "", static_cast<unsigned long long>(done),
      static_cast<unsigned long long>(total_),
      total_ == 0 ? 100.0 : 100.0 * static_cast<double>(done) / static_cast<double>(total_), rate,
      static_cast<unsigned long long>(failed), eta.c_str(), terminal_ ? "" : "\n");
  std::fflush(stderr);
  shown_ = terminal_;
}

}  // namespace verbsim::swarm
