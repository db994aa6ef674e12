// Where the simulated stacks (strict, rxe, mlx5) differ: one table of behaviour switches and
// device limits per profile, chosen once per world. The only home of a provider difference.
#pragma once

#include <cstdint>

#include "verbsim/sim/world.hpp"
#include "verbsim/types.hpp"
#include "verbsim/verb_log.hpp"

namespace verbsim::sim {

// What a device of the profile reports and enforces (ibv_query_device, ibv_query_port).
struct DeviceLimits {
  std::uint32_t max_qp_wr;
  std::uint32_t max_cqe;
  std::uint32_t max_sge;
  std::uint32_t max_inline;
  std::uint32_t min_inline_per_sge;  // rxe reports at least 16 bytes per SGE as inline room
  int gid_tbl_len;                   // port's GID table size; entries past the two in use are empty
  std::uint32_t max_msg_sz;          // port's max_msg_sz
  std::uint32_t max_mw;              // memory windows per device
};

// Where the profiles differ, as data chosen once per world (no profile branches elsewhere):
// behaviour switches, then the device's limits.
struct ProfileTraits {
  Profile profile;
  bool pow2_minus_one_depths;     // rxe: 2^n - 1; strict/mlx5: SQ/RQ 2^n, CQ/SRQ 2^n - 1
  bool post_checks_opcode;        // false on rxe: an opcode the QP type lacks fails later, in
                                  // its completion (LOC_QP_OP_ERR)
  bool ud_oversize_refused;       // false on rxe: a UD send above the MTU completes unsent
  bool ud_ah_pd_checked;          // a UD send whose AH is of another PD than the QP fails
                                  // with LOC_QP_OP_ERR (rxe_get_av); mlx5 copies the AV into
                                  // the WQE and sends it
  bool local_mr_rkey_zero;        // rxe: an MR without remote access has rkey 0 (its lkey
                                  // otherwise); mlx5: rkey = lkey always
  bool create_reports_requested;  // rxe: create_qp's cap and create_srq's attributes echo
                                  // the request; query tells the truth
  bool retire_on_poll;            // send slot frees when its completion is polled (hardware)
  bool cq_overrun_is_error;       // strict: CQ error + QPs to ERR; rxe: drop + event per entry
  bool recv_cq_overrun_errors_qp;  // rxe: a receive lost to a full CQ takes the responder to
                                   // ERR unacknowledged (the requester runs out of retries)
  bool cq_ignore_overrun;         // IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN; false on rxe, whose
                                  // rxe_create_cq refuses any create flag (EOPNOTSUPP)
  bool post_send_needs_rts;       // EINVAL for post_send in RESET/INIT/RTR
  bool rejected_send_stays_queued;  // rxe quirk: the EINVAL'd WR still runs once in RTS
  bool rts_starts_send_queue;     // false on rxe: WRs queued before RTS wait for a doorbell
  bool post_recv_in_err_completes;  // false on rxe: the receive is never completed
  bool modify_trusts_cur_state;   // rxe checks the transition from IBV_QP_CUR_STATE as given
  bool sqd_holds_while_draining;  // rxe: from SQD only ERR is allowed until the SQ has drained
  bool pkey_index_checked;        // false on rxe: any pkey_index is accepted
  bool clean_cq_on_qp_destroy;    // mlx5 removes a destroyed/reset QP's CQEs
  bool last_wqe_reached_event;    // QP_LAST_WQE_REACHED when a QP on an SRQ goes to ERR
  bool send_error_is_solicited;   // a send completing in error fires a solicited-only arm
  bool responder_error_events;    // QP_ACCESS_ERR / QP_REQ_ERR on the responder
  bool responder_errors_are_qp_op;  // rxe: a receive that cannot take the data (too small,
                                    // no LOCAL_WRITE) is LOC_QP_OP_ERR, NAK "remote op error"
  bool qp_access_nak_inv_req;     // rxe: a request the QP's access flags forbid is NAKed as
                                  // an invalid request (REM_INV_REQ_ERR), not an access error
  bool comm_est_event;            // COMM_EST when a QP in RTR receives its first packet
  bool error_wc_zeroed;           // rxe: an error completion has opcode 0 and byte_len 0
  bool recv_wc_grh;               // rxe: every receive completion says IBV_WC_GRH (RoCE)
  bool coalesce_acks;             // the responder ACKs only the last of back-to-back messages
                                  // of a QP (hardware); rxe ACKs every message
  bool atomic_takes_longer_buffer;  // rxe: an atomic's local SGEs may hold more than 8 bytes
                                    // (the value lands in the first 8; byte_len says them all)
  bool uc_on_srq;                 // rxe: a UC QP may receive from an SRQ
  bool imm_write_takes_recv_first;  // rxe: a WRITE with immediate whose rkey or range fails has
                                    // taken a receive, which completes with REM_ACCESS_ERR
  bool window_range_is_mr;  // rxe: an access through a window is checked against its MR's
                            // range, not the window's (rxe_resp's check_rkey)
  bool rereg_mr;            // false on rxe: ibv_rereg_mr is EOPNOTSUPP
  bool srq_resize;          // rxe: ibv_modify_srq may change max_wr (IBV_DEVICE_SRQ_RESIZE)
  bool parent_domain;       // false on rxe: ibv_alloc_parent_domain is EOPNOTSUPP
  bool import_device;       // false on rxe: ibv_import_device is EOPNOTSUPP
  ProviderModel kernel_crossings;  // which verbs enter the kernel (the verb log's summary):
                                   // rxe's post_send does, mlx5's data path does not
  bool type2_window_pins_qp;      // rxe: a bound type 2 window holds a reference on its QP, so
                                  // destroying the QP blocks 50 s and frees it under the window
                                  // (kernel 6.1): the simulator destroys it and warns
  bool free_type2_invalidate_oopses;  // rxe: LOCAL_INV or SEND_WITH_INV naming a type 2 window
                                      // that is not bound oopses the kernel: the simulator
                                      // fails the WR and warns
  WcStatus bad_lkey_status;       // a send SGE whose lkey is unknown or of another PD
                                  // (rxe: LOC_QP_OP_ERR; bounds are LOC_PROT_ERR everywhere)
  int pool_full_errno;   // a QP, CQ, PD, SRQ or AH past the device's max_*: EINVAL on rxe
                         // (__rxe_add_to_pool), ENOMEM on mlx5 (firmware out of resources);
                         // an MR past max_mr is ENOMEM everywhere
  int send_limit_errno;  // too many SGEs or inline too large: ENOMEM (mlx5), EINVAL (rxe)
  DeviceLimits limits;

  static const ProfileTraits& of(Profile p) noexcept;
  std::uint32_t round_wq(std::uint32_t n) const noexcept;  // SQ/RQ depth given for `n`
  std::uint32_t round_cq(std::uint32_t n) const noexcept;  // CQ/SRQ depth given for `n`
};

}  // namespace verbsim::sim
