#include "sysfs.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "objects.hpp"
#include "state.hpp"

namespace verbsim::dropin {

namespace {

using Counters = sim::PortHwCounters;

// One file of ports/N/<group>/: the counter it shows (nullptr: `constant`, what the simulator
// cannot know), and its width in the PMA's attribute (the kernel shows a counter that has
// reached its maximum as that maximum; 64: PortCountersExtended, as mlx5 reports).
struct CounterFile {
  const char* group;
  const char* name;
  std::uint64_t Counters::*member;
  unsigned bits;
  std::uint64_t constant;
};

// The kernel's drivers/infiniband/core/sysfs.c (counters/, the PMA's PortCounters and
// PortCountersExtended) and drivers/infiniband/sw/rxe/rxe_hw_counters.c (hw_counters/, with
// the core's lifespan: how many ms the kernel caches the values).
constexpr CounterFile kFiles[] = {
    {"counters", "symbol_error", nullptr, 16, 0},
    {"counters", "link_error_recovery", nullptr, 8, 0},
    {"counters", "link_downed", &Counters::link_downed, 8, 0},
    {"counters", "port_rcv_errors", nullptr, 16, 0},
    {"counters", "port_rcv_remote_physical_errors", nullptr, 16, 0},
    {"counters", "port_rcv_switch_relay_errors", nullptr, 16, 0},
    {"counters", "port_xmit_discards", &Counters::xmit_discards, 16, 0},
    {"counters", "port_xmit_constraint_errors", nullptr, 8, 0},
    {"counters", "port_rcv_constraint_errors", nullptr, 8, 0},
    {"counters", "local_link_integrity_errors", nullptr, 4, 0},
    {"counters", "excessive_buffer_overrun_errors", nullptr, 4, 0},
    {"counters", "VL15_dropped", nullptr, 16, 0},
    {"counters", "port_xmit_data", &Counters::xmit_words, 64, 0},
    {"counters", "port_rcv_data", &Counters::rcv_words, 64, 0},
    {"counters", "port_xmit_packets", &Counters::xmit_packets, 64, 0},
    {"counters", "port_rcv_packets", &Counters::rcv_packets, 64, 0},
    {"counters", "port_xmit_wait", nullptr, 32, 0},
    {"counters", "unicast_xmit_packets", &Counters::xmit_packets, 64, 0},
    {"counters", "unicast_rcv_packets", &Counters::rcv_packets, 64, 0},
    {"counters", "multicast_xmit_packets", nullptr, 64, 0},
    {"counters", "multicast_rcv_packets", nullptr, 64, 0},
    {"hw_counters", "sent_pkts", &Counters::xmit_packets, 64, 0},
    {"hw_counters", "rcvd_pkts", &Counters::rcv_packets, 64, 0},
    {"hw_counters", "duplicate_request", &Counters::duplicate_request, 64, 0},
    {"hw_counters", "out_of_seq_request", &Counters::out_of_seq_request, 64, 0},
    {"hw_counters", "rcvd_rnr_err", &Counters::rcvd_rnr_err, 64, 0},
    {"hw_counters", "send_rnr_err", &Counters::send_rnr_err, 64, 0},
    {"hw_counters", "rcvd_seq_err", &Counters::rcvd_seq_err, 64, 0},
    {"hw_counters", "ack_deferred", nullptr, 64, 0},
    {"hw_counters", "retry_exceeded_err", &Counters::retry_exceeded_err, 64, 0},
    {"hw_counters", "retry_rnr_exceeded_err", &Counters::retry_rnr_exceeded_err, 64, 0},
    {"hw_counters", "completer_retry_err", &Counters::completer_retry_err, 64, 0},
    {"hw_counters", "send_err", nullptr, 64, 0},
    {"hw_counters", "link_downed", &Counters::link_downed, 64, 0},
    {"hw_counters", "rdma_sends", &Counters::rdma_sends, 64, 0},
    {"hw_counters", "rdma_recvs", &Counters::rdma_recvs, 64, 0},
    {"hw_counters", "lifespan", nullptr, 64, 10},
};
constexpr std::size_t kFileCount = std::size(kFiles);

std::uint64_t value_of(const CounterFile& f, const Counters& c) noexcept {
  if (f.member == nullptr) return f.constant;
  const std::uint64_t max = f.bits >= 64 ? UINT64_MAX : (std::uint64_t{1} << f.bits) - 1;
  return std::min(c.*f.member, max);
}

}  // namespace

// The tree of this process (Global::sysfs).
struct SysfsTree {
  std::string root;  // <dir>/verbsim-sysfs-<pid>-XXXXXX
  pid_t owner = 0;   // the process that made it, the one that removes it
  int ports = 0;     // per device
  // What each counter file holds, by (device, port, file); UINT64_MAX: not written yet.
  std::vector<std::uint64_t> written;
};

namespace {

using Tree = SysfsTree;

Tree*& tree() noexcept { return global().sysfs; }

bool usable_dir(const char* path) noexcept {
  struct stat st {};
  return path != nullptr && *path == '/' && ::stat(path, &st) == 0 && S_ISDIR(st.st_mode) &&
         ::access(path, W_OK | X_OK) == 0;
}

// The directory a process's private files go in: memory-backed where there is one, since the
// counter files are rewritten every few milliseconds (on a disk's file system the renames
// cost a shared fabric most of its speed).
std::string private_base() {
  const char* const dirs[] = {std::getenv("XDG_RUNTIME_DIR"), "/dev/shm", std::getenv("TMPDIR")};
  for (const char* dir : dirs) {
    if (usable_dir(dir)) return dir;
  }
  return "/tmp";
}

int remove_entry(const char* path, const struct stat*, int, FTW*) { return ::remove(path); }

void remove_tree(const std::string& path) noexcept {
  ::nftw(path.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

// Removes the trees of this user's processes that are gone (killed before their atexit).
void remove_abandoned(const std::string& base) noexcept {
  DIR* d = ::opendir(base.c_str());
  if (d == nullptr) return;
  constexpr std::string_view kPrefix = "verbsim-sysfs-";
  while (const dirent* e = ::readdir(d)) {
    const std::string_view name = e->d_name;
    if (name.substr(0, kPrefix.size()) != kPrefix) continue;
    const long pid = std::strtol(name.data() + kPrefix.size(), nullptr, 10);
    if (pid <= 0 || ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    const std::string path = base + "/" + std::string(name);
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == ::getuid()) {
      remove_tree(path);
    }
  }
  ::closedir(d);
}

bool write_file(const std::string& path, const char* text) noexcept {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  const auto n = static_cast<ssize_t>(std::strlen(text));
  const bool ok = ::write(fd, text, static_cast<std::size_t>(n)) == n;
  ::close(fd);
  return ok;
}

// Writes `text` to `path` through a temporary file and a rename, so a reader never sees a
// file half written.
bool replace_file(const std::string& path, const char* text) noexcept {
  const std::string tmp = path + ".new";
  return write_file(tmp, text) && ::rename(tmp.c_str(), path.c_str()) == 0;
}

std::string device_dir(const Tree& t, const DDevice& d) {
  return t.root + "/class/infiniband/" + d.dev.name;
}

void rewrite_counters(Tree& t) noexcept {
  sim::World* w = global().world.get();
  if (w == nullptr) return;
  const auto& devices = global().devices;
  try {
    for (std::size_t d = 0; d < devices.size(); ++d) {
      for (int p = 1; p <= t.ports; ++p) {
        const Counters c = w->port_counters(static_cast<int>(d), p);
        const std::size_t base = (d * static_cast<std::size_t>(t.ports) + (p - 1)) * kFileCount;
        for (std::size_t i = 0; i < kFileCount; ++i) {
          const std::uint64_t v = value_of(kFiles[i], c);
          if (t.written[base + i] == v) continue;
          char text[32];
          std::snprintf(text, sizeof text, "%" PRIu64 "\n", v);
          const std::string path = device_dir(t, *devices[d]) + "/ports/" + std::to_string(p) +
                                   "/" + kFiles[i].group + "/" + kFiles[i].name;
          if (replace_file(path, text)) t.written[base + i] = v;
        }
      }
    }
  } catch (...) {
    // Out of memory: the files catch up at the next refresh.
  }
}

bool make_dirs(const std::string& root, const std::string& rel) {
  std::string path = root;
  std::size_t start = 0;
  while (start < rel.size()) {
    const std::size_t end = std::min(rel.find('/', start), rel.size());
    path += "/" + rel.substr(start, end - start);
    if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) return false;
    start = end + 1;
  }
  return true;
}

bool build(Tree& t) {
  const auto& devices = global().devices;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    const DDevice& d = *devices[i];
    const std::string dev = std::string("class/infiniband/") + d.dev.name;
    for (int p = 1; p <= t.ports; ++p) {
      for (const char* group : {"counters", "hw_counters"}) {
        if (!make_dirs(t.root, dev + "/ports/" + std::to_string(p) + "/" + group)) return false;
      }
    }
    if (!write_file(t.root + "/" + dev + "/node_type", "1: CA\n") ||
        !write_file(t.root + "/" + dev + "/board_id", "VERBSIM_SIMULATED\n")) {
      return false;
    }
    const std::string uverbs = std::string("class/infiniband_verbs/") + d.dev.dev_name;
    if (!make_dirs(t.root, uverbs) ||
        !write_file(t.root + "/" + uverbs + "/ibdev", (std::string(d.dev.name) + "\n").c_str())) {
      return false;
    }
  }
  return true;
}

// A port counter's value, if `path` (absolute, no "." or ".." parts) names one of a simulated
// device: <root or /sys>/class/infiniband/<dev>/ports/<n>/<group>/<name>.
bool live_value(const std::string& path, std::uint64_t& out) {
  std::string_view rest = path;
  const Tree* t = tree();
  const std::string_view sys = "/sys";
  if (t != nullptr && rest.substr(0, t->root.size()) == t->root) {
    rest.remove_prefix(t->root.size());
  } else if (rest.substr(0, sys.size()) == sys) {
    rest.remove_prefix(sys.size());
  } else {
    return false;
  }
  const std::string_view cls = "/class/infiniband/";
  if (rest.substr(0, cls.size()) != cls) return false;
  rest.remove_prefix(cls.size());
  // <dev>/ports/<n>/<group>/<name>
  std::string_view part[5];
  for (int i = 0; i < 5; ++i) {
    const std::size_t slash = rest.find('/');
    if ((i < 4) != (slash != std::string_view::npos)) return false;
    part[i] = rest.substr(0, slash);
    rest = i < 4 ? rest.substr(slash + 1) : std::string_view{};
  }
  if (part[1] != "ports") return false;
  const auto& devices = global().devices;
  int dev = -1;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    if (part[0] == devices[i]->dev.name) dev = static_cast<int>(i);
  }
  const int port = std::atoi(std::string(part[2]).c_str());
  if (dev < 0 || port < 1 || std::to_string(port) != part[2]) return false;
  const sim::World* w = global().world.get();
  if (w == nullptr || port > w->config().ports_per_device) return false;
  for (const CounterFile& f : kFiles) {
    if (part[3] == f.group && part[4] == f.name) {
      out = value_of(f, w->port_counters(dev, port));
      return true;
    }
  }
  return false;
}

// The attributes libibverbs' tools read from a device's directory when there is no tree.
const char* attribute(const char* dir, const char* file) noexcept {
  const char* base = std::strrchr(dir, '/');
  base = base != nullptr ? base + 1 : dir;
  if (std::strcmp(file, "board_id") == 0) return "VERBSIM_SIMULATED";
  if (std::strcmp(file, "node_type") == 0) return "1: CA";
  if (std::strcmp(file, "ibdev") == 0) return base;
  return nullptr;
}

int answer(char* buf, std::size_t size, const char* text) noexcept {
  if (size == 0) return 0;
  const int n = std::snprintf(buf, size, "%s", text);
  return n < 0 ? -1 : std::min(n, static_cast<int>(size) - 1);
}

}  // namespace

void make_sysfs_tree() noexcept {
  sim::World* w = global().world.get();
  if (w == nullptr || tree() != nullptr) return;
  try {
    auto t = std::make_unique<Tree>();
    const std::string base = private_base();
    remove_abandoned(base);
    std::string name = base + "/verbsim-sysfs-" + std::to_string(::getpid()) + "-XXXXXX";
    if (::mkdtemp(name.data()) == nullptr) return;  // mode 0700
    t->root = name;
    t->owner = ::getpid();
    t->ports = w->config().ports_per_device;
    t->written.assign(global().devices.size() * static_cast<std::size_t>(t->ports) * kFileCount,
                      UINT64_MAX);
    const std::string probe = device_dir(*t, *global().devices.back());
    if (probe.size() >= sizeof(ibv_device::ibdev_path) || !build(*t)) {
      remove_tree(t->root);
      return;
    }
    for (DDevice* d : global().devices) {
      std::snprintf(d->dev.ibdev_path, sizeof d->dev.ibdev_path, "%s", device_dir(*t, *d).c_str());
      const std::string uverbs = t->root + "/class/infiniband_verbs/" + d->dev.dev_name;
      if (uverbs.size() < sizeof d->dev.dev_path) {
        std::snprintf(d->dev.dev_path, sizeof d->dev.dev_path, "%s", uverbs.c_str());
      }
    }
    rewrite_counters(*t);
    tree() = t.release();
    // Once per process image: in a child of fork() the parent's handler removes the child's
    // tree (the parent's is the parent's to remove).
    static std::once_flag at_exit;
    std::call_once(at_exit, [] {
      std::atexit([] {
        std::lock_guard<std::recursive_mutex> held(global().mu);
        if (Tree* made = tree(); made != nullptr && made->owner == ::getpid())
          remove_tree(made->root);
      });
    });
  } catch (...) {
    // No tree: the devices keep their /sys paths.
  }
}

const char* sysfs_root() noexcept {
  const Tree* t = tree();
  return t != nullptr ? t->root.c_str() : "/sys";
}

void refresh_sysfs() noexcept {
  Tree* t = tree();
  if (t == nullptr || t->owner != ::getpid()) return;
  const int saved = errno;  // the verb's
  rewrite_counters(*t);
  errno = saved;
}

int read_sysfs_file(const char* dir, const char* file, char* buf, std::size_t size) noexcept {
  if (dir == nullptr || file == nullptr || buf == nullptr) {
    errno = EINVAL;
    return -1;
  }
  try {
    auto held = lock_waiting();  // reading counters changes nothing
    if (held.refused()) {
      errno = EDEADLK;
      return -1;
    }
    std::string path = std::string(dir) + "/" + file;
    // Spell the path the way live_value() looks for it: no "//", no trailing '/'.
    path.erase(
        std::unique(path.begin(), path.end(), [](char a, char b) { return a == '/' && b == '/'; }),
        path.end());
    {
      std::uint64_t v = 0;
      if (world() != nullptr && live_value(path, v)) {
        char text[32];
        std::snprintf(text, sizeof text, "%" PRIu64, v);
        return answer(buf, size, text);
      }
    }
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      const ssize_t n = size > 0 ? ::read(fd, buf, size) : 0;
      const int err = errno;
      ::close(fd);
      if (n < 0) {
        errno = err;
        return -1;
      }
      std::size_t len = static_cast<std::size_t>(n);
      if (len == size && len > 0) --len;  // room for the terminator, as libibverbs leaves it
      if (len > 0 && buf[len - 1] == '\n') --len;
      if (size > 0) buf[len] = '\0';
      return static_cast<int>(len);
    }
    if (const char* text = attribute(dir, file)) return answer(buf, size, text);
  } catch (...) {
    errno = ENOMEM;
    return -1;
  }
  errno = ENOENT;
  return -1;
}

int read_device_file(const char* ibdev_path, std::size_t path_max, const char* file, char* buf,
                     std::size_t size) noexcept {
  const char* dir = nullptr;
  {
    auto held = lock_waiting();
    if (held.refused()) {
      errno = EDEADLK;
      return -1;
    }
    for (const DDevice* d : global().devices) {
      if (std::strncmp(ibdev_path, d->dev.ibdev_path,
                       std::min(path_max, sizeof d->dev.ibdev_path)) == 0) {
        dir = d->dev.ibdev_path;
      }
    }
  }
  if (dir == nullptr) {
    errno = ENOENT;
    return -1;
  }
  return read_sysfs_file(dir, file, buf, size);
}

}  // namespace verbsim::dropin
