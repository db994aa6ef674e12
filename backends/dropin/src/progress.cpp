#include "progress.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
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
// On a fabric shared with other processes (VERBSIM_FABRIC) the run is not deterministic
// anyway, and a peer may be waiting for this process's device to answer while the program
// spins on memory (ib_write_lat) or waits in a socket: the thread looks sooner and more often.
constexpr std::chrono::microseconds kSharedIdle{100};
constexpr std::chrono::microseconds kSharedTick{50};
constexpr int kTicksPerRefresh = 10;  // the sysfs counter files: every 10 ms (sysfs.hpp)
constexpr std::uint64_t kVirtualPerTick = 1'000'000'000;  // 1 s of virtual time per 1 ms
constexpr std::uint64_t kRealTimePerTick = 1'000'000;     // 1 ms per 1 ms

std::atomic<std::int64_t> g_last_call{0};
std::atomic<bool> g_started{false};
std::atomic<bool> g_wanted{false};

// The drop-in's world is made from the environment (sim::Config::from_env).
bool fabric_shared() noexcept {
  const char* f = std::getenv("VERBSIM_FABRIC");
  return f != nullptr && *f != '\0';
}

std::int64_t now_ticks() noexcept { return Clock::now().time_since_epoch().count(); }

bool enabled() noexcept {
  const char* v = std::getenv("VERBSIM_DROPIN_PROGRESS");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

// Threads that call the library, with the time of their last call: a thread that runs (state
// R) and called within kIdle is polling or waiting in the library; one that runs and did not
// is computing. Slots are claimed on a thread's first call and freed when it ends.
struct CallerSlot {
  std::atomic<pid_t> tid{0};
  std::atomic<std::int64_t> last_call{0};
};
constexpr std::size_t kCallerSlots = 1024;  // more threads than that count as computing
CallerSlot g_callers[kCallerSlots];
std::atomic<std::size_t> g_callers_used{0};  // slots ever claimed: a scan stops there
std::atomic<pid_t> g_progress_tid{0};

struct SlotRelease {
  CallerSlot* slot = nullptr;
  ~SlotRelease() {
    if (slot != nullptr) slot->tid.store(0, std::memory_order_release);
  }
};
thread_local CallerSlot* t_slot = nullptr;
thread_local bool t_untracked = false;  // no slot was free
thread_local std::uint32_t t_calls = 0;  // note_call()s of this thread
constexpr std::uint32_t kCallsPerClockRead = 16;
thread_local SlotRelease t_release;

CallerSlot* claim_slot() noexcept {
  const pid_t self = ::gettid();
  for (std::size_t i = 0; i < kCallerSlots; ++i) {
    pid_t expected = 0;
    if (g_callers[i].tid.compare_exchange_strong(expected, self, std::memory_order_acq_rel)) {
      std::size_t used = g_callers_used.load(std::memory_order_relaxed);
      while (used < i + 1 &&
             !g_callers_used.compare_exchange_weak(used, i + 1, std::memory_order_release)) {
      }
      t_release.slot = &g_callers[i];
      return &g_callers[i];
    }
  }
  t_untracked = true;
  return nullptr;
}

// When thread `tid` last called the library, or 0 if it never did (or is not tracked).
std::int64_t last_call_of(pid_t tid) noexcept {
  const std::size_t used = g_callers_used.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < used; ++i) {
    if (g_callers[i].tid.load(std::memory_order_acquire) == tid) {
      return g_callers[i].last_call.load(std::memory_order_relaxed);
    }
  }
  return 0;
}

bool has_pending_events() noexcept {
  std::lock_guard<std::recursive_mutex> held(global().mu);
  const sim::World* w = global().world.get();
  return w != nullptr && w->pending_events() != 0;
}


void run() noexcept {
  g_progress_tid.store(::gettid(), std::memory_order_release);
  g_progress_tid.notify_all();
  const bool shared = fabric_shared();
  const auto idle =
      std::chrono::duration_cast<Clock::duration>(shared ? Clock::duration(kSharedIdle)
                                                         : Clock::duration(kIdle))
          .count();
  const auto tick = shared ? Clock::duration(kSharedTick) : Clock::duration(kTick);
  auto refreshed = Clock::now();
  auto last_run = refreshed;
  for (;;) {
    std::this_thread::sleep_for(tick);
    if (const auto now = Clock::now(); now - refreshed >= kTick * kTicksPerRefresh) {
      refreshed = now;
      std::lock_guard<std::recursive_mutex> held(global().mu);
      refresh_sysfs();  // writes only the counter files whose values changed
    }
    if (now_ticks() - g_last_call.load(std::memory_order_relaxed) < idle) continue;
    if (!has_pending_events()) continue;
    // A thread that computes outside the library sees time pass as on a device: virtual time
    // does not outrun the wall clock until every thread sleeps.
    const bool computing = another_thread_computing();
    std::uint64_t span = computing ? kRealTimePerTick : kVirtualPerTick;
    if (shared) {
      // The same pace, by the wall time since the last run (short ticks take longer than
      // they ask for: a sleep, /proc, the lock), at most one millisecond's worth.
      const auto now = Clock::now();
      const auto elapsed = std::min<std::uint64_t>(
          static_cast<std::uint64_t>(
              std::chrono::duration_cast<std::chrono::nanoseconds>(now - last_run).count()),
          1'000'000);
      last_run = now;
      span = span * elapsed / 1'000'000;
    }
    std::lock_guard<std::recursive_mutex> held(global().mu);
    sim::World* w = global().world.get();
    if (w == nullptr) continue;
    try {
      if (computing) {
        w->pace_until(w->now() + span);  // the program acts next from there (catch_up)
      } else {
        w->run_until(w->now() + span);
      }
    } catch (...) {
      // The world's events do not throw; if one ever did, the next verb call reports it.
    }
  }
}

// The thread takes no signal the program may send: a signal the program blocks so as to take
// it with sigwait() would otherwise be delivered here (and its default action end the
// process), and a handler would run on a thread that holds the world's lock. It starts with
// them blocked (a thread takes its creator's mask), so none comes before it could block them.
// The signals of a fault the thread itself causes stay open: blocked, they kill at once, and
// the simulator takes SIGSEGV on purpose (sim/src/transport/user_memory.cpp).
void spawn() noexcept {
  bool expected = false;
  if (!g_started.compare_exchange_strong(expected, true)) return;
  sigset_t blocked, saved;
  ::sigfillset(&blocked);
  for (const int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS}) {
    ::sigdelset(&blocked, sig);
  }
  ::pthread_sigmask(SIG_SETMASK, &blocked, &saved);
  try {
    std::thread(run).detach();
    // Until the thread runs: its start-up allocates (in ASan, its own bookkeeping, which takes
    // the allocator's locks), and a fork() in the meantime would leave them held in the child.
    g_progress_tid.wait(0, std::memory_order_acquire);
  } catch (...) {
    g_started = false;
  }
  ::pthread_sigmask(SIG_SETMASK, &saved, nullptr);
}

}  // namespace

void note_call() noexcept {
  // The clock is read on one call in kCallsPerClockRead: a thread that calls in a loop (a poll
  // loop, a call every few hundred nanoseconds) is still seen within microseconds, and one
  // that calls seldom computes between its calls anyway.
  if (t_calls++ % kCallsPerClockRead == 0) {
    const std::int64_t now = now_ticks();
    g_last_call.store(now, std::memory_order_relaxed);
    if (t_slot == nullptr && !t_untracked) t_slot = claim_slot();
    if (t_slot != nullptr) t_slot->last_call.store(now, std::memory_order_relaxed);
  }
  if (g_wanted.load(std::memory_order_relaxed) && !g_started.load(std::memory_order_relaxed)) {
    spawn();
  }
}

void start_progress() noexcept {
  if (g_wanted.load() || !enabled()) return;
  g_wanted = true;
  spawn();
}

void progress_after_fork() noexcept {
  g_started = false;  // the child's first call starts a thread of its own
  g_progress_tid.store(0, std::memory_order_relaxed);
  // The child has one thread, with a new TID.
  for (CallerSlot& slot : g_callers) slot.tid.store(0, std::memory_order_relaxed);
  g_callers_used.store(0, std::memory_order_relaxed);
  t_slot = nullptr;
  t_untracked = false;
  t_calls = 0;  // the next call claims a slot
  t_release.slot = nullptr;
}

bool progress_running() noexcept { return g_started.load(std::memory_order_relaxed); }

bool another_thread_computing() noexcept {
  const pid_t self = ::gettid();
  const pid_t progress = g_progress_tid.load(std::memory_order_relaxed);
  static const bool shared = fabric_shared();
  const auto idle = std::chrono::duration_cast<Clock::duration>(
                        shared ? Clock::duration(kSharedIdle) : Clock::duration(kIdle))
                        .count();
  DIR* tasks = ::opendir("/proc/self/task");
  if (tasks == nullptr) return false;
  bool computing = false;
  char path[sizeof(dirent::d_name) + 8];
  char stat[256];
  while (const dirent* t = ::readdir(tasks)) {
    if (t->d_name[0] == '.') continue;
    const pid_t tid = std::atoi(t->d_name);
    if (tid == self || tid == progress) continue;
    std::snprintf(path, sizeof path, "%s/stat", t->d_name);
    const int fd = ::openat(::dirfd(tasks), path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;  // the thread just ended
    const ssize_t n = ::read(fd, stat, sizeof stat - 1);
    ::close(fd);
    if (n <= 0) continue;
    stat[n] = '\0';
    // "TID (COMM) STATE ...", where COMM may hold spaces and parentheses.
    const char* end = std::strrchr(stat, ')');
    if (end == nullptr || end[1] != ' ' || end[2] != 'R') continue;  // asleep in the kernel
    if (now_ticks() - last_call_of(tid) < idle) continue;  // polling or waiting in the library
    computing = true;
    break;
  }
  ::closedir(tasks);
  return computing;
}

}  // namespace verbsim::dropin
