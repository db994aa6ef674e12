// The expected-behaviour tables, one per backend. The rxe table is what real Soft-RoCE does
// (Debian 12, kernel 6.1, rdma-core 44, measured in the VM with tests/conformance/fidelity.sh);
// the strict and mlx5 tables are what the simulator's profiles of those names promise.
#include <cerrno>

#include "conformance.hpp"

namespace verbsim::conformance {

namespace {

constexpr Expect kRxe{
    .profile = "rxe",
    .max_qp_wr = 1048576,
    .max_sge = 32,
    .max_cqe = 32767,
    .max_qp_rd_atom = 128,
    .gid_tbl_len = 1024,
    .pkey_tbl_len = 1,
    .max_msg_sz = 0x800000,
    .wq_pow2_minus_one = true,
    .create_echoes_requested_wr = true,
    .local_mr_rkey_zero = true,
    .default_inline = 16,
    .sge_for_inline_64 = 4,
    .post_send_before_rts = EINVAL,
    .early_send_kept = true,
    .rts_starts_send_queue = false,
    .post_recv_in_err_completes = false,
    .slot_frees_without_poll = true,
    .send_too_many_sge = EINVAL,
    .inline_too_long = EINVAL,
    .bad_opcode_post = 0,
    .bad_opcode_status = WcStatus::loc_qp_op_err,
    .ud_oversize_post = 0,
    .cq_overrun_drops = true,
    .ignore_overrun_create = EOPNOTSUPP,  // rxe_create_cq refuses any create flag
    .recv_cq_overrun_acked = false,
    .error_wc_zeroed = true,
    .rc_recv_grh = true,
    .bad_lkey = WcStatus::loc_qp_op_err,
    .recv_too_small = WcStatus::loc_qp_op_err,
    .recv_too_small_requester = WcStatus::rem_op_err,
    .recv_no_local_write = WcStatus::loc_qp_op_err,
    .qp_access_violation = WcStatus::rem_inv_req_err,
    .responder_error_events = false,
    .comm_est_event = false,
    .send_error_fires_solicited_arm = false,
    .last_wqe_reached_event = false,
    .trusts_cur_state = true,
    .sqd_holds_while_draining = true,
    .pkey_index_checked = false,
    .ud_recv_too_small = WcStatus::loc_qp_op_err,
    .ud_recv_too_small_errors_qp = true,
    .atomic_takes_longer_buffer = true,
    .uc_on_srq = true,
    .imm_write_error_takes_recv = true,
    .max_mw = 524287,
    .mw_range_is_mr = true,
    .rereg_mr = false,
    .local_check_on_response = true,
    .post_state_error_in_errno = true,
    .ud_ttl_is_hop_limit = false,
    .loopback_ipv4_checksum = false,
    .srq_recv_checked_in_qp_pd = true,
    .rc_flushes_receives_first = true,
    .ud_ah_pd_checked = true,
    .qp_destroy_cleans_cq = false,
};

constexpr Expect kStrict{
    .profile = "strict",
    .max_qp_wr = 32768,
    .max_sge = 30,
    .max_cqe = 4194303,
    .max_qp_rd_atom = 128,
    .gid_tbl_len = 2,
    .pkey_tbl_len = 1,
    .max_msg_sz = 0x80000000u,
    .wq_pow2_minus_one = false,
    .create_echoes_requested_wr = false,
    .local_mr_rkey_zero = false,
    .default_inline = 0,
    .sge_for_inline_64 = 1,
    .post_send_before_rts = EINVAL,
    .early_send_kept = false,
    .rts_starts_send_queue = true,
    .post_recv_in_err_completes = true,
    .slot_frees_without_poll = false,
    .send_too_many_sge = ENOMEM,
    .inline_too_long = ENOMEM,
    .bad_opcode_post = EINVAL,
    .bad_opcode_status = WcStatus::loc_qp_op_err,
    .ud_oversize_post = EINVAL,
    .cq_overrun_drops = false,
    .ignore_overrun_create = 0,
    .recv_cq_overrun_acked = true,
    .error_wc_zeroed = false,
    .rc_recv_grh = false,
    .bad_lkey = WcStatus::loc_prot_err,
    .recv_too_small = WcStatus::loc_len_err,
    .recv_too_small_requester = WcStatus::rem_inv_req_err,
    .recv_no_local_write = WcStatus::loc_prot_err,
    .qp_access_violation = WcStatus::rem_access_err,
    .responder_error_events = true,
    .comm_est_event = true,
    .send_error_fires_solicited_arm = true,
    .last_wqe_reached_event = true,
    .trusts_cur_state = false,
    .sqd_holds_while_draining = false,
    .pkey_index_checked = true,
    .ud_recv_too_small = WcStatus::loc_len_err,
    .ud_recv_too_small_errors_qp = true,
    .atomic_takes_longer_buffer = false,
    .uc_on_srq = false,
    .imm_write_error_takes_recv = false,
    .max_mw = 65536,
    .mw_range_is_mr = false,
    .rereg_mr = true,
    .local_check_on_response = false,
    .post_state_error_in_errno = false,
    .ud_ttl_is_hop_limit = true,
    .loopback_ipv4_checksum = true,
    .srq_recv_checked_in_qp_pd = true,
    .rc_flushes_receives_first = false,
    .ud_ah_pd_checked = true,
    .qp_destroy_cleans_cq = true,
};

constexpr Expect kMlx5 = [] {
  Expect e = kStrict;
  e.profile = "mlx5";
  e.post_send_before_rts = 0;
  e.early_send_kept = true;
  e.ud_ah_pd_checked = false;
  return e;
}();

std::uint32_t pow2_at_least(std::uint32_t n) noexcept {
  std::uint32_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

}  // namespace

std::uint32_t Expect::wq_depth(std::uint32_t n) const noexcept {
  if (n == 0) return 0;
  return wq_pow2_minus_one ? pow2_at_least(n + 1) - 1 : pow2_at_least(n);
}

std::uint32_t Expect::cq_depth(std::uint32_t n) noexcept { return pow2_at_least(n + 1) - 1; }

const Expect& expect_for(Target t, std::string_view device_name, std::string_view fw_ver) {
  switch (t) {
    case Target::sim_rxe: return kRxe;
    case Target::sim_strict: return kStrict;
    case Target::sim_mlx5: return kMlx5;
    case Target::ibverbs:
    case Target::sim_file: break;  // a file's profile: its family, in fw_ver
  }
  if (fw_ver.starts_with("verbsim-")) {
    if (fw_ver.ends_with("(rxe)")) return kRxe;
    if (fw_ver.ends_with("(mlx5)")) return kMlx5;
    return kStrict;
  }
  if (device_name.starts_with("rxe")) return kRxe;
  if (device_name.starts_with("mlx5")) return kMlx5;
  return kStrict;
}

}  // namespace verbsim::conformance
