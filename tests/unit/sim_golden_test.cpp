// A fixed scenario whose digest is written down: the same seed must give the same history on
// every build type (Debug with sanitizers in CI, Release in the quick start) and every run.
// When a deliberate change to the simulator changes the history, update kGolden and say why
// in the commit.
#include <gtest/gtest.h>

#include <cstdio>

#include "../support/sim_pair.hpp"
#include "verbsim/sim/simulation.hpp"

namespace verbsim {
namespace {

constexpr std::uint64_t kGolden = 0xddbffd6d9c975545;

std::uint64_t golden_run() {
  sim::Config c;
  c.seed = 20261129;
  c.faults = sim::FaultPlan::parse("drop p=0.05; reorder p=0.2 by=2us; duplicate p=0.05");
  testing::SimPair p(c);
  sim::Simulation sim(p.world);
  sim.spawn("server", [&] {
    const Sge rs = p.b.sge(0, 256);
    WorkCompletion wc[8];
    int got = 0;
    for (int i = 0; i < 16; ++i) (void)p.b.qp->post_recv(RecvWr{static_cast<std::uint64_t>(i), {&rs, 1}});
    while (got < 40) {
      const PollResult r = p.b.cq->poll(wc);
      for (std::uint32_t i = 0; i < r.count; ++i) {
        (void)p.b.qp->post_recv(RecvWr{wc[i].wr_id, {&rs, 1}});
      }
      got += static_cast<int>(r.count);
    }
  });
  sim.spawn("client", [&] {
    const Sge ss = p.a.sge(0, 200);
    WorkCompletion wc[8];
    for (int i = 0; i < 40; ++i) {
      SendWr wr;
      wr.wr_id = static_cast<std::uint64_t>(i);
      wr.flags = SendFlags::signaled;
      wr.sg_list = {&ss, 1};
      while (p.a.qp->post_send(wr).error) (void)p.a.cq->poll(wc);
      sim::sleep_for(p.world, std::chrono::nanoseconds(300));
    }
  });
  sim.run();
  testing::drain(p.world, *p.a.cq);
  return p.world.digest();
}

TEST(Golden, DigestIsTheSameOnEveryBuildAndRun) {
  VERBSIM_SKIP_IF_SEED_OVERRIDDEN();
  const std::uint64_t first = golden_run();
  EXPECT_EQ(golden_run(), first);
  std::printf("golden digest: 0x%016llx\n", static_cast<unsigned long long>(first));
  EXPECT_EQ(first, kGolden) << "the simulator's history for a fixed seed changed";
}

}  // namespace
}  // namespace verbsim
