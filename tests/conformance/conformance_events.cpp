// Completion channels (arming, solicited events) and asynchronous events.
#include <poll.h>

#include <cerrno>

#include "conformance.hpp"

namespace verbsim::conformance {
namespace {

class Channel : public Conformance {
 protected:
  // A pair whose receiver CQ (cq_b) reports to `ch_`.
  Pair channel_pair(PairOptions o = {}) {
    ch_ = ctx().create_comp_channel();
    Pair p;
    p.cq_a = make_cq(o.cqe);
    p.cq_b = make_cq(o.cqe, ch_.get());
    p.a = make_qp(*p.cq_a, *p.cq_a, o.cap);
    p.b = make_qp(*p.cq_b, *p.cq_b, o.cap);
    connect_pair(*p.a, *p.b, o.a, o.b);
    return p;
  }
  // Waits for the "nothing arrives" interval, then takes one event without blocking.
  int take_event(CompletionQueue*& cq) {
    pass_time(std::chrono::milliseconds(100));
    const std::error_code ec = ch_->get_cq_event(cq, Wait::nonblocking);
    return ec ? ec.value() : 0;
  }
  void send(Pair& p, std::uint64_t id, SendFlags flags = SendFlags::signaled) {
    const Sge s = sge(0, 8);
    const Sge r = sge(8192, 64);
    ASSERT_FALSE(p.b->post_recv(recv_wr(id + 100, &r)).error());
    ASSERT_FALSE(p.a->post_send(send_wr(id, &s, WrOpcode::send, flags)).error());
    ASSERT_EQ(poll_n(*p.cq_a, 1).size(), 1u);
  }
  // A message to `p.b`, whose armed CQ raises one event: taken, acknowledged, and the receive
  // completion polled.
  void one_event_for_one_message(Pair& p) {
    send(p, 1);
    CompletionQueue* cq = nullptr;
    CHECK_ERR("get_cq_event", take_event(cq), 0);
    CHECK_OBS("cq_ok", cq == p.cq_b.get(), true);
    if (cq != nullptr) cq->ack_events(1);
    CHECK_OBS("wcs", describe(poll_n(*p.cq_b, 1)), "SUCCESS/RECV/8");
  }
  void TearDown() override {
    ch_.reset();
    Conformance::TearDown();
  }
  std::unique_ptr<CompletionChannel> ch_;
};

class Async : public Conformance {
 protected:
  // `a` connected to `b`, which receives from `srq` (depth 8); the SRQ holds `receives`
  // receives and its limit is armed at `limit`. (Members go in reverse: QPs first.)
  struct SrqPair {
    std::unique_ptr<SharedReceiveQueue> srq;
    std::unique_ptr<CompletionQueue> cqa;
    std::unique_ptr<CompletionQueue> cqb;
    std::unique_ptr<QueuePair> a;
    std::unique_ptr<QueuePair> b;
  };
  SrqPair srq_pair(std::uint64_t receives, std::uint32_t limit) {
    SrqPair p;
    p.srq = pd().create_srq(SrqInitAttr{8, 1, 0});
    p.cqa = make_cq(16);
    p.cqb = make_cq(16);
    p.a = make_qp(*p.cqa, *p.cqa);
    p.b = make_qp(*p.cqb, *p.cqb, QpCap{4, 0, 1, 1, 0}, QpType::rc, p.srq.get());
    connect_pair(*p.a, *p.b);
    const Sge r = sge(8192, 64);
    for (std::uint64_t i = 0; i < receives; ++i) {
      EXPECT_FALSE(p.srq->post_recv(recv_wr(i, &r)).error());
    }
    SrqAttr attr;
    attr.srq_limit = limit;
    CHECK_ERR("arm", verb_errno([&] { p.srq->modify(attr, SrqAttrMask::limit); }), 0);
    return p;
  }
  // `qp` to SQD asking for SQ_DRAINED, and time for the drain to finish.
  void to_sqd_with_notify(QueuePair& qp) {
    QpAttr a;
    a.qp_state = QpState::sqd;
    a.en_sqd_async_notify = 1;
    CHECK_ERR("to_sqd", verb_errno([&] { qp.modify(a, QpAttrMask::state | QpAttrMask::en_sqd_async_notify); }), 0);
    pass_time(std::chrono::milliseconds(100));
  }
};

TEST_P(Channel, EventOnNextCompletion) {
  Pair p = channel_pair();
  CHECK_ERR("arm", p.cq_b->req_notify(false), 0);
  one_event_for_one_message(p);
}

// ibv_resize_cq keeps the CQ's arming: the next completion after the resize raises the event.
TEST_P(Channel, AResizedCqStaysArmed) {
  Pair p = channel_pair();
  CHECK_ERR("arm", p.cq_b->req_notify(false), 0);
  CHECK_ERR("resize", verb_errno([&] { p.cq_b->resize(200); }), 0);
  one_event_for_one_message(p);
}

TEST_P(Channel, FdReadableWhileEventPending) {
  Pair p = channel_pair();
  ASSERT_GE(ch_->fd(), 0);
  pollfd pfd{ch_->fd(), POLLIN, 0};
  CHECK_OBS("readable_before", ::poll(&pfd, 1, 0), 0);
  ASSERT_FALSE(p.cq_b->req_notify(false));
  send(p, 1);
  pass_time(std::chrono::milliseconds(100));
  CHECK_OBS("readable_after", ::poll(&pfd, 1, 0), 1);
  CompletionQueue* cq = nullptr;
  CHECK_ERR("get_cq_event", ch_->get_cq_event(cq, Wait::nonblocking), 0);
  if (cq != nullptr) cq->ack_events(1);
}

// A completion event not yet taken goes with its CQ when the CQ is destroyed (the kernel drops
// it), and the channel's fd stops polling readable.
TEST_P(Channel, DestroyedCqTakesItsPendingEvent) {
  Pair p = channel_pair();
  ASSERT_FALSE(p.cq_b->req_notify(false));
  send(p, 1);
  pass_time(std::chrono::milliseconds(100));
  pollfd pfd{ch_->fd(), POLLIN, 0};
  CHECK_OBS("readable_before", ::poll(&pfd, 1, 0), 1);
  p.b.reset();
  p.cq_b.reset();
  CHECK_OBS("readable_after", ::poll(&pfd, 1, 0), 0);
  CompletionQueue* cq = nullptr;
  CHECK_ERR("get_cq_event", ch_->get_cq_event(cq, Wait::nonblocking), EAGAIN);
}

// Arming a CQ that already holds completions fires no event for them: only the next one does
// (the classic race a program closes by polling once more after arming).
TEST_P(Channel, ArmingWithCompletionsWaitingWaitsForTheNext) {
  Pair p = channel_pair();
  send(p, 1);  // a receive completion waits in cq_b, unpolled
  pass_time(std::chrono::milliseconds(50));
  CHECK_ERR("arm", p.cq_b->req_notify(false), 0);
  CompletionQueue* cq = nullptr;
  CHECK_ERR("get_cq_event", take_event(cq), EAGAIN);
  send(p, 2);
  CHECK_ERR("get_cq_event_next", take_event(cq), 0);
  if (cq != nullptr) cq->ack_events(1);
  CHECK_OBS("wcs", describe(poll_n(*p.cq_b, 2)), "SUCCESS/RECV/8,SUCCESS/RECV/8");
}

TEST_P(Channel, NoEventWithoutArming) {
  Pair p = channel_pair();
  send(p, 1);
  CompletionQueue* cq = nullptr;
  CHECK_ERR("get_cq_event", take_event(cq), EAGAIN);
}

TEST_P(Channel, OneEventPerArming) {
  Pair p = channel_pair();
  ASSERT_FALSE(p.cq_b->req_notify(false));
  send(p, 1);
  send(p, 2);
  CompletionQueue* cq = nullptr;
  CHECK_ERR("first", take_event(cq), 0);
  if (cq != nullptr) cq->ack_events(1);
  CHECK_ERR("second", take_event(cq), EAGAIN);
  ASSERT_FALSE(p.cq_b->req_notify(false));
  send(p, 3);
  CHECK_ERR("after_rearm", take_event(cq), 0);
  if (cq != nullptr) cq->ack_events(1);
  CHECK_OBS("wcs", poll_n(*p.cq_b, 3).size(), 3);
}

TEST_P(Channel, NonblockingWithNothingPending) {
  Pair p = channel_pair();
  ASSERT_FALSE(p.cq_b->req_notify(false));
  CompletionQueue* cq = nullptr;
  CHECK_ERR("get_cq_event", take_event(cq), EAGAIN);
}

TEST_P(Channel, SolicitedOnlyIgnoresUnsolicited) {
  Pair p = channel_pair();
  ASSERT_FALSE(p.cq_b->req_notify(true));
  send(p, 1);
  CompletionQueue* cq = nullptr;
  CHECK_ERR("get_cq_event", take_event(cq), EAGAIN);
  CHECK_OBS("wcs", describe(poll_n(*p.cq_b, 1)), "SUCCESS/RECV/8");
}

TEST_P(Channel, SolicitedOnlyFiresOnSolicited) {
  Pair p = channel_pair();
  ASSERT_FALSE(p.cq_b->req_notify(true));
  send(p, 1);
  send(p, 2, SendFlags::signaled | SendFlags::solicited);
  CompletionQueue* cq = nullptr;
  CHECK_ERR("get_cq_event", take_event(cq), 0);
  if (cq != nullptr) cq->ack_events(1);
  CHECK_OBS("wcs", poll_n(*p.cq_b, 2).size(), 2);
}

TEST_P(Channel, SolicitedOnlyAndSendError) {
  // The sender's CQ armed for solicited completions; its send fails with RNR_RETRY_EXC_ERR.
  ch_ = ctx().create_comp_channel();
  auto cqa = make_cq(16, ch_.get());
  auto cqb = make_cq(16);
  auto a = make_qp(*cqa, *cqa);
  auto b = make_qp(*cqb, *cqb);
  ConnectOptions oa;
  oa.rnr_retry = 0;
  connect_pair(*a, *b, oa);
  ASSERT_FALSE(cqa->req_notify(true));
  const Sge s = sge(0, 8);
  ASSERT_FALSE(a->post_send(send_wr(1, &s)).error());
  CHECK_OBS("wcs", describe(poll_n(*cqa, 1)), err_wc(WcStatus::rnr_retry_exc_err, WcOpcode::send, 8));
  CompletionQueue* cq = nullptr;
  const int err = take_event(cq);
  if (err == 0 && cq != nullptr) cq->ack_events(1);
  CHECK_ERR("get_cq_event", err, expect().send_error_fires_solicited_arm ? 0 : EAGAIN);
}

TEST_P(Channel, SolicitedOnlyAndReceiveFlush) {
  Pair p = channel_pair();
  const Sge r = sge(8192, 64);
  ASSERT_FALSE(p.b->post_recv(recv_wr(7, &r)).error());
  ASSERT_FALSE(p.cq_b->req_notify(true));
  move_to(*p.b, QpState::err);
  CHECK_OBS("wcs", poll_n(*p.cq_b, 1).size(), 1);
  CompletionQueue* cq = nullptr;
  const int err = take_event(cq);
  if (err == 0 && cq != nullptr) cq->ack_events(1);
  CHECK_ERR("get_cq_event", err, 0);
}

TEST_P(Async, NothingPending) {
  AsyncEvent ev;
  CHECK_ERR("get_async_event", ctx().get_async_event(ev, Wait::nonblocking), EAGAIN);
}

TEST_P(Async, AsyncFdReadableOnlyWithEvent) {
  ASSERT_GE(ctx().async_fd(), 0);
  pollfd pfd{ctx().async_fd(), POLLIN, 0};
  CHECK_OBS("readable", ::poll(&pfd, 1, 0), 0);
}

TEST_P(Async, RemoteAccessErrorEvents) {
  Pair p = make_pair();
  const Sge s = sge(0, 16);
  ASSERT_FALSE(p.a->post_send(rdma_wr(1, WrOpcode::rdma_write, &s, mr().address(8192), mr().rkey() + 0x100)).error());
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 1)), err_wc(WcStatus::rem_access_err, WcOpcode::rdma_write, 16));
  pass_time(std::chrono::milliseconds(100));
  CHECK_OBS("events", describe(take_async_events()),
            expect().responder_error_events ? "QP_ACCESS_ERR" : "none");
}

TEST_P(Async, CommunicationEstablished) {
  Pair p = make_pair(PairOptions::unconnected());
  connect(*p.a, 100, endpoint(*p.b, 200), options());
  modify_to_init(*p.b, options());
  modify_to_rtr(*p.b, endpoint(*p.a, 100), options());  // b stays in RTR
  const Sge r = sge(8192, 64);
  ASSERT_FALSE(p.b->post_recv(recv_wr(2, &r)).error());
  const Sge s = sge(0, 8);
  ASSERT_FALSE(p.a->post_send(send_wr(1, &s)).error());
  CHECK_OBS("receiver", describe(poll_n(*p.cq_b, 1)), "SUCCESS/RECV/8");
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 1)), "SUCCESS/SEND/8");
  pass_time(std::chrono::milliseconds(50));
  CHECK_OBS("events", describe(take_async_events()), expect().comm_est_event ? "COMM_EST" : "none");
  CHECK_OBS("receiver_state", p.b->state(), QpState::rtr);
}

TEST_P(Async, SqDrained) {
  Pair p = make_pair();
  to_sqd_with_notify(*p.a);
  CHECK_OBS("events", describe(take_async_events()), "SQ_DRAINED");
  CHECK_OBS("state", p.a->state(), QpState::sqd);
}

TEST_P(Async, SrqLimitReached) {
  auto [srq, cqa, cqb, a, b] = srq_pair(7, 4);
  const Sge s = sge(0, 8);
  for (std::uint64_t i = 0; i < 3; ++i) ASSERT_FALSE(a->post_send(send_wr(i, &s)).error());
  ASSERT_EQ(poll_n(*cqb, 3).size(), 3u);
  pass_time(std::chrono::milliseconds(50));
  CHECK_OBS("events_at_limit", describe(take_async_events()), "none");  // 4 left: not below 4
  ASSERT_FALSE(a->post_send(send_wr(3, &s)).error());
  ASSERT_EQ(poll_n(*cqb, 1).size(), 1u);
  pass_time(std::chrono::milliseconds(50));
  CHECK_OBS("events", describe(take_async_events()), "SRQ_LIMIT_REACHED");
  CHECK_OBS("limit_after", srq->query().srq_limit, 0);
  ASSERT_FALSE(a->post_send(send_wr(9, &s)).error());
  ASSERT_EQ(poll_n(*cqb, 1).size(), 1u);
  pass_time(std::chrono::milliseconds(50));
  CHECK_OBS("events_disarmed", describe(take_async_events()), "none");
  (void)poll_n(*cqa, 5);
}

TEST_P(Async, SrqQpToErr) {
  auto srq = pd().create_srq(SrqInitAttr{8, 1, 0});
  auto cq = make_cq(16);
  auto b = make_qp(*cq, *cq, QpCap{4, 0, 1, 1, 0}, QpType::rc, srq.get());
  connect(*b, 100, endpoint(*b, 100), options());
  move_to(*b, QpState::err);
  pass_time(std::chrono::milliseconds(50));
  CHECK_OBS("events", describe(take_async_events()), expect().last_wqe_reached_event ? "QP_LAST_WQE_REACHED" : "none");
}

// An event not yet taken goes with its QP or SRQ when that is destroyed (the kernel drops it:
// ib_uverbs_release_uevent), so a program never gets an event naming a destroyed object.
TEST_P(Async, DestroyedQpTakesItsPendingEvent) {
  Pair p = make_pair();
  to_sqd_with_notify(*p.a);
  ASSERT_GE(ctx().async_fd(), 0);
  pollfd pfd{ctx().async_fd(), POLLIN, 0};
  CHECK_OBS("readable_before", ::poll(&pfd, 1, 0), 1);  // SQ_DRAINED is pending
  p.a.reset();
  CHECK_OBS("readable_after", ::poll(&pfd, 1, 0), 0);
  CHECK_OBS("events", describe(take_async_events()), "none");
}

TEST_P(Async, DestroyedSrqTakesItsPendingEvent) {
  auto [srq, cqa, cqb, a, b] = srq_pair(2, 2);
  const Sge s = sge(0, 8);
  ASSERT_FALSE(a->post_send(send_wr(1, &s)).error());
  ASSERT_EQ(poll_n(*cqb, 1).size(), 1u);
  (void)poll_n(*cqa, 1);
  pass_time(std::chrono::milliseconds(50));
  pollfd pfd{ctx().async_fd(), POLLIN, 0};
  CHECK_OBS("readable_before", ::poll(&pfd, 1, 0), 1);  // SRQ_LIMIT_REACHED is pending
  b.reset();
  CHECK_OBS("readable_with_srq", ::poll(&pfd, 1, 0), 1);  // the QP's destroy leaves it
  srq.reset();
  CHECK_OBS("readable_after", ::poll(&pfd, 1, 0), 0);
  CHECK_OBS("events", describe(take_async_events()), "none");
}

// rxe lets a UC QP receive from an SRQ (the simulator's hardware profiles refuse it, EINVAL): a
// SEND takes an SRQ receive; one too small for it fails and takes the QP to ERR, leaving the
// SRQ's other receives alone.
TEST_P(Async, UcQpOnSrq) {
  auto srq = pd().create_srq(SrqInitAttr{8, 1, 0});
  auto cqa = make_cq(16);
  auto cqb = make_cq(16);
  auto a = make_qp(*cqa, *cqa, QpCap{4, 4, 1, 1, 0}, QpType::uc);
  std::unique_ptr<QueuePair> b;
  CHECK_ERR("create", verb_errno([&] { b = make_qp(*cqb, *cqb, QpCap{4, 0, 1, 1, 0}, QpType::uc, srq.get()); }),
            expect().uc_on_srq ? 0 : EINVAL);
  if (!b) return;
  connect_pair(*a, *b);
  const Sge r = sge(8192, 64);
  const Sge tiny = sge(8192 + 1024, 4);
  ASSERT_FALSE(srq->post_recv(recv_wr(1, &r)).error());
  ASSERT_FALSE(srq->post_recv(recv_wr(2, &tiny)).error());
  ASSERT_FALSE(srq->post_recv(recv_wr(3, &r)).error());
  const Sge s = sge(0, 16);
  const SendWr wrs[] = {send_wr(7, &s), send_wr(8, &s)};
  CHECK_ERR("post", a->post_send(wrs).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*cqa, 2)), "SUCCESS/SEND/16,SUCCESS/SEND/16");
  CHECK_OBS("receiver", describe(poll_n(*cqb, 2)),
            "SUCCESS/RECV/16," + err_wc(expect().recv_too_small, WcOpcode::recv, 0));
  CHECK_OBS("receiver_state", b->state(), QpState::err);
}

// An RC QP on an SRQ: a receive too small for the SEND fails both sides, as a QP's own does.
TEST_P(Async, SrqReceiveTooSmall) {
  auto [srq, cqa, cqb, a, b] = srq_pair(0, 0);
  const Sge tiny = sge(8192, 4);
  ASSERT_FALSE(srq->post_recv(recv_wr(1, &tiny)).error());
  const Sge s = sge(0, 16);
  CHECK_ERR("post", a->post_send(send_wr(7, &s)).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*cqa, 1)), err_wc(expect().recv_too_small_requester, WcOpcode::send, 16));
  CHECK_OBS("receiver", describe(poll_n(*cqb, 1)), err_wc(expect().recv_too_small, WcOpcode::recv, 0));
  CHECK_OBS("receiver_state", b->state(), QpState::err);
}

// An RDMA WRITE with immediate takes an SRQ receive.
TEST_P(Async, WriteWithImmTakesAnSrqReceive) {
  auto [srq, cqa, cqb, a, b] = srq_pair(1, 0);
  const Sge s = sge(0, 16);
  SendWr wr = rdma_wr(7, WrOpcode::rdma_write_with_imm, &s, mr().address(4096), mr().rkey());
  CHECK_ERR("post", a->post_send(wr).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*cqa, 1)), "SUCCESS/RDMA_WRITE/16");
  CHECK_OBS("receiver", describe(poll_n(*cqb, 1)), "SUCCESS/RECV_RDMA_WITH_IMM/16");
}

VERBSIM_CONFORMANCE_SUITE(Channel);
VERBSIM_CONFORMANCE_SUITE(Async);

}  // namespace
}  // namespace verbsim::conformance
