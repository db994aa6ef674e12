// The three built-in profiles and what follows from them.
#include "fabric/profile.hpp"

#include <bit>
#include <cerrno>
#include <stdexcept>
#include <string>

namespace verbsim::sim {

namespace {

constexpr ProfileTraits kStrict{
    .profile = Profile::strict,
    .pow2_minus_one_depths = false,
    .post_checks_opcode = true,
    .ud_oversize_refused = true,
    .ud_ah_pd_checked = true,
    .local_mr_rkey_zero = false,
    .create_reports_requested = false,
    .retire_on_poll = true,
    .cq_overrun_is_error = true,
    .recv_cq_overrun_errors_qp = false,
    .cq_ignore_overrun = true,
    .post_send_needs_rts = true,
    .rejected_send_stays_queued = false,
    .rts_starts_send_queue = true,
    .post_recv_in_err_completes = true,
    .modify_trusts_cur_state = false,
    .sqd_holds_while_draining = false,
    .pkey_index_checked = true,
    .clean_cq_on_qp_destroy = true,
    .last_wqe_reached_event = true,
    .send_error_is_solicited = true,
    .responder_error_events = true,
    .responder_errors_are_qp_op = false,
    .qp_access_nak_inv_req = false,
    .comm_est_event = true,
    .error_wc_zeroed = false,
    .recv_wc_grh = false,
    .coalesce_acks = true,
    .atomic_takes_longer_buffer = false,
    .uc_on_srq = false,
    .imm_write_takes_recv_first = false,
    .window_range_is_mr = false,
    .rereg_mr = true,
    .srq_resize = false,  // mlx5_ib_modify_srq refuses IB_SRQ_MAX_WR
    .parent_domain = true,
    .import_device = true,
    .kernel_crossings = ProviderModel::mlx5,
    .type2_window_pins_qp = false,
    .free_type2_invalidate_oopses = false,
    .bad_lkey_status = WcStatus::loc_prot_err,
    .pool_full_errno = ENOMEM,
    .send_limit_errno = ENOMEM,
    .limits = {
        .max_qp_wr = 32768,
        .max_cqe = 4194303,
        .max_sge = 30,
        .max_inline = 512,
        .min_inline_per_sge = 0,
        .gid_tbl_len = 2,
        .max_msg_sz = 0x80000000u,
        .max_mw = 1u << 16,
    },
};

constexpr ProfileTraits kRxe{
    .profile = Profile::rxe,
    .pow2_minus_one_depths = true,
    .post_checks_opcode = false,   // librxe validates SGEs, inline and atomics only
    .ud_oversize_refused = false,  // rxe_requester drops it and reports success
    .ud_ah_pd_checked = true,      // rxe_get_av: "PDs don't match for AH and QP"
    .local_mr_rkey_zero = true,    // measured in the VM (Memory.KeysOfLocalAndRemoteRegions)
    .create_reports_requested = true,
    .retire_on_poll = false,
    .cq_overrun_is_error = false,
    .recv_cq_overrun_errors_qp = true,  // rxe_resp: RESPST_ERR_CQ_OVERFLOW -> RESPST_ERROR
    .cq_ignore_overrun = false,         // rxe_create_cq: any attr->flags is EOPNOTSUPP
    .post_send_needs_rts = true,
    .rejected_send_stays_queued = true,
    .rts_starts_send_queue = false,  // modify rings no doorbell: the next post_send does
    .post_recv_in_err_completes = false,
    .modify_trusts_cur_state = true,  // rxe_qp_chk_attr: cur_state = attr->cur_qp_state
    .sqd_holds_while_draining = true,  // rxe_qp_chk_attr: req.state == QP_STATE_DRAIN
    .pkey_index_checked = false,
    .clean_cq_on_qp_destroy = false,
    .last_wqe_reached_event = false,   // rxe raises no such event
    .send_error_is_solicited = false,  // the completer posts send CQEs with solicited = 0
    .responder_error_events = false,
    .responder_errors_are_qp_op = true,  // copy_data fails: RESPST_ERR_MALFORMED_WQE
    .qp_access_nak_inv_req = true,       // check_op_valid: RESPST_ERR_UNSUPPORTED_OPCODE
    .comm_est_event = false,
    .error_wc_zeroed = true,   // make_send_cqe and the responder fill only wr_id/status/qp_num
    .recv_wc_grh = true,
    .coalesce_acks = false,  // rxe_req sets AckReq on the last packet of every message
    .atomic_takes_longer_buffer = true,  // librxe validate_send_wr: only length < 8 is EINVAL
    .uc_on_srq = true,                   // measured: conformance Async.UcOnSrq*
    .imm_write_takes_recv_first = true,  // rxe_resp: RESPST_CHK_RESOURCE before RESPST_CHK_RKEY
    .window_range_is_mr = true,          // measured: conformance MemoryWindows.*PastWindowEnd
    .rereg_mr = false,                   // measured: -4 (IBV_REREG_MR_ERR_CMD), EOPNOTSUPP
    .srq_resize = true,                  // measured: max_wr 2, 16 -> depth 3, 31; 0 is EINVAL
    .parent_domain = false,              // measured: EOPNOTSUPP
    .import_device = false,              // measured: EOPNOTSUPP
    .kernel_crossings = ProviderModel::rxe,
    .type2_window_pins_qp = true,        // measured: __rxe_cleanup's 50 s timeout, then
                                         // refcount_t underflow (the random verb test)
    .free_type2_invalidate_oopses = true,        // seen: the random verb test (docs/FIDELITY.md)
    .bad_lkey_status = WcStatus::loc_qp_op_err,  // copy_data: no MR for the key is -EINVAL
    .pool_full_errno = EINVAL,   // __rxe_add_to_pool
    .send_limit_errno = EINVAL,  // librxe validate_send_wr
    .limits = {
        .max_qp_wr = 1048576,
        .max_cqe = 32767,
        .max_sge = 32,
        .max_inline = 512,
        .min_inline_per_sge = 16,
        .gid_tbl_len = 1024,  // RXE_PORT_GID_TBL_LEN
        .max_msg_sz = 0x800000,  // RXE_PORT_MAX_MSG_SZ: 8 MiB
        .max_mw = 524287,  // measured: ibv_query_device on rxe
    },
};

constexpr ProfileTraits kMlx5 = [] {
  ProfileTraits t = kStrict;
  t.profile = Profile::mlx5;
  t.post_send_needs_rts = false;
  t.ud_ah_pd_checked = false;  // the AV is copied into the WQE; nothing names a PD
  return t;
}();

}  // namespace

const ProfileTraits& ProfileTraits::of(Profile p) noexcept {
  switch (p) {
    case Profile::rxe: return kRxe;
    case Profile::mlx5: return kMlx5;
    case Profile::strict: break;
  }
  return kStrict;
}

std::uint32_t ProfileTraits::round_wq(std::uint32_t n) const noexcept {
  if (n == 0) return 0;
  return pow2_minus_one_depths ? std::bit_ceil(n + 1) - 1 : std::bit_ceil(n);
}

std::uint32_t ProfileTraits::round_cq(std::uint32_t n) const noexcept {
  if (n == 0) return 0;
  return std::bit_ceil(n + 1) - 1;
}

std::string_view to_string(Profile p) noexcept {
  switch (p) {
    case Profile::strict: return "strict";
    case Profile::rxe: return "rxe";
    case Profile::mlx5: return "mlx5";
  }
  return "unknown";
}

Profile parse_profile(std::string_view name) {
  if (name == "strict" || name.empty()) return Profile::strict;
  if (name == "rxe") return Profile::rxe;
  if (name == "mlx5") return Profile::mlx5;
  throw std::invalid_argument("unknown simulator profile '" + std::string(name) +
                              "' (expected strict, rxe or mlx5)");
}

}  // namespace verbsim::sim
