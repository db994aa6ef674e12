# The simulator's strict profile: hardware-like and by the book. Queue depths round up to a
# power of two, a send slot frees only when its completion is polled, CQ overrun is a CQ error
# that takes its QPs to ERR, posting sends before RTS is EINVAL. Keys: verbsim/sim/profile.hpp
# and docs/FIDELITY.md, "Profile files".
name = strict
family = strict

pow2_minus_one_depths = false
post_checks_opcode = true
ud_oversize_refused = true
ud_ah_pd_checked = true
local_mr_rkey_zero = false
create_reports_requested = false
retire_on_poll = true
cq_overrun_is_error = true
recv_cq_overrun_errors_qp = false
cq_ignore_overrun = true
post_send_needs_rts = true
rejected_send_stays_queued = false
rts_starts_send_queue = true
post_recv_in_err_completes = true
modify_trusts_cur_state = false
sqd_holds_while_draining = false
pkey_index_checked = true
clean_cq_on_qp_destroy = true
last_wqe_reached_event = true
send_error_is_solicited = true
responder_error_events = true
responder_errors_are_qp_op = false
qp_access_nak_inv_req = false
comm_est_event = true
error_wc_zeroed = false
recv_wc_grh = false
coalesce_acks = true
atomic_takes_longer_buffer = false
uc_on_srq = false
imm_write_takes_recv_first = false
window_range_is_mr = false
rereg_mr = true
srq_resize = false                    # mlx5_ib_modify_srq refuses IB_SRQ_MAX_WR
parent_domain = true
import_device = true
type2_window_pins_qp = false
free_type2_invalidate_oopses = false
read_atomic_local_check_on_response = false
rc_flushes_receives_first = false
ud_ttl_from_route = false
loopback_ipv4_checksum_zero = false
kernel_crossings = mlx5
bad_lkey_status = LOC_PROT_ERR
pool_full_errno = ENOMEM              # firmware out of resources
send_limit_errno = ENOMEM             # providers/mlx5/qp.c
builder_limit_errno = ENOMEM          # providers/mlx5/qp.c

max_qp_wr = 32768
max_cqe = 4194303
max_sge = 30
max_inline = 512
min_inline_per_sge = 0
gid_tbl_len = 2
max_msg_sz = 0x80000000
max_mw = 65536
