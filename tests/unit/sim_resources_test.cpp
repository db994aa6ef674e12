// Resource lifetime (EBUSY while in use), registration checks, device discovery and queries, and
// determinism of whole runs.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "../support/sim_checks.hpp"

namespace verbsim {
namespace {

using sim::Profile;
using testing::Ledger;
using testing::Node;
using testing::PairOptions;
using testing::rdma_wr;
using testing::recv_wr;
using testing::send_wr;
using testing::SimPair;
using testing::throws_verb_error;

TEST(Lifetime, APdInUseCannotBeDeallocatedAndKeepsWorking) {
  sim::World world;
  auto ctx = world.open("sim0");
  auto pd = ctx->alloc_pd();
  auto cq = ctx->create_cq(16);
  std::vector<char> buf(4096);
  auto mr = pd->reg_mr(buf.data(), buf.size(), Access::local_write);
  std::string what;
  EXPECT_TRUE(throws_verb_error([&] { destroy(pd); }, "ibv_dealloc_pd", EBUSY, &what));
  EXPECT_EQ(std::error_code(EBUSY, std::generic_category()), Condition::in_use);
  ASSERT_NE(pd, nullptr) << "a refused destroy leaves the PD owned";
  auto mr2 = pd->reg_mr(buf.data() + 1024, 1024, Access::local_write);  // still a working PD
  QpInitAttr init;
  init.send_cq = cq.get();
  init.recv_cq = cq.get();
  init.cap = QpCap{4, 4, 1, 1, 0};
  auto qp = pd->create_qp(init);
  destroy(mr);
  destroy(mr2);
  EXPECT_EQ(mr, nullptr);
  EXPECT_TRUE(throws_verb_error([&] { destroy(pd); }, "ibv_dealloc_pd", EBUSY))
      << "the QP still uses it";
  AhAttr ah;
  ah.is_global = true;
  ah.grh.dgid = ctx->query_gid(1, 1);
  ah.grh.sgid_index = 1;
  auto handle = pd->create_ah(ah);
  destroy(qp);
  EXPECT_TRUE(throws_verb_error([&] { destroy(pd); }, "ibv_dealloc_pd", EBUSY))
      << "the AH still uses it";
  destroy(handle);
  destroy(pd);
  EXPECT_EQ(pd, nullptr);
}

TEST(Lifetime, ACqOrSrqOrChannelInUseIsEbusyAndStillWorks) {
  sim::World world;
  Node a(world, "sim0"), b(world, "sim1");
  auto ch = a.ctx->create_comp_channel();
  auto acq = a.ctx->create_cq(16, ch.get()), bcq = b.ctx->create_cq(16);
  auto srq = b.pd->create_srq(SrqInitAttr{8, 1, 0});
  auto aqp = a.make_qp(*acq, *acq, QpCap{4, 4, 1, 1, 0});
  auto bqp = b.make_qp(*bcq, *bcq, QpCap{4, 4, 1, 1, 0}, QpType::rc, false, srq.get());
  testing::connect_qps(a, *aqp, b, *bqp);
  EXPECT_TRUE(throws_verb_error([&] { destroy(acq); }, "ibv_destroy_cq", EBUSY));
  EXPECT_TRUE(throws_verb_error([&] { destroy(srq); }, "ibv_destroy_srq", EBUSY));
  EXPECT_TRUE(throws_verb_error([&] { destroy(ch); }, "ibv_destroy_comp_channel", EBUSY));
  ASSERT_NE(acq, nullptr);
  ASSERT_NE(srq, nullptr);
  Ledger led;
  const Sge rs = b.sge(0, 64);
  const RecvWr srq_recv = recv_wr(201, rs);
  ASSERT_TRUE(led.post_recv(*srq, std::span(&srq_recv, 1)));
  const Sge ss = a.sge(0, 8);
  ASSERT_TRUE(led.post_send(*aqp, send_wr(1, ss)));
  EXPECT_EQ(led.poll_n(world, *acq, 1).size(), 1u) << "the CQ still works";
  EXPECT_EQ(led.poll_n(world, *bcq, 1).size(), 1u) << "the SRQ still works";
  EXPECT_TRUE(led.balanced());

  // In dependency order everything goes.
  destroy(aqp);
  destroy(bqp);
  destroy(srq);
  destroy(acq);
  destroy(bcq);
  destroy(ch);
  destroy(a.mr);
  destroy(a.pd);
  destroy(a.ctx);
  EXPECT_EQ(a.ctx, nullptr);
  EXPECT_EQ(srq, nullptr);
}

TEST(Registration, RemoteWriteOrAtomicNeedsLocalWrite) {
  sim::World world;
  auto ctx = world.open("sim0");
  auto pd = ctx->alloc_pd();
  std::vector<char> buf(4096);
  for (const Access bad :
       {Access::remote_write, Access::remote_atomic, Access::remote_write | Access::remote_read}) {
    EXPECT_TRUE(throws_verb_error([&] { (void)pd->reg_mr(buf.data(), buf.size(), bad); },
                                  "ibv_reg_mr", EINVAL));
  }
  // Page 0 is not mapped: the pin fails (rxe: EFAULT).
  EXPECT_TRUE(throws_verb_error([&] { (void)pd->reg_mr(nullptr, 64, Access::local_write); },
                                "ibv_reg_mr", EFAULT));
  auto ro = pd->reg_mr(buf.data(), buf.size(), Access::remote_read);  // read-only is fine
  EXPECT_EQ(ro->access(), Access::remote_read);
  auto rw = pd->reg_mr(buf.data(), buf.size(), Access::local_write | Access::remote_write);
  EXPECT_EQ(rw->addr(), buf.data());
  EXPECT_EQ(rw->length(), buf.size());
  EXPECT_EQ(rw->lkey(), rw->rkey());
  EXPECT_NE(rw->lkey(), ro->lkey());
  AhAttr no_grh;
  EXPECT_TRUE(throws_verb_error([&] { (void)pd->create_ah(no_grh); }, "ibv_create_ah", EINVAL))
      << "RoCE address handles need a GRH";
}

// Length 0, as rxe on kernel 6.1 answers (ib_umem_get pins the pages the range touches): at a
// page boundary there is no page, EINVAL (NULL too); inside a page it pins that page and the MR
// holds no byte; inside page 0, which is not mapped, EFAULT. Every profile: the kernel's rule.
TEST(Registration, ZeroLengthRegionsAsTheKernelPinsThem) {
  for (const Profile profile : {Profile::rxe, Profile::strict, Profile::mlx5}) {
    SCOPED_TRACE(std::string(sim::to_string(profile)));
    sim::World world(testing::config_for(profile));
    auto ctx = world.open("sim0");
    auto pd = ctx->alloc_pd();
    const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    std::vector<char> buf(3 * page);
    char* boundary = buf.data() + (page - reinterpret_cast<std::uintptr_t>(buf.data()) % page);
    const Access all = Access::local_write | Access::remote_write | Access::remote_read;
    EXPECT_TRUE(throws_verb_error([&] { (void)pd->reg_mr(boundary, 0, all); }, "ibv_reg_mr", EINVAL));
    EXPECT_TRUE(throws_verb_error([&] { (void)pd->reg_mr(nullptr, 0, all); }, "ibv_reg_mr", EINVAL));
    EXPECT_TRUE(throws_verb_error([&] { (void)pd->reg_mr(reinterpret_cast<void*>(8), 0, all); },
                                  "ibv_reg_mr", EFAULT));
    auto inside = pd->reg_mr(boundary + 8, 0, all);
    EXPECT_EQ(inside->addr(), boundary + 8);
    EXPECT_EQ(inside->length(), 0u);
    EXPECT_EQ(inside->rkey(), inside->lkey());
    auto last_byte = pd->reg_mr(boundary + page - 1, 0, Access::local_write);
    EXPECT_NE(last_byte->lkey(), inside->lkey());
  }
}

// An MR at an iova (ibv_reg_mr_iova2) is addressed from it for its rkey and its lkey alike; once
// re-registered to another range it is addressed by that range's addresses, as the providers
// pass the new address as the iova (the strict profile: rxe has no rereg).
TEST(Registration, AnIovaMrReregisteredIsAddressedByItsNewRange) {
  testing::SimPair p(testing::config_for(Profile::strict));
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<char> buf(3 * page);
  char* at = buf.data() + (page - reinterpret_cast<std::uintptr_t>(buf.data()) % page);
  constexpr std::uint64_t kIova = 0x10000000;
  auto r = p.b.pd->reg_mr_iova(at, page, kIova, Access::local_write | Access::remote_write);
  EXPECT_EQ(r->iova(), kIova);
  EXPECT_EQ(r->address(8), kIova + 8);
  EXPECT_EQ(r->sge(8, 64).addr, kIova + 8);
  EXPECT_TRUE(throws_verb_error([&] { (void)p.b.pd->reg_mr_iova(at, page, kIova + 8, Access::none); },
                                "ibv_reg_mr", EINVAL))
      << "the iova's offset in its page must be the buffer's";
  MrChange change;
  change.addr = at + page;
  change.length = page;
  r->rereg(change);
  EXPECT_EQ(r->iova(), reinterpret_cast<std::uintptr_t>(at + page));
  std::memset(p.a.buf.data(), 0x5a, 64);
  ASSERT_FALSE(p.a.qp->post_send(rdma_wr(1, WrOpcode::rdma_write, p.a.sge(0, 64), *r, 8)).error());
  const auto wcs = testing::bounded_poll(p.world, *p.a.cq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::success);
  EXPECT_EQ(std::memcmp(at + page + 8, p.a.buf.data(), 64), 0);
}

// ---------------------------------------------------------------------------------------------
// Devices

TEST(Devices, TwoSimulatedRoceDevicesByDefault) {
  sim::World world;
  const auto devs = world.devices();
  ASSERT_EQ(devs.size(), 2u);
  EXPECT_EQ(devs[0].name, "sim0");
  EXPECT_EQ(devs[1].name, "sim1");
  EXPECT_EQ(devs[0].backend, "sim");
  EXPECT_NE(devs[0].node_guid, devs[1].node_guid);
  for (std::uint8_t d = 0; d < 2; ++d) {
    SCOPED_TRACE(devs[d].name);
    auto ctx = world.open(devs[d].name);
    EXPECT_EQ(ctx->info().name, devs[d].name);
    const DeviceAttr attr = ctx->query_device();
    EXPECT_EQ(attr.phys_port_cnt, 1u);
    EXPECT_EQ(attr.node_guid, devs[d].node_guid);
    EXPECT_TRUE(attr.atomics);
    const PortAttr port = ctx->query_port(1);
    EXPECT_EQ(port.state, PortState::active);
    EXPECT_EQ(port.active_mtu, Mtu::mtu_1024);
    EXPECT_EQ(port.link_layer, LinkLayer::ethernet);
    EXPECT_EQ(port.gid_tbl_len, 2);
    const Gid gid = ctx->query_gid(1, 1);
    EXPECT_EQ(gid, Gid::from_ipv4(10, 0, d, 1));
    EXPECT_EQ(gid.to_string(), "0000:0000:0000:0000:0000:ffff:0a00:0" + std::to_string(d) + "01");
    const Gid link_local = ctx->query_gid(1, 0);
    EXPECT_EQ(link_local.raw[0], 0xfe);
    EXPECT_EQ(link_local.raw[1], 0x80);
    EXPECT_TRUE(throws_verb_error([&] { (void)ctx->query_port(0); }, "ibv_query_port", EINVAL));
    EXPECT_TRUE(throws_verb_error([&] { (void)ctx->query_port(2); }, "ibv_query_port", EINVAL));
    EXPECT_TRUE(throws_verb_error([&] { (void)ctx->query_gid(1, 2); }, "ibv_query_gid", EINVAL));
  }
  EXPECT_EQ(world.open()->info().name, "sim0") << "no name opens the first device";
}

TEST(Devices, OpeningAnUnknownDeviceIsEnodevListingTheDevices) {
  sim::Config c;
  c.devices = 3;
  sim::World world(c);
  EXPECT_EQ(world.devices().size(), 3u);
  std::string what;
  EXPECT_TRUE(
      throws_verb_error([&] { (void)world.open("sim7"); }, "ibv_open_device", ENODEV, &what));
  EXPECT_NE(what.find("sim7"), std::string::npos) << what;
  EXPECT_NE(what.find("sim0, sim1, sim2"), std::string::npos) << what;
}

TEST(Devices, RxeProfileReportsRxeLimits) {
  sim::World world(testing::config_for(Profile::rxe));
  auto ctx = world.open("sim0");
  const DeviceAttr attr = ctx->query_device();
  EXPECT_EQ(attr.max_qp_wr, 1048576);
  EXPECT_EQ(attr.max_cqe, 32767);
  EXPECT_EQ(attr.max_sge, 32);
  EXPECT_NE(attr.fw_ver.find("rxe"), std::string::npos) << attr.fw_ver;
}

// ---------------------------------------------------------------------------------------------
// Determinism

struct Outcome {
  std::uint64_t digest;
  std::uint64_t now;
  std::vector<std::uint32_t> keys;
  std::vector<std::uint64_t> wcs;  // wr_id, status, byte_len of every completion, in order
};

// A scenario with randomness (MR keys) and timing (an RNR wait): sends, a READ, an atomic.
Outcome run_scenario(std::uint64_t seed, Profile profile) {
  PairOptions o;
  o.cqe = 128;
  SimPair p(testing::config_for(profile, seed), o);
  Outcome out;
  std::vector<std::unique_ptr<MemoryRegion>> mrs;
  for (int i = 0; i < 8; ++i) {
    mrs.push_back(p.a.pd->reg_mr(p.a.buf.data(), 4096, Access::local_write));
    out.keys.push_back(mrs.back()->lkey());
  }
  auto record = [&](const std::vector<WorkCompletion>& wcs) {
    for (const auto& w : wcs) {
      out.wcs.push_back(w.wr_id);
      out.wcs.push_back(static_cast<std::uint64_t>(w.status));
      out.wcs.push_back(w.byte_len);
    }
  };
  const Sge ss = p.a.sge(0, 100);
  EXPECT_FALSE(p.a.qp->post_send(send_wr(1, ss)).error());  // no receive yet: RNR
  for (int i = 0; i < 4; ++i) p.world.step();
  for (std::uint64_t id = 0; id < 6; ++id) {
    const Sge rs = p.b.sge(id * 128, 128);
    EXPECT_FALSE(p.b.qp->post_recv(recv_wr(200 + id, rs)).error());
  }
  for (std::uint64_t id = 2; id <= 6; ++id) {
    const Sge s = p.a.sge(0, static_cast<std::uint32_t>(id * 10));
    EXPECT_FALSE(p.a.qp->post_send(send_wr(id, s)).error());
  }
  const Sge ls = p.a.sge(8192, 64);
  EXPECT_FALSE(p.a.qp->post_send(rdma_wr(7, WrOpcode::rdma_read, ls, *p.b.mr, 0)).error());
  const Sge l8 = p.a.sge(9000 - 9000 % 8, 8);
  SendWr faa = rdma_wr(8, WrOpcode::atomic_fetch_and_add, l8, *p.b.mr, 4096);
  faa.compare_add = 7;
  EXPECT_FALSE(p.a.qp->post_send(faa).error());
  record(testing::bounded_poll(p.world, *p.a.cq, 8));
  record(testing::bounded_poll(p.world, *p.b.cq, 6));
  out.digest = p.world.digest();
  out.now = p.world.now();
  return out;
}

TEST(Determinism, SameSeedSameRunDifferentSeedDifferentKeys) {
  VERBSIM_SKIP_IF_SEED_OVERRIDDEN();
  for (const Profile profile : {Profile::strict, Profile::rxe}) {
    SCOPED_TRACE(std::string(sim::to_string(profile)));
    const Outcome first = run_scenario(42, profile);
    const Outcome again = run_scenario(42, profile);
    const Outcome other = run_scenario(43, profile);
    ASSERT_EQ(first.wcs.size(), 14u * 3);
    EXPECT_GE(first.now, rnr_timer_ns(12)) << "the first SEND waited for a receive";
    EXPECT_EQ(first.digest, again.digest);
    EXPECT_EQ(first.now, again.now);
    EXPECT_EQ(first.keys, again.keys);
    EXPECT_EQ(first.wcs, again.wcs);
    EXPECT_NE(first.keys, other.keys) << "MR keys come from the seeded RNG";
    EXPECT_NE(first.digest, other.digest);
    EXPECT_EQ(first.wcs, other.wcs) << "the application-visible outcome does not depend on keys";
    EXPECT_EQ(first.now, other.now);
  }
}

}  // namespace
}  // namespace verbsim
