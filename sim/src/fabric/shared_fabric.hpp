// One simulated fabric for several processes (VERBSIM_FABRIC=<name>): a file in /dev/shm that
// every process of the fabric maps. It holds a slot per process (its pid and the earliest
// virtual time at which it may still send anything), who owns each QP number, and one
// single-producer ring per ordered pair of processes for the packets between them.
//
// Each process runs a world of its own with the same devices (same config); a QP belongs to
// the process that made it. A packet for a QP of another process is handed over when it
// arrives (World::Impl::dispatch), with its payload: memory never leaves its process except in
// packets. Time is kept consistent conservatively: a process runs no event later than what
// every other process has promised not to undercut (Slot::bound).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <sys/types.h>
#include <vector>

namespace verbsim::sim {

class SharedFabric {
 public:
  static constexpr int kSlots = 8;          // processes at once
  static constexpr int kDevices = 16;       // devices a fabric's worlds may have
  static constexpr std::uint32_t kFirstQpn = 0x11;
  static constexpr std::uint32_t kQpns = 0x10000;  // QP numbers 17..65535, fabric-wide
  static constexpr std::size_t kRingBytes = std::size_t{4} << 20;
  static constexpr std::uint64_t kNever = UINT64_MAX;

  // Joins the fabric `name` (creates it, or replaces one whose processes are all gone).
  // Throws std::runtime_error naming the file on failure.
  SharedFabric(const std::string& name, int devices);
  ~SharedFabric();  // leaves; the last process out removes the file
  SharedFabric(const SharedFabric&) = delete;
  SharedFabric& operator=(const SharedFabric&) = delete;

  // Leaves the fabric now (the destructor, or the process's exit, does it otherwise): this
  // process's QPs become unreachable, and the last one out removes the file.
  void leave() noexcept;
  // In a child of fork(): the child is no member of the fabrics its parent joined. Its copy of
  // the mapping becomes private (what a copy of the parent's world writes there, no other
  // process sees), it drops its descriptor of the file (a lock taken through it would be the
  // parent's lock), and leaving is the parent's. Called for every joined fabric in the child.
  void detach_after_fork() noexcept;
  bool detached() const noexcept { return detached_; }
  int self() const noexcept { return self_; }
  // The process in `slot` (0: none), as it names itself (its own PID namespace's pid).
  pid_t pid_of(int slot) const noexcept {
    return header().slots[slot].pid.load(std::memory_order_acquire);
  }
  // What names the process of a slot for as long as it is in it, unique across the fabric's
  // processes whatever their PID namespaces (0: none): the CM's ids of other processes
  // (cm/remote.cpp) are named by it.
  std::uint64_t token_of(int slot) const noexcept {
    return slot >= 0 && slot < kSlots ? header().slots[slot].token.load(std::memory_order_acquire)
                                      : 0;
  }
  std::uint64_t token() const noexcept { return token_of(self_); }
  // The slots whose processes were found gone since the last call (a bit each).
  std::uint32_t take_newly_gone() noexcept {
    const std::uint32_t g = newly_gone_;
    newly_gone_ = 0;
    return g;
  }
  const std::string& path() const noexcept { return path_; }
  // The latest clock any other live process published (a joining world starts there).
  std::uint64_t clock_of_others() const noexcept;

  // QP numbers: unique in the fabric per device; the owner is this process.
  std::uint32_t take_qpn(int dev);  // 0: none left
  void give_back_qpn(int dev, std::uint32_t qpn) noexcept;
  // Which live process (not this one) owns `qpn` of `dev`: its slot, or -1 (this process, no
  // one, or a process that is gone).
  int remote_owner(int dev, std::uint32_t qpn) noexcept;

  // Time. `bound`: no packet this process sends from now on arrives before it, unless it
  // answers a parcel (which it does `lookahead` or more after the parcel's time).
  // `next`: the time of this process's next event (another process with nothing to run
  // lets its clock go that far, no farther: others_next()).
  void publish(std::uint64_t now, std::uint64_t bound, std::uint64_t next) noexcept;
  // The earliest next event of the other processes, as safe_time() last saw them.
  std::uint64_t others_next() const noexcept { return others_next_; }
  // The latest time this process may run events up to: the least, over the other processes,
  // of their bound and of the time of the first parcel waiting for them plus `lookahead`. (The
  // parcels are looked at before the bounds: a process publishes its bound before it takes
  // parcels off its rings, so none is missed.)
  std::uint64_t safe_time(std::uint64_t lookahead) noexcept;

  // Packets. A parcel is a header, whose first 8 bytes are its time of arrival, and `payload`
  // bytes; send() copies them into the ring to `slot` (waiting while it is full, dropping if
  // that process is gone). Times on one ring never decrease. drain() hands every parcel
  // waiting for this process to `f(const void* parcel, std::size_t bytes)`, then calls
  // `taken()` before it frees their room.
  void send(int slot, const void* header, std::size_t header_bytes, const void* payload,
            std::size_t payload_bytes) noexcept;
  // A parcel whose checksum fails is dropped on the way (`dropped()` counts them), as a NIC
  // drops a packet whose ICRC fails; a ring whose framing is broken is corrupt (corrupt()).
  template <class F, class G>
  void drain(F&& f, G&& taken) {
    if (left_) return;
    std::uint64_t heads[kSlots];
    bool any = false;
    const std::uint32_t used =
        header().used.load(std::memory_order_acquire) & kAllSlots & ~(1u << self_);
    for (int from = 0; from < kSlots; ++from) {
      heads[from] = 0;
      if ((used & 1u << from) == 0) continue;
      Ring& r = ring(from, self_);
      std::uint64_t head = r.head.load(std::memory_order_relaxed);
      const std::uint64_t tail = r.tail.load(std::memory_order_acquire);
      heads[from] = head;
      if (tail - head > kRingBytes || head % 8 != 0 || tail % 8 != 0) {
        corrupt_ring(from, "its head or tail");
        return;
      }
      while (head != tail) {
        const std::size_t at = head % kRingBytes;
        std::uint32_t size;
        std::uint32_t check;
        __builtin_memcpy(&size, r.data + at, sizeof size);
        __builtin_memcpy(&check, r.data + at + 4, sizeof check);
        if (size == kWrap) {
          head += kRingBytes - at;
          continue;
        }
        const std::uint64_t room = 8 + ((std::uint64_t{size} + 7u) & ~std::uint64_t{7});
        if (size < 8 || at + room > kRingBytes || room > tail - head) {
          corrupt_ring(from, "a parcel's size");
          return;
        }
        // Copied out before it is checked: what is checked is what is used.
        const std::uint8_t* body = copy_out(r.data + at + 8, size);
        if (checksum(body, size) == check) {
          f(static_cast<const void*>(body), std::size_t{size});
        } else {
          ++dropped_;
        }
        head += room;
      }
      any = any || head != heads[from];
      heads[from] = head;
    }
    if (!any) return;
    taken();
    for (int from = 0; from < kSlots; ++from) {
      if ((used & 1u << from) != 0) {
        ring(from, self_).head.store(heads[from], std::memory_order_release);
      }
    }
  }
  // Why this process found the fabric's file corrupt ("" if it did not): what another process
  // wrote there that no healthy one writes, or a file cut short. The world then leaves the
  // fabric (World::Impl::fabric_corrupt).
  const std::string& corrupt() noexcept;
  // What this process found wrong in what another wrote (a parcel it cannot be, say); the
  // first reason is kept.
  void set_corrupt(const std::string& why);
  // Parcels dropped for a failed checksum.
  std::uint64_t dropped() const noexcept { return dropped_; }
  // 32 bits over `n` bytes: what a ring's record carries of its body.
  static std::uint32_t checksum(const void* p, std::size_t n) noexcept;
  // Whether a parcel waits for this process.
  bool inbound() const noexcept;

  // The connection manager's ports, fabric-wide: an id (`node` of this process) that owns
  // `port` of address `ip` (or of any address: `any`) in a port space (`ud`: UDP, else TCP). Claiming
  // fails as the kernel's cma_check_port does when another process has the port:
  // EADDRNOTAVAIL where either address is any, EADDRINUSE for the same address (0: claimed;
  // ENOSPC: the table is full). Entries go with their process.
  using Ip = std::array<std::uint8_t, 16>;
  int claim_cm_port(std::uint32_t node, const Ip& ip, bool any, std::uint16_t port,
                    bool ud) noexcept;
  void set_cm_listening(std::uint32_t node) noexcept;
  void release_cm_port(std::uint32_t node) noexcept;
  // The process (not this one) whose id listens on `port` of `ip` (or of any address) in the
  // port space: its slot, or -1. Failing that, the live process that last had the port: a
  // server that closes a listener and opens the next on the same port gets a request that
  // arrives between the two (in wall time) in its own virtual time, where its world answers
  // it as the kernel would at that moment.
  int cm_listener(const Ip& ip, std::uint16_t port, bool ud) noexcept;
  // Whether this process had `port` (of `ip` or any address) and gave it up.
  bool released_cm_port(const Ip& ip, std::uint16_t port, bool ud) noexcept;
  // The largest payload a parcel may carry.
  static constexpr std::size_t max_payload() noexcept { return kRingBytes / 4; }

  // Where each part of the file is, for tests that write into it (tests/multiproc/corrupt.py).
  struct Layout {
    std::size_t file_bytes, slots, slot_bytes, next_qpn, owner, owner_bytes, cm_ports,
        cm_ports_bytes, rings, ring_bytes, ring_data;
  };
  static Layout layout() noexcept;

 private:
  static constexpr std::uint32_t kWrap = UINT32_MAX;  // the rest of the ring is unused
  static constexpr std::uint32_t kAllSlots = (1u << kSlots) - 1;
  // Times past this are no clock's (about 146 years of virtual time): a corrupt value.
  static constexpr std::uint64_t kMaxTime = std::uint64_t{1} << 62;
  void corrupt_ring(int from, const char* what);
  // The body of a parcel copied out of the ring into scratch_ (another process may write the
  // ring meanwhile; it must not change what is checked and used).
  const std::uint8_t* copy_out(const unsigned char* at, std::size_t n) {
    if (scratch_.size() < n) scratch_.resize(n);
    __builtin_memcpy(scratch_.data(), at, n);
    return scratch_.data();
  }
  struct alignas(64) Slot {
    std::atomic<pid_t> pid;
    std::atomic<std::uint64_t> token;  // token_of
    std::atomic<std::uint64_t> now;
    std::atomic<std::uint64_t> bound;
    std::atomic<std::uint64_t> next;
    std::atomic<std::uint64_t> pidns;  // its PID namespace (inode); pid is ours to look up where equal
  };
  static constexpr int kCmPorts = 256;
  static constexpr std::uint8_t kBound = 1, kListening = 2, kReleased = 3;
  struct CmPort {
    std::uint32_t owner;  // slot + 1, or 0: free
    std::uint32_t node;
    std::uint16_t port;
    std::uint8_t ud;
    std::uint8_t state;  // kBound, kListening, or kReleased (a port its process had)
    bool any;
    Ip ip;
  };
  struct Ring {
    alignas(64) std::atomic<std::uint64_t> head;  // consumer
    alignas(64) std::atomic<std::uint64_t> tail;  // producer
    alignas(64) unsigned char data[kRingBytes];
  };
  struct Header {
    std::uint64_t magic;
    std::uint32_t devices;
    std::atomic<std::uint32_t> live;  // a bit per slot with a process
    std::atomic<std::uint32_t> used;  // a bit per slot that ever had one (its rings may hold parcels)
    Slot slots[kSlots];
    std::atomic<std::uint32_t> next_qpn[kDevices];
    std::atomic<std::uint8_t> owner[kDevices][kQpns];  // slot + 1, or 0
    CmPort cm_ports[kCmPorts];                         // under the file's lock
  };
  static constexpr std::size_t kRingsAt = (sizeof(Header) + 4095) & ~std::size_t{4095};
  static constexpr std::size_t kFileBytes = kRingsAt + sizeof(Ring) * kSlots * kSlots;
  // Where each slot's liveness lock is: a byte per slot past the file's contents.
  static constexpr long kLockAt = static_cast<long>(kFileBytes);

  Header& header() const noexcept { return *static_cast<Header*>(base_); }
  Ring& ring(int from, int to) const noexcept {
    return reinterpret_cast<Ring*>(static_cast<unsigned char*>(base_) + kRingsAt)[from * kSlots + to];
  }
  // Whether another process holds the slot (its liveness lock: shared_fabric.cpp).
  bool slot_alive(int slot) noexcept;
  // Removes the fabrics of this user whose processes are all gone, but `keep` (a path).
  static void sweep_stale(const std::string& keep) noexcept;
  // The time of the first parcel on ring `from` -> `to`, or kNever.
  std::uint64_t first_parcel_time(int from, int to) const noexcept;
  void forget_slot(int slot) noexcept;  // a process gone: its QPs and rings (under the lock)

  std::string path_;
  int fd_ = -1;
  void* base_ = nullptr;
  int self_ = -1;
  int devices_ = 0;
  // Per other slot: the bound last seen, how many calls of safe_time saw it unchanged, and
  // since when (wall ns), to notice a process that stopped moving (it may be gone).
  std::uint64_t seen_bound_[kSlots] = {};
  std::uint64_t seen_at_[kSlots] = {};
  std::uint32_t still_[kSlots] = {};
  std::uint64_t still_since_[kSlots] = {};  // wall ns: when its bound was first seen still
  bool ran_[kSlots] = {};  // seen running (/proc) while still: slow, not stopped (runs())
  bool gone_[kSlots] = {};
  bool stalled_[kSlots] = {};  // alive, not moving for kPatienceNs: not waited for
  std::uint32_t newly_gone_ = 0;
  bool runs(int slot) noexcept;
  void* guarded_ = nullptr;  // its entry in the SIGBUS handler's table (shared_fabric.cpp)
  std::string corrupt_;
  std::uint64_t dropped_ = 0;
  std::vector<std::uint8_t> scratch_;
  bool left_ = false;
  bool detached_ = false;  // detach_after_fork()
  std::uint64_t others_next_ = kNever;
  struct Published {
    std::uint64_t now, bound, next;
  } published_{kNever, kNever, kNever};  // what publish() stored last (none yet: never, never)
};

}  // namespace verbsim::sim
