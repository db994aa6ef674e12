// BM_QpMemory: what an idle RC QP costs in memory, and how long creating and destroying many
// of them takes.
//
// Each run creates `qps` RC QPs (max_send_wr = max_recv_wr = 1, one SGE each, no inline data)
// on one device of a world, all on one CQ, and, with connected:1, takes them to RTS in pairs
// connected to each other (QP 2k with QP 2k+1, loopback on the device). Global operator
// new/delete are replaced in this binary to count live heap bytes (malloc_usable_size: what the
// allocator really hands out, without its per-chunk header), so the figures do not depend on
// RSS or on what the allocator keeps cached.
//
// Counters:
//   bytes_per_qp        live heap bytes the QPs added, divided by their number, minus their
//                       queue entries: the QP object and its fixed state, including its share
//                       of per-device and per-CQ tables (QPN table, the CQ's QP list).
//   queue_bytes_per_qp  send and receive queue entries: slots x entry size (SendWqe + SGEs +
//                       inline room + an atomic's operands per SQ slot of an RC QP,
//                       RecvWqe + SGEs per RQ slot).
//   sizeof_qp           sizeof(sim::SimQp), the object alone (part of bytes_per_qp).
//   allocs_per_qp       heap allocations per QP (live after creation).
//   total_mib           live heap of the whole world with its QPs, in MiB.
//   create_ns_per_qp, destroy_ns_per_qp  wall time per QP of create (+ connect) and destroy.
#include <benchmark/benchmark.h>
#include <malloc.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <vector>

#include "transport/qp.hpp"  // SimQp, SendWqe, RecvWqe: object and queue entry sizes
#include "verbsim/sim/world.hpp"
#include "verbsim/verbsim.hpp"

namespace {

std::atomic<std::int64_t> g_live_bytes{0};
std::atomic<std::int64_t> g_live_allocs{0};

void* counted(void* p) {
  if (p == nullptr) throw std::bad_alloc();
  g_live_bytes.fetch_add(static_cast<std::int64_t>(malloc_usable_size(p)),
                         std::memory_order_relaxed);
  g_live_allocs.fetch_add(1, std::memory_order_relaxed);
  return p;
}

void uncounted(void* p) noexcept {
  if (p == nullptr) return;
  g_live_bytes.fetch_sub(static_cast<std::int64_t>(malloc_usable_size(p)),
                         std::memory_order_relaxed);
  g_live_allocs.fetch_sub(1, std::memory_order_relaxed);
  std::free(p);
}

std::size_t round_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }

}  // namespace

// The replaceable global allocation functions; the nothrow and array forms of libstdc++ call
// these.
void* operator new(std::size_t n) { return counted(std::malloc(n == 0 ? 1 : n)); }
void* operator new[](std::size_t n) { return counted(std::malloc(n == 0 ? 1 : n)); }
void* operator new(std::size_t n, std::align_val_t a) {
  const auto al = static_cast<std::size_t>(a);
  return counted(std::aligned_alloc(al, round_up(n == 0 ? 1 : n, al)));
}
void* operator new[](std::size_t n, std::align_val_t a) {
  const auto al = static_cast<std::size_t>(a);
  return counted(std::aligned_alloc(al, round_up(n == 0 ? 1 : n, al)));
}
void operator delete(void* p) noexcept { uncounted(p); }
void operator delete[](void* p) noexcept { uncounted(p); }
void operator delete(void* p, std::size_t) noexcept { uncounted(p); }
void operator delete[](void* p, std::size_t) noexcept { uncounted(p); }
void operator delete(void* p, std::align_val_t) noexcept { uncounted(p); }
void operator delete[](void* p, std::align_val_t) noexcept { uncounted(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { uncounted(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { uncounted(p); }

namespace verbsim {
namespace {

using Clock = std::chrono::steady_clock;

double ns_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
}

// Queue entry bytes of a QP, from the capabilities it was given (query(), not the rxe-style
// echo of cap()): slots are a power of two for the send queue, the given depth for the
// receive queue.
std::size_t queue_bytes(const QpCap& c) {
  std::size_t sq_slots = 1;
  while (sq_slots < c.max_send_wr) sq_slots <<= 1;
  const std::size_t inline_stride = round_up(c.max_inline_data, 8);
  return sq_slots * (sizeof(sim::SendWqe) + c.max_send_sge * sizeof(Sge) + inline_stride +
                     sizeof(sim::AtomicOperands)) +
         static_cast<std::size_t>(c.max_recv_wr) *
             (sizeof(sim::RecvWqe) + c.max_recv_sge * sizeof(Sge));
}

void BM_QpMemory(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const bool connected = state.range(1) != 0;
  double per_qp = 0, queue = 0, allocs = 0, total = 0, create_ns = 0, destroy_ns = 0;
  for (auto _ : state) {
    const std::int64_t bytes0 = g_live_bytes.load();
    auto world = std::make_unique<sim::World>(sim::Config{});
    auto ctx = world->open("sim0");
    auto pd = ctx->alloc_pd();
    auto cq = ctx->create_cq(1);
    QpInitAttr init;
    init.type = QpType::rc;
    init.send_cq = cq.get();
    init.recv_cq = cq.get();
    init.cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1};
    std::vector<std::unique_ptr<QueuePair>> qps;
    qps.reserve(n);
    const Gid gid = ctx->query_gid(1, 1);

    const std::int64_t before = g_live_bytes.load();
    const std::int64_t allocs_before = g_live_allocs.load();
    const auto t0 = Clock::now();
    for (std::size_t i = 0; i < n; ++i) qps.push_back(pd->create_qp(init));
    if (connected) {
      for (std::size_t i = 0; i + 1 < n; i += 2) {
        connect(*qps[i], 0, Endpoint{gid, qps[i + 1]->qp_num(), 0});
        connect(*qps[i + 1], 0, Endpoint{gid, qps[i]->qp_num(), 0});
      }
    }
    create_ns = ns_since(t0) / static_cast<double>(n);
    const std::int64_t after = g_live_bytes.load();

    const double added = static_cast<double>(after - before) / static_cast<double>(n);
    queue = static_cast<double>(queue_bytes(qps[0]->query(QpAttrMask::cap).cap));
    per_qp = added - queue;
    allocs = static_cast<double>(g_live_allocs.load() - allocs_before) / static_cast<double>(n);
    total = static_cast<double>(after - bytes0) / (1024.0 * 1024.0);

    const auto t1 = Clock::now();
    qps.clear();
    destroy_ns = ns_since(t1) / static_cast<double>(n);
  }
  state.counters["bytes_per_qp"] = per_qp;
  state.counters["queue_bytes_per_qp"] = queue;
  state.counters["sizeof_qp"] = static_cast<double>(sizeof(sim::SimQp));
  state.counters["allocs_per_qp"] = allocs;
  state.counters["total_mib"] = total;
  state.counters["create_ns_per_qp"] = create_ns;
  state.counters["destroy_ns_per_qp"] = destroy_ns;
  if (n == 100000 && total > 1024.0) state.SkipWithError("100,000 QPs take more than 1 GiB");
}
BENCHMARK(BM_QpMemory)
    ->ArgNames({"qps", "connected"})
    ->ArgsProduct({{1000, 10000, 100000}, {0, 1}})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace verbsim
