// Hostile input to the simulator (issue 22): whatever a program passes, the simulator answers
// with the errno a real provider returns, or behaves as hardware would; it never crashes and
// never writes where the program did not ask.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "../support/sim_checks.hpp"
#include "resources/ids.hpp"

namespace verbsim {
namespace {

using sim::Profile;
using testing::address_to_b;
using testing::Ledger;
using testing::PairOptions;
using testing::ProfileTest;
using testing::rdma_wr;
using testing::send_wr;
using testing::endpoint_of;
using testing::SimPair;

const auto kAllProfiles = ::testing::Values(Profile::strict, Profile::rxe, Profile::mlx5);

class Hardening : public ProfileTest {};

// ---------------------------------------------------------------------------------------------
// Opcodes

// A value that is no WrOpcode is refused at post on every QP type and profile, the WR and those
// after it not posted, and nothing reaches the peer.
TEST_P(Hardening, UnknownOpcodeIsEinvalAtPost) {
  for (const QpType t : {QpType::rc, QpType::uc, QpType::ud}) {
    for (const int op : {10, 77, 255}) {
      SCOPED_TRACE(std::string(to_string(t)) + " opcode " + std::to_string(op));
      PairOptions o;
      o.type = t;
      o.connect_options.qkey = 0x11111111;
      SimPair p(config(), o);
      Ledger led;
      const Sge ls = p.a.sge(0, 8);
      SendWr wrs[2] = {send_wr(1, ls), rdma_wr(2, static_cast<WrOpcode>(op), ls, *p.b.mr, 0)};
      const auto ah0 = t == QpType::ud ? address_to_b(p, wrs[0]) : nullptr;
      const auto ah1 = t == QpType::ud ? address_to_b(p, wrs[1]) : nullptr;
      const Sge rs = p.b.sge(0, 256);
      ASSERT_TRUE(led.post_recv(*p.b.qp, testing::recv_wr(201, rs)));
      const PostResult r = led.post_send(*p.a.qp, wrs);
      EXPECT_EQ(r.error(), errno_code(EINVAL)) << r.reason;
      EXPECT_EQ(r.posted, 1u);
      EXPECT_NE(std::string(r.reason).find("opcode"), std::string::npos) << r.reason;
      const auto wcs = led.poll_n(p.world, *p.a.cq, 2);
      ASSERT_EQ(wcs.size(), 1u);
      EXPECT_EQ(wcs[0].wr_id, 1u);
      EXPECT_EQ(wcs[0].status, WcStatus::success);
      EXPECT_EQ(p.a.qp->state(), QpState::rts);
      const auto recv = led.drain(p.world, *p.b.cq);
      ASSERT_EQ(recv.size(), 1u) << "only the SEND reaches the peer";
      EXPECT_EQ(recv[0].status, WcStatus::success);
      EXPECT_TRUE(led.balanced());
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Modify and address handles

// RESET -> INIT -> RTR of p.a.qp with `av`'s port and `dest_qpn` given as they are.
void to_rtr(SimPair& p, std::uint8_t av_port, std::uint32_t dest_qpn) {
  modify_to_init(*p.a.qp);
  QpAttr a;
  const QpAttrMask mask = rtr_attr(QpType::rc, endpoint_of(p.b, 200), {}, a);
  a.ah_attr.port_num = av_port;
  a.dest_qp_num = dest_qpn;
  p.a.qp->modify(a, mask);
}

// ib_uverbs' modify_qp refuses an AV whose port is not one of the device's (port 0 included).
TEST_P(Hardening, RtrWithAvPortZeroIsEinval) {
  for (const std::uint8_t port : {0, 2}) {
    SCOPED_TRACE("port " + std::to_string(port));
    PairOptions o;
    o.connect = false;
    SimPair p(config(), o);
    std::string what;
    EXPECT_TRUE(testing::throws_verb_error([&] { to_rtr(p, port, p.b.qp->qp_num()); },
                                           "ibv_modify_qp", EINVAL, &what));
    EXPECT_NE(what.find("port_num"), std::string::npos) << what;
    EXPECT_EQ(p.a.qp->state(), QpState::init);
  }
}

// A QP number has 24 bits: a wider dest_qp_num is refused, not truncated onto another QP.
TEST_P(Hardening, DestQpnAbove24BitsIsEinval) {
  PairOptions o;
  o.connect = false;
  SimPair p(config(), o);
  const std::uint32_t qpn = p.b.qp->qp_num();
  std::string what;
  EXPECT_TRUE(testing::throws_verb_error([&] { to_rtr(p, 1, qpn | 0x1000000); }, "ibv_modify_qp",
                                         EINVAL, &what));
  EXPECT_NE(what.find("dest_qp_num"), std::string::npos) << what;
  EXPECT_EQ(p.a.qp->state(), QpState::init);
  to_rtr(p, 1, qpn);
  EXPECT_EQ(p.a.qp->query(QpAttrMask::dest_qpn).dest_qp_num, qpn);
}

// A UD send through an AH of another PD than the QP's: rxe finds no address vector for it
// (rxe_get_av) and fails the WR with LOC_QP_OP_ERR, the QP to ERR; the strict profile does the
// same. mlx5 copies the AV into the WQE and sends it.
TEST_P(Hardening, UdSendThroughAnAhOfAnotherPd) {
  PairOptions o;
  o.type = QpType::ud;
  o.connect_options.qkey = 0x11111111;
  SimPair p(config(), o);
  const std::unique_ptr<ProtectionDomain> other = p.a.ctx->alloc_pd();
  AhAttr attr;
  attr.is_global = true;
  attr.grh.dgid = p.b.ctx->query_gid(1, 1);
  attr.grh.sgid_index = 1;
  const std::unique_ptr<AddressHandle> ah = other->create_ah(attr);
  Ledger led;
  const Sge rs = p.b.sge(0, 256);
  ASSERT_TRUE(led.post_recv(*p.b.qp, testing::recv_wr(201, rs)));
  const Sge ls = p.a.sge(0, 8);
  SendWr wr = send_wr(1, ls);
  wr.ah = ah.get();
  wr.remote_qpn = p.b.qp->qp_num();
  wr.remote_qkey = 0x11111111;
  ASSERT_TRUE(led.post_send(*p.a.qp, wr));
  const auto wcs = led.poll_n(p.world, *p.a.cq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  const auto recv = led.drain(p.world, *p.b.cq);
  if (is(Profile::mlx5)) {
    EXPECT_EQ(wcs[0].status, WcStatus::success);
    EXPECT_EQ(recv.size(), 1u);
  } else {
    EXPECT_EQ(wcs[0].status, WcStatus::loc_qp_op_err) << to_string(wcs[0].status);
    EXPECT_EQ(p.a.qp->state(), QpState::err);
    EXPECT_TRUE(recv.empty()) << "nothing reaches the peer";
    // The receive stays posted: flush it so the ledger balances.
    testing::move_to(*p.b.qp, QpState::err);
    led.drain(p.world, *p.b.cq);
  }
  EXPECT_TRUE(led.balanced());
}

// ---------------------------------------------------------------------------------------------
// Keys and QP numbers are reused

// More reg/dereg cycles than the device has MR indices: each one succeeds (it failed with
// ENOMEM "MR keys exhausted" after 2^20).
TEST(HardeningKeys, MoreRegDeregCyclesThanMrIndices) {
  sim::World world(testing::config_for(Profile::rxe));
  auto ctx = world.open("sim0");
  auto pd = ctx->alloc_pd();
  std::vector<char> buf(64);
  const int max_mr = ctx->query_device().max_mr;
  for (int i = 0; i < max_mr + 1000; ++i) {
    auto mr = pd->reg_mr(buf.data(), buf.size(), Access::local_write);
    mr->destroy();
  }
}

// A freed MR index comes back with another low key byte: the old MR's rkey, stale, is refused
// with the remote access error as any unknown key; the new one works.
TEST_P(Hardening, StaleRkeyOfAReusedMrIndexIsRefused) {
  SimPair p(config());
  sim::DevCore& dev = sim::device_of(*p.b.ctx);
  auto old_mr = p.b.pd->reg_mr(p.b.buf.data(), 256, Access::local_write | Access::remote_write);
  const std::uint32_t stale = old_mr->rkey();
  dev.mr_indices.set_last(stale >> 8);  // no fresh index is left: the next MR takes old_mr's
  old_mr->destroy();
  auto mr = p.b.pd->reg_mr(p.b.buf.data(), 256, Access::local_write | Access::remote_write);
  EXPECT_EQ(mr->rkey() >> 8, stale >> 8) << "the index is reused";
  EXPECT_NE(mr->rkey(), stale);
  EXPECT_EQ(mr->lkey(), mr->rkey());
  Ledger led;
  const Sge ls = p.a.sge(0, 8);
  ASSERT_TRUE(led.post_send(*p.a.qp, rdma_wr(1, WrOpcode::rdma_write, ls, *mr, 0)));
  SendWr wr = rdma_wr(2, WrOpcode::rdma_write, ls, *mr, 0);
  wr.rkey = stale;
  ASSERT_TRUE(led.post_send(*p.a.qp, wr));
  const auto wcs = led.poll_n(p.world, *p.a.cq, 2);
  testing::expect_completions(wcs, *p.a.qp,
                              {{1, WcStatus::success}, {2, WcStatus::rem_access_err}});
  EXPECT_TRUE(led.balanced());
}

// QP numbers start at 0x11; once every number was handed out, the freed ones come back, the
// longest freed first.
TEST_P(Hardening, FreedQpNumbersAreReusedInFifoOrder) {
  sim::World world(config());
  auto ctx = world.open("sim0");
  auto pd = ctx->alloc_pd();
  auto cq = ctx->create_cq(16);
  QpInitAttr init;
  init.send_cq = cq.get();
  init.recv_cq = cq.get();
  init.cap = {4, 4, 1, 1, 0};
  std::vector<std::unique_ptr<QueuePair>> qps;
  for (int i = 0; i < 4; ++i) qps.push_back(pd->create_qp(init));
  for (std::uint32_t i = 0; i < 4; ++i) EXPECT_EQ(qps[i]->qp_num(), 0x11 + i);
  sim::device_of(*ctx).qpns.set_last(0x14);
  EXPECT_TRUE(testing::throws_verb_error([&] { (void)pd->create_qp(init); }, "ibv_create_qp",
                                         ENOMEM));
  qps[2]->destroy();
  qps[0]->destroy();
  EXPECT_EQ(pd->create_qp(init)->qp_num(), 0x13u);
  // The number just given back (0x13) waits behind 0x11.
  auto again = pd->create_qp(init);
  EXPECT_EQ(again->qp_num(), 0x11u);
  for (int i = 0; i < 100; ++i) {
    auto qp = pd->create_qp(init);
    EXPECT_NE(qp->qp_num(), again->qp_num());
  }
}

// ---------------------------------------------------------------------------------------------
// Device limits

// What query_device reports as max_qp, max_cq, max_mr, max_pd, max_srq and max_ah holds: one
// more is refused, ENOMEM for an MR (rxe_alloc) and the provider's errno for the others (rxe:
// EINVAL from __rxe_add_to_pool; mlx5: ENOMEM); one freed makes room again.
TEST_P(Hardening, DeviceLimitsAreEnforced) {
  const int full = is(Profile::rxe) ? EINVAL : ENOMEM;
  sim::World world(config());
  auto ctx = world.open("sim0");
  sim::DevCore& dev = sim::device_of(*ctx);
  dev.limits = {.max_qp = 2, .max_cq = 2, .max_mr = 2, .max_pd = 2, .max_srq = 1, .max_ah = 1};
  const DeviceAttr a = ctx->query_device();
  EXPECT_EQ(a.max_qp, 2);
  EXPECT_EQ(a.max_cq, 2);
  EXPECT_EQ(a.max_mr, 2);
  EXPECT_EQ(a.max_pd, 2);
  EXPECT_EQ(a.max_srq, 1);
  EXPECT_EQ(a.max_ah, 1);

  auto pd = ctx->alloc_pd();
  auto pd2 = ctx->alloc_pd();
  EXPECT_TRUE(testing::throws_verb_error([&] { (void)ctx->alloc_pd(); }, "ibv_alloc_pd", full));
  pd2->destroy();
  pd2 = ctx->alloc_pd();

  auto cq = ctx->create_cq(16);
  auto cq2 = ctx->create_cq(16);
  EXPECT_TRUE(testing::throws_verb_error([&] { (void)ctx->create_cq(16); }, "ibv_create_cq", full));

  std::vector<char> buf(64);
  auto mr = pd->reg_mr(buf.data(), buf.size(), Access::local_write);
  auto mr2 = pd->reg_mr(buf.data(), buf.size(), Access::local_write);
  EXPECT_TRUE(testing::throws_verb_error(
      [&] { (void)pd->reg_mr(buf.data(), buf.size(), Access::local_write); }, "ibv_reg_mr",
      ENOMEM));
  mr2->destroy();
  mr2 = pd->reg_mr(buf.data(), buf.size(), Access::local_write);

  QpInitAttr init;
  init.send_cq = cq.get();
  init.recv_cq = cq.get();
  init.cap = {4, 4, 1, 1, 0};
  auto qp = pd->create_qp(init);
  auto qp2 = pd->create_qp(init);
  EXPECT_TRUE(testing::throws_verb_error([&] { (void)pd->create_qp(init); }, "ibv_create_qp", full));
  qp2->destroy();
  qp2 = pd->create_qp(init);

  SrqInitAttr sa;
  sa.max_wr = 4;
  sa.max_sge = 1;
  auto srq = pd->create_srq(sa);
  EXPECT_TRUE(testing::throws_verb_error([&] { (void)pd->create_srq(sa); }, "ibv_create_srq", full));

  AhAttr ah;
  ah.is_global = true;
  ah.grh.dgid = ctx->query_gid(1, 1);
  ah.grh.sgid_index = 1;
  auto h = pd->create_ah(ah);
  EXPECT_TRUE(testing::throws_verb_error([&] { (void)pd->create_ah(ah); }, "ibv_create_ah", full));
  h->destroy();
  h = pd->create_ah(ah);
}

// ---------------------------------------------------------------------------------------------
// Registering memory that is not there

// Three pages, the middle one unmapped; unmapped again when it goes.
struct Holey {
  Holey() {
    page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    base = static_cast<char*>(
        ::mmap(nullptr, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    EXPECT_NE(base, MAP_FAILED);
    EXPECT_EQ(::munmap(base + page, page), 0);
  }
  ~Holey() {
    ::munmap(base, page);
    ::munmap(base + 2 * page, page);
  }
  std::size_t page;
  char* base;
};

// As ib_umem_get: a range that wraps, or of more pages than it pins, is EINVAL; one with a page
// not mapped is EFAULT (the pin fails). A mapped range is fine. (Each hole is made just before
// it is registered: a mapping made meanwhile, an exception's for one, may fill it.)
TEST_P(Hardening, RegMrOfMemoryThatIsNotThere) {
  SimPair p(config());
  const Access a = Access::local_write | Access::remote_write;
  auto reg = [&](void* addr, std::size_t len) { (void)p.a.pd->reg_mr(addr, len, a); };
  EXPECT_TRUE(testing::throws_verb_error([&] { reg(p.a.buf.data(), SIZE_MAX); }, "ibv_reg_mr",
                                         EINVAL));
  EXPECT_TRUE(testing::throws_verb_error(
      [&] { reg(p.a.buf.data(), std::size_t{1} << 62); }, "ibv_reg_mr", EINVAL));
  // (offset, length) from a Holey's base: the three pages, inside the hole, across its start.
  const long pg = ::sysconf(_SC_PAGESIZE);
  for (const auto& [offset, length] : {std::pair{0L, 3 * pg}, {pg + 8, 16L}, {pg - 8, 16L}}) {
    SCOPED_TRACE("offset " + std::to_string(offset) + ", length " + std::to_string(length));
    std::string what;
    EXPECT_TRUE(testing::throws_verb_error(
        [&] {
          Holey h;
          reg(h.base + offset, static_cast<std::size_t>(length));
        },
        "ibv_reg_mr", EFAULT, &what));
    EXPECT_NE(what.find("not all mapped"), std::string::npos) << what;
  }
  Holey h;
  reg(h.base, h.page);
  reg(h.base + 2 * h.page, h.page);
  if (is(Profile::rxe)) return;  // no rereg_mr
  auto mr = p.a.pd->reg_mr(h.base, h.page, a);
  MrChange c;
  c.length = 2 * h.page;
  EXPECT_TRUE(testing::throws_verb_error(
      [&] {
        Holey hole;
        c.addr = hole.base;
        mr->rereg(c);
      },
      "ibv_rereg_mr", EFAULT));
  c.addr = h.base;
  c.length = SIZE_MAX;
  EXPECT_TRUE(testing::throws_verb_error([&] { mr->rereg(c); }, "ibv_rereg_mr", EINVAL));
  EXPECT_EQ(mr->length(), h.page) << "a refused rereg leaves the MR as it was";
}

// A program that unmaps a registered buffer does not crash on hardware: the NIC pinned its
// pages. Here every transfer that touches it completes as before: a WRITE, a SEND and an atomic
// into it land where the program no longer looks, a READ of bytes nothing wrote gives zeros
// (and the atomic's original value is 0), and the world says so once, naming the MR.
TEST_P(Hardening, MemoryUnmappedAfterRegistrationActsPinned) {
  SimPair p(config());
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  auto* gone = static_cast<char*>(
      ::mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(gone, MAP_FAILED);
  std::memset(gone, 0x5a, 2 * page);
  std::unique_ptr<MemoryRegion> mr =
      p.b.pd->reg_mr(gone, 2 * page,
                     Access::local_write | Access::remote_write | Access::remote_read |
                         Access::remote_atomic);
  ASSERT_EQ(::munmap(gone, 2 * page), 0);

  std::memset(p.a.buf.data(), 0x11, 256);
  std::memset(p.a.buf.data() + 256, 0x77, 256);  // the READ's target: must become zeros
  const Sge out = p.a.sge(0, 256);
  const Sge in = p.a.sge(256, 256);
  const Sge word = p.a.sge(512, 8);
  std::memset(p.a.buf.data() + 512, 0x33, 8);
  const Sge there = mr->sge(page, 256);
  ::testing::internal::CaptureStderr();
  const RecvWr recv = testing::recv_wr(9, there);
  ASSERT_TRUE(p.b.qp->post_recv(std::span(&recv, 1)));
  SendWr atomic = testing::send_wr(4, word, WrOpcode::atomic_fetch_and_add);
  atomic.remote_addr = mr->address(512);
  atomic.rkey = mr->rkey();
  atomic.compare_add = 5;
  const SendWr wrs[] = {testing::rdma_wr(1, WrOpcode::rdma_write, out, *mr, 0),
                        testing::send_wr(2, out),
                        testing::rdma_wr(3, WrOpcode::rdma_read, in, *mr, 1024), atomic};
  ASSERT_TRUE(p.a.qp->post_send(wrs));
  const auto sent = testing::poll_n(p.world, *p.a.cq, 4);
  const auto received = testing::poll_n(p.world, *p.b.cq, 1);
  const std::string said = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(sent.size(), 4u);
  for (const WorkCompletion& wc : sent) EXPECT_EQ(wc.status, WcStatus::success) << wc.wr_id;
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].status, WcStatus::success);
  EXPECT_EQ(received[0].byte_len, 256u);
  EXPECT_EQ(std::vector<char>(p.a.buf.begin() + 256, p.a.buf.begin() + 512),
            std::vector<char>(256, 0))
      << "a READ of unmapped memory gives zeros, not what the program had there";
  std::uint64_t original = 1;
  std::memcpy(&original, p.a.buf.data() + 512, 8);
  EXPECT_EQ(original, 0u) << "the atomic's original value, read from the zero page";
  char key[16];
  std::snprintf(key, sizeof key, "%#x", mr->lkey());
  const std::string named = std::string("MR lkey ") + key;
  const std::size_t first = said.find(named);
  EXPECT_NE(first, std::string::npos) << said;
  EXPECT_EQ(said.find(named, first + 1), std::string::npos) << "warned once per MR: " << said;
  EXPECT_NE(said.find("unmapped its memory"), std::string::npos) << said;
}

INSTANTIATE_TEST_SUITE_P(Profiles, Hardening, kAllProfiles, testing::profile_name);

// ---------------------------------------------------------------------------------------------
// Objects that outlive their world

#if !defined(NDEBUG) || defined(VERBSIM_ASSERTS)
constexpr bool kChecked = true;  // Debug and sanitizer builds
#else
constexpr bool kChecked = false;
#endif

// A world destroyed while a context, or an object made from one, is alive says so; Debug and
// sanitizer builds abort there, before anything can use the freed world.
TEST(HardeningLifetime, WorldDestroyedBeforeItsObjects) {
  auto outlive = [] {
    auto world = std::make_unique<sim::World>(sim::Config{});
    std::unique_ptr<Context> ctx = world->open("");
    std::unique_ptr<ProtectionDomain> pd = ctx->alloc_pd();
    ctx.reset();  // the PD keeps the context's core alive
    world.reset();
    return pd;
  };
  const char* said = "World \\(seed [0-9]+\\) destroyed while 1 of its contexts, or objects made";
  if (kChecked) {
    EXPECT_DEATH(outlive(), std::string(said) + ".*Aborting \\(Debug and sanitizer builds\\)");
  } else {
    ::testing::internal::CaptureStderr();
    std::unique_ptr<ProtectionDomain> pd = outlive();
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_TRUE(::testing::internal::RE::PartialMatch(err, said)) << err;
    (void)pd.release();  // its world is gone: destroying it would use freed memory
  }
}

// Objects destroyed before their world: nothing said.
TEST(HardeningLifetime, ObjectsBeforeTheirWorldIsQuiet) {
  ::testing::internal::CaptureStderr();
  {
    sim::World world{sim::Config{}};
    std::unique_ptr<Context> ctx = world.open("");
    std::unique_ptr<ProtectionDomain> pd = ctx->alloc_pd();
  }
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

}  // namespace
}  // namespace verbsim
