#include "state.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <new>
#include <stdexcept>

#include "objects.hpp"
#include "ops.hpp"
#include "progress.hpp"
#include "verbsim/sim/extensions.hpp"

namespace verbsim::dropin {

namespace {

Global*& current() noexcept;

// fork(). The lock is held across it, so that the child's copy of the state is whole. That
// copy is the parent's: its lock is held by a thread of the parent (a recursive mutex is
// unlocked only by its owner, and the child's thread has another id), its objects and handles
// are the parent's, its world serves the parent's QPs (on a shared fabric, as the parent's
// member). So the child leaves it alone, never to be used or freed, and starts from a state
// of its own, as a process that has called no verb: its first verb makes a world of its own.
// The devices stay: a device list the parent got names the child's devices, as rdma-core's
// ibv_device structs are plain data a child may open.
void at_fork_prepare() { global().mu.lock(); }
void at_fork_parent() { global().mu.unlock(); }
void at_fork_child() {
  Global* parent = current();
  Global* own = new (std::nothrow) Global;  // malloc works in a child handler (glibc)
  if (own == nullptr) return;  // out of memory: the child's verbs would wait for the lock
  own->trace = parent->trace;
  own->parent = parent;
  try {
    own->devices = parent->devices;
  } catch (...) {
    // The child's first verb makes its devices anew; the parent's list names none of them.
  }
  current() = own;
  progress_after_fork();
}

Global* make_global() {
  auto* g = new Global;  // never freed: see state.hpp
  const char* t = std::getenv("VERBSIM_DROPIN_TRACE");
  g->trace = t != nullptr && *t != '\0' && std::strcmp(t, "0") != 0;
  ::pthread_atfork(at_fork_prepare, at_fork_parent, at_fork_child);
  return g;
}

// The process's state; another one in a child of fork().
Global*& current() noexcept {
  static Global* g = make_global();
  return g;
}

}  // namespace

Global& global() noexcept { return *current(); }

// Who is active: every call that may change what happens next counts (lock()); waiting and
// polling that finds nothing do not (lock_waiting()). Per thread, so that a thread can tell
// whether the others are.
namespace {
using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kQuiet{10};
std::atomic<std::uint64_t> g_activity{0};
thread_local std::uint64_t t_mine = 0;          // this thread's share of g_activity
thread_local std::uint64_t t_others_seen = 0;   // g_activity - t_mine when last looked
thread_local Clock::time_point t_quiet_since{};  // since when the others have done nothing

// Whether the process has no thread but this one (and the progress thread): /proc/self/task.
// A thread just created has not called in yet, so counting callers would not do.
bool only_thread() noexcept {
  DIR* d = ::opendir("/proc/self/task");
  if (d == nullptr) return false;
  int n = 0;
  while (const dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
  ::closedir(d);
  return n - (progress_running() ? 1 : 0) <= 1;
}

// Whether the other threads have been quiet for kQuiet.
bool others_quiet() noexcept {
  const std::uint64_t others = g_activity.load(std::memory_order_relaxed) - t_mine;
  const auto now = Clock::now();
  if (others != t_others_seen || t_quiet_since == Clock::time_point{}) {
    t_others_seen = others;
    t_quiet_since = now;
    return false;
  }
  return now - t_quiet_since >= kQuiet;
}
}  // namespace

// Signal handlers (state.hpp): how deep this thread holds the lock, and the depth at which a
// NestedVerbs scope lets verbs in (-1: none). Initial-exec: read in signal handlers, where a
// first access through __tls_get_addr could allocate.
namespace {
[[gnu::tls_model("initial-exec")]] thread_local int t_held = 0;
[[gnu::tls_model("initial-exec")]] thread_local int t_nested_at = -1;

// Whether a verb entered now would be a handler's, inside a verb of this thread.
bool re_entered() noexcept { return t_held != 0 && t_held != t_nested_at; }
}  // namespace

// The count goes up before the lock is taken and down after it is released, so that a handler
// never finds the lock held by its thread with the count at 0 (the signal fences keep the
// compiler from moving the count across the lock; only this thread's handlers read it).
Held::Held(std::recursive_mutex& mu) noexcept : mu_(&mu) {
  ++t_held;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  mu.lock();
}

Held::~Held() {
  if (mu_ == nullptr) return;
  mu_->unlock();
  std::atomic_signal_fence(std::memory_order_seq_cst);
  --t_held;
}

NestedVerbs::NestedVerbs() noexcept : saved_(t_nested_at) { t_nested_at = t_held; }
NestedVerbs::~NestedVerbs() { t_nested_at = saved_; }

Held lock() noexcept {
  if (re_entered()) [[unlikely]] return Held();
  note_activity();
  Held held = lock_waiting();
  // A shared fabric's world the progress thread moved on: the program acts from there.
  if (sim::World* w = global().world.get(); w != nullptr && global().shared) [[unlikely]] {
    try {
      w->catch_up();
    } catch (...) {
      // A budget that ran out: the next call that runs the world reports it.
    }
  }
  return held;
}

Held lock_waiting() noexcept {
  if (re_entered()) [[unlikely]] return Held();
  note_call();
  return Held(global().mu);
}

void note_activity() noexcept {
  g_activity.fetch_add(1, std::memory_order_relaxed);
  ++t_mine;
}

namespace {
// While another thread computes, virtual time follows the wall clock: each call moves it by
// the wall time since the last (at least kNearNs, at most kMaxPace), instead of jumping.
Clock::time_point g_paced_at{};  // under the world's lock
constexpr std::chrono::milliseconds kMaxPace{10};

bool follow_wall_clock(sim::World& w) noexcept {
  const auto now = Clock::now();
  const auto elapsed = now - g_paced_at;
  if (elapsed > kMaxPace) {  // a new spell: time starts to follow from now
    g_paced_at = now;
    return false;
  }
  const auto ns = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count());
  if (ns < kNearNs) return false;  // what is due within kNearNs has run already
  g_paced_at = now;
  w.pace_until(w.now() + ns);
  return true;
}
}  // namespace

// only_thread(), read again at most every millisecond on a shared fabric, where every empty
// poll steps (the other processes may have sent something): a listing of /proc per poll
// would be most of its cost, and a read of the clock per poll a tenth of it (the clock is
// looked at every 16th call).
bool only_thread_now(const sim::World& w) noexcept {
  if (!w.shared()) return only_thread();
  thread_local Clock::time_point t_read_at{};
  thread_local bool t_only = false;
  thread_local std::uint32_t t_calls = 0;
  if (t_calls++ % 16 != 0) return t_only;
  const auto now = Clock::now();
  if (now - t_read_at > std::chrono::milliseconds(1)) {
    t_only = only_thread();
    t_read_at = now;
  }
  return t_only;
}

bool step_far(sim::World& w) noexcept {
  if (w.pending_events() == 0) return false;
  if (!only_thread_now(w)) {
    if (!others_quiet()) return false;
    if (another_thread_computing()) return follow_wall_clock(w);
  }
  const std::uint64_t before = w.now();
  if (!w.step()) return false;  // only idle timers were left, and are gone
  if (w.now() - before > kNearNs) t_quiet_since = Clock::now();
  return true;
}

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
    g.world->set_poll_horizon(kNearNs);  // farther only as polling() and shared_wait decide
    g.shared = g.world->shared();
    g.world->count_port_traffic();       // for the port counters in sysfs (sysfs.hpp)
    // The world lives until exit: its observers (VERBSIM_PCAP, VERBSIM_TIMELINE,
    // VERBSIM_STATS) hear that the run is over then. Registered once per process image: in a
    // child of fork() the parent's handler serves the child's own world.
    static std::once_flag at_exit;
    std::call_once(at_exit, [] {
      std::atexit([] {
        std::lock_guard<std::recursive_mutex> lock(global().mu);
        if (global().verb_log) global().verb_log->print_summary();
        if (global().world) {
          global().world->finish_observers();
          global().world->leave_fabric();  // VERBSIM_FABRIC: the others go on without it
        }
      });
    });
    if (const char* log = std::getenv("VERBSIM_VERB_LOG"); log != nullptr && *log != '\0') {
      VerbLogOptions o;
      o.sink = open_verb_log_sink(g.world->process_file(log));
      o.provider = sim::verb_log_model(*g.world);
      o.provider_source = sim::verb_log_model_source(*g.world);
      o.summary_at_end = false;  // the global state lives until exit: the summary comes then
      g.verb_log.emplace(std::move(o));
    }
    // A child of fork() keeps the devices of its parent's list (at_fork_child), made anew here.
    const auto infos = g.world->devices();
    g.devices.resize(std::min(g.devices.size(), infos.size()));
    for (std::size_t i = 0; i < infos.size(); ++i) {
      // Devices live as long as the process, like the world.
      DDevice* d = i < g.devices.size() ? g.devices[i] : g.devices.emplace_back(new DDevice{});
      *d = DDevice{};
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
    }
    make_sysfs_tree();
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

std::uint32_t add_handle(const void* object, const ibv_context* context, Kind kind) {
  Global& g = global();
  std::uint32_t h = 0;
  if (!g.free_handles.empty()) {
    h = g.free_handles.back();
    g.free_handles.pop_back();
  } else {
    h = static_cast<std::uint32_t>(g.handles.size());
    g.handles.emplace_back();
  }
  g.handles[h] = HandleEntry{object, context, kind};
  return h;
}

void drop_handle(std::uint32_t handle) noexcept {
  Global& g = global();
  if (handle >= g.handles.size() || g.handles[handle].object == nullptr) return;
  g.handles[handle] = HandleEntry{};
  try {
    g.free_handles.push_back(handle);
  } catch (...) {
    // The handle is not reused.
  }
}

void add_imported(std::uint32_t handle, const void* object, const ibv_context* context, Kind kind) {
  global().imported.emplace_back(handle, HandleEntry{object, context, kind});
}

void drop_imported(const void* object) noexcept {
  std::erase_if(global().imported, [object](const auto& e) { return e.second.object == object; });
}

void drop_handles_of(const ibv_context* context) noexcept {
  Global& g = global();
  for (std::uint32_t h = 0; h < g.handles.size(); ++h) {
    if (g.handles[h].object != nullptr && g.handles[h].context == context) drop_handle(h);
  }
  std::erase_if(g.imported, [context](const auto& e) { return e.second.context == context; });
}

int find_handle_slow(const void* object, std::uint32_t handle, const ibv_context* context,
                     Kind kind) noexcept {
  const Global& g = global();
  for (const auto& [h, e] : g.imported) {
    if (h == handle && e.object == object && e.context == context && e.kind == kind) return 0;
  }
  if (handle < g.handles.size()) {
    const HandleEntry& e = g.handles[handle];
    if (e.object != nullptr && e.context == context && e.kind != kind) return EINVAL;
  }
  return ENOENT;
}

int check_context(const ibv_context* context) noexcept {
  if (context == nullptr) return EINVAL;
  for (const void* p : global().contexts) {
    if (static_cast<const DContext*>(p)->ibv() == context) return 0;
  }
  return EINVAL;
}

int check_channel(const ibv_comp_channel* channel, int err) noexcept {
  if (channel == nullptr) return err;
  const auto& live = global().channels;
  if (std::find(live.begin(), live.end(), channel) == live.end()) return err;
  return check_context(channel->context) == 0 ? 0 : err;
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
  constexpr int kMaxInstants = 100'000;
  sim::World* w = global().world.get();
  if (w == nullptr) return;
  const std::uint64_t deadline = w->now() + kNearNs;
  try {
    for (int n = 0; n < kMaxInstants && w->step_until(deadline); ++n) {
    }
  } catch (...) {
    // Events do not throw; a failure would show in the next verb.
  }
}

int shared_wait(const char* verb, int fd, bool nonblocking, int (*attempt)(void*), void* arg) {
  if (nonblocking) {  // one instant of the world, as an empty poll
    auto held = lock_waiting();
    if (held.refused()) return EDEADLK;
    int err = attempt(arg);
    if (sim::World* w = world(); err == EAGAIN && w != nullptr) {
      if (!w->step_until(w->now() + kNearNs)) step_far(*w);
      err = attempt(arg);
    }
    if (err == 0) note_activity();
    return err;
  }
  const auto start = Clock::now();
  bool warned = false;
  for (;;) {
    bool idle = false;  // the world has nothing left to run
    {
      auto held = lock_waiting();
      if (held.refused()) return EDEADLK;
      sim::World* w = world();
      if (w == nullptr) return EINVAL;
      for (;;) {
        if (const int err = attempt(arg); err != EAGAIN) {
          if (err == 0) note_activity();  // the thread goes on with what came
          return err;
        }
        if (w->step_until(w->now() + kNearNs) || step_far(*w)) continue;
        idle = w->pending_events() == 0;  // else a timer's jump waits for the others
        break;
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
