// The QP state machine (valid and invalid transitions, required and forbidden attributes) and
// what posting does in each state.
#include <cerrno>
#include <cstdio>
#include <string>
#include <vector>

#include "conformance.hpp"

namespace verbsim::conformance {
namespace {

struct Step {
  QpAttr attr;
  QpAttrMask mask;
};

class StateFixture : public Conformance {
 protected:
  static Step bare(QpState s) {
    Step st{{}, QpAttrMask::state};
    st.attr.qp_state = s;
    return st;
  }
  static Step to_init(QpType t) {
    Step s = bare(QpState::init);
    s.attr.pkey_index = 0;
    s.attr.port_num = 1;
    s.mask |= QpAttrMask::pkey_index | QpAttrMask::port;
    if (t == QpType::ud) {
      s.attr.qkey = 0x11111111;
      s.mask |= QpAttrMask::qkey;
    } else {
      s.attr.qp_access_flags = Access::local_write | Access::remote_write | Access::remote_read;
      s.mask |= QpAttrMask::access_flags;
    }
    return s;
  }
  Step to_rtr(QpType t, std::uint32_t dest_qpn) const {
    Step s = bare(QpState::rtr);
    if (t == QpType::ud) return s;
    s.attr.path_mtu = Mtu::mtu_1024;
    s.attr.dest_qp_num = dest_qpn;
    s.attr.rq_psn = 200;
    s.attr.ah_attr = ah_attr();
    s.mask |= QpAttrMask::av | QpAttrMask::path_mtu | QpAttrMask::dest_qpn | QpAttrMask::rq_psn;
    if (t == QpType::rc) {
      s.attr.max_dest_rd_atomic = 1;
      s.attr.min_rnr_timer = 12;
      s.mask |= QpAttrMask::max_dest_rd_atomic | QpAttrMask::min_rnr_timer;
    }
    return s;
  }
  static Step to_rts(QpType t) {
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
  static Step without(Step s, QpAttrMask m) {
    s.mask &= ~m;
    return s;
  }
  static int apply(QueuePair& qp, const Step& s) {
    return verb_errno([&] { qp.modify(s.attr, s.mask); });
  }
  // Brings a fresh QP to `state` through the usual steps (towards itself: enough to move it).
  void bring_to(QueuePair& qp, QpState state) {
    const QpType t = qp.type();
    if (state == QpState::reset) return;
    ASSERT_EQ(apply(qp, to_init(t)), 0);
    if (state == QpState::init) return;
    if (state == QpState::err) {
      ASSERT_EQ(apply(qp, bare(QpState::err)), 0);
      return;
    }
    ASSERT_EQ(apply(qp, to_rtr(t, qp.qp_num())), 0);
    if (state == QpState::rtr) return;
    ASSERT_EQ(apply(qp, to_rts(t)), 0);
  }
  // A fresh RC QP on its own CQ, brought to `state`.
  std::unique_ptr<QueuePair> qp_in(QpState state, QpType t = QpType::rc) {
    if (!cq_) cq_ = make_cq(64);
    auto qp = make_qp(*cq_, *cq_, QpCap{8, 8, 1, 1, 0}, t);
    bring_to(*qp, state);
    return qp;
  }
  // Expects `step` refused with EINVAL and the QP still in `from`.
  void expect_refused(QpState from, const Step& step, QpType t = QpType::rc) {
    auto qp = qp_in(from, t);
    CHECK_ERR("modify", apply(*qp, step), EINVAL);
    CHECK_OBS("state", qp->state(), from);
  }

  std::unique_ptr<CompletionQueue> cq_;
};

class QpStates : public StateFixture {
 protected:
  void TearDown() override {
    cq_.reset();
    StateFixture::TearDown();
  }
};
class QpAttrs : public QpStates {};
class Posting : public QpStates {};

// ---------------------------------------------------------------------------------------------
// Valid transitions

TEST_P(QpStates, ResetToInit) {
  auto qp = qp_in(QpState::reset);
  CHECK_ERR("modify", apply(*qp, to_init(QpType::rc)), 0);
  const QpAttr a = qp->query(QpAttrMask::state | QpAttrMask::port | QpAttrMask::pkey_index |
                             QpAttrMask::access_flags);
  CHECK_OBS("state", a.qp_state, QpState::init);
  CHECK_OBS("port_num", a.port_num, 1);
  CHECK_OBS("pkey_index", a.pkey_index, 0);
  CHECK_OBS("access", static_cast<unsigned>(to_underlying(a.qp_access_flags)),
            static_cast<unsigned>(to_underlying(Access::local_write | Access::remote_write |
                                                Access::remote_read)));
}

TEST_P(QpStates, InitToRtr) {
  auto qp = qp_in(QpState::init);
  CHECK_ERR("modify", apply(*qp, to_rtr(QpType::rc, qp->qp_num())), 0);
  const QpAttr a = qp->query(QpAttrMask::state | QpAttrMask::dest_qpn | QpAttrMask::rq_psn |
                             QpAttrMask::path_mtu | QpAttrMask::min_rnr_timer |
                             QpAttrMask::max_dest_rd_atomic);
  CHECK_OBS("state", a.qp_state, QpState::rtr);
  CHECK_OBS("dest_qpn_is_self", a.dest_qp_num == qp->qp_num(), true);
  CHECK_OBS("rq_psn", a.rq_psn, 200);
  CHECK_OBS("path_mtu", mtu_bytes(a.path_mtu), 1024);
  CHECK_OBS("min_rnr_timer", a.min_rnr_timer, 12);
  CHECK_OBS("max_dest_rd_atomic", a.max_dest_rd_atomic, 1);
}

TEST_P(QpStates, RtrToRts) {
  auto qp = qp_in(QpState::rtr);
  CHECK_ERR("modify", apply(*qp, to_rts(QpType::rc)), 0);
  const QpAttr a = qp->query(QpAttrMask::state | QpAttrMask::sq_psn | QpAttrMask::timeout |
                             QpAttrMask::retry_cnt | QpAttrMask::rnr_retry |
                             QpAttrMask::max_qp_rd_atomic);
  CHECK_OBS("state", a.qp_state, QpState::rts);
  CHECK_OBS("sq_psn", a.sq_psn, 300);
  CHECK_OBS("timeout", a.timeout, 14);
  CHECK_OBS("retry_cnt", a.retry_cnt, 7);
  CHECK_OBS("rnr_retry", a.rnr_retry, 7);
  CHECK_OBS("max_rd_atomic", a.max_rd_atomic, 1);
}

TEST_P(QpStates, UdResetToRts) {
  auto qp = qp_in(QpState::reset, QpType::ud);
  CHECK_ERR("init", apply(*qp, to_init(QpType::ud)), 0);
  CHECK_ERR("rtr", apply(*qp, to_rtr(QpType::ud, 0)), 0);
  CHECK_ERR("rts", apply(*qp, to_rts(QpType::ud)), 0);
  const QpAttr a = qp->query(QpAttrMask::state | QpAttrMask::qkey | QpAttrMask::sq_psn);
  CHECK_OBS("state", a.qp_state, QpState::rts);
  CHECK_OBS("qkey", a.qkey, 0x11111111u);
  CHECK_OBS("sq_psn", a.sq_psn, 300);
}

TEST_P(QpStates, UcResetToRts) {
  auto qp = qp_in(QpState::reset, QpType::uc);
  CHECK_ERR("init", apply(*qp, to_init(QpType::uc)), 0);
  CHECK_ERR("rtr", apply(*qp, to_rtr(QpType::uc, qp->qp_num())), 0);
  CHECK_ERR("rts", apply(*qp, to_rts(QpType::uc)), 0);
  CHECK_OBS("state", qp->state(), QpState::rts);
}

// What ibv_query_qp reports once connect() has taken the QP to RTS with its defaults.
TEST_P(QpStates, QueryAfterConnect) {
  Pair p = make_pair();
  const QpAttr a = p.a->query(QpAttrMask::state | QpAttrMask::path_mtu | QpAttrMask::dest_qpn | QpAttrMask::rq_psn |
                              QpAttrMask::sq_psn | QpAttrMask::access_flags | QpAttrMask::max_qp_rd_atomic |
                              QpAttrMask::max_dest_rd_atomic | QpAttrMask::min_rnr_timer | QpAttrMask::port |
                              QpAttrMask::timeout | QpAttrMask::retry_cnt | QpAttrMask::rnr_retry |
                              QpAttrMask::pkey_index | QpAttrMask::av | QpAttrMask::cap);
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "state=%d mtu=%d dqpn_ok=%d rq_psn=%u sq_psn=%u access=%u rd=%u dest_rd=%u rnr_timer=%u port=%u "
                "timeout=%u retry=%u rnr_retry=%u pkey=%u global=%d sgid=%u hop=%u sl=%u sq_draining=%u",
                static_cast<int>(a.qp_state), static_cast<int>(a.path_mtu), a.dest_qp_num == p.b->qp_num(),
                a.rq_psn, a.sq_psn, static_cast<unsigned>(to_underlying(a.qp_access_flags)), a.max_rd_atomic,
                a.max_dest_rd_atomic, a.min_rnr_timer, a.port_num, a.timeout, a.retry_cnt, a.rnr_retry,
                a.pkey_index, a.ah_attr.is_global, a.ah_attr.grh.sgid_index, a.ah_attr.grh.hop_limit,
                a.ah_attr.sl, a.sq_draining);
  CHECK_OBS("attrs", std::string(buf),
            "state=3 mtu=3 dqpn_ok=1 rq_psn=200 sq_psn=100 access=15 rd=1 dest_rd=1 rnr_timer=12 port=1 "
            "timeout=14 retry=7 rnr_retry=7 pkey=0 global=1 sgid=1 hop=64 sl=0 sq_draining=0");
}

TEST_P(QpStates, InitToInit) {
  auto qp = qp_in(QpState::init);
  Step s = bare(QpState::init);
  s.attr.qp_access_flags = Access::local_write;
  s.mask |= QpAttrMask::access_flags;
  CHECK_ERR("modify", apply(*qp, s), 0);
  const QpAttr a = qp->query(QpAttrMask::state | QpAttrMask::access_flags);
  CHECK_OBS("state", a.qp_state, QpState::init);
  CHECK_OBS("access", static_cast<unsigned>(to_underlying(a.qp_access_flags)), 1u);
}

TEST_P(QpStates, ResetToReset) {
  auto qp = qp_in(QpState::reset);
  CHECK_ERR("modify", apply(*qp, bare(QpState::reset)), 0);
  CHECK_OBS("state", qp->state(), QpState::reset);
}

TEST_P(QpStates, RtsToRtsWithOptionalAttributes) {
  auto qp = qp_in(QpState::rts);
  Step s = bare(QpState::rts);
  s.attr.min_rnr_timer = 5;
  s.attr.qp_access_flags = Access::local_write;
  s.mask |= QpAttrMask::min_rnr_timer | QpAttrMask::access_flags;
  CHECK_ERR("modify", apply(*qp, s), 0);
  const QpAttr a = qp->query(QpAttrMask::state | QpAttrMask::min_rnr_timer);
  CHECK_OBS("state", a.qp_state, QpState::rts);
  CHECK_OBS("min_rnr_timer", a.min_rnr_timer, 5);
}

TEST_P(QpStates, RtsToSqdAndBack) {
  auto qp = qp_in(QpState::rts);
  CHECK_ERR("to_sqd", apply(*qp, bare(QpState::sqd)), 0);
  CHECK_OBS("state_sqd", wait_state(*qp, QpState::sqd), QpState::sqd);
  CHECK_ERR("to_rts", apply(*qp, bare(QpState::rts)), 0);
  CHECK_OBS("state_rts", qp->state(), QpState::rts);
}

// A QP whose send is never acknowledged (its peer does not exist, and no ACK timeout) moves to
// SQD and stays draining: rxe then refuses every state but ERR (rxe_qp_chk_attr).
TEST_P(QpStates, SqdWhileDrainingAcceptsOnlyErr) {
  auto cq = make_cq(16);
  ConnectOptions o;
  o.timeout = 0;  // wait for the ACK forever
  auto a = qp_to_missing_peer(*cq, o);
  const Sge s = sge(0, 16);
  CHECK_ERR("post", a->post_send(send_wr(1, &s)).error(), 0);
  CHECK_ERR("to_sqd", apply(*a, bare(QpState::sqd)), 0);
  CHECK_OBS("state_sqd", wait_state(*a, QpState::sqd), QpState::sqd);
  const int held = expect().sqd_holds_while_draining ? EINVAL : 0;
  CHECK_ERR("sqd_to_sqd", apply(*a, bare(QpState::sqd)), held);
  CHECK_ERR("to_reset", apply(*a, bare(QpState::reset)), held);
  CHECK_OBS("state_after", a->state(), held != 0 ? QpState::sqd : QpState::reset);
  if (held != 0) {
    CHECK_ERR("to_rts", apply(*a, bare(QpState::rts)), EINVAL);
    CHECK_ERR("to_err", apply(*a, bare(QpState::err)), 0);
    CHECK_OBS("state_err", a->state(), QpState::err);
  }
}

TEST_P(QpStates, SqdToSqd) {
  auto qp = qp_in(QpState::rts);
  ASSERT_EQ(apply(*qp, bare(QpState::sqd)), 0);
  ASSERT_EQ(wait_state(*qp, QpState::sqd), QpState::sqd);
  CHECK_ERR("modify", apply(*qp, bare(QpState::sqd)), 0);
  CHECK_OBS("state", qp->state(), QpState::sqd);
}

TEST_P(QpStates, EveryStateToErr) {
  for (const QpState from : {QpState::init, QpState::rtr, QpState::rts, QpState::sqd}) {
    auto qp = qp_in(from == QpState::sqd ? QpState::rts : from);
    if (from == QpState::sqd) {
      ASSERT_EQ(apply(*qp, bare(QpState::sqd)), 0);
    }
    const std::string k(to_string(from));
    CHECK_ERR(k + "->ERR", apply(*qp, bare(QpState::err)), 0);
    CHECK_OBS(k + ".state", qp->state(), QpState::err);
  }
}

TEST_P(QpStates, EveryStateToReset) {
  for (const QpState from : {QpState::init, QpState::rtr, QpState::rts, QpState::err}) {
    auto qp = qp_in(from);
    const std::string k(to_string(from));
    CHECK_ERR(k + "->RESET", apply(*qp, bare(QpState::reset)), 0);
    CHECK_OBS(k + ".state", qp->state(), QpState::reset);
  }
}

TEST_P(QpStates, ErrToErr) {
  auto qp = qp_in(QpState::err);
  CHECK_ERR("modify", apply(*qp, bare(QpState::err)), 0);
  CHECK_OBS("state", qp->state(), QpState::err);
}

TEST_P(QpStates, ReusedAfterErrAndReset) {
  Pair p = make_pair();
  move_to(*p.a, QpState::err);
  move_to(*p.a, QpState::reset);
  move_to(*p.b, QpState::reset);
  connect_pair(*p.a, *p.b);
  const Sge s = sge(0, 32);
  const Sge r = sge(4096, 32);
  ASSERT_FALSE(p.b->post_recv(recv_wr(2, &r)).error());
  CHECK_ERR("post", p.a->post_send(send_wr(1, &s)).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 1)), "SUCCESS/SEND/32");
  CHECK_OBS("receiver", describe(poll_n(*p.cq_b, 1)), "SUCCESS/RECV/32");
}

// ---------------------------------------------------------------------------------------------
// Invalid transitions: EINVAL, state unchanged

TEST_P(QpStates, ResetToRtrRefused) { expect_refused(QpState::reset, to_rtr(QpType::rc, 1)); }
TEST_P(QpStates, ResetToRtsRefused) { expect_refused(QpState::reset, to_rts(QpType::rc)); }
TEST_P(QpStates, InitToRtsRefused) { expect_refused(QpState::init, to_rts(QpType::rc)); }
TEST_P(QpStates, RtrToInitRefused) { expect_refused(QpState::rtr, bare(QpState::init)); }
TEST_P(QpStates, RtsToRtrRefused) { expect_refused(QpState::rts, bare(QpState::rtr)); }
TEST_P(QpStates, RtrToRtrRefused) { expect_refused(QpState::rtr, bare(QpState::rtr)); }
TEST_P(QpStates, InitToResetToRtrRefused) {
  auto qp = qp_in(QpState::init);
  CHECK_ERR("to_reset", apply(*qp, bare(QpState::reset)), 0);
  CHECK_ERR("to_rtr", apply(*qp, to_rtr(QpType::rc, qp->qp_num())), EINVAL);
  CHECK_OBS("state", qp->state(), QpState::reset);
}
TEST_P(QpStates, RtsToInitRefused) { expect_refused(QpState::rts, bare(QpState::init)); }
TEST_P(QpStates, ErrToRtsRefused) { expect_refused(QpState::err, bare(QpState::rts)); }
TEST_P(QpStates, ErrToInitRefused) { expect_refused(QpState::err, to_init(QpType::rc)); }
TEST_P(QpStates, ResetToSqdRefused) { expect_refused(QpState::reset, bare(QpState::sqd)); }
TEST_P(QpStates, ResetToErrRefused) { expect_refused(QpState::reset, bare(QpState::err)); }

// ---------------------------------------------------------------------------------------------
// Attribute masks

TEST_P(QpAttrs, InitMissingPkeyIndex) {
  expect_refused(QpState::reset, without(to_init(QpType::rc), QpAttrMask::pkey_index));
}
TEST_P(QpAttrs, InitMissingAccessFlags) {
  expect_refused(QpState::reset, without(to_init(QpType::rc), QpAttrMask::access_flags));
}
TEST_P(QpAttrs, InitMissingPort) {
  expect_refused(QpState::reset, without(to_init(QpType::rc), QpAttrMask::port));
}
TEST_P(QpAttrs, UdInitMissingQkey) {
  expect_refused(QpState::reset, without(to_init(QpType::ud), QpAttrMask::qkey), QpType::ud);
}
TEST_P(QpAttrs, UdInitWithAccessFlagsRefused) {
  Step s = to_init(QpType::ud);
  s.attr.qp_access_flags = Access::local_write;
  s.mask |= QpAttrMask::access_flags;
  expect_refused(QpState::reset, s, QpType::ud);
}
TEST_P(QpAttrs, InitWithSqPsnRefused) {
  Step s = to_init(QpType::rc);
  s.attr.sq_psn = 5;
  s.mask |= QpAttrMask::sq_psn;
  expect_refused(QpState::reset, s);
}
TEST_P(QpAttrs, RtrMissingAv) {
  expect_refused(QpState::init, without(to_rtr(QpType::rc, 1), QpAttrMask::av));
}
TEST_P(QpAttrs, RtrMissingDestQpn) {
  expect_refused(QpState::init, without(to_rtr(QpType::rc, 1), QpAttrMask::dest_qpn));
}
TEST_P(QpAttrs, RtrMissingPathMtu) {
  expect_refused(QpState::init, without(to_rtr(QpType::rc, 1), QpAttrMask::path_mtu));
}
TEST_P(QpAttrs, RtrMissingMinRnrTimer) {
  expect_refused(QpState::init, without(to_rtr(QpType::rc, 1), QpAttrMask::min_rnr_timer));
}
TEST_P(QpAttrs, RtrMissingRqPsn) {
  expect_refused(QpState::init, without(to_rtr(QpType::rc, 1), QpAttrMask::rq_psn));
}
TEST_P(QpAttrs, RtrMissingMaxDestRdAtomic) {
  expect_refused(QpState::init, without(to_rtr(QpType::rc, 1), QpAttrMask::max_dest_rd_atomic));
}
TEST_P(QpAttrs, UdRtsMissingSqPsn) {
  expect_refused(QpState::rtr, without(to_rts(QpType::ud), QpAttrMask::sq_psn), QpType::ud);
}
TEST_P(QpAttrs, RtsMissingEachRequired) {
  const std::pair<const char*, QpAttrMask> required[] = {
      {"sq_psn", QpAttrMask::sq_psn},         {"timeout", QpAttrMask::timeout},
      {"retry_cnt", QpAttrMask::retry_cnt},   {"rnr_retry", QpAttrMask::rnr_retry},
      {"max_qp_rd_atomic", QpAttrMask::max_qp_rd_atomic}};
  for (const auto& [name, bit] : required) {
    auto qp = qp_in(QpState::rtr);
    CHECK_ERR(std::string("no_") + name, apply(*qp, without(to_rts(QpType::rc), bit)), EINVAL);
    EXPECT_EQ(qp->state(), QpState::rtr);
  }
}
TEST_P(QpAttrs, CurStateMatching) {
  auto qp = qp_in(QpState::rts);
  Step s = bare(QpState::rts);
  s.attr.cur_qp_state = QpState::rts;
  s.mask |= QpAttrMask::cur_state;
  CHECK_ERR("modify", apply(*qp, s), 0);
  CHECK_OBS("state", qp->state(), QpState::rts);
}
TEST_P(QpAttrs, CurStateNotAllowedFromReset) {
  Step s = to_init(QpType::rc);
  s.attr.cur_qp_state = QpState::reset;
  s.mask |= QpAttrMask::cur_state;
  expect_refused(QpState::reset, s);
}
TEST_P(QpAttrs, CurStateNotTheQpState) {
  // A QP in INIT told it is in RTS, moving RTS->RTS.
  auto qp = qp_in(QpState::init);
  Step s = bare(QpState::rts);
  s.attr.cur_qp_state = QpState::rts;
  s.mask |= QpAttrMask::cur_state;
  const bool trusted = expect().trusts_cur_state;
  CHECK_ERR("modify", apply(*qp, s), trusted ? 0 : EINVAL);
  CHECK_OBS("state", qp->query(QpAttrMask::state).qp_state, trusted ? QpState::rts : QpState::init);
}
TEST_P(QpAttrs, PortOutOfRange) {
  Step s = to_init(QpType::rc);
  s.attr.port_num = 2;
  expect_refused(QpState::reset, s);
}
TEST_P(QpAttrs, PkeyIndexOutOfRange) {
  Step s = to_init(QpType::rc);
  s.attr.pkey_index = 5;  // the P_Key table has one entry
  auto qp = qp_in(QpState::reset);
  const bool checked = expect().pkey_index_checked;
  CHECK_ERR("modify", apply(*qp, s), checked ? EINVAL : 0);
  CHECK_OBS("state", qp->state(), checked ? QpState::reset : QpState::init);
}
TEST_P(QpAttrs, TimeoutAbove31) {
  Step s = to_rts(QpType::rc);
  s.attr.timeout = 32;
  expect_refused(QpState::rtr, s);
}
TEST_P(QpAttrs, MaxRdAtomicAboveDevice) {
  Step s = to_rts(QpType::rc);
  s.attr.max_rd_atomic = static_cast<std::uint8_t>(expect().max_qp_rd_atom + 1);
  expect_refused(QpState::rtr, s);
}
TEST_P(QpAttrs, SgidIndexUnused) {
  Step s = to_rtr(QpType::rc, 1);
  s.attr.ah_attr.grh.sgid_index = 5;  // no GID there: inside rxe's table, past strict's
  auto qp = qp_in(QpState::init);
  CHECK_ERR("modify", apply(*qp, s), 5 < expect().gid_tbl_len ? ENODATA : EINVAL);
  CHECK_OBS("state", qp->state(), QpState::init);
}
// Attributes the transition does not take for the QP's type (the kernel's table of required
// and optional attributes): UC has no responder resources or ACK timeout, UD no destination
// QP, and RTS->RTS cannot change the send PSN or the timeout.
TEST_P(QpAttrs, UcRtrWithMaxDestRdAtomicRefused) {
  Step s = to_rtr(QpType::uc, 0x11);
  s.attr.max_dest_rd_atomic = 1;
  s.mask |= QpAttrMask::max_dest_rd_atomic;
  expect_refused(QpState::init, s, QpType::uc);
}
TEST_P(QpAttrs, UcRtsWithTimeoutRefused) {
  Step s = to_rts(QpType::uc);
  s.attr.timeout = 14;
  s.mask |= QpAttrMask::timeout;
  expect_refused(QpState::rtr, s, QpType::uc);
}
TEST_P(QpAttrs, UdRtrWithDestQpnRefused) {
  Step s = to_rtr(QpType::ud, 0x11);
  s.attr.dest_qp_num = 0x11;
  s.mask |= QpAttrMask::dest_qpn;
  expect_refused(QpState::init, s, QpType::ud);
}
TEST_P(QpAttrs, RtsToRtsWithSqPsnRefused) {
  Step s = bare(QpState::rts);
  s.attr.sq_psn = 77;
  s.mask |= QpAttrMask::sq_psn;
  expect_refused(QpState::rts, s);
}
TEST_P(QpAttrs, RtsToRtsWithTimeoutRefused) {
  Step s = bare(QpState::rts);
  s.attr.timeout = 10;
  s.mask |= QpAttrMask::timeout;
  expect_refused(QpState::rts, s);
}

TEST_P(QpAttrs, CapInMaskRefused) {
  Step s = bare(QpState::rts);
  s.attr.cap = QpCap{8, 8, 1, 1, 0};
  s.mask |= QpAttrMask::cap;
  expect_refused(QpState::rts, s);
}

// ---------------------------------------------------------------------------------------------
// Posting in each state

class PostEarly : public Posting {
 protected:
  // Posts one SEND in `state`, then brings both QPs to RTS with a receive waiting, and reports
  // whether the early send ran.
  void run(QpState state) {
    Pair p = make_pair(PairOptions::unconnected());
    if (state != QpState::reset) {
      ASSERT_EQ(apply(*p.a, to_init(QpType::rc)), 0);
    }
    if (state == QpState::rtr) {
      ASSERT_EQ(apply(*p.a, to_rtr(QpType::rc, p.b->qp_num())), 0);
    }
    const Sge s = sge(0, 48);
    const PostResult r = p.a->post_send(send_wr(1, &s));
    CHECK_ERR("post", r.error(), expect().post_send_before_rts);
    CHECK_OBS("posted", r.posted, expect().post_send_before_rts == 0 ? 1 : 0);
    CHECK_OBS("state", p.a->state(), state);
    const Sge rs = sge(4096, 64);
    ASSERT_EQ(apply(*p.b, to_init(QpType::rc)), 0);
    ASSERT_FALSE(p.b->post_recv(recv_wr(9, &rs)).error());
    // Finish the connection (PSNs as connect_pair would set them).
    connect(*p.b, 200, endpoint(*p.a, 100), options());
    if (state == QpState::reset) modify_to_init(*p.a, options());
    if (state != QpState::rtr) modify_to_rtr(*p.a, endpoint(*p.b, 200), options());
    modify_to_rts(*p.a, 100, options());
    const bool kept = expect().early_send_kept;
    const bool runs_at_rts = kept && expect().rts_starts_send_queue;
    CHECK_OBS("at_rts", describe(runs_at_rts ? poll_n(*p.cq_a, 1) : poll_quiet(*p.cq_a)),
              runs_at_rts ? "SUCCESS/SEND/48" : "none");
    // The next post rings the doorbell.
    ASSERT_FALSE(p.b->post_recv(recv_wr(10, &rs)).error());
    const Sge s2 = sge(0, 24);
    CHECK_ERR("next_post", p.a->post_send(send_wr(2, &s2)).error(), 0);
    const bool both = kept && !runs_at_rts;
    CHECK_OBS("after_next", describe(poll_n(*p.cq_a, both ? 2 : 1)),
              both ? "SUCCESS/SEND/48,SUCCESS/SEND/24" : "SUCCESS/SEND/24");
    CHECK_OBS("peer", describe(poll_n(*p.cq_b, kept ? 2 : 1)),
              kept ? "SUCCESS/RECV/48,SUCCESS/RECV/24" : "SUCCESS/RECV/24");
  }
};

TEST_P(PostEarly, SendInReset) { run(QpState::reset); }
TEST_P(PostEarly, SendInInit) { run(QpState::init); }
TEST_P(PostEarly, SendInRtr) { run(QpState::rtr); }

// A send posted in RESET and then a move to RESET from RESET: whatever the post said (rxe keeps
// the refused WR, mlx5 takes it), the move empties the send queue, so only the next send runs.
TEST_P(PostEarly, SendInResetThenResetAgainIsDiscarded) {
  Pair p = make_pair(PairOptions::unconnected());
  const Sge s = sge(0, 48);
  const PostResult r = p.a->post_send(send_wr(1, &s));
  CHECK_ERR("post", r.error(), expect().post_send_before_rts);
  CHECK_ERR("reset_again", apply(*p.a, bare(QpState::reset)), 0);
  CHECK_OBS("state", p.a->state(), QpState::reset);
  const Sge rs = sge(4096, 64);
  ASSERT_EQ(apply(*p.b, to_init(QpType::rc)), 0);
  ASSERT_FALSE(p.b->post_recv(recv_wr(9, &rs)).error());
  ASSERT_FALSE(p.b->post_recv(recv_wr(10, &rs)).error());
  connect(*p.b, 200, endpoint(*p.a, 100), options());
  connect(*p.a, 100, endpoint(*p.b, 200), options());
  CHECK_OBS("at_rts", describe(poll_quiet(*p.cq_a)), "none");
  const Sge s2 = sge(0, 24);
  CHECK_ERR("next_post", p.a->post_send(send_wr(2, &s2)).error(), 0);
  CHECK_OBS("after_next", describe(poll_n(*p.cq_a, 1)), "SUCCESS/SEND/24");
  CHECK_OBS("peer", describe(poll_n(*p.cq_b, 1)), "SUCCESS/RECV/24");
  CHECK_OBS("nothing_more", describe(poll_quiet(*p.cq_a)), "none");
}

TEST_P(Posting, RecvInResetRefused) {
  auto qp = qp_in(QpState::reset);
  const Sge r = sge(0, 64);
  const RecvWr wrs[] = {recv_wr(1, &r), recv_wr(2, &r)};
  const PostResult res = qp->post_recv(wrs);
  CHECK_ERR("post", res.error(), EINVAL);
  CHECK_OBS("posted", res.posted, 0);
}

TEST_P(Posting, RecvInInitIsKept) {
  Pair p = make_pair(PairOptions::unconnected());
  modify_to_init(*p.b, options());
  const Sge r = sge(4096, 64);
  CHECK_ERR("post_in_init", p.b->post_recv(recv_wr(5, &r)).error(), 0);
  connect_pair(*p.a, *p.b);
  const Sge s = sge(0, 40);
  ASSERT_FALSE(p.a->post_send(send_wr(1, &s)).error());
  const auto wcs = poll_n(*p.cq_b, 1);
  CHECK_OBS("receiver", describe(wcs), "SUCCESS/RECV/40");
  CHECK_OBS("wr_id", wcs.empty() ? 0 : wcs[0].wr_id, 5);
}

TEST_P(Posting, RecvInRtrAccepted) {
  auto qp = qp_in(QpState::rtr);
  const Sge r = sge(0, 64);
  CHECK_ERR("post", qp->post_recv(recv_wr(1, &r)).error(), 0);
}

TEST_P(Posting, SendInErrFlushes) {
  Pair p = make_pair();
  move_to(*p.a, QpState::err);
  const Sge s = sge(0, 64);
  const SendWr wrs[] = {send_wr(1, &s), send_wr(2, &s)};
  const PostResult r = p.a->post_send(wrs);
  CHECK_ERR("post", r.error(), 0);
  CHECK_OBS("posted", r.posted, 2);
  const std::string flush = err_wc(WcStatus::wr_flush_err, WcOpcode::send, 64);
  CHECK_OBS("wcs", describe(poll_n(*p.cq_a, 2)), flush + "," + flush);
  CHECK_OBS("state", p.a->state(), QpState::err);
}

TEST_P(Posting, RecvInErr) {
  Pair p = make_pair();
  move_to(*p.a, QpState::err);
  const Sge r = sge(0, 64);
  CHECK_ERR("post", p.a->post_recv(recv_wr(1, &r)).error(), 0);
  const auto wcs = expect().post_recv_in_err_completes ? poll_n(*p.cq_a, 1) : poll_quiet(*p.cq_a);
  CHECK_OBS("wcs", wcs.empty() ? "none" : obs_str(wcs[0].status),
            expect().post_recv_in_err_completes ? "WR_FLUSH_ERR" : "none");
}

// The first WR of the batch is taken, the second refused (too many SGEs): the first ends as a
// receive posted in ERR does, whatever happened to the second.
TEST_P(Posting, RecvBatchInErrWithARefusedWr) {
  Pair p = make_pair();
  move_to(*p.a, QpState::err);
  const Sge r = sge(0, 64);
  const std::vector<Sge> many(p.a->cap().max_recv_sge + 1, sge(64, 8));
  const RecvWr wrs[] = {recv_wr(1, &r), {2, many}};
  const PostResult res = p.a->post_recv(wrs);
  CHECK_ERR("post", res.error(), EINVAL);
  CHECK_OBS("posted", res.posted, 1);
  const auto wcs = expect().post_recv_in_err_completes ? poll_n(*p.cq_a, 1) : poll_quiet(*p.cq_a);
  CHECK_OBS("wcs", wcs.empty() ? "none" : obs_str(wcs[0].status),
            expect().post_recv_in_err_completes ? "WR_FLUSH_ERR" : "none");
}

TEST_P(Posting, SendInSqdWaitsForRts) {
  Pair p = make_pair();
  ASSERT_EQ(apply(*p.a, bare(QpState::sqd)), 0);
  ASSERT_EQ(wait_state(*p.a, QpState::sqd), QpState::sqd);
  const Sge r = sge(4096, 64);
  ASSERT_FALSE(p.b->post_recv(recv_wr(9, &r)).error());
  const Sge s = sge(0, 16);
  CHECK_ERR("post", p.a->post_send(send_wr(1, &s)).error(), 0);
  CHECK_OBS("in_sqd", describe(poll_quiet(*p.cq_a)), "none");
  ASSERT_EQ(apply(*p.a, bare(QpState::rts)), 0);
  const bool starts = expect().rts_starts_send_queue;
  CHECK_OBS("at_rts", describe(starts ? poll_n(*p.cq_a, 1) : poll_quiet(*p.cq_a)),
            starts ? "SUCCESS/SEND/16" : "none");
  ASSERT_FALSE(p.b->post_recv(recv_wr(10, &r)).error());
  const Sge s2 = sge(0, 24);
  CHECK_ERR("next_post", p.a->post_send(send_wr(2, &s2)).error(), 0);
  CHECK_OBS("after_next", describe(poll_n(*p.cq_a, starts ? 1 : 2)),
            starts ? "SUCCESS/SEND/24" : "SUCCESS/SEND/16,SUCCESS/SEND/24");
}

TEST_P(Posting, UdSendWithoutAddressHandle) {
  auto qp = qp_in(QpState::rts, QpType::ud);
  const Sge s = sge(0, 16);
  SendWr wr = send_wr(1, &s);
  wr.remote_qpn = qp->qp_num();
  wr.remote_qkey = 0x11111111;
  const PostResult r = qp->post_send(wr);
  CHECK_ERR("post", r.error(), EINVAL);
  CHECK_OBS("posted", r.posted, 0);
}

VERBSIM_CONFORMANCE_SUITE(QpStates);
VERBSIM_CONFORMANCE_SUITE(QpAttrs);
VERBSIM_CONFORMANCE_SUITE(Posting);
VERBSIM_CONFORMANCE_SUITE(PostEarly);

}  // namespace
}  // namespace verbsim::conformance
