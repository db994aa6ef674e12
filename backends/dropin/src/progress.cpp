#include "progress.hpp"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "state.hpp"

namespace verbsim::dropin {

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::chrono::milliseconds kIdle{2};
constexpr std::chrono::milliseconds kTick{1};
constexpr std::uint64_t kVirtualPerTick = 1'000'000'000;  // 1 s of virtual time per 1 ms

std::atomic<std::int64_t> g_last_call{0};
std::atomic<bool> g_started{false};
std::atomic<bool> g_wanted{false};

std::int64_t now_ticks() noexcept { return Clock::now().time_since_epoch().count(); }

bool enabled() noexcept {
  const char* v = std::getenv("VERBSIM_DROPIN_PROGRESS");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

void run() noexcept {
  const auto idle = std::chrono::duration_cast<Clock::duration>(kIdle).count();
  for (;;) {
    std::this_thread::sleep_for(kTick);
    if (now_ticks() - g_last_call.load(std::memory_order_relaxed) < idle) continue;
    std::lock_guard<std::recursive_mutex> held(global().mu);
    sim::World* w = global().world.get();
    if (w == nullptr || w->pending_events() == 0) continue;
    try {
      w->run_until(w->now() + kVirtualPerTick);
    } catch (...) {
      // The world's events do not throw; if one ever did, the next verb call reports it.
    }
  }
}

void spawn() noexcept {
  bool expected = false;
  if (!g_started.compare_exchange_strong(expected, true)) return;
  try {
    std::thread(run).detach();
  } catch (...) {
    g_started = false;
  }
}

}  // namespace

void note_call() noexcept {
  g_last_call.store(now_ticks(), std::memory_order_relaxed);
  if (g_wanted.load(std::memory_order_relaxed) && !g_started.load(std::memory_order_relaxed)) {
    spawn();
  }
}

void start_progress() noexcept {
  if (g_wanted.load() || !enabled()) return;
  g_wanted = true;
  spawn();
}

void progress_after_fork() noexcept { g_started = false; }

bool progress_running() noexcept { return g_started.load(std::memory_order_relaxed); }

}  // namespace verbsim::dropin
