// The GoogleMock interfaces users test their own code with, exercised the way a user would:
// a tiny back-pressure loop that must retry a post after "queue full" and poll in between.
#include "verbsim/testing/mock.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <iterator>
#include <optional>
#include <string_view>
#include <system_error>
#include <vector>

namespace verbsim {
namespace {

using ::testing::_;
using ::testing::Invoke;
using ::testing::Return;

// User code under test: posts one WR, polling the CQ whenever the send queue is full.
// Returns how many times it had to poll.
int post_with_backpressure(QueuePair& qp, CompletionQueue& cq, const SendWr& wr) {
  int polls = 0;
  for (;;) {
    const PostResult r = qp.post_send(wr);
    if (!r.error()) return polls;
    if (r.error() != Condition::queue_full) throw std::system_error(r.error(), "post_send");
    WorkCompletion wc[4];
    (void)cq.poll(wc);
    ++polls;
  }
}

TEST(Mock, BackpressureRetriesAfterEveryQueueFullErrno) {
  for (const int err : {ENOMEM, EAGAIN, ENOSPC}) {
    testing::MockQueuePair qp;
    testing::MockCompletionQueue cq;
    EXPECT_CALL(qp, post_send(_))
        .WillOnce(Return(PostResult{0, err, "send queue full"}))
        .WillOnce(Return(PostResult{0, err, "send queue full"}))
        .WillOnce(Return(PostResult{1, 0, ""}));
    EXPECT_CALL(cq, poll(_)).Times(2).WillRepeatedly(Return(PollResult{0, 0}));
    EXPECT_EQ(post_with_backpressure(qp, cq, SendWr{}), 2) << "errno " << err;
  }
}

TEST(Mock, OtherErrorsAreNotRetried) {
  testing::MockQueuePair qp;
  testing::MockCompletionQueue cq;
  EXPECT_CALL(qp, post_send(_)).WillOnce(Return(PostResult{0, EINVAL, "QP is not in RTS"}));
  EXPECT_CALL(cq, poll(_)).Times(0);
  EXPECT_THROW(post_with_backpressure(qp, cq, SendWr{}), std::system_error);
}

// User code under test: drains the CQ and sorts what it finds. A completion in error other
// than a flush means the connection is broken (the first such one is the cause); flushed WRs
// are the ones to post again after reconnecting.
struct Drained {
  int ok = 0;
  std::vector<std::uint64_t> to_repost;
  std::optional<WorkCompletion> cause;
};
Drained drain(CompletionQueue& cq) {
  Drained d;
  WorkCompletion wc[4];
  for (;;) {
    const PollResult r = cq.poll(wc);
    if (r.err != 0) throw std::system_error(r.err, std::generic_category(), "poll_cq");
    for (std::size_t i = 0; i < r.count; ++i) {
      if (wc[i].status == WcStatus::success) {
        ++d.ok;
      } else if (wc[i].status == WcStatus::wr_flush_err) {
        d.to_repost.push_back(wc[i].wr_id);
      } else if (!d.cause) {
        d.cause = wc[i];
      }
    }
    if (r.count < std::size(wc)) return d;
  }
}

// A scripted CQ gives the code a retry-exhausted failure followed by the flush of the WRs
// behind it, spread over two polls, which a NIC produces only with a peer that stops answering.
TEST(Mock, ADrainTellsTheBrokenConnectionFromTheWorkToRepost) {
  testing::MockCompletionQueue cq;
  auto wc = [](std::uint64_t id, WcStatus st) {
    WorkCompletion c;
    c.wr_id = id;
    c.status = st;
    return c;
  };
  const std::vector<WorkCompletion> first = {wc(1, WcStatus::success), wc(2, WcStatus::success),
                                             wc(3, WcStatus::retry_exc_err),
                                             wc(4, WcStatus::wr_flush_err)};
  const std::vector<WorkCompletion> second = {wc(5, WcStatus::wr_flush_err)};
  auto script = [](const std::vector<WorkCompletion>& v) {
    return [v](std::span<WorkCompletion> out) {
      std::copy(v.begin(), v.end(), out.begin());
      return PollResult{static_cast<std::uint32_t>(v.size()), 0};
    };
  };
  EXPECT_CALL(cq, poll(_)).WillOnce(Invoke(script(first))).WillOnce(Invoke(script(second)));
  const Drained d = drain(cq);
  EXPECT_EQ(d.ok, 2);
  EXPECT_THAT(d.to_repost, ::testing::ElementsAre(4u, 5u));
  ASSERT_TRUE(d.cause.has_value());
  EXPECT_EQ(d.cause->wr_id, 3u);
  EXPECT_EQ(d.cause->status, WcStatus::retry_exc_err);
}

// And a poll that fails (a CQ in error) is an error of the drain, not an empty CQ.
TEST(Mock, ADrainReportsAFailedPoll) {
  testing::MockCompletionQueue cq;
  EXPECT_CALL(cq, poll(_)).WillOnce(Return(PollResult{0, EIO}));
  EXPECT_THROW(drain(cq), std::system_error);
}

// User code under test: takes one connection request and rejects it unless its private data
// starts with `hello`. Returns whether it accepted.
bool serve_request(CmEventChannel& ch, QueuePair& qp, std::string_view hello) {
  CmEvent ev;
  if (ch.get_event(ev, Wait::blocking) || ev.type != CmEventType::connect_request) return false;
  if (ev.private_data.size() < hello.size() ||
      !std::equal(hello.begin(), hello.end(), ev.private_data.begin())) {
    ev.new_id->reject();
    return false;
  }
  ev.new_id->accept(qp);
  return true;
}

TEST(Mock, ACmRequestWithTheWrongGreetingIsRejected) {
  testing::MockCmEventChannel ch;
  testing::MockQueuePair qp;
  auto id = std::make_unique<testing::MockCmId>();
  EXPECT_CALL(*id, reject(_));
  EXPECT_CALL(*id, accept(_, _)).Times(0);
  EXPECT_CALL(ch, get_event(_, Wait::blocking)).WillOnce(Invoke([&](CmEvent& ev, Wait) {
    ev.type = CmEventType::connect_request;
    ev.private_data = {'n', 'o', 'p', 'e'};
    ev.new_id = std::move(id);
    return std::error_code{};
  }));
  EXPECT_FALSE(serve_request(ch, qp, "hello"));
}

TEST(SockAddr, ParsesAndPrintsIpv4AndIpv6) {
  const SockAddr a = SockAddr::parse("10.0.1.2:7471");
  EXPECT_TRUE(a.is_ipv4());
  EXPECT_EQ(a.port, 7471);
  EXPECT_EQ(a.gid(), Gid::from_ipv4(10, 0, 1, 2));
  EXPECT_EQ(a.to_string(), "10.0.1.2:7471");
  EXPECT_EQ(SockAddr::parse("10.0.1.2").port, 0);
  EXPECT_TRUE(SockAddr::parse("0.0.0.0:1").is_any());
  EXPECT_TRUE(SockAddr::parse("::").is_any());
  const SockAddr v6 = SockAddr::parse("[fe80::1]:9");
  EXPECT_FALSE(v6.is_ipv4());
  EXPECT_EQ(v6.port, 9);
  EXPECT_EQ(v6.to_string(), "[fe80::1]:9");
  EXPECT_EQ(SockAddr::parse("fe80::1"), SockAddr::parse("[fe80::1]"));
  for (const char* bad : {"10.0.0.1:", "10.0.0.1:65536", "10.0.0.256", "[fe80::1", "host:1"}) {
    EXPECT_THROW((void)SockAddr::parse(bad), std::invalid_argument) << bad;
  }
}

TEST(Conditions, QueueFullMatchesTheErrnosProvidersUse) {
  EXPECT_EQ(errno_code(ENOMEM), Condition::queue_full);
  EXPECT_EQ(errno_code(EAGAIN), Condition::queue_full);
  EXPECT_EQ(errno_code(ENOSPC), Condition::queue_full);
  EXPECT_NE(errno_code(EINVAL), Condition::queue_full);
  EXPECT_EQ(errno_code(EINVAL), Condition::invalid_state);
  EXPECT_EQ(errno_code(EBUSY), Condition::in_use);
}

TEST(Errors, VerbErrorNamesTheVerbAndCarriesTheErrno) {
  const VerbError e("ibv_modify_qp", EINVAL, "RESET->RTR");
  EXPECT_EQ(e.code().value(), EINVAL);
  EXPECT_EQ(e.verb(), "ibv_modify_qp");
  EXPECT_THAT(e.what(), ::testing::HasSubstr("ibv_modify_qp"));
  EXPECT_THAT(e.what(), ::testing::HasSubstr("RESET->RTR"));
}

}  // namespace
}  // namespace verbsim
