#include "verbsim/polling.hpp"

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <stdexcept>

#include "verbsim/error.hpp"

namespace verbsim {

namespace {

PollResult canceled() noexcept { return {0, ECANCELED}; }

// get_cq_event found nothing to read: a spurious wake-up, not a failure.
bool no_event(const std::error_code& e) noexcept {
  return e == Condition::would_block || e == std::errc::interrupted;
}

// How many empty polls in a row with the clock standing still count as idle for the hybrid
// poller. On the simulator a still clock means nothing is scheduled: sleeping lets the world
// report EDEADLK instead of the poller spinning forever.
constexpr std::uint32_t kStillClockPolls = 1024;

}  // namespace

// ---------------------------------------------------------------------------------------------
// Statistics

double PollStats::completions_per_wake() const noexcept {
  return wakeups == 0 ? 0.0 : static_cast<double>(completions) / static_cast<double>(wakeups);
}

PollStats& PollStats::operator+=(const PollStats& o) noexcept {
  polls += o.polls;
  empty_polls += o.empty_polls;
  completions += o.completions;
  sleeps += o.sleeps;
  wakeups += o.wakeups;
  empty_wakeups += o.empty_wakeups;
  channel_retries += o.channel_retries;
  polling_ns += o.polling_ns;
  sleeping_ns += o.sleeping_ns;
  return *this;
}

std::string PollStats::to_string() const {
  char line[320];
  std::snprintf(line, sizeof line,
                "polls=%" PRIu64 " empty=%" PRIu64 " completions=%" PRIu64 " sleeps=%" PRIu64
                " wakeups=%" PRIu64 " empty_wakeups=%" PRIu64 " retries=%" PRIu64
                " per_wake=%.2f polling=%.1fus sleeping=%.1fus",
                polls, empty_polls, completions, sleeps, wakeups, empty_wakeups, channel_retries,
                completions_per_wake(), static_cast<double>(polling_ns) / 1e3,
                static_cast<double>(sleeping_ns) / 1e3);
  return line;
}

// ---------------------------------------------------------------------------------------------
// Polling

PollResult CompletionPoller::poll_once(std::span<WorkCompletion> out) noexcept {
  const PollResult r = cq_.poll(out);
  ++stats_.polls;
  if (r.count == 0) ++stats_.empty_polls;
  stats_.completions += r.count;
  return r;
}

PollResult CompletionPoller::try_poll(std::span<WorkCompletion> out) noexcept {
  const std::uint64_t t0 = clock_.now_ns();
  const PollResult r = poll_once(out);
  stats_.polling_ns += clock_.now_ns() - t0;
  return r;
}

PollResult BusyPoller::do_next(std::span<WorkCompletion> out, const std::stop_token& stop) {
  const std::uint64_t t0 = clock_.now_ns();
  PollResult r;
  for (;;) {
    r = poll_once(out);
    if (r.err != 0 || r.count > 0) break;
    if (stop.stop_requested()) {
      r = canceled();
      break;
    }
  }
  stats_.polling_ns += clock_.now_ns() - t0;
  return r;
}

// ---------------------------------------------------------------------------------------------
// Sleeping on the channel

PollResult ChannelPoller::poll_after_wake(std::span<WorkCompletion> out) noexcept {
  const PollResult r = poll_once(out);
  if (woke_ && r.err == 0 && r.count == 0) ++stats_.empty_wakeups;
  woke_ = false;
  return r;
}

PollResult ChannelPoller::arm_and_sleep(std::span<WorkCompletion> out, Wait wait) {
  // A CQ of another channel, or of none, is armed all the same (as rxe and mlx5 arm it) but
  // its event never comes here: refuse rather than sleep forever.
  if (cq_.channel() != &channel_) return {0, EINVAL};
  // Arm first, then poll once more: a completion that arrived after the caller's last poll but
  // before the arm raises no event, and would otherwise sit in the CQ while we sleep.
  if (const std::error_code e = cq_.req_notify(solicited_only_)) return {0, e.value()};
  const PollResult r = poll_once(out);
  if (r.err != 0 || r.count > 0) return r;
  CompletionQueue* fired = nullptr;
  std::error_code e;
  if (wait == Wait::blocking) {
    ++stats_.sleeps;
    const std::uint64_t t0 = clock_.now_ns();
    e = channel_.get_cq_event(fired, Wait::blocking);
    stats_.sleeping_ns += clock_.now_ns() - t0;
    if (no_event(e)) ++stats_.channel_retries;
  } else {
    e = channel_.get_cq_event(fired, Wait::nonblocking);
  }
  if (no_event(e)) return {0, EAGAIN};
  if (e) return {0, e.value()};
  // Acknowledge at once: ibv_destroy_cq waits for every event to be acknowledged.
  fired->ack_events(1);
  ++stats_.wakeups;
  woke_ = true;
  // The event disarmed the CQ. Re-arming now, before draining, lets the next completion wake
  // another poller asleep on the channel while this one works.
  if (rearm_on_wake_) {
    if (const std::error_code ae = cq_.req_notify(solicited_only_)) return {0, ae.value()};
  }
  return {};
}

PollResult ChannelPoller::try_next(std::span<WorkCompletion> out) {
  const std::uint64_t t0 = clock_.now_ns();
  PollResult r;
  for (;;) {
    r = poll_after_wake(out);
    if (r.err != 0 || r.count > 0) break;
    // EAGAIN here leaves the CQ armed with no event pending: the fd will wake the caller.
    r = arm_and_sleep(out, Wait::nonblocking);
    if (r.err != 0 || r.count > 0) break;
    // An event was taken, which disarmed the CQ: poll, and re-arm if it is empty.
  }
  stats_.polling_ns += clock_.now_ns() - t0;
  return r;
}

PollResult EventPoller::do_next(std::span<WorkCompletion> out, const std::stop_token& stop) {
  const std::uint64_t t0 = clock_.now_ns();
  const std::uint64_t slept0 = stats_.sleeping_ns;
  PollResult r;
  for (;;) {
    r = poll_after_wake(out);
    if (r.err != 0 || r.count > 0) break;
    if (stop.stop_requested()) {
      r = canceled();
      break;
    }
    r = arm_and_sleep(out, Wait::blocking);
    if (r.count > 0 || (r.error() && !no_event(r.error()))) break;
  }
  stats_.polling_ns += (clock_.now_ns() - t0) - (stats_.sleeping_ns - slept0);
  return r;
}

PollResult ChannelPoller::spin_then_sleep(std::span<WorkCompletion> out,
                                          const std::stop_token& stop, std::uint64_t window,
                                          std::uint64_t& idle_since, std::uint64_t t0) {
  std::uint64_t last = t0;
  std::uint32_t still = 0;
  PollResult r;
  for (;;) {
    if (stop.stop_requested()) return canceled();
    const std::uint64_t now = clock_.now_ns();
    still = now == last ? still + 1 : 0;
    last = now;
    if (now - idle_since >= window || still >= kStillClockPolls) {
      // Idle for long enough: sleep until the next completion, then poll again.
      r = arm_and_sleep(out, Wait::blocking);
      if (r.count > 0 || (r.error() && !no_event(r.error()))) return r;
      idle_since = last = clock_.now_ns();
      still = 0;
    }
    r = poll_after_wake(out);
    if (r.err != 0 || r.count > 0) return r;
  }
}

PollResult HybridPoller::do_next(std::span<WorkCompletion> out, const std::stop_token& stop) {
  const std::uint64_t t0 = clock_.now_ns();
  const std::uint64_t slept0 = stats_.sleeping_ns;
  // The idle period runs from the last completion or wake-up, across calls that end in an error.
  if (idle_since_ == kNotIdle) idle_since_ = t0;
  PollResult r = poll_after_wake(out);
  if (r.err == 0 && r.count == 0) r = spin_then_sleep(out, stop, idle_ns_, idle_since_, t0);
  if (r.count > 0) idle_since_ = kNotIdle;
  stats_.polling_ns += (clock_.now_ns() - t0) - (stats_.sleeping_ns - slept0);
  return r;
}

std::uint64_t AdaptivePoller::idle_ns() const noexcept {
  if (!waited_) return idle_.max_idle_ns;  // nothing learned yet: poll as long as allowed
  return std::clamp(gap_ns_ * idle_.gap_factor, idle_.min_idle_ns,
                    std::max(idle_.min_idle_ns, idle_.max_idle_ns));
}

void AdaptivePoller::learn(std::uint64_t gap_ns) noexcept {
  waited_ = true;
  if (gap_ns > idle_.max_idle_ns) {
    // A pause: polling through it would not have paid. Pauses alone (a request now and then)
    // shrink the window to its least; a pause between bursts barely moves it.
    gap_ns_ -= gap_ns_ / 4;
    return;
  }
  const std::uint64_t g = std::max<std::uint64_t>(gap_ns, 1);
  // An average over about the last eight gaps, in integers.
  gap_ns_ = gap_ns_ == 0 ? g : gap_ns_ - gap_ns_ / 8 + g / 8;
  if (gap_ns_ == 0) gap_ns_ = 1;
}

PollResult AdaptivePoller::do_next(std::span<WorkCompletion> out, const std::stop_token& stop) {
  const std::uint64_t t0 = clock_.now_ns();
  const std::uint64_t slept0 = stats_.sleeping_ns;
  PollResult r = poll_after_wake(out);
  if (r.err == 0 && r.count == 0) {
    // The CQ was empty: this wait measures a gap. It runs from the previous hand-over (the
    // caller's own work in between is part of the gap: completions arrive meanwhile).
    const std::uint64_t since = last_return_ == kNever ? t0 : last_return_;
    std::uint64_t idle_since = t0;
    r = spin_then_sleep(out, stop, idle_ns(), idle_since, t0);  // learn() runs after the wait
    if (r.count > 0 && last_return_ != kNever) learn(clock_.now_ns() - since);
  }
  if (r.count > 0) last_return_ = clock_.now_ns();
  stats_.polling_ns += (clock_.now_ns() - t0) - (stats_.sleeping_ns - slept0);
  return r;
}

// ---------------------------------------------------------------------------------------------
// Choosing one

std::string_view to_string(PollStrategy s) noexcept {
  switch (s) {
    case PollStrategy::busy: return "busy";
    case PollStrategy::event: return "event";
    case PollStrategy::hybrid: return "hybrid";
    case PollStrategy::adaptive: return "adaptive";
  }
  return "unknown";
}

PollStrategy parse_poll_strategy(std::string_view name) {
  for (const PollStrategy s : {PollStrategy::busy, PollStrategy::event, PollStrategy::hybrid,
                               PollStrategy::adaptive}) {
    if (name == to_string(s)) return s;
  }
  throw std::invalid_argument("unknown polling strategy '" + std::string(name) +
                              "' (busy, event, hybrid or adaptive)");
}

std::unique_ptr<CompletionPoller> make_poller(PollStrategy strategy, CompletionQueue& cq,
                                              CompletionChannel* channel, const Clock& clock,
                                              std::uint64_t idle_ns) {
  if (strategy == PollStrategy::busy) return std::make_unique<BusyPoller>(cq, clock);
  if (channel == nullptr) {
    throw std::invalid_argument(std::string(to_string(strategy)) +
                                " polling needs a completion channel");
  }
  if (strategy == PollStrategy::event) return std::make_unique<EventPoller>(cq, *channel, clock);
  if (strategy == PollStrategy::adaptive) {
    AdaptiveIdle idle;
    idle.max_idle_ns = idle_ns;
    idle.min_idle_ns = std::min(idle.min_idle_ns, idle_ns);
    return std::make_unique<AdaptivePoller>(cq, *channel, clock, idle);
  }
  return std::make_unique<HybridPoller>(cq, *channel, clock, idle_ns);
}

}  // namespace verbsim
