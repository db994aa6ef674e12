// Receive queues (of QPs and SRQs) and the SGE helpers of both queue kinds.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "resources/cores.hpp"
#include "verbsim/shared_receive_queue.hpp"
#include "verbsim/types.hpp"

namespace verbsim::sim {

inline std::uint64_t sges_length(std::span<const Sge> sges) noexcept {
  if (sges.size() == 1) return sges[0].length;
  std::uint64_t len = 0;
  for (const Sge& s : sges) len += s.length;
  return len;
}

// Copies a work request's SGEs into its queue slot; one SGE (the common case) without a
// call to memmove.
inline void copy_sges(std::span<const Sge> from, Sge* to) noexcept {
  if (from.size() == 1) {
    *to = from[0];
  } else {
    std::copy(from.begin(), from.end(), to);
  }
}

struct RecvWqe {
  std::uint64_t wr_id;
  std::uint32_t num_sge;
};

// A ring of receive WQEs with their SGEs, used by QPs and SRQs. One allocation holds the
// `slots` WQEs, then their SGEs (max_sge per slot).
struct RecvQueue {
  std::unique_ptr<std::byte[]> mem;  // the WQEs, then the SGEs
  Sge* sges = nullptr;
  std::uint32_t slots = 0;  // max(cap, 1) rounded up to a power of two
  std::uint32_t cap = 0;
  std::uint32_t max_sge = 0;
  std::uint32_t head = 0;  // next to consume
  std::uint32_t tail = 0;  // next to post
  std::uint32_t size() const noexcept { return tail - head; }
  void init(std::uint32_t capacity, std::uint32_t sge);
  RecvWqe& at(std::uint32_t i) noexcept {
    return reinterpret_cast<RecvWqe*>(mem.get())[i & (slots - 1)];
  }
  Sge* sge_at(std::uint32_t i) noexcept { return &sges[(i & (slots - 1)) * max_sge]; }
  void clear() noexcept { head = tail = 0; }
  // The same receives, oldest first, in a queue of `capacity`; capacity >= size().
  void resize(std::uint32_t capacity);
};

struct SrqCore {
  std::shared_ptr<PdCore> pd;
  SharedReceiveQueue* handle = nullptr;
  RecvQueue rq;
  std::uint32_t requested = 0;
  std::uint32_t limit = 0;  // armed while non-zero
  int users = 0;
  DevCore* dev = nullptr;
  void consumed();  // after a receive is taken: fires the limit event
};

// A send WQE: the head of its send queue slot (SimQp::sq_at), followed in the slot by its SGEs
// and its inline room. 48 bytes, so that a slot with one SGE and no inline room is 64 bytes:
// a batch of n WRs writes n + 1 lines (the ring is 16-byte aligned; aligning it to a line would
// cost about 30 bytes per QP, 496 in the worst case against the 512 target). What only some
// opcodes use shares room: UD has no remote buffer and keeps its destination there; an
// atomic's operands sit apart (SimQp::sq_atomic).
// A send WQE. A BIND_MW keeps the window's address in remote_addr, its new key in rkey, the
// MR's lkey in imm and the rest in its BindOperands; LOCAL_INV and SEND_WITH_INV keep the key

}  // namespace verbsim::sim
