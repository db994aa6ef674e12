// The send queue's entries: a WQE, and the operands of atomics and binds kept beside it.
#pragma once

#include <cstdint>

#include "verbsim/types.hpp"

namespace verbsim::sim {

struct SendWqe {
  std::uint64_t wr_id;
  union {
    std::uint64_t remote_addr;  // RDMA, atomics
    struct {
      std::uint32_t remote_qpn;
      std::uint32_t remote_qkey;
    } ud;
  };
  union {
    std::uint32_t rkey;    // RDMA, atomics
    std::int32_t dst_dev;  // UD: resolved from the AH
  };
  std::uint32_t length;  // total bytes
  std::uint32_t num_sge;
  std::uint32_t imm;
  std::uint32_t psn;
  SendFlags flags;
  WrOpcode opcode;
  bool signaled;
  bool inlined;
  // Sent, and an MR its SGEs name was deregistered or re-registered before it arrived
  // (SimQp::mr_changed): on arrival it may not touch them.
  bool buffers_gone;
  // UD: the AH's traffic class and hop limit, for the network header.
  std::uint8_t tclass;
  std::uint8_t hop_limit;
};
static_assert(sizeof(SendWqe) == 48);

// The operands of an atomic WR, kept beside the send queue's slots rather than in them.
struct AtomicOperands {
  std::uint64_t compare_add;
  std::uint64_t swap;
};

// The rest of a BIND_MW, in the same place as an atomic's operands.
struct BindOperands {
  std::uint64_t length;
  std::uint32_t mw_key;  // the window's key when the bind was posted
  Access access;
};
static_assert(sizeof(BindOperands) == sizeof(AtomicOperands));

}  // namespace verbsim::sim
