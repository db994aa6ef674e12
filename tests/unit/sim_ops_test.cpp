// Every operation the simulator carries, checked end to end through the public API: what lands
// in memory and what each side's completion says. Run under every profile (they must agree).
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "../support/sim_checks.hpp"
#include "verbsim/sim/extensions.hpp"

namespace verbsim {
namespace {

using sim::Profile;
using testing::address_to_b;
using testing::async_events;
using testing::expect_completions;
using testing::Ledger;
using testing::Node;
using testing::PairOptions;
using testing::ProfileTest;
using testing::rdma_wr;
using testing::recv_wr;
using testing::send_wr;
using testing::SimPair;

class Ops : public ProfileTest {
 protected:
  // The flags of an RC/UC receive completion: rxe also sets IBV_WC_GRH on them (every RoCE
  // packet has a network header; measured, tests/conformance/expect.cpp), hardware does not.
  WcFlags rc_flags(WcFlags f) const { return is(Profile::rxe) ? f | WcFlags::grh : f; }
};

WorkCompletion only(const std::vector<WorkCompletion>& wcs) {
  EXPECT_EQ(wcs.size(), 1u);
  return wcs.empty() ? WorkCompletion{} : wcs[0];
}

TEST_P(Ops, SendWithImmCarriesTheImmediateAndSetsWithImm) {
  SimPair p(config());
  Ledger led;
  const Sge rs[2] = {p.b.sge(0, 64), p.b.sge(64, 64)};
  ASSERT_TRUE(led.post_recv(*p.b.qp, recv_wr(201, rs[0])));
  ASSERT_TRUE(led.post_recv(*p.b.qp, recv_wr(202, rs[1])));
  std::memcpy(p.a.buf.data(), "with imm", 9);
  const Sge ss = p.a.sge(0, 9);
  SendWr imm = send_wr(1, ss, WrOpcode::send_with_imm);
  imm.imm_data = 0xdeadbeef;
  ASSERT_TRUE(led.post_send(*p.a.qp, imm));
  ASSERT_TRUE(led.post_send(*p.a.qp, send_wr(2, ss)));
  const auto recvs = led.poll_n(p.world, *p.b.cq, 2);
  ASSERT_EQ(recvs.size(), 2u);
  EXPECT_EQ(recvs[0].wr_id, 201u);
  EXPECT_EQ(recvs[0].status, WcStatus::success);
  EXPECT_EQ(recvs[0].opcode, WcOpcode::recv);
  EXPECT_EQ(recvs[0].byte_len, 9u);
  EXPECT_EQ(recvs[0].wc_flags, rc_flags(WcFlags::with_imm));
  EXPECT_EQ(recvs[0].imm_data, 0xdeadbeefu);
  EXPECT_EQ(recvs[0].qp_num, p.b.qp->qp_num());
  EXPECT_STREQ(p.b.buf.data(), "with imm");
  EXPECT_EQ(recvs[1].wr_id, 202u);
  EXPECT_EQ(recvs[1].wc_flags, rc_flags(WcFlags::none));
  const auto sends = led.poll_n(p.world, *p.a.cq, 2);
  ASSERT_EQ(sends.size(), 2u);
  EXPECT_EQ(sends[0].opcode, WcOpcode::send);
  EXPECT_EQ(sends[0].status, WcStatus::success);
  EXPECT_TRUE(led.balanced());
}

TEST_P(Ops, RdmaWriteLandsSilentlyAndWriteWithImmConsumesAReceive) {
  SimPair p(config());
  Ledger led;
  for (int i = 0; i < 100; ++i) p.a.buf[static_cast<std::size_t>(i)] = static_cast<char>(i + 1);
  const Sge ls = p.a.sge(0, 32);
  ASSERT_TRUE(led.post_send(*p.a.qp, rdma_wr(1, WrOpcode::rdma_write, ls, *p.b.mr, 256)));
  const WorkCompletion w = only(led.poll_n(p.world, *p.a.cq, 1));
  EXPECT_EQ(w.status, WcStatus::success);
  EXPECT_EQ(w.opcode, WcOpcode::rdma_write);
  EXPECT_EQ(std::memcmp(p.b.buf.data() + 256, p.a.buf.data(), 32), 0);
  EXPECT_TRUE(led.drain(p.world, *p.b.cq).empty()) << "a plain WRITE is invisible to the target";

  ASSERT_TRUE(led.post_recv(*p.b.qp, RecvWr{201, {}}));  // no SGE needed for WRITE_WITH_IMM
  const Sge ls100 = p.a.sge(0, 100);
  SendWr wi = rdma_wr(2, WrOpcode::rdma_write_with_imm, ls100, *p.b.mr, 1024);
  wi.imm_data = 0x1234;
  ASSERT_TRUE(led.post_send(*p.a.qp, wi));
  const WorkCompletion r = only(led.poll_n(p.world, *p.b.cq, 1));
  EXPECT_EQ(r.wr_id, 201u);
  EXPECT_EQ(r.status, WcStatus::success);
  EXPECT_EQ(r.opcode, WcOpcode::recv_rdma_with_imm);
  EXPECT_EQ(r.byte_len, 100u);
  EXPECT_EQ(r.wc_flags, rc_flags(WcFlags::with_imm));
  EXPECT_EQ(r.imm_data, 0x1234u);
  EXPECT_EQ(std::memcmp(p.b.buf.data() + 1024, p.a.buf.data(), 100), 0);
  const WorkCompletion s = only(led.poll_n(p.world, *p.a.cq, 1));
  EXPECT_EQ(s.wr_id, 2u);
  EXPECT_EQ(s.opcode, WcOpcode::rdma_write);
  EXPECT_TRUE(led.balanced());
}

TEST_P(Ops, RdmaReadFetchesRemoteMemory) {
  SimPair p(config());
  Ledger led;
  for (int i = 0; i < 48; ++i)
    p.b.buf[300 + static_cast<std::size_t>(i)] = static_cast<char>('a' + i % 26);
  const Sge ls = p.a.sge(512, 48);
  ASSERT_TRUE(led.post_send(*p.a.qp, rdma_wr(1, WrOpcode::rdma_read, ls, *p.b.mr, 300)));
  const WorkCompletion w = only(led.poll_n(p.world, *p.a.cq, 1));
  EXPECT_EQ(w.status, WcStatus::success);
  EXPECT_EQ(w.opcode, WcOpcode::rdma_read);
  EXPECT_EQ(w.byte_len, 48u);
  EXPECT_EQ(std::memcmp(p.a.buf.data() + 512, p.b.buf.data() + 300, 48), 0);
  EXPECT_TRUE(led.drain(p.world, *p.b.cq).empty());
  EXPECT_TRUE(led.balanced());
}

TEST_P(Ops, AtomicsReturnTheOriginalValue) {
  SimPair p(config());
  Ledger led;
  auto remote = [&] {
    std::uint64_t v;
    std::memcpy(&v, p.b.buf.data() + 1024, 8);
    return v;
  };
  auto local = [&] {
    std::uint64_t v;
    std::memcpy(&v, p.a.buf.data() + 2048, 8);
    return v;
  };
  const std::uint64_t five = 5;
  std::memcpy(p.b.buf.data() + 1024, &five, 8);
  const Sge ls = p.a.sge(2048, 8);
  struct Step {
    WrOpcode op;
    std::uint64_t compare_add, swap, returned, after;
    WcOpcode wc;
  };
  const Step steps[] = {
      {WrOpcode::atomic_cmp_and_swp, 5, 9, 5, 9, WcOpcode::comp_swap},   // matches: swapped
      {WrOpcode::atomic_cmp_and_swp, 5, 11, 9, 9, WcOpcode::comp_swap},  // no match: unchanged
      {WrOpcode::atomic_fetch_and_add, 3, 0, 9, 12, WcOpcode::fetch_add},
  };
  std::uint64_t id = 1;
  for (const Step& st : steps) {
    SCOPED_TRACE("step " + std::to_string(id));
    SendWr wr = rdma_wr(id, st.op, ls, *p.b.mr, 1024);
    wr.compare_add = st.compare_add;
    wr.swap = st.swap;
    ASSERT_TRUE(led.post_send(*p.a.qp, wr));
    const WorkCompletion w = only(led.poll_n(p.world, *p.a.cq, 1));
    EXPECT_EQ(w.wr_id, id);
    EXPECT_EQ(w.status, WcStatus::success);
    EXPECT_EQ(w.opcode, st.wc);
    EXPECT_EQ(w.byte_len, 8u);
    EXPECT_EQ(local(), st.returned);
    EXPECT_EQ(remote(), st.after);
    ++id;
  }
  // Operands must be one aligned 8-byte word.
  SendWr odd = rdma_wr(9, WrOpcode::atomic_fetch_and_add, ls, *p.b.mr, 1028);
  EXPECT_EQ(p.a.qp->post_send(odd).error(), errno_code(EINVAL));
  const Sge four = p.a.sge(2048, 4);
  EXPECT_EQ(p.a.qp->post_send(rdma_wr(9, WrOpcode::atomic_cmp_and_swp, four, *p.b.mr, 1024)).error(),
            errno_code(EINVAL));
  EXPECT_TRUE(led.balanced());
}

TEST_P(Ops, InlineDataIsCopiedWhenPosted) {
  SimPair p(config());
  Ledger led;
  const Sge rs = p.b.sge(0, 64);
  ASSERT_TRUE(led.post_recv(*p.b.qp, recv_wr(201, rs)));
  std::memcpy(p.a.buf.data(), "inline payload", 15);
  const Sge ss = p.a.sge(0, 15);
  ASSERT_TRUE(led.post_send(
      *p.a.qp, send_wr(1, ss, WrOpcode::send, SendFlags::signaled | SendFlags::inline_data)));
  std::memset(p.a.buf.data(), 'X', 15);  // the buffer is the caller's again at once
  const WorkCompletion r = only(led.poll_n(p.world, *p.b.cq, 1));
  EXPECT_EQ(r.byte_len, 15u);
  EXPECT_STREQ(p.b.buf.data(), "inline payload");
  led.drain(p.world, *p.a.cq);
  EXPECT_TRUE(led.balanced());
}

TEST_P(Ops, SgesGatherOnSendAndScatterOnReceive) {
  SimPair p(config());
  Ledger led;
  std::memcpy(p.a.buf.data() + 0, "0123456789", 10);
  std::memcpy(p.a.buf.data() + 100, "abcde", 5);
  std::memcpy(p.a.buf.data() + 200, "ABCDEFGHIJKLMNOPQ", 17);
  const Sge gather[3] = {p.a.sge(0, 10), p.a.sge(100, 5), p.a.sge(200, 17)};
  const Sge scatter[2] = {p.b.sge(0, 20), p.b.sge(1000, 40)};
  ASSERT_TRUE(led.post_recv(*p.b.qp, RecvWr{201, {scatter, 2}}));
  SendWr wr = send_wr(1, gather[0]);
  wr.sg_list = {gather, 3};
  ASSERT_TRUE(led.post_send(*p.a.qp, wr));
  const WorkCompletion r = only(led.poll_n(p.world, *p.b.cq, 1));
  EXPECT_EQ(r.status, WcStatus::success);
  EXPECT_EQ(r.byte_len, 32u);
  EXPECT_EQ(std::string(p.b.buf.data(), 20), "0123456789abcdeABCDE");
  EXPECT_EQ(std::string(p.b.buf.data() + 1000, 12), "FGHIJKLMNOPQ");
  EXPECT_EQ(p.b.buf[1012], 0);
  led.drain(p.world, *p.a.cq);
  EXPECT_TRUE(led.balanced());
}

TEST_P(Ops, UnsignaledSuccessesLeaveNoCompletionUnlessSqSigAll) {
  for (const bool sig_all : {false, true}) {
    SCOPED_TRACE(sig_all ? "sq_sig_all" : "selective signaling");
    sim::World world(config());
    Node a(world, "sim0"), b(world, "sim1");
    auto acq = a.ctx->create_cq(64), bcq = b.ctx->create_cq(64);
    auto aqp = a.make_qp(*acq, *acq, QpCap{16, 16, 1, 1, 0}, QpType::rc, sig_all);
    auto bqp = b.make_qp(*bcq, *bcq, QpCap{16, 16, 1, 1, 0});
    testing::connect_qps(a, *aqp, b, *bqp);
    Ledger led;
    const Sge ls = a.sge(0, 8);
    for (std::uint64_t id = 1; id <= 4; ++id) {
      ASSERT_TRUE(led.post_send(
          *aqp, rdma_wr(id, WrOpcode::rdma_write, ls, *b.mr, 0, SendFlags::none), sig_all));
    }
    ASSERT_TRUE(led.post_send(*aqp, rdma_wr(5, WrOpcode::rdma_write, ls, *b.mr, 0), sig_all));
    const auto wcs = led.drain(world, *acq);
    std::vector<std::uint64_t> ids;
    for (const auto& w : wcs) ids.push_back(w.wr_id);
    const std::vector<std::uint64_t> want =
        sig_all ? std::vector<std::uint64_t>{1, 2, 3, 4, 5} : std::vector<std::uint64_t>{5};
    EXPECT_EQ(ids, want);
    EXPECT_TRUE(led.balanced());
  }
}

TEST_P(Ops, ThirtyTwoSendsCompleteInOrderOnBothSides) {
  PairOptions o;
  o.cap = QpCap{32, 32, 1, 1, 0};
  o.cqe = 64;
  SimPair p(config(), o);
  Ledger led;
  for (std::uint64_t i = 0; i < 32; ++i) {
    const Sge rs = p.b.sge(i * 128, 128);
    ASSERT_TRUE(led.post_recv(*p.b.qp, recv_wr(1000 + i, rs)));
  }
  for (std::uint64_t i = 0; i < 32; ++i) {
    std::memset(p.a.buf.data() + i * 128, static_cast<int>('A' + i), i + 1);
    const Sge ss = p.a.sge(i * 128, static_cast<std::uint32_t>(i + 1));
    ASSERT_TRUE(led.post_send(*p.a.qp, send_wr(i, ss)));
  }
  const auto recvs = led.poll_n(p.world, *p.b.cq, 32);
  const auto sends = led.poll_n(p.world, *p.a.cq, 32);
  ASSERT_EQ(recvs.size(), 32u);
  ASSERT_EQ(sends.size(), 32u);
  for (std::uint64_t i = 0; i < 32; ++i) {
    EXPECT_EQ(sends[i].wr_id, i);
    EXPECT_EQ(sends[i].status, WcStatus::success);
    EXPECT_EQ(recvs[i].wr_id, 1000 + i);
    EXPECT_EQ(recvs[i].byte_len, i + 1);
    EXPECT_EQ(p.b.buf[i * 128 + i], static_cast<char>('A' + i));
  }
  EXPECT_TRUE(led.balanced());
}

// ibv_resize_cq on a CQ whose completions wrap around the end of its ring: they stay, oldest
// first, and the CQ then holds as many as the new depth.
TEST_P(Ops, ResizingAWrappedCqKeepsItsCompletionsInOrder) {
  PairOptions o;
  o.cqe = 4;
  o.cap = QpCap{64, 64, 1, 1, 0};
  SimPair p(config(), o);
  Ledger led;
  const int depth = p.a.cq->cqe();
  ASSERT_GE(depth, 5);
  auto take = [&](std::size_t n) {  // exactly n of a's send completions
    std::vector<WorkCompletion> wcs(n);
    wcs.resize(p.a.cq->poll(wcs).count);
    led.record(wcs);
    return wcs;
  };
  const Sge ss = p.a.sge(0, 8);
  std::uint64_t next = 0;
  auto send = [&](int n) {
    for (int i = 0; i < n; ++i) {
      ASSERT_TRUE(led.post_recv(*p.b.qp, recv_wr(1000 + next, p.b.sge(0, 8))));
      ASSERT_TRUE(led.post_send(*p.a.qp, send_wr(next++, ss)));
    }
    EXPECT_EQ(led.poll_n(p.world, *p.b.cq, static_cast<std::size_t>(n)).size(),
              static_cast<std::size_t>(n));
    p.world.run_until_idle();  // the ACKs: the send completions wait in a's CQ
  };
  send(depth - 2);
  EXPECT_EQ(take(static_cast<std::size_t>(depth - 3)).size(),
            static_cast<std::size_t>(depth - 3));  // one left, near the end of the ring
  send(depth - 1);  // the CQ is full now, and wraps
  EXPECT_THROW(p.a.cq->resize(depth - 1), VerbError);
  p.a.cq->resize(depth);
  p.a.cq->resize(4 * depth);
  EXPECT_EQ(p.a.cq->requested_cqe(), 4 * depth);
  EXPECT_GE(p.a.cq->cqe(), 4 * depth);
  send(2 * depth);
  const auto held = take(static_cast<std::size_t>(3 * depth));
  ASSERT_EQ(held.size(), static_cast<std::size_t>(3 * depth));
  for (std::size_t i = 0; i < held.size(); ++i) {
    EXPECT_EQ(held[i].wr_id, static_cast<std::uint64_t>(depth - 3) + i);
    EXPECT_EQ(held[i].status, WcStatus::success);
  }
  EXPECT_TRUE(led.balanced());
}

// Hardware responders coalesce ACKs: a train of back-to-back messages gets one ACK, for the
// last. rxe acknowledges every message (its requester asks for an ACK on each).
TEST_P(Ops, BackToBackMessagesShareOneAckExceptOnRxe) {
  SimPair p(config());
  Ledger led;
  std::vector<SendWr> sends;
  const Sge ss = p.a.sge(0, 8);
  for (std::uint64_t i = 0; i < 8; ++i) {
    ASSERT_TRUE(led.post_recv(*p.b.qp, recv_wr(100 + i, p.b.sge(i * 8, 8))));
    sends.push_back(send_wr(i, ss));
  }
  ASSERT_TRUE(led.post_send(*p.a.qp, sends));
  p.world.run_until_idle();
  const std::string history = p.world.recent_history();
  std::size_t acks = 0;
  for (std::size_t at = history.find(" ack "); at != std::string::npos;
       at = history.find(" ack ", at + 1)) {
    ++acks;
  }
  EXPECT_EQ(acks, is(Profile::rxe) ? 8u : 1u) << history;
  const auto sent = led.drain(p.world, *p.a.cq);
  const auto received = led.drain(p.world, *p.b.cq);
  ASSERT_EQ(sent.size(), 8u);
  ASSERT_EQ(received.size(), 8u);
  for (const auto& wc : sent) EXPECT_EQ(wc.status, WcStatus::success);
  EXPECT_TRUE(led.balanced());
}

// Once every WQE is acknowledged the QP's ACK timer stops: polling an empty CQ then does not
// move virtual time to the timer's deadline (67 ms with the default timeout), so work posted
// right after that poll runs at once. (The timer's event is still in the heap, lazily
// cancelled: step() drops it instead of jumping to it.)
TEST_P(Ops, AnEmptyPollDoesNotWaitForTheAckTimerOfAnIdleQp) {
  SimPair p(config());
  Ledger led;
  const Sge ss = p.a.sge(0, 8);
  ASSERT_TRUE(led.post_recv(*p.b.qp, recv_wr(100, p.b.sge(0, 8))));
  ASSERT_TRUE(led.post_recv(*p.b.qp, recv_wr(101, p.b.sge(8, 8))));
  ASSERT_TRUE(led.post_send(*p.a.qp, send_wr(1, ss)));
  ASSERT_EQ(led.poll_n(p.world, *p.a.cq, 1).size(), 1u);
  ASSERT_EQ(led.poll_n(p.world, *p.b.cq, 1).size(), 1u);
  const std::uint64_t idle_since = p.world.now();
  WorkCompletion wc[1];
  EXPECT_EQ(p.b.cq->poll(wc).count, 0u);  // nothing to come: the timer's event is dropped
  EXPECT_EQ(p.world.now(), idle_since);
  EXPECT_EQ(p.world.pending_events(), 0u);
  ASSERT_TRUE(led.post_send(*p.a.qp, send_wr(2, ss)));
  ASSERT_EQ(led.poll_n(p.world, *p.b.cq, 1).size(), 1u);
  ASSERT_EQ(led.poll_n(p.world, *p.a.cq, 1).size(), 1u);
  EXPECT_LT(p.world.now() - idle_since, 100'000u) << "the second message waited for a timer";
  EXPECT_TRUE(led.balanced());
}

// World::step_until runs an instant only if it is due by the deadline; refusing leaves the
// clock and what runs next as they were (the drop-in's waits ask for one instant at a time).
TEST_P(Ops, StepUntilRunsOnlyWhatIsDueAndChangesNothingWhenItRefuses) {
  auto run = [&](bool refuse_first) {
    SimPair p(config());
    Ledger led;
    const Sge ss = p.a.sge(0, 8);
    for (std::uint64_t i = 0; i < 4; ++i) {
      EXPECT_TRUE(led.post_recv(*p.b.qp, recv_wr(100 + i, p.b.sge(8 * i, 8))));
      EXPECT_TRUE(led.post_send(*p.a.qp, send_wr(i, ss)));
    }
    while (p.world.pending_events() != 0) {
      const std::uint64_t t0 = p.world.now();
      if (refuse_first) {
        EXPECT_FALSE(p.world.step_until(t0)) << "nothing is due at the current instant";
        EXPECT_EQ(p.world.now(), t0);
      }
      if (!p.world.step_until(UINT64_MAX)) break;  // only idle timers were left
      EXPECT_GT(p.world.now(), t0);
    }
    EXPECT_EQ(led.poll_n(p.world, *p.a.cq, 4).size(), 4u);
    EXPECT_EQ(led.poll_n(p.world, *p.b.cq, 4).size(), 4u);
    EXPECT_TRUE(led.balanced());
    return p.world.digest();
  };
  EXPECT_EQ(run(true), run(false));
}

// Posts SENDs 1 and 2 on p.a (receives 100 and 101 on p.b) and runs the world until the first
// has arrived: the second is on the wire behind it, so a coalescing responder left the first's
// ACK to it.
void first_of_two_sends_arrives(SimPair& p, Ledger& led) {
  const Sge ss = p.a.sge(0, 8);
  ASSERT_TRUE(led.post_recv(*p.b.qp, recv_wr(100, p.b.sge(0, 8))));
  ASSERT_TRUE(led.post_recv(*p.b.qp, recv_wr(101, p.b.sge(8, 8))));
  const SendWr sends[] = {send_wr(1, ss), send_wr(2, ss)};
  ASSERT_TRUE(led.post_send(*p.a.qp, sends));
  ASSERT_TRUE(p.world.step());
}

// A message whose ACK was left to the next one is still acknowledged when the responder drops
// that next one (here: it went to ERR in between): only the dropped message fails.
TEST_P(Ops, AnAckLeftToADroppedMessageStillGoesOut) {
  PairOptions o;
  o.connect_options.retry_cnt = 0;
  SimPair p(config(), o);
  Ledger led;
  ASSERT_NO_FATAL_FAILURE(first_of_two_sends_arrives(p, led));
  QpAttr err;
  err.qp_state = QpState::err;
  p.b.qp->modify(err, QpAttrMask::state);
  p.world.run_until_idle();
  expect_completions(led.drain(p.world, *p.a.cq), *p.a.qp,
                     {{1, WcStatus::success}, {2, WcStatus::retry_exc_err}});
  led.drain(p.world, *p.b.cq);
  EXPECT_TRUE(led.balanced());
}

// The ACK a message leaves to the next one belongs to that next message. Here the next one
// arrives stale (its requester went to ERR meanwhile) and is dropped: the ACK owed is void. It
// must not go out later on behalf of another message, or a WRITE the responder never saw
// would complete successfully (sim_random_verbs_test, seed 100915, found it: the responder
// sent it from ERR for the second WRITE of a new connection, the first having been lost).
TEST_P(Ops, AnAckLeftToAStaleMessageIsNotSentForAnother) {
  sim::Config c = config();
  c.faults = sim::FaultPlan::parse("drop psn=500");  // the first WRITE after reconnecting
  PairOptions o;
  o.connect_options.retry_cnt = 0;
  SimPair p(c, o);
  Ledger led;
  ASSERT_NO_FATAL_FAILURE(first_of_two_sends_arrives(p, led));
  QpAttr state;
  state.qp_state = QpState::err;
  p.a.qp->modify(state, QpAttrMask::state);  // the second one goes stale
  led.drain(p.world, *p.a.cq);  // both flushed
  p.b.qp->modify(state, QpAttrMask::state);  // the responder now drops everything
  state.qp_state = QpState::reset;
  p.a.qp->modify(state, QpAttrMask::state);
  connect(*p.a.qp, 500, testing::endpoint_of(p.b, 200), o.connect_options);

  const Sge ws = p.a.sge(64, 8);
  const SendWr writes[] = {rdma_wr(3, WrOpcode::rdma_write, ws, *p.b.mr, 64),
                           rdma_wr(4, WrOpcode::rdma_write, ws, *p.b.mr, 72)};
  ASSERT_TRUE(led.post_send(*p.a.qp, writes));
  // The lost WRITE runs out of retries: nothing may acknowledge it.
  expect_completions(led.drain(p.world, *p.a.cq), *p.a.qp,
                     {{3, WcStatus::retry_exc_err}, {4, WcStatus::wr_flush_err}});
  led.drain(p.world, *p.b.cq);
  EXPECT_TRUE(led.balanced());
}

// A UC send completes when its message leaves (with the later ones, here), so a message a fault
// delays can arrive after the program reused its send queue slot. A real packet carries its
// payload; the simulator reads it from the sender at arrival, and what the slot held is gone:
// such a message is lost rather than delivered with a later WQE's opcode, data and immediate
// (sim_random_verbs_test, seed 603796 with faults at p=0.3, received a SEND twice that way).
TEST_P(Ops, ALateMessageWhoseSendSlotWasReusedIsLost) {
  sim::Config c = config();
  c.faults = sim::FaultPlan::parse("delay psn=100 by=200us");  // the first message
  PairOptions o;
  o.type = QpType::uc;
  o.cap = {2, 16, 1, 1, 0};
  SimPair p(c, o);
  Ledger led;
  constexpr std::uint32_t kLater = 8;  // more than any profile's send queue holds
  for (std::uint32_t i = 0; i < 2 + kLater; ++i) {
    std::memset(p.a.buf.data() + 8 * i, static_cast<int>(0x40 + i), 8);
    ASSERT_TRUE(led.post_recv(*p.b.qp, recv_wr(100 + i, p.b.sge(8 * i, 8))));
  }
  std::vector<Sge> sges(2 + kLater);
  auto message = [&](std::uint32_t i) {
    sges[i] = p.a.sge(8 * i, 8);
    SendWr wr = send_wr(i, sges[i], WrOpcode::send_with_imm);
    wr.imm_data = i;
    return wr;
  };
  const SendWr first[] = {message(0), message(1)};
  ASSERT_TRUE(led.post_send(*p.a.qp, first));
  EXPECT_EQ(led.poll_n(p.world, *p.a.cq, 2).size(), 2u);  // both done: the second has left
  for (std::uint32_t i = 2; i < 2 + kLater; ++i) {
    ASSERT_TRUE(led.post_send(*p.a.qp, message(i)));
    EXPECT_EQ(led.poll_n(p.world, *p.a.cq, 1).size(), 1u);
  }
  const auto received = led.drain(p.world, *p.b.cq);
  ASSERT_EQ(received.size(), 1 + kLater) << "the first message is lost, the others arrive once";
  for (std::size_t k = 0; k < received.size(); ++k) {
    const WorkCompletion& wc = received[k];
    EXPECT_EQ(wc.status, WcStatus::success);
    EXPECT_EQ(wc.imm_data, k + 1);
    const auto at = static_cast<std::size_t>(wc.wr_id - 100) * 8;
    EXPECT_EQ(static_cast<unsigned char>(p.b.buf[at]), 0x40 + wc.imm_data)
        << "receive " << wc.wr_id << " holds another message's data";
  }
  led.drain(p.world, *p.a.cq);
  led.drain(p.world, *p.b.cq);
}

// Hardware profiles refuse the post (EINVAL, the API's promise); rxe accepts it and the WR fails
// in its completion with LOC_QP_OP_ERR, taking the QP to ERR (measured).
TEST_P(Ops, OpcodesAQpTypeCannotCarryFail) {
  for (const QpType t : {QpType::uc, QpType::ud}) {
    for (const WrOpcode op :
         {WrOpcode::rdma_read, WrOpcode::atomic_fetch_and_add, WrOpcode::rdma_write}) {
      if (t == QpType::uc && op == WrOpcode::rdma_write) continue;
      SCOPED_TRACE(std::string(to_string(t)) + " " + std::string(to_string(op)));
      PairOptions o;
      o.type = t;
      SimPair p(config(), o);
      const Sge ls = p.a.sge(0, 8);
      Ledger led;
      SendWr wr = rdma_wr(1, op, ls, *p.b.mr, 0);
      const std::unique_ptr<AddressHandle> ah = t == QpType::ud ? address_to_b(p, wr) : nullptr;
      const PostResult r = led.post_send(*p.a.qp, wr);
      if (!is(Profile::rxe)) {
        EXPECT_EQ(r.error(), errno_code(EINVAL));
        EXPECT_EQ(r.posted, 0u);
        continue;
      }
      EXPECT_FALSE(r.error()) << r.reason;
      const WorkCompletion w = only(led.poll_n(p.world, *p.a.cq, 1));
      EXPECT_EQ(w.status, WcStatus::loc_qp_op_err);
      EXPECT_EQ(p.a.qp->state(), QpState::err);
      EXPECT_TRUE(led.balanced());
    }
  }
}

// UC and UD: a SEND whose MR is deregistered while it is on the wire is not read (its buffer
// may be freed already); it is lost and its WR fails, with the status of a send whose key is
// unknown (rxe: LOC_QP_OP_ERR), as on RC (sim_errors_test.cpp). Re-registered so that it still
// covers the bytes, the MR leaves the message alone.
TEST_P(Ops, UnreliableSendWhoseMrGoesOnTheWireIsLostAndFails) {
  const WcStatus bad_lkey = is(Profile::rxe) ? WcStatus::loc_qp_op_err : WcStatus::loc_prot_err;
  for (const QpType t : {QpType::uc, QpType::ud}) {
    for (const bool reregistered : {false, true}) {
      SCOPED_TRACE(std::string(to_string(t)) + (reregistered ? ", re-registered" : ", deregistered"));
      PairOptions o;
      o.type = t;
      o.connect_options.qkey = 0x11111111;
      SimPair p(config(), o);
      Ledger led;
      const Sge ls = p.a.sge(0, 16);
      const Sge rs = p.b.sge(0, 256);
      ASSERT_TRUE(led.post_recv(*p.b.qp, recv_wr(201, rs)));
      SendWr wr = send_wr(1, ls);
      const std::unique_ptr<AddressHandle> ah = t == QpType::ud ? address_to_b(p, wr) : nullptr;
      ASSERT_TRUE(led.post_send(*p.a.qp, wr));
      if (reregistered) {
        if (is(Profile::rxe)) continue;  // rxe has no rereg_mr
        MrChange change;
        change.access = Access::local_write;
        p.a.mr->rereg(change);
        EXPECT_EQ(only(led.poll_n(p.world, *p.a.cq, 1)).status, WcStatus::success);
        EXPECT_EQ(led.drain(p.world, *p.b.cq).size(), 1u) << "the receiver did not get it";
        continue;
      }
      destroy(p.a.mr);
      const WorkCompletion w = only(led.poll_n(p.world, *p.a.cq, 1));
      EXPECT_EQ(w.status, bad_lkey) << to_string(w.status);
      EXPECT_EQ(p.a.qp->state(), QpState::err);
      EXPECT_TRUE(led.drain(p.world, *p.b.cq).empty()) << "the receiver got it";
    }
  }
}

TEST_P(Ops, UcWriteLandsAndASendWithoutReceiveIsLostWithoutRnr) {
  PairOptions o;
  o.type = QpType::uc;
  SimPair p(config(), o);
  Ledger led;
  std::memcpy(p.a.buf.data(), "uc write", 9);
  const Sge ls = p.a.sge(0, 9);
  ASSERT_TRUE(led.post_send(*p.a.qp, rdma_wr(1, WrOpcode::rdma_write, ls, *p.b.mr, 512)));
  const WorkCompletion w = only(led.poll_n(p.world, *p.a.cq, 1));
  EXPECT_EQ(w.status, WcStatus::success);
  EXPECT_EQ(w.opcode, WcOpcode::rdma_write);
  EXPECT_STREQ(p.b.buf.data() + 512, "uc write");

  ASSERT_TRUE(led.post_send(*p.a.qp, send_wr(2, ls)));  // no receive posted: dropped
  EXPECT_EQ(only(led.poll_n(p.world, *p.a.cq, 1)).status, WcStatus::success);
  EXPECT_TRUE(led.drain(p.world, *p.b.cq).empty());
  const Sge rs = p.b.sge(0, 64);
  ASSERT_TRUE(led.post_recv(*p.b.qp, recv_wr(201, rs)));
  ASSERT_TRUE(led.post_send(*p.a.qp, send_wr(3, ls)));
  const WorkCompletion r = only(led.poll_n(p.world, *p.b.cq, 1));
  EXPECT_EQ(r.wr_id, 201u);
  EXPECT_EQ(r.byte_len, 9u);
  led.drain(p.world, *p.a.cq);
  EXPECT_EQ(p.a.qp->state(), QpState::rts);
  EXPECT_EQ(p.b.qp->state(), QpState::rts);
  EXPECT_TRUE(led.balanced());
}

// ---------------------------------------------------------------------------------------------
// UD

struct UdPair : SimPair {
  explicit UdPair(sim::Config c)
      : SimPair(c, [] {
          PairOptions o;
          o.type = QpType::ud;
          return o;
        }()) {
    AhAttr ah;
    ah.is_global = true;
    ah.grh.dgid = b.ctx->query_gid(1, 1);
    ah.grh.sgid_index = 1;
    ah.port_num = 1;
    to_b = a.pd->create_ah(ah);
  }
  SendWr ud_send(std::uint64_t id, const Sge& sge, std::uint32_t qkey = 0x11111111) const {
    SendWr wr = send_wr(id, sge);
    wr.ah = to_b.get();
    wr.remote_qpn = b.qp->qp_num();
    wr.remote_qkey = qkey;
    return wr;
  }
  std::unique_ptr<AddressHandle> to_b;
};

TEST_P(Ops, UdReceiveStartsWithA40ByteGrh) {
  UdPair p(config());
  Ledger led;
  const Sge rs = p.b.sge(0, 40 + 100);
  ASSERT_TRUE(led.post_recv(*p.b.qp, recv_wr(201, rs)));
  for (int i = 0; i < 100; ++i) p.a.buf[static_cast<std::size_t>(i)] = static_cast<char>(i);
  const Sge ss = p.a.sge(0, 100);
  SendWr wr = p.ud_send(1, ss);
  wr.opcode = WrOpcode::send_with_imm;
  wr.imm_data = 77;
  ASSERT_TRUE(led.post_send(*p.a.qp, wr));
  const WorkCompletion r = only(led.poll_n(p.world, *p.b.cq, 1));
  EXPECT_EQ(r.status, WcStatus::success);
  EXPECT_EQ(r.opcode, WcOpcode::recv);
  EXPECT_EQ(r.byte_len, 140u) << "byte_len counts the GRH";
  EXPECT_EQ(r.src_qp, p.a.qp->qp_num());
  EXPECT_EQ(r.wc_flags, WcFlags::grh | WcFlags::with_imm);
  EXPECT_EQ(r.imm_data, 77u);
  EXPECT_EQ(std::memcmp(p.b.buf.data() + 40, p.a.buf.data(), 100), 0);
  // RoCE v2 over IPv4: the first 20 bytes are unused, the IPv4 header follows.
  const auto* grh = reinterpret_cast<const unsigned char*>(p.b.buf.data());
  for (int i = 0; i < 20; ++i) EXPECT_EQ(grh[i], 0) << "byte " << i;
  EXPECT_EQ(grh[20], 0x45) << "IPv4, 20-byte header";
  EXPECT_EQ(grh[20 + 9], 17) << "UDP";
  const unsigned char src[4] = {10, 0, 0, 1}, dst[4] = {10, 0, 1, 1};
  EXPECT_EQ(std::memcmp(grh + 20 + 12, src, 4), 0);
  EXPECT_EQ(std::memcmp(grh + 20 + 16, dst, 4), 0);
  std::uint32_t sum = 0;
  for (int i = 0; i < 20; i += 2) sum += static_cast<std::uint32_t>(grh[20 + i] << 8 | grh[21 + i]);
  while (sum > 0xffff) sum = (sum & 0xffff) + (sum >> 16);
  EXPECT_EQ(sum, 0xffffu) << "IPv4 header checksum";
  const WorkCompletion s = only(led.poll_n(p.world, *p.a.cq, 1));
  EXPECT_EQ(s.status, WcStatus::success);
  EXPECT_EQ(s.opcode, WcOpcode::send);
  EXPECT_TRUE(led.balanced());
}

TEST_P(Ops, UdWithTheWrongQkeyIsDroppedSilently) {
  UdPair p(config());
  Ledger led;
  const Sge rs = p.b.sge(0, 40 + 64);
  ASSERT_TRUE(led.post_recv(*p.b.qp, recv_wr(201, rs)));
  std::memcpy(p.a.buf.data(), "wrong", 6);
  std::memcpy(p.a.buf.data() + 64, "right", 6);
  const Sge wrong = p.a.sge(0, 6), right = p.a.sge(64, 6);
  ASSERT_TRUE(led.post_send(*p.a.qp, p.ud_send(1, wrong, 0x22222222)));
  EXPECT_EQ(only(led.poll_n(p.world, *p.a.cq, 1)).status, WcStatus::success);
  EXPECT_TRUE(led.drain(p.world, *p.b.cq).empty());
  ASSERT_TRUE(led.post_send(*p.a.qp, p.ud_send(2, right)));
  const WorkCompletion r = only(led.poll_n(p.world, *p.b.cq, 1));
  EXPECT_EQ(r.wr_id, 201u) << "the dropped message consumed no receive";
  EXPECT_STREQ(p.b.buf.data() + 40, "right");
  led.drain(p.world, *p.a.cq);
  EXPECT_EQ(p.b.qp->state(), QpState::rts);
  EXPECT_TRUE(led.balanced());
}

// ---------------------------------------------------------------------------------------------
// SRQ

// ibv_modify_srq's IBV_SRQ_MAX_WR, which the drop-in offers on the rxe profile
// (sim::resize_srq): an SRQ whose receives wrap around its ring keeps them, oldest first; the
// other profiles refuse (EINVAL), as mlx5 does.
TEST_P(Ops, ResizingAWrappedSrqKeepsItsReceivesInOrder) {
  sim::World world(config());
  Node a(world, "sim0"), b(world, "sim1");
  auto acq = a.ctx->create_cq(64), bcq = b.ctx->create_cq(64);
  auto srq = b.pd->create_srq(SrqInitAttr{4, 1, 0});
  const std::uint32_t depth = srq->query().max_wr;
  if (!is(Profile::rxe)) {
    EXPECT_TRUE(testing::throws_verb_error([&] { sim::resize_srq(*srq, 4 * depth); },
                                           "ibv_modify_srq", EINVAL));
    return;
  }
  const QpCap cap{16, 16, 1, 1, 0};
  auto qa = a.make_qp(*acq, *acq, cap);
  auto qb = b.make_qp(*bcq, *bcq, cap, QpType::rc, false, srq.get());
  testing::connect_qps(a, *qa, b, *qb);
  Ledger led;
  const Sge rs = b.sge(0, 64);
  const Sge ss = a.sge(0, 8);
  std::uint64_t next_recv = 100;
  std::uint64_t next_send = 1;
  auto post = [&](std::uint32_t n) {
    for (std::uint32_t i = 0; i < n; ++i) {
      const RecvWr wr = recv_wr(next_recv++, rs);
      ASSERT_TRUE(led.post_recv(*srq, std::span(&wr, 1)));
    }
  };
  auto take = [&](std::uint32_t n) {  // n messages; the wr_ids of the receives they took
    for (std::uint32_t i = 0; i < n; ++i) EXPECT_TRUE(led.post_send(*qa, send_wr(next_send++, ss)));
    std::vector<std::uint64_t> ids;
    for (const WorkCompletion& w : led.poll_n(world, *bcq, n)) ids.push_back(w.wr_id);
    EXPECT_EQ(led.poll_n(world, *acq, n).size(), n);
    return ids;
  };
  post(depth);
  EXPECT_EQ(take(depth - 1).size(), depth - 1);  // one left, at the end of the ring
  post(depth - 1);                                // full again, wrapped
  EXPECT_TRUE(testing::throws_verb_error([&] { sim::resize_srq(*srq, 1); }, "ibv_modify_srq",
                                         EINVAL));
  sim::resize_srq(*srq, 4 * depth);
  EXPECT_GE(srq->query().max_wr, 4 * depth);
  post(2 * depth);
  const std::vector<std::uint64_t> ids = take(3 * depth);
  ASSERT_EQ(ids.size(), 3u * depth);
  for (std::size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(ids[i], 100 + depth - 1 + i);
  EXPECT_TRUE(led.balanced());
}

TEST_P(Ops, SrqFeedsTwoQpsAndRaisesTheLimitEventOnce) {
  sim::World world(config());
  Node a(world, "sim0"), b(world, "sim1");
  auto acq = a.ctx->create_cq(64), bcq = b.ctx->create_cq(64);
  auto srq = b.pd->create_srq(SrqInitAttr{16, 1, 0});
  const QpCap cap{16, 16, 1, 1, 0};
  auto a1 = a.make_qp(*acq, *acq, cap), a2 = a.make_qp(*acq, *acq, cap);
  auto b1 = b.make_qp(*bcq, *bcq, cap, QpType::rc, false, srq.get());
  auto b2 = b.make_qp(*bcq, *bcq, cap, QpType::rc, false, srq.get());
  testing::connect_qps(a, *a1, b, *b1);
  testing::connect_qps(a, *a2, b, *b2);
  EXPECT_EQ(b1->query().cap.max_recv_wr, 0u);
  const Sge rs = b.sge(0, 64);
  EXPECT_EQ(b1->post_recv(recv_wr(1, rs)).error(), errno_code(EINVAL)) << "receives go to the SRQ";

  Ledger led;
  std::vector<RecvWr> recvs;
  std::vector<Sge> sges;
  for (std::uint64_t i = 0; i < 8; ++i) sges.push_back(b.sge(i * 64, 64));
  for (std::uint64_t i = 0; i < 8; ++i) recvs.push_back(recv_wr(200 + i, sges[i]));
  ASSERT_TRUE(led.post_recv(*srq, recvs));
  srq->modify(SrqAttr{0, 0, 4}, SrqAttrMask::limit);
  EXPECT_EQ(srq->query().srq_limit, 4u);
  EXPECT_TRUE(async_events(*b.ctx).empty());

  const Sge ss = a.sge(0, 8);
  std::uint64_t id = 1;
  auto send_from = [&](QueuePair& qp, int n) {
    for (int i = 0; i < n; ++i) ASSERT_TRUE(led.post_send(qp, send_wr(id++, ss)));
  };
  send_from(*a1, 3);
  send_from(*a2, 1);
  auto got = led.poll_n(world, *bcq, 4);
  EXPECT_TRUE(async_events(*b.ctx).empty()) << "4 left is not below the limit of 4";
  send_from(*a2, 1);
  auto more = led.poll_n(world, *bcq, 1);
  got.insert(got.end(), more.begin(), more.end());
  ASSERT_EQ(got.size(), 5u);
  int on_b1 = 0, on_b2 = 0;
  for (const auto& w : got) {
    EXPECT_EQ(w.status, WcStatus::success);
    on_b1 += w.qp_num == b1->qp_num();
    on_b2 += w.qp_num == b2->qp_num();
  }
  EXPECT_EQ(on_b1, 3);
  EXPECT_EQ(on_b2, 2);
  auto events = async_events(*b.ctx);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].type, AsyncEventType::srq_limit_reached);
  EXPECT_EQ(events[0].srq, srq.get());
  EXPECT_EQ(srq->query().srq_limit, 0u) << "the limit disarms when it fires";

  send_from(*a1, 2);  // 1 receive left: no second event while disarmed
  EXPECT_EQ(led.poll_n(world, *bcq, 2).size(), 2u);
  EXPECT_TRUE(async_events(*b.ctx).empty());
  for (std::uint64_t i = 8; i < 12; ++i) {
    sges.push_back(b.sge(i * 64, 64));
  }
  for (std::uint64_t i = 8; i < 12; ++i) {
    ASSERT_TRUE(led.post_recv(*srq, std::span(&recvs.emplace_back(recv_wr(200 + i, sges[i])), 1)));
  }
  srq->modify(SrqAttr{0, 0, 4}, SrqAttrMask::limit);  // re-armed with 5 posted
  send_from(*a2, 2);
  EXPECT_EQ(led.poll_n(world, *bcq, 2).size(), 2u);
  events = async_events(*b.ctx);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].type, AsyncEventType::srq_limit_reached);
  send_from(*a1, 3);  // use up the rest
  EXPECT_EQ(led.poll_n(world, *bcq, 3).size(), 3u);
  EXPECT_TRUE(async_events(*b.ctx).empty());
  led.drain(world, *acq);
  EXPECT_TRUE(led.balanced());
}

INSTANTIATE_TEST_SUITE_P(Profiles, Ops,
                         ::testing::Values(Profile::strict, Profile::rxe, Profile::mlx5),
                         testing::profile_name);

}  // namespace
}  // namespace verbsim
