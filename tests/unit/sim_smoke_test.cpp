#include <gtest/gtest.h>

#include <cstring>

#include "../support/sim_pair.hpp"
#include "fabric/assert.hpp"

namespace verbsim {
namespace {

using testing::SimPair;
using testing::poll_n;

// The simulator's invariants abort with a message naming the broken one, in the builds that
// check them (Debug and sanitizer builds: CI's); Release compiles them out.
TEST(SimAssert, ABrokenInvariantAbortsNamingIt) {
#if VERBSIM_ASSERTS_ON
  const int posted = 1;
  EXPECT_DEATH(VERBSIM_ASSERT(posted < 0, "sent <= posted"),
               "invariant broken at .*sim_smoke_test.cpp:[0-9]+: posted < 0 \\(sent <= posted\\)");
#else
  GTEST_SKIP() << "VERBSIM_ASSERT is compiled out of this build (NDEBUG without VERBSIM_ASSERTS)";
#endif
}

TEST(SimSmoke, SendRecvMovesBytesAndCompletesBothSides) {
  SimPair p;
  std::memcpy(p.a.buf.data(), "hello", 6);
  const Sge rs = p.b.sge(0, 64);
  ASSERT_FALSE(p.b.qp->post_recv(RecvWr{7, {&rs, 1}}).error());
  const Sge ss = p.a.sge(0, 6);
  SendWr wr;
  wr.wr_id = 1;
  wr.opcode = WrOpcode::send;
  wr.flags = SendFlags::signaled;
  wr.sg_list = {&ss, 1};
  const PostResult r = p.a.qp->post_send(wr);
  ASSERT_FALSE(r.error()) << r.reason;
  const auto recv = poll_n(p.world, *p.b.cq, 1);
  ASSERT_EQ(recv.size(), 1u);
  EXPECT_EQ(recv[0].status, WcStatus::success);
  EXPECT_EQ(recv[0].opcode, WcOpcode::recv);
  EXPECT_EQ(recv[0].byte_len, 6u);
  EXPECT_EQ(recv[0].wr_id, 7u);
  EXPECT_STREQ(p.b.buf.data(), "hello");
  const auto send = poll_n(p.world, *p.a.cq, 1);
  ASSERT_EQ(send.size(), 1u);
  EXPECT_EQ(send[0].status, WcStatus::success);
  EXPECT_EQ(send[0].opcode, WcOpcode::send);
  EXPECT_GT(p.world.now(), 2000u);  // two link latencies of 1 us
}

}  // namespace
}  // namespace verbsim
