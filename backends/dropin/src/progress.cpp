#include "progress.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
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
constexpr std::uint64_t kRealTimePerTick = 1'000'000;      // 1 ms per 1 ms

std::atomic<std::int64_t> g_last_call{0};
std::atomic<bool> g_started{false};
std::atomic<bool> g_wanted{false};

std::int64_t now_ticks() noexcept { return Clock::now().time_since_epoch().count(); }

bool enabled() noexcept {
  const char* v = std::getenv("VERBSIM_DROPIN_PROGRESS");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

// Whether a thread of this process other than `self` is running or ready to run (state R in
// /proc/self/task/TID/stat) rather than asleep in the kernel. Without /proc: false.
bool another_thread_running(pid_t self) noexcept {
  DIR* tasks = ::opendir("/proc/self/task");
  if (tasks == nullptr) return false;
  bool running = false;
  char path[sizeof(dirent::d_name) + 8];
  char stat[256];
  while (const dirent* t = ::readdir(tasks)) {
    if (t->d_name[0] == '.' || std::atoi(t->d_name) == self) continue;
    std::snprintf(path, sizeof path, "%s/stat", t->d_name);
    const int fd = ::openat(::dirfd(tasks), path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;  // the thread just ended
    const ssize_t n = ::read(fd, stat, sizeof stat - 1);
    ::close(fd);
    if (n <= 0) continue;
    stat[n] = '\0';
    // "TID (COMM) STATE ...", where COMM may hold spaces and parentheses.
    const char* end = std::strrchr(stat, ')');
    if (end != nullptr && end[1] == ' ' && end[2] == 'R') {
      running = true;
      break;
    }
  }
  ::closedir(tasks);
  return running;
}

bool has_pending_events() noexcept {
  std::lock_guard<std::recursive_mutex> held(global().mu);
  const sim::World* w = global().world.get();
  return w != nullptr && w->pending_events() != 0;
}

void run() noexcept {
  const auto idle = std::chrono::duration_cast<Clock::duration>(kIdle).count();
  const pid_t self = ::gettid();
  for (;;) {
    std::this_thread::sleep_for(kTick);
    if (now_ticks() - g_last_call.load(std::memory_order_relaxed) < idle) continue;
    if (!has_pending_events()) continue;
    // A thread that computes outside the library sees time pass as on a device: virtual time
    // does not outrun the wall clock until every thread sleeps.
    const std::uint64_t span = another_thread_running(self) ? kRealTimePerTick : kVirtualPerTick;
    std::lock_guard<std::recursive_mutex> held(global().mu);
    sim::World* w = global().world.get();
    if (w == nullptr) continue;
    try {
      w->run_until(w->now() + span);
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
