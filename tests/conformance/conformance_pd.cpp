// Which protection domain a receive taken from a shared receive queue is checked against when
// the SRQ and the QP that takes it are of different PDs (the spec: the SRQ's).
#include <cerrno>

#include "conformance.hpp"

namespace verbsim::conformance {
namespace {

constexpr std::size_t kSrc = 0;
constexpr std::size_t kRecv = 16384;

class PdChecks : public Conformance {
 protected:
  // A QP of the fixture's PD receiving from an SRQ of a second PD, `b`, with `a` connected to
  // it; a SEND of 64 bytes from `a` into a receive posted to the SRQ, into an MR of the SRQ's PD
  // or of the QP's.
  void run(bool region_of_srq_pd) {
    auto pd2 = ctx().alloc_pd();
    auto srq = pd2->create_srq(SrqInitAttr{8, 1, 0});
    auto cq_a = make_cq(16);
    auto cq_b = make_cq(16);
    auto a = make_qp(*cq_a, *cq_a);
    std::unique_ptr<QueuePair> b;
    const int create = verb_errno([&] {
      b = make_qp(*cq_b, *cq_b, QpCap{16, 0, 1, 1, 0}, QpType::rc, srq.get());
    });
    CHECK_ERR("create_qp", create, 0);
    if (create != 0) return;
    connect_pair(*a, *b);
    auto m2 = pd2->reg_mr(mem(kRecv), 4096, Access::local_write);
    const Sge r = region_of_srq_pd ? m2->sge(0, 64) : sge(kRecv, 64);
    CHECK_ERR("post_recv", srq->post_recv(recv_wr(9, &r)).error(), 0);
    const Sge s = sge(kSrc, 64);
    CHECK_ERR("post", a->post_send(send_wr(1, &s)).error(), 0);
    // rxe checks the receive's SGEs against the QP's PD (copy_data with qp->pd).
    const bool lands = region_of_srq_pd ? !expect().srq_recv_checked_in_qp_pd
                                        : expect().srq_recv_checked_in_qp_pd;
    CHECK_OBS("sender", describe(poll_n(*cq_a, 1)),
              lands ? "SUCCESS/SEND/64" : err_wc(WcStatus::rem_op_err, WcOpcode::send, 64));
    CHECK_OBS("receiver", describe(poll_n(*cq_b, 1)),
              lands ? "SUCCESS/RECV/64"
                    : err_wc(expect().recv_no_local_write, WcOpcode::recv, 0));
    const QpState after = lands ? QpState::rts : QpState::err;
    CHECK_OBS("receiver_state", wait_state(*b, after), after);
  }
};

TEST_P(PdChecks, SrqOfAnotherPdReceivesIntoARegionOfTheSrqsPd) { run(true); }
TEST_P(PdChecks, SrqOfAnotherPdReceivesIntoARegionOfTheQpsPd) { run(false); }

VERBSIM_CONFORMANCE_SUITE(PdChecks);

}  // namespace
}  // namespace verbsim::conformance
