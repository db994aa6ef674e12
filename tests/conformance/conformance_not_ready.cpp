// Requests to a responder that is not ready for them: a SEND, RDMA WRITE, READ or fetch-and-add
// arriving at a QP in RESET, INIT, RTR without a receive posted, or ERR; a responder that becomes
// ready while the requester retries; a SEND to a QP of another transport type; receives posted
// in INIT.
#include <cerrno>
#include <cstring>

#include "conformance.hpp"

namespace verbsim::conformance {
namespace {

constexpr std::size_t kSrc = 0;
constexpr std::size_t kRemote = 16384;
constexpr std::size_t kRecv = 32768;
constexpr std::uint32_t kLen = 64;

enum class Peer { reset, init, rtr, err };

class NotReady : public Conformance {
 protected:
  std::uint64_t& word(std::size_t offset) { return *reinterpret_cast<std::uint64_t*>(mem(offset)); }

  // The requester's options: 16.8 ms local ACK timeout, two retries, no RNR retry.
  static ConnectOptions quick() {
    ConnectOptions o;
    o.timeout = 12;
    o.retry_cnt = 2;
    o.rnr_retry = 0;
    return o;
  }
  // Counter `name` now, or "none" where the device has none (the change is what is observed).
  std::string delta(std::string_view name, const std::optional<std::uint64_t>& before) {
    const auto now = hw_counter(name);
    if (!before || !now) return "none";
    return std::to_string(*now - *before);
  }

  // `a` in RTS towards `b`, which stays in `peer` (RTR: towards `a`, no receive posted), sends
  // one request of `op`.
  void run(WrOpcode op, Peer peer) {
    Pair p = make_pair(PairOptions::unconnected());
    switch (peer) {
      case Peer::reset: break;
      case Peer::init: modify_to_init(*p.b, options()); break;
      case Peer::rtr:
        modify_to_init(*p.b, options());
        modify_to_rtr(*p.b, endpoint(*p.a, 100), options());
        break;
      case Peer::err:
        connect(*p.b, 200, endpoint(*p.a, 100), options());
        move_to(*p.b, QpState::err);
        break;
    }
    const QpState peer_state = peer == Peer::reset  ? QpState::reset
                               : peer == Peer::init ? QpState::init
                               : peer == Peer::rtr  ? QpState::rtr
                                                    : QpState::err;
    connect(*p.a, 100, endpoint(*p.b, 200), options(quick()));
    std::memset(mem(kSrc), 0x33, kLen);
    std::memset(mem(kRemote), 0x44, kLen);
    word(kRemote) = 5;
    const bool atomic = op == WrOpcode::atomic_fetch_and_add;
    const std::uint32_t len = atomic ? 8 : kLen;
    const Sge s = sge(kSrc, len);
    SendWr wr = rdma_wr(7, op, &s, mr().address(kRemote), mr().rkey());
    wr.compare_add = 3;
    const auto retries = hw_counter("completer_retry_err");
    const auto rnr = hw_counter("rcvd_rnr_err");
    CHECK_ERR("post", p.a->post_send(wr).error(), 0);

    // Only a responder in RTR takes a request; one in RESET, INIT or ERR drops it, and the
    // requester retries until its retries run out. A SEND in RTR finds no receive.
    const bool takes = peer == Peer::rtr;
    const bool rnr_nak = takes && op == WrOpcode::send;
    const WcOpcode wc_op = op == WrOpcode::send         ? WcOpcode::send
                           : op == WrOpcode::rdma_write ? WcOpcode::rdma_write
                           : op == WrOpcode::rdma_read  ? WcOpcode::rdma_read
                                                        : WcOpcode::fetch_add;
    std::string want = "SUCCESS/" + obs_str(wc_op) + "/" + std::to_string(len);
    if (!takes) want = err_wc(WcStatus::retry_exc_err, wc_op, len);
    if (rnr_nak) want = err_wc(WcStatus::rnr_retry_exc_err, wc_op, len);
    CHECK_OBS("wc", describe(poll_n(*p.cq_a, 1)), want);
    const QpState requester = takes && !rnr_nak ? QpState::rts : QpState::err;
    CHECK_OBS("requester", wait_state(*p.a, requester), requester);
    CHECK_OBS("responder", p.b->state(), peer_state);
    CHECK_OBS("retries", delta("completer_retry_err", retries), retries ? (takes ? "0" : "2") : "none");
    CHECK_OBS("rnr_naks", delta("rcvd_rnr_err", rnr), rnr ? (rnr_nak ? "1" : "0") : "none");
    const bool executed = takes && !rnr_nak;
    if (op == WrOpcode::rdma_write) CHECK_OBS("written", mem(kRemote)[0] == 0x33, executed);
    if (op == WrOpcode::rdma_read) CHECK_OBS("read", mem(kSrc)[0] == 0x05, executed);
    if (atomic) CHECK_OBS("remote", word(kRemote), executed ? 8u : 5u);
    CHECK_OBS("responder_wcs", describe(poll_quiet(*p.cq_b)), "none");
  }
};

#define VERBSIM_NOT_READY_CASES(Op, opcode)                              \
  TEST_P(NotReady, Op##ToReset) { run(opcode, Peer::reset); }            \
  TEST_P(NotReady, Op##ToInit) { run(opcode, Peer::init); }              \
  TEST_P(NotReady, Op##ToRtrWithoutReceives) { run(opcode, Peer::rtr); } \
  TEST_P(NotReady, Op##ToErr) { run(opcode, Peer::err); }

VERBSIM_NOT_READY_CASES(Send, WrOpcode::send)
VERBSIM_NOT_READY_CASES(Write, WrOpcode::rdma_write)
VERBSIM_NOT_READY_CASES(Read, WrOpcode::rdma_read)
VERBSIM_NOT_READY_CASES(FetchAdd, WrOpcode::atomic_fetch_and_add)

// A responder in INIT (a receive posted there) drops the SEND; once it is in RTR, the
// requester's next retry lands.
TEST_P(NotReady, SendRetriedUntilTheResponderIsReady) {
  Pair p = make_pair(PairOptions::unconnected());
  modify_to_init(*p.b, options());
  const Sge r = sge(kRecv, kLen);
  CHECK_ERR("post_recv_in_init", p.b->post_recv(recv_wr(9, &r)).error(), 0);
  connect(*p.a, 100, endpoint(*p.b, 200), options());  // 67 ms timeout, 7 retries
  const auto retries = hw_counter("completer_retry_err");
  const Sge s = sge(kSrc, kLen);
  CHECK_ERR("post", p.a->post_send(send_wr(1, &s)).error(), 0);
  pass_time(std::chrono::milliseconds(20));
  CHECK_OBS("before_rtr", describe(poll_quiet(*p.cq_a)), "none");
  modify_to_rtr(*p.b, endpoint(*p.a, 100), options());
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 1)), "SUCCESS/SEND/64");
  CHECK_OBS("receiver", describe(poll_n(*p.cq_b, 1)), "SUCCESS/RECV/64");
  const auto now = hw_counter("completer_retry_err");
  CHECK_OBS("retried", retries && now ? (*now > *retries ? "true" : "false") : "none",
            retries ? "true" : "none");
  CHECK_OBS("responder", p.b->state(), QpState::rtr);
}

// Receives posted in INIT are flushed when the QP goes to ERR from INIT.
TEST_P(NotReady, RecvsPostedInInitFlushOnErr) {
  Pair p = make_pair(PairOptions::unconnected());
  modify_to_init(*p.b, options());
  const Sge r = sge(kRecv, kLen);
  for (std::uint64_t i = 0; i < 3; ++i) ASSERT_FALSE(p.b->post_recv(recv_wr(20 + i, &r)).error());
  move_to(*p.b, QpState::err);
  const auto wcs = poll_n(*p.cq_b, 3);
  const std::string flush = err_wc(WcStatus::wr_flush_err, WcOpcode::recv, 0);
  CHECK_OBS("flushed", describe(wcs), flush + "," + flush + "," + flush);
  CHECK_OBS("wr_ids", wcs.size() == 3 && wcs[0].wr_id == 20 && wcs[2].wr_id == 22, true);
}

// An RC SEND to the number of a UD QP (in RTS, a receive posted): the UD QP does not take it,
// and the RC requester runs out of retries.
TEST_P(NotReady, RcSendToUdQp) {
  auto cq_a = make_cq(16);
  auto cq_b = make_cq(16);
  auto a = make_qp(*cq_a, *cq_a);
  auto b = make_qp(*cq_b, *cq_b, QpCap{16, 16, 2, 2, 0}, QpType::ud);
  connect(*b, 200, Endpoint{}, options());
  const Sge r = sge(kRecv, 40 + kLen);
  ASSERT_FALSE(b->post_recv(recv_wr(9, &r)).error());
  connect(*a, 100, endpoint(*b, 200), options(quick()));
  const Sge s = sge(kSrc, kLen);
  CHECK_ERR("post", a->post_send(send_wr(1, &s)).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*cq_a, 1)), err_wc(WcStatus::retry_exc_err, WcOpcode::send, kLen));
  CHECK_OBS("receiver", describe(poll_quiet(*cq_b)), "none");
  CHECK_OBS("ud_state", b->state(), QpState::rts);
}

// A UD SEND to the number of an RC QP in RTS: it completes at the sender; the RC QP takes
// nothing and stays in RTS.
TEST_P(NotReady, UdSendToRcQp) {
  auto cq_a = make_cq(16);
  auto cq_b = make_cq(16);
  auto a = make_qp(*cq_a, *cq_a, QpCap{16, 16, 2, 2, 0}, QpType::ud);
  auto b = make_qp(*cq_b, *cq_b);
  auto peer_cq = make_cq(16);
  auto peer = make_qp(*peer_cq, *peer_cq);
  connect_pair(*b, *peer);
  connect(*a, 100, Endpoint{}, options());
  const Sge r = sge(kRecv, kLen);
  ASSERT_FALSE(b->post_recv(recv_wr(9, &r)).error());
  auto ah = pd().create_ah(ah_attr());
  const Sge s = sge(kSrc, kLen);
  SendWr wr = send_wr(1, &s);
  wr.ah = ah.get();
  wr.remote_qpn = b->qp_num();
  wr.remote_qkey = 0x11111111;
  CHECK_ERR("post", a->post_send(wr).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*cq_a, 1)), "SUCCESS/SEND/64");
  CHECK_OBS("receiver", describe(poll_quiet(*cq_b)), "none");
  CHECK_OBS("rc_state", b->state(), QpState::rts);
}

VERBSIM_CONFORMANCE_SUITE(NotReady);

}  // namespace
}  // namespace verbsim::conformance
