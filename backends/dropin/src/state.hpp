// The drop-in's process-wide state: the one simulated world, the lock around it, the devices,
// and the conversions of C++ failures into libibverbs' error conventions.
//
// The deliberate global. Everywhere else verbsim passes sim::World& explicitly; here the C ABI
// gives us nowhere to keep it (ibv_get_device_list takes no argument), so the process has exactly
// one world, created on first use from sim::Config::from_env() (VERBSIM_SEED, VERBSIM_PROFILE,
// VERBSIM_FAULTS, VERBSIM_SIM_DEVICES, VERBSIM_SIM_PORTS) and never destroyed (a program may call
// verbs from atexit handlers or other threads while static destructors run).
//
// The simulator is single-threaded: every entry point, data path included, holds one recursive
// mutex while it touches the world. A background thread (progress.cpp) takes the same lock to
// let the world advance while the program waits outside the library (poll/epoll on an event fd).
#pragma once

#include <infiniband/verbs.h>

#include <poll.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sysfs.hpp"
#include "verbsim/completion_channel.hpp"
#include "verbsim/sim/world.hpp"
#include "verbsim/verb_log.hpp"

namespace verbsim::dropin {

struct DDevice;
struct SysfsTree;

// The kinds of object a program names by handle (ibv_pd::handle, ibv_cq::handle, ...).
enum class Kind : std::uint8_t { none, pd, mr, mw, ah, cq, qp, srq };

// One live object under its handle: what the kernel's per-file handle table (uverbs' idr)
// holds. The object is the very pointer handed out, so a copy of the struct is not it.
struct HandleEntry {
  const void* object = nullptr;
  const ibv_context* context = nullptr;
  Kind kind = Kind::none;
};

struct Global {
  std::recursive_mutex mu;
  std::unique_ptr<sim::World> world;
  // VERBSIM_VERB_LOG: the verb log every context is opened through (docs/OBSERVABILITY.md).
  std::optional<VerbLog> verb_log;
  bool tried = false;           // world creation was attempted
  bool shared = false;          // the world is on a fabric shared with other processes
  std::string config_error;     // why it failed (bad VERBSIM_* variable)
  std::vector<DDevice*> devices;  // one per simulated device, never freed
  // Core resource -> the ibv_* object wrapping it, for the pointers completion and async events
  // carry (CompletionQueue*, QueuePair*, SharedReceiveQueue*).
  std::unordered_map<const void*, void*> wrappers;
  // Live objects by the handle a program may pass to ibv_import_* (contexts by their cmd_fd's
  // file, PDs and MRs by handle).
  std::vector<void*> contexts;
  std::unordered_map<std::uint32_t, void*> pds;
  std::unordered_map<std::uint32_t, void*> mrs;
  // Every live PD, MR, MW, AH, CQ, QP and SRQ by its handle (handles[h]; freed handles are
  // reused), and the PDs and MRs imported under their owner's handle into another context.
  std::vector<HandleEntry> handles;
  std::vector<std::uint32_t> free_handles;
  std::vector<std::pair<std::uint32_t, HandleEntry>> imported;
  std::vector<const void*> channels;  // live completion channels (no handle: the fd)
  bool trace = false;  // VERBSIM_DROPIN_TRACE=1: print why each verb failed

  SysfsTree* sysfs = nullptr;  // the process's sysfs tree (sysfs.hpp), never freed

  // In a child of fork(): the parent's state, left alone and never freed (state.cpp), kept
  // reachable from here so that a leak checker does not count it.
  Global* parent = nullptr;
};

Global& global() noexcept;

// Signal handlers. No verb is async-signal-safe (as in rdma-core), but one case is refused
// rather than run: a verb called by a handler that interrupted this thread while it held the
// lock, inside a verb. The world may be half way through a change there, and the lock, being
// recursive, would let the handler in. Such a verb fails at once, before it touches anything
// or allocates: EDEADLK (backends/dropin/README.md, "Signals"). The drop-in's own nesting
// (librdmacm's verbs call libibverbs' with the lock held) says so with a NestedVerbs scope.
//
// The world's lock as a verb holds it (lock(), lock_waiting()); refused() when it was not
// taken for the reason above.
class [[nodiscard]] Held {
 public:
  Held() noexcept = default;  // refused
  explicit Held(std::recursive_mutex& mu) noexcept;
  Held(Held&& other) noexcept : mu_(std::exchange(other.mu_, nullptr)) {}
  Held& operator=(Held&&) = delete;
  ~Held();
  bool refused() const noexcept { return mu_ == nullptr; }

 private:
  std::recursive_mutex* mu_ = nullptr;
};

// While one lives, this thread's verbs are let in at the depth of lock it holds now: the
// libibverbs verbs a librdmacm verb calls on its ids' objects (and not a handler that
// interrupts one of those, which holds the lock one level deeper).
class NestedVerbs {
 public:
  NestedVerbs() noexcept;
  ~NestedVerbs();
  NestedVerbs(const NestedVerbs&) = delete;
  NestedVerbs& operator=(const NestedVerbs&) = delete;

 private:
  int saved_;
};

// Takes the world's lock and records the call for the progress thread, and as activity of
// this thread (note_activity). Refused (Held::refused) as above.
Held lock() noexcept;

// Threads. The simulator runs one event at a time under the lock, and an empty poll or a wait
// would move virtual time to the next event however far off: right for a program with one
// thread (it has nothing else to do), wrong for one whose other threads are busy (the server
// thread about to accept, while the client waits: the client's retransmissions would run out
// in no time). So the clock moves at most kNearNs at a time, except once the other threads
// have been quiet for 10 ms of wall time, one such jump per quiet spell. Calls that may change
// what happens next are activity (lock(); a poll or event read that found something);
// waiting, and polls that find nothing, are not (lock_waiting()). A program of one thread
// never waits for that.
inline constexpr std::uint64_t kNearNs = 1'000'000;
Held lock_waiting() noexcept;
void note_activity() noexcept;
// The world's next instant, however far off, if the process has no other thread or the others
// have been quiet for 10 ms; a jump past kNearNs starts the next quiet spell. While another
// thread computes (runs without calling the library), virtual time follows the wall clock
// instead. False if it ran nothing.
bool step_far(sim::World& w) noexcept;

// Runs `poll` (an ibv_poll_cq that runs the world's next instant if it is within kNearNs
// when it finds nothing: sim::World::set_poll_horizon; the lock held). If it found nothing
// and step_far() runs the next instant, `poll` runs again (without moving the clock): for a
// program of one thread, what one poll of the simulator does.
template <class F>
PollResult polling(F&& poll) {
  sim::World& w = *global().world;
  PollResult r = poll();
  if (r.count != 0 || r.err != 0 || !step_far(w)) return r;
  w.set_poll_horizon(0);
  r = poll();
  w.set_poll_horizon(kNearNs);
  return r;
}

// The world, created on first use. Null when the configuration is invalid (the reason is
// printed once; errno is set to EINVAL). Call with the lock held.
sim::World* world() noexcept;

// Prints "verbsim drop-in: <verb>: <what>" when VERBSIM_DROPIN_TRACE=1.
void trace(const char* verb, const char* what) noexcept;

// The errno a C++ failure stands for: VerbError/system_error carry it; bad_alloc is ENOMEM;
// anything else is EIO (and is printed, it is a bug in the drop-in or the simulator).
int errno_of_current_exception(const char* verb) noexcept;

// Runs `body` (returning 0 or an errno) under the lock; exceptions become their errno. The
// counter files are then current, unless `refresh` is Refresh::no (the data path's verbs that
// come this way: ibv_req_notify_cq, ibv_bind_mw). A control verb's failure is also left in
// errno, as the failed ioctl or write to the uverbs device leaves it under libibverbs (whose
// wrappers return the provider's result: ibv_dealloc_pd's EBUSY is in errno too); the data
// path's verbs run in the provider and leave errno alone.
template <Refresh refresh = Refresh::yes, class F>
int with_errno(const char* verb, F&& body) noexcept {
  int err = 0;
  try {
    auto held = lock();
    if (held.refused()) [[unlikely]] {
      err = EDEADLK;
    } else {
      err = body();
      if constexpr (refresh == Refresh::yes) refresh_sysfs();
    }
  } catch (...) {
    err = errno_of_current_exception(verb);
  }
  if constexpr (refresh == Refresh::yes) {
    if (err != 0) errno = err;
  }
  return err;
}

// Runs `body` (returning a pointer) under the lock; on failure returns NULL with errno set.
// The counter files are then current.
template <class T, class F>
T* with_null(const char* verb, F&& body) noexcept {
  try {
    auto held = lock();
    if (held.refused()) [[unlikely]] {
      errno = EDEADLK;
      return nullptr;
    }
    T* out = body();
    refresh_sysfs();
    if (out == nullptr && errno == 0) errno = EINVAL;
    return out;
  } catch (...) {
    errno = errno_of_current_exception(verb);
    return nullptr;
  }
}

// Sets errno and returns NULL, for creators that reject their arguments.
template <class T = void>
T* fail_null(int err) noexcept {
  errno = err;
  return nullptr;
}

// Handles. Every verb that takes an object checks, under the lock and before it reads past the
// libibverbs struct, that the object is the one registered under its `handle` for its
// `context`, as the kernel looks a handle up in the calling file's table: a copy of the struct,
// a changed handle or context, or an object already destroyed fail there instead of being
// trusted (and freed twice).
std::uint32_t add_handle(const void* object, const ibv_context* context, Kind kind);
void drop_handle(std::uint32_t handle) noexcept;
void add_imported(std::uint32_t handle, const void* object, const ibv_context* context, Kind kind);
void drop_imported(const void* object) noexcept;
// A closed context's objects are no longer found (ibv_close_device).
void drop_handles_of(const ibv_context* context) noexcept;
int find_handle_slow(const void* object, std::uint32_t handle, const ibv_context* context,
                     Kind kind) noexcept;
// 0 when `object` is registered under `handle` for `context`; else what the kernel's lookup
// answers: ENOENT (nothing of this context under the handle, or another object: a copy),
// EINVAL (an object of another kind under it). One bounds check and three compares when the
// object is genuine (the data path asks this on every post and poll).
inline int find_handle(const void* object, std::uint32_t handle, const ibv_context* context,
                       Kind kind) noexcept {
  const std::vector<HandleEntry>& t = global().handles;
  if (handle < t.size()) [[likely]] {
    const HandleEntry& e = t[handle];
    if (e.object == object && e.context == context && e.kind == kind) [[likely]] return 0;
  }
  return find_handle_slow(object, handle, context, kind);
}
// The same for an ibv_* struct with `handle` and `context` members; EINVAL for NULL.
template <class T>
int check(const T* object, Kind kind) noexcept {
  if (object == nullptr) [[unlikely]] return EINVAL;
  return find_handle(object, object->handle, object->context, kind);
}
// A verb the kernel runs as a write() command looks its objects up with uobj_get_obj_read,
// and every failed lookup is EINVAL there (uverbs_cmd.c); ioctl methods (the destroys,
// create_qp, create_cq) return the lookup's own errno.
inline int as_write_cmd(int err) noexcept { return err != 0 ? EINVAL : 0; }
// 0 when `context` is a context open in this process (not a copy of one), else EINVAL.
int check_context(const ibv_context* context) noexcept;
// 0 when `channel` is a live completion channel (not a copy of one) of an open context, else
// `err` (ibv_create_cq: EBADF, the kernel's answer to an fd that is no channel).
int check_channel(const ibv_comp_channel* channel, int err) noexcept;

// Registers / forgets the ibv object wrapping a core resource.
void remember(const void* core, void* wrapper);
void forget(const void* core) noexcept;
template <class W>
W* wrapper_of(const void* core) noexcept {
  const auto& m = global().wrappers;
  const auto it = m.find(core);
  return it == m.end() ? nullptr : static_cast<W*>(it->second);
}

// Clears O_NONBLOCK on an event fd handed to the program: libibverbs' fds block until the
// program sets O_NONBLOCK itself, and ibv_get_cq_event / ibv_get_async_event read the flag.
void make_blocking(int fd) noexcept;
bool is_nonblocking(int fd) noexcept;
// Whether an event fd has an event pending (the simulator's and the drop-in's fds are readable
// exactly then).
inline bool readable(int fd) noexcept {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1;
}

// After a post: runs the simulated world a little (at most 1 ms of virtual time, whatever is
// due by then), so a program sees what a post does on rxe, which executes the work request
// inside ibv_post_send: completions of local traffic are there before the next verb call.
// Deterministic (same thread, same order). Call with the lock held.
void settle() noexcept;

// The blocking waits: ibv_get_cq_event, ibv_get_async_event, rdma_get_cm_event (and the
// librdmacm verbs of a synchronous id). Until `attempt(arg)` (called with the lock held; it
// must not move the world) returns 0 or an errno other than EAGAIN, which is returned, the
// world runs one instant at a time, as the simulator's own blocking waits run it: the same
// events in the same order, so a single-threaded program stays deterministic. Two rules are
// for programs whose other threads cause the event (rping's server thread accepts while its
// client waits; a completion thread waits while the main thread connects):
//   - the lock is released between attempts whenever the world has nothing due within 1 ms,
//     and the thread polls `fd` meanwhile;
//   - virtual time jumps more than 1 ms ahead (only timers are that far off: a CM or transport
//     retransmission, an RNR wait) only once no other thread has called into the library for
//     10 ms of wall time (threads waiting here do not count), one jump per quiet spell.
// When nothing is left to run it waits for another thread to post work, as a device would, and
// says so on stderr after 2 s. With `nonblocking`: one attempt, one instant of the world (as a
// poll of an empty CQ), one more attempt.
int shared_wait(const char* verb, int fd, bool nonblocking, int (*attempt)(void*), void* arg);

}  // namespace verbsim::dropin
