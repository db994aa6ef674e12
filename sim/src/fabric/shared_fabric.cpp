// SharedFabric: joining and leaving, QP ownership, time bounds and the packet rings.
#include "fabric/shared_fabric.hpp"

#include "fabric/names.hpp"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdlib>
#include <mutex>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <dirent.h>
#include <fcntl.h>
#include <csignal>
#include <pthread.h>
#include <signal.h>
#include <stdexcept>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace verbsim::sim {

namespace {

constexpr std::uint64_t kMagic = 0x7665726273696d34;  // "verbsim4": the layout's version
// A process whose bound has not moved for this long (wall time) is checked for being gone.
constexpr std::uint64_t kStillNs = 50'000'000;
// A live process whose bound has not moved for this long (wall time: stopped by SIGSTOP or a
// debugger, or computing outside the library with no progress thread) no longer holds the
// others' time back (SharedFabric::safe_time), until it moves again.
constexpr std::uint64_t kPatienceNs = 2'000'000'000;
// ... and one seen running meanwhile (a loaded machine, a sanitized build, a computation
// outside the library), this long: slow is not stopped (SharedFabric::runs).
constexpr std::uint64_t kRunningPatienceNs = 30'000'000'000;
// How long a process waits for the file's lock before it gives up on it (a process stopped
// while holding it): joining fails, the other uses do without.
constexpr std::uint64_t kLockPatienceNs = 2'000'000'000;
// ... counted in calls of safe_time first (the wall clock is read once per that many).
constexpr std::uint32_t kStillCalls = 1024;

std::uint64_t wall_ns() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

// This process's PID namespace (the inode of /proc/self/ns/pid), 0 if it cannot be read.
std::uint64_t pid_namespace() noexcept {
  struct stat st {};
  return ::stat("/proc/self/ns/pid", &st) == 0 ? static_cast<std::uint64_t>(st.st_ino) : 0;
}

// Whether process `pid` (of this PID namespace) is running or waiting for a CPU: its state in
// /proc/PID/stat is R. Asleep (S, D), stopped (T, t) or unreadable: false.
bool running_now(pid_t pid) noexcept {
  char path[32];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char stat[256];
  const ssize_t n = ::read(fd, stat, sizeof stat - 1);
  ::close(fd);
  if (n <= 0) return false;
  stat[n] = '\0';
  // "PID (COMM) STATE ...", where COMM may hold spaces and parentheses.
  const char* end = std::strrchr(stat, ')');
  return end != nullptr && end[1] == ' ' && end[2] == 'R';
}

[[noreturn]] void fail(const std::string& what, const std::string& path, int err) {
  throw std::runtime_error("verbsim: fabric " + path + ": " + what + ": " + std::strerror(err));
}

std::string fabric_path(const std::string& name) {
  const bool ok = !name.empty() && name.size() <= 64 && name[0] != '.' &&
                  std::all_of(name.begin(), name.end(), name_char);
  if (!ok) {
    throw std::invalid_argument("VERBSIM_FABRIC: \"" + name +
                                "\" is not a fabric name (1..64 of A-Z a-z 0-9 _ - ., not "
                                "starting with '.')");
  }
  return "/dev/shm/verbsim-fabric-" + std::to_string(::getuid()) + "-" + name;
}

// flock for the scope: joining, leaving, forgetting a process and the CM's ports are
// serialised by it. A process stopped while it holds the lock must not hold the others for
// ever: after kLockPatienceNs the lock is not taken (held() false), and the caller does without.
class FileLock {
 public:
  explicit FileLock(int fd) noexcept : fd_(fd) {
    std::uint64_t since = 0;
    long pause_ns = 20'000;
    for (;;) {
      if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) {
        held_ = true;
        return;
      }
      if (errno != EWOULDBLOCK && errno != EINTR) return;
      const std::uint64_t now = wall_ns();
      if (since == 0) since = now;
      if (now - since > kLockPatienceNs) return;
      const timespec pause{0, pause_ns};
      ::nanosleep(&pause, nullptr);
      pause_ns = std::min(pause_ns * 2, 1'000'000L);
    }
  }
  ~FileLock() {
    if (held_) ::flock(fd_, LOCK_UN);
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  bool held() const noexcept { return held_; }

 private:
  int fd_;
  bool held_ = false;
};

// Liveness. Each process holds an open-file-description lock on one byte past the file's
// contents, at kLockAt + its slot: the kernel drops it when the process's last descriptor of
// the file closes, however the process ends (exit, kill, a crash; a zombie not yet reaped has
// closed its files), and every process that maps the file sees it, in whatever PID namespace
// it runs. No pid is compared: pids of other namespaces mean nothing here, and a pid is reused.
bool set_byte_lock(int fd, off_t at, short type) noexcept {
  struct flock l {};
  l.l_type = type;
  l.l_whence = SEEK_SET;
  l.l_start = at;
  l.l_len = 1;
  return ::fcntl(fd, F_OFD_SETLK, &l) == 0;
}

bool lock_byte(int fd, off_t at) noexcept { return set_byte_lock(fd, at, F_WRLCK); }
void unlock_byte(int fd, off_t at) noexcept { set_byte_lock(fd, at, F_UNLCK); }

// Whether another open file description (another process) holds the byte's lock.
bool byte_held(int fd, off_t at) noexcept {
  struct flock l {};
  l.l_type = F_WRLCK;
  l.l_whence = SEEK_SET;
  l.l_start = at;
  l.l_len = 1;
  if (::fcntl(fd, F_OFD_GETLK, &l) != 0) return true;  // cannot tell: take it as there
  return l.l_type != F_UNLCK;
}

// The mappings of the fabrics this process joined, for the SIGBUS handler: another process
// that cuts the file short (ftruncate) makes every access past the new end a SIGBUS. The
// handler maps zero pages over the mapping, so that the access and the ones after it read
// zeros (and write nowhere shared), and flags it; SharedFabric::corrupt() then reports it and
// the world leaves the fabric. Lock-free: it runs in a signal handler.
struct Guarded {
  std::atomic<std::uintptr_t> base{0};
  std::atomic<std::size_t> bytes{0};
  std::atomic<bool> cut{false};
};
constexpr int kGuarded = 16;
Guarded g_guarded[kGuarded];
struct sigaction g_previous_bus {};

void on_bus(int sig, siginfo_t* info, void* context) noexcept {
  const auto at = reinterpret_cast<std::uintptr_t>(info->si_addr);
  for (Guarded& g : g_guarded) {
    const std::uintptr_t base = g.base.load(std::memory_order_acquire);
    const std::size_t bytes = g.bytes.load(std::memory_order_acquire);
    if (base == 0 || at < base || at - base >= bytes) continue;
    const int saved = errno;
    void* got = ::mmap(reinterpret_cast<void*>(base), bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    errno = saved;
    if (got == MAP_FAILED) break;
    g.cut.store(true, std::memory_order_release);
    return;  // the access runs again, on zeros
  }
  if ((g_previous_bus.sa_flags & SA_SIGINFO) != 0 && g_previous_bus.sa_sigaction != nullptr) {
    g_previous_bus.sa_sigaction(sig, info, context);
  } else if (g_previous_bus.sa_handler != SIG_DFL && g_previous_bus.sa_handler != SIG_IGN) {
    g_previous_bus.sa_handler(sig);
  } else {
    std::signal(sig, SIG_DFL);  // the access runs again, and kills as it would have
  }
}

Guarded* guard(void* base, std::size_t bytes) noexcept {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_bus;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, &g_previous_bus);
  });
  for (Guarded& g : g_guarded) {
    std::uintptr_t expected = 0;
    if (g.base.compare_exchange_strong(expected, reinterpret_cast<std::uintptr_t>(base))) {
      g.cut.store(false);
      g.bytes.store(bytes, std::memory_order_release);
      return &g;
    }
  }
  return nullptr;  // more fabrics than slots: unguarded
}

void unguard(Guarded* g) noexcept {
  if (g == nullptr) return;
  g->bytes.store(0, std::memory_order_release);
  g->base.store(0, std::memory_order_release);
}

// Fabrics joined and not yet left: a process that exits without destroying its world (the
// drop-in's lives until exit) leaves them at exit.
std::mutex g_joined_mu;
std::vector<SharedFabric*>& joined() {
  static auto* v = new std::vector<SharedFabric*>;
  return *v;
}
void leave_all_at_exit() {
  const std::lock_guard<std::mutex> held(g_joined_mu);
  for (SharedFabric* f : joined()) f->leave();
  joined().clear();
}

// fork(): the child's copy of the list is whole (the lock is held across the fork), and the
// fabrics in it are the parent's: the child's exit must not leave them in the parent's place.
// Registered while the library loads, before the drop-in registers its own handlers on its
// first verb, so that its lock is taken first (prepare handlers run in reverse order): a
// thread that joins a fabric holds the drop-in's lock, then this one.
void before_fork() noexcept { g_joined_mu.lock(); }
void after_fork_in_parent() noexcept { g_joined_mu.unlock(); }
void after_fork_in_child() noexcept {
  for (SharedFabric* f : joined()) f->detach_after_fork();
  joined().clear();
  g_joined_mu.unlock();
}
[[maybe_unused]] const int g_fork_handlers =
    ::pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);

}  // namespace

void SharedFabric::sweep_stale(const std::string& keep) noexcept {
  const std::string prefix = "verbsim-fabric-" + std::to_string(::getuid()) + "-";
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return;
  while (const dirent* e = ::readdir(dir)) {
    const std::string path = std::string("/dev/shm/") + e->d_name;
    if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) != 0 || path == keep) continue;
    const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;
    struct stat st {};
    // Only a file of this layout, and one nobody is joining or leaving at the moment.
    if (::fstat(fd, &st) == 0 && st.st_uid == ::getuid() &&
        static_cast<std::size_t>(st.st_size) == kFileBytes && ::flock(fd, LOCK_EX | LOCK_NB) == 0) {
      void* base = ::mmap(nullptr, sizeof(Header), PROT_READ, MAP_SHARED, fd, 0);
      Guarded* const guarded = base != MAP_FAILED ? guard(base, sizeof(Header)) : nullptr;
      if (base != MAP_FAILED) {
        const Header& h = *static_cast<const Header*>(base);
        bool anyone = h.magic != kMagic;  // not ours to judge
        for (int s = 0; s < kSlots && !anyone; ++s) anyone = byte_held(fd, kLockAt + s);
        struct stat now {};
        if (!anyone && ::stat(path.c_str(), &now) == 0 && now.st_ino == st.st_ino) {
          ::unlink(path.c_str());  // every process of it is gone (killed, crashed)
        }
        unguard(guarded);
        ::munmap(base, sizeof(Header));
      }
    }
    ::close(fd);
  }
  ::closedir(dir);
}

SharedFabric::SharedFabric(const std::string& name, int devices)
    : path_(fabric_path(name)), devices_(devices) {
  if (devices > kDevices) {
    throw std::invalid_argument("VERBSIM_FABRIC: a shared fabric has at most " +
                                std::to_string(kDevices) + " devices");
  }
  sweep_stale(path_);
  struct stat st {};
  std::uint64_t waited_since = 0;
  for (;;) {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd_ < 0) fail("cannot open", path_, errno);
    if (::fstat(fd_, &st) != 0) fail("cannot stat", path_, errno);
    if (st.st_uid != ::getuid() || (st.st_mode & 077) != 0) {
      ::close(fd_);
      throw std::runtime_error("verbsim: fabric " + path_ +
                               " belongs to another user or is open to others; choose another "
                               "VERBSIM_FABRIC name");
    }
    while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK && errno != EINTR) fail("cannot lock", path_, errno);
      const std::uint64_t now = wall_ns();
      if (waited_since == 0) waited_since = now;
      if (now - waited_since > kLockPatienceNs) {
        ::close(fd_);
        throw std::runtime_error("verbsim: fabric " + path_ + ": its lock has been held for " +
                                 std::to_string(kLockPatienceNs / 1'000'000) +
                                 " ms by a process of the fabric that does not release it "
                                 "(stopped, or hung); cannot join");
      }
      const timespec pause{0, 100'000};
      ::nanosleep(&pause, nullptr);
    }
    // The last process of the fabric may have removed the file meanwhile: then join anew.
    struct stat now {};
    if (::stat(path_.c_str(), &now) == 0 && now.st_ino == st.st_ino && now.st_dev == st.st_dev) {
      break;
    }
    ::close(fd_);
  }
  ::fstat(fd_, &st);
  // Taken above; released at the end of the constructor.
  struct Unlock {
    int fd;
    ~Unlock() { ::flock(fd, LOCK_UN); }
  } const unlock{fd_};
  bool fresh = static_cast<std::size_t>(st.st_size) != kFileBytes;
  if (fresh && st.st_size != 0) {
    // Cut short while processes hold it (their liveness locks): corrupt, not stale. Starting
    // it afresh would pull the file from under them.
    for (int s = 0; s < kSlots; ++s) {
      if (!byte_held(fd_, kLockAt + s)) continue;
      ::close(fd_);
      throw std::runtime_error("verbsim: fabric " + path_ + " is corrupt: its file is " +
                               std::to_string(st.st_size) + " bytes, not " +
                               std::to_string(kFileBytes) +
                               ", while processes use it; choose another VERBSIM_FABRIC name");
    }
  }
  // Guarded from the first access on: another process may cut the file short at any time.
  auto map = [&] {
    base_ = ::mmap(nullptr, kFileBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (base_ == MAP_FAILED) fail("cannot map", path_, errno);
    guarded_ = guard(base_, kFileBytes);
  };
  auto unmap = [&] {
    unguard(static_cast<Guarded*>(guarded_));
    guarded_ = nullptr;
    ::munmap(base_, kFileBytes);
  };
  if (!fresh) {
    map();
    bool anyone = false;
    if (header().magic == kMagic) {
      for (int s = 0; s < kSlots; ++s) {
        if (slot_alive(s)) {
          anyone = true;
        } else if (header().slots[s].pid.load() != 0) {
          forget_slot(s);  // a process that crashed or was killed
        }
      }
    }
    if (!anyone) {  // a stale fabric (all its processes gone): start over
      unmap();
      fresh = true;
    }
  }
  if (fresh) {
    if (::ftruncate(fd_, 0) != 0 || ::ftruncate(fd_, static_cast<off_t>(kFileBytes)) != 0) {
      fail("cannot size", path_, errno);
    }
    map();
    header().devices = static_cast<std::uint32_t>(devices);
    for (auto& n : header().next_qpn) n.store(kFirstQpn);
    header().magic = kMagic;
  }
  if (header().devices != static_cast<std::uint32_t>(devices)) {
    const auto theirs = header().devices;
    unmap();
    ::close(fd_);
    throw std::runtime_error("verbsim: fabric " + path_ + " has " + std::to_string(theirs) +
                             " devices per world and this process " + std::to_string(devices) +
                             ": every process of a fabric needs the same VERBSIM_SIM_DEVICES");
  }
  for (int s = 0; s < kSlots; ++s) {
    if (header().slots[s].pid.load() != 0 || !lock_byte(fd_, kLockAt + s)) continue;
    self_ = s;
    break;
  }
  if (self_ < 0) {
    unmap();
    ::close(fd_);
    throw std::runtime_error("verbsim: fabric " + path_ + " has " + std::to_string(kSlots) +
                             " processes already (its limit)");
  }
  for (int s = 0; s < kSlots; ++s) {
    for (Ring* r : {&ring(s, self_), &ring(self_, s)}) {
      r->head.store(0);
      r->tail.store(0);
    }
  }
  Slot& me = header().slots[self_];
  const std::uint64_t t = clock_of_others();
  me.now.store(t);
  me.bound.store(t);
  // A token no other process of the fabric has (pids repeat across PID namespaces).
  std::uint64_t token = wall_ns() ^ (static_cast<std::uint64_t>(::getpid()) << 40) ^
                        reinterpret_cast<std::uintptr_t>(this);
  for (bool unique = false; !unique;) {
    token = token * 0x9e3779b97f4a7c15ull + 1;
    unique = token != 0;
    for (int s = 0; s < kSlots; ++s) unique = unique && header().slots[s].token.load() != token;
  }
  me.token.store(token);
  me.pidns.store(pid_namespace());
  me.pid.store(::getpid(), std::memory_order_release);
  header().used.fetch_or(1u << self_, std::memory_order_relaxed);
  header().live.fetch_or(1u << self_, std::memory_order_release);
  static std::once_flag at_exit;
  std::call_once(at_exit, [] { std::atexit(leave_all_at_exit); });
  const std::lock_guard<std::mutex> held(g_joined_mu);
  joined().push_back(this);
}

SharedFabric::~SharedFabric() {
  {
    const std::lock_guard<std::mutex> held(g_joined_mu);
    auto& v = joined();
    v.erase(std::remove(v.begin(), v.end(), this), v.end());
  }
  leave();
  unguard(static_cast<Guarded*>(guarded_));
  if (base_ != nullptr) ::munmap(base_, kFileBytes);
  if (fd_ >= 0) ::close(fd_);
}

void SharedFabric::detach_after_fork() noexcept {
  detached_ = true;
  left_ = true;
  // MAP_FIXED replaces the mapping in place: the world's pointers into it stay valid.
  // MAP_NORESERVE: no commit charge for pages the child will mostly never write.
  void* p = ::mmap(base_, kFileBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_FIXED | MAP_NORESERVE, fd_, 0);
  if (p == MAP_FAILED) {
    // Then a child that used its copy of the world would fault, rather than write into the
    // parent's fabric.
    ::mprotect(base_, kFileBytes, PROT_NONE);
  }
  ::close(fd_);
  fd_ = -1;
}

SharedFabric::Layout SharedFabric::layout() noexcept {
  return {kFileBytes,
          offsetof(Header, slots),
          sizeof(Slot),
          offsetof(Header, next_qpn),
          offsetof(Header, owner),
          sizeof(Header::owner),
          offsetof(Header, cm_ports),
          sizeof(Header::cm_ports),
          kRingsAt,
          sizeof(Ring),
          offsetof(Ring, data)};
}

const std::string& SharedFabric::corrupt() noexcept {
  const auto* g = static_cast<const Guarded*>(guarded_);
  if (g != nullptr && g->cut.load(std::memory_order_acquire) && corrupt_.empty()) {
    set_corrupt("the file was cut short (truncated) by another process");
  }
  return corrupt_;
}

void SharedFabric::set_corrupt(const std::string& why) {
  if (corrupt_.empty()) corrupt_ = why;
}

void SharedFabric::corrupt_ring(int from, const char* what) {
  set_corrupt("the ring from slot " + std::to_string(from) + " to slot " +
              std::to_string(self_) + ": " + what);
}

std::uint32_t SharedFabric::checksum(const void* p, std::size_t n) noexcept {
  // Eight bytes a step, multiply and fold (not a CRC: it finds scribbles, not an adversary).
  const auto* b = static_cast<const unsigned char*>(p);
  std::uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    std::uint64_t w;
    __builtin_memcpy(&w, b + i, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdull;
    h ^= h >> 32;
  }
  std::uint64_t tail = 0;
  __builtin_memcpy(&tail, b + i, n - i);
  h = (h ^ tail) * 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 29;
  return static_cast<std::uint32_t>(h ^ (h >> 32));
}

void SharedFabric::leave() noexcept {
  if (left_) return;
  left_ = true;
  const FileLock lock(fd_);
  // Without the lock (a process stopped holding it) the others forget this one once its
  // liveness lock goes with the file's descriptor.
  if (!lock.held()) return;
  forget_slot(self_);
  unlock_byte(fd_, kLockAt + self_);
  bool anyone = false;
  for (int s = 0; s < kSlots; ++s) {
    anyone = anyone || (header().slots[s].pid.load() != 0 && slot_alive(s));
  }
  if (!anyone) ::unlink(path_.c_str());
}

std::uint64_t SharedFabric::clock_of_others() const noexcept {
  if (left_) return 0;
  std::uint64_t t = 0;
  for (int s = 0; s < kSlots; ++s) {
    if (s == self_ || header().slots[s].pid.load(std::memory_order_acquire) == 0) continue;
    const std::uint64_t now = header().slots[s].now.load(std::memory_order_relaxed);
    if (now <= kMaxTime) t = std::max(t, now);  // else no clock's: corrupt, not followed
  }
  return t;
}

bool SharedFabric::slot_alive(int slot) noexcept {
  return slot != self_ && byte_held(fd_, kLockAt + slot);
}

void SharedFabric::forget_slot(int slot) noexcept {
  const auto mark = static_cast<std::uint8_t>(slot + 1);
  for (int d = 0; d < kDevices; ++d) {
    for (auto& o : header().owner[d]) {
      std::uint8_t expected = mark;
      o.compare_exchange_strong(expected, 0, std::memory_order_relaxed);
    }
  }
  for (CmPort& p : header().cm_ports) {
    if (p.owner == mark) p = CmPort{};
  }
  header().slots[slot].bound.store(kNever, std::memory_order_relaxed);
  header().slots[slot].token.store(0, std::memory_order_relaxed);
  header().slots[slot].pidns.store(0, std::memory_order_relaxed);
  header().live.fetch_and(~(1u << slot), std::memory_order_relaxed);
  header().slots[slot].pid.store(0, std::memory_order_release);
}

std::uint32_t SharedFabric::take_qpn(int dev) {
  const std::uint32_t span = kQpns - kFirstQpn;
  for (std::uint32_t tries = 0; tries < span; ++tries) {
    const std::uint32_t n = header().next_qpn[dev].fetch_add(1, std::memory_order_relaxed);
    const std::uint32_t qpn = kFirstQpn + (n - kFirstQpn) % span;
    std::uint8_t expected = 0;
    if (header().owner[dev][qpn].compare_exchange_strong(expected,
                                                         static_cast<std::uint8_t>(self_ + 1))) {
      return qpn;
    }
  }
  return 0;
}

void SharedFabric::give_back_qpn(int dev, std::uint32_t qpn) noexcept {
  if (qpn < kQpns) header().owner[dev][qpn].store(0, std::memory_order_relaxed);
}

int SharedFabric::remote_owner(int dev, std::uint32_t qpn) noexcept {
  if (left_ || dev < 0 || dev >= kDevices || qpn >= kQpns) return -1;
  const int o = header().owner[dev][qpn].load(std::memory_order_relaxed) - 1;
  if (o >= kSlots) {
    set_corrupt("the owner of QP " + std::to_string(qpn) + " of device " + std::to_string(dev) +
                " is " + std::to_string(o + 1) + ", no slot");
    return -1;
  }
  if (o < 0 || o == self_ || gone_[o]) return -1;
  return o;
}

void SharedFabric::publish(std::uint64_t now, std::uint64_t bound, std::uint64_t next) noexcept {
  if (left_) return;
  // Most steps of a spinning process change nothing: a store would still take the slot's
  // cache line away from the others, who read it on every step of theirs.
  if (now == published_.now && bound == published_.bound && next == published_.next) return;
  published_ = {now, bound, next};
  Slot& me = header().slots[self_];
  me.now.store(now, std::memory_order_relaxed);
  me.next.store(next, std::memory_order_relaxed);
  me.bound.store(bound, std::memory_order_release);
}

std::uint64_t SharedFabric::first_parcel_time(int from, int to) const noexcept {
  const Ring& r = ring(from, to);
  for (int tries = 0; tries < 64; ++tries) {
    const std::uint64_t head = r.head.load(std::memory_order_acquire);
    const std::uint64_t tail = r.tail.load(std::memory_order_acquire);
    if (head == tail || tail - head > kRingBytes || head % 8 != 0) return kNever;
    std::size_t at = head % kRingBytes;
    std::uint32_t size;
    std::memcpy(&size, r.data + at, sizeof size);
    if (size == kWrap) at = 0;
    std::uint64_t time;
    std::memcpy(&time, r.data + at + 8, sizeof time);
    // Still the first one (not taken and written over meanwhile)? A time no clock has is
    // corrupt: drain() finds the parcel and judges it.
    if (r.head.load(std::memory_order_acquire) == head) return time <= kMaxTime ? time : kNever;
  }
  return kNever;
}

std::uint64_t SharedFabric::safe_time(std::uint64_t lookahead) noexcept {
  std::uint64_t safe = kNever;
  others_next_ = kNever;
  if (left_) return safe;
  const std::uint32_t me = 1u << self_;
  const std::uint32_t live = header().live.load(std::memory_order_acquire) & kAllSlots & ~me;
  const std::uint32_t used = (header().used.load(std::memory_order_acquire) & kAllSlots) | me;
  for (int s = 0; s < kSlots; ++s) {
    if ((live & 1u << s) == 0) gone_[s] = stalled_[s] = ran_[s] = false;  // free: one that joins later starts afresh
  }
  // Parcels first (see the header), then the bounds.
  for (std::uint32_t to_set = live; to_set != 0; to_set &= to_set - 1) {
    const int to = std::countr_zero(to_set);
    if (gone_[to] || stalled_[to]) continue;
    for (std::uint32_t from_set = used & ~(1u << to); from_set != 0; from_set &= from_set - 1) {
      const std::uint64_t t = first_parcel_time(std::countr_zero(from_set), to);
      if (t != kNever) {
        safe = std::min(safe, t + lookahead);
        others_next_ = std::min(others_next_, t);
      }
    }
  }
  for (std::uint32_t set = live; set != 0; set &= set - 1) {
    const int s = std::countr_zero(set);
    if (gone_[s]) continue;
    Slot& slot = header().slots[s];
    std::uint64_t b = slot.bound.load(std::memory_order_acquire);
    std::uint64_t next = slot.next.load(std::memory_order_relaxed);
    if ((b > kMaxTime && b != kNever) || (next > kMaxTime && next != kNever)) {
      set_corrupt("slot " + std::to_string(s) + "'s time bound or next event");
      b = next = kNever;
    }
    others_next_ = std::min(others_next_, next);
    if (b != seen_bound_[s]) {
      seen_bound_[s] = b;
      still_[s] = 0;
      seen_at_[s] = 0;
      ran_[s] = false;
      if (stalled_[s]) {
        stalled_[s] = false;
        std::fprintf(stderr, "verbsim: fabric %s: process %d moves again\n", path_.c_str(),
                     static_cast<int>(slot.pid.load(std::memory_order_relaxed)));
      }
    } else if (++still_[s] % kStillCalls == 0) {
      // It has not moved for a while: is it still there? (Checked whether or not its bound
      // holds this process back now: the parcels this process sent it may, and a process
      // that is gone takes none.)
      const std::uint64_t wall = wall_ns();
      if (seen_at_[s] == 0) {
        seen_at_[s] = wall;
        still_since_[s] = wall;
      } else if (wall - seen_at_[s] > kStillNs) {
        seen_at_[s] = wall;
        if (!slot_alive(s)) {
          const pid_t pid = slot.pid.load(std::memory_order_relaxed);
          gone_[s] = true;
          newly_gone_ |= 1u << s;
          const FileLock lock(fd_);
          if (lock.held() && !slot_alive(s) && slot.pid.load() != 0) forget_slot(s);
          std::fprintf(stderr, "verbsim: fabric %s: process %d is gone; its QPs are "
                       "unreachable from now on\n", path_.c_str(), static_cast<int>(pid));
          continue;
        }
        const bool ran = runs(s);  // looked at every kStillNs of the spell
        if (!stalled_[s] && b < kNever &&
            wall - still_since_[s] > (ran ? kRunningPatienceNs : kPatienceNs)) {
          // There, but not moving (stopped, asleep outside the library with nothing to run
          // it, or running without moving for far too long): a host that stopped answering.
          // Those that talk to it time out; the others go on.
          stalled_[s] = true;
          std::fprintf(stderr, "verbsim: fabric %s: process %d has not moved for %llu ms "
                       "(%s); the fabric's time goes on without it until it moves\n",
                       path_.c_str(), static_cast<int>(slot.pid.load(std::memory_order_relaxed)),
                       static_cast<unsigned long long>((wall - still_since_[s]) / 1'000'000),
                       ran ? "running, but not in the library" : "stopped or asleep");
        }
      }
    }
    if (stalled_[s]) continue;
    safe = std::min(safe, b);
  }
  return safe;
}

// Whether the process of `slot` has been seen running (or waiting for a CPU) since it was
// first seen still: one that has is slow, not stopped. Looked up in /proc each time this is
// asked (every kStillNs of a still spell) where the process is of this PID namespace; one of
// another namespace cannot be looked up and counts as not running.
bool SharedFabric::runs(int slot) noexcept {
  if (ran_[slot]) return true;
  const Slot& other = header().slots[slot];
  static const std::uint64_t mine = pid_namespace();
  if (mine == 0 || other.pidns.load(std::memory_order_relaxed) != mine) return false;
  ran_[slot] = running_now(other.pid.load(std::memory_order_relaxed));
  return ran_[slot];
}

void SharedFabric::send(int slot, const void* header, std::size_t header_bytes,
                        const void* payload, std::size_t payload_bytes) noexcept {
  if (left_ || slot < 0 || slot >= kSlots || slot == self_ || gone_[slot]) return;
  const std::size_t size = header_bytes + payload_bytes;
  const std::size_t need = 8 + ((size + 7) & ~std::size_t{7});
  Ring& r = ring(self_, slot);
  std::uint64_t tail = r.tail.load(std::memory_order_relaxed);
  std::size_t at = tail % kRingBytes;
  const std::size_t contiguous = kRingBytes - at;
  const std::size_t total = need + (contiguous < need ? contiguous : 0);
  std::uint64_t waited_since = 0;
  std::uint64_t drained_at = 0;  // wall ns when its head last moved while this one waited
  std::uint64_t head = r.head.load(std::memory_order_acquire);
  if (tail - head > kRingBytes || tail % 8 != 0) {
    set_corrupt("the ring from slot " + std::to_string(self_) + " to slot " +
                std::to_string(slot) + ": its head or tail");
    return;
  }
  while (kRingBytes - (tail - head) < total) {
    // Full: the other process drains it whenever it runs its world.
    if (stalled_[slot]) return;  // lost: it stopped taking them (safe_time)
    const std::uint64_t wall = wall_ns();
    if (waited_since == 0) waited_since = drained_at = wall;
    if (wall - waited_since > kStillNs) {
      waited_since = wall;
      if (!slot_alive(slot)) {
        gone_[slot] = true;
        return;  // lost, as on a link to a host that lost power
      }
      if (wall - drained_at > kPatienceNs && (!runs(slot) || wall - drained_at > kRunningPatienceNs)) {
        stalled_[slot] = true;  // there, but it takes nothing: a host that stopped answering
        return;
      }
    }
    const timespec pause{0, 20'000};
    ::nanosleep(&pause, nullptr);
    const std::uint64_t now_head = r.head.load(std::memory_order_acquire);
    if (now_head != head) {
      head = now_head;
      drained_at = wall_ns();
    }
  }
  if (contiguous < need) {
    const std::uint32_t wrap = kWrap;
    std::memcpy(r.data + at, &wrap, sizeof wrap);
    tail += contiguous;
    at = 0;
  }
  const auto size32 = static_cast<std::uint32_t>(size);
  std::memcpy(r.data + at, &size32, sizeof size32);
  std::memcpy(r.data + at + 8, header, header_bytes);
  if (payload_bytes != 0) std::memcpy(r.data + at + 8 + header_bytes, payload, payload_bytes);
  // The checksum of what was written (read back: the ring is the one copy of it).
  const std::uint32_t check = checksum(r.data + at + 8, size);
  std::memcpy(r.data + at + 4, &check, sizeof check);
  r.tail.store(tail + need, std::memory_order_release);
}

bool SharedFabric::inbound() const noexcept {
  if (left_) return false;
  const std::uint32_t used =
      header().used.load(std::memory_order_acquire) & kAllSlots & ~(1u << self_);
  for (std::uint32_t set = used; set != 0; set &= set - 1) {
    const Ring& r = ring(std::countr_zero(set), self_);
    if (r.head.load(std::memory_order_relaxed) != r.tail.load(std::memory_order_acquire)) {
      return true;
    }
  }
  return false;
}

int SharedFabric::claim_cm_port(std::uint32_t node, const Ip& ip, bool any, std::uint16_t port,
                                bool ud) noexcept {
  const FileLock lock(fd_);
  const auto me = static_cast<std::uint32_t>(self_ + 1);
  CmPort* free = nullptr;
  CmPort* released = nullptr;  // reused when nothing is free
  for (CmPort& p : header().cm_ports) {
    if (p.owner == 0) {
      if (free == nullptr) free = &p;
      continue;
    }
    if (p.state == kReleased) {
      if (released == nullptr || (p.owner == me && p.port == port)) released = &p;
      continue;
    }
    if (p.owner == me || p.port != port || p.ud != ud) continue;
    if (p.any || any) return EADDRNOTAVAIL;
    if (p.ip == ip) return EADDRINUSE;
  }
  CmPort* slot = free != nullptr ? free : released;
  if (slot == nullptr) return ENOSPC;
  *slot = CmPort{me, node, port, ud, kBound, any, ip};
  return 0;
}

void SharedFabric::set_cm_listening(std::uint32_t node) noexcept {
  const FileLock lock(fd_);
  for (CmPort& p : header().cm_ports) {
    if (p.owner == static_cast<std::uint32_t>(self_ + 1) && p.node == node && p.state == kBound) {
      p.state = kListening;
    }
  }
}

void SharedFabric::release_cm_port(std::uint32_t node) noexcept {
  const FileLock lock(fd_);
  for (CmPort& p : header().cm_ports) {
    if (p.owner == static_cast<std::uint32_t>(self_ + 1) && p.node == node && p.state != kReleased) {
      p.state = kReleased;
    }
  }
}

bool SharedFabric::released_cm_port(const Ip& ip, std::uint16_t port, bool ud) noexcept {
  const FileLock lock(fd_);
  for (const CmPort& p : header().cm_ports) {
    if (p.owner != static_cast<std::uint32_t>(self_ + 1) || p.state != kReleased) continue;
    if (p.port == port && p.ud == ud && (p.any || p.ip == ip)) return true;
  }
  return false;
}

int SharedFabric::cm_listener(const Ip& ip, std::uint16_t port, bool ud) noexcept {
  const FileLock lock(fd_);
  int last = -1;
  for (const CmPort& p : header().cm_ports) {
    if (p.owner == 0 || p.owner == static_cast<std::uint32_t>(self_ + 1)) continue;
    if (p.port != port || p.ud != ud || (!p.any && p.ip != ip)) continue;
    const int slot = static_cast<int>(p.owner) - 1;
    if (slot >= kSlots) continue;  // corrupt: no slot's
    if (gone_[slot]) continue;
    if (p.state == kListening) return slot;
    last = slot;
  }
  return last;
}

}  // namespace verbsim::sim
