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
#include <pthread.h>
#include <signal.h>
#include <stdexcept>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace verbsim::sim {

namespace {

constexpr std::uint64_t kMagic = 0x7665726273696d32;  // "verbsim2": the layout's version
// A process whose bound has not moved for this long (wall time) is checked for being gone.
constexpr std::uint64_t kStillNs = 50'000'000;
// ... counted in calls of safe_time first (the wall clock is read once per that many).
constexpr std::uint32_t kStillCalls = 1024;

std::uint64_t wall_ns() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

// Field 22 of /proc/<pid>/stat (start time in clock ticks since boot): with the pid, it names
// a process even after its pid is reused. 0 if unreadable.
std::uint64_t start_time(pid_t pid) noexcept {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  std::FILE* f = std::fopen(path, "re");
  if (f == nullptr) return 0;
  char buf[1024];
  const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* p = std::strrchr(buf, ')');  // the command name may hold spaces
  if (p == nullptr) return 0;
  int field = 2;
  for (; *p != '\0' && field < 22; ++p) field += *p == ' ';
  return std::strtoull(p, nullptr, 10);
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

// flock for the scope: joining, leaving and forgetting a process are serialised by it.
class FileLock {
 public:
  explicit FileLock(int fd) noexcept : fd_(fd) {
    while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
    }
  }
  ~FileLock() { ::flock(fd_, LOCK_UN); }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_;
};

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
      if (base != MAP_FAILED) {
        const Header& h = *static_cast<const Header*>(base);
        bool anyone = h.magic != kMagic;  // not ours to judge
        for (int s = 0; s < kSlots && !anyone; ++s) anyone = alive(h.slots[s]);
        struct stat now {};
        if (!anyone && ::stat(path.c_str(), &now) == 0 && now.st_ino == st.st_ino) {
          ::unlink(path.c_str());  // every process of it is gone (killed, crashed)
        }
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
    while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
    }
    // The last process of the fabric may have removed the file meanwhile: then join anew.
    struct stat now {};
    if (::stat(path_.c_str(), &now) == 0 && now.st_ino == st.st_ino && now.st_dev == st.st_dev) {
      break;
    }
    ::close(fd_);
  }
  ::fstat(fd_, &st);
  const FileLock lock(fd_);  // taken above; this releases it at the end of the constructor
  bool fresh = static_cast<std::size_t>(st.st_size) != kFileBytes;
  auto map = [&] {
    base_ = ::mmap(nullptr, kFileBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (base_ == MAP_FAILED) fail("cannot map", path_, errno);
  };
  if (!fresh) {
    map();
    bool anyone = false;
    if (header().magic == kMagic) {
      for (int s = 0; s < kSlots; ++s) {
        if (header().slots[s].pid.load() == 0) continue;
        if (slot_alive(s)) {
          anyone = true;
        } else {
          forget_slot(s);  // a process that crashed or was killed
        }
      }
    }
    if (!anyone) {  // a stale fabric (all its processes gone): start over
      ::munmap(base_, kFileBytes);
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
    ::munmap(base_, kFileBytes);
    ::close(fd_);
    throw std::runtime_error("verbsim: fabric " + path_ + " has " + std::to_string(theirs) +
                             " devices per world and this process " + std::to_string(devices) +
                             ": every process of a fabric needs the same VERBSIM_SIM_DEVICES");
  }
  for (int s = 0; s < kSlots; ++s) {
    if (header().slots[s].pid.load() != 0) continue;
    self_ = s;
    break;
  }
  if (self_ < 0) {
    ::munmap(base_, kFileBytes);
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
  me.start.store(start_time(::getpid()));
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

void SharedFabric::leave() noexcept {
  if (left_) return;
  left_ = true;
  const FileLock lock(fd_);
  forget_slot(self_);
  bool anyone = false;
  for (int s = 0; s < kSlots; ++s) anyone = anyone || header().slots[s].pid.load() != 0;
  if (!anyone) ::unlink(path_.c_str());
}

std::uint64_t SharedFabric::clock_of_others() const noexcept {
  std::uint64_t t = 0;
  for (int s = 0; s < kSlots; ++s) {
    if (s == self_ || header().slots[s].pid.load(std::memory_order_acquire) == 0) continue;
    t = std::max(t, header().slots[s].now.load(std::memory_order_relaxed));
  }
  return t;
}

bool SharedFabric::slot_alive(int slot) noexcept { return alive(header().slots[slot]); }

bool SharedFabric::alive(const Slot& s) noexcept {
  const pid_t pid = s.pid.load(std::memory_order_acquire);
  if (pid == 0) return false;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  const std::uint64_t started = s.start.load(std::memory_order_relaxed);
  return started == 0 || start_time(pid) == started;  // else the pid was reused
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
  if (dev < 0 || dev >= kDevices || qpn >= kQpns) return -1;
  const int o = header().owner[dev][qpn].load(std::memory_order_relaxed) - 1;
  if (o < 0 || o == self_ || gone_[o]) return -1;
  return o;
}

void SharedFabric::publish(std::uint64_t now, std::uint64_t bound, std::uint64_t next) noexcept {
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
  for (;;) {
    const std::uint64_t head = r.head.load(std::memory_order_acquire);
    if (head == r.tail.load(std::memory_order_acquire)) return kNever;
    std::size_t at = head % kRingBytes;
    std::uint32_t size;
    std::memcpy(&size, r.data + at, sizeof size);
    if (size == kWrap) at = 0;
    std::uint64_t time;
    std::memcpy(&time, r.data + at + 8, sizeof time);
    // Still the first one (not taken and written over meanwhile)?
    if (r.head.load(std::memory_order_acquire) == head) return time;
  }
}

std::uint64_t SharedFabric::safe_time(std::uint64_t lookahead) noexcept {
  std::uint64_t safe = kNever;
  others_next_ = kNever;
  const std::uint32_t me = 1u << self_;
  const std::uint32_t live = header().live.load(std::memory_order_acquire) & ~me;
  const std::uint32_t used = header().used.load(std::memory_order_acquire) | me;
  for (int s = 0; s < kSlots; ++s) {
    if ((live & 1u << s) == 0) gone_[s] = false;  // free: a process that joins later starts afresh
  }
  // Parcels first (see the header), then the bounds.
  for (std::uint32_t to_set = live; to_set != 0; to_set &= to_set - 1) {
    const int to = std::countr_zero(to_set);
    if (gone_[to]) continue;
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
    const std::uint64_t b = slot.bound.load(std::memory_order_acquire);
    others_next_ = std::min(others_next_, slot.next.load(std::memory_order_relaxed));
    if (b != seen_bound_[s]) {
      seen_bound_[s] = b;
      still_[s] = 0;
      seen_at_[s] = 0;
    } else if (++still_[s] % kStillCalls == 0) {
      // It has not moved for a while: is it still there? (Checked whether or not its bound
      // holds this process back now: the parcels this process sent it may, and a process
      // that is gone takes none.)
      const std::uint64_t wall = wall_ns();
      if (seen_at_[s] == 0) {
        seen_at_[s] = wall;
      } else if (wall - seen_at_[s] > kStillNs) {
        seen_at_[s] = wall;
        if (!slot_alive(s)) {
          const pid_t pid = slot.pid.load(std::memory_order_relaxed);
          gone_[s] = true;
          const FileLock lock(fd_);
          if (!slot_alive(s) && slot.pid.load() != 0) forget_slot(s);
          std::fprintf(stderr, "verbsim: fabric %s: process %d is gone; its QPs are "
                       "unreachable from now on\n", path_.c_str(), static_cast<int>(pid));
          continue;
        }
      }
    }
    safe = std::min(safe, b);
  }
  return safe;
}

void SharedFabric::send(int slot, const void* header, std::size_t header_bytes,
                        const void* payload, std::size_t payload_bytes) noexcept {
  if (gone_[slot]) return;
  const std::size_t size = header_bytes + payload_bytes;
  const std::size_t need = 8 + ((size + 7) & ~std::size_t{7});
  Ring& r = ring(self_, slot);
  std::uint64_t tail = r.tail.load(std::memory_order_relaxed);
  std::size_t at = tail % kRingBytes;
  const std::size_t contiguous = kRingBytes - at;
  const std::size_t total = need + (contiguous < need ? contiguous : 0);
  std::uint64_t waited_since = 0;
  while (kRingBytes - (tail - r.head.load(std::memory_order_acquire)) < total) {
    // Full: the other process drains it whenever it runs its world.
    const std::uint64_t wall = wall_ns();
    if (waited_since == 0) waited_since = wall;
    if (wall - waited_since > kStillNs) {
      waited_since = wall;
      if (!slot_alive(slot)) {
        gone_[slot] = true;
        return;  // lost, as on a link to a host that lost power
      }
    }
    const timespec pause{0, 20'000};
    ::nanosleep(&pause, nullptr);
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
  r.tail.store(tail + need, std::memory_order_release);
}

bool SharedFabric::inbound() const noexcept {
  const std::uint32_t used = header().used.load(std::memory_order_acquire) & ~(1u << self_);
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
    if (gone_[slot]) continue;
    if (p.state == kListening) return slot;
    last = slot;
  }
  return last;
}

}  // namespace verbsim::sim
