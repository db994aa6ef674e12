# The simulator's rxe profile: Soft-RoCE as measured on Debian 12's kernel 6.1 and rdma-core 44
# (the conformance suite in the project's VM: docs/FIDELITY.md), with the kernel source
# (drivers/infiniband/sw/rxe) and librxe (rdma-core providers/rxe) named where they explain a
# value. Keys: verbsim/sim/profile.hpp and docs/FIDELITY.md, "Profile files".
name = rxe
family = rxe

pow2_minus_one_depths = true
post_checks_opcode = false            # librxe validates SGEs, inline and atomics only
ud_oversize_refused = false           # rxe_requester drops it and reports success
ud_ah_pd_checked = true               # measured: Ud.SendThroughAnAddressHandleOfAnotherPd (rxe_get_av)
local_mr_rkey_zero = true             # measured: Memory.KeysOfLocalAndRemoteRegions
create_reports_requested = true
retire_on_poll = false
cq_overrun_is_error = false
recv_cq_overrun_errors_qp = true      # rxe_resp: RESPST_ERR_CQ_OVERFLOW -> RESPST_ERROR
cq_ignore_overrun = false             # rxe_create_cq: any attr->flags is EOPNOTSUPP
post_send_needs_rts = true
rejected_send_stays_queued = true
rts_starts_send_queue = false         # modify rings no doorbell: the next post_send does
post_recv_in_err_completes = false
modify_trusts_cur_state = true        # rxe_qp_chk_attr: cur_state = attr->cur_qp_state
sqd_holds_while_draining = true       # rxe_qp_chk_attr: req.state == QP_STATE_DRAIN
pkey_index_checked = false
clean_cq_on_qp_destroy = false        # measured: Ordering.DestroyedQpsCompletionsInItsCq
last_wqe_reached_event = false        # rxe raises no such event
send_error_is_solicited = false       # the completer posts send CQEs with solicited = 0
responder_error_events = false
responder_errors_are_qp_op = true     # copy_data fails: RESPST_ERR_MALFORMED_WQE
qp_access_nak_inv_req = true          # check_op_valid: RESPST_ERR_UNSUPPORTED_OPCODE
comm_est_event = false
error_wc_zeroed = true                # make_send_cqe and the responder fill wr_id/status/qp_num
recv_wc_grh = true
coalesce_acks = false                 # rxe_req sets AckReq on the last packet of every message
atomic_takes_longer_buffer = true     # librxe validate_send_wr: only length < 8 is EINVAL
uc_on_srq = true                      # measured: Async.UcQpOnSrq
imm_write_takes_recv_first = true     # rxe_resp: RESPST_CHK_RESOURCE before RESPST_CHK_RKEY
window_range_is_mr = true             # measured: MemoryWindows.*PastWindowEnd
rereg_mr = false                      # measured: -4 (IBV_REREG_MR_ERR_CMD), EOPNOTSUPP
srq_resize = true                     # measured: max_wr 2, 16 -> depth 3, 31; 0 is EINVAL
parent_domain = false                 # measured: EOPNOTSUPP
import_device = false                 # measured: EOPNOTSUPP
type2_window_pins_qp = true           # measured: __rxe_cleanup's 50 s timeout, then a
                                      # refcount_t underflow (the random verb test)
free_type2_invalidate_oopses = true   # seen: the random verb test (docs/FIDELITY.md)
read_atomic_local_check_on_response = true  # measured: Precedence.*
rc_flushes_receives_first = true      # measured: SharedCq.*Flush*
ud_ttl_from_route = true              # measured: UdGrh.HopLimitIsTheIpv4Ttl
loopback_ipv4_checksum_zero = true    # measured: UdGrh.Ipv4HeaderFields
kernel_crossings = rxe
bad_lkey_status = LOC_QP_OP_ERR       # copy_data: no MR for the key is -EINVAL
pool_full_errno = EINVAL              # __rxe_add_to_pool
send_limit_errno = EINVAL             # librxe validate_send_wr
builder_limit_errno = ENOSPC          # librxe wr_set_sge_list, wr_set_inline_data*

max_qp_wr = 1048576
max_cqe = 32767
max_sge = 32
max_inline = 512
min_inline_per_sge = 16
gid_tbl_len = 1024                    # RXE_PORT_GID_TBL_LEN
max_msg_sz = 0x800000                 # RXE_PORT_MAX_MSG_SZ: 8 MiB
max_mw = 524287                       # measured: ibv_query_device on rxe
