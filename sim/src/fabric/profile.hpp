// Where the simulated stacks differ: one table of behaviour switches, errnos and device limits
// per profile, chosen once per world. The only home of a provider difference.
//
// A profile is data: the built-in ones (strict, rxe, mlx5) are profile files compiled in
// (sim/profiles/*.profile), and a world may load another (VERBSIM_PROFILE=<file>,
// Config::profile_file; the format is verbsim/sim/profile.hpp's). The tables below are the one
// list of what a profile holds: the struct, the file's keys and their docs come from them.
#pragma once

#include <cstdint>
#include <string>

#include "verbsim/sim/profile.hpp"
#include "verbsim/sim/world.hpp"
#include "verbsim/types.hpp"
#include "verbsim/verb_log.hpp"

namespace verbsim::sim {

// The kinds of value a profile holds; each names the C++ type and how a file spells it.
namespace profile_kind {
struct Switch { using type = bool; };                  // true | false
struct Errno { using type = int; };                    // EINVAL, ENOMEM, ...
struct Status { using type = WcStatus; };              // LOC_QP_OP_ERR, ...
struct Kernel { using type = ProviderModel; };         // rxe | mlx5
struct Count { using type = std::uint32_t; };          // decimal or 0x hexadecimal
}  // namespace profile_kind

// X(kind, key, doc): every behaviour a profile sets, in the order a profile file lists them.
#define VERBSIM_PROFILE_BEHAVIOURS(X)                                                              \
  X(Switch, pow2_minus_one_depths, "SQ and RQ depths round up to 2^n - 1 (rxe); else to 2^n "     \
    "(CQ and SRQ depths are 2^n - 1 everywhere)")                                                  \
  X(Switch, post_checks_opcode, "post_send refuses an opcode the QP type lacks (EINVAL); else it " \
    "fails later, in its completion (LOC_QP_OP_ERR)")                                              \
  X(Switch, ud_oversize_refused, "post_send refuses a UD message above the path MTU; else it "     \
    "completes unsent")                                                                            \
  X(Switch, ud_ah_pd_checked, "a UD send whose AH is of another PD than the QP fails with "        \
    "LOC_QP_OP_ERR")                                                                               \
  X(Switch, local_mr_rkey_zero, "an MR without remote access has rkey 0 (its lkey otherwise)")     \
  X(Switch, create_reports_requested, "create_qp's cap and create_srq's attributes echo the "      \
    "request; only query tells the depth given")                                                   \
  X(Switch, retire_on_poll, "a send slot frees when its completion is polled (hardware), not "     \
    "when the WR completes")                                                                       \
  X(Switch, cq_overrun_is_error, "CQ overrun is a CQ error that takes the CQ's QPs to ERR; else "  \
    "the completion is dropped with one CQ_ERR event")                                             \
  X(Switch, recv_cq_overrun_errors_qp, "a receive lost to a full CQ takes the responder to ERR "   \
    "unacknowledged")                                                                              \
  X(Switch, cq_ignore_overrun, "create_cq takes IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN (else "          \
    "EOPNOTSUPP)")                                                                                 \
  X(Switch, post_send_needs_rts, "post_send in RESET, INIT or RTR is EINVAL")                      \
  X(Switch, rejected_send_stays_queued, "a send refused before RTS stays queued and runs at the "  \
    "next doorbell in RTS; its EINVAL came from the kernel (errno is set)")                        \
  X(Switch, rts_starts_send_queue, "the move to RTS starts WRs queued before it; else they wait "   \
    "for the next post_send")                                                                      \
  X(Switch, post_recv_in_err_completes, "a receive posted to a QP in ERR completes with "          \
    "WR_FLUSH_ERR; else it never completes")                                                       \
  X(Switch, modify_trusts_cur_state, "modify_qp checks the transition from IBV_QP_CUR_STATE as "    \
    "given, not from the QP's state")                                                              \
  X(Switch, sqd_holds_while_draining, "from SQD only ERR is allowed until the SQ has drained")     \
  X(Switch, pkey_index_checked, "modify_qp refuses a pkey_index past the P_Key table")             \
  X(Switch, clean_cq_on_qp_destroy, "destroying or resetting a QP removes its completions from "   \
    "its CQs")                                                                                     \
  X(Switch, last_wqe_reached_event, "a QP on an SRQ that goes to ERR raises QP_LAST_WQE_REACHED") \
  X(Switch, send_error_is_solicited, "a send completing in error fires a solicited-only arm")      \
  X(Switch, responder_error_events, "the responder raises QP_ACCESS_ERR / QP_REQ_ERR")             \
  X(Switch, responder_errors_are_qp_op, "a receive that cannot take the message (too small, no "   \
    "LOCAL_WRITE) is LOC_QP_OP_ERR and a NAK remote op error; else LOC_LEN_ERR / LOC_PROT_ERR")    \
  X(Switch, qp_access_nak_inv_req, "a request the QP's access flags forbid is NAKed as an "        \
    "invalid request (REM_INV_REQ_ERR), not an access error")                                      \
  X(Switch, comm_est_event, "a QP in RTR raises COMM_EST when its first packet arrives")           \
  X(Switch, error_wc_zeroed, "an error completion has opcode 0 and byte_len 0")                    \
  X(Switch, recv_wc_grh, "every receive completion says IBV_WC_GRH (RoCE)")                        \
  X(Switch, coalesce_acks, "the responder ACKs only the last of back-to-back messages of a QP")    \
  X(Switch, atomic_takes_longer_buffer, "an atomic's local SGEs may hold more than 8 bytes")       \
  X(Switch, uc_on_srq, "a UC QP may receive from an SRQ")                                          \
  X(Switch, imm_write_takes_recv_first, "a WRITE with immediate whose rkey or range fails has "    \
    "taken a receive, which completes with REM_ACCESS_ERR")                                        \
  X(Switch, window_range_is_mr, "an access through a window is checked against its MR's range, "  \
    "not the window's")                                                                            \
  X(Switch, rereg_mr, "ibv_rereg_mr is supported (else EOPNOTSUPP)")                               \
  X(Switch, srq_resize, "ibv_modify_srq may change max_wr (IBV_DEVICE_SRQ_RESIZE)")                \
  X(Switch, parent_domain, "ibv_alloc_parent_domain is supported (else EOPNOTSUPP)")               \
  X(Switch, import_device, "ibv_import_device is supported (else EOPNOTSUPP)")                     \
  X(Switch, type2_window_pins_qp, "a bound type 2 window holds a reference on its QP: the kernel " \
    "blocks destroying the QP (the simulator destroys it and warns)")                              \
  X(Switch, free_type2_invalidate_oopses, "LOCAL_INV or SEND_WITH_INV naming an unbound type 2 "   \
    "window oopses the kernel (the simulator fails the WR and warns)")                             \
  X(Switch, read_atomic_local_check_on_response, "a READ's or atomic's local SGEs are checked "   \
    "when the response lands, so a bad rkey is found first")                                       \
  X(Switch, rc_flushes_receives_first, "an RC QP going to ERR flushes its receives before its "    \
    "sends")                                                                                       \
  X(Switch, ud_ttl_from_route, "a UD message's IPv4 TTL is the route's (64), not the AH's hop "    \
    "limit")                                                                                       \
  X(Switch, loopback_ipv4_checksum_zero, "a message to its own device carries IPv4 checksum 0 "    \
    "in the receiver's GRH area")                                                                  \
  X(Kernel, kernel_crossings, "which verbs enter the kernel (the verb log's summary): rxe's "      \
    "post_send does, mlx5's data path does not")                                                   \
  X(Status, bad_lkey_status, "status of a send whose SGE's lkey is unknown or of another PD")      \
  X(Errno, pool_full_errno, "errno of a QP, CQ, PD, SRQ or AH past the device's max")              \
  X(Errno, send_limit_errno, "errno of post_send with too many SGEs or too much inline data")      \
  X(Errno, builder_limit_errno, "errno ibv_wr_complete returns for a WR past the QP's SGE or "     \
    "inline limits")

// X(key, doc): what a device of the profile reports and enforces (ibv_query_device,
// ibv_query_port, create_qp's limits); every one a Count.
#define VERBSIM_PROFILE_LIMITS(X)                                                                  \
  X(max_qp_wr, "work requests per queue")                                                          \
  X(max_cqe, "completions per CQ")                                                                 \
  X(max_sge, "SGEs per work request")                                                              \
  X(max_inline, "inline bytes per send")                                                           \
  X(min_inline_per_sge, "inline room a QP is given per send SGE at least (rxe: 16)")              \
  X(gid_tbl_len, "a port's GID table size (entries past the two in use are empty)")               \
  X(max_msg_sz, "a port's largest message")                                                        \
  X(max_mw, "memory windows per device")

struct DeviceLimits {
#define VERBSIM_PROFILE_LIMIT_MEMBER(key, doc) std::uint32_t key;
  VERBSIM_PROFILE_LIMITS(VERBSIM_PROFILE_LIMIT_MEMBER)
#undef VERBSIM_PROFILE_LIMIT_MEMBER
};

struct ProfileTraits {
  std::string name;  // "rxe", or what a profile file calls itself
  Profile family;    // the built-in profile it is most like: fw_ver, tests' expectations
#define VERBSIM_PROFILE_MEMBER(kind, key, doc) profile_kind::kind::type key;
  VERBSIM_PROFILE_BEHAVIOURS(VERBSIM_PROFILE_MEMBER)
#undef VERBSIM_PROFILE_MEMBER
  DeviceLimits limits;

  // A built-in profile (parsed once from its compiled-in file).
  static const ProfileTraits& of(Profile p) noexcept;
  // What a profile file states.
  static ProfileTraits from(const ProfileFile& file);
  std::uint32_t round_wq(std::uint32_t n) const noexcept;  // SQ/RQ depth given for `n`
  std::uint32_t round_cq(std::uint32_t n) const noexcept;  // CQ/SRQ depth given for `n`
};

// The text of a built-in profile's file (sim/profiles/<name>.profile, compiled in).
std::string_view builtin_profile_source(Profile p) noexcept;

}  // namespace verbsim::sim
