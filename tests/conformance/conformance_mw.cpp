// Memory windows: type 1 (QueuePair::bind_mw) and type 2 (BIND_MW work requests), remote
// access through a window's key, invalidation (unbind, LOCAL_INV, SEND_WITH_INV, dealloc), and
// the errors of binding and invalidating.
#include <cerrno>
#include <cstring>

#include "windows.hpp"

namespace verbsim::conformance {
namespace {

class MemoryWindows : public WindowTest {};

// ---------------------------------------------------------------------------------------------
// Device attributes

TEST_P(MemoryWindows, DeviceAttributes) {
  const DeviceAttr a = ctx().query_device();
  CHECK_OBS("max_mw", a.max_mw, expect().max_mw);
  CHECK_OBS("mw_type1", a.mw_type1, true);
  CHECK_OBS("mw_type2", a.mw_type2, true);
}

// ---------------------------------------------------------------------------------------------
// Type 1

TEST_P(MemoryWindows, Type1BindWriteThrough) {
  REQUIRE_MW(MwType::type1);
  Pair p = make_pair();
  auto r = region();
  auto mw = pd().alloc_mw(MwType::type1);
  CHECK_OBS("type", to_string(mw->type()), "TYPE_1");
  CHECK_OBS("rkey_nonzero", mw->rkey() != 0, true);
  const std::uint32_t old = mw->rkey();
  CHECK_OBS("bind", bind1(*p.b, *p.cq_b, *mw, window(*r)), "SUCCESS/BIND_MW/0");
  CHECK_OBS("rkey_incremented", mw->rkey() == inc_rkey(old), true);
  fill_source();
  CHECK_OBS("write",
            rdma(*p.a, *p.cq_a, WrOpcode::rdma_write, r->address(kWinOff + 128), mw->rkey()),
            "SUCCESS/RDMA_WRITE/64");
  CHECK_OBS("landed", landed(kWinOff + 128), true);
}

// 64 bytes from 32 before the window's end: inside the MR, past the window.
TEST_P(MemoryWindows, Type1WritePastWindowEnd) {
  REQUIRE_MW(MwType::type1);
  Pair p = make_pair();
  auto r = region();
  auto mw = pd().alloc_mw(MwType::type1);
  CHECK_OBS("bind", bind1(*p.b, *p.cq_b, *mw, window(*r)), "SUCCESS/BIND_MW/0");
  const bool mr_range = expect().mw_range_is_mr;
  CHECK_OBS(
      "write",
      rdma(*p.a, *p.cq_a, WrOpcode::rdma_write, r->address(kWinOff + kWinLen - 32), mw->rkey()),
      mr_range ? "SUCCESS/RDMA_WRITE/64" : write_fails());
  CHECK_OBS("requester", wait_state(*p.a, mr_range ? QpState::rts : QpState::err),
            mr_range ? QpState::rts : QpState::err);
}

// A window that ends where its MR ends: 64 bytes from 32 before the end.
TEST_P(MemoryWindows, Type1WritePastRegionEnd) {
  REQUIRE_MW(MwType::type1);
  Pair p = make_pair();
  auto r = region();
  auto mw = pd().alloc_mw(MwType::type1);
  const MwBindInfo info{r.get(), r->address(kRegionLen - kWinLen), kWinLen, kRemote};
  CHECK_OBS("bind", bind1(*p.b, *p.cq_b, *mw, info), "SUCCESS/BIND_MW/0");
  CHECK_OBS("write",
            rdma(*p.a, *p.cq_a, WrOpcode::rdma_write, r->address(kRegionLen - 32), mw->rkey()),
            write_fails());
  CHECK_OBS("requester", wait_state(*p.a, QpState::err), QpState::err);
  CHECK_OBS("responder", wait_state(*p.b, QpState::err), QpState::err);
}

TEST_P(MemoryWindows, Type1UnbindInvalidatesKey) {
  REQUIRE_MW(MwType::type1);
  Pair p = make_pair();
  auto r = region();
  auto mw = pd().alloc_mw(MwType::type1);
  CHECK_OBS("bind", bind1(*p.b, *p.cq_b, *mw, window(*r)), "SUCCESS/BIND_MW/0");
  const std::uint32_t bound = mw->rkey();
  CHECK_OBS("unbind", bind1(*p.b, *p.cq_b, *mw, MwBindInfo{}), "SUCCESS/BIND_MW/0");
  CHECK_OBS("rkey_incremented", mw->rkey() == inc_rkey(bound), true);
  CHECK_OBS("write_old_key", rdma(*p.a, *p.cq_a, WrOpcode::rdma_write, r->address(kWinOff), bound),
            write_fails());
}

TEST_P(MemoryWindows, Type1ReadOnlyWindow) {
  REQUIRE_MW(MwType::type1);
  Pair p = make_pair();
  auto r = region();
  auto mw = pd().alloc_mw(MwType::type1);
  CHECK_OBS("bind", bind1(*p.b, *p.cq_b, *mw, window(*r, Access::remote_read)),
            "SUCCESS/BIND_MW/0");
  CHECK_OBS("read", rdma(*p.a, *p.cq_a, WrOpcode::rdma_read, r->address(kWinOff), mw->rkey()),
            "SUCCESS/RDMA_READ/64");
  CHECK_OBS("write", rdma(*p.a, *p.cq_a, WrOpcode::rdma_write, r->address(kWinOff), mw->rkey()),
            write_fails());
}

// A window's access may carry MW_BIND and LOCAL_WRITE besides the remote rights (rxe accepts
// every flag an MR may have); only the remote rights matter to a request through it.
TEST_P(MemoryWindows, Type1WindowAccessWithLocalFlags) {
  REQUIRE_MW(MwType::type1);
  Pair p = make_pair();
  auto r = region();
  auto mw = pd().alloc_mw(MwType::type1);
  CHECK_OBS("bind",
            bind1(*p.b, *p.cq_b, *mw,
                  window(*r, Access::remote_read | Access::local_write | Access::mw_bind)),
            "SUCCESS/BIND_MW/0");
  CHECK_OBS("read", rdma(*p.a, *p.cq_a, WrOpcode::rdma_read, r->address(kWinOff), mw->rkey()),
            "SUCCESS/RDMA_READ/64");
}

// ---------------------------------------------------------------------------------------------
// Type 2

TEST_P(MemoryWindows, Type2BindServesOnlyItsQp) {
  REQUIRE_MW(MwType::type2);
  Pair p = make_pair();
  auto r = region();
  auto mw = pd().alloc_mw(MwType::type2);
  CHECK_OBS("type", to_string(mw->type()), "TYPE_2");
  const std::uint32_t old = mw->rkey();
  CHECK_OBS("bind", bind2(*p.b, *p.cq_b, *mw, window(*r)), "SUCCESS/BIND_MW/0");
  CHECK_OBS("rkey_incremented", mw->rkey() == inc_rkey(old), true);
  fill_source();
  CHECK_OBS("write_to_binder",
            rdma(*p.a, *p.cq_a, WrOpcode::rdma_write, r->address(kWinOff), mw->rkey()),
            "SUCCESS/RDMA_WRITE/64");
  CHECK_OBS("landed", landed(kWinOff), true);
  // The same PD, the other QP: b writes to a through the window b bound.
  CHECK_OBS("write_to_other_qp",
            rdma(*p.b, *p.cq_b, WrOpcode::rdma_write, r->address(kWinOff), mw->rkey()),
            write_fails());
}

TEST_P(MemoryWindows, Type2WritePastWindowEnd) {
  REQUIRE_MW(MwType::type2);
  Pair p = make_pair();
  auto r = region();
  auto mw = pd().alloc_mw(MwType::type2);
  CHECK_OBS("bind", bind2(*p.b, *p.cq_b, *mw, window(*r)), "SUCCESS/BIND_MW/0");
  const bool mr_range = expect().mw_range_is_mr;
  CHECK_OBS(
      "write",
      rdma(*p.a, *p.cq_a, WrOpcode::rdma_write, r->address(kWinOff + kWinLen - 32), mw->rkey()),
      mr_range ? "SUCCESS/RDMA_WRITE/64" : write_fails());
}

TEST_P(MemoryWindows, Type2LocalInvalidate) {
  REQUIRE_MW(MwType::type2);
  Pair p = make_pair();
  auto r = region();
  auto mw = pd().alloc_mw(MwType::type2);
  CHECK_OBS("bind", bind2(*p.b, *p.cq_b, *mw, window(*r)), "SUCCESS/BIND_MW/0");
  CHECK_ERR("inv_post", p.b->post_send(inv_wr(8, WrOpcode::local_inv, mw->rkey())).error(), 0);
  CHECK_OBS("inv", describe(poll_n(*p.cq_b, 1)), "SUCCESS/LOCAL_INV/0");
  CHECK_OBS("write", rdma(*p.a, *p.cq_a, WrOpcode::rdma_write, r->address(kWinOff), mw->rkey()),
            write_fails());
}

TEST_P(MemoryWindows, Type2RebindAfterInvalidate) {
  REQUIRE_MW(MwType::type2);
  Pair p = make_pair();
  auto r = region();
  auto mw = pd().alloc_mw(MwType::type2);
  CHECK_OBS("bind", bind2(*p.b, *p.cq_b, *mw, window(*r)), "SUCCESS/BIND_MW/0");
  CHECK_ERR("inv_post", p.b->post_send(inv_wr(8, WrOpcode::local_inv, mw->rkey())).error(), 0);
  CHECK_OBS("inv", describe(poll_n(*p.cq_b, 1)), "SUCCESS/LOCAL_INV/0");
  CHECK_OBS("rebind", bind2(*p.b, *p.cq_b, *mw, window(*r)), "SUCCESS/BIND_MW/0");
  CHECK_OBS("write", rdma(*p.a, *p.cq_a, WrOpcode::rdma_write, r->address(kWinOff), mw->rkey()),
            "SUCCESS/RDMA_WRITE/64");
  CHECK_OBS("binder", p.b->state(), QpState::rts);
}

TEST_P(MemoryWindows, Type2SendWithInvalidate) {
  REQUIRE_MW(MwType::type2);
  Pair p = make_pair();
  auto r = region();
  auto mw = pd().alloc_mw(MwType::type2);
  CHECK_OBS("bind", bind2(*p.b, *p.cq_b, *mw, window(*r)), "SUCCESS/BIND_MW/0");
  const Sge rs = sge(kSrc + 1024, 64);
  ASSERT_FALSE(p.b->post_recv(recv_wr(20, &rs)).error());
  const Sge s = sge(kSrc, 16);
  CHECK_ERR("send_post", p.a->post_send(inv_wr(9, WrOpcode::send_with_inv, mw->rkey(), &s)).error(),
            0);
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 1)), "SUCCESS/SEND/16");
  const auto got = poll_n(*p.cq_b, 1);
  CHECK_OBS("receiver", describe(got), "SUCCESS/RECV/16");
  ASSERT_EQ(got.size(), 1u);
  obs("wc_flags", to_underlying(got[0].wc_flags));
  CHECK_OBS("with_inv", any(got[0].wc_flags, WcFlags::with_inv), true);
  CHECK_OBS("with_imm", any(got[0].wc_flags, WcFlags::with_imm), false);
  CHECK_OBS("invalidated_rkey_ok", got[0].invalidated_rkey() == mw->rkey(), true);
  CHECK_OBS("write", rdma(*p.a, *p.cq_a, WrOpcode::rdma_write, r->address(kWinOff), mw->rkey()),
            write_fails());
}

TEST_P(MemoryWindows, Type2DeallocWhileBound) {
  REQUIRE_MW(MwType::type2);
  Pair p = make_pair();
  auto r = region();
  auto mw = pd().alloc_mw(MwType::type2);
  CHECK_OBS("bind", bind2(*p.b, *p.cq_b, *mw, window(*r)), "SUCCESS/BIND_MW/0");
  const std::uint32_t key = mw->rkey();
  CHECK_ERR("dealloc", verb_errno([&] { mw->destroy(); }), 0);
  CHECK_OBS("write", rdma(*p.a, *p.cq_a, WrOpcode::rdma_write, r->address(kWinOff), key),
            write_fails());
}

// ---------------------------------------------------------------------------------------------
// Bind errors

// A bind that must fail: its post's errno, its completion, and the binder's state after.

TEST_P(MemoryWindows, Type1BindToMrWithoutMwBind) {
  REQUIRE_MW(MwType::type1);
  Pair p = make_pair();
  auto r = region(Access::local_write | kRemote);
  auto mw = pd().alloc_mw(MwType::type1);
  const std::uint32_t old = mw->rkey();
  CHECK_OBS("bind", bind1(*p.b, *p.cq_b, *mw, window(*r)),
            err_wc(WcStatus::mw_bind_err, WcOpcode::bind_mw, 0));
  CHECK_OBS("rkey_incremented", mw->rkey() == inc_rkey(old), true);
  CHECK_OBS("binder", wait_state(*p.b, QpState::err), QpState::err);
}

TEST_P(MemoryWindows, Type2BindToMrWithoutMwBind) {
  REQUIRE_MW(MwType::type2);
  Pair p = make_pair();
  auto r = region(Access::local_write | kRemote);
  auto mw = pd().alloc_mw(MwType::type2);
  CHECK_OBS("bind", bind2(*p.b, *p.cq_b, *mw, window(*r)),
            err_wc(WcStatus::mw_bind_err, WcOpcode::bind_mw, 0));
  CHECK_OBS("binder", wait_state(*p.b, QpState::err), QpState::err);
}

TEST_P(MemoryWindows, Type2BindTwice) {
  REQUIRE_MW(MwType::type2);
  Pair p = make_pair();
  auto r = region();
  auto mw = pd().alloc_mw(MwType::type2);
  CHECK_OBS("bind", bind2(*p.b, *p.cq_b, *mw, window(*r)), "SUCCESS/BIND_MW/0");
  CHECK_OBS("bind_again", bind2(*p.b, *p.cq_b, *mw, window(*r)),
            err_wc(WcStatus::mw_bind_err, WcOpcode::bind_mw, 0));
  CHECK_OBS("binder", wait_state(*p.b, QpState::err), QpState::err);
}

TEST_P(MemoryWindows, Type1BindPastMrEnd) {
  REQUIRE_MW(MwType::type1);
  Pair p = make_pair();
  auto r = region();
  auto mw = pd().alloc_mw(MwType::type1);
  const MwBindInfo info{r.get(), r->address(kRegionLen - 1024), 2048, kRemote};
  CHECK_OBS("bind", bind1(*p.b, *p.cq_b, *mw, info),
            err_wc(WcStatus::mw_bind_err, WcOpcode::bind_mw, 0));
  CHECK_OBS("binder", wait_state(*p.b, QpState::err), QpState::err);
}

TEST_P(MemoryWindows, Type2BindPastMrEnd) {
  REQUIRE_MW(MwType::type2);
  Pair p = make_pair();
  auto r = region();
  auto mw = pd().alloc_mw(MwType::type2);
  const MwBindInfo info{r.get(), r->address(kRegionLen - 1024), 2048, kRemote};
  CHECK_OBS("bind", bind2(*p.b, *p.cq_b, *mw, info),
            err_wc(WcStatus::mw_bind_err, WcOpcode::bind_mw, 0));
  CHECK_OBS("binder", wait_state(*p.b, QpState::err), QpState::err);
}

TEST_P(MemoryWindows, Type1RemoteWriteOnMrWithoutLocalWrite) {
  REQUIRE_MW(MwType::type1);
  Pair p = make_pair();
  auto r = region(Access::remote_read | Access::mw_bind);
  auto mw = pd().alloc_mw(MwType::type1);
  CHECK_OBS("bind", bind1(*p.b, *p.cq_b, *mw, window(*r, Access::remote_write)),
            err_wc(WcStatus::mw_bind_err, WcOpcode::bind_mw, 0));
  CHECK_OBS("binder", wait_state(*p.b, QpState::err), QpState::err);
}

TEST_P(MemoryWindows, Type1VerbOnType2Window) {
  REQUIRE_MW(MwType::type2);
  Pair p = make_pair();
  auto r = region();
  auto mw = pd().alloc_mw(MwType::type2);
  const PostResult res = p.b->bind_mw(*mw, MwBind{7, SendFlags::signaled, window(*r)});
  CHECK_ERR("bind_post", res.error(), EINVAL);
  CHECK_OBS("completions", poll_quiet(*p.cq_b).size(), 0);
  CHECK_OBS("binder", p.b->state(), QpState::rts);
}

TEST_P(MemoryWindows, BindOnUdQp) {
  REQUIRE_MW(MwType::type2);
  Pair p = make_pair(PairOptions::with(QpCap{16, 16, 2, 2, 0}, QpType::ud));
  auto ah = pd().create_ah(ah_attr());
  auto r = region();
  auto mw = pd().alloc_mw(MwType::type2);
  const MwBindInfo info = window(*r);
  const BindMwWr bind{mw.get(), info};
  SendWr wr = bind_wr(7, bind, inc_rkey(mw->rkey()));
  wr.ah = ah.get();
  wr.remote_qpn = p.b->qp_num();
  wr.remote_qkey = 0x11111111;
  const PostResult res = p.a->post_send(wr);
  CHECK_ERR("bind_post", res.error(), EINVAL);
  CHECK_OBS("completions", describe(poll_quiet(*p.cq_a)), "none");
  CHECK_OBS("state", p.a->state(), QpState::rts);
}

// ---------------------------------------------------------------------------------------------
// Invalidation errors

TEST_P(MemoryWindows, LocalInvalidateUnknownKey) {
  REQUIRE_MW(MwType::type2);
  Pair p = make_pair();
  std::uint32_t gone = 0;
  {
    auto mw = pd().alloc_mw(MwType::type2);
    gone = mw->rkey();
  }
  CHECK_ERR("inv_post", p.b->post_send(inv_wr(8, WrOpcode::local_inv, gone)).error(), 0);
  CHECK_OBS("inv", describe(poll_n(*p.cq_b, 1)),
            err_wc(WcStatus::loc_qp_op_err, WcOpcode::local_inv, 0));
  CHECK_OBS("state", wait_state(*p.b, QpState::err), QpState::err);
}

TEST_P(MemoryWindows, LocalInvalidateType1Window) {
  REQUIRE_MW(MwType::type1);
  Pair p = make_pair();
  auto r = region();
  auto mw = pd().alloc_mw(MwType::type1);
  CHECK_OBS("bind", bind1(*p.b, *p.cq_b, *mw, window(*r)), "SUCCESS/BIND_MW/0");
  CHECK_ERR("inv_post", p.b->post_send(inv_wr(8, WrOpcode::local_inv, mw->rkey())).error(), 0);
  CHECK_OBS("inv", describe(poll_n(*p.cq_b, 1)),
            err_wc(WcStatus::loc_qp_op_err, WcOpcode::local_inv, 0));
  CHECK_OBS("state", wait_state(*p.b, QpState::err), QpState::err);
}

TEST_P(MemoryWindows, LocalInvalidateMrKey) {
  Pair p = make_pair();
  CHECK_ERR("inv_post", p.b->post_send(inv_wr(8, WrOpcode::local_inv, mr().rkey())).error(), 0);
  CHECK_OBS("inv", describe(poll_n(*p.cq_b, 1)),
            err_wc(WcStatus::loc_qp_op_err, WcOpcode::local_inv, 0));
  CHECK_OBS("state", wait_state(*p.b, QpState::err), QpState::err);
}

TEST_P(MemoryWindows, SendWithInvalidateMrKey) {
  Pair p = make_pair();
  const Sge rs = sge(kSrc + 1024, 64);
  ASSERT_FALSE(p.b->post_recv(recv_wr(20, &rs)).error());
  const Sge s = sge(kSrc, 16);
  CHECK_ERR("send_post",
            p.a->post_send(inv_wr(9, WrOpcode::send_with_inv, mr().rkey(), &s)).error(), 0);
  // The responder fails the receive and goes to ERR, but acknowledges the SEND.
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 1)), "SUCCESS/SEND/16");
  CHECK_OBS("receiver", describe(poll_n(*p.cq_b, 1)),
            err_wc(WcStatus::rem_inv_req_err, WcOpcode::recv, 16));
  CHECK_OBS("requester", wait_state(*p.a, QpState::rts), QpState::rts);
  CHECK_OBS("responder", wait_state(*p.b, QpState::err), QpState::err);
}

// ---------------------------------------------------------------------------------------------
// Teardown with windows

TEST_P(MemoryWindows, DeregisterMrUnderBoundWindow) {
  REQUIRE_MW(MwType::type1);
  Pair p = make_pair();
  auto r = region();
  auto mw = pd().alloc_mw(MwType::type1);
  CHECK_OBS("bind", bind1(*p.b, *p.cq_b, *mw, window(*r)), "SUCCESS/BIND_MW/0");
  CHECK_ERR("dereg_bound", verb_errno([&] { r->destroy(); }), EINVAL);
  CHECK_ERR("dealloc", verb_errno([&] { mw->destroy(); }), 0);
  CHECK_ERR("dereg_after", verb_errno([&] { r->destroy(); }), 0);
}

TEST_P(MemoryWindows, DeallocPdWithWindow) {
  const bool t1 = supports(MwType::type1);
  if (!t1 && !supports(MwType::type2)) GTEST_SKIP() << "the device has no memory windows";
  auto pd2 = ctx().alloc_pd();
  auto mw = pd2->alloc_mw(t1 ? MwType::type1 : MwType::type2);
  CHECK_ERR("dealloc_pd", verb_errno([&] { pd2->destroy(); }), EBUSY);
  CHECK_ERR("dealloc_mw", verb_errno([&] { mw->destroy(); }), 0);
  CHECK_ERR("dealloc_pd_after", verb_errno([&] { pd2->destroy(); }), 0);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Protection domains: a window, its MR and the QP that binds it, and the QP a request through
// it arrives at, of different PDs (the spec wants them all the same; rxe checks only that a
// type 2 window's QP is of its PD when binding, and that a request arrives at a QP of the
// window's PD).

// A window and its MR of a second PD, bound through the fixture's QP of the first, then
// written through by the peer.
void bind_across_pds(MemoryWindows& t, MwType type);

TEST_P(MemoryWindows, Type1BindThroughQpOfAnotherPd) {
  REQUIRE_MW(MwType::type1);
  Pair p = make_pair();
  auto pd2 = ctx().alloc_pd();
  auto r = pd2->reg_mr(region_mem(), kRegionLen, Access::local_write | kRemote | Access::mw_bind);
  auto mw = pd2->alloc_mw(MwType::type1);
  // rxe binds it (the spec says the QP, the window and the MR share one PD): the simulator
  // does too, on every profile.
  CHECK_OBS("bind", bind1(*p.b, *p.cq_b, *mw, window(*r)), "SUCCESS/BIND_MW/0");
  CHECK_OBS("binder", p.b->state(), QpState::rts);
  // A request through it arriving at the binder, a QP of another PD than the window's.
  fill_source();
  CHECK_OBS("write", rdma(*p.a, *p.cq_a, WrOpcode::rdma_write, r->address(kWinOff), mw->rkey()),
            write_fails());
  CHECK_OBS("landed", landed(kWinOff), false);
}

TEST_P(MemoryWindows, Type2BindThroughQpOfAnotherPd) {
  REQUIRE_MW(MwType::type2);
  Pair p = make_pair();
  auto pd2 = ctx().alloc_pd();
  auto r = pd2->reg_mr(region_mem(), kRegionLen, Access::local_write | kRemote | Access::mw_bind);
  auto mw = pd2->alloc_mw(MwType::type2);
  CHECK_OBS("bind", bind2(*p.b, *p.cq_b, *mw, window(*r)),
            err_wc(WcStatus::mw_bind_err, WcOpcode::bind_mw, 0));
  CHECK_OBS("binder", wait_state(*p.b, QpState::err), QpState::err);
}

// The window of the QP's PD, its MR of another.
TEST_P(MemoryWindows, Type2BindToRegionOfAnotherPd) {
  REQUIRE_MW(MwType::type2);
  Pair p = make_pair();
  auto pd2 = ctx().alloc_pd();
  auto r = pd2->reg_mr(region_mem(), kRegionLen, Access::local_write | kRemote | Access::mw_bind);
  auto mw = pd().alloc_mw(MwType::type2);
  // rxe binds it (the spec wants the MR of the window's PD): the simulator does too.
  CHECK_OBS("bind", bind2(*p.b, *p.cq_b, *mw, window(*r)), "SUCCESS/BIND_MW/0");
  CHECK_OBS("binder", p.b->state(), QpState::rts);
  // A request through the window, arriving at the QP that bound it.
  fill_source();
  CHECK_OBS("write", rdma(*p.a, *p.cq_a, WrOpcode::rdma_write, r->address(kWinOff), mw->rkey()),
            "SUCCESS/RDMA_WRITE/64");
  CHECK_OBS("landed", landed(kWinOff), true);
}

// A type 1 window bound in a second PD (through a QP of that PD), used through a QP of the
// first: the responder finds no window of its PD.
TEST_P(MemoryWindows, Type1WindowOfAnotherPdThanTheResponder) {
  REQUIRE_MW(MwType::type1);
  Pair p = make_pair();
  auto pd2 = ctx().alloc_pd();
  auto cq2 = make_cq(16);
  auto c = make_qp(*cq2, *cq2, QpCap{16, 16, 4, 4, 0}, QpType::rc, nullptr, false, pd2.get());
  auto d = make_qp(*cq2, *cq2, QpCap{16, 16, 4, 4, 0}, QpType::rc, nullptr, false, pd2.get());
  connect_pair(*c, *d);
  auto r = pd2->reg_mr(region_mem(), kRegionLen, Access::local_write | kRemote | Access::mw_bind);
  auto mw = pd2->alloc_mw(MwType::type1);
  CHECK_OBS("bind", bind1(*c, *cq2, *mw, window(*r)), "SUCCESS/BIND_MW/0");
  fill_source();
  CHECK_OBS("write", rdma(*p.a, *p.cq_a, WrOpcode::rdma_write, r->address(kWinOff), mw->rkey()),
            write_fails());
  CHECK_OBS("landed", landed(kWinOff), false);
  CHECK_OBS("responder", wait_state(*p.b, QpState::err), QpState::err);
  // Through a QP of its own PD it serves: c writes to d, from the region's last 64 bytes.
  std::memcpy(region_mem(kRegionLen - 64), mem(kSrc), 64);
  const Sge own = r->sge(kRegionLen - 64, 64);
  CHECK_ERR("post_same_pd",
            c->post_send(rdma_wr(2, WrOpcode::rdma_write, &own, r->address(kWinOff), mw->rkey()))
                .error(),
            0);
  CHECK_OBS("write_same_pd", describe(poll_n(*cq2, 1)), "SUCCESS/RDMA_WRITE/64");
  CHECK_OBS("landed_same_pd", landed(kWinOff), true);
}

VERBSIM_CONFORMANCE_SUITE(MemoryWindows);

}  // namespace verbsim::conformance
