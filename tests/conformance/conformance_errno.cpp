// errno as a C program finds it after a verb fails. libibverbs' control verbs reach the kernel,
// which leaves its error in errno as well as in the return value; its data-path verbs run in the
// provider, and only those that make a system call leave their error in errno: rxe's post_send
// rings its doorbell with a write() to the uverbs device, which the kernel refuses for a QP in
// RESET, INIT or RTR, while a full queue or too many SGEs are refused in user space, errno left
// alone. (errno_after_post, errno_after_verb: on the simulator what the libibverbs drop-in
// leaves.)
#include <cerrno>

#include "conformance.hpp"

namespace verbsim::conformance {
namespace {

constexpr std::size_t kSrc = 0;
constexpr std::size_t kRecv = 16384;

class Errno : public Conformance {
 protected:
  // A QP on its own CQ in `state` (towards itself from RTR on).
  std::unique_ptr<QueuePair> qp_in(QpState state, QpCap cap = {8, 8, 1, 1, 0}) {
    if (!cq_) cq_ = make_cq(64);
    auto qp = make_qp(*cq_, *cq_, cap);
    if (state == QpState::reset) return qp;
    modify_to_init(*qp, options());
    if (state == QpState::init) return qp;
    modify_to_rtr(*qp, endpoint(*qp, 200), options());
    return qp;
  }
  // errno the provider's refusal of a post in RESET, INIT or RTR leaves: its error where it
  // comes from the kernel, else untouched (or the post is accepted).
  std::string early_post_errno() const {
    const int err = expect().post_send_before_rts;
    if (err == 0 || !expect().post_state_error_in_errno) return "untouched";
    return errno_name(err);
  }
  // One SEND posted on a QP in `state`.
  void post_early(QpState state) {
    auto qp = qp_in(state);
    const Sge s = sge(kSrc, 8);
    PostResult r;
    const std::string e = errno_after_post([&] { return qp->post_send(send_wr(1, &s)); }, r);
    CHECK_ERR("post", r.error(), expect().post_send_before_rts);
    CHECK_OBS("errno", e, early_post_errno());
  }
  void TearDown() override {
    cq_.reset();
    Conformance::TearDown();
  }
  std::unique_ptr<CompletionQueue> cq_;
};

TEST_P(Errno, PostSendInReset) { post_early(QpState::reset); }
TEST_P(Errno, PostSendInInit) { post_early(QpState::init); }
TEST_P(Errno, PostSendInRtr) { post_early(QpState::rtr); }

// In RTS the doorbell succeeds: a full send queue is the provider's own ENOMEM.
TEST_P(Errno, PostSendToAFullQueueInRts) {
  PairOptions o = PairOptions::with(QpCap{4, 4, 1, 1, 0});
  o.b.min_rnr_timer = 0;  // no receive: the sends wait on RNR NAKs, retried for ever
  Pair p = make_pair(o);
  const std::uint32_t depth = expect().wq_depth(4);
  const Sge s = sge(kSrc, 8);
  for (std::uint64_t i = 0; i < depth; ++i) ASSERT_FALSE(p.a->post_send(send_wr(i, &s)).error());
  PostResult r;
  const std::string e = errno_after_post([&] { return p.a->post_send(send_wr(99, &s)); }, r);
  CHECK_ERR("post", r.error(), ENOMEM);
  CHECK_OBS("errno", e, "untouched");
  move_to(*p.a, QpState::err);
  CHECK_OBS("flushed", poll_n(*p.cq_a, depth).size(), depth);
}

TEST_P(Errno, PostSendWithTooManySgesInRts) {
  Pair p = make_pair(PairOptions::with(QpCap{4, 4, 1, 1, 0}));
  const Sge two[] = {sge(kSrc, 8), sge(kSrc + 8, 8)};
  SendWr wr = send_wr(1, nullptr);
  wr.sg_list = two;
  PostResult r;
  const std::string e = errno_after_post([&] { return p.a->post_send(wr); }, r);
  CHECK_ERR("post", r.error(), expect().send_too_many_sge);
  CHECK_OBS("errno", e, "untouched");
}

// A QP in ERR takes the post (and flushes it): nothing in errno.
TEST_P(Errno, PostSendInErr) {
  Pair p = make_pair();
  move_to(*p.a, QpState::err);
  const Sge s = sge(kSrc, 8);
  PostResult r;
  const std::string e = errno_after_post([&] { return p.a->post_send(send_wr(1, &s)); }, r);
  CHECK_ERR("post", r.error(), 0);
  CHECK_OBS("errno", e, "untouched");
  CHECK_OBS("wcs", describe(poll_n(*p.cq_a, 1)), err_wc(WcStatus::wr_flush_err, WcOpcode::send, 8));
}

// A send queue filled in INIT (each post refused by the kernel, each WR kept): the next WR
// does not fit, and the doorbell still fails. In RTS, a post that does not fit still rings the
// doorbell: the WRs kept run.
TEST_P(Errno, PostSendToAFullQueueInInit) {
  PairOptions o = PairOptions::with(QpCap{4, 16, 1, 1, 0});
  o.connect = false;
  Pair p = make_pair(o);
  modify_to_init(*p.a, options());
  const std::uint32_t depth = expect().wq_depth(4);
  const Sge s = sge(kSrc, 8);
  std::string early;
  for (std::uint64_t i = 0; i < depth; ++i) {
    early += errno_name(p.a->post_send(send_wr(i, &s)).error()) + ",";
  }
  CHECK_OBS("early", early, [&] {
    std::string w;
    for (std::uint32_t i = 0; i < depth; ++i) w += errno_name(expect().post_send_before_rts) + ",";
    return w;
  }());
  PostResult r;
  const std::string e = errno_after_post([&] { return p.a->post_send(send_wr(50, &s)); }, r);
  // The WR does not fit: a provider that accepts posts before RTS says ENOMEM (mlx5); rxe
  // refuses it too but returns its doorbell's EINVAL; where nothing was kept, the QP state
  // refuses it.
  const bool kept = expect().early_send_kept;
  const int before = expect().post_send_before_rts;
  CHECK_ERR("full", r.error(), before != 0 ? before : ENOMEM);
  CHECK_OBS("full_posted", r.posted, 0);
  CHECK_OBS("errno", e, early_post_errno());
  const Sge rs = sge(kRecv, 64);
  modify_to_init(*p.b, options());
  for (std::uint64_t i = 0; i < depth + 1; ++i) ASSERT_FALSE(p.b->post_recv(recv_wr(i, &rs)).error());
  connect(*p.b, 200, endpoint(*p.a, 100), options());
  modify_to_rtr(*p.a, endpoint(*p.b, 200), options());
  modify_to_rts(*p.a, 100, options());
  pass_time(std::chrono::milliseconds(50));
  const std::uint32_t ran_at_rts = kept && expect().rts_starts_send_queue ? depth : 0;
  CHECK_OBS("at_rts", poll_quiet(*p.cq_a).size(), ran_at_rts);
  // Where the early WRs are still queued the queue is full; the post fails but rings.
  const std::uint32_t queued = kept && !expect().rts_starts_send_queue ? depth : 0;
  const PostResult ring = p.a->post_send(send_wr(60, &s));
  CHECK_ERR("ring", ring.error(), queued == depth ? ENOMEM : 0);
  CHECK_OBS("after_ring", poll_n(*p.cq_a, queued + (queued == depth ? 0 : 1)).size(),
            queued + (queued == depth ? 0 : 1));
}

TEST_P(Errno, PostRecvInReset) {
  auto qp = qp_in(QpState::reset);
  const Sge r = sge(kRecv, 64);
  PostResult res;
  const std::string e = errno_after_post([&] { return qp->post_recv(recv_wr(1, &r)); }, res);
  CHECK_ERR("post", res.error(), EINVAL);
  CHECK_OBS("errno", e, "untouched");
}

TEST_P(Errno, PostRecvToAFullQueue) {
  auto qp = qp_in(QpState::init, QpCap{4, 4, 1, 1, 0});
  const std::uint32_t depth = expect().wq_depth(4);
  const Sge r = sge(kRecv, 64);
  for (std::uint64_t i = 0; i < depth; ++i) ASSERT_FALSE(qp->post_recv(recv_wr(i, &r)).error());
  PostResult res;
  const std::string e = errno_after_post([&] { return qp->post_recv(recv_wr(99, &r)); }, res);
  CHECK_ERR("post", res.error(), ENOMEM);
  CHECK_OBS("errno", e, "untouched");
}

TEST_P(Errno, PostSrqRecvToAFullQueue) {
  auto srq = pd().create_srq(SrqInitAttr{4, 1, 0});
  const std::uint32_t depth = srq->query().max_wr;
  const Sge r = sge(kRecv, 64);
  for (std::uint64_t i = 0; i < depth; ++i) ASSERT_FALSE(srq->post_recv(recv_wr(i, &r)).error());
  PostResult res;
  const std::string e = errno_after_post([&] { return srq->post_recv(recv_wr(99, &r)); }, res);
  CHECK_ERR("post", res.error(), ENOMEM);
  CHECK_OBS("errno", e, "untouched");
}

TEST_P(Errno, DeallocPdInUse) {
  auto pd2 = ctx().alloc_pd();
  auto m = pd2->reg_mr(mem(0), 4096, Access::local_write);
  int err = 0;
  const std::string e = errno_after_verb([&] { pd2->destroy(); }, err);
  CHECK_ERR("dealloc_pd", err, EBUSY);
  CHECK_OBS("errno", e, "EBUSY");
  destroy(m);
  destroy(pd2);
}

TEST_P(Errno, DestroyCqInUse) {
  auto cq = make_cq(16);
  auto qp = make_qp(*cq, *cq);
  int err = 0;
  const std::string e = errno_after_verb([&] { cq->destroy(); }, err);
  CHECK_ERR("destroy_cq", err, EBUSY);
  CHECK_OBS("errno", e, "EBUSY");
  destroy(qp);
}

TEST_P(Errno, ModifyQpRefused) {
  auto qp = qp_in(QpState::reset);
  QpAttr a;
  a.qp_state = QpState::rts;
  int err = 0;
  const std::string e = errno_after_verb([&] { qp->modify(a, QpAttrMask::state); }, err);
  CHECK_ERR("modify", err, EINVAL);
  CHECK_OBS("errno", e, "EINVAL");
}

VERBSIM_CONFORMANCE_SUITE(Errno);

}  // namespace
}  // namespace verbsim::conformance
