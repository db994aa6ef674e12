// Work queue and CQ depths: full at exactly the reported capacity, per profile (SEMANTICS.md rows
// a, b and c), when slots free up, and the ENOMEM/EINVAL causes of a refused post.
#include <gtest/gtest.h>

#include <cerrno>
#include <string>
#include <vector>

#include "../support/sim_checks.hpp"

namespace verbsim {
namespace {

using sim::Profile;
using testing::Ledger;
using testing::PairOptions;
using testing::ProfileTest;
using testing::recv_wr;
using testing::send_wr;
using testing::SimPair;
using testing::throws_verb_error;

PairOptions small_queues(QpCap cap = QpCap{4, 4, 1, 1, 0}) {
  PairOptions o;
  o.cap = cap;
  o.cqe = 256;
  return o;
}

// An RDMA WRITE of 8 bytes to the peer's buffer: fills the send queue without needing receives.
SendWr write_wr(const SimPair& p, std::uint64_t id, const Sge& local,
                SendFlags flags = SendFlags::signaled) {
  return testing::rdma_wr(id, WrOpcode::rdma_write, local, *p.b.mr, 0, flags);
}

class QueueDepth : public ProfileTest {
 protected:
  // rxe gives 2^n - 1 slots and its create call echoes the request; hardware rounds SQ/RQ
  // depths up to a power of two and says so.
  std::uint32_t wq_depth_for_4() const { return is(Profile::rxe) ? 7 : 4; }
  // A send WR over the QP's SGE or inline limits: ENOMEM from libmlx5, EINVAL from librxe's
  // validate_send_wr.
  int limit_errno() const { return is(Profile::rxe) ? EINVAL : ENOMEM; }
};

TEST_P(QueueDepth, SendQueueIsFullAtExactlyItsReportedDepth) {
  SimPair p(config(), small_queues());
  QueuePair& qp = *p.a.qp;
  EXPECT_EQ(qp.requested_cap().max_send_wr, 4u);
  EXPECT_EQ(qp.cap().max_send_wr, 4u) << "rxe's create echoes the request; mlx5 says 4 too";
  EXPECT_EQ(qp.query().cap.max_send_wr, wq_depth_for_4());
  Ledger led;
  const Sge ss = p.a.sge(0, 8);
  std::uint64_t id = 1;
  for (; id <= wq_depth_for_4(); ++id) {
    const PostResult r = led.post_send(qp, write_wr(p, id, ss));
    ASSERT_FALSE(r.error()) << "post " << id << ": " << r.reason;
  }
  const PostResult full = led.post_send(qp, write_wr(p, id, ss));
  EXPECT_EQ(full.error(), errno_code(ENOMEM));
  EXPECT_EQ(full.error(), Condition::queue_full);
  EXPECT_EQ(full.posted, 0u);
  EXPECT_STREQ(full.reason, "send queue full");
  const auto wcs = led.poll_n(p.world, *p.a.cq, wq_depth_for_4());
  ASSERT_EQ(wcs.size(), wq_depth_for_4());
  for (std::size_t i = 0; i < wcs.size(); ++i) {
    EXPECT_EQ(wcs[i].wr_id, i + 1);
    EXPECT_EQ(wcs[i].status, WcStatus::success);
  }
  led.drain(p.world, *p.b.cq);
  EXPECT_TRUE(led.balanced());
}

TEST_P(QueueDepth, AChainLongerThanTheQueueStopsAtTheFirstWrThatDoesNotFit) {
  SimPair p(config(), small_queues());
  const Sge ss = p.a.sge(0, 8);
  std::vector<SendWr> chain;
  for (std::uint64_t id = 1; id <= 10; ++id) chain.push_back(write_wr(p, id, ss));
  Ledger led;
  const PostResult r = led.post_send(*p.a.qp, chain);
  EXPECT_EQ(r.error(), errno_code(ENOMEM));
  EXPECT_EQ(r.posted, wq_depth_for_4()) << "bad_wr is the first WR that did not fit";
  const auto wcs = led.poll_n(p.world, *p.a.cq, r.posted);
  EXPECT_EQ(wcs.size(), r.posted);
  EXPECT_TRUE(led.balanced());
}

// Hardware frees a send slot when its completion is polled; rxe when the WR completes. An
// application that never polls its send CQ hits ENOMEM on hardware only.
TEST_P(QueueDepth, SendSlotsFreeOnPollOnHardwareAndOnCompletionOnRxe) {
  SimPair p(config(), small_queues());
  const std::uint32_t depth = wq_depth_for_4();
  Ledger led;
  const Sge ss = p.a.sge(0, 8);
  std::uint64_t id = 1;
  for (; id <= depth; ++id) ASSERT_TRUE(led.post_send(*p.a.qp, write_wr(p, id, ss)));
  testing::run_idle(p.world);  // every send has completed, none has been polled
  const PostResult r = led.post_send(*p.a.qp, write_wr(p, id, ss));
  if (is(Profile::rxe)) {
    EXPECT_FALSE(r.error()) << r.reason;
  } else {
    EXPECT_EQ(r.error(), errno_code(ENOMEM));
    WorkCompletion wc;
    ASSERT_EQ(p.a.cq->poll({&wc, 1}).count, 1u);  // one polled completion frees one slot
    led.record({&wc, 1});
    EXPECT_EQ(wc.wr_id, 1u);
    EXPECT_TRUE(led.post_send(*p.a.qp, write_wr(p, id, ss)));
    EXPECT_EQ(led.post_send(*p.a.qp, write_wr(p, id + 1, ss)).error(), errno_code(ENOMEM));
  }
  led.drain(p.world, *p.a.cq);
  led.drain(p.world, *p.b.cq);
  EXPECT_TRUE(led.balanced());
}

// A polled completion frees its slot and those of the unsignaled WRs before it.
TEST_P(QueueDepth, PollingASignaledSendFreesTheUnsignaledOnesBeforeIt) {
  SimPair p(config(), small_queues());
  const std::uint32_t depth = wq_depth_for_4();
  Ledger led;
  const Sge ss = p.a.sge(0, 8);
  for (std::uint64_t id = 1; id < depth; ++id) {
    ASSERT_TRUE(led.post_send(*p.a.qp, write_wr(p, id, ss, SendFlags::none)));
  }
  ASSERT_TRUE(led.post_send(*p.a.qp, write_wr(p, depth, ss)));
  const auto wcs = led.poll_n(p.world, *p.a.cq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, depth);
  WorkCompletion extra[4];
  EXPECT_EQ(p.a.cq->poll(extra).count, 0u) << "unsignaled successes leave no completion";
  for (std::uint64_t id = 100; id < 100 + depth; ++id) {
    const PostResult r = led.post_send(*p.a.qp, write_wr(p, id, ss));
    ASSERT_FALSE(r.error()) << "post " << id << ": " << r.reason;
  }
  EXPECT_EQ(led.poll_n(p.world, *p.a.cq, depth).size(), depth);
  led.drain(p.world, *p.b.cq);
  EXPECT_TRUE(led.balanced());
}

TEST_P(QueueDepth, ReceiveQueueIsFullAtExactlyItsReportedDepth) {
  SimPair p(config(), small_queues());
  QueuePair& qp = *p.b.qp;
  EXPECT_EQ(qp.cap().max_recv_wr, 4u);
  EXPECT_EQ(qp.query().cap.max_recv_wr, wq_depth_for_4());
  const Sge rs = p.b.sge(0, 64);
  std::vector<RecvWr> chain;
  for (std::uint64_t id = 1; id <= 10; ++id) chain.push_back(recv_wr(id, rs));
  Ledger led;
  const PostResult r = led.post_recv(qp, chain);
  EXPECT_EQ(r.error(), errno_code(ENOMEM));
  EXPECT_EQ(r.error(), Condition::queue_full);
  EXPECT_EQ(r.posted, wq_depth_for_4());
  EXPECT_STREQ(r.reason, "receive queue full");
  const PostResult one_more = led.post_recv(qp, recv_wr(11, rs));
  EXPECT_EQ(one_more.error(), errno_code(ENOMEM));
  EXPECT_EQ(one_more.posted, 0u);
  // Receives free their slot as soon as they are consumed.
  const Sge ss = p.a.sge(0, 8);
  ASSERT_TRUE(led.post_send(*p.a.qp, send_wr(100, ss)));
  ASSERT_EQ(led.poll_n(p.world, *p.b.cq, 1).size(), 1u);
  EXPECT_TRUE(led.post_recv(qp, recv_wr(12, rs)));
  testing::move_to(qp, QpState::err);
  led.drain(p.world, *p.b.cq);
  led.drain(p.world, *p.a.cq);
  EXPECT_TRUE(led.balanced());
}

TEST_P(QueueDepth, SrqIsFullAtExactlyItsReportedDepth) {
  SimPair p(config(), small_queues());
  auto srq = p.b.pd->create_srq(SrqInitAttr{4, 1, 0});
  EXPECT_EQ(srq->query().max_wr, 7u) << "SRQs are 2^n - 1 deep on rxe and mlx5";
  EXPECT_EQ(srq->query().max_sge, 1u);
  const Sge rs = p.b.sge(0, 64);
  std::vector<RecvWr> chain;
  for (std::uint64_t id = 1; id <= 10; ++id) chain.push_back(recv_wr(id, rs));
  const PostResult r = srq->post_recv(chain);
  EXPECT_EQ(r.error(), errno_code(ENOMEM));
  EXPECT_EQ(r.posted, 7u);
  EXPECT_STREQ(r.reason, "shared receive queue full");
  const Sge two[2] = {p.b.sge(0, 8), p.b.sge(8, 8)};
  const PostResult sges = srq->post_recv(RecvWr{20, {two, 2}});
  EXPECT_EQ(sges.error(), errno_code(EINVAL)) << "too many SGEs on a receive is EINVAL";
}

TEST_P(QueueDepth, TooManySgesOnSendIsEnomemOnHardwareEinvalOnRxeAndEinvalOnReceive) {
  SimPair p(config(), small_queues(QpCap{4, 4, 2, 2, 0}));
  const std::uint32_t send_sge = p.a.qp->query().cap.max_send_sge;
  const std::uint32_t recv_sge = p.b.qp->query().cap.max_recv_sge;
  EXPECT_EQ(send_sge, 2u);
  EXPECT_EQ(recv_sge, 2u);
  std::vector<Sge> sges;
  for (std::uint32_t i = 0; i <= std::max(send_sge, recv_sge); ++i)
    sges.push_back(p.a.sge(i * 8, 8));
  const Sge one = p.a.sge(0, 8);
  SendWr ok = send_wr(1, one);
  SendWr fat = send_wr(2, one);
  fat.sg_list = {sges.data(), send_sge + 1};
  const SendWr chain[2] = {ok, fat};
  Ledger led;
  const PostResult s = led.post_send(*p.a.qp, chain);
  EXPECT_EQ(s.error(), errno_code(limit_errno()));
  EXPECT_EQ(s.posted, 1u);
  EXPECT_STREQ(s.reason, "too many SGEs");

  std::vector<Sge> rsges;
  for (std::uint32_t i = 0; i <= recv_sge; ++i) rsges.push_back(p.b.sge(i * 8, 8));
  const RecvWr rchain[2] = {RecvWr{11, {rsges.data(), recv_sge}},
                            RecvWr{12, {rsges.data(), recv_sge + 1}}};
  const PostResult r = led.post_recv(*p.b.qp, rchain);
  EXPECT_EQ(r.error(), errno_code(EINVAL));
  EXPECT_EQ(r.posted, 1u);
  EXPECT_STREQ(r.reason, "too many SGEs");
  EXPECT_EQ(led.poll_n(p.world, *p.b.cq, 1).size(), 1u);
  EXPECT_EQ(led.poll_n(p.world, *p.a.cq, 1).size(), 1u);
  EXPECT_TRUE(led.balanced());
}

TEST_P(QueueDepth, InlineDataLargerThanMaxInlineIsEnomemOnHardwareEinvalOnRxe) {
  SimPair p(config(), small_queues(QpCap{4, 4, 1, 1, 0}));
  // Asking for no inline data: rxe still gives 16 bytes, hardware none.
  const std::uint32_t room = p.a.qp->query().cap.max_inline_data;
  EXPECT_EQ(room, is(Profile::rxe) ? 16u : 0u);
  Ledger led;
  if (room > 0) {
    const Sge fits = p.a.sge(0, room);
    ASSERT_TRUE(
        led.post_send(*p.a.qp, write_wr(p, 1, fits, SendFlags::signaled | SendFlags::inline_data)));
  }
  const Sge big = p.a.sge(0, room + 1);
  const PostResult r =
      led.post_send(*p.a.qp, write_wr(p, 2, big, SendFlags::signaled | SendFlags::inline_data));
  EXPECT_EQ(r.error(), errno_code(limit_errno()));
  EXPECT_EQ(r.posted, 0u);
  EXPECT_STREQ(r.reason, "inline data larger than max_inline_data");

  SimPair q(config(), small_queues(QpCap{4, 4, 1, 1, 100}));
  const std::uint32_t asked = q.a.qp->query().cap.max_inline_data;
  EXPECT_GE(asked, 100u);
  const Sge too_big = q.a.sge(0, asked + 1);
  EXPECT_EQ(q.a.qp->post_send(send_wr(3, too_big, WrOpcode::send, SendFlags::inline_data)).error(),
            errno_code(limit_errno()));
  led.drain(p.world, *p.a.cq);
  led.drain(p.world, *p.b.cq);
  EXPECT_TRUE(led.balanced());
}

TEST_P(QueueDepth, CqDepthRoundsUpTo2nMinus1) {
  sim::World world(config());
  auto ctx = world.open("sim0");
  for (const auto& [asked, given] :
       std::vector<std::pair<int, int>>{{1, 1}, {4, 7}, {7, 7}, {8, 15}, {100, 127}}) {
    auto cq = ctx->create_cq(asked);
    EXPECT_EQ(cq->cqe(), given) << "cqe=" << asked;
    EXPECT_EQ(cq->requested_cqe(), asked);
  }
  const int max_cqe = ctx->query_device().max_cqe;
  EXPECT_EQ(max_cqe, is(Profile::rxe) ? 32767 : 4194303);
  EXPECT_TRUE(throws_verb_error([&] { (void)ctx->create_cq(0); }, "ibv_create_cq", EINVAL));
  EXPECT_TRUE(
      throws_verb_error([&] { (void)ctx->create_cq(max_cqe + 1); }, "ibv_create_cq", EINVAL));
}

TEST_P(QueueDepth, CreateBeyondTheDeviceLimitsIsEinval) {
  sim::World world(config());
  auto ctx = world.open("sim0");
  auto pd = ctx->alloc_pd();
  auto cq = ctx->create_cq(16);
  const DeviceAttr dev = ctx->query_device();
  EXPECT_EQ(dev.max_qp_wr, is(Profile::rxe) ? 1048576 : 32768);
  EXPECT_EQ(dev.max_sge, is(Profile::rxe) ? 32 : 30);
  auto attempt = [&](QpCap cap, CompletionQueue* scq) {
    QpInitAttr init;
    init.send_cq = scq;
    init.recv_cq = cq.get();
    init.cap = cap;
    return throws_verb_error([&] { (void)pd->create_qp(init); }, "ibv_create_qp", EINVAL);
  };
  const auto max_wr = static_cast<std::uint32_t>(dev.max_qp_wr);
  const auto max_sge = static_cast<std::uint32_t>(dev.max_sge);
  EXPECT_TRUE(attempt(QpCap{max_wr + 1, 4, 1, 1, 0}, cq.get()));
  EXPECT_TRUE(attempt(QpCap{4, max_wr + 1, 1, 1, 0}, cq.get()));
  EXPECT_TRUE(attempt(QpCap{4, 4, max_sge + 1, 1, 0}, cq.get()));
  EXPECT_TRUE(attempt(QpCap{4, 4, 1, max_sge + 1, 0}, cq.get()));
  EXPECT_TRUE(attempt(QpCap{4, 4, 1, 1, 1u << 20}, cq.get()));
  EXPECT_TRUE(attempt(QpCap{4, 4, 1, 1, 0}, nullptr));
  EXPECT_TRUE(throws_verb_error(
      [&] {
        (void)pd->create_srq(SrqInitAttr{max_wr + 1, 1, 0});
      },
      "ibv_create_srq", EINVAL));
  EXPECT_TRUE(throws_verb_error(
      [&] {
        (void)pd->create_srq(SrqInitAttr{0, 1, 0});
      },
      "ibv_create_srq", EINVAL));
  // At the limits it works.
  QpInitAttr init;
  init.send_cq = cq.get();
  init.recv_cq = cq.get();
  init.cap = QpCap{4, 4, max_sge, max_sge, 0};
  auto qp = pd->create_qp(init);
  EXPECT_EQ(qp->query().cap.max_send_sge, max_sge);
}

INSTANTIATE_TEST_SUITE_P(Profiles, QueueDepth,
                         ::testing::Values(Profile::strict, Profile::rxe, Profile::mlx5),
                         testing::profile_name);

}  // namespace
}  // namespace verbsim
