// The ibverbs ABI translation (backends/abi/include/verbsim/abi/translate.hpp): a provider
// writes completions in ibv_wc's terms straight into verbsim's WorkCompletion array, and
// fix_up_from_ibv() turns each into what the core API promises; the drop-in's simulator writes a
// program's ibv_wc array in verbsim's terms, and to_ibv_in_place() turns each into what
// ibv_poll_cq promises. A test of the backends' internals, so it may include
// <infiniband/verbs.h>.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>

#include "verbsim/abi/translate.hpp"

namespace verbsim::abi {
namespace {

// What a provider leaves in one array element: an ibv_wc, copied in as the provider's stores
// would write it.
WorkCompletion written_by_provider(const ibv_wc& wc) {
  WorkCompletion out;
  static_assert(std::is_trivially_copyable_v<WorkCompletion>);
  std::memcpy(static_cast<void*>(&out), &wc, sizeof wc);
  return out;
}

ibv_wc recv_wc(unsigned flags, std::uint32_t imm_be) {
  ibv_wc wc{};
  wc.wr_id = 42;
  wc.status = IBV_WC_SUCCESS;
  wc.opcode = IBV_WC_RECV;
  wc.byte_len = 64;
  wc.imm_data = imm_be;
  wc.qp_num = 0x11;
  wc.src_qp = 0x12;
  wc.wc_flags = flags;
  wc.pkey_index = 3;
  wc.slid = 4;
  wc.sl = 5;
  wc.dlid_path_bits = 6;
  return wc;
}

TEST(IbverbsTranslate, EveryFieldLandsWhereWorkCompletionHasIt) {
  WorkCompletion wc = written_by_provider(recv_wc(IBV_WC_GRH, 0));
  fix_up_from_ibv(wc, false);
  EXPECT_EQ(wc.wr_id, 42u);
  EXPECT_EQ(wc.status, WcStatus::success);
  EXPECT_EQ(wc.opcode, WcOpcode::recv);
  EXPECT_EQ(wc.byte_len, 64u);
  EXPECT_EQ(wc.qp_num, 0x11u);
  EXPECT_EQ(wc.src_qp, 0x12u);
  EXPECT_EQ(wc.wc_flags, WcFlags::grh);
  EXPECT_EQ(wc.pkey_index, 3u);
  EXPECT_EQ(wc.slid, 4u);
  EXPECT_EQ(wc.sl, 5u);
  EXPECT_EQ(wc.dlid_path_bits, 6u);
}

TEST(IbverbsTranslate, ImmediateDataComesOutInHostOrder) {
  WorkCompletion wc = written_by_provider(recv_wc(IBV_WC_GRH | IBV_WC_WITH_IMM, htonl(0x12345678)));
  fix_up_from_ibv(wc, false);
  EXPECT_EQ(wc.imm_data, 0x12345678u);
  EXPECT_EQ(wc.wc_flags, WcFlags::grh | WcFlags::with_imm);
}

TEST(IbverbsTranslate, WithoutImmediateTheFieldIsZero) {
  // mlx5 leaves imm_data as the array held it; verbsim promises 0.
  for (const unsigned flags : {0u, unsigned{IBV_WC_GRH}}) {
    WorkCompletion wc = written_by_provider(recv_wc(flags, 0xdeadbeef));
    fix_up_from_ibv(wc, false);
    EXPECT_EQ(wc.imm_data, 0u) << "wc_flags " << flags;
  }
}

TEST(IbverbsTranslate, FlagsVerbsimDoesNotNameAreDropped) {
  WorkCompletion wc = written_by_provider(recv_wc(IBV_WC_GRH | IBV_WC_IP_CSUM_OK, 0x1234));
  fix_up_from_ibv(wc, false);
  EXPECT_EQ(wc.wc_flags, WcFlags::grh);
  EXPECT_EQ(wc.imm_data, 0u);
}

TEST(IbverbsTranslate, InvalidatedRkeyIsKeptAsItIs) {
  // ibv_wc's invalidated_rkey shares imm_data's place and is in host order already.
  WorkCompletion wc = written_by_provider(
      recv_wc(IBV_WC_GRH | IBV_WC_IP_CSUM_OK | IBV_WC_WITH_INV, 0x1234));
  fix_up_from_ibv(wc, false);
  EXPECT_EQ(wc.wc_flags, WcFlags::grh | WcFlags::with_inv);
  EXPECT_EQ(wc.invalidated_rkey(), 0x1234u);
}

TEST(IbverbsTranslate, KernelNumberedFlagsAreRenumbered) {
  // rxe copies the kernel's flags: IB_WC_WITH_INVALIDATE is bit 2 (IBV_WC_IP_CSUM_OK's).
  WorkCompletion inv = written_by_provider(recv_wc(IBV_WC_GRH | (1u << 2), 0x1234));
  fix_up_from_ibv(inv, true);
  EXPECT_EQ(inv.wc_flags, WcFlags::grh | WcFlags::with_inv);
  EXPECT_EQ(inv.invalidated_rkey(), 0x1234u);
  // ... and its bit 3 is IB_WC_IP_CSUM_OK, not an invalidation.
  WorkCompletion csum = written_by_provider(recv_wc(IBV_WC_GRH | (1u << 3), 0x1234));
  fix_up_from_ibv(csum, true);
  EXPECT_EQ(csum.wc_flags, WcFlags::grh);
  EXPECT_EQ(csum.imm_data, 0u);
  WorkCompletion imm = written_by_provider(recv_wc(IBV_WC_WITH_IMM, htonl(0x12345678)));
  fix_up_from_ibv(imm, true);
  EXPECT_EQ(imm.wc_flags, WcFlags::with_imm);
  EXPECT_EQ(imm.imm_data, 0x12345678u);
}

TEST(IbverbsTranslate, SgeArraysAreHandedOverAsTheyAre) {
  const std::array<Sge, 2> sges{{{0x1000, 64, 7}, {0x2000, 32, 8}}};
  const ibv_sge* theirs = as_ibv(sges);
  EXPECT_EQ(static_cast<const void*>(theirs), static_cast<const void*>(sges.data()));
  EXPECT_EQ(theirs[1].addr, 0x2000u);
  EXPECT_EQ(theirs[1].length, 32u);
  EXPECT_EQ(theirs[1].lkey, 8u);
}

// The drop-in's direction: the simulator writes a program's ibv_wc array in verbsim's terms,
// to_ibv_in_place() leaves what ibv_poll_cq promises.
ibv_wc as_read_by_program(const WorkCompletion& wc) {
  ibv_wc out;
  std::memcpy(&out, &wc, sizeof out);
  return out;
}

WorkCompletion recv_completion(WcFlags flags, std::uint32_t imm) {
  WorkCompletion wc{};
  wc.wr_id = 42;
  wc.status = WcStatus::rem_access_err;
  wc.opcode = WcOpcode::recv_rdma_with_imm;
  wc.vendor_err = 9;
  wc.byte_len = 64;
  wc.imm_data = imm;
  wc.qp_num = 0x11;
  wc.src_qp = 0x12;
  wc.wc_flags = flags;
  wc.pkey_index = 3;
  wc.slid = 4;
  wc.sl = 5;
  wc.dlid_path_bits = 6;
  return wc;
}

TEST(IbverbsTranslate, ACompletionForTheProgramHasEveryFieldWhereIbvWcHasIt) {
  WorkCompletion wc = recv_completion(WcFlags::grh | WcFlags::with_imm, 0x12345678);
  to_ibv_in_place(wc);
  const ibv_wc got = as_read_by_program(wc);
  EXPECT_EQ(got.wr_id, 42u);
  EXPECT_EQ(got.status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(got.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(got.vendor_err, 9u);
  EXPECT_EQ(got.byte_len, 64u);
  EXPECT_EQ(got.imm_data, htonl(0x12345678));
  EXPECT_EQ(got.qp_num, 0x11u);
  EXPECT_EQ(got.src_qp, 0x12u);
  EXPECT_EQ(got.wc_flags, unsigned{IBV_WC_GRH | IBV_WC_WITH_IMM});
  EXPECT_EQ(got.pkey_index, 3u);
  EXPECT_EQ(got.slid, 4u);
  EXPECT_EQ(got.sl, 5u);
  EXPECT_EQ(got.dlid_path_bits, 6u);
}

TEST(IbverbsTranslate, ACompletionForTheProgramKeepsItsInvalidatedRkeyAndZeroesNoImmediate) {
  WorkCompletion inv = recv_completion(WcFlags::with_inv, 0x1234);
  to_ibv_in_place(inv);
  EXPECT_EQ(as_read_by_program(inv).invalidated_rkey, 0x1234u);
  EXPECT_EQ(as_read_by_program(inv).wc_flags, unsigned{IBV_WC_WITH_INV});
  for (const WcFlags flags : {WcFlags::none, WcFlags::grh}) {
    WorkCompletion wc = recv_completion(flags, 0xdeadbeef);
    to_ibv_in_place(wc);
    EXPECT_EQ(as_read_by_program(wc).imm_data, 0u) << "wc_flags " << to_underlying(flags);
  }
}

TEST(IbverbsTranslate, AProgramsSgeArrayIsHandedToTheSimulatorAsItIs) {
  const std::array<ibv_sge, 2> theirs{{{0x1000, 64, 7}, {0x2000, 32, 8}}};
  const std::span<const Sge> ours = as_core(theirs.data(), theirs.size());
  EXPECT_EQ(static_cast<const void*>(ours.data()), static_cast<const void*>(theirs.data()));
  ASSERT_EQ(ours.size(), 2u);
  EXPECT_EQ(ours[1].addr, 0x2000u);
  EXPECT_EQ(ours[1].length, 32u);
  EXPECT_EQ(ours[1].lkey, 8u);
}

TEST(IbverbsTranslate, QpCapsAndGidsConvertBothWays) {
  const QpCap cap{1, 2, 3, 4, 5};
  const ibv_qp_cap theirs = to_ibv(cap);
  EXPECT_EQ(theirs.max_send_wr, 1u);
  EXPECT_EQ(theirs.max_recv_wr, 2u);
  EXPECT_EQ(theirs.max_send_sge, 3u);
  EXPECT_EQ(theirs.max_recv_sge, 4u);
  EXPECT_EQ(theirs.max_inline_data, 5u);
  const QpCap back = from_ibv(theirs);
  EXPECT_EQ(back.max_inline_data, 5u);
  EXPECT_EQ(back.max_send_sge, 3u);
  Gid gid;
  for (std::size_t i = 0; i < gid.raw.size(); ++i) gid.raw[i] = static_cast<std::uint8_t>(i + 1);
  const ibv_gid g = to_ibv(gid);
  EXPECT_EQ(g.raw[0], 1u);
  EXPECT_EQ(g.raw[15], 16u);
  EXPECT_EQ(from_ibv(g).raw, gid.raw);
}

}  // namespace
}  // namespace verbsim::abi
