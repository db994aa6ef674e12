// Zero-based addressing: MRs registered with an iova other than their address (ibv_reg_mr_iova2;
// iova 0 is the zero-based MR), IBV_ACCESS_ZERO_BASED in a registration, and zero-based memory
// windows (IBV_ACCESS_ZERO_BASED in a bind: a request's address is an offset into the window).
#include <cerrno>
#include <cstring>

#include "windows.hpp"

namespace verbsim::conformance {
namespace {

constexpr std::uint64_t kIova = 0x10000000;  // page aligned, as the region is
constexpr Access kAll = Access::local_write | Access::remote_write | Access::remote_read |
                        Access::remote_atomic | Access::mw_bind;

class ZeroBased : public WindowTest {
 protected:
  // The region registered with `iova`.
  std::unique_ptr<MemoryRegion> region_at(std::uint64_t iova, Access access = kAll) {
    return pd().reg_mr_iova(region_mem(), kRegionLen, iova, access);
  }
  // One RDMA operation on a fresh pair (an error takes both QPs to ERR): its completion.
  std::string once(WrOpcode op, std::uint64_t addr, std::uint32_t rkey) {
    Pair p = make_pair();
    if (op == WrOpcode::atomic_fetch_and_add) return atomic(p, addr, rkey);
    return rdma(*p.a, *p.cq_a, op, addr, rkey);
  }
  // A fetch-and-add of 1 at `addr` from the requester's first 8 bytes.
  std::string atomic(Pair& p, std::uint64_t addr, std::uint32_t rkey) {
    const Sge s = sge(kSrc, 8);
    SendWr wr = rdma_wr(1, WrOpcode::atomic_fetch_and_add, &s, addr, rkey);
    wr.compare_add = 1;
    const PostResult r = p.a->post_send(wr);
    if (r.error()) return "post:" + errno_name(r.error());
    return describe(poll_n(*p.cq_a, 1));
  }
  // Writes a pattern of 64 bytes at `offset` into the region and clears the requester's
  // buffer, for a READ to fetch.
  void fill_region(std::size_t offset) {
    for (std::size_t i = 0; i < 64; ++i) region_mem(offset)[i] = static_cast<char>(0x30 + i);
    std::memset(mem(kSrc), 0, 64);
  }
  bool fetched(std::size_t offset) { return std::memcmp(mem(kSrc), region_mem(offset), 64) == 0; }
  std::uint64_t word_at(std::size_t offset) {
    std::uint64_t v;
    std::memcpy(&v, region_mem(offset), 8);
    return v;
  }
  void set_word(std::size_t offset, std::uint64_t v) { std::memcpy(region_mem(offset), &v, 8); }
  // A type 2 window on `r` bound on p.b: `length` bytes at `addr`, zero-based.
  std::string bind_zero_based(Pair& p, MemoryWindow& mw, const MemoryRegion& r,
                              std::uint64_t addr, std::uint64_t length = kWinLen) {
    return bind2(*p.b, *p.cq_b, mw, {&r, addr, length, kRemote | Access::zero_based});
  }
};

// ---------------------------------------------------------------------------------------------
// Registration

// IBV_ACCESS_ZERO_BASED in ibv_reg_mr (whose iova is the buffer's address).
TEST_P(ZeroBased, FlagInRegistration) {
  std::unique_ptr<MemoryRegion> r;
  CHECK_ERR("reg", verb_errno([&] { r = region(kAll | Access::zero_based); }), 0);
  if (r == nullptr) return;
  fill_source();
  CHECK_OBS("write_at_offset", once(WrOpcode::rdma_write, 128, r->rkey()), write_fails());
  CHECK_OBS("write_at_address", once(WrOpcode::rdma_write, r->address(256), r->rkey()),
            "SUCCESS/RDMA_WRITE/64");
  CHECK_OBS("landed", landed(256), true);
}

// The kernel maps an iova page by page: its offset in a page must be the buffer's.
TEST_P(ZeroBased, IovaKeepsThePageOffset) {
  CHECK_ERR("other_offset", verb_errno([&] { region_at(kIova + 8); }), EINVAL);
  CHECK_ERR("same_offset",
            verb_errno([&] { pd().reg_mr_iova(region_mem(8), kRegionLen - 8, kIova + 8, kAll); }),
            0);
}

// ---------------------------------------------------------------------------------------------
// Remote access through the rkey of an MR with an iova

TEST_P(ZeroBased, IovaAddressesRemoteAccess) {
  auto r = region_at(kIova);
  CHECK_OBS("iova", r->iova() == kIova, true);
  fill_source();
  CHECK_OBS("write", once(WrOpcode::rdma_write, kIova + 128, r->rkey()), "SUCCESS/RDMA_WRITE/64");
  CHECK_OBS("landed", landed(128), true);
  fill_region(1024);
  CHECK_OBS("read", once(WrOpcode::rdma_read, kIova + 1024, r->rkey()), "SUCCESS/RDMA_READ/64");
  CHECK_OBS("fetched", fetched(1024), true);
  set_word(2048, 41);
  CHECK_OBS("atomic", once(WrOpcode::atomic_fetch_and_add, kIova + 2048, r->rkey()),
            "SUCCESS/FETCH_ADD/8");
  CHECK_OBS("added", word_at(2048), 42);
}

// The buffer's own address is outside an MR registered at another iova.
TEST_P(ZeroBased, IovaMrRefusesItsAddress) {
  auto r = region_at(kIova);
  CHECK_OBS("write", once(WrOpcode::rdma_write, reinterpret_cast<std::uintptr_t>(region_mem(128)),
                          r->rkey()),
            write_fails());
}

TEST_P(ZeroBased, IovaPastTheEnd) {
  auto r = region_at(kIova);
  Pair p = make_pair();
  CHECK_OBS("write", rdma(*p.a, *p.cq_a, WrOpcode::rdma_write, kIova + kRegionLen - 32, r->rkey()),
            write_fails());
  CHECK_OBS("responder", wait_state(*p.b, QpState::err), QpState::err);
  CHECK_OBS("below", once(WrOpcode::rdma_write, kIova - 32, r->rkey()), write_fails());
}

// iova 0: the MR is addressed by offsets from 0.
TEST_P(ZeroBased, IovaZero) {
  auto r = region_at(0);
  CHECK_OBS("iova", r->iova(), 0);
  fill_source();
  CHECK_OBS("write", once(WrOpcode::rdma_write, 128, r->rkey()), "SUCCESS/RDMA_WRITE/64");
  CHECK_OBS("landed", landed(128), true);
  fill_region(0);
  CHECK_OBS("read_at_0", once(WrOpcode::rdma_read, 0, r->rkey()), "SUCCESS/RDMA_READ/64");
  CHECK_OBS("fetched", fetched(0), true);
  CHECK_OBS("past_end", once(WrOpcode::rdma_write, kRegionLen - 32, r->rkey()), write_fails());
}

// A local SGE of an MR with an iova: is its address the iova or the buffer's address?
TEST_P(ZeroBased, IovaAddressesLocalSges) {
  auto r = region_at(kIova);
  fill_region(512);
  {
    Pair p = make_pair();
    const Sge into = sge(1024, 64);
    CHECK_ERR("recv_post", p.b->post_recv(recv_wr(2, &into)).error(), 0);
    const Sge s{kIova + 512, 64, r->lkey()};
    CHECK_ERR("send_post", p.a->post_send(send_wr(1, &s)).error(), 0);
    CHECK_OBS("by_iova", describe(poll_n(*p.cq_a, 1)), "SUCCESS/SEND/64");
    CHECK_OBS("received", describe(poll_n(*p.cq_b, 1)), "SUCCESS/RECV/64");
    CHECK_OBS("sent_right_bytes", std::memcmp(mem(1024), region_mem(512), 64) == 0, true);
  }
  Pair p = make_pair();
  const Sge s{reinterpret_cast<std::uintptr_t>(region_mem(512)), 64, r->lkey()};
  CHECK_ERR("send_post", p.a->post_send(send_wr(1, &s)).error(), 0);
  CHECK_OBS("by_address", describe(poll_n(*p.cq_a, 1)),
            err_wc(WcStatus::loc_prot_err, WcOpcode::send, 64));
}

// A receive SGE of an MR with an iova is addressed by the iova too.
TEST_P(ZeroBased, IovaAddressesReceiveSges) {
  auto r = region_at(kIova);
  Pair p = make_pair();
  fill_source();
  const Sge into{kIova + 256, 64, r->lkey()};
  CHECK_ERR("recv_post", p.b->post_recv(recv_wr(2, &into)).error(), 0);
  const Sge s = sge(kSrc, 64);
  CHECK_ERR("send_post", p.a->post_send(send_wr(1, &s)).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 1)), "SUCCESS/SEND/64");
  CHECK_OBS("receiver", describe(poll_n(*p.cq_b, 1)), "SUCCESS/RECV/64");
  CHECK_OBS("landed", landed(256), true);
}

// A READ's and an atomic's response land in SGEs at the iova.
TEST_P(ZeroBased, IovaAddressesResponseSges) {
  auto r = region_at(kIova);
  Pair p = make_pair();
  for (std::size_t i = 0; i < 64; ++i) mem(1024)[i] = static_cast<char>(0x70 + i);
  const Sge into{kIova + 256, 64, r->lkey()};
  CHECK_ERR("read_post",
            p.a->post_send(rdma_wr(1, WrOpcode::rdma_read, &into, mr().address(1024), mr().rkey()))
                .error(),
            0);
  CHECK_OBS("read", describe(poll_n(*p.cq_a, 1)), "SUCCESS/RDMA_READ/64");
  CHECK_OBS("fetched", std::memcmp(region_mem(256), mem(1024), 64) == 0, true);
  const std::uint64_t word = 99;
  std::memcpy(mem(2048), &word, 8);
  const Sge old{kIova + 512, 8, r->lkey()};
  SendWr add = rdma_wr(2, WrOpcode::atomic_fetch_and_add, &old, mr().address(2048), mr().rkey());
  add.compare_add = 1;
  CHECK_ERR("atomic_post", p.a->post_send(add).error(), 0);
  CHECK_OBS("atomic", describe(poll_n(*p.cq_a, 1)), "SUCCESS/FETCH_ADD/8");
  CHECK_OBS("original", word_at(512), 99);
}

// A receive posted to an SRQ, into an MR with an iova, at the iova.
TEST_P(ZeroBased, IovaAddressesSrqReceives) {
  auto r = region_at(kIova);
  auto srq = pd().create_srq(SrqInitAttr{8, 1, 0});
  auto cq_a = make_cq(16);
  auto cq_b = make_cq(16);
  auto a = make_qp(*cq_a, *cq_a);
  auto b = make_qp(*cq_b, *cq_b, QpCap{16, 0, 1, 1, 0}, QpType::rc, srq.get());
  connect_pair(*a, *b);
  fill_source();
  const Sge into{kIova + 768, 64, r->lkey()};
  CHECK_ERR("recv_post", srq->post_recv(recv_wr(2, &into)).error(), 0);
  const Sge s = sge(kSrc, 64);
  CHECK_ERR("send_post", a->post_send(send_wr(1, &s)).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*cq_a, 1)), "SUCCESS/SEND/64");
  CHECK_OBS("receiver", describe(poll_n(*cq_b, 1)), "SUCCESS/RECV/64");
  CHECK_OBS("landed", landed(768), true);
}

// ---------------------------------------------------------------------------------------------
// Zero-based type 2 windows

TEST_P(ZeroBased, Type2WindowAddressesFromZero) {
  REQUIRE_MW(MwType::type2);
  Pair p = make_pair();
  auto r = region();
  auto mw = pd().alloc_mw(MwType::type2);
  CHECK_OBS("bind", bind_zero_based(p, *mw, *r, r->address(kWinOff)), "SUCCESS/BIND_MW/0");
  fill_source();
  CHECK_OBS("write", rdma(*p.a, *p.cq_a, WrOpcode::rdma_write, 128, mw->rkey()),
            "SUCCESS/RDMA_WRITE/64");
  CHECK_OBS("landed", landed(kWinOff + 128), true);
  fill_region(kWinOff);
  CHECK_OBS("read_at_0", rdma(*p.a, *p.cq_a, WrOpcode::rdma_read, 0, mw->rkey()),
            "SUCCESS/RDMA_READ/64");
  CHECK_OBS("fetched", fetched(kWinOff), true);
}

// 64 bytes from 32 before the window's end: inside the MR, past the window.
TEST_P(ZeroBased, Type2WindowPastItsEnd) {
  REQUIRE_MW(MwType::type2);
  Pair p = make_pair();
  auto r = region();
  auto mw = pd().alloc_mw(MwType::type2);
  CHECK_OBS("bind", bind_zero_based(p, *mw, *r, r->address(kWinOff)), "SUCCESS/BIND_MW/0");
  fill_source();
  const bool mr_range = expect().mw_range_is_mr;
  CHECK_OBS("write", rdma(*p.a, *p.cq_a, WrOpcode::rdma_write, kWinLen - 32, mw->rkey()),
            mr_range ? "SUCCESS/RDMA_WRITE/64" : write_fails());
  CHECK_OBS("landed", landed(kWinOff + kWinLen - 32), mr_range);
}

// A window that ends where its MR ends: 64 bytes from 32 before its end.
TEST_P(ZeroBased, Type2WindowPastTheRegionEnd) {
  REQUIRE_MW(MwType::type2);
  Pair p = make_pair();
  auto r = region();
  auto mw = pd().alloc_mw(MwType::type2);
  CHECK_OBS("bind", bind_zero_based(p, *mw, *r, r->address(kRegionLen - kWinLen)),
            "SUCCESS/BIND_MW/0");
  CHECK_OBS("write", rdma(*p.a, *p.cq_a, WrOpcode::rdma_write, kWinLen - 32, mw->rkey()),
            write_fails());
  CHECK_OBS("responder", wait_state(*p.b, QpState::err), QpState::err);
}

// The address the window starts at is no address in it (it would be an offset far past it).
TEST_P(ZeroBased, Type2WindowRefusesItsAddress) {
  REQUIRE_MW(MwType::type2);
  Pair p = make_pair();
  auto r = region();
  auto mw = pd().alloc_mw(MwType::type2);
  CHECK_OBS("bind", bind_zero_based(p, *mw, *r, r->address(kWinOff)), "SUCCESS/BIND_MW/0");
  CHECK_OBS("write",
            rdma(*p.a, *p.cq_a, WrOpcode::rdma_write, r->address(kWinOff + 128), mw->rkey()),
            write_fails());
}

TEST_P(ZeroBased, Type2WindowAtomic) {
  REQUIRE_MW(MwType::type2);
  Pair p = make_pair();
  auto r = region();
  auto mw = pd().alloc_mw(MwType::type2);
  CHECK_OBS("bind",
            bind2(*p.b, *p.cq_b, *mw,
                  {r.get(), r->address(kWinOff), kWinLen,
                   Access::remote_atomic | Access::zero_based}),
            "SUCCESS/BIND_MW/0");
  set_word(kWinOff + 64, 7);
  CHECK_OBS("atomic", atomic(p, 64, mw->rkey()), "SUCCESS/FETCH_ADD/8");
  CHECK_OBS("added", word_at(kWinOff + 64), 8);
}

// A zero-based window longer than its MR.
TEST_P(ZeroBased, Type2BindLongerThanTheRegion) {
  REQUIRE_MW(MwType::type2);
  Pair p = make_pair();
  auto r = region();
  auto mw = pd().alloc_mw(MwType::type2);
  CHECK_OBS("bind", bind_zero_based(p, *mw, *r, r->address(0), kRegionLen + 4096),
            err_wc(WcStatus::mw_bind_err, WcOpcode::bind_mw, 0));
  CHECK_OBS("binder", wait_state(*p.b, QpState::err), QpState::err);
}

// A zero-based window starting past its MR's end, no longer than the MR: rxe checks only its
// length (and then every request through it against the MR).
TEST_P(ZeroBased, Type2BindStartingPastTheRegion) {
  REQUIRE_MW(MwType::type2);
  Pair p = make_pair();
  auto r = region();
  auto mw = pd().alloc_mw(MwType::type2);
  const bool mr_range = expect().mw_range_is_mr;
  CHECK_OBS("bind", bind_zero_based(p, *mw, *r, r->address(kRegionLen), kWinLen),
            mr_range ? "SUCCESS/BIND_MW/0" : err_wc(WcStatus::mw_bind_err, WcOpcode::bind_mw, 0));
  if (!mr_range) return;
  CHECK_OBS("write", rdma(*p.a, *p.cq_a, WrOpcode::rdma_write, 0, mw->rkey()), write_fails());
}

// Windows on an MR with an iova: a window's address is in the MR's iova space.
TEST_P(ZeroBased, Type2WindowsOnAnIovaMr) {
  REQUIRE_MW(MwType::type2);
  Pair p = make_pair();
  auto r = region_at(kIova);
  auto mw = pd().alloc_mw(MwType::type2);
  auto zb = pd().alloc_mw(MwType::type2);
  CHECK_OBS("bind", bind2(*p.b, *p.cq_b, *mw, window(*r)), "SUCCESS/BIND_MW/0");
  CHECK_OBS("bind_zero_based", bind_zero_based(p, *zb, *r, kIova + kWinOff), "SUCCESS/BIND_MW/0");
  fill_source();
  CHECK_OBS("write", rdma(*p.a, *p.cq_a, WrOpcode::rdma_write, kIova + kWinOff, mw->rkey()),
            "SUCCESS/RDMA_WRITE/64");
  CHECK_OBS("landed", landed(kWinOff), true);
  CHECK_OBS("write_zero_based", rdma(*p.a, *p.cq_a, WrOpcode::rdma_write, 512, zb->rkey()),
            "SUCCESS/RDMA_WRITE/64");
  CHECK_OBS("landed_zero_based", landed(kWinOff + 512), true);
}

// A zero-based window on a zero-based MR (iova 0): the window's start is an offset into the
// MR, a request's address an offset into the window.
TEST_P(ZeroBased, Type2WindowOnAnMrAtIovaZero) {
  REQUIRE_MW(MwType::type2);
  Pair p = make_pair();
  auto r = region_at(0);
  auto mw = pd().alloc_mw(MwType::type2);
  CHECK_OBS("bind", bind_zero_based(p, *mw, *r, kWinOff), "SUCCESS/BIND_MW/0");
  fill_source();
  CHECK_OBS("write", rdma(*p.a, *p.cq_a, WrOpcode::rdma_write, 64, mw->rkey()),
            "SUCCESS/RDMA_WRITE/64");
  CHECK_OBS("landed", landed(kWinOff + 64), true);
}

// No window binds to an MR registered with IBV_ACCESS_ZERO_BASED, zero-based or not.
TEST_P(ZeroBased, WindowOnAZeroBasedRegion) {
  REQUIRE_MW(MwType::type2);
  auto r = region(kAll | Access::zero_based);
  for (const Access zero : {Access::none, Access::zero_based}) {
    Pair p = make_pair();
    auto mw = pd().alloc_mw(MwType::type2);
    CHECK_OBS(zero == Access::none ? "bind" : "bind_zero_based",
              bind2(*p.b, *p.cq_b, *mw, window(*r, kRemote | zero)),
              err_wc(WcStatus::mw_bind_err, WcOpcode::bind_mw, 0));
  }
}

// ---------------------------------------------------------------------------------------------
// Zero-based type 1 windows (o10-36.2.2: a type 1 window cannot be zero-based)

// The providers refuse it (rxe's and mlx5's bind_mw) before anything is posted.
TEST_P(ZeroBased, Type1Window) {
  REQUIRE_MW(MwType::type1);
  Pair p = make_pair();
  auto r = region();
  auto mw = pd().alloc_mw(MwType::type1);
  const std::uint32_t key = mw->rkey();
  const PostResult res = p.b->bind_mw(
      *mw, MwBind{7, SendFlags::signaled, window(*r, kRemote | Access::zero_based)});
  CHECK_ERR("bind_post", res.error(), EINVAL);
  CHECK_OBS("key_unchanged", mw->rkey() == key, true);
  CHECK_OBS("completions", describe(poll_quiet(*p.cq_b)), "none");
  CHECK_OBS("binder", wait_state(*p.b, QpState::rts), QpState::rts);
}

}  // namespace

VERBSIM_CONFORMANCE_SUITE(ZeroBased);

}  // namespace verbsim::conformance
