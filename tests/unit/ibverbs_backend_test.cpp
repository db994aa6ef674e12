// The ibverbs backend without (or, in the rxe VM, with) an RDMA device.
//
// On a host without devices: discovery returns nothing, open() fails with ENODEV and a hint, and
// native() tells foreign objects apart. With a device the smoke test at the end runs instead.
#include <gtest/gtest.h>

#include <cerrno>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>

#include "verbsim/ibverbs/backend.hpp"
#include "verbsim/testing/mock.hpp"
#include "verbsim/verbsim.hpp"

namespace verbsim {
namespace {

// libibverbs' values are kernel/user ABI and never change; the library itself asserts every
// enumerator against the IBV_* constants (backends/abi/include/verbsim/abi/translate.hpp). These repeat a
// sample without including <infiniband/verbs.h>, which only the backend may.
static_assert(static_cast<int>(WcStatus::wr_flush_err) == 5);        // IBV_WC_WR_FLUSH_ERR
static_assert(static_cast<int>(WcStatus::rem_access_err) == 10);     // IBV_WC_REM_ACCESS_ERR
static_assert(static_cast<int>(WcStatus::rnr_retry_exc_err) == 13);  // IBV_WC_RNR_RETRY_EXC_ERR
static_assert(static_cast<int>(WcStatus::general_err) == 21);        // IBV_WC_GENERAL_ERR
static_assert(static_cast<int>(WcOpcode::recv) == 128);              // IBV_WC_RECV
static_assert(static_cast<int>(WcOpcode::recv_rdma_with_imm) == 129);
static_assert(static_cast<int>(WrOpcode::atomic_fetch_and_add) == 6);
static_assert(static_cast<int>(QpType::ud) == 4);                  // IBV_QPT_UD
static_assert(static_cast<int>(QpState::err) == 6);                // IBV_QPS_ERR
static_assert(static_cast<int>(Mtu::mtu_4096) == 5);               // IBV_MTU_4096
static_assert(to_underlying(QpAttrMask::dest_qpn) == (1u << 20));  // IBV_QP_DEST_QPN
static_assert(to_underlying(QpAttrMask::max_dest_rd_atomic) == (1u << 17));
static_assert(to_underlying(Access::remote_atomic) == (1u << 3));   // IBV_ACCESS_REMOTE_ATOMIC
static_assert(to_underlying(SendFlags::inline_data) == (1u << 3));  // IBV_SEND_INLINE
static_assert(static_cast<int>(AsyncEventType::srq_limit_reached) == 15);
static_assert(static_cast<int>(AsyncEventType::wq_fatal) == 19);

// native() hands out the libibverbs type of each resource.
static_assert(std::is_same_v<decltype(ibverbs::native(std::declval<Context&>())), ibv_context*>);
static_assert(std::is_same_v<decltype(ibverbs::native(std::declval<QueuePair&>())), ibv_qp*>);
static_assert(std::is_same_v<decltype(ibverbs::native(std::declval<CompletionChannel&>())),
                             ibv_comp_channel*>);
static_assert(noexcept(ibverbs::native(std::declval<MemoryRegion&>())));

// ---------------------------------------------------------------------------------------------
// Objects of no backend, to show native() refuses what is not an ibverbs object (the mocks cover
// every other interface).

class FakeAh final : public AddressHandle {
 public:
  void destroy() override {}
  const AhAttr& attr() const noexcept override { return attr_; }

 private:
  AhAttr attr_;
};

bool has_devices() { return !ibverbs::make_backend()->devices().empty(); }

// ---------------------------------------------------------------------------------------------

TEST(IbverbsBackend, NameIsIbverbs) {
  EXPECT_EQ(ibverbs::make_backend()->name(), "ibverbs");
  EXPECT_EQ(open_backend("ibverbs")->name(), "ibverbs");
}

TEST(IbverbsBackend, DevicesListsWhatTheHostHas) {
  const auto backend = ibverbs::make_backend();
  const auto devices = backend->devices();  // empty here; must not throw or crash
  for (const DeviceInfo& d : devices) {
    EXPECT_EQ(d.backend, "ibverbs");
    EXPECT_FALSE(d.name.empty());
  }
  EXPECT_EQ(backend->devices().size(), devices.size());  // callable again
}

TEST(IbverbsBackend, OpenWithoutDeviceThrowsEnodevWithHint) {
  if (has_devices()) GTEST_SKIP() << "this host has an RDMA device";
  const auto backend = ibverbs::make_backend();
  try {
    (void)backend->open();
    FAIL() << "open() succeeded without a device";
  } catch (const VerbError& e) {
    EXPECT_EQ(e.code(), std::errc::no_such_device);
    EXPECT_EQ(e.code().value(), ENODEV);
    EXPECT_EQ(e.verb(), "ibv_get_device_list");
    const std::string what = e.what();
    EXPECT_NE(what.find("rxe"), std::string::npos) << what;
    EXPECT_NE(what.find("rdma link add"), std::string::npos) << what;
    EXPECT_NE(what.find("VERBSIM_BACKEND=sim"), std::string::npos) << what;
  }
}

TEST(IbverbsBackend, OpenNamedDeviceWithoutDeviceThrowsEnodev) {
  if (has_devices()) GTEST_SKIP() << "this host has an RDMA device";
  const auto backend = ibverbs::make_backend();
  try {
    (void)backend->open("mlx5_0");
    FAIL() << "open(\"mlx5_0\") succeeded without a device";
  } catch (const VerbError& e) {
    EXPECT_EQ(e.code(), std::errc::no_such_device);
    EXPECT_NE(std::string(e.what()).find("rxe"), std::string::npos) << e.what();
  }
}

TEST(IbverbsBackend, OpenUnknownNameListsTheDevices) {
  const auto backend = ibverbs::make_backend();
  const auto devices = backend->devices();
  if (devices.empty()) GTEST_SKIP() << "no RDMA device on this host";
  try {
    (void)backend->open("verbsim-no-such-device");
    FAIL() << "opened a device that does not exist";
  } catch (const VerbError& e) {
    EXPECT_EQ(e.code(), std::errc::no_such_device);
    EXPECT_EQ(e.verb(), "ibv_open_device");
    for (const DeviceInfo& d : devices) {
      EXPECT_NE(std::string(e.what()).find(d.name), std::string::npos) << e.what();
    }
  }
}

TEST(IbverbsBackend, NativeIsNullForObjectsOfAnotherBackend) {
  testing::MockContext context;
  testing::MockProtectionDomain pd;
  testing::MockMemoryRegion mr;
  testing::MockCompletionQueue cq;
  testing::MockCompletionChannel channel;
  testing::MockQueuePair qp;
  testing::MockSharedReceiveQueue srq;
  FakeAh ah;
  EXPECT_EQ(ibverbs::native(static_cast<Context&>(context)), nullptr);
  EXPECT_EQ(ibverbs::native(static_cast<ProtectionDomain&>(pd)), nullptr);
  EXPECT_EQ(ibverbs::native(static_cast<MemoryRegion&>(mr)), nullptr);
  EXPECT_EQ(ibverbs::native(static_cast<CompletionQueue&>(cq)), nullptr);
  EXPECT_EQ(ibverbs::native(static_cast<CompletionChannel&>(channel)), nullptr);
  EXPECT_EQ(ibverbs::native(static_cast<QueuePair&>(qp)), nullptr);
  EXPECT_EQ(ibverbs::native(static_cast<SharedReceiveQueue&>(srq)), nullptr);
  EXPECT_EQ(ibverbs::native(static_cast<AddressHandle&>(ah)), nullptr);
}

TEST(IbverbsBackend, NativeIsNullForSimulatorObjects) {
  const auto sim = open_backend("sim");
  auto ctx = sim->open();
  auto pd = ctx->alloc_pd();
  auto cq = ctx->create_cq(4);
  EXPECT_EQ(ibverbs::native(*ctx), nullptr);
  EXPECT_EQ(ibverbs::native(*pd), nullptr);
  EXPECT_EQ(ibverbs::native(*cq), nullptr);
}

// ---------------------------------------------------------------------------------------------
// With a device (the rxe VM): the wrappers work end to end on the control path.

TEST(IbverbsBackend, SmokeOnARealDevice) {
  const auto backend = ibverbs::make_backend();
  if (backend->devices().empty()) GTEST_SKIP() << "no RDMA device on this host";
  auto ctx = backend->open();
  EXPECT_EQ(ctx->info().backend, "ibverbs");
  EXPECT_NE(ibverbs::native(*ctx), nullptr);
  const DeviceAttr dev = ctx->query_device();
  ASSERT_GE(dev.phys_port_cnt, 1);
  (void)ctx->query_port(1);

  auto pd = ctx->alloc_pd();
  EXPECT_NE(ibverbs::native(*pd), nullptr);
  auto cq = ctx->create_cq(16);
  EXPECT_EQ(cq->requested_cqe(), 16);
  EXPECT_GE(cq->cqe(), 16);
  EXPECT_FALSE(cq->req_notify());  // no channel: armed all the same, as the provider does
  WorkCompletion wc[4];
  const PollResult polled = cq->poll(wc);
  EXPECT_FALSE(polled.error());
  EXPECT_EQ(polled.count, 0u);

  std::string buf(4096, '\0');
  auto mr = pd->reg_mr(buf.data(), buf.size(), Access::local_write | Access::remote_read);
  EXPECT_EQ(mr->addr(), buf.data());
  EXPECT_NE(ibverbs::native(*mr), nullptr);

  QpInitAttr init;
  init.type = QpType::ud;
  init.send_cq = cq.get();
  init.recv_cq = cq.get();
  init.cap = {8, 8, 1, 1, 0};
  auto qp = pd->create_qp(init);
  EXPECT_GE(qp->cap().max_send_wr, 8u);
  EXPECT_EQ(qp->requested_cap().max_send_wr, 8u);
  EXPECT_EQ(qp->state(), QpState::reset);
  SendWr wr;  // UD without an address handle
  const PostResult posted = qp->post_send(wr);
  EXPECT_EQ(posted.error().value(), EINVAL);
  EXPECT_EQ(posted.posted, 0u);

  // Resources still in use refuse to go and stay usable.
  try {
    ctx->destroy();
    FAIL() << "closed a context with a PD and a CQ";
  } catch (const VerbError& e) {
    EXPECT_EQ(e.code(), std::errc::device_or_resource_busy);
  }
  try {
    pd->destroy();
    FAIL() << "deallocated a PD with an MR and a QP";
  } catch (const VerbError& e) {
    EXPECT_EQ(e.code(), std::errc::device_or_resource_busy);
  }
  EXPECT_NE(ibverbs::native(*pd), nullptr);

  destroy(qp);
  destroy(mr);
  destroy(cq);
  destroy(pd);
  destroy(ctx);
  EXPECT_EQ(ctx, nullptr);
}

}  // namespace
}  // namespace verbsim
