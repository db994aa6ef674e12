// Test support: a simulated world with two devices and one connected QP on each.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <optional>
#include <vector>

#include "verbsim/sim/world.hpp"
#include "verbsim/verbsim.hpp"

// For tests that compare the histories of seeds they choose: VERBSIM_SEED (as verbsim-swarm
// sets it) overrides every world's seed, so what they compare no longer differs.
#define VERBSIM_SKIP_IF_SEED_OVERRIDDEN()                                         \
  do {                                                                           \
    if (std::getenv("VERBSIM_SEED") != nullptr) {                                \
      GTEST_SKIP() << "VERBSIM_SEED overrides the seeds this test sets";         \
    }                                                                            \
  } while (false)

namespace verbsim::testing {

struct Side {
  std::unique_ptr<Context> ctx;
  std::unique_ptr<ProtectionDomain> pd;
  std::unique_ptr<CompletionQueue> cq;
  std::unique_ptr<QueuePair> qp;
  std::vector<char> buf;
  std::unique_ptr<MemoryRegion> mr;

  Sge sge(std::size_t offset, std::uint32_t length) const { return mr->sge(offset, length); }
};

struct PairOptions {
  QpType type = QpType::rc;
  QpCap cap{16, 16, 4, 4, 64};
  int cqe = 64;
  std::size_t buf_size = 64 * 1024;
  bool connect = true;
  ConnectOptions connect_options{};
};

inline Side make_side(sim::World& world, const char* dev, const PairOptions& o) {
  Side s;
  s.ctx = world.open(dev);
  s.pd = s.ctx->alloc_pd();
  s.cq = s.ctx->create_cq(o.cqe);
  QpInitAttr init;
  init.type = o.type;
  init.send_cq = s.cq.get();
  init.recv_cq = s.cq.get();
  init.cap = o.cap;
  s.qp = s.pd->create_qp(init);
  s.buf.assign(o.buf_size, 0);
  s.mr = s.pd->reg_mr(s.buf.data(), s.buf.size(),
                      Access::local_write | Access::remote_write | Access::remote_read |
                          Access::remote_atomic);
  return s;
}

// Work requests of one SGE.
inline SendWr send_wr(std::uint64_t wr_id, const Sge& sge, WrOpcode op = WrOpcode::send,
                      SendFlags flags = SendFlags::signaled) {
  SendWr wr;
  wr.wr_id = wr_id;
  wr.opcode = op;
  wr.flags = flags;
  wr.sg_list = {&sge, 1};
  return wr;
}

// An RDMA WRITE/READ of `local` to/from `remote_offset` in `remote`'s MR.
inline SendWr rdma_wr(std::uint64_t wr_id, WrOpcode op, const Sge& local,
                      const MemoryRegion& remote, std::size_t remote_offset,
                      SendFlags flags = SendFlags::signaled) {
  SendWr wr = send_wr(wr_id, local, op, flags);
  wr.remote_addr = remote.address(remote_offset);
  wr.rkey = remote.rkey();
  return wr;
}

inline RecvWr recv_wr(std::uint64_t wr_id, const Sge& sge) { return {wr_id, {&sge, 1}}; }

inline Endpoint endpoint_of(const Side& s, std::uint32_t psn) {
  return {s.ctx->query_gid(1, 1), s.qp->qp_num(), psn};
}

// Two QPs on sim0 and sim1 of one world, connected to each other.
struct SimPair {
  explicit SimPair(sim::Config config = {}, PairOptions o = {}) : world(config), options(o) {
    a = make_side(world, "sim0", o);
    b = make_side(world, "sim1", o);
    if (o.connect) connect_both();
  }
  void connect_both() {
    connect(*a.qp, 100, endpoint_of(b, 200), options.connect_options);
    connect(*b.qp, 200, endpoint_of(a, 100), options.connect_options);
  }

  sim::World world;
  PairOptions options;
  Side a;
  Side b;
};

// Addresses `wr`, a UD send of p.a, to p.b's QP (qkey 0x11111111); returns the address handle,
// which must outlive the post.
inline std::unique_ptr<AddressHandle> address_to_b(SimPair& p, SendWr& wr) {
  AhAttr attr;
  attr.is_global = true;
  attr.grh.dgid = p.b.ctx->query_gid(1, 1);
  attr.grh.sgid_index = 1;
  std::unique_ptr<AddressHandle> ah = p.a.pd->create_ah(attr);
  wr.ah = ah.get();
  wr.remote_qpn = p.b.qp->qp_num();
  wr.remote_qkey = 0x11111111;
  return ah;
}

// Polls `cq` until `n` completions arrived or the world has nothing left to do.
inline std::vector<WorkCompletion> poll_n(sim::World& world, CompletionQueue& cq, std::size_t n) {
  std::vector<WorkCompletion> out;
  WorkCompletion wc[16];
  while (out.size() < n) {
    const PollResult r = cq.poll(wc);
    EXPECT_FALSE(r.error());
    out.insert(out.end(), wc, wc + r.count);
    if (r.count == 0 && world.pending_events() == 0) break;
  }
  return out;
}

// Runs the world until nothing is pending, then takes every completion left in `cq`.
inline std::vector<WorkCompletion> drain(sim::World& world, CompletionQueue& cq) {
  world.run_until_idle();
  std::vector<WorkCompletion> out;
  WorkCompletion wc[16];
  for (;;) {
    const PollResult r = cq.poll(wc);
    if (r.count == 0) break;
    out.insert(out.end(), wc, wc + r.count);
  }
  return out;
}

}  // namespace verbsim::testing
