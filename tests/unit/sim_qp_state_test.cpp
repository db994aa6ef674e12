// Real QPs driven through the state machine with modify(), and what posting does in each state,
// per simulator profile (SEMANTICS.md rows f and g).
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "../support/sim_checks.hpp"

namespace verbsim {
namespace {

using sim::Profile;
using testing::async_events;
using testing::config_for;
using testing::Ledger;
using testing::Node;
using testing::PairOptions;
using testing::ProfileTest;
using testing::recv_wr;
using testing::send_wr;
using testing::SimPair;
using testing::throws_verb_error;

struct Step {
  QpAttr attr;
  QpAttrMask mask;
};

Step bare(QpState s) {
  Step st{{}, QpAttrMask::state};
  st.attr.qp_state = s;
  return st;
}

Step to_init(QpType t, Access access = Access::local_write | Access::remote_write) {
  Step s = bare(QpState::init);
  s.attr.pkey_index = 0;
  s.attr.port_num = 1;
  s.mask |= QpAttrMask::pkey_index | QpAttrMask::port;
  if (t == QpType::ud) {
    s.attr.qkey = 0x1234;
    s.mask |= QpAttrMask::qkey;
  } else {
    s.attr.qp_access_flags = access;
    s.mask |= QpAttrMask::access_flags;
  }
  return s;
}

Step to_rtr(QpType t, const Endpoint& remote) {
  Step s = bare(QpState::rtr);
  if (t == QpType::ud) return s;
  s.attr.path_mtu = Mtu::mtu_1024;
  s.attr.dest_qp_num = remote.qpn;
  s.attr.rq_psn = remote.psn;
  s.attr.ah_attr.is_global = true;
  s.attr.ah_attr.grh.dgid = remote.gid;
  s.attr.ah_attr.grh.sgid_index = 1;
  s.attr.ah_attr.port_num = 1;
  s.mask |= QpAttrMask::av | QpAttrMask::path_mtu | QpAttrMask::dest_qpn | QpAttrMask::rq_psn;
  if (t == QpType::rc) {
    s.attr.max_dest_rd_atomic = 1;
    s.attr.min_rnr_timer = 12;
    s.mask |= QpAttrMask::max_dest_rd_atomic | QpAttrMask::min_rnr_timer;
  }
  return s;
}

Step to_rts(QpType t) {
  Step s = bare(QpState::rts);
  s.attr.sq_psn = 300;
  s.mask |= QpAttrMask::sq_psn;
  if (t == QpType::rc) {
    s.attr.timeout = 14;
    s.attr.retry_cnt = 7;
    s.attr.rnr_retry = 7;
    s.attr.max_rd_atomic = 1;
    s.mask |= QpAttrMask::timeout | QpAttrMask::retry_cnt | QpAttrMask::rnr_retry |
              QpAttrMask::max_qp_rd_atomic;
  }
  return s;
}

// One QP on sim0 whose RTR address points at sim1; no traffic is exchanged.
struct LoneQp {
  explicit LoneQp(QpType t, Profile p = Profile::strict)
      : world(config_for(p)),
        a(world, "sim0"),
        b(world, "sim1"),
        cq(a.ctx->create_cq(16)),
        qp(a.make_qp(*cq, *cq, QpCap{4, 4, 1, 1, 0}, t)),
        remote{b.ctx->query_gid(1, 1), 0x77, 500} {}

  void go(const Step& s) {
    qp->modify(s.attr, s.mask);
    EXPECT_EQ(qp->state(), s.attr.qp_state);
    EXPECT_EQ(qp->query().qp_state, s.attr.qp_state);
    EXPECT_EQ(qp->query().cur_qp_state, s.attr.qp_state);
  }
  void go_to(QpState target) {  // from RESET along the usual path
    const QpType t = qp->type();
    if (target == QpState::reset) return;
    go(to_init(t));
    if (target == QpState::init) return;
    if (target == QpState::err) return go(bare(QpState::err));
    go(to_rtr(t, remote));
    if (target == QpState::rtr) return;
    go(to_rts(t));
    if (target == QpState::sqd) go(bare(QpState::sqd));
  }

  sim::World world;
  Node a, b;
  std::unique_ptr<CompletionQueue> cq;
  std::unique_ptr<QueuePair> qp;
  Endpoint remote;
};

class ValidTransitions : public ::testing::TestWithParam<QpType> {};

TEST_P(ValidTransitions, EveryTransitionOfTheTableSucceedsAndQueryFollows) {
  const QpType t = GetParam();
  LoneQp q(t);
  ASSERT_EQ(q.qp->state(), QpState::reset);
  q.go(bare(QpState::reset));
  q.go(to_init(t));
  const QpAttr init = q.qp->query();
  EXPECT_EQ(init.port_num, 1u);
  EXPECT_EQ(init.pkey_index, 0u);
  if (t == QpType::ud) {
    EXPECT_EQ(init.qkey, 0x1234u);
  } else {
    EXPECT_EQ(init.qp_access_flags, Access::local_write | Access::remote_write);
  }
  // INIT->INIT changes what INIT set.
  Step again = to_init(t, Access::remote_read);
  again.attr.qkey = 0x5678;
  q.go(again);
  if (t == QpType::ud) {
    EXPECT_EQ(q.qp->query().qkey, 0x5678u);
  } else {
    EXPECT_EQ(q.qp->query().qp_access_flags, Access::remote_read);
  }
  q.go(bare(QpState::reset));
  q.go(to_init(t));
  q.go(bare(QpState::err));
  q.go(bare(QpState::err));
  q.go(bare(QpState::reset));

  q.go(to_init(t));
  q.go(to_rtr(t, q.remote));
  if (t != QpType::ud) {
    const QpAttr rtr = q.qp->query();
    EXPECT_EQ(rtr.dest_qp_num, 0x77u);
    EXPECT_EQ(rtr.rq_psn, 500u);
    EXPECT_EQ(rtr.path_mtu, Mtu::mtu_1024);
    EXPECT_EQ(rtr.ah_attr.grh.dgid, q.remote.gid);
  }
  q.go(bare(QpState::reset));
  q.go(to_init(t));
  q.go(to_rtr(t, q.remote));
  q.go(bare(QpState::err));
  q.go(bare(QpState::reset));

  q.go_to(QpState::rts);
  const QpAttr rts = q.qp->query();
  EXPECT_EQ(rts.sq_psn, 300u);
  if (t == QpType::rc) {
    EXPECT_EQ(rts.timeout, 14u);
    EXPECT_EQ(rts.retry_cnt, 7u);
    EXPECT_EQ(rts.rnr_retry, 7u);
    EXPECT_EQ(rts.min_rnr_timer, 12u);
  }
  Step rts_again = bare(QpState::rts);
  if (t == QpType::ud) {
    rts_again.attr.qkey = 0x9abc;
    rts_again.mask |= QpAttrMask::qkey;
  } else {
    rts_again.attr.qp_access_flags = Access::local_write;
    rts_again.mask |= QpAttrMask::access_flags;
  }
  q.go(rts_again);
  q.go(bare(QpState::sqd));
  q.go(bare(QpState::sqd));
  q.go(bare(QpState::rts));
  q.go(bare(QpState::reset));
  q.go_to(QpState::sqd);
  q.go(bare(QpState::err));
  q.go(bare(QpState::reset));
  q.go_to(QpState::sqd);
  q.go(bare(QpState::reset));
  q.go_to(QpState::rts);
  q.go(bare(QpState::err));
  q.go(bare(QpState::reset));
  q.go_to(QpState::rtr);
  q.go(bare(QpState::reset));
}

INSTANTIATE_TEST_SUITE_P(Types, ValidTransitions,
                         ::testing::Values(QpType::rc, QpType::uc, QpType::ud),
                         [](const auto& param) { return std::string(to_string(param.param)); });

TEST(QpStateEvents, SqdWithNotifyRaisesSqDrainedOnceTheSendQueueIsEmpty) {
  LoneQp q(QpType::rc);
  q.go_to(QpState::rts);
  Step sqd = bare(QpState::sqd);
  sqd.attr.en_sqd_async_notify = 1;
  sqd.mask |= QpAttrMask::en_sqd_async_notify;
  q.go(sqd);
  const auto events = async_events(*q.a.ctx);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].type, AsyncEventType::sq_drained);
  EXPECT_EQ(events[0].qp, q.qp.get());
  EXPECT_EQ(events[0].qp_num, q.qp->qp_num());
}

// ---------------------------------------------------------------------------------------------
// Invalid requests: EINVAL from ibv_modify_qp, nothing changed.

struct BadModify {
  const char* name;
  QpType type;
  QpState from;
  Step step;
};

Step without(Step s, QpAttrMask m) {
  s.mask &= ~m;
  return s;
}

std::vector<BadModify> bad_modifies() {
  const Endpoint remote{Gid::from_ipv4(10, 0, 1, 1), 0x77, 500};
  const QpType rc = QpType::rc;
  using M = QpAttrMask;
  using S = QpState;
  std::vector<BadModify> v{
      {"RESET->RTR", rc, S::reset, to_rtr(rc, remote)},
      {"RESET->RTS", rc, S::reset, to_rts(rc)},
      {"RESET->ERR", rc, S::reset, bare(S::err)},
      {"INIT->RTS", rc, S::init, to_rts(rc)},
      {"RTR->INIT", rc, S::rtr, to_init(rc)},
      {"RTS->RTR", rc, S::rts, to_rtr(rc, remote)},
      {"ERR->RTS", rc, S::err, to_rts(rc)},
      {"ERR->INIT", rc, S::err, to_init(rc)},
      {"RESET->INIT without PKEY_INDEX", rc, S::reset, without(to_init(rc), M::pkey_index)},
      {"RESET->INIT without ACCESS_FLAGS", rc, S::reset, without(to_init(rc), M::access_flags)},
      {"RESET->INIT without PORT", rc, S::reset, without(to_init(rc), M::port)},
      {"UD RESET->INIT without QKEY", QpType::ud, S::reset, without(to_init(QpType::ud), M::qkey)},
      {"UD RESET->INIT with ACCESS_FLAGS", QpType::ud, S::reset,
       Step{to_init(QpType::ud).attr, to_init(QpType::ud).mask | M::access_flags}},
      {"INIT->RTR without AV", rc, S::init, without(to_rtr(rc, remote), M::av)},
      {"INIT->RTR without DEST_QPN", rc, S::init, without(to_rtr(rc, remote), M::dest_qpn)},
      {"INIT->RTR without PATH_MTU", rc, S::init, without(to_rtr(rc, remote), M::path_mtu)},
      {"INIT->RTR without MIN_RNR_TIMER", rc, S::init,
       without(to_rtr(rc, remote), M::min_rnr_timer)},
      {"INIT->RTR without RQ_PSN", rc, S::init, without(to_rtr(rc, remote), M::rq_psn)},
      {"INIT->RTR without MAX_DEST_RD_ATOMIC", rc, S::init,
       without(to_rtr(rc, remote), M::max_dest_rd_atomic)},
      {"UC INIT->RTR without AV", QpType::uc, S::init, without(to_rtr(QpType::uc, remote), M::av)},
      {"RTR->RTS without TIMEOUT", rc, S::rtr, without(to_rts(rc), M::timeout)},
      {"RTR->RTS without SQ_PSN", rc, S::rtr, without(to_rts(rc), M::sq_psn)},
      {"RTR->RTS without RNR_RETRY", rc, S::rtr, without(to_rts(rc), M::rnr_retry)},
  };
  Step extra = to_rtr(rc, remote);
  extra.mask |= M::timeout;
  v.push_back({"INIT->RTR with TIMEOUT", rc, S::init, extra});
  Step uc_rnr = to_rtr(QpType::uc, remote);
  uc_rnr.mask |= M::min_rnr_timer;
  v.push_back({"UC INIT->RTR with MIN_RNR_TIMER", QpType::uc, S::init, uc_rnr});
  Step no_grh = to_rtr(rc, remote);
  no_grh.attr.ah_attr.is_global = false;
  v.push_back({"RoCE AV without is_global", rc, S::init, no_grh});
  Step bad_sgid = to_rtr(rc, remote);
  bad_sgid.attr.ah_attr.grh.sgid_index = 2;
  v.push_back({"sgid_index past the GID table", rc, S::init, bad_sgid});
  Step bad_port = to_init(rc);
  bad_port.attr.port_num = 2;
  v.push_back({"port 2 of a one-port device", rc, S::reset, bad_port});
  Step bad_pkey = to_init(rc);
  bad_pkey.attr.pkey_index = 1;
  v.push_back({"pkey_index past the P_Key table", rc, S::reset, bad_pkey});
  Step bad_timeout = to_rts(rc);
  bad_timeout.attr.timeout = 32;
  v.push_back({"timeout 32", rc, S::rtr, bad_timeout});
  Step bad_retry = to_rts(rc);
  bad_retry.attr.retry_cnt = 8;
  v.push_back({"retry_cnt 8", rc, S::rtr, bad_retry});
  Step wrong_cur = to_rts(rc);
  wrong_cur.attr.cur_qp_state = S::init;
  wrong_cur.mask |= M::cur_state;
  v.push_back({"cur_qp_state that is not the QP's state", rc, S::rtr, wrong_cur});
  return v;
}

TEST(InvalidTransitions, FailWithEinvalNamingTheVerbAndLeaveTheQpUnchanged) {
  for (const BadModify& c : bad_modifies()) {
    SCOPED_TRACE(c.name);
    LoneQp q(c.type);
    q.go_to(c.from);
    const QpAttr before = q.qp->query();
    std::string what;
    EXPECT_TRUE(throws_verb_error([&] { q.qp->modify(c.step.attr, c.step.mask); }, "ibv_modify_qp",
                                  EINVAL, &what));
    EXPECT_EQ(q.qp->state(), c.from);
    const QpAttr after = q.qp->query();
    EXPECT_EQ(after.qp_state, c.from);
    EXPECT_EQ(after.dest_qp_num, before.dest_qp_num);
    EXPECT_EQ(after.sq_psn, before.sq_psn);
    EXPECT_EQ(after.port_num, before.port_num);
    EXPECT_EQ(after.timeout, before.timeout);
    EXPECT_EQ(after.qp_access_flags, before.qp_access_flags);
  }
}

// ---------------------------------------------------------------------------------------------
// Posting sends before RTS: strict refuses (EINVAL); rxe refuses too but keeps the WR, which runs
// once the QP reaches RTS; mlx5 accepts it and runs it at RTS.

class EarlySend : public ::testing::TestWithParam<std::tuple<Profile, QpState>> {};

TEST_P(EarlySend, FollowsTheProfile) {
  const auto [profile, state] = GetParam();
  PairOptions o;
  o.connect = false;
  SimPair p(config_for(profile), o);
  connect(*p.b.qp, 200, testing::endpoint_of(p.a, 100));
  const bool runs = profile != Profile::strict;
  Ledger led;
  const Sge rs[2] = {p.b.sge(0, 64), p.b.sge(64, 64)};
  const RecvWr rws[2] = {recv_wr(201, rs[0]), recv_wr(202, rs[1])};
  ASSERT_TRUE(led.post_recv(*p.b.qp, std::span(rws, runs ? 2 : 1)));

  QueuePair& a = *p.a.qp;
  if (state != QpState::reset) modify_to_init(a);
  if (state == QpState::rtr) modify_to_rtr(a, testing::endpoint_of(p.b, 200));
  ASSERT_EQ(a.state(), state);
  std::memcpy(p.a.buf.data(), "early", 6);
  const Sge s1 = p.a.sge(0, 6);
  const SendWr early = send_wr(1, s1);
  const PostResult r = led.post_send(a, early);
  if (profile == Profile::mlx5) {
    EXPECT_FALSE(r.error()) << r.reason;
    EXPECT_EQ(r.posted, 1u);
  } else {
    EXPECT_EQ(r.error(), errno_code(EINVAL));
    EXPECT_EQ(r.error(), Condition::invalid_state);
    EXPECT_EQ(r.posted, 0u);
  }
  if (profile == Profile::rxe) led.add_send(a, early);  // refused, yet it will run
  testing::run_idle(p.world);
  WorkCompletion wc[4];
  EXPECT_EQ(p.b.cq->poll(wc).count, 0u) << "nothing may run before RTS";

  if (state == QpState::reset) modify_to_init(a);
  if (state != QpState::rtr) modify_to_rtr(a, testing::endpoint_of(p.b, 200));
  modify_to_rts(a, 100);
  std::memcpy(p.a.buf.data() + 64, "later", 6);
  const Sge s2 = p.a.sge(64, 6);
  ASSERT_TRUE(led.post_send(a, send_wr(2, s2)));

  const auto recvs = led.poll_n(p.world, *p.b.cq, runs ? 2 : 1);
  const auto sends = led.poll_n(p.world, *p.a.cq, runs ? 2 : 1);
  ASSERT_EQ(recvs.size(), runs ? 2u : 1u);
  ASSERT_EQ(sends.size(), runs ? 2u : 1u);
  EXPECT_EQ(recvs[0].wr_id, 201u);
  EXPECT_EQ(recvs[0].status, WcStatus::success);
  EXPECT_EQ(recvs[0].byte_len, 6u);
  EXPECT_STREQ(p.b.buf.data(), runs ? "early" : "later");
  EXPECT_EQ(sends[0].wr_id, runs ? 1u : 2u);
  if (runs) {
    EXPECT_EQ(recvs[1].wr_id, 202u);
    EXPECT_STREQ(p.b.buf.data() + 64, "later");
    EXPECT_EQ(sends[1].wr_id, 2u);
  }
  for (const auto& wc1 : sends) EXPECT_EQ(wc1.status, WcStatus::success);
  EXPECT_TRUE(led.balanced());
}

INSTANTIATE_TEST_SUITE_P(
    States, EarlySend,
    ::testing::Combine(::testing::Values(Profile::strict, Profile::rxe, Profile::mlx5),
                       ::testing::Values(QpState::reset, QpState::init, QpState::rtr)),
    [](const auto& param) {
      return std::string(sim::to_string(std::get<0>(param.param))) + "_" +
             std::string(to_string(std::get<1>(param.param)));
    });

class EarlySendReset : public ProfileTest {};

// The early WR is discarded by a move to RESET on rxe (only RESET discards it) and on mlx5,
// also when the QP is in RESET already: rxe_qp_reset() and libmlx5's reset of the queue indices
// run on every successful modify to RESET, whatever the state before.
TEST_P(EarlySendReset, AMoveToResetDiscardsTheWaitingWr) {
  for (const QpState state : {QpState::init, QpState::reset}) {
    SCOPED_TRACE("posted in " + std::string(to_string(state)));
    PairOptions o;
    o.connect = false;
    SimPair p(config(), o);
    connect(*p.b.qp, 200, testing::endpoint_of(p.a, 100));
    Ledger led;
    const Sge rs = p.b.sge(0, 64);
    ASSERT_TRUE(led.post_recv(*p.b.qp, recv_wr(201, rs)));
    if (state == QpState::init) modify_to_init(*p.a.qp);
    std::memcpy(p.a.buf.data(), "early", 6);
    const Sge s1 = p.a.sge(0, 6);
    const PostResult early = p.a.qp->post_send(send_wr(1, s1));  // not in the ledger: discarded
    EXPECT_EQ(early.error(), is(Profile::mlx5) ? std::error_code{} : errno_code(EINVAL));
    p.a.qp->modify(bare(QpState::reset).attr, QpAttrMask::state);
    connect(*p.a.qp, 100, testing::endpoint_of(p.b, 200));
    std::memcpy(p.a.buf.data() + 64, "later", 6);
    const Sge s2 = p.a.sge(64, 6);
    ASSERT_TRUE(led.post_send(*p.a.qp, send_wr(2, s2)));
    const auto recvs = led.poll_n(p.world, *p.b.cq, 1);
    ASSERT_EQ(recvs.size(), 1u);
    EXPECT_STREQ(p.b.buf.data(), "later");
    const auto sends = led.drain(p.world, *p.a.cq);
    ASSERT_EQ(sends.size(), 1u);
    EXPECT_EQ(sends[0].wr_id, 2u);
    EXPECT_TRUE(led.balanced());
  }
}

INSTANTIATE_TEST_SUITE_P(Profiles, EarlySendReset, ::testing::Values(Profile::rxe, Profile::mlx5),
                         testing::profile_name);

class PostingByState : public ProfileTest {};

TEST_P(PostingByState, ReceivesAreRefusedInResetAndAcceptedFromInit) {
  PairOptions o;
  o.connect = false;
  SimPair p(config(), o);
  Ledger led;
  const Sge rs = p.b.sge(0, 64);
  const PostResult in_reset = p.b.qp->post_recv(recv_wr(201, rs));
  EXPECT_EQ(in_reset.error(), errno_code(EINVAL));
  EXPECT_EQ(in_reset.posted, 0u);
  modify_to_init(*p.b.qp);
  const PostResult in_init = led.post_recv(*p.b.qp, recv_wr(202, rs));
  EXPECT_FALSE(in_init.error()) << in_init.reason;
  EXPECT_EQ(in_init.posted, 1u);
  modify_to_rtr(*p.b.qp, testing::endpoint_of(p.a, 100));
  modify_to_rts(*p.b.qp, 200);
  connect(*p.a.qp, 100, testing::endpoint_of(p.b, 200));
  const Sge ss = p.a.sge(0, 8);
  ASSERT_TRUE(led.post_send(*p.a.qp, send_wr(1, ss)));
  const auto recvs = led.poll_n(p.world, *p.b.cq, 1);
  ASSERT_EQ(recvs.size(), 1u);
  EXPECT_EQ(recvs[0].wr_id, 202u);
  EXPECT_EQ(recvs[0].status, WcStatus::success);
  led.drain(p.world, *p.a.cq);
  EXPECT_TRUE(led.balanced());
}

// Connects `a` of an unconnected pair to a QP number that does not exist on sim1, with no ACK
// timeout, so its sends stay outstanding forever.
void connect_to_nowhere(SimPair& p) {
  ConnectOptions opt;
  opt.timeout = 0;
  connect(*p.a.qp, 100, Endpoint{p.b.ctx->query_gid(1, 1), 0xabcde, 0}, opt);
}

TEST_P(PostingByState, RtsToErrFlushesEveryOutstandingWr) {
  PairOptions o;
  o.connect = false;
  SimPair p(config(), o);
  connect_to_nowhere(p);
  Ledger led;
  const Sge ss = p.a.sge(0, 16);
  for (std::uint64_t id = 1; id <= 3; ++id) ASSERT_TRUE(led.post_send(*p.a.qp, send_wr(id, ss)));
  testing::run_idle(p.world);
  WorkCompletion wc[16];
  ASSERT_EQ(p.a.cq->poll(wc).count, 0u);
  ASSERT_EQ(p.a.qp->state(), QpState::rts);
  for (std::uint64_t id = 11; id <= 15; ++id) {
    const Sge rs = p.a.sge(1024 + id * 64, 64);
    ASSERT_TRUE(led.post_recv(*p.a.qp, recv_wr(id, rs)));
  }
  p.a.qp->modify(bare(QpState::err).attr, QpAttrMask::state);
  EXPECT_EQ(p.a.qp->state(), QpState::err);
  EXPECT_EQ(p.a.qp->query().qp_state, QpState::err);
  const auto flushed = led.drain(p.world, *p.a.cq);
  ASSERT_EQ(flushed.size(), 8u);
  std::vector<std::uint64_t> sends, recvs;
  for (const auto& w : flushed) {
    EXPECT_EQ(w.status, WcStatus::wr_flush_err);
    EXPECT_EQ(w.qp_num, p.a.qp->qp_num());
    (w.wr_id < 10 ? sends : recvs).push_back(w.wr_id);
  }
  EXPECT_EQ(sends, (std::vector<std::uint64_t>{1, 2, 3}));
  EXPECT_EQ(recvs, (std::vector<std::uint64_t>{11, 12, 13, 14, 15}));
  EXPECT_TRUE(async_events(*p.a.ctx).empty()) << "a requested move to ERR raises no event";
  EXPECT_TRUE(led.balanced());

  // Posting on an ERR QP: sends are accepted and flushed; receives flushed except on rxe.
  const PostResult late = led.post_send(*p.a.qp, send_wr(4, ss));
  EXPECT_FALSE(late.error()) << late.reason;
  EXPECT_EQ(late.posted, 1u);
  const auto late_wc = led.poll_n(p.world, *p.a.cq, 1);
  ASSERT_EQ(late_wc.size(), 1u);
  EXPECT_EQ(late_wc[0].wr_id, 4u);
  EXPECT_EQ(late_wc[0].status, WcStatus::wr_flush_err);
  const Sge rs = p.a.sge(4096, 64);
  const RecvWr late_recv = recv_wr(16, rs);
  const PostResult rr = p.a.qp->post_recv(late_recv);
  EXPECT_FALSE(rr.error()) << rr.reason;
  const auto after = testing::bounded_poll(p.world, *p.a.cq, SIZE_MAX);
  if (is(Profile::rxe)) {
    EXPECT_TRUE(after.empty()) << "rxe never completes a receive posted in ERR";
  } else {
    led.add_recv(*p.a.qp, late_recv);
    led.record(after);
    ASSERT_EQ(after.size(), 1u);
    EXPECT_EQ(after[0].wr_id, 16u);
    EXPECT_EQ(after[0].status, WcStatus::wr_flush_err);
  }
  EXPECT_TRUE(led.balanced());
}

// Sends posted on an ERR QP complete at once, so they free their slots as any completion does:
// on rxe right away, on hardware when polled.
TEST_P(PostingByState, SendsPostedInErrNeverFillTheQueueOnceCompleted) {
  PairOptions o;
  o.connect = false;
  o.cap = QpCap{4, 4, 1, 1, 0};
  SimPair p(config(), o);
  connect_to_nowhere(p);
  p.a.qp->modify(bare(QpState::err).attr, QpAttrMask::state);
  const std::uint32_t depth = p.a.qp->query().cap.max_send_wr;
  const Sge ss = p.a.sge(0, 8);
  Ledger led;
  std::uint64_t id = 1;
  for (; id <= depth; ++id) ASSERT_TRUE(led.post_send(*p.a.qp, send_wr(id, ss))) << id;
  const PostResult extra = led.post_send(*p.a.qp, send_wr(id, ss));
  if (is(Profile::rxe)) {
    EXPECT_FALSE(extra.error()) << "rxe frees a slot when its WR completes: " << extra.reason;
  } else {
    EXPECT_EQ(extra.error(), errno_code(ENOMEM)) << "hardware frees a slot when it is polled";
    EXPECT_EQ(led.poll_n(p.world, *p.a.cq, depth).size(), depth);
    EXPECT_TRUE(led.post_send(*p.a.qp, send_wr(id, ss)));
  }
  led.drain(p.world, *p.a.cq);
  EXPECT_TRUE(led.balanced());
}

// A batch of receives on an ERR QP whose second WR is refused: the first was taken, so it is
// flushed like any other (rxe: never completes, as a receive posted in ERR never does there).
TEST_P(PostingByState, ReceivesTakenInErrBeforeARefusedOneAreFlushed) {
  SimPair p(config());
  p.a.qp->modify(bare(QpState::err).attr, QpAttrMask::state);
  const Sge one[1] = {p.a.sge(0, 64)};
  const Sge many[5] = {p.a.sge(0, 8), p.a.sge(8, 8), p.a.sge(16, 8), p.a.sge(24, 8),
                       p.a.sge(32, 8)};  // more than max_recv_sge (4)
  const RecvWr batch[2] = {{1, one}, {2, many}};
  Ledger led;
  const PostResult r = p.a.qp->post_recv(batch);
  EXPECT_EQ(r.error(), errno_code(EINVAL)) << r.reason;
  ASSERT_EQ(r.posted, 1u);
  const auto wcs = testing::bounded_poll(p.world, *p.a.cq, SIZE_MAX);
  if (is(Profile::rxe)) {
    EXPECT_TRUE(wcs.empty()) << "rxe never completes a receive posted in ERR";
  } else {
    led.add_recv(*p.a.qp, batch[0]);
    led.record(wcs);
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].wr_id, 1u);
    EXPECT_EQ(wcs[0].status, WcStatus::wr_flush_err);
  }
  EXPECT_TRUE(led.balanced());
}

// ERR->RESET works on every profile; libmlx5 also removes the QP's unpolled completions from
// its CQs when it moves to RESET, rxe leaves them there.
TEST_P(PostingByState, ErrToResetThenReconnectWorks) {
  SimPair p(config());
  const Sge rs = p.b.sge(0, 64);
  ASSERT_TRUE(p.b.qp->post_recv(recv_wr(201, rs)));
  p.b.qp->modify(bare(QpState::err).attr, QpAttrMask::state);
  p.a.qp->modify(bare(QpState::err).attr, QpAttrMask::state);
  testing::run_idle(p.world);
  p.b.qp->modify(bare(QpState::reset).attr, QpAttrMask::state);
  p.a.qp->modify(bare(QpState::reset).attr, QpAttrMask::state);
  EXPECT_EQ(p.b.qp->state(), QpState::reset);
  EXPECT_EQ(p.b.qp->query().qp_state, QpState::reset);
  const auto stale = testing::bounded_poll(p.world, *p.b.cq, SIZE_MAX);
  if (is(Profile::rxe)) {
    ASSERT_EQ(stale.size(), 1u);
    EXPECT_EQ(stale[0].wr_id, 201u);
    EXPECT_EQ(stale[0].status, WcStatus::wr_flush_err);
  } else {
    EXPECT_TRUE(stale.empty());
  }

  p.connect_both();
  Ledger led;
  ASSERT_TRUE(led.post_recv(*p.b.qp, recv_wr(202, rs)));
  std::memcpy(p.a.buf.data(), "again", 6);
  const Sge ss = p.a.sge(0, 6);
  ASSERT_TRUE(led.post_send(*p.a.qp, send_wr(1, ss)));
  const auto recvs = led.poll_n(p.world, *p.b.cq, 1);
  ASSERT_EQ(recvs.size(), 1u);
  EXPECT_EQ(recvs[0].wr_id, 202u);
  EXPECT_EQ(recvs[0].status, WcStatus::success);
  EXPECT_STREQ(p.b.buf.data(), "again");
  led.drain(p.world, *p.a.cq);
  EXPECT_TRUE(led.balanced());
}

INSTANTIATE_TEST_SUITE_P(Profiles, PostingByState,
                         ::testing::Values(Profile::strict, Profile::rxe, Profile::mlx5),
                         testing::profile_name);

}  // namespace
}  // namespace verbsim
