// BM_SimSend: what one 64-byte RC SEND costs on the simulator, end to end: post_send, the
// simulated wire (transmission, delivery into the receive buffer, the ACK) and the polls of both
// CQs, in batches of 16.
//
// Each iteration takes the next of `qps` connected QP pairs (round robin), posts 16 SENDs on it
// in one post_send call and polls until their 16 send and 16 receive completions are in. Every
// SEND is signaled: the simplest choice; signaling only the last of a batch would save the
// simulator 15 CQEs per batch. Each receiving QP keeps two batches (32) of receives posted and
// tops up by one batch (one post_recv call) after each batch it consumed.
//
// Counter wr_per_s: SEND WRs completed per second of CPU time (each with its receive).
// World, QPs and MRs are set up outside the timed loop.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "await.hpp"
#include "verbsim/sim/faults.hpp"
#include "verbsim/sim/world.hpp"
#include "verbsim/verbsim.hpp"

namespace verbsim {
namespace {

constexpr std::uint32_t kBatch = 16;
constexpr std::uint32_t kMsgBytes = 64;
constexpr std::uint32_t kRqDepth = 2 * kBatch;
constexpr Access kAccess = Access::local_write;

// One device's side: a context, PD and CQ shared by `pairs` QPs, and one MR holding every
// QP's `slots` message buffers.
struct Side {
  Side(sim::World& world, const char* device, int pairs, std::uint32_t slots) {
    ctx = world.open(device);
    pd = ctx->alloc_pd();
    cq = ctx->create_cq(4 * kBatch);
    buf.assign(static_cast<std::size_t>(pairs) * slots * kMsgBytes, std::byte{0x5a});
    mr = pd->reg_mr(buf.data(), buf.size(), kAccess);
    QpInitAttr init;
    init.type = QpType::rc;
    init.send_cq = cq.get();
    init.recv_cq = cq.get();
    init.cap = {
        .max_send_wr = kBatch, .max_recv_wr = kRqDepth, .max_send_sge = 1, .max_recv_sge = 1};
    for (int i = 0; i < pairs; ++i) qps.push_back(pd->create_qp(init));
    sges.resize(static_cast<std::size_t>(pairs) * slots);
    for (std::size_t s = 0; s < sges.size(); ++s) sges[s] = mr->sge(s * kMsgBytes, kMsgBytes);
  }

  std::unique_ptr<Context> ctx;
  std::unique_ptr<ProtectionDomain> pd;
  std::unique_ptr<CompletionQueue> cq;
  std::vector<std::byte> buf;
  std::unique_ptr<MemoryRegion> mr;
  std::vector<std::unique_ptr<QueuePair>> qps;
  std::vector<Sge> sges;  // slot s of QP q: sges[q * slots + s]
};

// One timed iteration: post `batch` on `tx_qp`, take its send and receive completions, and
// replace the receives it consumed with `refill`. Returns why it failed, or nullptr. A function
// of its own so that callgrind can count exactly the timed work (--toggle-collect='*one_batch*',
// tests/bench/sim-instructions.sh).
[[gnu::noinline]] const char* one_batch(sim::World& world, QueuePair& tx_qp, CompletionQueue& tx_cq,
                                        QueuePair& rx_qp, CompletionQueue& rx_cq,
                                        std::span<const SendWr> batch,
                                        std::span<const RecvWr> refill) {
  if (!tx_qp.post_send(batch)) return "post_send failed";
  if (!bench::await<kBatch>(world, tx_cq, kBatch) || !bench::await<kBatch>(world, rx_cq, kBatch)) {
    return "a batch did not complete successfully";
  }
  if (!rx_qp.post_recv(refill)) return "post_recv failed";
  return nullptr;
}

void send_loop(benchmark::State& state, const sim::Config& config) {
  const int pairs = static_cast<int>(state.range(0));
  sim::World world(config);
  Side tx(world, "sim0", pairs, kBatch);
  Side rx(world, "sim1", pairs, kRqDepth);

  // Work requests built once: a batch of SENDs per sending QP, two batches of receives per
  // receiving QP. wr_id is the slot.
  std::vector<SendWr> sends(tx.sges.size());
  for (std::size_t s = 0; s < sends.size(); ++s) {
    sends[s].wr_id = s % kBatch;
    sends[s].opcode = WrOpcode::send;
    sends[s].flags = SendFlags::signaled;
    sends[s].sg_list = {&tx.sges[s], 1};
  }
  std::vector<RecvWr> recvs(rx.sges.size());
  for (std::size_t s = 0; s < recvs.size(); ++s) recvs[s] = {s % kRqDepth, {&rx.sges[s], 1}};

  for (int q = 0; q < pairs; ++q) {
    const Endpoint a{tx.ctx->query_gid(1, 1), tx.qps[q]->qp_num(), 0};
    const Endpoint b{rx.ctx->query_gid(1, 1), rx.qps[q]->qp_num(), 0};
    connect(*tx.qps[q], a.psn, b);
    connect(*rx.qps[q], b.psn, a);
    const auto all = std::span(recvs).subspan(static_cast<std::size_t>(q) * kRqDepth, kRqDepth);
    if (!rx.qps[q]->post_recv(all)) {
      state.SkipWithError("post_recv failed during setup");
      return;
    }
  }

  std::vector<std::uint8_t> half(static_cast<std::size_t>(pairs), 0);  // next batch to refill
  std::size_t q = 0;
  for (auto _ : state) {
    const auto batch = std::span(sends).subspan(q * kBatch, kBatch);
    const auto refill = std::span(recvs).subspan((q * 2 + half[q]) * kBatch, kBatch);
    if (const char* error = one_batch(world, *tx.qps[q], *tx.cq, *rx.qps[q], *rx.cq, batch, refill)) {
      state.SkipWithError(error);
      break;
    }
    half[q] ^= 1;
    q = q + 1 == static_cast<std::size_t>(pairs) ? 0 : q + 1;
  }
  state.counters["wr_per_s"] = benchmark::Counter(static_cast<double>(state.iterations()) * kBatch,
                                                  benchmark::Counter::kIsRate);
}
void BM_SimSend(benchmark::State& state) {
  send_loop(state, sim::Config{});  // strict profile, seed 1, sim0 and sim1, no faults
}

// The same with a fault plan in force: every data-path verb is checked against a rule (none
// fires in practice) and every packet goes through the packet rules (one in a million dropped,
// which RC retries). Compare with BM_SimSend at the same qps: the cost of fault injection on.
void BM_SimSendUnderFaultPlan(benchmark::State& state) {
  sim::Config config;
  config.faults = sim::FaultPlan::parse(
      "post_send every=4000000000 errno=EIO; post_recv every=4000000000 errno=EIO;"
      "poll_cq every=4000000000 errno=EAGAIN; drop p=0.000001");
  send_loop(state, config);
}

// Up to 100,000 pairs (200,000 QPs, about 1 GiB with their buffers and WRs): setup takes a few
// seconds there, outside the timed loop (docs/PERFORMANCE.md, "Memory and scaling").
BENCHMARK(BM_SimSend)->ArgName("qps")->Arg(1)->Arg(64)->Arg(1024)->Arg(10000)->Arg(100000);
BENCHMARK(BM_SimSendUnderFaultPlan)->ArgName("qps")->Arg(64);

}  // namespace
}  // namespace verbsim
