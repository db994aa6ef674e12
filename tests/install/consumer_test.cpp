// An application's tests written with the installed test kit: a fixture that runs each test on
// every simulator profile and on libibverbs (skipped without a device), the connected pair, the
// matchers, hosts that run as fibers on the simulator and as threads on hardware, and a fault
// rule that names a QP.
// scripts/check-install.sh builds and runs it, then makes KitDemo.ADeliberateFailure fail and
// runs the command it prints (tests/install/failure-rerun.sh).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <verbsim/sim/hosts.hpp>
#include <verbsim/testing/backend_test.hpp>
#include <verbsim/testing/matchers.hpp>
#include <verbsim/testing/pair.hpp>

namespace {

using namespace verbsim;
using namespace verbsim::testing;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::SizeIs;

// Posts a signaled SEND of `bytes` from `from` as wr_id `id`.
PostResult send(ConnectedPair::End& from, std::uint64_t id, std::uint32_t bytes) {
  const Sge sge = from.sge(0, bytes);
  SendWr wr;
  wr.wr_id = id;
  wr.flags = SendFlags::signaled;
  wr.sg_list = {&sge, 1};
  return from.qp->post_send(wr);
}

PostResult receive(ConnectedPair::End& at, std::uint64_t id) {
  const Sge sge = at.sge(4096, 4096);
  return at.qp->post_recv(RecvWr{id, {&sge, 1}});
}

class App : public BackendTest {};

TEST_P(App, MessagesArriveInOrder) {
  ConnectedPair p = make_pair();
  for (std::uint64_t i = 1; i <= 4; ++i) ASSERT_THAT(receive(p.b, i), PostedAll());
  for (std::uint64_t i = 1; i <= 4; ++i) ASSERT_THAT(send(p.a, i, 256), PostedAll());
  const std::vector<WorkCompletion> sent = p.poll(p.a, 4);
  const std::vector<WorkCompletion> got = p.poll(p.b, 4);
  EXPECT_THAT(sent, SizeIs(4));
  EXPECT_THAT(sent, ::testing::Each(AllOf(IsSuccess(), HasOpcode(WcOpcode::send))));
  EXPECT_THAT(sent, CompletesInPostingOrder());
  EXPECT_THAT(got, ElementsAre(HasWrId(1), HasWrId(2), HasWrId(3), HasWrId(4)));
  EXPECT_THAT(got, ::testing::Each(AllOf(IsSuccess(), HasByteLen(256))));
}

// One batch larger than the send queue: the QP takes what fits and says "queue full" (ENOMEM
// on rxe and mlx5, whatever errno another provider picks) for the rest. How much fits differs:
// rxe reports the 4 asked for in cap() but makes room for 7.
TEST_P(App, AFullSendQueueSaysSo) {
  ConnectedPair p = make_pair({.cap = {4, 16, 1, 1, 0}});
  for (std::uint64_t i = 1; i <= 16; ++i) ASSERT_THAT(receive(p.b, i), PostedAll());
  const Sge sge = p.a.sge(0, 8);
  std::vector<SendWr> wrs(16);
  for (std::uint32_t i = 0; i < wrs.size(); ++i) {
    wrs[i].wr_id = 100 + i;
    wrs[i].flags = SendFlags::signaled;
    wrs[i].sg_list = {&sge, 1};
  }
  const PostResult r = p.a.qp->post_send(wrs);
  EXPECT_THAT(r, IsQueueFull());
  EXPECT_GE(r.posted, p.a.qp->cap().max_send_wr);
  EXPECT_LT(r.posted, wrs.size());
  EXPECT_THAT(p.poll(p.a, r.posted), AllOf(SizeIs(r.posted), ::testing::Each(IsSuccess())));
}

// Echo between two hosts: the same code as fibers on the simulator and threads on hardware.
TEST_P(App, TwoHostsEcho) {
  ConnectedPair p = make_pair();
  constexpr std::uint64_t kMessages = 12;  // fewer than the receive queue holds
  for (std::uint64_t i = 0; i < kMessages; ++i) {
    ASSERT_THAT(receive(p.a, 1000 + i), PostedAll());
    ASSERT_THAT(receive(p.b, 2000 + i), PostedAll());
  }
  std::vector<WorkCompletion> client_got;
  const auto wait_one = [&](ConnectedPair::End& e, WcOpcode opcode) {
    WorkCompletion wc[1];
    for (;;) {
      const PollResult r = e.cq->poll(wc);
      if (r.count == 1 && wc[0].opcode == opcode) return wc[0];
      if (r.count == 0) sim::pause(world(), std::chrono::microseconds(1));
    }
  };
  sim::run_hosts(world(), {{"server",
                            [&] {
                              for (std::uint64_t i = 0; i < kMessages; ++i) {
                                const WorkCompletion req = wait_one(p.b, WcOpcode::recv);
                                if (send(p.b, req.wr_id, req.byte_len).err != 0) return;
                              }
                            }},
                           {"client", [&] {
                              for (std::uint64_t i = 0; i < kMessages; ++i) {
                                if (send(p.a, i, 64).err != 0) return;
                                client_got.push_back(wait_one(p.a, WcOpcode::recv));
                              }
                            }}});
  ASSERT_THAT(client_got, SizeIs(kMessages));
  EXPECT_THAT(client_got, ::testing::Each(AllOf(IsSuccess(), HasByteLen(64))));
  EXPECT_THAT(client_got, CompletesInPostingOrder());
}

VERBSIM_BACKEND_SUITE(App);

// A fault rule aimed at a QP by the name the test gives it, not by its number: the world's own
// plan (VERBSIM_FAULTS's rules are appended to it, if any).
TEST(KitFaults, ARuleNamesTheQpTheTestNamed) {
  sim::Config config;
  config.faults = sim::FaultPlan::parse("post_send nth=1 errno=ENOMEM qp=client");
  sim::World world(config);
  ConnectedPair p(world);
  world.name(*p.a.qp, "client");
  world.name(*p.b.qp, "server");
  ASSERT_THAT(receive(p.b, 1), PostedAll());
  ASSERT_THAT(receive(p.a, 2), PostedAll());
  EXPECT_THAT(send(p.b, 10, 64), PostedAll()) << "the rule names the client only";
  EXPECT_THAT(send(p.a, 11, 64), IsQueueFull()) << "the client's first post_send fails";
  EXPECT_THAT(send(p.a, 12, 64), PostedAll());
  EXPECT_THAT(p.poll(p.a, 2), ::testing::UnorderedElementsAre(AllOf(IsSuccess(), HasWrId(2)),
                                                              AllOf(IsSuccess(), HasWrId(12))));
}

// Fails on purpose (with VERBSIM_KIT_DEMO_FAILURE set) after a seeded run under the fault plan
// of VERBSIM_FAULTS: its rerun command must reproduce the same digest.
TEST(KitDemo, ADeliberateFailure) {
  if (std::getenv("VERBSIM_KIT_DEMO_FAILURE") == nullptr) {
    GTEST_SKIP() << "fails on purpose only with VERBSIM_KIT_DEMO_FAILURE set";
  }
  sim::Config config = sim::Config::from_env();  // VERBSIM_FAULTS reaches the world
  config.seed = 11;
  sim::World world(config);
  ConnectedPair p(world);
  for (std::uint64_t i = 1; i <= 6; ++i) ASSERT_THAT(receive(p.b, i), PostedAll());
  for (std::uint64_t i = 1; i <= 6; ++i) ASSERT_THAT(send(p.a, i, 512), PostedAll());
  EXPECT_THAT(p.poll(p.a, 6), SizeIs(6));
  EXPECT_THAT(p.poll(p.b, 6), SizeIs(6));
  ADD_FAILURE() << "deliberate failure, digest " << world.digest_hex();
}

}  // namespace
