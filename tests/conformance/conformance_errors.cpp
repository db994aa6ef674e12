// Queue overflow (SQ, RQ, SRQ, CQ) and the error paths: RNR, transport retries, remote access,
// length errors, and flushing.
#include <cerrno>

#include "conformance.hpp"

namespace verbsim::conformance {
namespace {

class Overflow : public Conformance {
 protected:
  // A pair whose sends from `a` stay outstanding: `b` posts no receive and RNR-NAKs every 655 ms
  // (min_rnr_timer 0), `a` retries forever.
  Pair blocked_pair(QpCap cap) {
    PairOptions o;
    o.cap = cap;
    o.b.min_rnr_timer = 0;
    return make_pair(o);
  }
};
class Errors : public Conformance {};

constexpr std::size_t kSrc = 0;
constexpr std::size_t kDst = 16384;

// ---------------------------------------------------------------------------------------------
// Send, receive and shared receive queues

TEST_P(Overflow, SendQueueOneByOne) {
  Pair p = blocked_pair({4, 4, 1, 1, 0});
  const std::uint32_t depth = expect().wq_depth(4);
  const Sge s = sge(kSrc, 8);
  std::uint32_t accepted = 0;
  PostResult last;
  for (std::uint64_t i = 0; i < depth + 1; ++i) {
    last = p.a->post_send(send_wr(i, &s));
    if (last.error()) break;
    ++accepted;
  }
  CHECK_OBS("accepted", accepted, depth);
  CHECK_ERR("next", last.error(), ENOMEM);
  CHECK_OBS("query.max_send_wr", p.a->query().cap.max_send_wr, depth);
  move_to(*p.a, QpState::err);
  CHECK_OBS("flushed", poll_n(*p.cq_a, depth).size(), depth);
}

TEST_P(Overflow, SendQueueChain) {
  Pair p = blocked_pair({4, 4, 1, 1, 0});
  const std::uint32_t depth = expect().wq_depth(4);
  const Sge s = sge(kSrc, 8);
  std::vector<SendWr> wrs;
  for (std::uint64_t i = 0; i < 10; ++i) wrs.push_back(send_wr(i, &s));
  const PostResult r = p.a->post_send(wrs);
  CHECK_ERR("post", r.error(), ENOMEM);
  CHECK_OBS("posted", r.posted, depth);
  move_to(*p.a, QpState::err);
  CHECK_OBS("flushed", poll_n(*p.cq_a, depth).size(), depth);
}

TEST_P(Overflow, SendSlotFreesWithoutPolling) {
  Pair p = make_pair(PairOptions::with(QpCap{4, 16, 1, 1, 0}));
  const std::uint32_t depth = expect().wq_depth(4);
  const Sge s = sge(kSrc, 8);
  const Sge r = sge(kDst, 8);
  for (std::uint64_t i = 0; i < depth + 1; ++i) ASSERT_FALSE(p.b->post_recv(recv_wr(i, &r)).error());
  for (std::uint64_t i = 0; i < depth; ++i) ASSERT_FALSE(p.a->post_send(send_wr(i, &s)).error());
  CHECK_OBS("delivered", poll_n(*p.cq_b, depth).size(), depth);
  pass_time(std::chrono::milliseconds(50));  // the sender's completions arrive, unpolled
  const PostResult next = p.a->post_send(send_wr(99, &s));
  CHECK_ERR("post_after_completion", next.error(), expect().slot_frees_without_poll ? 0 : ENOMEM);
  const std::size_t total = depth + (next.error() ? 0 : 1);
  CHECK_OBS("completions", poll_n(*p.cq_a, total).size(), total);
}

TEST_P(Overflow, RecvQueueOneByOne) {
  Pair p = make_pair(PairOptions::with(QpCap{4, 4, 1, 1, 0}));
  const std::uint32_t depth = expect().wq_depth(4);
  const Sge r = sge(kDst, 8);
  std::uint32_t accepted = 0;
  PostResult last;
  for (std::uint64_t i = 0; i < depth + 1; ++i) {
    last = p.b->post_recv(recv_wr(i, &r));
    if (last.error()) break;
    ++accepted;
  }
  CHECK_OBS("accepted", accepted, depth);
  CHECK_ERR("next", last.error(), ENOMEM);
  CHECK_OBS("query.max_recv_wr", p.b->query().cap.max_recv_wr, depth);
}

TEST_P(Overflow, RecvQueueChain) {
  Pair p = make_pair(PairOptions::with(QpCap{4, 4, 1, 1, 0}));
  const Sge r = sge(kDst, 8);
  std::vector<RecvWr> wrs;
  for (std::uint64_t i = 0; i < 10; ++i) wrs.push_back(recv_wr(i, &r));
  const PostResult res = p.b->post_recv(wrs);
  CHECK_ERR("post", res.error(), ENOMEM);
  CHECK_OBS("posted", res.posted, expect().wq_depth(4));
}

TEST_P(Overflow, SharedReceiveQueue) {
  auto srq = pd().create_srq(SrqInitAttr{4, 1, 0});
  const std::uint32_t depth = srq->query().max_wr;
  CHECK_OBS("query.max_wr", depth, Expect::cq_depth(4));
  const Sge r = sge(kDst, 8);
  std::vector<RecvWr> wrs;
  for (std::uint64_t i = 0; i < 10; ++i) wrs.push_back(recv_wr(i, &r));
  const PostResult res = srq->post_recv(wrs);
  CHECK_ERR("post", res.error(), ENOMEM);
  CHECK_OBS("posted", res.posted, depth);
  const PostResult more = srq->post_recv(recv_wr(50, &r));
  CHECK_ERR("post_full", more.error(), ENOMEM);
}

TEST_P(Overflow, SharedReceiveQueueLimits) {
  const auto above = static_cast<std::uint32_t>(ctx().query_device().max_srq_wr) + 1;
  CHECK_ERR("max_wr_above", verb_errno([&] { (void)pd().create_srq(SrqInitAttr{above, 1, 0}); }), EINVAL);
  const auto sge_above = static_cast<std::uint32_t>(ctx().query_device().max_srq_sge) + 1;
  CHECK_ERR("max_sge_above", verb_errno([&] { (void)pd().create_srq(SrqInitAttr{8, sge_above, 0}); }), EINVAL);
  auto srq = pd().create_srq(SrqInitAttr{8, 1, 0});
  const Sge two[] = {sge(kDst, 8), sge(kDst + 8, 8)};
  RecvWr wr;
  wr.sg_list = two;
  const PostResult res = srq->post_recv(wr);
  CHECK_ERR("too_many_sges", res.error(), EINVAL);
}

TEST_P(Overflow, SharedReceiveQueueFeedsTwoQps) {
  auto srq = pd().create_srq(SrqInitAttr{8, 1, 0});
  auto cqa = make_cq(16);
  auto cqb = make_cq(16);
  auto a1 = make_qp(*cqa, *cqa);
  auto a2 = make_qp(*cqa, *cqa);
  auto b1 = make_qp(*cqb, *cqb, QpCap{4, 0, 1, 1, 0}, QpType::rc, srq.get());
  auto b2 = make_qp(*cqb, *cqb, QpCap{4, 0, 1, 1, 0}, QpType::rc, srq.get());
  connect_pair(*a1, *b1);
  connect_pair(*a2, *b2);
  const Sge r = sge(kDst, 64);
  for (std::uint64_t i = 0; i < 3; ++i) ASSERT_FALSE(srq->post_recv(recv_wr(10 + i, &r)).error());
  const Sge s = sge(kSrc, 16);
  ASSERT_FALSE(a1->post_send(send_wr(1, &s)).error());
  const auto w1 = poll_n(*cqb, 1);
  ASSERT_FALSE(a2->post_send(send_wr(2, &s)).error());
  const auto w2 = poll_n(*cqb, 1);
  ASSERT_EQ(w1.size() + w2.size(), 2u);
  CHECK_OBS("first", describe(w1), "SUCCESS/RECV/16");
  CHECK_OBS("first_ok", w1[0].wr_id == 10 && w1[0].qp_num == b1->qp_num(), true);
  CHECK_OBS("second_ok", w2[0].wr_id == 11 && w2[0].qp_num == b2->qp_num(), true);
  CHECK_OBS("senders", poll_n(*cqa, 2).size(), 2);
}

// ---------------------------------------------------------------------------------------------
// Completion queue overrun

TEST_P(Overflow, SendCqOverrun) {
  auto scq = make_cq(4);
  auto rcq = make_cq(64);
  auto a = make_qp(*scq, *scq, QpCap{32, 4, 1, 1, 0});
  auto b = make_qp(*rcq, *rcq, QpCap{4, 32, 1, 1, 0});
  connect_pair(*a, *b);
  CHECK_OBS("cqe", scq->cqe(), 7);
  const Sge s = sge(kSrc, 8);
  const Sge r = sge(kDst, 8);
  for (std::uint64_t i = 0; i < 25; ++i) ASSERT_FALSE(b->post_recv(recv_wr(i, &r)).error());
  std::vector<SendWr> wrs;
  for (std::uint64_t i = 0; i < 24; ++i) wrs.push_back(send_wr(i, &s));
  ASSERT_FALSE(a->post_send(wrs).error());
  (void)poll_n(*rcq, 24);  // everything was delivered (or the sender failed)
  pass_time(std::chrono::milliseconds(50));
  const auto events = take_async_events();
  const bool drops = expect().cq_overrun_drops;
  CHECK_OBS("events", events.size(), drops ? 17u : 1u);
  CHECK_OBS("event_type", events.empty() ? "none" : obs_str(events[0].type), AsyncEventType::cq_err);
  CHECK_OBS("sender_state", a->state(), drops ? QpState::rts : QpState::err);
  const auto kept = poll_quiet(*scq);
  CHECK_OBS("kept", kept.size(), 7);
  bool ok = true;
  for (std::size_t i = 0; i < kept.size(); ++i) ok = ok && kept[i].status == WcStatus::success && kept[i].wr_id == i;
  CHECK_OBS("kept_first_seven_ok", ok, true);
  // Drained, the CQ takes completions again (rxe); a CQ in error stays silent.
  const PostResult again = a->post_send(send_wr(100, &s));
  CHECK_ERR("post_after", again.error(), 0);
  const auto after = drops ? poll_n(*scq, 1) : poll_quiet(*scq);
  CHECK_OBS("after", describe(after), drops ? "SUCCESS/SEND/8" : "none");
}

TEST_P(Overflow, IgnoreOverrunCq) {
  std::unique_ptr<CompletionQueue> scq;
  const int err =
      verb_errno([&] { scq = ctx().create_cq(4, nullptr, 0, CqCreateFlags::ignore_overrun); });
  CHECK_ERR("create", err, expect().ignore_overrun_create);
  if (err != 0) return;
  auto rcq = make_cq(64);
  auto a = make_qp(*scq, *scq, QpCap{32, 4, 1, 1, 0});
  auto b = make_qp(*rcq, *rcq, QpCap{4, 32, 1, 1, 0});
  connect_pair(*a, *b);
  const Sge s = sge(kSrc, 8);
  const Sge r = sge(kDst, 8);
  for (std::uint64_t i = 0; i < 24; ++i) ASSERT_FALSE(b->post_recv(recv_wr(i, &r)).error());
  std::vector<SendWr> wrs;
  for (std::uint64_t i = 0; i < 24; ++i) wrs.push_back(send_wr(i, &s));
  ASSERT_FALSE(a->post_send(wrs).error());
  (void)poll_n(*rcq, 24);
  pass_time(std::chrono::milliseconds(50));
  CHECK_OBS("events", describe(take_async_events()), "none");
  CHECK_OBS("sender_state", a->state(), QpState::rts);
  // What a full CQ that ignores overrun holds is the provider's business (the simulator keeps
  // the newest); that it holds at most its depth, all successes, is not.
  const auto kept = poll_quiet(*scq);
  bool ok = !kept.empty() && kept.size() <= static_cast<std::size_t>(scq->cqe());
  for (const WorkCompletion& wc : kept) ok = ok && wc.status == WcStatus::success;
  CHECK_OBS("kept_at_most_cqe_all_success", ok, true);
  CHECK_ERR("post_after", a->post_send(send_wr(100, &s)).error(), 0);
  ASSERT_FALSE(b->post_recv(recv_wr(100, &r)).error());
  CHECK_OBS("after", describe(poll_n(*scq, 1)), "SUCCESS/SEND/8");
}

TEST_P(Overflow, RecvCqOverrun) {
  auto scq = make_cq(64);
  auto rcq = make_cq(4);
  auto a = make_qp(*scq, *scq, QpCap{32, 4, 1, 1, 0});
  auto b = make_qp(*rcq, *rcq, QpCap{4, 32, 1, 1, 0});
  ConnectOptions oa;
  oa.timeout = 12;  // 16.8 ms
  oa.retry_cnt = 1;
  connect_pair(*a, *b, oa);
  const Sge s = sge(kSrc, 8);
  const Sge r = sge(kDst, 8);
  for (std::uint64_t i = 0; i < 12; ++i) ASSERT_FALSE(b->post_recv(recv_wr(i, &r)).error());
  for (std::uint64_t i = 0; i < 12; ++i) {
    ASSERT_FALSE(a->post_send(send_wr(i, &s)).error());
  }
  const auto sent = poll_n(*scq, 12);
  pass_time(std::chrono::milliseconds(200));
  // rxe: one CQ_ERR for the lost receive and one for each receive flushed behind it.
  std::string want_events = "CQ_ERR";
  if (expect().cq_overrun_drops) {
    for (int i = 0; i < 4; ++i) want_events += ",CQ_ERR";
  }
  CHECK_OBS("events", describe(take_async_events()), want_events);
  CHECK_OBS("receiver_state", b->state(), QpState::err);
  CHECK_OBS("kept", poll_quiet(*rcq).size(), 7);
  CHECK_OBS("sender", summary(sent),
            expect().recv_cq_overrun_acked ? "8*SUCCESS,RETRY_EXC_ERR,3*WR_FLUSH_ERR"
                                           : "7*SUCCESS,RETRY_EXC_ERR,4*WR_FLUSH_ERR");
}

// ---------------------------------------------------------------------------------------------
// RNR and transport retries

TEST_P(Errors, RnrRetryExceeded) {
  PairOptions o;
  o.a.rnr_retry = 0;
  Pair p = make_pair(o);
  const Sge s = sge(kSrc, 32);
  const SendWr wrs[] = {send_wr(1, &s), send_wr(2, &s)};
  CHECK_ERR("post", p.a->post_send(wrs).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 2)), err_wc(WcStatus::rnr_retry_exc_err, WcOpcode::send, 32) + "," +
                                                     err_wc(WcStatus::wr_flush_err, WcOpcode::send, 32));
  CHECK_OBS("sender_state", wait_state(*p.a, QpState::err), QpState::err);
  CHECK_OBS("receiver_state", p.b->state(), QpState::rts);
  pass_time(std::chrono::milliseconds(50));
  CHECK_OBS("async", describe(take_async_events()), "none");
}

TEST_P(Errors, RnrRetryCounted) {
  PairOptions o;
  o.a.rnr_retry = 3;
  o.b.min_rnr_timer = 1;  // 0.01 ms
  Pair p = make_pair(o);
  const Sge s = sge(kSrc, 32);
  const std::optional<std::uint64_t> before = rnr_naks_received();
  CHECK_ERR("post", p.a->post_send(send_wr(1, &s)).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 1)), err_wc(WcStatus::rnr_retry_exc_err, WcOpcode::send, 32));
  CHECK_OBS("sender_state", wait_state(*p.a, QpState::err), QpState::err);
  // The first attempt and its three retries each met an RNR NAK.
  if (const std::optional<std::uint64_t> after = rnr_naks_received(); before && after) {
    CHECK_OBS("rnr_naks_received", *after - *before, 4u);
  }
}

TEST_P(Errors, RnrThenSuccess) {
  PairOptions o;
  o.b.min_rnr_timer = 1;
  Pair p = make_pair(o);
  const Sge s = sge(kSrc, 32);
  CHECK_ERR("post", p.a->post_send(send_wr(1, &s)).error(), 0);
  CHECK_OBS("waiting", describe(poll_quiet(*p.cq_a)), "none");
  const Sge r = sge(kDst, 64);
  ASSERT_FALSE(p.b->post_recv(recv_wr(2, &r)).error());
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 1)), "SUCCESS/SEND/32");
  CHECK_OBS("receiver", describe(poll_n(*p.cq_b, 1)), "SUCCESS/RECV/32");
  CHECK_OBS("sender_state", p.a->state(), QpState::rts);
}

TEST_P(Errors, RnrOnWriteWithImmediate) {
  PairOptions o;
  o.a.rnr_retry = 0;
  Pair p = make_pair(o);
  const Sge s = sge(kSrc, 16);
  SendWr wr = rdma_wr(1, WrOpcode::rdma_write_with_imm, &s, mr().address(kDst), mr().rkey());
  CHECK_ERR("post", p.a->post_send(wr).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 1)), err_wc(WcStatus::rnr_retry_exc_err, WcOpcode::rdma_write, 16));
}

TEST_P(Errors, RetryExceededToMissingQp) {
  auto cq = make_cq(16);
  ConnectOptions o;
  o.timeout = 12;
  o.retry_cnt = 2;
  auto a = qp_to_missing_peer(*cq, o);
  const Sge s = sge(kSrc, 16);
  CHECK_ERR("post", a->post_send(send_wr(1, &s)).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*cq, 1)), err_wc(WcStatus::retry_exc_err, WcOpcode::send, 16));
  CHECK_OBS("sender_state", wait_state(*a, QpState::err), QpState::err);
}

// An RC QP connected to a UC QP: the UC QP drops what the RC QP sends (the QP types differ),
// stays in RTS, and the sender runs out of retries.
TEST_P(Errors, RcConnectedToUcRetriesOut) {
  auto cq = make_cq(16);
  auto a = make_qp(*cq, *cq);
  auto b = make_qp(*cq, *cq, QpCap{16, 16, 4, 4, 0}, QpType::uc);
  ConnectOptions o;
  o.timeout = 12;
  o.retry_cnt = 1;
  connect(*a, 100, endpoint(*b, 200), options(o));
  connect(*b, 200, endpoint(*a, 100), options(o));
  const Sge r = sge(kDst, 64);
  ASSERT_FALSE(b->post_recv(recv_wr(2, &r)).error());
  const Sge s = sge(kSrc, 16);
  CHECK_ERR("post", a->post_send(send_wr(1, &s)).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*cq, 1)), err_wc(WcStatus::retry_exc_err, WcOpcode::send, 16));
  CHECK_OBS("receiver_state", b->state(), QpState::rts);
}

// A QP on an empty SRQ answers a SEND with RNR NAKs, as a QP with an empty receive queue.
TEST_P(Errors, RnrOnEmptySrq) {
  auto srq = pd().create_srq(SrqInitAttr{8, 1, 0});
  auto cqa = make_cq(16);
  auto cqb = make_cq(16);
  auto a = make_qp(*cqa, *cqa);
  auto b = make_qp(*cqb, *cqb, QpCap{4, 0, 1, 1, 0}, QpType::rc, srq.get());
  PairOptions po;
  po.a.rnr_retry = 1;
  po.b.min_rnr_timer = 1;
  connect_pair(*a, *b, po.a, po.b);
  const Sge s = sge(kSrc, 8);
  CHECK_ERR("post", a->post_send(send_wr(1, &s)).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*cqa, 1)), err_wc(WcStatus::rnr_retry_exc_err, WcOpcode::send, 8));
}

// SQD drains the send queue only: the QP still receives.
TEST_P(Errors, ResponderInSqdStillReceives) {
  Pair p = make_pair();
  QpAttr a;
  a.qp_state = QpState::sqd;
  CHECK_ERR("to_sqd", verb_errno([&] { p.b->modify(a, QpAttrMask::state); }), 0);
  const Sge r = sge(kDst, 64);
  ASSERT_FALSE(p.b->post_recv(recv_wr(2, &r)).error());
  const Sge s = sge(kSrc, 8);
  CHECK_ERR("post", p.a->post_send(send_wr(1, &s)).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 1)), "SUCCESS/SEND/8");
  CHECK_OBS("receiver", describe(poll_n(*p.cq_b, 1)), "SUCCESS/RECV/8");
}

// The two sides disagree on the PSNs (a connection set up with the wrong peer PSN). Behind:
// the responder takes every message for a duplicate and acknowledges the last PSN it received
// (C9-105), which the requester never sent, so it ignores the ACK and runs out of retries; the
// data never arrives. Ahead: the responder NAKs a sequence error for a PSN the requester is
// already past, and it runs out of retries too.
TEST_P(Errors, PsnMismatchRetriesOut) {
  for (const std::uint32_t told : {300u, 50u}) {
    SCOPED_TRACE(told == 300u ? "behind" : "ahead");
    auto cqa = make_cq(16);
    auto cqb = make_cq(16);
    auto a = make_qp(*cqa, *cqa);
    auto b = make_qp(*cqb, *cqb);
    ConnectOptions o;
    o.timeout = 12;
    o.retry_cnt = 2;
    connect(*a, 100, endpoint(*b, 200), options(o));
    connect(*b, 200, endpoint(*a, told), options(o));  // a sends from PSN 100
    const Sge r = sge(kDst, 64);
    ASSERT_FALSE(b->post_recv(recv_wr(2, &r)).error());
    const Sge s = sge(kSrc, 16);
    CHECK_ERR("post", a->post_send(send_wr(1, &s)).error(), 0);
    CHECK_OBS("sender", describe(poll_n(*cqa, 1)), err_wc(WcStatus::retry_exc_err, WcOpcode::send, 16));
    CHECK_OBS("receiver", describe(poll_quiet(*cqb)), "none");
    CHECK_OBS("receiver_state", b->state(), QpState::rts);
  }
}

// PSNs are 24 bits: a connection that starts just below 2^24 wraps to 0 and goes on (SENDs both
// ways and a READ).
TEST_P(Errors, PsnWrapsAround) {
  auto cqa = make_cq(16);
  auto cqb = make_cq(16);
  auto a = make_qp(*cqa, *cqa);
  auto b = make_qp(*cqb, *cqb);
  connect(*a, 0xfffffe, endpoint(*b, 0xffffff), options());
  connect(*b, 0xffffff, endpoint(*a, 0xfffffe), options());
  const Sge r = sge(kDst, 64);
  for (std::uint64_t i = 0; i < 4; ++i) ASSERT_FALSE(b->post_recv(recv_wr(10 + i, &r)).error());
  ASSERT_FALSE(a->post_recv(recv_wr(20, &r)).error());
  const Sge s = sge(kSrc, 16);
  const SendWr wrs[] = {send_wr(1, &s), send_wr(2, &s), send_wr(3, &s), send_wr(4, &s)};
  CHECK_ERR("post", a->post_send(wrs).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*cqa, 4)),
            "SUCCESS/SEND/16,SUCCESS/SEND/16,SUCCESS/SEND/16,SUCCESS/SEND/16");
  CHECK_OBS("receiver", describe(poll_n(*cqb, 4)),
            "SUCCESS/RECV/16,SUCCESS/RECV/16,SUCCESS/RECV/16,SUCCESS/RECV/16");
  CHECK_ERR("post_back", b->post_send(send_wr(5, &s)).error(), 0);
  CHECK_OBS("back", describe(poll_n(*cqb, 1)) + " " + describe(poll_n(*cqa, 1)),
            "SUCCESS/SEND/16 SUCCESS/RECV/16");
  SendWr rd = rdma_wr(6, WrOpcode::rdma_read, &s, mr().address(kDst), mr().rkey());
  CHECK_ERR("post_read", a->post_send(rd).error(), 0);
  CHECK_OBS("read", describe(poll_n(*cqa, 1)), "SUCCESS/RDMA_READ/16");
}

// ---------------------------------------------------------------------------------------------
// Remote access

class RemoteAccess : public Errors {
 protected:
  // Posts two receives on b, then `wr` and a SEND on a; returns the sender's completions.
  std::vector<WorkCompletion> run(Pair& p, const SendWr& wr) {
    const Sge r = sge(kDst + 8192, 64);
    EXPECT_FALSE(p.b->post_recv(recv_wr(20, &r)).error());
    EXPECT_FALSE(p.b->post_recv(recv_wr(21, &r)).error());
    const SendWr wrs[] = {wr, send_wr(2, nullptr)};
    EXPECT_FALSE(p.a->post_send(wrs).error());
    return poll_n(*p.cq_a, 2);
  }
  // The failed WR's completion, then the flushed zero-length SEND behind it.
  std::string sender_wcs(WcStatus status, WcOpcode op, std::uint32_t len) const {
    return err_wc(status, op, len) + "," + err_wc(WcStatus::wr_flush_err, WcOpcode::send, 0);
  }
  void expect_both_err(Pair& p) {
    CHECK_OBS("requester", wait_state(*p.a, QpState::err), QpState::err);
    CHECK_OBS("responder", wait_state(*p.b, QpState::err), QpState::err);
    const auto flushed = poll_n(*p.cq_b, 2);
    const std::string want = err_wc(WcStatus::wr_flush_err, WcOpcode::recv, 0);
    CHECK_OBS("responder_receives", describe(flushed), want + "," + want);
  }
};

TEST_P(RemoteAccess, WriteWithBadRkey) {
  Pair p = make_pair();
  const Sge s = sge(kSrc, 64);
  const auto wcs = run(p, rdma_wr(1, WrOpcode::rdma_write, &s, mr().address(kDst), mr().rkey() + 0x100));
  CHECK_OBS("sender", describe(wcs), sender_wcs(WcStatus::rem_access_err, WcOpcode::rdma_write, 64));
  expect_both_err(p);
}

TEST_P(RemoteAccess, WritePastRegionEnd) {
  Pair p = make_pair();
  const Sge s = sge(kSrc, 64);
  const auto wcs = run(p, rdma_wr(1, WrOpcode::rdma_write, &s, mr().address(kMemSize - 32), mr().rkey()));
  CHECK_OBS("sender", describe(wcs), sender_wcs(WcStatus::rem_access_err, WcOpcode::rdma_write, 64));
  expect_both_err(p);
}

TEST_P(RemoteAccess, WriteToRegionWithoutRemoteWrite) {
  Pair p = make_pair();
  auto ro = pd().reg_mr(mem(kDst), 4096, Access::local_write | Access::remote_read);
  const Sge s = sge(kSrc, 64);
  const auto wcs = run(p, rdma_wr(1, WrOpcode::rdma_write, &s, ro->address(0), ro->rkey()));
  CHECK_OBS("sender", describe(wcs), sender_wcs(WcStatus::rem_access_err, WcOpcode::rdma_write, 64));
  expect_both_err(p);
}

TEST_P(RemoteAccess, WriteToQpWithoutRemoteWrite) {
  PairOptions o;
  o.b.access = Access::local_write | Access::remote_read;
  Pair p = make_pair(o);
  const Sge s = sge(kSrc, 64);
  const auto wcs = run(p, rdma_wr(1, WrOpcode::rdma_write, &s, mr().address(kDst), mr().rkey()));
  CHECK_OBS("sender", describe(wcs), sender_wcs(expect().qp_access_violation, WcOpcode::rdma_write, 64));
  expect_both_err(p);
}

TEST_P(RemoteAccess, ReadFromQpWithoutRemoteRead) {
  PairOptions o;
  o.b.access = Access::local_write | Access::remote_write;
  Pair p = make_pair(o);
  const Sge s = sge(kSrc, 64);
  const auto wcs = run(p, rdma_wr(1, WrOpcode::rdma_read, &s, mr().address(kDst), mr().rkey()));
  CHECK_OBS("sender", describe(wcs), sender_wcs(expect().qp_access_violation, WcOpcode::rdma_read, 64));
  expect_both_err(p);
}

TEST_P(RemoteAccess, AtomicToQpWithoutRemoteAtomic) {
  PairOptions o;
  o.b.access = Access::local_write | Access::remote_write | Access::remote_read;
  Pair p = make_pair(o);
  const Sge s = sge(kSrc, 8);
  const auto wcs = run(p, rdma_wr(1, WrOpcode::atomic_fetch_and_add, &s, mr().address(kDst), mr().rkey()));
  CHECK_OBS("sender", describe(wcs), sender_wcs(expect().qp_access_violation, WcOpcode::fetch_add, 8));
  expect_both_err(p);
}

// An RDMA WRITE with immediate takes a receive WQE but writes nothing into its buffers: their
// keys are not looked at.
TEST_P(RemoteAccess, WriteWithImmNeedsNoValidReceiveBuffer) {
  Pair p = make_pair();
  Sge bad = sge(kDst, 64);
  bad.lkey ^= 0x100;
  ASSERT_FALSE(p.b->post_recv(recv_wr(2, &bad)).error());
  const Sge s = sge(kSrc, 16);
  SendWr wr = rdma_wr(1, WrOpcode::rdma_write_with_imm, &s, mr().address(kDst + 1024), mr().rkey());
  CHECK_ERR("post", p.a->post_send(wr).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 1)), "SUCCESS/RDMA_WRITE/16");
  CHECK_OBS("receiver", describe(poll_n(*p.cq_b, 1)), "SUCCESS/RECV_RDMA_WITH_IMM/16");
}

// The receiver's side of an RDMA WRITE with immediate that fails at the responder. rxe takes
// the receive before it checks the rkey and range: that receive completes with the error (the
// others are flushed), and without a receive the request is RNR NAKed first. A QP without
// REMOTE_WRITE refuses the request before it takes a receive.
TEST_P(RemoteAccess, WriteWithImmBadRkeyAtTheReceiver) {
  for (const bool past_end : {false, true}) {
    SCOPED_TRACE(past_end ? "past the MR's end" : "bad rkey");
    Pair p = make_pair();
    const Sge r = sge(kDst + 8192, 64);
    ASSERT_FALSE(p.b->post_recv(recv_wr(20, &r)).error());
    ASSERT_FALSE(p.b->post_recv(recv_wr(21, &r)).error());
    const Sge s = sge(kSrc, 64);
    const SendWr wr = past_end ? rdma_wr(1, WrOpcode::rdma_write_with_imm, &s, mr().address(kMemSize - 32), mr().rkey())
                               : rdma_wr(1, WrOpcode::rdma_write_with_imm, &s, mr().address(kDst), mr().rkey() + 0x100);
    CHECK_ERR("post", p.a->post_send(wr).error(), 0);
    CHECK_OBS("sender", describe(poll_n(*p.cq_a, 1)), err_wc(WcStatus::rem_access_err, WcOpcode::rdma_write, 64));
    const std::string flush = err_wc(WcStatus::wr_flush_err, WcOpcode::recv, 0);
    CHECK_OBS("receiver", describe(poll_n(*p.cq_b, 2)),
              (expect().imm_write_error_takes_recv ? err_wc(WcStatus::rem_access_err, WcOpcode::recv_rdma_with_imm, 0)
                                                   : flush) + "," + flush);
  }
}

TEST_P(RemoteAccess, WriteWithImmBadRkeyWithoutReceive) {
  Pair p = make_pair();
  const Sge s = sge(kSrc, 64);
  CHECK_ERR("post", p.a->post_send(rdma_wr(1, WrOpcode::rdma_write_with_imm, &s, mr().address(kDst), mr().rkey() + 0x100)).error(), 0);
  pass_time(std::chrono::milliseconds(50));
  // rxe: RNR NAKs (rnr_retry 7 retries for ever) until a receive comes; elsewhere it has failed.
  CHECK_OBS("sender_before", describe(poll_quiet(*p.cq_a)),
            expect().imm_write_error_takes_recv ? "none" : err_wc(WcStatus::rem_access_err, WcOpcode::rdma_write, 64));
  const Sge r = sge(kDst + 8192, 64);
  ASSERT_FALSE(p.b->post_recv(recv_wr(20, &r)).error());
  if (expect().imm_write_error_takes_recv) {
    CHECK_OBS("sender", describe(poll_n(*p.cq_a, 1)), err_wc(WcStatus::rem_access_err, WcOpcode::rdma_write, 64));
  }
  CHECK_OBS("receiver", describe(poll_n(*p.cq_b, 1)),
            expect().imm_write_error_takes_recv ? err_wc(WcStatus::rem_access_err, WcOpcode::recv_rdma_with_imm, 0)
                                                : err_wc(WcStatus::wr_flush_err, WcOpcode::recv, 0));
}

TEST_P(RemoteAccess, WriteWithImmToQpWithoutRemoteWriteAtTheReceiver) {
  PairOptions o;
  o.b.access = Access::local_write | Access::remote_read;
  Pair p = make_pair(o);
  const Sge r = sge(kDst + 8192, 64);
  ASSERT_FALSE(p.b->post_recv(recv_wr(20, &r)).error());
  const Sge s = sge(kSrc, 64);
  CHECK_ERR("post", p.a->post_send(rdma_wr(1, WrOpcode::rdma_write_with_imm, &s, mr().address(kDst), mr().rkey())).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 1)), err_wc(expect().qp_access_violation, WcOpcode::rdma_write, 64));
  CHECK_OBS("receiver", describe(poll_n(*p.cq_b, 1)), err_wc(WcStatus::wr_flush_err, WcOpcode::recv, 0));
}

TEST_P(RemoteAccess, ReadWithBadRkey) {
  Pair p = make_pair();
  const Sge s = sge(kSrc, 64);
  const auto wcs = run(p, rdma_wr(1, WrOpcode::rdma_read, &s, mr().address(kDst), mr().rkey() + 0x100));
  CHECK_OBS("sender", describe(wcs), sender_wcs(WcStatus::rem_access_err, WcOpcode::rdma_read, 64));
  expect_both_err(p);
}

TEST_P(RemoteAccess, ReadFromRegionWithoutRemoteRead) {
  Pair p = make_pair();
  auto wo = pd().reg_mr(mem(kDst), 4096, Access::local_write | Access::remote_write);
  const Sge s = sge(kSrc, 64);
  const auto wcs = run(p, rdma_wr(1, WrOpcode::rdma_read, &s, wo->address(0), wo->rkey()));
  CHECK_OBS("sender", describe(wcs), sender_wcs(WcStatus::rem_access_err, WcOpcode::rdma_read, 64));
  expect_both_err(p);
}

TEST_P(RemoteAccess, AtomicOnRegionWithoutRemoteAtomic) {
  Pair p = make_pair();
  auto rw = pd().reg_mr(mem(kDst), 4096, Access::local_write | Access::remote_write | Access::remote_read);
  const Sge s = sge(kSrc, 8);
  SendWr wr = rdma_wr(1, WrOpcode::atomic_fetch_and_add, &s, rw->address(0), rw->rkey());
  wr.compare_add = 1;
  const auto wcs = run(p, wr);
  CHECK_OBS("sender", describe(wcs), sender_wcs(WcStatus::rem_access_err, WcOpcode::fetch_add, 8));
  expect_both_err(p);
}

// ---------------------------------------------------------------------------------------------
// Length errors and flushing

TEST_P(Errors, ReceiveBufferTooSmall) {
  Pair p = make_pair();
  const Sge s = sge(kSrc, 64);
  const Sge r = sge(kDst, 32);
  ASSERT_FALSE(p.b->post_recv(recv_wr(2, &r)).error());
  ASSERT_FALSE(p.b->post_recv(recv_wr(3, &r)).error());
  CHECK_ERR("post", p.a->post_send(send_wr(1, &s)).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 1)), err_wc(expect().recv_too_small_requester, WcOpcode::send, 64));
  const auto rw = poll_n(*p.cq_b, 2);
  CHECK_OBS("receiver_first", rw.empty() ? "none" : obs_str(rw[0].status), expect().recv_too_small);
  CHECK_OBS("receiver_second", rw.size() < 2 ? "none" : obs_str(rw[1].status), WcStatus::wr_flush_err);
  CHECK_OBS("sender_state", wait_state(*p.a, QpState::err), QpState::err);
  CHECK_OBS("receiver_state", wait_state(*p.b, QpState::err), QpState::err);
}

TEST_P(Errors, FlushOnMoveToErr) {
  PairOptions o;
  o.b.min_rnr_timer = 0;  // a's sends wait on RNR
  Pair p = make_pair(o);
  const Sge r = sge(kDst, 64);
  for (std::uint64_t i = 0; i < 5; ++i) ASSERT_FALSE(p.a->post_recv(recv_wr(100 + i, &r)).error());
  const Sge s = sge(kSrc, 16);
  for (std::uint64_t i = 0; i < 3; ++i) ASSERT_FALSE(p.a->post_send(send_wr(i, &s)).error());
  CHECK_OBS("before", describe(poll_quiet(*p.cq_a)), "none");
  move_to(*p.a, QpState::err);
  const auto wcs = poll_n(*p.cq_a, 8);
  std::size_t sends = 0;
  std::size_t recvs = 0;
  bool all_flush = true;
  for (const auto& wc : wcs) {
    all_flush = all_flush && wc.status == WcStatus::wr_flush_err;
    (wc.wr_id >= 100 ? recvs : sends) += 1;
  }
  CHECK_OBS("send_flushes", sends, 3);
  CHECK_OBS("recv_flushes", recvs, 5);
  CHECK_OBS("all_flush_err", all_flush, true);
  CHECK_OBS("more", describe(poll_quiet(*p.cq_a)), "none");
}

TEST_P(Errors, FlushedSendsKeepPostOrder) {
  PairOptions o;
  o.b.min_rnr_timer = 0;
  Pair p = make_pair(o);
  const Sge s = sge(kSrc, 16);
  for (std::uint64_t i = 0; i < 4; ++i) ASSERT_FALSE(p.a->post_send(send_wr(i, &s)).error());
  move_to(*p.a, QpState::err);
  std::string ids;
  for (const auto& wc : poll_n(*p.cq_a, 4)) ids += std::to_string(wc.wr_id);
  CHECK_OBS("wr_ids", ids, "0123");
}

VERBSIM_CONFORMANCE_SUITE(Overflow);
VERBSIM_CONFORMANCE_SUITE(Errors);
VERBSIM_CONFORMANCE_SUITE(RemoteAccess);

}  // namespace
}  // namespace verbsim::conformance
