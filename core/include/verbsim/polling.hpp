// Ways to wait for completions, over any backend: busy polling, event-driven (arm, sleep on the
// completion channel, drain), hybrid (poll while completions keep coming, sleep once the CQ has
// been idle for a while) and batch draining (at most N completions per wake-up). Each keeps
// statistics. docs/POLLING.md compares their latency and CPU cost.
//
// Threads: a poller object belongs to one thread (or fiber). Several pollers may poll one CQ and
// sleep on one channel at the same time. Before sleeping a poller arms the CQ and polls once
// more, so a completion that arrived between its last poll and the arm is never left without an
// event; and a wake-up that finds the CQ empty (another poller took the completions) is normal:
// it is counted in `empty_wakeups` and the poller goes back to waiting. An event disarms the CQ:
// a thread that stops polling a shared CQ right after a wake-up should re-arm it
// (cq.req_notify()) so that the pollers still asleep can be woken.
//
// Time comes from the Clock passed in (Context::clock(): steady_clock on hardware, virtual time
// on the simulator), so the hybrid poller's idle period and the statistics' durations mean the
// same thing on both backends.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stop_token>
#include <string>
#include <string_view>
#include <system_error>

#include "verbsim/clock.hpp"
#include "verbsim/completion_channel.hpp"
#include "verbsim/completion_queue.hpp"
#include "verbsim/types.hpp"

namespace verbsim {

struct PollStats {
  std::uint64_t polls = 0;          // CompletionQueue::poll calls
  std::uint64_t empty_polls = 0;    // ... that returned nothing
  std::uint64_t completions = 0;    // completions handed to the caller
  std::uint64_t sleeps = 0;         // times the poller went to sleep on the channel
  std::uint64_t wakeups = 0;        // completion events taken from the channel
  std::uint64_t empty_wakeups = 0;  // wake-ups after which the CQ was empty (another poller won)
  std::uint64_t channel_retries = 0;  // a blocking get_cq_event returned EAGAIN or EINTR
  std::uint64_t polling_ns = 0;     // clock time spent in next() and try_poll() awake
  std::uint64_t sleeping_ns = 0;    // clock time asleep in get_cq_event

  // completions / wakeups (0 without wake-ups).
  double completions_per_wake() const noexcept;
  PollStats& operator+=(const PollStats& o) noexcept;
  // One line: "polls=... empty=... completions=... wakeups=... per_wake=... polling=...us ...".
  std::string to_string() const;
};

// A way of waiting for completions on one CQ. Not thread-safe: one per thread or fiber.
class CompletionPoller {
 public:
  CompletionPoller(const CompletionPoller&) = delete;
  CompletionPoller& operator=(const CompletionPoller&) = delete;
  virtual ~CompletionPoller() = default;

  // Waits, in this strategy's way, until the CQ has completions, and moves up to out.size() of
  // them into `out` (out must not be empty). Errors: what poll, req_notify or get_cq_event
  // returned (EDEADLK on the simulator when nothing can ever complete); ECANCELED when `stop`
  // was requested before a completion arrived. A poller asleep on the channel sees `stop` only
  // when it wakes up: as with ibv_get_cq_event, only a completion (a message to itself, say)
  // wakes it.
  PollResult next(std::span<WorkCompletion> out, const std::stop_token& stop = {}) {
    return do_next(out, stop);
  }
  // One poll, no waiting (counted in the statistics).
  PollResult try_poll(std::span<WorkCompletion> out) noexcept;

  const PollStats& stats() const noexcept { return stats_; }
  void reset_stats() noexcept { stats_ = {}; }
  CompletionQueue& cq() const noexcept { return cq_; }
  const Clock& clock() const noexcept { return clock_; }
  virtual std::string_view name() const noexcept = 0;

 protected:
  CompletionPoller(CompletionQueue& cq, const Clock& clock) noexcept : cq_(cq), clock_(clock) {}
  virtual PollResult do_next(std::span<WorkCompletion> out, const std::stop_token& stop) = 0;
  // A poll counted in the statistics (no timing).
  PollResult poll_once(std::span<WorkCompletion> out) noexcept;

  CompletionQueue& cq_;
  const Clock& clock_;
  PollStats stats_;
};

// Polls until completions come: the lowest latency, and one core spent whether or not anything
// arrives. On the simulator an empty poll runs the world's next instant (under a Simulation:
// once every other fiber is blocked or polling too), so a busy poller never blocks virtual time.
class BusyPoller final : public CompletionPoller {
 public:
  BusyPoller(CompletionQueue& cq, const Clock& clock) noexcept : CompletionPoller(cq, clock) {}
  std::string_view name() const noexcept override { return "busy"; }

 private:
  PollResult do_next(std::span<WorkCompletion> out, const std::stop_token& stop) override;
};

// Shared by the pollers that sleep on a completion channel. The channel must serve this CQ only:
// an event for another CQ is acknowledged and treated as a wake-up with nothing to do.
class ChannelPoller : public CompletionPoller {
 public:
  CompletionChannel& channel() const noexcept { return channel_; }

  // For an application's own epoll/poll loop, on both backends: returns completions if the CQ has
  // some; otherwise arms the CQ, polls once more and takes a pending event without blocking
  // (then polls again). EAGAIN (Condition::would_block) when there is nothing yet: wait until
  // channel().fd() is readable, then call it again. On the simulator the world moves only inside
  // verbs, never while the application sleeps in epoll_wait: wait with a short timeout there
  // (each call runs the world's next instants). Other errors as next().
  PollResult try_next(std::span<WorkCompletion> out);

 protected:
  ChannelPoller(CompletionQueue& cq, CompletionChannel& channel, const Clock& clock,
                bool solicited_only, bool rearm_on_wake) noexcept
      : CompletionPoller(cq, clock),
        channel_(channel),
        solicited_only_(solicited_only),
        rearm_on_wake_(rearm_on_wake) {}
  // Arms the CQ, polls once more, and if still empty sleeps until an event (acknowledged here).
  // Returns completions found by the extra poll, or an empty result after a wake-up (the caller
  // polls again), or the error.
  PollResult arm_and_sleep(std::span<WorkCompletion> out, Wait wait);
  // poll_once, counting an empty result right after a wake-up in empty_wakeups.
  PollResult poll_after_wake(std::span<WorkCompletion> out) noexcept;
  // The hybrid and adaptive wait, after a poll that found the CQ empty: polls until a
  // completion, an error or `stop`; once the CQ has been empty for `window` ns since
  // `idle_since` (or the clock stood still over many polls), sleeps on the channel, and polls
  // on with the window restarted at the wake-up (`idle_since` follows it). `t0`: when the
  // caller's poll ran.
  PollResult spin_then_sleep(std::span<WorkCompletion> out, const std::stop_token& stop,
                             std::uint64_t window, std::uint64_t& idle_since, std::uint64_t t0);

  CompletionChannel& channel_;
  bool solicited_only_;
  bool rearm_on_wake_;
  bool woke_ = false;  // the last thing this poller did was wake up (for empty_wakeups)
};

// Sleeps on the channel whenever the CQ is empty: no CPU while idle, and every burst pays the
// wake-up latency (interrupt, event, scheduler). After a wake-up it re-arms the CQ before
// draining it (ack, req_notify, poll: the libibverbs pattern), so a completion that arrives
// while this poller works wakes another one. With solicited_only, only a solicited or a failed
// completion wakes it (completions already in the CQ are returned all the same).
class EventPoller final : public ChannelPoller {
 public:
  EventPoller(CompletionQueue& cq, CompletionChannel& channel, const Clock& clock,
              bool solicited_only = false) noexcept
      : ChannelPoller(cq, channel, clock, solicited_only, /*rearm_on_wake=*/true) {}
  std::string_view name() const noexcept override { return "event"; }

 private:
  PollResult do_next(std::span<WorkCompletion> out, const std::stop_token& stop) override;
};

// Polls while completions keep coming; after `idle_ns` of clock time without one it sleeps on
// the channel like EventPoller, and polls again from the wake-up on (without re-arming: while it
// polls, events would only cost interrupts). Latency close to busy polling under load, CPU close
// to event-driven when idle.
class HybridPoller final : public ChannelPoller {
 public:
  HybridPoller(CompletionQueue& cq, CompletionChannel& channel, const Clock& clock,
               std::uint64_t idle_ns, bool solicited_only = false) noexcept
      : ChannelPoller(cq, channel, clock, solicited_only, /*rearm_on_wake=*/false),
        idle_ns_(idle_ns) {}
  std::string_view name() const noexcept override { return "hybrid"; }
  std::uint64_t idle_ns() const noexcept { return idle_ns_; }

 private:
  PollResult do_next(std::span<WorkCompletion> out, const std::stop_token& stop) override;
  static constexpr std::uint64_t kNotIdle = UINT64_MAX;
  std::uint64_t idle_ns_;
  std::uint64_t idle_since_ = kNotIdle;  // clock time polling began to find nothing
};

// A hybrid poller whose idle period follows the traffic: it polls for `gap_factor` times the
// typical gap between the completions it had to wait for (an average over the recent ones),
// never less than `min_idle_ns` nor more than `max_idle_ns`, then sleeps like HybridPoller. A gap
// longer than max_idle_ns is a pause, not traffic: it shrinks the average by a quarter. So
// within a burst it keeps polling (the gaps are short), after a burst it sleeps within a few
// gaps instead of a fixed period, if its sleeps keep ending soon (gaps a little above its
// window) the window grows to cover them, and with only pauses (a request now and then) it
// sleeps at once. Before its first wait it polls for max_idle_ns. docs/POLLING.md has the
// measurements behind the defaults.
struct AdaptiveIdle {
  std::uint64_t min_idle_ns = 2'000;
  std::uint64_t max_idle_ns = 100'000;
  std::uint32_t gap_factor = 4;
};

class AdaptivePoller final : public ChannelPoller {
 public:
  AdaptivePoller(CompletionQueue& cq, CompletionChannel& channel, const Clock& clock,
                 AdaptiveIdle idle = {}, bool solicited_only = false) noexcept
      : ChannelPoller(cq, channel, clock, solicited_only, /*rearm_on_wake=*/false), idle_(idle) {}
  std::string_view name() const noexcept override { return "adaptive"; }
  // The idle period the next wait will poll for before it sleeps.
  std::uint64_t idle_ns() const noexcept;
  // The average gap it has learned (0 before the first it had to wait for).
  std::uint64_t typical_gap_ns() const noexcept { return gap_ns_; }
  const AdaptiveIdle& limits() const noexcept { return idle_; }

 private:
  PollResult do_next(std::span<WorkCompletion> out, const std::stop_token& stop) override;
  void learn(std::uint64_t gap_ns) noexcept;
  static constexpr std::uint64_t kNever = UINT64_MAX;
  AdaptiveIdle idle_;
  std::uint64_t gap_ns_ = 0;           // moving average of the gaps that count
  bool waited_ = false;                // it has measured a gap (or a pause)
  std::uint64_t last_return_ = kNever;  // clock time next() last handed completions over
};

// Batch draining over any poller: waits with it, then keeps polling in batches of buf.size()
// until the CQ is empty or `max_per_wake` completions were handed over, so one busy CQ cannot
// keep its thread from its other work. Completions left in the CQ are taken first next time.
class BatchDrainer {
 public:
  BatchDrainer(CompletionPoller& poller, std::size_t max_per_wake) noexcept
      : poller_(poller), max_per_wake_(max_per_wake == 0 ? 1 : max_per_wake) {}

  // Calls handler(std::span<const WorkCompletion>) once per batch. Returns the number handed
  // over, or the poller's error (completions already handed over stay handed over).
  template <class Handler>
  PollResult drain(std::span<WorkCompletion> buf, Handler&& handler, const std::stop_token& stop = {}) {
    std::size_t budget = max_per_wake_;
    PollResult r = poller_.next(buf.first(std::min(buf.size(), budget)), stop);
    std::uint32_t total = 0;
    while (r.err == 0 && r.count > 0) {
      handler(std::span<const WorkCompletion>(buf.data(), r.count));
      total += r.count;
      budget -= r.count;
      if (budget == 0) break;
      r = poller_.try_poll(buf.first(std::min(buf.size(), budget)));
    }
    return {total, total == 0 ? r.err : 0};
  }

  CompletionPoller& poller() const noexcept { return poller_; }
  std::size_t max_per_wake() const noexcept { return max_per_wake_; }

 private:
  CompletionPoller& poller_;
  std::size_t max_per_wake_;
};

enum class PollStrategy : std::uint8_t { busy, event, hybrid, adaptive };
std::string_view to_string(PollStrategy s) noexcept;
// "busy", "event", "hybrid" or "adaptive"; throws std::invalid_argument otherwise.
PollStrategy parse_poll_strategy(std::string_view name);

// The poller for `strategy`. event, hybrid and adaptive need a channel (std::invalid_argument
// otherwise), the CQ's own: with another their next() fails with EINVAL when it would sleep.
// `idle_ns` is hybrid's idle period and adaptive's longest (AdaptiveIdle's others).
std::unique_ptr<CompletionPoller> make_poller(PollStrategy strategy, CompletionQueue& cq,
                                              CompletionChannel* channel, const Clock& clock,
                                              std::uint64_t idle_ns = 20'000);

}  // namespace verbsim
