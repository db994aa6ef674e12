// Completion queues: overrun per profile (SEMANTICS.md row c) and completion channels (row h).
#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <string>
#include <vector>

#include "../support/sim_checks.hpp"

namespace verbsim {
namespace {

using sim::Profile;
using testing::async_events;
using testing::Ledger;
using testing::Node;
using testing::ProfileTest;
using testing::rdma_wr;
using testing::recv_wr;
using testing::send_wr;
using testing::throws_verb_error;

bool readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & POLLIN) != 0;
}

bool is_eventfd(int fd) {
  char target[PATH_MAX] = {};
  const std::string link = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
  return n > 0 && std::string(target, static_cast<std::size_t>(n)) == "anon_inode:[eventfd]";
}

// Two nodes; `a` has a small send CQ `scq` (cqe=4, 7 entries) and a second QP `a2` whose
// receive CQ is `scq` too; everything else is large. `scq` is created with `flags`.
struct Overrun {
  explicit Overrun(Profile p, CqCreateFlags flags = CqCreateFlags::none)
      : world(testing::config_for(p)),
        a(world, "sim0"),
        b(world, "sim1"),
        scq(a.ctx->create_cq(4, nullptr, 0, flags)),
        big_a(a.ctx->create_cq(256)),
        big_b(b.ctx->create_cq(256)),
        qp(a.make_qp(*scq, *big_a, QpCap{32, 4, 1, 1, 0})),
        a2(a.make_qp(*big_a, *scq, QpCap{4, 4, 1, 1, 0})),
        peer(b.make_qp(*big_b, *big_b, QpCap{32, 4, 1, 1, 0})),
        peer2(b.make_qp(*big_b, *big_b, QpCap{4, 4, 1, 1, 0})) {
    testing::connect_qps(a, *qp, b, *peer);
    testing::connect_qps(a, *a2, b, *peer2);
  }
  // Posts `n` signaled RDMA WRITEs with wr_ids first..first+n-1 (no receives needed).
  void writes(std::uint64_t first, int n) {
    const Sge ls = a.sge(0, 8);
    for (int i = 0; i < n; ++i) {
      const PostResult r = qp->post_send(
          rdma_wr(first + static_cast<std::uint64_t>(i), WrOpcode::rdma_write, ls, *b.mr, 0));
      ASSERT_FALSE(r.error()) << r.reason;
    }
  }
  std::vector<WorkCompletion> take(CompletionQueue& cq) {
    std::vector<WorkCompletion> out;
    WorkCompletion wc[16];
    for (PollResult r = cq.poll(wc); r.count > 0; r = cq.poll(wc)) {
      out.insert(out.end(), wc, wc + r.count);
    }
    return out;
  }

  sim::World world;
  Node a, b;
  std::unique_ptr<CompletionQueue> scq, big_a, big_b;
  std::unique_ptr<QueuePair> qp, a2, peer, peer2;
};

TEST(CqOverrun, HardwareProfilesMakeItACqErrorThatFailsEveryQpUsingTheCq) {
  for (const Profile profile : {Profile::strict, Profile::mlx5}) {
    SCOPED_TRACE(std::string(sim::to_string(profile)));
    Overrun o(profile);
    ASSERT_EQ(o.scq->cqe(), 7);
    o.writes(1, 8);
    testing::run_idle(o.world);
    EXPECT_TRUE(readable(o.a.ctx->async_fd()));
    const auto events = async_events(*o.a.ctx);
    ASSERT_EQ(events.size(), 1u);
    EXPECT_EQ(events[0].type, AsyncEventType::cq_err);
    EXPECT_EQ(events[0].cq, o.scq.get());
    EXPECT_FALSE(readable(o.a.ctx->async_fd()));
    EXPECT_EQ(o.qp->state(), QpState::err);
    EXPECT_EQ(o.a2->state(), QpState::err) << "it receives into the overrun CQ";
    EXPECT_EQ(o.peer->state(), QpState::rts);
    const auto kept = o.take(*o.scq);
    ASSERT_EQ(kept.size(), 7u);
    for (std::size_t i = 0; i < kept.size(); ++i) {
      EXPECT_EQ(kept[i].wr_id, i + 1);
      EXPECT_EQ(kept[i].status, WcStatus::success);
    }
    o.writes(100, 1);  // on the ERR QP: flushed into a CQ in error, i.e. lost
    testing::run_idle(o.world);
    EXPECT_TRUE(o.take(*o.scq).empty()) << "a CQ in error stays unusable";
  }
}

TEST(CqOverrun, RxeDropsEachExtraCompletionWithOneCqErrEventAndCarriesOn) {
  Overrun o(Profile::rxe);
  ASSERT_EQ(o.scq->cqe(), 7);
  o.writes(1, 24);
  testing::run_idle(o.world);
  const auto events = async_events(*o.a.ctx);
  ASSERT_EQ(events.size(), 17u);
  for (const auto& ev : events) {
    EXPECT_EQ(ev.type, AsyncEventType::cq_err);
    EXPECT_EQ(ev.cq, o.scq.get());
  }
  EXPECT_EQ(o.qp->state(), QpState::rts);
  EXPECT_EQ(o.a2->state(), QpState::rts);
  const auto kept = o.take(*o.scq);
  ASSERT_EQ(kept.size(), 7u) << "the first 7 are kept";
  for (std::size_t i = 0; i < kept.size(); ++i) {
    EXPECT_EQ(kept[i].wr_id, i + 1);
    EXPECT_EQ(kept[i].status, WcStatus::success);
  }
  o.writes(100, 1);
  const auto again = testing::bounded_poll(o.world, *o.scq, 1);
  ASSERT_EQ(again.size(), 1u) << "the CQ works again once drained";
  EXPECT_EQ(again[0].wr_id, 100u);
  EXPECT_EQ(again[0].status, WcStatus::success);
  EXPECT_TRUE(async_events(*o.a.ctx).empty());
}

TEST(CqOverrun, IgnoreOverrunKeepsTheNewestAndRaisesNothing) {
  for (const Profile profile : {Profile::strict, Profile::mlx5}) {
    SCOPED_TRACE(std::string(sim::to_string(profile)));
    Overrun o(profile, CqCreateFlags::ignore_overrun);
    ASSERT_EQ(o.scq->cqe(), 7);
    o.writes(1, 24);
    testing::run_idle(o.world);
    EXPECT_FALSE(readable(o.a.ctx->async_fd())) << "no CQ_ERR";
    EXPECT_TRUE(async_events(*o.a.ctx).empty());
    EXPECT_EQ(o.qp->state(), QpState::rts);
    EXPECT_EQ(o.a2->state(), QpState::rts);
    EXPECT_EQ(o.world.accounting().lost_to_overrun, 17u);
    const auto kept = o.take(*o.scq);
    ASSERT_EQ(kept.size(), 7u);
    for (std::size_t i = 0; i < kept.size(); ++i) {
      EXPECT_EQ(kept[i].wr_id, 18 + i) << "each completion overwrote the oldest";
      EXPECT_EQ(kept[i].status, WcStatus::success);
    }
    // Polling the newest send completion retired every slot before it: the whole send queue
    // is free again.
    o.writes(100, 32);
    testing::run_idle(o.world);
    const auto again = o.take(*o.scq);
    ASSERT_EQ(again.size(), 7u);
    EXPECT_EQ(again.back().wr_id, 131u);
    EXPECT_EQ(o.world.accounting().lost_to_overrun, 17u + 25u);
    EXPECT_TRUE(async_events(*o.a.ctx).empty());
  }
}

TEST(CqOverrun, RxeRefusesIgnoreOverrunAsItsKernelDriverDoes) {
  sim::World world(testing::config_for(Profile::rxe));
  Node a(world, "sim0");
  EXPECT_TRUE(throws_verb_error(
      [&] { (void)a.ctx->create_cq(4, nullptr, 0, CqCreateFlags::ignore_overrun); },
      "ibv_create_cq_ex", EOPNOTSUPP));
  EXPECT_NO_THROW((void)a.ctx->create_cq(4, nullptr, 0, CqCreateFlags::none));
}

// ---------------------------------------------------------------------------------------------
// Completion channels

class Channel : public ProfileTest {
 protected:
  Channel()
      : world(config()),
        a(world, "sim0"),
        b(world, "sim1"),
        ch(b.ctx->create_comp_channel()),
        acq(a.ctx->create_cq(64)),
        bcq(b.ctx->create_cq(64, ch.get())),
        aqp(a.make_qp(*acq, *acq, QpCap{16, 16, 1, 1, 0})),
        bqp(b.make_qp(*bcq, *bcq, QpCap{16, 16, 1, 1, 0})) {
    testing::connect_qps(a, *aqp, b, *bqp);
  }
  // Sends `flags` SEND `id` from a into a receive posted on b, and runs the world idle.
  void deliver(std::uint64_t id, SendFlags flags = SendFlags::signaled) {
    const Sge rs = b.sge(id * 64, 64);
    ASSERT_TRUE(led.post_recv(*bqp, recv_wr(1000 + id, rs)));
    const Sge ss = a.sge(0, 8);
    ASSERT_TRUE(led.post_send(*aqp, send_wr(id, ss, WrOpcode::send, flags)));
    testing::run_idle(world);
  }
  std::error_code next_event(CompletionQueue*& cq) {
    return ch->get_cq_event(cq, Wait::nonblocking);
  }

  sim::World world;
  Node a, b;
  std::unique_ptr<CompletionChannel> ch;
  std::unique_ptr<CompletionQueue> acq, bcq;
  std::unique_ptr<QueuePair> aqp, bqp;
  Ledger led;
};

// rxe and mlx5 arm a CQ that has no channel (ibv_req_notify_cq returns 0); its completions
// arrive as before and raise nothing anywhere.
TEST_P(Channel, ACqWithoutAChannelIsArmedAndRaisesNothing) {
  EXPECT_EQ(acq->channel(), nullptr);
  EXPECT_FALSE(acq->req_notify());
  EXPECT_FALSE(acq->req_notify(true));
  deliver(1);
  const auto first = led.drain(world, *acq);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].status, WcStatus::success);
  EXPECT_FALSE(acq->req_notify()) << "armed again after the arm was used up";
  deliver(2);
  EXPECT_EQ(led.drain(world, *acq).size(), 1u);
  EXPECT_EQ(led.drain(world, *bcq).size(), 2u);
  EXPECT_TRUE(led.balanced());
  EXPECT_FALSE(readable(ch->fd()));
  CompletionQueue* cq = nullptr;
  EXPECT_EQ(next_event(cq), errno_code(EAGAIN));
}

TEST_P(Channel, OneEventPerArmingAndNoneWithoutIt) {
  EXPECT_EQ(bcq->channel(), ch.get());
  ASSERT_GE(ch->fd(), 0);
  EXPECT_TRUE(is_eventfd(ch->fd()));
  EXPECT_FALSE(readable(ch->fd()));
  CompletionQueue* cq = nullptr;
  EXPECT_EQ(next_event(cq), errno_code(EAGAIN));
  EXPECT_EQ(next_event(cq), Condition::would_block);

  deliver(1);  // not armed: no event
  EXPECT_FALSE(readable(ch->fd()));
  EXPECT_EQ(next_event(cq), errno_code(EAGAIN));
  ASSERT_FALSE(bcq->req_notify());  // the completion already there does not fire it
  EXPECT_EQ(next_event(cq), errno_code(EAGAIN));

  deliver(2);
  EXPECT_TRUE(readable(ch->fd())) << "the fd polls readable while an event is pending";
  ASSERT_FALSE(next_event(cq));
  EXPECT_EQ(cq, bcq.get());
  EXPECT_FALSE(readable(ch->fd()));
  bcq->ack_events(1);

  deliver(3);  // not re-armed
  EXPECT_FALSE(readable(ch->fd()));
  EXPECT_EQ(next_event(cq), errno_code(EAGAIN));

  ASSERT_FALSE(bcq->req_notify());
  ASSERT_FALSE(bcq->req_notify());  // arming twice still gives one event
  deliver(4);
  deliver(5);
  ASSERT_FALSE(next_event(cq));
  EXPECT_EQ(cq, bcq.get());
  EXPECT_EQ(next_event(cq), errno_code(EAGAIN));
  bcq->ack_events(1);

  EXPECT_EQ(led.drain(world, *bcq).size(), 5u);
  EXPECT_EQ(led.drain(world, *acq).size(), 5u);
  EXPECT_TRUE(led.balanced());
}

TEST_P(Channel, BlockingWaitRunsTheWorldUntilTheEvent) {
  ASSERT_FALSE(bcq->req_notify());
  const Sge rs = b.sge(0, 64);
  ASSERT_TRUE(led.post_recv(*bqp, recv_wr(1000, rs)));
  const Sge ss = a.sge(0, 8);
  ASSERT_TRUE(led.post_send(*aqp, send_wr(1, ss)));
  CompletionQueue* cq = nullptr;
  ASSERT_FALSE(ch->get_cq_event(cq, Wait::blocking));
  EXPECT_EQ(cq, bcq.get());
  EXPECT_GT(world.now(), 0u);
  bcq->ack_events(1);
  testing::run_idle(world);
  EXPECT_EQ(ch->get_cq_event(cq, Wait::blocking), errno_code(EDEADLK))
      << "blocking with nothing left to happen would never end";
  led.drain(world, *bcq);
  led.drain(world, *acq);
  EXPECT_TRUE(led.balanced());
}

TEST_P(Channel, SolicitedOnlyArmIgnoresUnsolicitedSends) {
  ASSERT_FALSE(bcq->req_notify(true));
  deliver(1);
  CompletionQueue* cq = nullptr;
  EXPECT_EQ(next_event(cq), errno_code(EAGAIN)) << "an unsolicited SEND does not fire it";
  deliver(2, SendFlags::signaled | SendFlags::solicited);
  ASSERT_FALSE(next_event(cq));
  EXPECT_EQ(cq, bcq.get());
  EXPECT_EQ(next_event(cq), errno_code(EAGAIN));
  bcq->ack_events(1);

  // An error completion fires a solicited-only arm too.
  ASSERT_FALSE(bcq->req_notify(true));
  const Sge rs = b.sge(4096, 64);
  ASSERT_TRUE(led.post_recv(*bqp, recv_wr(2000, rs)));
  testing::move_to(*bqp, QpState::err);
  ASSERT_FALSE(next_event(cq));
  EXPECT_EQ(cq, bcq.get());
  bcq->ack_events(1);
  led.drain(world, *bcq);
  led.drain(world, *acq);
  EXPECT_TRUE(led.balanced());
}

TEST_P(Channel, DestroyingACqWithUnacknowledgedEventsIsEbusy) {
  ASSERT_FALSE(bcq->req_notify());
  deliver(1);
  deliver(2);
  CompletionQueue* cq = nullptr;
  ASSERT_FALSE(next_event(cq));
  ASSERT_FALSE(bcq->req_notify());
  deliver(3);
  ASSERT_FALSE(next_event(cq));
  led.drain(world, *bcq);
  led.drain(world, *acq);
  EXPECT_TRUE(led.balanced());
  destroy(bqp);
  std::string what;
  EXPECT_TRUE(throws_verb_error([&] { destroy(bcq); }, "ibv_destroy_cq", EBUSY, &what));
  EXPECT_NE(what.find("2 completion events"), std::string::npos) << what;
  ASSERT_NE(bcq, nullptr) << "a refused destroy leaves the CQ owned";
  bcq->ack_events(1);
  EXPECT_TRUE(throws_verb_error([&] { destroy(bcq); }, "ibv_destroy_cq", EBUSY));
  bcq->ack_events(1);
  destroy(bcq);
  EXPECT_EQ(bcq, nullptr);
  destroy(ch);
}

// An event still queued is not one the program has to acknowledge: it goes with the CQ (as
// the kernel drops it), the destroy succeeds and the channel's fd stops polling readable.
TEST_P(Channel, AnEventNotTakenGoesWithItsCq) {
  ASSERT_FALSE(bcq->req_notify());
  deliver(1);
  world.run_until_idle();
  EXPECT_TRUE(readable(ch->fd()));
  led.drain(world, *bcq);
  led.drain(world, *acq);
  destroy(bqp);
  destroy(bcq);
  EXPECT_EQ(bcq, nullptr);
  EXPECT_FALSE(readable(ch->fd()));
  CompletionQueue* cq = nullptr;
  EXPECT_EQ(ch->get_cq_event(cq, Wait::nonblocking), errno_code(EAGAIN));
  destroy(ch);
}

INSTANTIATE_TEST_SUITE_P(Profiles, Channel,
                         ::testing::Values(Profile::strict, Profile::rxe, Profile::mlx5),
                         testing::profile_name);

}  // namespace
}  // namespace verbsim
