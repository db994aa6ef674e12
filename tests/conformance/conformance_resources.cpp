// Device and port queries, protection domains and memory regions, CQ and QP creation.
#include <unistd.h>

#include <cerrno>
#include <cstdint>

#include "conformance.hpp"

namespace verbsim::conformance {
namespace {

class Device : public Conformance {};
class Memory : public Conformance {
 protected:
  // The first page boundary inside the fixture's buffer (more than 32 KiB of it follow).
  char* page_boundary() noexcept {
    const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    const auto base = reinterpret_cast<std::uintptr_t>(mem(0));
    return mem((page - base % page) % page);
  }
  // A region of length 0 inside a page of the fixture's buffer, with every right.
  std::unique_ptr<MemoryRegion> zero_length_region() {
    return pd().reg_mr(page_boundary() + 8, 0, kAllAccess);
  }
  static constexpr Access kAllAccess =
      Access::local_write | Access::remote_write | Access::remote_read;
};
class CqCreate : public Conformance {};
class QpCreate : public Conformance {};

// ---------------------------------------------------------------------------------------------
// Device and port

TEST_P(Device, QueryDeviceLimits) {
  const DeviceAttr a = ctx().query_device();
  CHECK_OBS("max_qp_wr", a.max_qp_wr, expect().max_qp_wr);
  CHECK_OBS("max_sge", a.max_sge, expect().max_sge);
  CHECK_OBS("max_cqe", a.max_cqe, expect().max_cqe);
  CHECK_OBS("max_qp_rd_atom", a.max_qp_rd_atom, expect().max_qp_rd_atom);
  CHECK_OBS("phys_port_cnt", a.phys_port_cnt, 1);
  CHECK_OBS("atomics", a.atomics, true);
}

TEST_P(Device, QueryPort) {
  const PortAttr p = ctx().query_port(1);
  CHECK_OBS("state", static_cast<int>(p.state), static_cast<int>(PortState::active));
  CHECK_OBS("link_layer", static_cast<int>(p.link_layer), static_cast<int>(LinkLayer::ethernet));
  CHECK_OBS("active_mtu", mtu_bytes(p.active_mtu), 1024);
  CHECK_OBS("max_mtu", mtu_bytes(p.max_mtu), 4096);
}

TEST_P(Device, PortTables) {
  const PortAttr p = ctx().query_port(1);
  CHECK_OBS("gid_tbl_len", p.gid_tbl_len, expect().gid_tbl_len);
  CHECK_OBS("pkey_tbl_len", p.pkey_tbl_len, expect().pkey_tbl_len);
  CHECK_OBS("max_msg_sz", p.max_msg_sz, expect().max_msg_sz);
}

TEST_P(Device, QueryPortOutOfRange) {
  CHECK_ERR("port0", verb_errno([&] { (void)ctx().query_port(0); }), EINVAL);
  CHECK_ERR("port2", verb_errno([&] { (void)ctx().query_port(2); }), EINVAL);
}

TEST_P(Device, RoceV2GidIsIpv4Mapped) {
  CHECK_OBS("gid_index", gid_index(), 1);
  // 10.0.0.1 in the VM and on the simulator's first device.
  CHECK_OBS("gid", gid().to_string(), Gid::from_ipv4(10, 0, 0, 1).to_string());
}

TEST_P(Device, QueryGidOutsideTable) {
  const int len = ctx().query_port(1).gid_tbl_len;
  CHECK_ERR("query_gid_at_len", verb_errno([&] { (void)ctx().query_gid(1, len); }), EINVAL);
}

TEST_P(Device, QueryGidEmptyEntryIsZero) {
  // An unused entry inside the table (index 5: the test network has two GIDs).
  Gid g;
  const int err = verb_errno([&] { g = ctx().query_gid(1, 5); });
  const bool in_table = 5 < expect().gid_tbl_len;
  CHECK_ERR("query_gid5", err, in_table ? 0 : EINVAL);
  CHECK_OBS("zero", g.is_zero(), true);
}

// ---------------------------------------------------------------------------------------------
// Protection domains and memory regions

TEST_P(Memory, ValidAccessCombinations) {
  const Access sets[] = {Access::none, Access::local_write, Access::remote_read,
                         Access::local_write | Access::remote_write,
                         Access::local_write | Access::remote_atomic,
                         Access::local_write | Access::remote_write | Access::remote_read |
                             Access::remote_atomic};
  int i = 0;
  for (const Access a : sets) {
    std::unique_ptr<MemoryRegion> m;
    CHECK_ERR("reg" + std::to_string(i++), verb_errno([&] { m = pd().reg_mr(mem(0), 4096, a); }), 0);
  }
}

TEST_P(Memory, RemoteWriteNeedsLocalWrite) {
  CHECK_ERR("reg", verb_errno([&] { (void)pd().reg_mr(mem(0), 4096, Access::remote_write); }), EINVAL);
}

TEST_P(Memory, RemoteAtomicNeedsLocalWrite) {
  CHECK_ERR("reg",
            verb_errno([&] { (void)pd().reg_mr(mem(0), 4096, Access::remote_atomic | Access::remote_read); }),
            EINVAL);
}

// Length 0: the kernel pins the pages the range touches (ib_umem_get), so an empty range at a
// page boundary has none (EINVAL, NULL too), one inside a page pins that page, and one inside
// page 0 fails the pin (EFAULT). The region holds no byte and has keys like any other.
TEST_P(Memory, ZeroLengthRegion) {
  char* boundary = page_boundary();
  const auto reg = [&](void* addr) {
    return verb_errno([&] { (void)pd().reg_mr(addr, 0, kAllAccess); });
  };
  CHECK_ERR("at_page_boundary", reg(boundary), EINVAL);
  CHECK_ERR("null", reg(nullptr), EINVAL);
  CHECK_ERR("inside_page_zero", reg(reinterpret_cast<void*>(8)), EFAULT);
  CHECK_ERR("last_byte_of_a_page", reg(boundary - 1), 0);
  std::unique_ptr<MemoryRegion> z;
  CHECK_ERR("inside_a_page", verb_errno([&] { z = zero_length_region(); }), 0);
  ASSERT_NE(z, nullptr);
  CHECK_OBS("length", z->length(), 0);
  CHECK_OBS("addr", z->addr() == boundary + 8, true);
  CHECK_OBS("rkey_is_lkey", z->rkey() == z->lkey(), true);
  CHECK_OBS("distinct_lkey", z->lkey() != mr().lkey(), true);
  CHECK_ERR("dereg", verb_errno([&] { destroy(z); }), 0);
}

// Transfers of 0 bytes through a region of length 0: its 0-byte SGE on either side of a SEND,
// and its address and rkey as the target of an RDMA WRITE or READ, with its SGE or none.
TEST_P(Memory, ZeroByteTransfersThroughAZeroLengthRegion) {
  Pair p = make_pair();
  auto z = zero_length_region();
  const Sge zs = z->sge(0, 0);
  ASSERT_FALSE(p.b->post_recv(recv_wr(2, &zs)).error());
  CHECK_ERR("send_post", p.a->post_send(send_wr(1, &zs)).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 1)), "SUCCESS/SEND/0");
  CHECK_OBS("receiver", describe(poll_n(*p.cq_b, 1)), "SUCCESS/RECV/0");
  for (const WrOpcode op : {WrOpcode::rdma_write, WrOpcode::rdma_read}) {
    const std::string name = op == WrOpcode::rdma_write ? "write" : "read";
    for (const bool with_sge : {true, false}) {
      const SendWr wr = rdma_wr(3, op, with_sge ? &zs : nullptr, z->address(0), z->rkey());
      const std::string key = name + (with_sge ? "_sge" : "_no_sge");
      CHECK_ERR(key + "_post", p.a->post_send(wr).error(), 0);
      CHECK_OBS(key, describe(poll_n(*p.cq_a, 1)),
                op == WrOpcode::rdma_write ? "SUCCESS/RDMA_WRITE/0" : "SUCCESS/RDMA_READ/0");
    }
  }
  CHECK_OBS("requester", p.a->state(), QpState::rts);
  CHECK_OBS("responder", p.b->state(), QpState::rts);
}

// One byte through a region of length 0 is outside it, on every side: as the sender's buffer
// (LOC_PROT_ERR), a receive buffer (the responder's range error), the target of an RDMA WRITE
// or READ (REM_ACCESS_ERR) and the landing buffer of a READ (LOC_PROT_ERR).
TEST_P(Memory, OneByteIsOutsideAZeroLengthRegion) {
  auto z = zero_length_region();
  const Sge z1 = z->sge(0, 1);
  const Sge one = sge(0, 1);
  {
    Pair p = make_pair();
    const Sge r = sge(4096, 64);
    ASSERT_FALSE(p.b->post_recv(recv_wr(2, &r)).error());
    CHECK_ERR("send_post", p.a->post_send(send_wr(1, &z1)).error(), 0);
    CHECK_OBS("send", describe(poll_n(*p.cq_a, 1)),
              err_wc(WcStatus::loc_prot_err, WcOpcode::send, 1));
    CHECK_OBS("sender", wait_state(*p.a, QpState::err), QpState::err);
  }
  {
    Pair p = make_pair();
    ASSERT_FALSE(p.b->post_recv(recv_wr(2, &z1)).error());
    CHECK_ERR("recv_post", p.a->post_send(send_wr(1, &one)).error(), 0);
    CHECK_OBS("recv_sender", describe(poll_n(*p.cq_a, 1)),
              err_wc(WcStatus::rem_op_err, WcOpcode::send, 1));
    CHECK_OBS("recv_receiver", describe(poll_n(*p.cq_b, 1)),
              err_wc(expect().recv_no_local_write, WcOpcode::recv, 0));
  }
  {
    Pair p = make_pair();
    const SendWr write = rdma_wr(1, WrOpcode::rdma_write, &one, z->address(0), z->rkey());
    CHECK_ERR("write_post", p.a->post_send(write).error(), 0);
    CHECK_OBS("write", describe(poll_n(*p.cq_a, 1)),
              err_wc(WcStatus::rem_access_err, WcOpcode::rdma_write, 1));
    CHECK_OBS("write_responder", wait_state(*p.b, QpState::err), QpState::err);
  }
  {
    Pair p = make_pair();
    const SendWr read = rdma_wr(1, WrOpcode::rdma_read, &one, z->address(0), z->rkey());
    CHECK_ERR("read_post", p.a->post_send(read).error(), 0);
    CHECK_OBS("read", describe(poll_n(*p.cq_a, 1)),
              err_wc(WcStatus::rem_access_err, WcOpcode::rdma_read, 1));
  }
  {
    Pair p = make_pair();
    const SendWr read = rdma_wr(1, WrOpcode::rdma_read, &z1, mr().address(0), mr().rkey());
    CHECK_ERR("read_into_post", p.a->post_send(read).error(), 0);
    CHECK_OBS("read_into", describe(poll_n(*p.cq_a, 1)),
              err_wc(WcStatus::loc_prot_err, WcOpcode::rdma_read, 1));
  }
}

TEST_P(Memory, KeysOfLocalAndRemoteRegions) {
  auto local = pd().reg_mr(mem(0), 4096, Access::local_write);
  auto remote = pd().reg_mr(mem(0), 4096, Access::local_write | Access::remote_write);
  CHECK_OBS("distinct_lkeys", local->lkey() != remote->lkey() && local->lkey() != mr().lkey(), true);
  CHECK_OBS("remote_rkey_is_lkey", remote->rkey() == remote->lkey(), true);
  // rxe gives an MR no peer may reach rkey 0; mlx5 its lkey.
  const std::uint32_t k = local->rkey();
  const std::string local_rkey = k == 0 ? "0" : k == local->lkey() ? "lkey" : "other";
  CHECK_OBS("local_rkey", local_rkey, std::string(expect().local_mr_rkey_zero ? "0" : "lkey"));
}

TEST_P(Memory, DeallocPdWithRegionIsBusy) {
  auto pd2 = ctx().alloc_pd();
  auto m = pd2->reg_mr(mem(0), 4096, Access::local_write);
  CHECK_ERR("dealloc_pd", verb_errno([&] { pd2->destroy(); }), EBUSY);
  CHECK_ERR("dereg_mr", verb_errno([&] { destroy(m); }), 0);
  CHECK_ERR("dealloc_pd_after", verb_errno([&] { destroy(pd2); }), 0);
}

TEST_P(Memory, DestroyCqWithQpIsBusy) {
  auto cq = make_cq(16);
  auto qp = make_qp(*cq, *cq);
  CHECK_ERR("destroy_cq", verb_errno([&] { cq->destroy(); }), EBUSY);
  CHECK_ERR("destroy_qp", verb_errno([&] { destroy(qp); }), 0);
  CHECK_ERR("destroy_cq_after", verb_errno([&] { destroy(cq); }), 0);
}

// Sends from a buffer whose region was deregistered: the device finds the lkey gone.
TEST_P(Memory, SendFromDeregisteredRegion) {
  Pair p = make_pair();
  auto m = pd().reg_mr(mem(8192), 4096, Access::local_write);
  const Sge s = m->sge(0, 64);
  destroy(m);
  const Sge r = sge(0, 64);
  ASSERT_FALSE(p.b->post_recv(recv_wr(1, &r)).error());
  CHECK_ERR("post", p.a->post_send(send_wr(7, &s)).error(), 0);
  const auto wcs = poll_n(*p.cq_a, 1);
  CHECK_OBS("wcs", describe(wcs), err_wc(expect().bad_lkey, WcOpcode::send, 64));
  CHECK_OBS("sender", wait_state(*p.a, QpState::err), QpState::err);
  CHECK_OBS("receiver", p.b->state(), QpState::rts);
}

// The region goes while a SEND from it waits for the receiver (RNR): the retry finds no MR.
TEST_P(Memory, DeregisterWhileSendWaits) {
  PairOptions o;
  o.b.min_rnr_timer = 0;  // 655 ms between retries: the region goes while nothing is in flight
  Pair p = make_pair(o);
  auto m = pd().reg_mr(mem(8192), 4096, Access::local_write);
  const Sge s = m->sge(0, 64);
  CHECK_ERR("post", p.a->post_send(send_wr(7, &s)).error(), 0);
  pass_time(std::chrono::milliseconds(100));  // not polling: the simulator would run the retry
  CHECK_ERR("dereg", verb_errno([&] { destroy(m); }), 0);
  const Sge r = sge(0, 64);
  ASSERT_FALSE(p.b->post_recv(recv_wr(1, &r)).error());
  CHECK_OBS("wcs", describe(poll_n(*p.cq_a, 1)), err_wc(expect().bad_lkey, WcOpcode::send, 64));
  CHECK_OBS("sender", wait_state(*p.a, QpState::err), QpState::err);
  CHECK_OBS("receiver", describe(poll_quiet(*p.cq_b)), "none");
}

TEST_P(Memory, SendBeyondRegionEnd) {
  Pair p = make_pair();
  auto m = pd().reg_mr(mem(8192), 4096, Access::local_write);
  const Sge s = m->sge(4096 - 32, 64);  // 32 bytes past the end
  const Sge r = sge(0, 64);
  ASSERT_FALSE(p.b->post_recv(recv_wr(1, &r)).error());
  CHECK_ERR("post", p.a->post_send(send_wr(7, &s)).error(), 0);
  CHECK_OBS("wcs", describe(poll_n(*p.cq_a, 1)), err_wc(WcStatus::loc_prot_err, WcOpcode::send, 64));
  CHECK_OBS("sender", wait_state(*p.a, QpState::err), QpState::err);
}

TEST_P(Memory, SendFromRegionOfAnotherPd) {
  Pair p = make_pair();
  auto pd2 = ctx().alloc_pd();
  auto m = pd2->reg_mr(mem(8192), 4096, Access::local_write);
  const Sge s = m->sge(0, 64);
  const Sge r = sge(0, 64);
  ASSERT_FALSE(p.b->post_recv(recv_wr(1, &r)).error());
  CHECK_ERR("post", p.a->post_send(send_wr(7, &s)).error(), 0);
  CHECK_OBS("wcs", describe(poll_n(*p.cq_a, 1)), err_wc(expect().bad_lkey, WcOpcode::send, 64));
  CHECK_OBS("sender", wait_state(*p.a, QpState::err), QpState::err);
}

// Keys of another PD, and ranges past an MR's end, on every side of an operation.
TEST_P(Memory, ReadIntoRegionOfAnotherPd) {
  Pair p = make_pair();
  auto pd2 = ctx().alloc_pd();
  auto m = pd2->reg_mr(mem(8192), 4096, Access::local_write);
  const Sge s = m->sge(0, 64);
  SendWr wr = send_wr(7, &s, WrOpcode::rdma_read);
  wr.remote_addr = mr().address(0);
  wr.rkey = mr().rkey();
  CHECK_ERR("post", p.a->post_send(wr).error(), 0);
  CHECK_OBS("wcs", describe(poll_n(*p.cq_a, 1)), err_wc(WcStatus::loc_prot_err, WcOpcode::rdma_read, 64));
}

TEST_P(Memory, ReceiveIntoRegionOfAnotherPd) {
  Pair p = make_pair();
  auto pd2 = ctx().alloc_pd();
  auto m = pd2->reg_mr(mem(8192), 4096, Access::local_write);
  const Sge r = m->sge(0, 64);
  ASSERT_FALSE(p.b->post_recv(recv_wr(1, &r)).error());
  const Sge s = sge(0, 16);
  CHECK_ERR("post", p.a->post_send(send_wr(7, &s)).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 1)), err_wc(WcStatus::rem_op_err, WcOpcode::send, 16));
  CHECK_OBS("receiver", describe(poll_n(*p.cq_b, 1)), err_wc(expect().recv_no_local_write, WcOpcode::recv, 0));
}

TEST_P(Memory, WriteWithRkeyOfAnotherPd) {
  Pair p = make_pair();
  auto pd2 = ctx().alloc_pd();
  auto m = pd2->reg_mr(mem(8192), 4096, Access::local_write | Access::remote_write);
  const Sge s = sge(0, 16);
  SendWr wr = send_wr(7, &s, WrOpcode::rdma_write);
  wr.remote_addr = m->address(0);
  wr.rkey = m->rkey();
  CHECK_ERR("post", p.a->post_send(wr).error(), 0);
  CHECK_OBS("wcs", describe(poll_n(*p.cq_a, 1)), err_wc(WcStatus::rem_access_err, WcOpcode::rdma_write, 16));
}

TEST_P(Memory, ReadPastRegionEnd) {
  Pair p = make_pair();
  auto m = pd().reg_mr(mem(8192), 4096, Access::local_write | Access::remote_read);
  const Sge s = sge(0, 64);
  SendWr wr = send_wr(7, &s, WrOpcode::rdma_read);
  wr.remote_addr = m->address(4096 - 32);
  wr.rkey = m->rkey();
  CHECK_ERR("post", p.a->post_send(wr).error(), 0);
  CHECK_OBS("wcs", describe(poll_n(*p.cq_a, 1)), err_wc(WcStatus::rem_access_err, WcOpcode::rdma_read, 64));
}

TEST_P(Memory, AtomicAtRegionEnd) {
  Pair p = make_pair();
  auto m = pd().reg_mr(mem(8192), 4096, Access::local_write | Access::remote_atomic);
  const Sge s = sge(0, 8);
  SendWr wr = send_wr(7, &s, WrOpcode::atomic_fetch_and_add);
  wr.remote_addr = m->address(4096);
  wr.rkey = m->rkey();
  CHECK_ERR("post", p.a->post_send(wr).error(), 0);
  CHECK_OBS("wcs", describe(poll_n(*p.cq_a, 1)), err_wc(WcStatus::rem_access_err, WcOpcode::fetch_add, 8));
}

// A requester's own buffer with an unknown key or past its MR's end: a READ or atomic, whose
// response cannot be written, fails with LOC_PROT_ERR everywhere; an RDMA WRITE, whose data
// cannot be read, with the profile's unknown-key status (rxe: LOC_QP_OP_ERR) or LOC_PROT_ERR.
TEST_P(Memory, RequesterBufferFaults) {
  std::string out;
  std::string want;
  for (int kind = 0; kind < 6; ++kind) {
    Pair p = make_pair();
    Sge s = sge(0, 64);
    WrOpcode op = WrOpcode::rdma_read;
    if (kind == 0) s.lkey ^= 0x100;                          // READ, unknown key
    if (kind == 1) s = sge(kMemSize - 32, 64);               // READ, past the end
    if (kind == 2) { s = sge(0, 8); s.lkey ^= 0x100; op = WrOpcode::atomic_fetch_and_add; }
    if (kind == 3) { s = sge(kMemSize - 4, 8); op = WrOpcode::atomic_fetch_and_add; }
    if (kind == 4) { s.lkey ^= 0x100; op = WrOpcode::rdma_write; }
    if (kind == 5) { s = sge(kMemSize - 32, 64); op = WrOpcode::rdma_write; }
    SendWr wr = send_wr(7, &s, op);
    wr.remote_addr = mr().address(16384);
    wr.rkey = mr().rkey();
    CHECK_ERR("post", p.a->post_send(wr).error(), 0);
    out += describe(poll_n(*p.cq_a, 1)) + " ";
    const WcOpcode wc_op = op == WrOpcode::rdma_read            ? WcOpcode::rdma_read
                           : op == WrOpcode::atomic_fetch_and_add ? WcOpcode::fetch_add
                                                                  : WcOpcode::rdma_write;
    want += err_wc(kind == 4 ? expect().bad_lkey : WcStatus::loc_prot_err, wc_op, s.length) + " ";
  }
  CHECK_OBS("wcs", out, want);
}

// ibv_rereg_mr: a region given REMOTE_WRITE in place takes a peer's WRITE through the key it
// has afterwards; REMOTE_WRITE without LOCAL_WRITE is EINVAL. rxe has no rereg (EOPNOTSUPP).
TEST_P(Memory, ReregAddsRemoteWriteInPlace) {
  Pair p = make_pair();
  auto m = pd().reg_mr(mem(8192), 4096, Access::local_write);
  MrChange alone;
  alone.access = Access::remote_write;
  CHECK_ERR("remote_write_alone", verb_errno([&] { m->rereg(alone); }),
            expect().rereg_mr ? EINVAL : EOPNOTSUPP);
  MrChange change;
  change.access = Access::local_write | Access::remote_write;
  CHECK_ERR("add_remote_write", verb_errno([&] { m->rereg(change); }),
            expect().rereg_mr ? 0 : EOPNOTSUPP);
  if (!expect().rereg_mr) return;
  CHECK_OBS("access", m->access() == (Access::local_write | Access::remote_write), true);
  const Sge s = sge(0, 64);
  CHECK_ERR("post",
            p.a->post_send(rdma_wr(7, WrOpcode::rdma_write, &s, m->address(0), m->rkey())).error(),
            0);
  CHECK_OBS("wcs", describe(poll_n(*p.cq_a, 1)), "SUCCESS/RDMA_WRITE/64");
}

TEST_P(Memory, WriteToDeregisteredRegion) {
  Pair p = make_pair();
  auto m = pd().reg_mr(mem(8192), 4096, Access::local_write | Access::remote_write);
  const std::uint32_t rkey = m->rkey();
  const std::uint64_t addr = m->address(0);
  destroy(m);
  const Sge s = sge(0, 64);
  CHECK_ERR("post", p.a->post_send(rdma_wr(7, WrOpcode::rdma_write, &s, addr, rkey)).error(), 0);
  CHECK_OBS("wcs", describe(poll_n(*p.cq_a, 1)), err_wc(WcStatus::rem_access_err, WcOpcode::rdma_write, 64));
  CHECK_OBS("requester", wait_state(*p.a, QpState::err), QpState::err);
  CHECK_OBS("responder", wait_state(*p.b, QpState::err), QpState::err);
}

TEST_P(Memory, ReadIntoRegionWithoutLocalWrite) {
  Pair p = make_pair();
  auto local = pd().reg_mr(mem(8192), 4096, Access::remote_read);
  const Sge s = local->sge(0, 64);
  CHECK_ERR("post", p.a->post_send(rdma_wr(7, WrOpcode::rdma_read, &s, mr().address(0), mr().rkey())).error(), 0);
  CHECK_OBS("wcs", describe(poll_n(*p.cq_a, 1)), err_wc(WcStatus::loc_prot_err, WcOpcode::rdma_read, 64));
  CHECK_OBS("requester", wait_state(*p.a, QpState::err), QpState::err);
}

TEST_P(Memory, ReceiveIntoRegionWithoutLocalWrite) {
  Pair p = make_pair();
  auto ro = pd().reg_mr(mem(8192), 4096, Access::remote_read);
  const Sge r = ro->sge(0, 64);
  const Sge s = sge(0, 64);
  ASSERT_FALSE(p.b->post_recv(recv_wr(1, &r)).error());
  CHECK_ERR("post", p.a->post_send(send_wr(7, &s)).error(), 0);
  CHECK_OBS("sender_wcs", describe(poll_n(*p.cq_a, 1)), err_wc(WcStatus::rem_op_err, WcOpcode::send, 64));
  const auto rw = poll_n(*p.cq_b, 1);
  CHECK_OBS("receiver_status", rw.empty() ? "none" : obs_str(rw[0].status), expect().recv_no_local_write);
  CHECK_OBS("sender", wait_state(*p.a, QpState::err), QpState::err);
  CHECK_OBS("receiver", wait_state(*p.b, QpState::err), QpState::err);
}

// ---------------------------------------------------------------------------------------------
// Completion queues

TEST_P(CqCreate, DepthRounding) {
  for (const int n : {1, 4, 7, 8, 100}) {
    auto cq = make_cq(n);
    CHECK_OBS("cqe" + std::to_string(n), cq->cqe(), Expect::cq_depth(static_cast<std::uint32_t>(n)));
    EXPECT_EQ(cq->requested_cqe(), n);
  }
}

TEST_P(CqCreate, DepthLimits) {
  CHECK_ERR("cqe0", verb_errno([&] { (void)make_cq(0); }), EINVAL);
  CHECK_ERR("cqe_negative", verb_errno([&] { (void)make_cq(-1); }), EINVAL);
  CHECK_ERR("above_max", verb_errno([&] { (void)make_cq(expect().max_cqe + 1); }), EINVAL);
}

// ibv_resize_cq: the completions a CQ holds stay, in order; the depth is rounded as at
// creation; a size below 1, above max_cqe or below the completions held is EINVAL.
TEST_P(CqCreate, ResizeKeepsTheCompletionsItHolds) {
  auto scq = make_cq(4);
  auto rcq = make_cq(64);
  auto a = make_qp(*scq, *rcq, QpCap{16, 16, 1, 1, 0});
  auto b = make_qp(*rcq, *rcq, QpCap{16, 16, 1, 1, 0});
  connect_pair(*a, *b);
  const Sge s = sge(0, 8);
  const Sge r = sge(4096, 8);
  for (std::uint64_t i = 0; i < 16; ++i) ASSERT_FALSE(b->post_recv(recv_wr(100 + i, &r)).error());
  for (std::uint64_t i = 0; i < 3; ++i) ASSERT_FALSE(a->post_send(send_wr(i, &s)).error());
  (void)poll_n(*rcq, 3);  // the sends have arrived; their completions wait in scq
  pass_time(std::chrono::milliseconds(50));
  CHECK_ERR("below_held", verb_errno([&] { scq->resize(2); }), EINVAL);
  CHECK_ERR("zero", verb_errno([&] { scq->resize(0); }), EINVAL);
  CHECK_ERR("above_max", verb_errno([&] { scq->resize(expect().max_cqe + 1); }), EINVAL);
  CHECK_ERR("to_held", verb_errno([&] { scq->resize(3); }), 0);
  CHECK_OBS("cqe_3", scq->cqe(), Expect::cq_depth(3));
  CHECK_ERR("grow", verb_errno([&] { scq->resize(100); }), 0);
  CHECK_OBS("cqe_100", scq->cqe(), Expect::cq_depth(100));
  EXPECT_EQ(scq->requested_cqe(), 100);
  for (std::uint64_t i = 3; i < 16; ++i) ASSERT_FALSE(a->post_send(send_wr(i, &s)).error());
  (void)poll_n(*rcq, 13);
  pass_time(std::chrono::milliseconds(50));
  const auto held = poll_n(*scq, 16);
  std::string ids;
  for (const WorkCompletion& wc : held) ids += std::to_string(wc.wr_id) + ",";
  CHECK_OBS("held_in_order", ids, "0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,");
  CHECK_OBS("held", summary(held), "16*SUCCESS");
}

// A CQ without a completion channel is armed all the same (rxe and mlx5 return 0); its
// completions come as before, and it can be armed again.
TEST_P(CqCreate, ReqNotifyWithoutChannel) {
  Pair p = make_pair();
  CHECK_ERR("req_notify", p.cq_a->req_notify(false), 0);
  CHECK_ERR("req_notify_solicited", p.cq_a->req_notify(true), 0);
  const Sge s = sge(0, 8);
  const Sge r = sge(4096, 8);
  ASSERT_FALSE(p.b->post_recv(recv_wr(2, &r)).error());
  CHECK_ERR("post", p.a->post_send(send_wr(1, &s)).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 1)), "SUCCESS/SEND/8");
  CHECK_ERR("rearm", p.cq_a->req_notify(false), 0);
}

// ---------------------------------------------------------------------------------------------
// Queue pair creation

TEST_P(QpCreate, CapsGivenAndQueried) {
  auto cq = make_cq(16);
  auto qp = make_qp(*cq, *cq, QpCap{4, 4, 1, 1, 0});
  const Expect& e = expect();
  const std::uint32_t depth = e.wq_depth(4);
  const std::uint32_t echoed = e.create_echoes_requested_wr ? 4 : depth;
  CHECK_OBS("create.max_send_wr", qp->cap().max_send_wr, echoed);
  CHECK_OBS("create.max_recv_wr", qp->cap().max_recv_wr, echoed);
  CHECK_OBS("create.max_send_sge", qp->cap().max_send_sge, 1);
  CHECK_OBS("create.max_inline_data", qp->cap().max_inline_data, e.default_inline);
  const QpCap q = qp->query().cap;
  CHECK_OBS("query.max_send_wr", q.max_send_wr, depth);
  CHECK_OBS("query.max_recv_wr", q.max_recv_wr, depth);
  CHECK_OBS("query.max_send_sge", q.max_send_sge, 1);
  CHECK_OBS("query.max_recv_sge", q.max_recv_sge, 1);
  CHECK_OBS("query.max_inline_data", q.max_inline_data, e.default_inline);
}

TEST_P(QpCreate, CapsWithInlineData) {
  auto cq = make_cq(16);
  auto qp = make_qp(*cq, *cq, QpCap{8, 8, 1, 1, 64});
  const QpCap q = qp->query().cap;
  CHECK_OBS("query.max_send_wr", q.max_send_wr, expect().wq_depth(8));
  CHECK_OBS("query.max_send_sge", q.max_send_sge, expect().sge_for_inline_64);
  CHECK_OBS("query.max_inline_data", q.max_inline_data, 64);
}

TEST_P(QpCreate, SendWrAboveDeviceLimit) {
  auto cq = make_cq(16);
  const auto n = static_cast<std::uint32_t>(expect().max_qp_wr) + 1;
  CHECK_ERR("create", verb_errno([&] { (void)make_qp(*cq, *cq, QpCap{n, 4, 1, 1, 0}); }), EINVAL);
}

TEST_P(QpCreate, RecvWrAboveDeviceLimit) {
  auto cq = make_cq(16);
  const auto n = static_cast<std::uint32_t>(expect().max_qp_wr) + 1;
  CHECK_ERR("create", verb_errno([&] { (void)make_qp(*cq, *cq, QpCap{4, n, 1, 1, 0}); }), EINVAL);
}

TEST_P(QpCreate, SendSgeAboveDeviceLimit) {
  auto cq = make_cq(16);
  const auto n = static_cast<std::uint32_t>(expect().max_sge) + 1;
  CHECK_ERR("create", verb_errno([&] { (void)make_qp(*cq, *cq, QpCap{4, 4, n, 1, 0}); }), EINVAL);
}

TEST_P(QpCreate, RecvSgeAboveDeviceLimit) {
  auto cq = make_cq(16);
  const auto n = static_cast<std::uint32_t>(expect().max_sge) + 1;
  CHECK_ERR("create", verb_errno([&] { (void)make_qp(*cq, *cq, QpCap{4, 4, 1, n, 0}); }), EINVAL);
}

TEST_P(QpCreate, InlineAboveDeviceLimit) {
  auto cq = make_cq(16);
  CHECK_ERR("create", verb_errno([&] { (void)make_qp(*cq, *cq, QpCap{4, 4, 1, 1, 4096}); }), EINVAL);
}

TEST_P(QpCreate, StartsInReset) {
  auto cq = make_cq(16);
  auto rc = make_qp(*cq, *cq);
  auto ud = make_qp(*cq, *cq, QpCap{4, 4, 1, 1, 0}, QpType::ud);
  CHECK_OBS("rc.state", rc->state(), QpState::reset);
  CHECK_OBS("rc.query", rc->query(QpAttrMask::state).qp_state, QpState::reset);
  CHECK_OBS("ud.state", ud->state(), QpState::reset);
  CHECK_OBS("distinct_qpns", rc->qp_num() != ud->qp_num() && rc->qp_num() > 1 && ud->qp_num() > 1, true);
}

TEST_P(QpCreate, QpOnSharedReceiveQueue) {
  auto cq = make_cq(16);
  auto srq = pd().create_srq(SrqInitAttr{8, 1, 0});
  auto qp = make_qp(*cq, *cq, QpCap{4, 4, 1, 1, 0}, QpType::rc, srq.get());
  CHECK_OBS("query.max_recv_wr", qp->query().cap.max_recv_wr, 0);
  modify_to_init(*qp, options());
  const Sge r = sge(0, 64);
  const PostResult res = qp->post_recv(recv_wr(1, &r));
  CHECK_ERR("post_recv_on_qp", res.error(), EINVAL);
}

VERBSIM_CONFORMANCE_SUITE(Device);
VERBSIM_CONFORMANCE_SUITE(Memory);
VERBSIM_CONFORMANCE_SUITE(CqCreate);
VERBSIM_CONFORMANCE_SUITE(QpCreate);

}  // namespace
}  // namespace verbsim::conformance
