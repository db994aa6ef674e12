#include "state.hpp"

#include <fcntl.h>
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>

#include "objects.hpp"
#include "ops.hpp"
#include "progress.hpp"

namespace verbsim::dropin {

namespace {

void at_fork_prepare() { global().mu.lock(); }
void at_fork_parent() { global().mu.unlock(); }
void at_fork_child() {
  global().mu.unlock();
  progress_after_fork();
}

Global* make_global() {
  auto* g = new Global;  // never freed: see state.hpp
  const char* t = std::getenv("VERBSIM_DROPIN_TRACE");
  g->trace = t != nullptr && *t != '\0' && std::strcmp(t, "0") != 0;
  ::pthread_atfork(at_fork_prepare, at_fork_parent, at_fork_child);
  return g;
}

}  // namespace

Global& global() noexcept {
  static Global* g = make_global();
  return *g;
}

namespace {
std::atomic<std::uint64_t> g_calls{0};
}  // namespace

std::unique_lock<std::recursive_mutex> lock() noexcept {
  note_call();
  g_calls.fetch_add(1, std::memory_order_relaxed);
  return std::unique_lock<std::recursive_mutex>(global().mu);
}

namespace {
// lock() for a thread waiting in shared_wait: it keeps the progress thread away but is not
// activity for another thread's shared_wait.
std::unique_lock<std::recursive_mutex> lock_waiting() noexcept {
  note_call();
  return std::unique_lock<std::recursive_mutex>(global().mu);
}
}  // namespace

sim::World* world() noexcept {
  Global& g = global();
  if (g.world) return g.world.get();
  if (g.tried) {
    errno = EINVAL;
    return nullptr;
  }
  g.tried = true;
  try {
    g.world = std::make_unique<sim::World>(sim::Config::from_env());
    const auto infos = g.world->devices();
    for (std::size_t i = 0; i < infos.size(); ++i) {
      auto* d = new DDevice{};  // devices live as long as the process, like the world
      d->dev.node_type = IBV_NODE_CA;
      d->dev.transport_type = IBV_TRANSPORT_IB;  // what RoCE devices (rxe, mlx5) report
      std::snprintf(d->dev.name, sizeof d->dev.name, "%s", infos[i].name.c_str());
      std::snprintf(d->dev.dev_name, sizeof d->dev.dev_name, "uverbs%zu", i);
      std::snprintf(d->dev.dev_path, sizeof d->dev.dev_path, "/sys/class/infiniband_verbs/uverbs%zu", i);
      std::snprintf(d->dev.ibdev_path, sizeof d->dev.ibdev_path, "/sys/class/infiniband/%s",
                    infos[i].name.c_str());
      d->provider_ops = nullptr;
      d->index = static_cast<int>(i);
      d->guid = infos[i].node_guid;
      g.devices.push_back(d);
    }
    return g.world.get();
  } catch (const std::exception& e) {
    g.config_error = e.what();
  } catch (...) {
    g.config_error = "unknown error";
  }
  std::fprintf(stderr, "verbsim drop-in libibverbs: cannot create the simulated world: %s\n",
               g.config_error.c_str());
  g.world.reset();
  errno = EINVAL;
  return nullptr;
}

void trace(const char* verb, const char* what) noexcept {
  if (global().trace) std::fprintf(stderr, "verbsim drop-in: %s: %s\n", verb, what);
}

int errno_of_current_exception(const char* verb) noexcept {
  try {
    throw;
  } catch (const std::system_error& e) {
    trace(verb, e.what());
    const int err = e.code().value();
    return err > 0 ? err : EIO;
  } catch (const std::bad_alloc&) {
    trace(verb, "out of memory");
    return ENOMEM;
  } catch (const std::invalid_argument& e) {
    trace(verb, e.what());
    return EINVAL;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "verbsim drop-in: %s: unexpected error: %s\n", verb, e.what());
    return EIO;
  } catch (...) {
    std::fprintf(stderr, "verbsim drop-in: %s: unexpected error\n", verb);
    return EIO;
  }
}

void remember(const void* core, void* wrapper) { global().wrappers[core] = wrapper; }

void forget(const void* core) noexcept { global().wrappers.erase(core); }

void make_blocking(int fd) noexcept {
  if (fd < 0) return;
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0 && (flags & O_NONBLOCK) != 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
}

bool is_nonblocking(int fd) noexcept {
  const int flags = ::fcntl(fd, F_GETFL);
  return flags >= 0 && (flags & O_NONBLOCK) != 0;
}

void init_sync(pthread_mutex_t& m, pthread_cond_t& c) noexcept {
  ::pthread_mutex_init(&m, nullptr);
  ::pthread_cond_init(&c, nullptr);
}

void destroy_sync(pthread_mutex_t& m, pthread_cond_t& c) noexcept {
  ::pthread_mutex_destroy(&m);
  ::pthread_cond_destroy(&c);
}

}  // namespace verbsim::dropin

namespace verbsim::dropin {

void settle() noexcept {
  constexpr std::uint64_t kHorizonNs = 1'000'000;  // 1 ms of virtual time
  constexpr int kMaxInstants = 100'000;
  sim::World* w = global().world.get();
  if (w == nullptr) return;
  const std::uint64_t start = w->now();
  try {
    for (int n = 0; n < kMaxInstants && w->pending_events() > 0 && w->now() - start <= kHorizonNs;
         ++n) {
      w->step();
    }
  } catch (...) {
    // Events do not throw; a failure would show in the next verb.
  }
}

int shared_wait(const char* verb, int fd, bool nonblocking, int (*attempt)(void*), void* arg) {
  using Clock = std::chrono::steady_clock;
  constexpr std::uint64_t kMaxJumpNs = 1'000'000;
  constexpr std::chrono::milliseconds kQuiet{10};
  if (nonblocking) {  // one instant of the world, as a poll of an empty CQ
    auto held = lock();
    if (const int err = attempt(arg); err != EAGAIN) return err;
    if (sim::World* w = world()) w->step();
    return attempt(arg);
  }
  std::uint64_t calls_seen = 0;
  auto quiet_since = Clock::now();
  const auto start = quiet_since;
  bool warned = false;
  for (;;) {
    bool idle = false;  // the world has nothing left to run
    {
      auto held = lock_waiting();
      const std::uint64_t calls = g_calls.load(std::memory_order_relaxed);
      if (calls != calls_seen) quiet_since = Clock::now();  // another thread called in
      calls_seen = calls;
      sim::World* w = world();
      if (w == nullptr) return EINVAL;
      for (;;) {
        if (const int err = attempt(arg); err != EAGAIN) return err;
        if (w->step_until(w->now() + kMaxJumpNs)) continue;
        // What is left is a timer's jump: only after the other threads have been quiet.
        if (w->pending_events() == 0 || Clock::now() - quiet_since < kQuiet) {
          idle = w->pending_events() == 0;
          break;
        }
        if (!w->step()) {  // only idle timers were left, and are gone
          idle = true;
          break;
        }
        quiet_since = Clock::now();  // the next jump waits for another quiet spell
      }
    }
    pollfd p{fd, POLLIN, 0};
    ::poll(&p, 1, 1);
    if (idle && !warned && Clock::now() - start > std::chrono::seconds(2)) {
      warned = true;
      std::fprintf(stderr,
                   "verbsim drop-in: %s has waited 2 s and the simulated world has nothing left "
                   "to do; it waits for another thread to post work (a device would block "
                   "forever too)\n",
                   verb);
    }
  }
}

}  // namespace verbsim::dropin
