// The shared state of contexts, PDs, MRs, memory windows and completion channels: held by
// shared_ptr, so a handle dropped out of order leaves no dangling pointer behind.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>

#include "fabric/world_impl.hpp"
#include "resources/ids.hpp"
#include "verbsim/completion_queue.hpp"
#include "verbsim/context.hpp"
#include "verbsim/memory_window.hpp"

namespace verbsim::sim {

struct CtxCore {
  World::Impl* world;
  DevCore* dev;
  DeviceInfo info;
  std::deque<AsyncEvent> async;
  int async_efd = -1;
  WaitQueuePtr waiters;
  void raise(const AsyncEvent& e);
  // Drops the pending events that name `object` (a QP, CQ or SRQ being destroyed), as the
  // kernel does when a verbs object goes (ib_uverbs_release_uevent): a program never gets an
  // event for an object it destroyed.
  void forget_events_of(const void* object) noexcept;
  ~CtxCore();
};

struct PdCore {
  std::shared_ptr<CtxCore> ctx;
  std::uint32_t id = 0;
  int users = 0;  // MRs, QPs, SRQs, AHs
};

struct MrCore {
  std::shared_ptr<PdCore> pd;
  DevCore* dev;
  char* addr;
  std::size_t length;
  Access access;
  std::uint32_t key;
  // What turns an address through its keys (from its iova on) into the buffer's: addr - iova,
  // modulo 2^64 (0 for an MR addressed by its buffer's addresses).
  std::uint64_t to_host = 0;
  int windows = 0;  // memory windows bound to it: it cannot be deregistered meanwhile
};

// The buffer's address of `a`, an address through `mr`'s keys. Addresses outside its iova range
// land outside [addr, addr + length), so covers() checks either.
inline std::uint64_t host_address(const MrCore& mr, std::uint64_t a) noexcept {
  return a + mr.to_host;
}

// Does [addr, addr+len) lie within [base, base+size)?
inline bool spans(std::uint64_t base, std::uint64_t size, std::uint64_t addr,
                  std::uint64_t len) noexcept {
  return addr >= base && addr + len <= base + size && addr + len >= addr;
}

// Does `mr` cover [addr, addr+len) with every access bit of `need`? (The range test is spans',
// written out: calling spans here costs the responder 3 instructions per message.)
[[gnu::always_inline]] inline bool covers(const MrCore& mr, std::uint64_t addr, std::uint64_t len,
                                          Access need) noexcept {
  if (need != Access::none && !all(mr.access, need)) return false;
  const auto base = reinterpret_cast<std::uint64_t>(mr.addr);
  return addr >= base && addr + len <= base + mr.length && addr + len >= addr;
}

// A memory window. Type 1 is always valid (length 0: bound to nothing); type 2 is free until
// a BIND_MW binds it, and then serves only the QP that bound it, until it is invalidated.
struct MwCore {
  std::shared_ptr<PdCore> pd;
  DevCore* dev;
  MwType type;
  std::uint32_t key;          // the current rkey: a bind changes its low byte
  std::uint32_t mr_key = 0;   // the MR it is bound to (0: none)
  std::uint64_t addr = 0;     // where it starts, in its MR's addresses (from the MR's iova)
  std::uint64_t length = 0;
  Access access = Access::none;
  std::uint32_t qpn = 0;      // type 2: the QP that bound it
  bool bound = false;         // type 2: bound (valid), else free

  // The address of its first byte for requests through its key: 0 when zero-based.
  std::uint64_t base() const noexcept { return any(access, Access::zero_based) ? 0 : addr; }
};

inline MrCore* DevCore::mr_of(std::uint32_t key) const noexcept {
  MrCore* mr = mrs.find(key >> 8);
  return mr != nullptr && mr->key == key ? mr : nullptr;
}

inline MwCore* DevCore::window_of(std::uint32_t key) const noexcept {
  MwCore* mw = mws.find(key >> 8);
  return mw != nullptr && mw->key == key ? mw : nullptr;
}

// A work request's local SGEs are addressed as requests through the same keys are: from the
// MR's iova (rxe and mlx5: conformance ZeroBased.IovaAddresses*Sges). Rewrites the addresses
// of a WR's SGEs, copied into its queue slot, into buffer addresses when it is posted (an MR
// re-registered later leaves them as they are); nothing to do while the device has no MR with
// an iova. Inline data is copied from the buffer's addresses (the provider's memcpy).
inline void sges_to_host(const DevCore& dev, Sge* sges, std::size_t n) noexcept {
  if (dev.live_iova_mrs == 0) [[likely]] return;
  for (std::size_t i = 0; i < n; ++i) {
    if (const MrCore* mr = dev.mr_of(sges[i].lkey)) sges[i].addr = host_address(*mr, sges[i].addr);
  }
}

struct ChannelCore {
  std::shared_ptr<CtxCore> ctx;
  std::deque<CompletionQueue*> events;
  int efd = -1;
  WaitQueuePtr waiters;
  int users = 0;  // CQs attached
  // Drops the pending events of `cq`, being destroyed (as the kernel does): the fd stops polling
  // readable for them.
  void forget_events_of(const CompletionQueue* cq) noexcept;
  ~ChannelCore();
};

// The QPs using a CQ, in creation order. A CQ's QPs all come from its device's QPN counter, so
// creation order is QPN order: removal finds the QP by binary search and leaves a hole, and the
// holes are squeezed out once they are half the list. O(log n) per destroyed QP instead of the

}  // namespace verbsim::sim
