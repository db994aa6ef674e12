// The data path: SEND/WRITE/READ/atomics, immediates, inline, scatter/gather, UD, and the order
// completions come in.
#include <cerrno>
#include <algorithm>
#include <array>
#include <cstring>
#include <numeric>

#include "conformance.hpp"

namespace verbsim::conformance {
namespace {

class Datapath : public Conformance {
 protected:
  // Fills `len` bytes at `offset` of the fixture buffer with a pattern starting at `seed`.
  void fill(std::size_t offset, std::size_t len, int seed) {
    for (std::size_t i = 0; i < len; ++i) mem(offset)[i] = static_cast<char>(seed + static_cast<int>(i));
  }
  bool same(std::size_t a, std::size_t b, std::size_t len) {
    return std::memcmp(mem(a), mem(b), len) == 0;
  }
  std::uint64_t& word(std::size_t offset) { return *reinterpret_cast<std::uint64_t*>(mem(offset)); }
};
class Ordering : public Datapath {};
class Ud : public Datapath {
 protected:
  struct UdPair {
    Pair p;
    std::unique_ptr<AddressHandle> ah;
  };
  UdPair make_ud(QpCap cap = {16, 16, 2, 2, 0}) {
    UdPair u{make_pair(PairOptions::with(cap, QpType::ud)), nullptr};
    u.ah = pd().create_ah(ah_attr());
    return u;
  }
  SendWr ud_send(const UdPair& u, std::uint64_t id, const Sge* s, std::uint32_t qkey = 0x11111111) {
    SendWr wr = send_wr(id, s);
    wr.ah = u.ah.get();
    wr.remote_qpn = u.p.b->qp_num();
    wr.remote_qkey = qkey;
    return wr;
  }
};

constexpr std::size_t kSrc = 0;       // sender's data
constexpr std::size_t kDst = 16384;   // receiver's buffer / RDMA target
constexpr std::size_t kAux = 32768;   // READ destination, atomic results

// ---------------------------------------------------------------------------------------------
// Operations

TEST_P(Datapath, SendRecv) {
  Pair p = make_pair();
  fill(kSrc, 64, 1);
  const Sge s = sge(kSrc, 64);
  const Sge r = sge(kDst, 128);
  ASSERT_FALSE(p.b->post_recv(recv_wr(2, &r)).error());
  CHECK_ERR("post", p.a->post_send(send_wr(1, &s)).error(), 0);
  const auto sw = poll_n(*p.cq_a, 1);
  const auto rw = poll_n(*p.cq_b, 1);
  CHECK_OBS("sender", describe(sw), "SUCCESS/SEND/64");
  CHECK_OBS("receiver", describe(rw), "SUCCESS/RECV/64");
  ASSERT_EQ(rw.size(), 1u);
  ASSERT_EQ(sw.size(), 1u);
  CHECK_OBS("send.qp_num_ok", sw[0].qp_num == p.a->qp_num() && sw[0].wr_id == 1, true);
  CHECK_OBS("recv.qp_num_ok", rw[0].qp_num == p.b->qp_num() && rw[0].wr_id == 2, true);
  CHECK_OBS("recv.src_qp", rw[0].src_qp, 0);
  CHECK_OBS("recv.wc_flags", static_cast<unsigned>(to_underlying(rw[0].wc_flags)),
            expect().rc_recv_grh ? 1u : 0u);
  CHECK_OBS("data", same(kSrc, kDst, 64), true);
}

TEST_P(Datapath, SendWithImmediate) {
  Pair p = make_pair();
  const Sge s = sge(kSrc, 32);
  const Sge r = sge(kDst, 64);
  ASSERT_FALSE(p.b->post_recv(recv_wr(2, &r)).error());
  SendWr wr = send_wr(1, &s, WrOpcode::send_with_imm);
  wr.imm_data = 0x12345678;
  CHECK_ERR("post", p.a->post_send(wr).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 1)), "SUCCESS/SEND/32");
  const auto rw = poll_n(*p.cq_b, 1);
  CHECK_OBS("receiver", describe(rw), "SUCCESS/RECV/32");
  ASSERT_EQ(rw.size(), 1u);
  CHECK_OBS("wc_flags", static_cast<unsigned>(to_underlying(rw[0].wc_flags)),
            expect().rc_recv_grh ? 3u : 2u);  // GRH | WITH_IMM
  CHECK_OBS("imm", rw[0].imm_data, 0x12345678u);
}

TEST_P(Datapath, RdmaWrite) {
  Pair p = make_pair();
  fill(kSrc, 200, 7);
  const Sge s = sge(kSrc, 200);
  const Sge r = sge(kDst + 4096, 64);
  ASSERT_FALSE(p.b->post_recv(recv_wr(2, &r)).error());  // a WRITE must not consume it
  CHECK_ERR("post", p.a->post_send(rdma_wr(1, WrOpcode::rdma_write, &s, mr().address(kDst), mr().rkey())).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 1)), "SUCCESS/RDMA_WRITE/200");
  CHECK_OBS("receiver", describe(poll_quiet(*p.cq_b)), "none");
  CHECK_OBS("data", same(kSrc, kDst, 200), true);
}

TEST_P(Datapath, RdmaWriteWithImmediate) {
  Pair p = make_pair();
  fill(kSrc, 128, 3);
  const Sge s = sge(kSrc, 128);
  const Sge r = sge(kDst + 4096, 16);  // an immediate consumes a receive; no data lands in it
  ASSERT_FALSE(p.b->post_recv(recv_wr(2, &r)).error());
  SendWr wr = rdma_wr(1, WrOpcode::rdma_write_with_imm, &s, mr().address(kDst), mr().rkey());
  wr.imm_data = 0xcafe;
  CHECK_ERR("post", p.a->post_send(wr).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 1)), "SUCCESS/RDMA_WRITE/128");
  const auto rw = poll_n(*p.cq_b, 1);
  CHECK_OBS("receiver", describe(rw), "SUCCESS/RECV_RDMA_WITH_IMM/128");
  ASSERT_EQ(rw.size(), 1u);
  CHECK_OBS("imm", rw[0].imm_data, 0xcafeu);
  CHECK_OBS("wc_flags", static_cast<unsigned>(to_underlying(rw[0].wc_flags)),
            expect().rc_recv_grh ? 3u : 2u);
  CHECK_OBS("data", same(kSrc, kDst, 128), true);
}

TEST_P(Datapath, RdmaRead) {
  Pair p = make_pair();
  fill(kDst, 300, 11);
  const Sge s = sge(kAux, 300);
  CHECK_ERR("post", p.a->post_send(rdma_wr(1, WrOpcode::rdma_read, &s, mr().address(kDst), mr().rkey())).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 1)), "SUCCESS/RDMA_READ/300");
  CHECK_OBS("data", same(kAux, kDst, 300), true);
}

TEST_P(Datapath, CompareAndSwapSwaps) {
  Pair p = make_pair();
  word(kDst) = 5;
  word(kAux) = 0;
  const Sge s = sge(kAux, 8);
  SendWr wr = rdma_wr(1, WrOpcode::atomic_cmp_and_swp, &s, mr().address(kDst), mr().rkey());
  wr.compare_add = 5;
  wr.swap = 9;
  CHECK_ERR("post", p.a->post_send(wr).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 1)), "SUCCESS/COMP_SWAP/8");
  CHECK_OBS("remote", word(kDst), 9);
  CHECK_OBS("returned", word(kAux), 5);
}

TEST_P(Datapath, CompareAndSwapMismatch) {
  Pair p = make_pair();
  word(kDst) = 5;
  const Sge s = sge(kAux, 8);
  SendWr wr = rdma_wr(1, WrOpcode::atomic_cmp_and_swp, &s, mr().address(kDst), mr().rkey());
  wr.compare_add = 6;
  wr.swap = 9;
  CHECK_ERR("post", p.a->post_send(wr).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 1)), "SUCCESS/COMP_SWAP/8");
  CHECK_OBS("remote", word(kDst), 5);
  CHECK_OBS("returned", word(kAux), 5);
}

TEST_P(Datapath, FetchAndAdd) {
  Pair p = make_pair();
  word(kDst) = 10;
  const Sge s = sge(kAux, 8);
  SendWr wr = rdma_wr(1, WrOpcode::atomic_fetch_and_add, &s, mr().address(kDst), mr().rkey());
  wr.compare_add = 7;
  CHECK_ERR("post", p.a->post_send(wr).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 1)), "SUCCESS/FETCH_ADD/8");
  CHECK_OBS("remote", word(kDst), 17);
  CHECK_OBS("returned", word(kAux), 10);
}

TEST_P(Datapath, AtomicMisalignedRefused) {
  Pair p = make_pair();
  const Sge s = sge(kAux, 8);
  SendWr wr = rdma_wr(1, WrOpcode::atomic_fetch_and_add, &s, mr().address(kDst + 4), mr().rkey());
  const PostResult r = p.a->post_send(wr);
  CHECK_ERR("post", r.error(), EINVAL);
  CHECK_OBS("posted", r.posted, 0);
}

// The local buffer of an atomic: 8 bytes, in one SGE or several. rxe takes a longer one too
// (librxe refuses only less than 8): the value lands in the first 8 bytes, the rest stays.
TEST_P(Datapath, AtomicLocalBufferLongerThan8) {
  Pair p = make_pair();
  word(kDst) = 10;
  word(kAux) = 0;
  word(kAux + 8) = 0x5555;
  const Sge s = sge(kAux, 16);
  SendWr wr = rdma_wr(1, WrOpcode::atomic_fetch_and_add, &s, mr().address(kDst), mr().rkey());
  wr.compare_add = 7;
  const PostResult r = p.a->post_send(wr);
  CHECK_ERR("post", r.error(), expect().atomic_takes_longer_buffer ? 0 : EINVAL);
  if (r.err != 0) return;
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 1)), "SUCCESS/FETCH_ADD/16");
  CHECK_OBS("remote", word(kDst), 17);
  CHECK_OBS("returned", word(kAux), 10);
  CHECK_OBS("rest", word(kAux + 8), 0x5555);
}

TEST_P(Datapath, AtomicLocalBufferShorterThan8Refused) {
  Pair p = make_pair();
  const Sge s = sge(kAux, 4);
  SendWr wr = rdma_wr(1, WrOpcode::atomic_fetch_and_add, &s, mr().address(kDst), mr().rkey());
  const PostResult r = p.a->post_send(wr);
  CHECK_ERR("post", r.error(), EINVAL);
  CHECK_OBS("posted", r.posted, 0);
}

TEST_P(Datapath, AtomicLocalBufferInTwoSges) {
  Pair p = make_pair();
  word(kDst) = 10;
  word(kAux) = 0;
  word(kAux + 64) = 0;
  const Sge s[2] = {sge(kAux, 4), sge(kAux + 64, 4)};
  SendWr wr = rdma_wr(1, WrOpcode::atomic_fetch_and_add, &s[0], mr().address(kDst), mr().rkey());
  wr.sg_list = s;
  wr.compare_add = 7;
  CHECK_ERR("post", p.a->post_send(wr).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 1)), "SUCCESS/FETCH_ADD/8");
  CHECK_OBS("remote", word(kDst), 17);
  CHECK_OBS("returned", (word(kAux) & 0xffffffffu) | (word(kAux + 64) << 32), 10);
}

// A zero-length RDMA WRITE or READ needs no valid rkey (IBTA C9-88).
TEST_P(Datapath, ZeroLengthRdmaNeedsNoRkey) {
  Pair p = make_pair();
  for (const WrOpcode op : {WrOpcode::rdma_write, WrOpcode::rdma_read}) {
    SendWr wr = rdma_wr(1, op, nullptr, mr().address(kDst), mr().rkey() ^ 0x100);
    wr.sg_list = {};
    CHECK_ERR("post", p.a->post_send(wr).error(), 0);
    CHECK_OBS("sender", describe(poll_n(*p.cq_a, 1)),
              op == WrOpcode::rdma_write ? "SUCCESS/RDMA_WRITE/0" : "SUCCESS/RDMA_READ/0");
  }
}

// The sender's completion of a SEND or RDMA WRITE with immediate carries IBV_WC_WITH_IMM, with
// no immediate value; those without carry no flag.
TEST_P(Datapath, SendCompletionOfAnImmediateSaysSo) {
  Pair p = make_pair();
  const Sge s = sge(kSrc, 16);
  const Sge r = sge(kDst, 64);
  ASSERT_FALSE(p.b->post_recv(recv_wr(2, &r)).error());
  ASSERT_FALSE(p.b->post_recv(recv_wr(3, &r)).error());
  SendWr a = send_wr(1, &s, WrOpcode::send_with_imm);
  a.imm_data = 0x55;
  SendWr b = rdma_wr(4, WrOpcode::rdma_write_with_imm, &s, mr().address(kDst + 1024), mr().rkey());
  b.imm_data = 0x66;
  const SendWr wrs[] = {a, b, send_wr(5, &s), rdma_wr(6, WrOpcode::rdma_write, &s, mr().address(kDst + 2048), mr().rkey())};
  ASSERT_FALSE(p.b->post_recv(recv_wr(7, &r)).error());
  CHECK_ERR("post", p.a->post_send(wrs).error(), 0);
  const auto wcs = poll_n(*p.cq_a, 4);
  std::string flags;
  for (const WorkCompletion& wc : wcs) {
    flags += std::to_string(static_cast<unsigned>(wc.wc_flags)) + "/" + std::to_string(wc.imm_data) + " ";
  }
  CHECK_OBS("flags", flags, "2/0 2/0 0/0 0/0 ");
}

TEST_P(Datapath, ZeroLengthSend) {
  Pair p = make_pair();
  const Sge r = sge(kDst, 64);
  ASSERT_FALSE(p.b->post_recv(recv_wr(2, &r)).error());
  CHECK_ERR("post", p.a->post_send(send_wr(1, nullptr)).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 1)), "SUCCESS/SEND/0");
  CHECK_OBS("receiver", describe(poll_n(*p.cq_b, 1)), "SUCCESS/RECV/0");
}

TEST_P(Datapath, GatherAndScatter) {
  Pair p = make_pair();
  fill(kSrc, 60, 20);
  const Sge s[] = {sge(kSrc, 10), sge(kSrc + 10, 20), sge(kSrc + 30, 30)};
  const Sge r[] = {sge(kDst, 40), sge(kDst + 1000, 40)};
  RecvWr rw;
  rw.wr_id = 2;
  rw.sg_list = r;
  ASSERT_FALSE(p.b->post_recv(rw).error());
  SendWr wr = send_wr(1, nullptr);
  wr.sg_list = s;
  CHECK_ERR("post", p.a->post_send(wr).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 1)), "SUCCESS/SEND/60");
  CHECK_OBS("receiver", describe(poll_n(*p.cq_b, 1)), "SUCCESS/RECV/60");
  CHECK_OBS("data", same(kSrc, kDst, 40) && same(kSrc + 40, kDst + 1000, 20), true);
}

// Local keys are looked up for the bytes a message reads or writes, as they are copied: an SGE
// of 0 bytes is never looked at, whatever its key (a message's or a READ's).
TEST_P(Datapath, ZeroLengthSgeNeedsNoKey) {
  Pair p = make_pair();
  fill(kSrc, 16, 3);
  Sge bad = sge(kSrc + 100, 0);
  bad.lkey ^= 0x100;
  const Sge s[] = {sge(kSrc, 8), bad};
  const Sge r[] = {sge(kDst, 64), bad};
  RecvWr rw;
  rw.wr_id = 2;
  rw.sg_list = r;
  ASSERT_FALSE(p.b->post_recv(rw).error());
  SendWr wr = send_wr(1, nullptr);
  wr.sg_list = s;
  CHECK_ERR("post", p.a->post_send(wr).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 1)), "SUCCESS/SEND/8");
  CHECK_OBS("receiver", describe(poll_n(*p.cq_b, 1)), "SUCCESS/RECV/8");
  const Sge landing[] = {sge(kAux, 16), bad};
  SendWr read = rdma_wr(3, WrOpcode::rdma_read, nullptr, mr().address(kSrc), mr().rkey());
  read.sg_list = landing;
  CHECK_ERR("post_read", p.a->post_send(read).error(), 0);
  CHECK_OBS("reader", describe(poll_n(*p.cq_a, 1)), "SUCCESS/RDMA_READ/16");
  CHECK_ERR("post_empty", p.a->post_send(send_wr(4, &bad)).error(), 0);
  ASSERT_FALSE(p.b->post_recv(recv_wr(5, &r[0])).error());
  CHECK_OBS("empty_sender", describe(poll_n(*p.cq_a, 1)), "SUCCESS/SEND/0");
  CHECK_OBS("empty_receiver", describe(poll_n(*p.cq_b, 1)), "SUCCESS/RECV/0");
}

// A receive is checked only where the message lands: a 0-byte message needs no valid key at
// all, and an SGE (or the part of one) past the message's last byte is not looked at, though
// its key is wrong or it runs past its MR's end.
TEST_P(Datapath, ReceiveIsCheckedOnlyWhereTheMessageLands) {
  Pair p = make_pair();
  Sge bad = sge(kDst + 100, 64);
  bad.lkey ^= 0x100;
  const Sge s = sge(kSrc, 8);
  ASSERT_FALSE(p.b->post_recv(recv_wr(1, &bad)).error());
  CHECK_ERR("post_empty", p.a->post_send(send_wr(11, nullptr)).error(), 0);
  CHECK_OBS("empty_sender", describe(poll_n(*p.cq_a, 1)), "SUCCESS/SEND/0");
  CHECK_OBS("empty_receiver", describe(poll_n(*p.cq_b, 1)), "SUCCESS/RECV/0");
  const Sge r[] = {sge(kDst, 64), bad};
  RecvWr rw;
  rw.wr_id = 2;
  rw.sg_list = r;
  ASSERT_FALSE(p.b->post_recv(rw).error());
  CHECK_ERR("post_first_sge", p.a->post_send(send_wr(12, &s)).error(), 0);
  CHECK_OBS("first_sge_sender", describe(poll_n(*p.cq_a, 1)), "SUCCESS/SEND/8");
  CHECK_OBS("first_sge_receiver", describe(poll_n(*p.cq_b, 1)), "SUCCESS/RECV/8");
  const Sge past_end = sge(kMemSize - 16, 64);  // 48 bytes past the MR's end
  ASSERT_FALSE(p.b->post_recv(recv_wr(3, &past_end)).error());
  CHECK_ERR("post_in_range", p.a->post_send(send_wr(13, &s)).error(), 0);
  CHECK_OBS("in_range_sender", describe(poll_n(*p.cq_a, 1)), "SUCCESS/SEND/8");
  CHECK_OBS("in_range_receiver", describe(poll_n(*p.cq_b, 1)), "SUCCESS/RECV/8");
}

// rxe: an atomic's response takes the first 8 bytes of its local buffer, and only they are
// checked (an SGE after them may have a wrong key). Elsewhere a buffer of 16 bytes is EINVAL.
TEST_P(Datapath, AtomicBufferIsCheckedOnlyWhereTheValueLands) {
  Pair p = make_pair();
  word(kDst) = 10;
  Sge bad = sge(kAux + 64, 8);
  bad.lkey ^= 0x100;
  const Sge s[] = {sge(kAux, 8), bad};
  SendWr wr = rdma_wr(1, WrOpcode::atomic_fetch_and_add, nullptr, mr().address(kDst), mr().rkey());
  wr.sg_list = s;
  wr.compare_add = 7;
  const PostResult r = p.a->post_send(wr);
  CHECK_ERR("post", r.error(), expect().atomic_takes_longer_buffer ? 0 : EINVAL);
  if (r.err != 0) return;
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 1)), "SUCCESS/FETCH_ADD/16");
  CHECK_OBS("returned", word(kAux), 10);
}

TEST_P(Datapath, MultiPacketSend) {
  Pair p = make_pair();
  fill(kSrc, 10000, 5);
  const Sge s = sge(kSrc, 10000);
  const Sge r = sge(kDst, 12000);
  ASSERT_FALSE(p.b->post_recv(recv_wr(2, &r)).error());
  CHECK_ERR("post", p.a->post_send(send_wr(1, &s)).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 1)), "SUCCESS/SEND/10000");
  CHECK_OBS("receiver", describe(poll_n(*p.cq_b, 1)), "SUCCESS/RECV/10000");
  CHECK_OBS("data", same(kSrc, kDst, 10000), true);
}

TEST_P(Datapath, UnsignaledSendsCompleteSilently) {
  Pair p = make_pair();
  const Sge s = sge(kSrc, 8);
  const Sge r = sge(kDst, 8);
  for (std::uint64_t i = 0; i < 4; ++i) ASSERT_FALSE(p.b->post_recv(recv_wr(10 + i, &r)).error());
  const SendWr wrs[] = {send_wr(1, &s, WrOpcode::send, SendFlags::none),
                        send_wr(2, &s, WrOpcode::send, SendFlags::none),
                        send_wr(3, &s, WrOpcode::send, SendFlags::none), send_wr(4, &s)};
  CHECK_ERR("post", p.a->post_send(wrs).error(), 0);
  const auto sw = poll_n(*p.cq_a, 1);
  CHECK_OBS("sender", describe(sw), "SUCCESS/SEND/8");
  CHECK_OBS("wr_id", sw.empty() ? 0 : sw[0].wr_id, 4);
  CHECK_OBS("more", describe(poll_quiet(*p.cq_a)), "none");
  CHECK_OBS("received", poll_n(*p.cq_b, 4).size(), 4);
}

TEST_P(Datapath, SqSigAllSignalsEverything) {
  Pair p = make_pair(PairOptions::signal_all());
  const Sge s = sge(kSrc, 8);
  const Sge r = sge(kDst, 8);
  for (std::uint64_t i = 0; i < 2; ++i) ASSERT_FALSE(p.b->post_recv(recv_wr(10 + i, &r)).error());
  const SendWr wrs[] = {send_wr(1, &s, WrOpcode::send, SendFlags::none), send_wr(2, &s)};
  CHECK_ERR("post", p.a->post_send(wrs).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 2)), "SUCCESS/SEND/8,SUCCESS/SEND/8");
}

TEST_P(Datapath, InlineSendAtLimit) {
  Pair p = make_pair(PairOptions::with(QpCap{16, 16, 4, 4, 64}));
  const std::uint32_t limit = p.a->query().cap.max_inline_data;
  CHECK_OBS("max_inline_data", limit, 64);
  fill(kSrc, 64, 9);
  std::vector<char> copy(mem(kSrc), mem(kSrc) + 64);
  const Sge s = sge(kSrc, 64);
  const Sge r = sge(kDst, 64);
  ASSERT_FALSE(p.b->post_recv(recv_wr(2, &r)).error());
  CHECK_ERR("post", p.a->post_send(send_wr(1, &s, WrOpcode::send, SendFlags::signaled | SendFlags::inline_data)).error(), 0);
  std::memset(mem(kSrc), 0, 64);  // inline: the data was copied at post time
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 1)), "SUCCESS/SEND/64");
  CHECK_OBS("receiver", describe(poll_n(*p.cq_b, 1)), "SUCCESS/RECV/64");
  CHECK_OBS("data", std::memcmp(copy.data(), mem(kDst), 64) == 0, true);
}

TEST_P(Datapath, InlineGathersSgesWithoutLookingAtKeys) {
  Pair p = make_pair(PairOptions::with(QpCap{16, 16, 4, 4, 64}));
  fill(kSrc, 40, 4);
  std::vector<char> copy(mem(kSrc), mem(kSrc) + 40);
  Sge s[] = {sge(kSrc, 10), sge(kSrc + 10, 30)};
  s[1].lkey ^= 0x100;  // inline data is copied at post time: no key is looked at
  const Sge r = sge(kDst, 64);
  ASSERT_FALSE(p.b->post_recv(recv_wr(2, &r)).error());
  SendWr wr = send_wr(1, nullptr, WrOpcode::send, SendFlags::signaled | SendFlags::inline_data);
  wr.sg_list = s;
  CHECK_ERR("post", p.a->post_send(wr).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 1)), "SUCCESS/SEND/40");
  CHECK_OBS("receiver", describe(poll_n(*p.cq_b, 1)), "SUCCESS/RECV/40");
  CHECK_OBS("data", std::memcmp(copy.data(), mem(kDst), 40) == 0, true);
}

TEST_P(Datapath, InlineRdmaWrite) {
  Pair p = make_pair(PairOptions::with(QpCap{16, 16, 4, 4, 64}));
  fill(kSrc, 48, 6);
  std::vector<char> copy(mem(kSrc), mem(kSrc) + 48);
  const Sge s = sge(kSrc, 48);
  SendWr wr = rdma_wr(1, WrOpcode::rdma_write, &s, mr().address(kDst), mr().rkey(),
                      SendFlags::signaled | SendFlags::inline_data);
  CHECK_ERR("post", p.a->post_send(wr).error(), 0);
  std::memset(mem(kSrc), 0, 48);
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 1)), "SUCCESS/RDMA_WRITE/48");
  CHECK_OBS("data", std::memcmp(copy.data(), mem(kDst), 48) == 0, true);
}

TEST_P(Datapath, ReadScattersIntoSges) {
  Pair p = make_pair();
  fill(kSrc, 50, 7);
  const Sge s[] = {sge(kAux, 20), sge(kAux + 1000, 30)};
  SendWr wr = rdma_wr(1, WrOpcode::rdma_read, nullptr, mr().address(kSrc), mr().rkey());
  wr.sg_list = s;
  CHECK_ERR("post", p.a->post_send(wr).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 1)), "SUCCESS/RDMA_READ/50");
  CHECK_OBS("data", same(kSrc, kAux, 20) && same(kSrc + 20, kAux + 1000, 30), true);
}

TEST_P(Datapath, ZeroLengthWriteWithImmNeedsNoRkey) {
  Pair p = make_pair();
  RecvWr rw;
  rw.wr_id = 2;
  ASSERT_FALSE(p.b->post_recv(rw).error());
  SendWr wr = rdma_wr(1, WrOpcode::rdma_write_with_imm, nullptr, mr().address(kDst), mr().rkey() ^ 0x100);
  wr.sg_list = {};
  wr.imm_data = 0xabcd;
  CHECK_ERR("post", p.a->post_send(wr).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 1)), "SUCCESS/RDMA_WRITE/0");
  const auto wcs = poll_n(*p.cq_b, 1);
  CHECK_OBS("receiver", describe(wcs), "SUCCESS/RECV_RDMA_WITH_IMM/0");
  CHECK_OBS("imm", wcs.empty() ? 0u : wcs[0].imm_data, 0xabcdu);
  CHECK_OBS("with_imm", !wcs.empty() && any(wcs[0].wc_flags, WcFlags::with_imm), true);
}

TEST_P(Datapath, SendWithImmIntoAReceiveWithoutSges) {
  Pair p = make_pair();
  RecvWr rw;
  rw.wr_id = 2;
  ASSERT_FALSE(p.b->post_recv(rw).error());
  SendWr wr = send_wr(1, nullptr, WrOpcode::send_with_imm);
  wr.imm_data = 0x1234;
  CHECK_ERR("post", p.a->post_send(wr).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 1)), "SUCCESS/SEND/0");
  const auto wcs = poll_n(*p.cq_b, 1);
  CHECK_OBS("receiver", describe(wcs), "SUCCESS/RECV/0");
  CHECK_OBS("imm", wcs.empty() ? 0u : wcs[0].imm_data, 0x1234u);
}

TEST_P(Datapath, InlineAboveLimitRefused) {
  Pair p = make_pair(PairOptions::with(QpCap{16, 16, 4, 4, 64}));
  const std::uint32_t limit = p.a->query().cap.max_inline_data;
  const Sge s = sge(kSrc, limit + 1);
  const SendWr wrs[] = {send_wr(1, &s, WrOpcode::send, SendFlags::signaled | SendFlags::inline_data)};
  const PostResult r = p.a->post_send(wrs);
  CHECK_ERR("post", r.error(), expect().inline_too_long);
  CHECK_OBS("posted", r.posted, 0);
  CHECK_OBS("state", p.a->state(), QpState::rts);
}

TEST_P(Datapath, TooManySendSges) {
  Pair p = make_pair(PairOptions::with(QpCap{16, 16, 2, 2, 0}));
  const std::uint32_t max = p.a->query().cap.max_send_sge;
  std::vector<Sge> s(max + 1, sge(kSrc, 4));
  SendWr wr = send_wr(1, nullptr);
  wr.sg_list = s;
  const PostResult r = p.a->post_send(wr);
  CHECK_ERR("post", r.error(), expect().send_too_many_sge);
  CHECK_OBS("posted", r.posted, 0);
}

TEST_P(Datapath, TooManyRecvSges) {
  Pair p = make_pair(PairOptions::with(QpCap{16, 16, 2, 2, 0}));
  const std::uint32_t max = p.a->query().cap.max_recv_sge;
  std::vector<Sge> r(max + 1, sge(kDst, 4));
  RecvWr wr;
  wr.wr_id = 1;
  wr.sg_list = r;
  const PostResult res = p.a->post_recv(wr);
  CHECK_ERR("post", res.error(), EINVAL);
  CHECK_OBS("posted", res.posted, 0);
}

TEST_P(Datapath, BatchStopsAtBadRequest) {
  Pair p = make_pair(PairOptions::with(QpCap{16, 16, 1, 1, 0}));
  const Sge r = sge(kDst, 64);
  for (std::uint64_t i = 0; i < 3; ++i) ASSERT_FALSE(p.b->post_recv(recv_wr(10 + i, &r)).error());
  const Sge s = sge(kSrc, 8);
  const Sge two[] = {sge(kSrc, 8), sge(kSrc + 8, 8)};
  SendWr bad = send_wr(2, nullptr);
  bad.sg_list = two;
  const SendWr wrs[] = {send_wr(1, &s), bad, send_wr(3, &s)};
  const PostResult res = p.a->post_send(wrs);
  CHECK_ERR("post", res.error(), expect().send_too_many_sge);
  CHECK_OBS("posted", res.posted, 1);
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 1)), "SUCCESS/SEND/8");
  CHECK_OBS("more", describe(poll_quiet(*p.cq_a)), "none");
}

TEST_P(Datapath, ReadWithoutResponderResources) {
  PairOptions o;
  o.b.max_dest_rd_atomic = 0;
  Pair p = make_pair(o);
  const Sge s = sge(kAux, 64);
  CHECK_ERR("post", p.a->post_send(rdma_wr(1, WrOpcode::rdma_read, &s, mr().address(kDst), mr().rkey())).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 1)), err_wc(WcStatus::rem_inv_req_err, WcOpcode::rdma_read, 64));
  CHECK_OBS("requester", wait_state(*p.a, QpState::err), QpState::err);
  CHECK_OBS("responder", wait_state(*p.b, QpState::err), QpState::err);
}

TEST_P(Datapath, UcSendAndWrite) {
  Pair p = make_pair(PairOptions::with(QpCap{16, 16, 4, 4, 0}, QpType::uc));
  fill(kSrc, 64, 2);
  const Sge s = sge(kSrc, 64);
  const Sge r = sge(kDst, 64);
  ASSERT_FALSE(p.b->post_recv(recv_wr(2, &r)).error());
  const SendWr wrs[] = {send_wr(1, &s),
                        rdma_wr(3, WrOpcode::rdma_write, &s, mr().address(kDst + 1024), mr().rkey())};
  CHECK_ERR("post", p.a->post_send(wrs).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 2)), "SUCCESS/SEND/64,SUCCESS/RDMA_WRITE/64");
  CHECK_OBS("receiver", describe(poll_n(*p.cq_b, 1)), "SUCCESS/RECV/64");
  pass_time(std::chrono::milliseconds(20));
  CHECK_OBS("data", same(kSrc, kDst, 64) && same(kSrc, kDst + 1024, 64), true);
}

// UC has no NAK: a WRITE the responder refuses (bad rkey, or a QP without REMOTE_WRITE) is
// dropped, with or without immediate (no receive is taken), and the QP carries on: the next
// message arrives. A receive that cannot take a SEND fails and takes the QP to ERR, as on RC.
TEST_P(Datapath, UcWriteWithBadRkeyIsDropped) {
  Pair p = make_pair(PairOptions::with(QpCap{16, 16, 4, 4, 0}, QpType::uc));
  const Sge s = sge(kSrc, 64);
  const Sge r = sge(kDst, 64);
  ASSERT_FALSE(p.b->post_recv(recv_wr(2, &r)).error());
  ASSERT_FALSE(p.b->post_recv(recv_wr(4, &r)).error());
  for (const WrOpcode op : {WrOpcode::rdma_write, WrOpcode::rdma_write_with_imm}) {
    const SendWr wrs[] = {rdma_wr(1, op, &s, mr().address(kDst + 1024), mr().rkey() ^ 0x100),
                          send_wr(3, &s)};
    CHECK_ERR("post", p.a->post_send(wrs).error(), 0);
    CHECK_OBS("sender", describe(poll_n(*p.cq_a, 2)), "SUCCESS/RDMA_WRITE/64,SUCCESS/SEND/64");
    CHECK_OBS("receiver", describe(poll_n(*p.cq_b, 1)), "SUCCESS/RECV/64");
  }
  CHECK_OBS("receiver_state", p.b->state(), QpState::rts);
}

TEST_P(Datapath, UcWriteToQpWithoutRemoteWriteIsDropped) {
  PairOptions o = PairOptions::with(QpCap{16, 16, 4, 4, 0}, QpType::uc);
  o.b.access = Access::local_write;
  Pair p = make_pair(o);
  const Sge s = sge(kSrc, 64);
  const Sge r = sge(kDst, 64);
  ASSERT_FALSE(p.b->post_recv(recv_wr(2, &r)).error());
  const SendWr wrs[] = {rdma_wr(1, WrOpcode::rdma_write, &s, mr().address(kDst + 1024), mr().rkey()),
                        send_wr(3, &s)};
  CHECK_ERR("post", p.a->post_send(wrs).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 2)), "SUCCESS/RDMA_WRITE/64,SUCCESS/SEND/64");
  CHECK_OBS("receiver", describe(poll_n(*p.cq_b, 1)), "SUCCESS/RECV/64");
  CHECK_OBS("receiver_state", p.b->state(), QpState::rts);
}

TEST_P(Datapath, UcSendIntoTooSmallReceiveFailsTheQp) {
  Pair p = make_pair(PairOptions::with(QpCap{16, 16, 4, 4, 0}, QpType::uc));
  const Sge s = sge(kSrc, 64);
  const Sge tiny = sge(kDst, 8);
  const Sge r = sge(kDst + 1024, 64);
  ASSERT_FALSE(p.b->post_recv(recv_wr(2, &tiny)).error());
  ASSERT_FALSE(p.b->post_recv(recv_wr(4, &r)).error());
  const SendWr wrs[] = {send_wr(1, &s), send_wr(3, &s)};
  CHECK_ERR("post", p.a->post_send(wrs).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 2)), "SUCCESS/SEND/64,SUCCESS/SEND/64");
  CHECK_OBS("receiver", describe(poll_n(*p.cq_b, 2)),
            err_wc(expect().recv_too_small, WcOpcode::recv, 0) + "," + err_wc(WcStatus::wr_flush_err, WcOpcode::recv, 0));
  CHECK_OBS("receiver_state", p.b->state(), QpState::err);
}

// UC has no RNR: a SEND (or a WRITE with immediate) that finds no receive is lost, and the QP
// carries on.
TEST_P(Datapath, UcMessageWithoutReceiveIsLost) {
  Pair p = make_pair(PairOptions::with(QpCap{16, 16, 4, 4, 0}, QpType::uc));
  const Sge s = sge(kSrc, 64);
  CHECK_ERR("post", p.a->post_send(send_wr(1, &s)).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 1)), "SUCCESS/SEND/64");
  pass_time(std::chrono::milliseconds(20));
  const Sge r = sge(kDst, 64);
  ASSERT_FALSE(p.b->post_recv(recv_wr(2, &r)).error());
  SendWr imm = rdma_wr(5, WrOpcode::rdma_write_with_imm, &s, mr().address(kDst + 1024), mr().rkey());
  const SendWr wrs[] = {send_wr(3, &s)};
  CHECK_ERR("post_again", p.a->post_send(wrs).error(), 0);
  CHECK_OBS("sender_again", describe(poll_n(*p.cq_a, 1)), "SUCCESS/SEND/64");
  CHECK_OBS("receiver", describe(poll_n(*p.cq_b, 1)), "SUCCESS/RECV/64");
  CHECK_ERR("post_imm", p.a->post_send(imm).error(), 0);
  CHECK_OBS("sender_imm", describe(poll_n(*p.cq_a, 1)), "SUCCESS/RDMA_WRITE/64");
  pass_time(std::chrono::milliseconds(20));
  CHECK_OBS("receiver_imm", describe(poll_quiet(*p.cq_b)), "none");
  CHECK_OBS("receiver_state", p.b->state(), QpState::rts);
}

TEST_P(Datapath, UcMultiPacketSend) {
  Pair p = make_pair(PairOptions::with(QpCap{16, 16, 4, 4, 0}, QpType::uc));
  fill(kSrc, 3000, 8);
  const Sge s = sge(kSrc, 3000);
  const Sge r = sge(kDst, 4096);
  ASSERT_FALSE(p.b->post_recv(recv_wr(2, &r)).error());
  CHECK_ERR("post", p.a->post_send(send_wr(1, &s)).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 1)), "SUCCESS/SEND/3000");
  CHECK_OBS("receiver", describe(poll_n(*p.cq_b, 1)), "SUCCESS/RECV/3000");
  CHECK_OBS("data", same(kSrc, kDst, 3000), true);
}

// ---------------------------------------------------------------------------------------------
// Ordering

TEST_P(Ordering, SendQueueCompletesInPostOrder) {
  Pair p = make_pair();
  const Sge r = sge(kDst, 64);
  for (std::uint64_t i = 0; i < 2; ++i) ASSERT_FALSE(p.b->post_recv(recv_wr(10 + i, &r)).error());
  word(kDst + 4096) = 1;
  const Sge s = sge(kSrc, 16);
  const Sge rd = sge(kAux, 16);
  const Sge at = sge(kAux + 64, 8);
  SendWr fa = rdma_wr(4, WrOpcode::atomic_fetch_and_add, &at, mr().address(kDst + 4096), mr().rkey());
  fa.compare_add = 1;
  const SendWr wrs[] = {send_wr(1, &s),
                        rdma_wr(2, WrOpcode::rdma_write, &s, mr().address(kDst + 1024), mr().rkey()),
                        rdma_wr(3, WrOpcode::rdma_read, &rd, mr().address(kDst + 2048), mr().rkey()),
                        fa, send_wr(5, &s)};
  CHECK_ERR("post", p.a->post_send(wrs).error(), 0);
  const auto wcs = poll_n(*p.cq_a, 5);
  CHECK_OBS("sender", describe(wcs),
            "SUCCESS/SEND/16,SUCCESS/RDMA_WRITE/16,SUCCESS/RDMA_READ/16,SUCCESS/FETCH_ADD/8,SUCCESS/SEND/16");
  std::string ids;
  for (const auto& wc : wcs) ids += std::to_string(wc.wr_id);
  CHECK_OBS("wr_ids", ids, "12345");
}

TEST_P(Ordering, ReceivesCompleteInPostOrder) {
  Pair p = make_pair();
  const Sge r = sge(kDst, 64);
  for (std::uint64_t i = 0; i < 8; ++i) ASSERT_FALSE(p.b->post_recv(recv_wr(100 + i, &r)).error());
  std::vector<Sge> s;
  for (std::uint32_t i = 0; i < 8; ++i) s.push_back(sge(kSrc, i + 1));
  std::vector<SendWr> wrs;
  for (std::uint32_t i = 0; i < 8; ++i) wrs.push_back(send_wr(i, &s[i]));
  CHECK_ERR("post", p.a->post_send(wrs).error(), 0);
  const auto rw = poll_n(*p.cq_b, 8);
  std::string got;
  for (const auto& wc : rw) got += std::to_string(wc.wr_id - 100) + ":" + std::to_string(wc.byte_len) + " ";
  CHECK_OBS("recv", got, "0:1 1:2 2:3 3:4 4:5 5:6 6:7 7:8 ");
  CHECK_OBS("sent", poll_n(*p.cq_a, 8).size(), 8);
}

TEST_P(Ordering, ReadSeesEarlierWrite) {
  Pair p = make_pair();
  fill(kSrc, 256, 40);
  std::memset(mem(kDst), 0, 256);
  const Sge w = sge(kSrc, 256);
  const Sge rd = sge(kAux, 256);
  const SendWr wrs[] = {rdma_wr(1, WrOpcode::rdma_write, &w, mr().address(kDst), mr().rkey(), SendFlags::none),
                        rdma_wr(2, WrOpcode::rdma_read, &rd, mr().address(kDst), mr().rkey())};
  CHECK_ERR("post", p.a->post_send(wrs).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 1)), "SUCCESS/RDMA_READ/256");
  CHECK_OBS("data", same(kSrc, kAux, 256), true);
}

TEST_P(Ordering, ErrorCompletionsFollowSuccessfulOnes) {
  Pair p = make_pair();
  const Sge s = sge(kSrc, 16);
  const Sge r = sge(kDst, 64);
  ASSERT_FALSE(p.b->post_recv(recv_wr(10, &r)).error());
  const SendWr wrs[] = {send_wr(1, &s),
                        rdma_wr(2, WrOpcode::rdma_write, &s, mr().address(kDst), mr().rkey() ^ 0x80),
                        send_wr(3, &s)};
  CHECK_ERR("post", p.a->post_send(wrs).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 3)),
            "SUCCESS/SEND/16," + err_wc(WcStatus::rem_access_err, WcOpcode::rdma_write, 16) + "," +
                err_wc(WcStatus::wr_flush_err, WcOpcode::send, 16));
}

// Completions of one CQ that takes a QP's sends and receives, where a send refused before RTS
// runs later (rxe keeps it, and it runs when a later post rings the doorbell): it completes
// after a receive that arrived in the meantime. "RECV:20" is the receive of wr_id 20 (success),
// "SEND:1" the send of wr_id 1.
// A QP destroyed while its completions wait in its CQ (the CQ outlives it).
TEST_P(Ordering, DestroyedQpsCompletionsInItsCq) {
  Pair p = make_pair();
  const Sge s = sge(kSrc, 16);
  const Sge r = sge(kDst, 16);
  ASSERT_FALSE(p.b->post_recv(recv_wr(2, &r)).error());
  ASSERT_FALSE(p.b->post_recv(recv_wr(3, &r)).error());
  CHECK_ERR("post", p.a->post_send(send_wr(1, &s)).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*p.cq_a, 1)), "SUCCESS/SEND/16");
  // The SEND was acknowledged: its receive completion is in cq_b (not polled). Destroying the
  // QP also flushes the receive still posted where the QP goes to ERR first (not here).
  CHECK_ERR("destroy", verb_errno([&] { destroy(p.b); }), 0);
  const bool cleaned = expect().qp_destroy_cleans_cq;
  CHECK_OBS("after_destroy", describe(poll_quiet(*p.cq_b)), cleaned ? "none" : "SUCCESS/RECV/16");
}

class SharedCq : public Ordering {
 protected:
  static std::string order(const std::vector<WorkCompletion>& wcs) {
    std::string out;
    for (const auto& wc : wcs) {
      if (!out.empty()) out += ',';
      const bool recv = wc.status == WcStatus::success ? wc.opcode == WcOpcode::recv : wc.wr_id >= 20;
      out += (recv ? "RECV:" : "SEND:") + std::to_string(wc.wr_id);
      if (wc.status != WcStatus::success) out += "/" + obs_str(wc.status);
    }
    return out.empty() ? "none" : out;
  }
  // What a's CQ holds, in order, when a's SEND of wr_id 1 was posted in `early` (RESET, INIT
  // or RTR), then b's SEND arrived into a's receive 20, then a posted its SEND of wr_id 2.
  void run(QpState early) {
    auto cq = make_cq(16);
    auto cq_b = make_cq(16);
    auto a = make_qp(*cq, *cq);
    auto b = make_qp(*cq_b, *cq_b);
    const Sge r = sge(kDst, 64);
    const Sge rb = sge(kAux, 64);
    if (early != QpState::reset) modify_to_init(*a, options());
    if (early == QpState::rtr) {
      ASSERT_FALSE(a->post_recv(recv_wr(20, &r)).error());
      modify_to_rtr(*a, endpoint(*b, 200), options());
    }
    const Sge s1 = sge(kSrc, 16);
    CHECK_ERR("early_post", a->post_send(send_wr(1, &s1)).error(), expect().post_send_before_rts);
    modify_to_init(*b, options());
    for (std::uint64_t i = 10; i < 12; ++i) ASSERT_FALSE(b->post_recv(recv_wr(i, &rb)).error());
    connect(*b, 200, endpoint(*a, 100), options());
    if (early != QpState::rtr) {
      if (early == QpState::reset) modify_to_init(*a, options());
      ASSERT_FALSE(a->post_recv(recv_wr(20, &r)).error());
      modify_to_rtr(*a, endpoint(*b, 200), options());
    }
    modify_to_rts(*a, 100, options());
    pass_time(std::chrono::milliseconds(50));
    const Sge sb = sge(kSrc, 24);
    ASSERT_FALSE(b->post_send(send_wr(30, &sb)).error());
    pass_time(std::chrono::milliseconds(50));
    const Sge s2 = sge(kSrc, 32);
    CHECK_ERR("post", a->post_send(send_wr(2, &s2)).error(), 0);
    const bool kept = expect().early_send_kept;
    const bool at_rts = kept && expect().rts_starts_send_queue;
    std::string want = "RECV:20,SEND:2";
    if (kept) want = at_rts ? "SEND:1,RECV:20,SEND:2" : "RECV:20,SEND:1,SEND:2";
    CHECK_OBS("a_cq", order(poll_n(*cq, kept ? 3 : 2)), want);
    CHECK_OBS("b_cq", summary(poll_n(*cq_b, kept ? 3 : 2)), kept ? "3*SUCCESS" : "2*SUCCESS");
  }
};

TEST_P(SharedCq, SendRefusedInResetCompletesAfterALaterReceive) { run(QpState::reset); }
TEST_P(SharedCq, SendRefusedInRtrCompletesAfterAReceiveInRtr) { run(QpState::rtr); }

// A send refused in INIT and kept, a receive completed in RTR, another receive waiting: the
// move to ERR flushes both; in which order they reach the shared CQ.
TEST_P(SharedCq, RefusedSendAndReceiveFlushedOnErr) {
  auto cq = make_cq(16);
  auto cq_b = make_cq(16);
  auto a = make_qp(*cq, *cq);
  auto b = make_qp(*cq_b, *cq_b);
  const Sge r = sge(kDst, 64);
  modify_to_init(*a, options());
  const Sge s1 = sge(kSrc, 16);
  CHECK_ERR("early_post", a->post_send(send_wr(1, &s1)).error(), expect().post_send_before_rts);
  for (std::uint64_t i = 20; i < 22; ++i) ASSERT_FALSE(a->post_recv(recv_wr(i, &r)).error());
  connect(*b, 200, endpoint(*a, 100), options());
  modify_to_rtr(*a, endpoint(*b, 200), options());
  const Sge sb = sge(kSrc, 24);
  ASSERT_FALSE(b->post_send(send_wr(30, &sb)).error());
  CHECK_OBS("received", order(poll_n(*cq, 1)), "RECV:20");
  move_to(*a, QpState::err);
  const bool kept = expect().early_send_kept;
  const std::string send = kept ? "SEND:1/WR_FLUSH_ERR" : "";
  const std::string recv = "RECV:21/WR_FLUSH_ERR";
  std::string want = recv;
  if (kept) want = expect().rc_flushes_receives_first ? recv + "," + send : send + "," + recv;
  CHECK_OBS("flushed", order(poll_n(*cq, kept ? 2 : 1)), want);
  CHECK_OBS("more", order(poll_quiet(*cq)), "none");
}

// A UD QP in INIT with two receives and a send refused there (kept on rxe), moved to ERR: the
// send queue goes first (rxe's completer runs at once for UD and UC; for RC it is scheduled
// after the responder's task, which flushes the receives).
TEST_P(SharedCq, UdFlushOrderOnErr) {
  auto cq = make_cq(16);
  auto a = make_qp(*cq, *cq, QpCap{16, 16, 2, 2, 0}, QpType::ud);
  modify_to_init(*a, options());
  const Sge r = sge(kDst, 64);
  for (std::uint64_t i = 20; i < 22; ++i) ASSERT_FALSE(a->post_recv(recv_wr(i, &r)).error());
  auto ah = pd().create_ah(ah_attr());
  const Sge s1 = sge(kSrc, 16);
  SendWr wr = send_wr(1, &s1);
  wr.ah = ah.get();
  wr.remote_qpn = a->qp_num();
  wr.remote_qkey = 0x11111111;
  CHECK_ERR("early_post", a->post_send(wr).error(), expect().post_send_before_rts);
  move_to(*a, QpState::err);
  const bool kept = expect().early_send_kept;
  const auto wcs = poll_n(*cq, kept ? 3 : 2);
  CHECK_OBS("flushed", order(wcs),
            kept ? "SEND:1/WR_FLUSH_ERR,RECV:20/WR_FLUSH_ERR,RECV:21/WR_FLUSH_ERR"
                 : "RECV:20/WR_FLUSH_ERR,RECV:21/WR_FLUSH_ERR");
}

// An RC QP with two receives waiting fails a WRITE (bad rkey) with a SEND behind it: the
// error, then the flushes, in which order on the shared CQ.
TEST_P(SharedCq, FlushOrderAfterARemoteAccessError) {
  auto cq = make_cq(16);
  auto cq_b = make_cq(16);
  auto a = make_qp(*cq, *cq);
  auto b = make_qp(*cq_b, *cq_b);
  connect_pair(*a, *b);
  const Sge r = sge(kDst, 64);
  for (std::uint64_t i = 20; i < 22; ++i) ASSERT_FALSE(a->post_recv(recv_wr(i, &r)).error());
  const Sge s = sge(kSrc, 16);
  const SendWr wrs[] = {rdma_wr(1, WrOpcode::rdma_write, &s, mr().address(kDst), mr().rkey() ^ 0x100),
                        send_wr(2, &s)};
  CHECK_ERR("post", a->post_send(wrs).error(), 0);
  const std::string sends = "SEND:2/WR_FLUSH_ERR";
  const std::string recvs = "RECV:20/WR_FLUSH_ERR,RECV:21/WR_FLUSH_ERR";
  CHECK_OBS("a_cq", order(poll_n(*cq, 4)),
            "SEND:1/REM_ACCESS_ERR," + (expect().rc_flushes_receives_first ? recvs + "," + sends
                                                                           : sends + "," + recvs));
}

// ---------------------------------------------------------------------------------------------
// UD

TEST_P(Ud, SendRecvWithGrh) {
  UdPair u = make_ud();
  fill(kSrc, 100, 30);
  const Sge s = sge(kSrc, 100);
  const Sge r = sge(kDst, 40 + 200);
  ASSERT_FALSE(u.p.b->post_recv(recv_wr(2, &r)).error());
  CHECK_ERR("post", u.p.a->post_send(ud_send(u, 1, &s)).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*u.p.cq_a, 1)), "SUCCESS/SEND/100");
  const auto rw = poll_n(*u.p.cq_b, 1);
  CHECK_OBS("receiver", describe(rw), "SUCCESS/RECV/140");
  ASSERT_EQ(rw.size(), 1u);
  CHECK_OBS("grh", any(rw[0].wc_flags, WcFlags::grh), true);
  CHECK_OBS("src_qp_ok", rw[0].src_qp == u.p.a->qp_num(), true);
  CHECK_OBS("payload_after_grh", same(kSrc, kDst + 40, 100), true);
}

TEST_P(Ud, GrhAreaHoldsIpv4Header) {
  UdPair u = make_ud();
  const Sge s = sge(kSrc, 16);
  const Sge r = sge(kDst, 40 + 16);
  std::memset(mem(kDst), 0xee, 40);
  ASSERT_FALSE(u.p.b->post_recv(recv_wr(2, &r)).error());
  CHECK_ERR("post", u.p.a->post_send(ud_send(u, 1, &s)).error(), 0);
  CHECK_OBS("receiver", describe(poll_n(*u.p.cq_b, 1)), "SUCCESS/RECV/56");
  const auto* g = reinterpret_cast<const unsigned char*>(mem(kDst));
  bool zeros = true;
  for (int i = 0; i < 20; ++i) zeros = zeros && g[i] == 0;
  CHECK_OBS("first20_zero", zeros, true);
  CHECK_OBS("ip_version_ihl", static_cast<int>(g[20]), 0x45);
  CHECK_OBS("ip_proto", static_cast<int>(g[29]), 17);  // UDP
  char addrs[40];
  std::snprintf(addrs, sizeof addrs, "%d.%d.%d.%d>%d.%d.%d.%d", g[32], g[33], g[34], g[35], g[36],
                g[37], g[38], g[39]);
  CHECK_OBS("addrs", std::string(addrs), "10.0.0.1>10.0.0.1");
}

// The address vector's traffic class, hop limit and flow label on the wire: RoCE v2 over IPv4
// puts the traffic class in the IPv4 header's TOS byte and the hop limit in its TTL; the flow
// label has no field there (it only picks the UDP source port). The receiver's 40-byte GRH
// area shows the IPv4 header as it arrived.
class UdGrh : public Ud {
 protected:
  // The 40 bytes a UD receive gets for a 16-byte SEND through an AH with `attr`'s route.
  std::array<unsigned char, 40> grh_area(const GlobalRoute& route, std::uint8_t sl = 0,
                                         WorkCompletion* out = nullptr) {
    UdPair u = make_ud();
    AhAttr attr = ah_attr();
    attr.grh.traffic_class = route.traffic_class;
    attr.grh.hop_limit = route.hop_limit;
    attr.grh.flow_label = route.flow_label;
    attr.sl = sl;
    u.ah = pd().create_ah(attr);
    const Sge s = sge(kSrc, 16);
    const Sge r = sge(kDst, 40 + 16);
    std::memset(mem(kDst), 0xee, 40);
    std::array<unsigned char, 40> g{};
    if (u.p.b->post_recv(recv_wr(2, &r)).error() || u.p.a->post_send(ud_send(u, 1, &s)).error()) {
      ADD_FAILURE() << "post";
      return g;
    }
    const auto rw = poll_n(*u.p.cq_b, 1);
    if (rw.size() != 1) {
      ADD_FAILURE() << "no receive";
      return g;
    }
    if (out != nullptr) *out = rw[0];
    std::memcpy(g.data(), mem(kDst), 40);
    return g;
  }
  static GlobalRoute route(std::uint8_t tclass, std::uint8_t hop_limit, std::uint32_t flow) {
    GlobalRoute r;
    r.traffic_class = tclass;
    r.hop_limit = hop_limit;
    r.flow_label = flow;
    return r;
  }
  // The IPv4 header's checksum holds (its 16-bit one's complement sum is 0xffff).
  static bool checksum_ok(const std::array<unsigned char, 40>& g) {
    std::uint32_t sum = 0;
    for (int i = 20; i < 40; i += 2) sum += static_cast<std::uint32_t>(g[i] << 8 | g[i + 1]);
    while (sum > 0xffff) sum = (sum & 0xffff) + (sum >> 16);
    return sum == 0xffff;
  }
};

TEST_P(UdGrh, TrafficClassIsTheIpv4Tos) {
  const auto a = grh_area(route(0x28, 64, 0));
  CHECK_OBS("tos_0x28", static_cast<int>(a[21]), 0x28);
  const auto b = grh_area(route(0xb9, 64, 0));  // DSCP 46 with ECN bits 01
  CHECK_OBS("tos_0xb9", static_cast<int>(b[21]), 0xb9);
  CHECK_OBS("checksums_ok", checksum_ok(a) && checksum_ok(b), expect().loopback_ipv4_checksum);
}

// rxe sends with the kernel's AH, whose hop limit its address resolution set to the route's.
TEST_P(UdGrh, HopLimitIsTheIpv4Ttl) {
  const bool given = expect().ud_ttl_is_hop_limit;
  const auto a = grh_area(route(0, 5, 0));
  CHECK_OBS("ttl_5", static_cast<int>(a[28]), given ? 5 : 64);
  const auto b = grh_area(route(0, 255, 0));
  CHECK_OBS("ttl_255", static_cast<int>(b[28]), given ? 255 : 64);
}

TEST_P(UdGrh, FlowLabelLeavesTheIpv4HeaderAlone) {
  const auto a = grh_area(route(0, 64, 0));
  const auto b = grh_area(route(0, 64, 0xabcde));
  // Everything but the identification and the checksum (which covers it) is the same.
  bool same = true;
  for (int i = 0; i < 40; ++i) {
    if (i == 24 || i == 25 || i == 30 || i == 31) continue;
    same = same && a[i] == b[i];
  }
  CHECK_OBS("same_header", same, true);
  CHECK_OBS("first20_zero", std::all_of(b.begin(), b.begin() + 20, [](unsigned char c) { return c == 0; }), true);
}

TEST_P(UdGrh, Ipv4HeaderFields) {
  const auto g = grh_area(route(0, 64, 0));
  CHECK_OBS("total_length", g[22] << 8 | g[23], 20 + 8 + 12 + 8 + 16 + 4);  // IP UDP BTH DETH data ICRC
  CHECK_OBS("flags_fragment", g[26] << 8 | g[27], 0x4000);  // don't fragment
  CHECK_OBS("tos", static_cast<int>(g[21]), 0);
  CHECK_OBS("ttl", static_cast<int>(g[28]), 64);
  // A message to the sender's own device: rxe loops it back without the IP stack's output,
  // which would fill in the checksum.
  CHECK_OBS("checksum_ok", checksum_ok(g), expect().loopback_ipv4_checksum);
  CHECK_OBS("checksum_zero", g[30] == 0 && g[31] == 0, !expect().loopback_ipv4_checksum);
  CHECK_OBS("addresses", std::memcmp(&g[32], &g[36], 4) == 0, true);
}

// What a UD receive completion says of its sender besides the QP number: SL, P_Key index, LID
// fields (none on RoCE), for an AH with SL 3 and traffic class 0x28.
TEST_P(UdGrh, ReceiveCompletionOfARoute) {
  WorkCompletion wc{};
  (void)grh_area(route(0x28, 64, 0x12345), 3, &wc);
  CHECK_OBS("sl", static_cast<int>(wc.sl), 0);
  CHECK_OBS("pkey_index", wc.pkey_index, 0);
  CHECK_OBS("slid", wc.slid, 0);
  CHECK_OBS("dlid_path_bits", static_cast<int>(wc.dlid_path_bits), 0);
  CHECK_OBS("wc_flags", static_cast<unsigned>(to_underlying(wc.wc_flags)),
            static_cast<unsigned>(to_underlying(WcFlags::grh)));
}

TEST_P(Ud, SendWithImmediate) {
  UdPair u = make_ud();
  const Sge s = sge(kSrc, 8);
  const Sge r = sge(kDst, 64);
  ASSERT_FALSE(u.p.b->post_recv(recv_wr(2, &r)).error());
  SendWr wr = ud_send(u, 1, &s);
  wr.opcode = WrOpcode::send_with_imm;
  wr.imm_data = 77;
  CHECK_ERR("post", u.p.a->post_send(wr).error(), 0);
  const auto rw = poll_n(*u.p.cq_b, 1);
  CHECK_OBS("receiver", describe(rw), "SUCCESS/RECV/48");
  ASSERT_EQ(rw.size(), 1u);
  CHECK_OBS("flags", static_cast<unsigned>(to_underlying(rw[0].wc_flags)),
            static_cast<unsigned>(to_underlying(WcFlags::grh | WcFlags::with_imm)));
  CHECK_OBS("imm", rw[0].imm_data, 77);
}

TEST_P(Ud, QkeyMismatchDropped) {
  UdPair u = make_ud();
  const Sge s = sge(kSrc, 8);
  const Sge r = sge(kDst, 64);
  ASSERT_FALSE(u.p.b->post_recv(recv_wr(2, &r)).error());
  CHECK_ERR("post", u.p.a->post_send(ud_send(u, 1, &s, 0x22222222)).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*u.p.cq_a, 1)), "SUCCESS/SEND/8");
  CHECK_OBS("receiver", describe(poll_quiet(*u.p.cq_b)), "none");
  CHECK_OBS("receiver_state", u.p.b->state(), QpState::rts);
}

// A Q_Key with the high bit set goes out as given (rxe takes no Q_Key from the QP for it),
// so a receiver with another Q_Key drops the message.
TEST_P(Ud, QkeyWithTheHighBitIsSentAsGiven) {
  UdPair u = make_ud();
  const Sge s = sge(kSrc, 8);
  const Sge r = sge(kDst, 64);
  ASSERT_FALSE(u.p.b->post_recv(recv_wr(2, &r)).error());
  CHECK_ERR("post", u.p.a->post_send(ud_send(u, 1, &s, 0x80000000u)).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*u.p.cq_a, 1)), "SUCCESS/SEND/8");
  CHECK_OBS("receiver", describe(poll_quiet(*u.p.cq_b)), "none");
}

// Unreliable: a send to a QP number nobody has completes, and nothing else happens.
TEST_P(Ud, SendToAMissingQpnCompletes) {
  UdPair u = make_ud();
  const Sge s = sge(kSrc, 8);
  SendWr wr = ud_send(u, 1, &s);
  wr.remote_qpn = 0xabcde;
  CHECK_ERR("post", u.p.a->post_send(wr).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*u.p.cq_a, 1)), "SUCCESS/SEND/8");
  CHECK_OBS("sender_state", u.p.a->state(), QpState::rts);
}

// A 0-byte UD send: the receive holds the 40 bytes of network header and nothing else.
TEST_P(Ud, ZeroLengthSendDeliversTheHeaderOnly) {
  UdPair u = make_ud();
  const Sge r = sge(kDst, 64);
  ASSERT_FALSE(u.p.b->post_recv(recv_wr(2, &r)).error());
  CHECK_ERR("post", u.p.a->post_send(ud_send(u, 1, nullptr)).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*u.p.cq_a, 1)), "SUCCESS/SEND/0");
  CHECK_OBS("receiver", describe(poll_n(*u.p.cq_b, 1)), "SUCCESS/RECV/40");
}

// A UD receive may give the 40 bytes of network header an SGE of their own.
TEST_P(Ud, GrhInAnSgeOfItsOwn) {
  UdPair u = make_ud();
  fill(kSrc, 32, 5);
  const Sge s = sge(kSrc, 32);
  const Sge r[] = {sge(kDst, 40), sge(kDst + 1024, 64)};
  RecvWr rw;
  rw.wr_id = 2;
  rw.sg_list = r;
  ASSERT_FALSE(u.p.b->post_recv(rw).error());
  CHECK_ERR("post", u.p.a->post_send(ud_send(u, 1, &s)).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*u.p.cq_a, 1)), "SUCCESS/SEND/32");
  CHECK_OBS("receiver", describe(poll_n(*u.p.cq_b, 1)), "SUCCESS/RECV/72");
  CHECK_OBS("data", same(kSrc, kDst + 1024, 32), true);
}

TEST_P(Ud, LargerThanMtu) {
  UdPair u = make_ud();
  const Sge s = sge(kSrc, 2000);
  const Sge r = sge(kDst, 4096);
  ASSERT_FALSE(u.p.b->post_recv(recv_wr(2, &r)).error());
  const PostResult res = u.p.a->post_send(ud_send(u, 1, &s));
  CHECK_ERR("post", res.error(), expect().ud_oversize_post);
  const bool accepted = expect().ud_oversize_post == 0;
  CHECK_OBS("sender", describe(accepted ? poll_n(*u.p.cq_a, 1) : poll_quiet(*u.p.cq_a)),
            accepted ? "SUCCESS/SEND/2000" : "none");
  CHECK_OBS("receiver", describe(poll_quiet(*u.p.cq_b)), "none");
  CHECK_OBS("sender_state", u.p.a->state(), QpState::rts);
}

// The address handle belongs to another PD than the sending QP.
TEST_P(Ud, SendThroughAnAddressHandleOfAnotherPd) {
  UdPair u = make_ud();
  auto pd2 = ctx().alloc_pd();
  auto ah = pd2->create_ah(ah_attr());
  const Sge s = sge(kSrc, 16);
  const Sge r = sge(kDst, 40 + 16);
  ASSERT_FALSE(u.p.b->post_recv(recv_wr(2, &r)).error());
  SendWr wr = ud_send(u, 1, &s);
  wr.ah = ah.get();
  CHECK_ERR("post", u.p.a->post_send(wr).error(), 0);
  const bool checked = expect().ud_ah_pd_checked;
  CHECK_OBS("sender", describe(poll_n(*u.p.cq_a, 1)),
            checked ? err_wc(WcStatus::loc_qp_op_err, WcOpcode::send, 16) : "SUCCESS/SEND/16");
  CHECK_OBS("receiver", describe(checked ? poll_quiet(*u.p.cq_b) : poll_n(*u.p.cq_b, 1)),
            checked ? "none" : "SUCCESS/RECV/56");
  CHECK_OBS("sender_state", u.p.a->state(), checked ? QpState::err : QpState::rts);
}

TEST_P(Ud, ReceiveBufferTooSmall) {
  UdPair u = make_ud();
  const Sge s = sge(kSrc, 100);
  const Sge r = sge(kDst, 60);  // < 40 + 100
  ASSERT_FALSE(u.p.b->post_recv(recv_wr(2, &r)).error());
  CHECK_ERR("post", u.p.a->post_send(ud_send(u, 1, &s)).error(), 0);
  CHECK_OBS("sender", describe(poll_n(*u.p.cq_a, 1)), "SUCCESS/SEND/100");
  const auto rw = poll_n(*u.p.cq_b, 1);
  CHECK_OBS("receiver_status", rw.empty() ? "none" : obs_str(rw[0].status), expect().ud_recv_too_small);
  const QpState want = expect().ud_recv_too_small_errors_qp ? QpState::err : QpState::rts;
  CHECK_OBS("receiver_state", wait_state(*u.p.b, want), want);
}

TEST_P(Ud, RdmaWriteOnUd) {
  UdPair u = make_ud();
  const Sge s = sge(kSrc, 8);
  SendWr wr = ud_send(u, 1, &s);
  wr.opcode = WrOpcode::rdma_write;
  wr.remote_addr = mr().address(kDst);
  wr.rkey = mr().rkey();
  const PostResult r = u.p.a->post_send(wr);
  CHECK_ERR("post", r.error(), expect().bad_opcode_post);
  const bool accepted = expect().bad_opcode_post == 0;
  CHECK_OBS("posted", r.posted, accepted ? 1 : 0);
  CHECK_OBS("sender", describe(accepted ? poll_n(*u.p.cq_a, 1) : poll_quiet(*u.p.cq_a)),
            accepted ? err_wc(expect().bad_opcode_status, WcOpcode::rdma_write, 8) : "none");
  const QpState want = accepted ? QpState::err : QpState::rts;
  CHECK_OBS("sender_state", wait_state(*u.p.a, want), want);
}

VERBSIM_CONFORMANCE_SUITE(Datapath);
VERBSIM_CONFORMANCE_SUITE(Ordering);
VERBSIM_CONFORMANCE_SUITE(SharedCq);
VERBSIM_CONFORMANCE_SUITE(Ud);
VERBSIM_CONFORMANCE_SUITE(UdGrh);

}  // namespace
}  // namespace verbsim::conformance
