// The WR checker of the test kit (verbsim/testing/wr_checker.hpp) against completions made up by hand: it passes what is right
// and reports each kind of wrong, so that a test it watches cannot pass silently.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "verbsim/testing/wr_checker.hpp"
#include "verbsim/sim/world.hpp"

namespace verbsim {
namespace {

using testing::QpKey;
using testing::SrqKey;
using testing::WrChecker;

constexpr QpKey kQp{0, 0x11};
constexpr QpKey kPeer{1, 0x11};  // the same QP number on the other device

WorkCompletion wc_of(QpKey qp, std::uint64_t wr_id, WcOpcode opcode,
                     WcStatus status = WcStatus::success, std::uint32_t byte_len = 0) {
  WorkCompletion wc{};  // (no member initializers: zero every field)
  wc.wr_id = wr_id;
  wc.qp_num = qp.second;
  wc.opcode = opcode;
  wc.status = status;
  wc.byte_len = byte_len;
  return wc;
}

Sge sge_over(std::vector<std::byte>& buf) {
  return {reinterpret_cast<std::uint64_t>(buf.data()), static_cast<std::uint32_t>(buf.size()), 1};
}

// Two sends and a receive on each device, completed once each and in order: nothing to report.
TEST(WrChecker, PassesWorkThatEndsOnceInOrder) {
  WrChecker c;
  std::vector<std::byte> buf(64);
  const Sge s = sge_over(buf);
  for (const QpKey& qp : {kQp, kPeer}) {
    c.took_send(qp, 1, WcOpcode::send, true, true);
    c.took_send(qp, 2, WcOpcode::rdma_write, true, true);
    c.took_recv(qp, 3, {&s, 1});
  }
  c.took_send(kQp, 4, WcOpcode::send, false, false);  // unsignaled: need not complete
  for (const QpKey& qp : {kPeer, kQp}) {
    c.completed(qp.first, wc_of(qp, 3, WcOpcode::recv, WcStatus::success, 64));
    c.completed(qp.first, wc_of(qp, 1, WcOpcode::send));
    c.completed(qp.first, wc_of(qp, 2, WcOpcode::rdma_write));
  }
  EXPECT_TRUE(c.balanced());
  EXPECT_EQ(c.successes(), 6u);
  EXPECT_EQ(c.census().at("send SUCCESS SEND flags=0"), 2);
  EXPECT_EQ(c.census().at("recv SUCCESS RECV flags=0 len"), 2);
}

TEST(WrChecker, ReportsADuplicatedCompletion) {
  WrChecker c;
  c.took_send(kQp, 1, WcOpcode::send, true, true);
  c.completed(0, wc_of(kQp, 1, WcOpcode::send));
  EXPECT_NONFATAL_FAILURE(c.completed(0, wc_of(kQp, 1, WcOpcode::send)), "a second completion");
}

TEST(WrChecker, ReportsACompletionOutOfItsQueuesOrder) {
  WrChecker c;
  c.took_send(kQp, 1, WcOpcode::send, true, true);
  c.took_send(kQp, 2, WcOpcode::send, true, true);
  c.completed(0, wc_of(kQp, 2, WcOpcode::send));
  EXPECT_NONFATAL_FAILURE(c.completed(0, wc_of(kQp, 1, WcOpcode::send)),
                          "out of order on its queue (after wr_id 2)");
}

// The order is per queue: a QP's receives and sends, or the same QP number on two devices, do
// not order each other.
TEST(WrChecker, OrdersEachQueueOnItsOwn) {
  WrChecker c;
  c.took_send(kQp, 1, WcOpcode::send, true, true);
  c.took_recv(kQp, 2, {});
  c.took_send(kPeer, 3, WcOpcode::send, true, true);
  c.completed(1, wc_of(kPeer, 3, WcOpcode::send));
  c.completed(0, wc_of(kQp, 2, WcOpcode::recv));
  c.completed(0, wc_of(kQp, 1, WcOpcode::send));
  EXPECT_TRUE(c.balanced());
}

TEST(WrChecker, ReportsAMissingCompletion) {
  WrChecker c;
  c.took_send(kQp, 1, WcOpcode::send, true, true);
  c.took_send(kQp, 2, WcOpcode::send, true, true);
  c.completed(0, wc_of(kQp, 1, WcOpcode::send));
  EXPECT_NONFATAL_FAILURE(EXPECT_TRUE(c.balanced()),
                          "1 WRs that never completed (first ones: 2 (qp 17 of device 0, SEND))");
  EXPECT_TRUE(c.balanced(1)) << "one completion a CQ overrun dropped";
}

TEST(WrChecker, ReportsACompletionOfNothingTakenOrOnAnotherQueue) {
  WrChecker c;
  c.took_send(kQp, 1, WcOpcode::send, true, true);
  EXPECT_NONFATAL_FAILURE(c.completed(0, wc_of(kQp, 9, WcOpcode::send)), "never taken");
  EXPECT_NONFATAL_FAILURE(c.completed(1, wc_of(kPeer, 1, WcOpcode::send)),
                          "which was taken on qp 17 of device 0");
}

TEST(WrChecker, ReportsAWrongOpcodeAnUnsignaledSuccessAndAnOverfullReceive) {
  WrChecker c;
  std::vector<std::byte> buf(16);
  const Sge s = sge_over(buf);
  c.took_send(kQp, 1, WcOpcode::rdma_read, true, true);
  c.took_send(kQp, 2, WcOpcode::send, false, false);
  c.took_recv(kQp, 3, {&s, 1});
  EXPECT_NONFATAL_FAILURE(c.completed(0, wc_of(kQp, 1, WcOpcode::send)), "RDMA_READ");
  EXPECT_NONFATAL_FAILURE(c.completed(0, wc_of(kQp, 2, WcOpcode::send)),
                          "an unsignaled send completed successfully");
  EXPECT_NONFATAL_FAILURE(c.completed(0, wc_of(kQp, 3, WcOpcode::recv, WcStatus::success, 17)),
                          "wr.room");
  EXPECT_TRUE(c.balanced());
}

// A move to RESET discards what has not completed: it owes nothing, and must not complete
// unless the CQ keeps such entries.
TEST(WrChecker, ReportsACompletionOfADiscardedWr) {
  WrChecker c;
  c.took_send(kQp, 1, WcOpcode::send, true, true);
  c.took_send(kQp, 2, WcOpcode::send, true, true);
  c.took_send(kPeer, 3, WcOpcode::send, true, true);
  EXPECT_EQ(c.discard(kQp, false), (std::vector<std::uint64_t>{1, 2}));
  EXPECT_EQ(c.discard(kPeer, true), (std::vector<std::uint64_t>{3}));
  EXPECT_TRUE(c.balanced());
  EXPECT_NONFATAL_FAILURE(c.completed(0, wc_of(kQp, 1, WcOpcode::send, WcStatus::wr_flush_err)),
                          "completed after a move to RESET discarded it");
  c.completed(1, wc_of(kPeer, 3, WcOpcode::send, WcStatus::wr_flush_err));
}

// An SRQ receive completes on a QP of its device, and only there.
TEST(WrChecker, MatchesSrqReceivesOnTheirDevice) {
  WrChecker c;
  c.took_srq_recv(SrqKey{0, 0}, 5, {});
  c.took_srq_recv(SrqKey{0, 0}, 6, {});
  EXPECT_NONFATAL_FAILURE(c.completed(1, wc_of(kPeer, 5, WcOpcode::recv)),
                          "which was taken on srq 0 of device 0");
  c.completed(0, wc_of(kQp, 5, WcOpcode::recv));
  c.completed(0, wc_of(QpKey{0, 0x12}, 6, WcOpcode::recv));
  EXPECT_TRUE(c.balanced());
}

// A READ that brought other bytes, a WRITE that left other bytes, a named send's receive that
// holds other bytes.
TEST(WrChecker, ReportsWrongBytes) {
  WrChecker c;
  std::vector<std::byte> local(8, std::byte{1});
  std::vector<std::byte> remote(8, std::byte{2});
  c.expect_read(kQp, 1, {sge_over(local)}, remote.data(), std::vector<std::byte>(8, std::byte{2}));
  c.took_send(kQp, 1, WcOpcode::rdma_read, true, true);
  EXPECT_NONFATAL_FAILURE(
      c.completed(0, wc_of(kQp, 1, WcOpcode::rdma_read, WcStatus::success, 8)),
      "READ wr_id 1 brought other bytes");
  c.expect_write(kQp, 2, {sge_over(local)}, remote.data());
  c.took_send(kQp, 2, WcOpcode::rdma_write, true, true);
  EXPECT_NONFATAL_FAILURE(c.completed(0, wc_of(kQp, 2, WcOpcode::rdma_write)),
                          "WRITE wr_id 2 left other bytes");

  c.took_send(kQp, 3, WcOpcode::send, true, true);
  c.sends_payload(3, std::vector<std::byte>(8, std::byte{2}));
  const Sge into = sge_over(local);
  c.took_recv(kPeer, 4, {&into, 1});
  WorkCompletion recv = wc_of(kPeer, 4, WcOpcode::recv, WcStatus::success, 8);
  recv.wc_flags = WcFlags::with_imm;
  recv.imm_data = 3;
  EXPECT_NONFATAL_FAILURE(c.completed(1, recv), "wr_id 4 holds other bytes than wr_id 3 sent");
  EXPECT_EQ(c.payloads_checked(), 3u);
}

// A chain of two FETCH_ADDs on one word: the second must return what the first left, and the
// word must end with both added.
TEST(WrChecker, ChecksAnAtomicChain) {
  WrChecker c;
  std::uint64_t word = 0;
  std::uint64_t results[2] = {};
  auto* w = reinterpret_cast<std::byte*>(&word);
  c.start_chain(kQp, w, 100);
  EXPECT_EQ(word, 100u);
  SendWr add;
  add.opcode = WrOpcode::atomic_fetch_and_add;
  add.compare_add = 5;
  for (std::uint64_t id : {1, 2}) {
    add.wr_id = id;
    c.chain_atomic(kQp, add, reinterpret_cast<const std::byte*>(&results[id - 1]));
    c.took_send(kQp, id, WcOpcode::fetch_add, true, true);
  }
  EXPECT_EQ(c.chain_value(kQp), 110u);
  word = 105;  // the first has run
  results[0] = 100;
  c.completed(0, wc_of(kQp, 1, WcOpcode::fetch_add, WcStatus::success, 8));
  results[1] = 104;  // a wrong value returned (the word holds the right one)
  word = 110;
  EXPECT_NONFATAL_FAILURE(
      c.completed(0, wc_of(kQp, 2, WcOpcode::fetch_add, WcStatus::success, 8)),
      "atomic wr_id 2 returned another value");
  EXPECT_EQ(c.atomics_checked(), 2u);
  EXPECT_TRUE(c.balanced());
}

// An atomic the post did not take is withdrawn: the chain goes on as if it had not been posted.
TEST(WrChecker, WithdrawnAtomicsLeaveTheChainAsItWas) {
  WrChecker c;
  std::uint64_t word = 0;
  std::uint64_t result = 0;
  c.start_chain(kQp, reinterpret_cast<std::byte*>(&word), 7);
  SendWr add;
  add.wr_id = 1;
  add.opcode = WrOpcode::atomic_fetch_and_add;
  add.compare_add = 5;
  c.chain_atomic(kQp, add, reinterpret_cast<const std::byte*>(&result));
  c.withdraw(kQp, 1);
  EXPECT_EQ(c.chain_value(kQp), 7u);
  EXPECT_TRUE(c.balanced());
  word = 8;
  EXPECT_NONFATAL_FAILURE(EXPECT_TRUE(c.balanced()),
                          "the atomics of qp 17 left another value in their word");
}

TEST(WrChecker, ReportsMoreEventsThanArmings) {
  sim::World world{sim::Config{}};
  const auto ctx = world.open("sim0");
  const auto cq = ctx->create_cq(4);
  WrChecker c;
  c.armed_cq(*cq);
  c.cq_event(*cq);
  EXPECT_NONFATAL_FAILURE(c.cq_event(*cq), "more events than armings");
}

}  // namespace
}  // namespace verbsim
