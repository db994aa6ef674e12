// The GoogleMock interfaces users test their own code with, exercised the way a user would:
// a tiny back-pressure loop that must retry a post after "queue full" and poll in between.
#include "verbsim/testing/mock.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cerrno>

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

TEST(Mock, PollCanScriptErrorCompletions) {
  testing::MockCompletionQueue cq;
  EXPECT_CALL(cq, poll(_)).WillOnce(Invoke([](std::span<WorkCompletion> out) {
    out[0].wr_id = 9;
    out[0].status = WcStatus::rnr_retry_exc_err;
    return PollResult{1, 0};
  }));
  WorkCompletion wc[2];
  const PollResult r = cq.poll(wc);
  ASSERT_EQ(r.count, 1u);
  EXPECT_EQ(wc[0].status, WcStatus::rnr_retry_exc_err);
  EXPECT_EQ(to_string(wc[0].status), "RNR_RETRY_EXC_ERR");
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
