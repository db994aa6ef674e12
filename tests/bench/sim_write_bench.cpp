// BM_SimWrite against BM_Memcpy: how fast a 64 KiB RC RDMA WRITE moves data on the simulator,
// next to the memcpy that bounds it (target: the WRITE at >= 50 % of memcpy's bytes per second,
// both measured in the same run).
//
// BM_SimWrite: each iteration takes the next of `qps` connected QP pairs (round robin), posts
// 16 WRITEs of 64 KiB on it in one post_send call and polls the sender's CQ until their 16
// completions are in. Every WRITE is signaled, as in BM_SimSend; WRITEs without immediate
// data complete nothing on the receiving side.
// BM_Memcpy: one 64 KiB memcpy per iteration.
//
// Working set. Both copy between the same two 64 KiB buffers, over and over: on the
// simulator every WRITE of every QP reads one source MR (on sim0) and writes one destination
// MR (on sim1), so qps:64 changes the QP state touched, not the data. The buffers are
// allocated alike for both benchmarks (64 KiB each, page aligned). 128 KiB of data stays in
// the caches, so the ratio measures the simulator's overhead around its one copy per message,
// not memory bandwidth; a larger working set would slow both by the same memory traffic.
//
// Counters: bytes_per_second (SetBytesProcessed: payload bytes per CPU second); wr_per_s,
// WRITE WRs completed per CPU second. World, QPs and MRs are set up outside the timed loop.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <vector>

#include "await.hpp"
#include "verbsim/sim/world.hpp"
#include "verbsim/verbsim.hpp"

namespace verbsim {
namespace {

constexpr std::uint32_t kBatch = 16;
constexpr std::uint32_t kMsgBytes = 64 * 1024;
constexpr std::size_t kAlign = 4096;

// A page-aligned 64 KiB buffer, filled with `fill`.
struct Buffer {
  explicit Buffer(std::byte fill)
      : data(static_cast<std::byte*>(::operator new(kMsgBytes, std::align_val_t{kAlign}))) {
    std::memset(data.get(), static_cast<int>(fill), kMsgBytes);
  }
  struct Free {
    void operator()(std::byte* p) const noexcept { ::operator delete(p, std::align_val_t{kAlign}); }
  };
  std::unique_ptr<std::byte, Free> data;
};

void BM_Memcpy(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  Buffer src(std::byte{0x5a});
  Buffer dst(std::byte{0});
  std::byte* s = src.data.get();
  std::byte* d = dst.data.get();
  for (auto _ : state) {
    benchmark::DoNotOptimize(s);
    benchmark::DoNotOptimize(d);
    std::memcpy(d, s, bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(bytes));
}

// One device's side: a context, PD and CQ shared by `pairs` QPs, and one 64 KiB MR that all
// of them use.
struct Side {
  Side(sim::World& world, const char* device, int pairs, std::byte fill, Access access)
      : buf(fill) {
    ctx = world.open(device);
    pd = ctx->alloc_pd();
    cq = ctx->create_cq(4 * kBatch);
    mr = pd->reg_mr(buf.data.get(), kMsgBytes, access);
    QpInitAttr init;
    init.type = QpType::rc;
    init.send_cq = cq.get();
    init.recv_cq = cq.get();
    init.cap = {.max_send_wr = kBatch, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1};
    for (int i = 0; i < pairs; ++i) qps.push_back(pd->create_qp(init));
  }

  std::unique_ptr<Context> ctx;
  std::unique_ptr<ProtectionDomain> pd;
  std::unique_ptr<CompletionQueue> cq;
  Buffer buf;
  std::unique_ptr<MemoryRegion> mr;
  std::vector<std::unique_ptr<QueuePair>> qps;
};

// Not inlined, so that callgrind can collect it alone (--toggle-collect='*write_loop*').
[[gnu::noinline]] void write_loop(benchmark::State& state) {
  const int pairs = static_cast<int>(state.range(0));
  sim::World world(sim::Config{});  // strict profile, seed 1, sim0 and sim1, no faults
  Side tx(world, "sim0", pairs, std::byte{0x5a}, Access::local_write);
  Side rx(world, "sim1", pairs, std::byte{0}, Access::local_write | Access::remote_write);

  // One batch of WRITEs, built once and posted on every QP: all of them copy the source MR
  // into the destination MR. wr_id is the slot.
  const Sge sge = tx.mr->sge(0, kMsgBytes);
  std::vector<SendWr> writes(kBatch);
  for (std::uint32_t s = 0; s < kBatch; ++s) {
    writes[s].wr_id = s;
    writes[s].opcode = WrOpcode::rdma_write;
    writes[s].flags = SendFlags::signaled;
    writes[s].sg_list = {&sge, 1};
    writes[s].remote_addr = rx.mr->address();
    writes[s].rkey = rx.mr->rkey();
  }

  for (int q = 0; q < pairs; ++q) {
    const Endpoint a{tx.ctx->query_gid(1, 1), tx.qps[q]->qp_num(), 0};
    const Endpoint b{rx.ctx->query_gid(1, 1), rx.qps[q]->qp_num(), 0};
    connect(*tx.qps[q], a.psn, b);
    connect(*rx.qps[q], b.psn, a);
  }

  std::size_t q = 0;
  for (auto _ : state) {
    if (!tx.qps[q]->post_send(writes)) {
      state.SkipWithError("post_send failed");
      break;
    }
    if (!bench::await<kBatch>(world, *tx.cq, kBatch)) {
      state.SkipWithError("a batch did not complete successfully");
      break;
    }
    q = q + 1 == static_cast<std::size_t>(pairs) ? 0 : q + 1;
  }
  if (std::memcmp(tx.buf.data.get(), rx.buf.data.get(), kMsgBytes) != 0) {
    state.SkipWithError("the destination does not hold the source's bytes");
  }
  const auto wrs = static_cast<std::int64_t>(state.iterations()) * kBatch;
  state.SetBytesProcessed(wrs * kMsgBytes);
  state.counters["wr_per_s"] =
      benchmark::Counter(static_cast<double>(wrs), benchmark::Counter::kIsRate);
}
void BM_SimWrite(benchmark::State& state) { write_loop(state); }

BENCHMARK(BM_Memcpy)->ArgName("bytes")->Arg(kMsgBytes);
BENCHMARK(BM_SimWrite)->ArgName("qps")->Arg(1)->Arg(64);

}  // namespace
}  // namespace verbsim
