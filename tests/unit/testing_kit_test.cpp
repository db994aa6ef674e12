// The installed test kit (testing/): its matchers and their failure messages, the connected
// pair, the fixture over backends and profiles, and sim::run_hosts on fibers and on threads.
#include <gmock/gmock.h>
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "verbsim/sim/hosts.hpp"
#include "verbsim/sim/world.hpp"
#include "verbsim/testing/backend_test.hpp"
#include "verbsim/testing/matchers.hpp"
#include "verbsim/testing/pair.hpp"
#include "verbsim/verbsim.hpp"

namespace verbsim {
namespace {

using ::testing::AllOf;
using testing::CompletesInPostingOrder;
using ::testing::DescribeMatcher;
using ::testing::ElementsAre;
using testing::HasByteLen;
using testing::HasOpcode;
using testing::HasStatus;
using testing::HasWrId;
using testing::IsQueueFull;
using testing::IsSuccess;
using ::testing::Not;
using testing::Posted;
using testing::PostedAll;

WorkCompletion wc(std::uint64_t wr_id, WcStatus status = WcStatus::success,
                  WcOpcode opcode = WcOpcode::send, std::uint32_t len = 64, std::uint32_t qp = 17) {
  WorkCompletion c{};
  c.wr_id = wr_id;
  c.status = status;
  c.opcode = opcode;
  c.byte_len = len;
  c.qp_num = qp;
  return c;
}

template <class M, class T>
std::string explain(const M& m, const T& value) {
  ::testing::StringMatchResultListener listener;
  ::testing::Matcher<const T&>(m).MatchAndExplain(value, &listener);
  return listener.str();
}

TEST(KitMatchers, CompletionFieldsMatchAndDescribeThemselves) {
  const WorkCompletion ok = wc(5);
  EXPECT_THAT(ok, IsSuccess());
  EXPECT_THAT(ok, HasStatus(WcStatus::success));
  EXPECT_THAT(ok, HasOpcode(WcOpcode::send));
  EXPECT_THAT(ok, HasByteLen(64));
  EXPECT_THAT(ok, HasWrId(5));
  EXPECT_THAT(ok, Not(HasWrId(6)));
  EXPECT_EQ(DescribeMatcher<const WorkCompletion&>(IsSuccess()),
            "is a completion with status SUCCESS");
  EXPECT_EQ(DescribeMatcher<const WorkCompletion&>(HasOpcode(WcOpcode::rdma_read)),
            "is a completion with opcode RDMA_READ");
  EXPECT_EQ(DescribeMatcher<const WorkCompletion&>(HasByteLen(8), true),
            "is a completion whose byte_len is not 8");
}

TEST(KitMatchers, AFailedCompletionIsPrintedWhole) {
  const WorkCompletion bad = wc(7, WcStatus::retry_exc_err, WcOpcode::send, 0, 18);
  EXPECT_THAT(bad, Not(IsSuccess()));
  EXPECT_EQ(explain(IsSuccess(), bad), "which has status RETRY_EXC_ERR");
  EXPECT_EQ(explain(HasWrId(8), bad), "which has wr_id 7");
  EXPECT_EQ(::testing::PrintToString(wc(3, WcStatus::success, WcOpcode::recv, 32)),
            "{wr_id 3, SUCCESS, RECV, 32 B, qp 17}");
  EXPECT_NONFATAL_FAILURE(EXPECT_THAT(bad, IsSuccess()),
                          "Expected: is a completion with status SUCCESS\n"
                          "  Actual: {wr_id 7, RETRY_EXC_ERR, SEND, 0 B, qp 18} (of type "
                          "verbsim::WorkCompletion), which has status RETRY_EXC_ERR");
}

TEST(KitMatchers, PostingOrderIsPerQueue) {
  // qp 17's sends 1, 2, 4, its receives 1, 3, and qp 18's send 0, interleaved: in order.
  const std::vector<WorkCompletion> good = {wc(1),
                                            wc(1, WcStatus::success, WcOpcode::recv),
                                            wc(2),
                                            wc(0, WcStatus::success, WcOpcode::send, 64, 18),
                                            wc(3, WcStatus::success, WcOpcode::recv),
                                            wc(4)};
  EXPECT_THAT(good, CompletesInPostingOrder());
  const std::vector<WorkCompletion> bad = {wc(1), wc(3), wc(2, WcStatus::wr_flush_err)};
  EXPECT_THAT(bad, Not(CompletesInPostingOrder()));
  EXPECT_EQ(explain(CompletesInPostingOrder(), bad),
            "whose completion 2 {wr_id 2, WR_FLUSH_ERR, SEND, 64 B, qp 17} comes after "
            "{wr_id 3, SUCCESS, SEND, 64 B, qp 17} on the send queue of qp 17");
  EXPECT_EQ(DescribeMatcher<std::vector<WorkCompletion>>(CompletesInPostingOrder()),
            "completes each queue's work requests in posting order (increasing wr_id)");
}

TEST(KitMatchers, QueueFullIsThePortableCondition) {
  for (const int err : {ENOMEM, ENOSPC, EAGAIN}) {
    EXPECT_THAT((PostResult{3, err, "send queue full"}), IsQueueFull()) << err;
  }
  const PostResult invalid{0, EINVAL, "QP in RESET"};
  EXPECT_THAT(invalid, Not(IsQueueFull()));
  EXPECT_EQ(explain(IsQueueFull(), invalid),
            "which posted 0, then failed with errno 22 (Invalid argument): QP in RESET");
  EXPECT_EQ(explain(IsQueueFull(), PostResult{4, 0, ""}), "which posted 4 and succeeded");
  EXPECT_EQ(DescribeMatcher<const PostResult&>(IsQueueFull()),
            "failed with \"queue full\" (ENOMEM, ENOSPC or EAGAIN)");
}

TEST(KitMatchers, PostedCountsTheAcceptedRequests) {
  const PostResult all{4, 0, ""};
  const PostResult part{2, ENOMEM, "send queue full"};
  EXPECT_THAT(all, PostedAll());
  EXPECT_THAT(all, Posted(4));
  EXPECT_THAT(part, Not(PostedAll()));
  EXPECT_THAT(part, Posted(2));
  EXPECT_EQ(explain(PostedAll(), part),
            "which posted 2, then failed with errno 12 (Cannot allocate memory): send queue full");
  EXPECT_EQ(DescribeMatcher<const PostResult&>(Posted(3)), "posted 3 work request(s)");
  EXPECT_NONFATAL_FAILURE(EXPECT_THAT(part, Posted(3)),
                          "Expected: posted 3 work request(s)\n"
                          "  Actual: {posted 2, errno 12 (Cannot allocate memory): send queue "
                          "full} (of type verbsim::PostResult), which posted 2, then failed with "
                          "errno 12 (Cannot allocate memory): send queue full");
}

// Sends `bytes` from a to b as wr_id `id` and checks both completions.
void send_and_receive(testing::ConnectedPair& p, std::uint64_t id, std::uint32_t bytes) {
  const Sge rs = p.b.sge(0, 4096);
  ASSERT_THAT(p.b.qp->post_recv(RecvWr{id, {&rs, 1}}), PostedAll());
  std::memset(p.a.data(), static_cast<int>(id), bytes);
  const Sge ss = p.a.sge(0, bytes);
  SendWr wr;
  wr.wr_id = id;
  wr.flags = SendFlags::signaled;
  wr.sg_list = {&ss, 1};
  ASSERT_THAT(p.a.qp->post_send(wr), PostedAll());
  EXPECT_THAT(p.poll(p.a, 1),
              ElementsAre(AllOf(IsSuccess(), HasWrId(id), HasOpcode(WcOpcode::send))));
  EXPECT_THAT(p.poll(p.b, 1), ElementsAre(AllOf(IsSuccess(), HasWrId(id), HasOpcode(WcOpcode::recv),
                                                HasByteLen(bytes))));
  EXPECT_EQ(std::memcmp(p.a.data(), p.b.data(), bytes), 0);
}

TEST(KitPair, TwoDevicesOfOneWorldInRts) {
  sim::World world(sim::Config{});
  testing::ConnectedPair p(world);
  EXPECT_EQ(p.world(), &world);
  EXPECT_EQ(p.a.ctx->info().name, "sim0");
  EXPECT_EQ(p.b.ctx->info().name, "sim1");
  EXPECT_EQ(p.a.qp->state(), QpState::rts);
  EXPECT_EQ(p.b.qp->state(), QpState::rts);
  EXPECT_EQ(p.a.gid_index, 1);
  send_and_receive(p, 1, 64);
  send_and_receive(p, 2, 3000);
}

TEST(KitPair, BothEndsOnOneDevice) {
  sim::World world(sim::Config{});
  testing::ConnectedPair p(world, {.device_a = "sim1", .device_b = "sim1"});
  EXPECT_EQ(p.a.ctx->info().name, "sim1");
  EXPECT_EQ(p.b.ctx->info().name, "sim1");
  send_and_receive(p, 9, 100);
}

// The pair's two ends as hosts: the server echoes three messages, the client sends them and
// checks the replies; fibers of one world with its virtual clock.
TEST(KitHosts, FibersOnTheSimulator) {
  sim::World world(sim::Config{});
  testing::ConnectedPair p(world);
  std::vector<std::uint64_t> order;
  const auto receive = [&](testing::ConnectedPair::End& e) {
    WorkCompletion c[1];
    for (;;) {
      const PollResult r = e.cq->poll(c);
      if (r.count == 1) return c[0];
      sim::pause(&world, std::chrono::microseconds(1));
    }
  };
  const auto send = [](testing::ConnectedPair::End& e, std::uint64_t id) {
    const Sge s = e.sge(0, 16);
    SendWr wr;
    wr.wr_id = id;
    wr.sg_list = {&s, 1};  // unsignaled
    ASSERT_THAT(e.qp->post_send(wr), PostedAll());
  };
  const Sge rb = p.b.sge(1024, 16);
  const Sge ra = p.a.sge(1024, 16);
  for (std::uint64_t i = 1; i <= 3; ++i) {
    ASSERT_THAT(p.b.qp->post_recv(RecvWr{i, {&rb, 1}}), PostedAll());
    ASSERT_THAT(p.a.qp->post_recv(RecvWr{100 + i, {&ra, 1}}), PostedAll());
  }
  const std::uint64_t start = world.now();
  sim::run_hosts(&world, {{"server",
                           [&] {
                             for (int i = 0; i < 3; ++i) {
                               const WorkCompletion c = receive(p.b);
                               order.push_back(c.wr_id);
                               send(p.b, 200 + c.wr_id);
                             }
                           }},
                          {"client", [&] {
                             for (std::uint64_t i = 1; i <= 3; ++i) {
                               send(p.a, i);
                               order.push_back(receive(p.a).wr_id);
                               sim::pause(&world, std::chrono::microseconds(10));
                             }
                           }}});
  EXPECT_EQ(order, (std::vector<std::uint64_t>{1, 101, 2, 102, 3, 103}));
  EXPECT_GE(world.now() - start, 30'000u);  // the client's three 10 us pauses
}

TEST(KitHosts, ThreadsWithoutAWorldRunEveryHostAndRethrow) {
  std::atomic<int> ran{0};
  sim::run_hosts(nullptr, {{"a", [&] { ++ran; }}, {"b", [&] { ++ran; }}, {"c", [&] { ++ran; }}});
  EXPECT_EQ(ran.load(), 3);
  EXPECT_THROW(sim::run_hosts(nullptr, {{"a", [&] { ++ran; }},
                                        {"b", [] { throw std::runtime_error("host b"); }}}),
               std::runtime_error);
  EXPECT_EQ(ran.load(), 4);  // a ran to its end before the error came back
}

// The fixture: one body on every profile and on libibverbs (skipped here without a device).
class KitBackend : public testing::BackendTest {};

TEST_P(KitBackend, APairSendsOnEveryTarget) {
  testing::ConnectedPair p = make_pair();
  EXPECT_EQ(p.world(), world());
  if (on_sim()) {
    EXPECT_EQ(world()->config().profile, *profile());
    EXPECT_EQ(world()->devices().size(), 2u);
  }
  send_and_receive(p, 1, 512);
}

TEST_P(KitBackend, PassTimeMovesVirtualTime) {
  if (!on_sim()) GTEST_SKIP() << "virtual time only";
  const std::uint64_t t = world()->now();
  pass_time(std::chrono::milliseconds(3));
  EXPECT_EQ(world()->now(), t + 3'000'000);
}

VERBSIM_BACKEND_SUITE(KitBackend);

}  // namespace
}  // namespace verbsim
