// The drop-in's sysfs: a private directory tree per process where programs find what they read
// under /sys/class/infiniband/<dev> on a real system (the device's node_type and board_id, and
// its ports' counters: ports/N/counters/ as IB PMA counters, ports/N/hw_counters/ as rxe's),
// and ibv_read_sysfs_file, which answers those files live from the world.
//
// The tree is <dir>/verbsim-sysfs-<pid>-XXXXXX (mode 0700; dir is $XDG_RUNTIME_DIR, else
// /dev/shm, else $TMPDIR, else /tmp) with class/infiniband/<dev>/ under it: ibv_get_sysfs_path() returns its
// root and each device's ibdev_path names its directory. It is removed when the process that
// made it exits normally (not by a fork child, not when killed; a later process removes trees
// left by processes that are gone). Counter files are rewritten, only those whose value
// changed, after every control verb (ibv_query_port, ibv_modify_qp, ibv_query_qp, ibv_destroy_*,
// ...), and every 10 ms by the background progress thread (progress.hpp) while it runs; posts,
// polls and waits never write. docs/OBSERVABILITY.md, "Port counters".
#pragma once

#include <cstddef>

namespace verbsim::dropin {

// Makes the tree for the world's devices and points their ibdev_path at it; without a tree
// (no writable directory, a path too long) they keep /sys/class/infiniband/<dev>, and
// ibv_read_sysfs_file still answers for them. Once, with the lock held, after the devices.
void make_sysfs_tree() noexcept;

// The tree's root, or "/sys" without one.
const char* sysfs_root() noexcept;

// Whether a verb leaves the counter files current (state.hpp's with_errno).
enum class Refresh { yes, no };
// Rewrites the counter files whose values changed. Call with the lock held.
void refresh_sysfs() noexcept;

// ibv_read_sysfs_file: `dir`/`file` answered live when it is a port counter of a simulated
// device (under the tree or under /sys/class/infiniband/<dev>), else read from the file,
// else the device attributes libibverbs' tools read (board_id, node_type, ibdev). The length
// without the trailing newline, or -1 with errno set.
int read_sysfs_file(const char* dir, const char* file, char* buf, std::size_t size) noexcept;

// ibv_read_ibdev_sysfs_file: read_sysfs_file() of `file` in `ibdev_path` (at most `path_max`
// characters), if that names the directory of a simulated device; else -1 with ENOENT.
int read_device_file(const char* ibdev_path, std::size_t path_max, const char* file, char* buf,
                     std::size_t size) noexcept;

}  // namespace verbsim::dropin
