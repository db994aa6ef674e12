// Conversions between verbsim's value types and libibverbs' structs, both ways: the ibverbs
// backend turns core values into libibverbs' (and reads back what a provider wrote), the
// libibverbs drop-in turns a program's libibverbs structs into core values (and writes back
// completions). Header-only: the drop-in links neither the system libibverbs nor, in sanitizer
// builds, the core's library.
//
// Every core enum has the numeric values of its libibverbs counterpart, so enums convert with a
// static_cast; the static_asserts below prove each value. Where a core struct has libibverbs'
// layout (Sge, WorkCompletion, QpCap, Gid: asserted below) it is reinterpreted or bit_cast, not
// copied field by field; the other structs (AhAttr, QpAttr) differ and are copied field by field.
// imm_data is host order in verbsim and network order in libibverbs.
#pragma once

#include <arpa/inet.h>
#include <endian.h>
#include <infiniband/verbs.h>

#include <bit>
#include <cstddef>
#include <span>

#include "verbsim/types.hpp"

namespace verbsim::abi {

template <class E>
constexpr int num(E e) noexcept {
  return static_cast<int>(e);
}

// ---------------------------------------------------------------------------------------------
// Enum equality, value by value.

static_assert(num(QpType::rc) == IBV_QPT_RC);
static_assert(num(QpType::uc) == IBV_QPT_UC);
static_assert(num(QpType::ud) == IBV_QPT_UD);

static_assert(num(QpState::reset) == IBV_QPS_RESET);
static_assert(num(QpState::init) == IBV_QPS_INIT);
static_assert(num(QpState::rtr) == IBV_QPS_RTR);
static_assert(num(QpState::rts) == IBV_QPS_RTS);
static_assert(num(QpState::sqd) == IBV_QPS_SQD);
static_assert(num(QpState::sqe) == IBV_QPS_SQE);
static_assert(num(QpState::err) == IBV_QPS_ERR);

static_assert(num(Mtu::mtu_256) == IBV_MTU_256);
static_assert(num(Mtu::mtu_512) == IBV_MTU_512);
static_assert(num(Mtu::mtu_1024) == IBV_MTU_1024);
static_assert(num(Mtu::mtu_2048) == IBV_MTU_2048);
static_assert(num(Mtu::mtu_4096) == IBV_MTU_4096);

static_assert(num(WrOpcode::rdma_write) == IBV_WR_RDMA_WRITE);
static_assert(num(WrOpcode::rdma_write_with_imm) == IBV_WR_RDMA_WRITE_WITH_IMM);
static_assert(num(WrOpcode::send) == IBV_WR_SEND);
static_assert(num(WrOpcode::send_with_imm) == IBV_WR_SEND_WITH_IMM);
static_assert(num(WrOpcode::rdma_read) == IBV_WR_RDMA_READ);
static_assert(num(WrOpcode::atomic_cmp_and_swp) == IBV_WR_ATOMIC_CMP_AND_SWP);
static_assert(num(WrOpcode::atomic_fetch_and_add) == IBV_WR_ATOMIC_FETCH_AND_ADD);
static_assert(num(WrOpcode::local_inv) == IBV_WR_LOCAL_INV);
static_assert(num(WrOpcode::bind_mw) == IBV_WR_BIND_MW);
static_assert(num(WrOpcode::send_with_inv) == IBV_WR_SEND_WITH_INV);

static_assert(num(WcOpcode::send) == IBV_WC_SEND);
static_assert(num(WcOpcode::rdma_write) == IBV_WC_RDMA_WRITE);
static_assert(num(WcOpcode::rdma_read) == IBV_WC_RDMA_READ);
static_assert(num(WcOpcode::comp_swap) == IBV_WC_COMP_SWAP);
static_assert(num(WcOpcode::fetch_add) == IBV_WC_FETCH_ADD);
static_assert(num(WcOpcode::bind_mw) == IBV_WC_BIND_MW);
static_assert(num(WcOpcode::local_inv) == IBV_WC_LOCAL_INV);
static_assert(num(WcOpcode::recv) == IBV_WC_RECV);
static_assert(num(WcOpcode::recv_rdma_with_imm) == IBV_WC_RECV_RDMA_WITH_IMM);

static_assert(num(WcStatus::success) == IBV_WC_SUCCESS);
static_assert(num(WcStatus::loc_len_err) == IBV_WC_LOC_LEN_ERR);
static_assert(num(WcStatus::loc_qp_op_err) == IBV_WC_LOC_QP_OP_ERR);
static_assert(num(WcStatus::loc_eec_op_err) == IBV_WC_LOC_EEC_OP_ERR);
static_assert(num(WcStatus::loc_prot_err) == IBV_WC_LOC_PROT_ERR);
static_assert(num(WcStatus::wr_flush_err) == IBV_WC_WR_FLUSH_ERR);
static_assert(num(WcStatus::mw_bind_err) == IBV_WC_MW_BIND_ERR);
static_assert(num(WcStatus::bad_resp_err) == IBV_WC_BAD_RESP_ERR);
static_assert(num(WcStatus::loc_access_err) == IBV_WC_LOC_ACCESS_ERR);
static_assert(num(WcStatus::rem_inv_req_err) == IBV_WC_REM_INV_REQ_ERR);
static_assert(num(WcStatus::rem_access_err) == IBV_WC_REM_ACCESS_ERR);
static_assert(num(WcStatus::rem_op_err) == IBV_WC_REM_OP_ERR);
static_assert(num(WcStatus::retry_exc_err) == IBV_WC_RETRY_EXC_ERR);
static_assert(num(WcStatus::rnr_retry_exc_err) == IBV_WC_RNR_RETRY_EXC_ERR);
static_assert(num(WcStatus::loc_rdd_viol_err) == IBV_WC_LOC_RDD_VIOL_ERR);
static_assert(num(WcStatus::rem_inv_rd_req_err) == IBV_WC_REM_INV_RD_REQ_ERR);
static_assert(num(WcStatus::rem_abort_err) == IBV_WC_REM_ABORT_ERR);
static_assert(num(WcStatus::inv_eecn_err) == IBV_WC_INV_EECN_ERR);
static_assert(num(WcStatus::inv_eec_state_err) == IBV_WC_INV_EEC_STATE_ERR);
static_assert(num(WcStatus::fatal_err) == IBV_WC_FATAL_ERR);
static_assert(num(WcStatus::resp_timeout_err) == IBV_WC_RESP_TIMEOUT_ERR);
static_assert(num(WcStatus::general_err) == IBV_WC_GENERAL_ERR);

static_assert(num(SendFlags::fence) == IBV_SEND_FENCE);
static_assert(num(SendFlags::signaled) == IBV_SEND_SIGNALED);
static_assert(num(SendFlags::solicited) == IBV_SEND_SOLICITED);
static_assert(num(SendFlags::inline_data) == IBV_SEND_INLINE);

static_assert(num(Access::local_write) == IBV_ACCESS_LOCAL_WRITE);
static_assert(num(Access::remote_write) == IBV_ACCESS_REMOTE_WRITE);
static_assert(num(Access::remote_read) == IBV_ACCESS_REMOTE_READ);
static_assert(num(Access::remote_atomic) == IBV_ACCESS_REMOTE_ATOMIC);
static_assert(num(Access::mw_bind) == IBV_ACCESS_MW_BIND);
static_assert(num(Access::zero_based) == IBV_ACCESS_ZERO_BASED);

static_assert(num(MwType::type1) == IBV_MW_TYPE_1);
static_assert(num(MwType::type2) == IBV_MW_TYPE_2);

static_assert(num(WcFlags::grh) == IBV_WC_GRH);
static_assert(num(WcFlags::with_imm) == IBV_WC_WITH_IMM);
static_assert(num(WcFlags::with_inv) == IBV_WC_WITH_INV);

static_assert(num(QpAttrMask::state) == IBV_QP_STATE);
static_assert(num(QpAttrMask::cur_state) == IBV_QP_CUR_STATE);
static_assert(num(QpAttrMask::en_sqd_async_notify) == IBV_QP_EN_SQD_ASYNC_NOTIFY);
static_assert(num(QpAttrMask::access_flags) == IBV_QP_ACCESS_FLAGS);
static_assert(num(QpAttrMask::pkey_index) == IBV_QP_PKEY_INDEX);
static_assert(num(QpAttrMask::port) == IBV_QP_PORT);
static_assert(num(QpAttrMask::qkey) == IBV_QP_QKEY);
static_assert(num(QpAttrMask::av) == IBV_QP_AV);
static_assert(num(QpAttrMask::path_mtu) == IBV_QP_PATH_MTU);
static_assert(num(QpAttrMask::timeout) == IBV_QP_TIMEOUT);
static_assert(num(QpAttrMask::retry_cnt) == IBV_QP_RETRY_CNT);
static_assert(num(QpAttrMask::rnr_retry) == IBV_QP_RNR_RETRY);
static_assert(num(QpAttrMask::rq_psn) == IBV_QP_RQ_PSN);
static_assert(num(QpAttrMask::max_qp_rd_atomic) == IBV_QP_MAX_QP_RD_ATOMIC);
static_assert(num(QpAttrMask::alt_path) == IBV_QP_ALT_PATH);
static_assert(num(QpAttrMask::min_rnr_timer) == IBV_QP_MIN_RNR_TIMER);
static_assert(num(QpAttrMask::sq_psn) == IBV_QP_SQ_PSN);
static_assert(num(QpAttrMask::max_dest_rd_atomic) == IBV_QP_MAX_DEST_RD_ATOMIC);
static_assert(num(QpAttrMask::path_mig_state) == IBV_QP_PATH_MIG_STATE);
static_assert(num(QpAttrMask::cap) == IBV_QP_CAP);
static_assert(num(QpAttrMask::dest_qpn) == IBV_QP_DEST_QPN);

static_assert(num(SrqAttrMask::max_wr) == IBV_SRQ_MAX_WR);
static_assert(num(SrqAttrMask::limit) == IBV_SRQ_LIMIT);

static_assert(num(AsyncEventType::cq_err) == IBV_EVENT_CQ_ERR);
static_assert(num(AsyncEventType::qp_fatal) == IBV_EVENT_QP_FATAL);
static_assert(num(AsyncEventType::qp_req_err) == IBV_EVENT_QP_REQ_ERR);
static_assert(num(AsyncEventType::qp_access_err) == IBV_EVENT_QP_ACCESS_ERR);
static_assert(num(AsyncEventType::comm_est) == IBV_EVENT_COMM_EST);
static_assert(num(AsyncEventType::sq_drained) == IBV_EVENT_SQ_DRAINED);
static_assert(num(AsyncEventType::path_mig) == IBV_EVENT_PATH_MIG);
static_assert(num(AsyncEventType::path_mig_err) == IBV_EVENT_PATH_MIG_ERR);
static_assert(num(AsyncEventType::device_fatal) == IBV_EVENT_DEVICE_FATAL);
static_assert(num(AsyncEventType::port_active) == IBV_EVENT_PORT_ACTIVE);
static_assert(num(AsyncEventType::port_err) == IBV_EVENT_PORT_ERR);
static_assert(num(AsyncEventType::lid_change) == IBV_EVENT_LID_CHANGE);
static_assert(num(AsyncEventType::pkey_change) == IBV_EVENT_PKEY_CHANGE);
static_assert(num(AsyncEventType::sm_change) == IBV_EVENT_SM_CHANGE);
static_assert(num(AsyncEventType::srq_err) == IBV_EVENT_SRQ_ERR);
static_assert(num(AsyncEventType::srq_limit_reached) == IBV_EVENT_SRQ_LIMIT_REACHED);
static_assert(num(AsyncEventType::qp_last_wqe_reached) == IBV_EVENT_QP_LAST_WQE_REACHED);
static_assert(num(AsyncEventType::client_reregister) == IBV_EVENT_CLIENT_REREGISTER);
static_assert(num(AsyncEventType::gid_change) == IBV_EVENT_GID_CHANGE);
static_assert(num(AsyncEventType::wq_fatal) == IBV_EVENT_WQ_FATAL);

static_assert(num(PortState::nop) == IBV_PORT_NOP);
static_assert(num(PortState::down) == IBV_PORT_DOWN);
static_assert(num(PortState::init) == IBV_PORT_INIT);
static_assert(num(PortState::armed) == IBV_PORT_ARMED);
static_assert(num(PortState::active) == IBV_PORT_ACTIVE);
static_assert(num(PortState::active_defer) == IBV_PORT_ACTIVE_DEFER);

static_assert(num(LinkLayer::unspecified) == IBV_LINK_LAYER_UNSPECIFIED);
static_assert(num(LinkLayer::infiniband) == IBV_LINK_LAYER_INFINIBAND);
static_assert(num(LinkLayer::ethernet) == IBV_LINK_LAYER_ETHERNET);

static_assert(sizeof(Gid::raw) == sizeof(ibv_gid::raw));

// ---------------------------------------------------------------------------------------------
// Layout contract of the data path (core/include/verbsim/types.hpp): an Sge is an ibv_sge and a
// WorkCompletion an ibv_wc, field for field, so a post hands the program's SGE array to the
// provider as it is and a poll lets the provider write straight into the program's completion
// array; the drop-in hands a program's arrays to the simulator the same way. The provider is a
// separate library reached through a function pointer, so the compiler sees only opaque reads
// and writes of that memory.

#define VERBSIM_SAME_FIELD(ours, theirs, field)                                  \
  static_assert(offsetof(ours, field) == offsetof(theirs, field) &&            \
                    sizeof(ours::field) == sizeof(theirs::field),               \
                #ours "::" #field " is not where " #theirs " has it")
static_assert(sizeof(Sge) == sizeof(ibv_sge) && alignof(Sge) == alignof(ibv_sge));
VERBSIM_SAME_FIELD(Sge, ibv_sge, addr);
VERBSIM_SAME_FIELD(Sge, ibv_sge, length);
VERBSIM_SAME_FIELD(Sge, ibv_sge, lkey);
static_assert(sizeof(WorkCompletion) == sizeof(ibv_wc) &&
              alignof(WorkCompletion) == alignof(ibv_wc));
VERBSIM_SAME_FIELD(WorkCompletion, ibv_wc, wr_id);
VERBSIM_SAME_FIELD(WorkCompletion, ibv_wc, status);
VERBSIM_SAME_FIELD(WorkCompletion, ibv_wc, opcode);
VERBSIM_SAME_FIELD(WorkCompletion, ibv_wc, vendor_err);
VERBSIM_SAME_FIELD(WorkCompletion, ibv_wc, byte_len);
VERBSIM_SAME_FIELD(WorkCompletion, ibv_wc, imm_data);
VERBSIM_SAME_FIELD(WorkCompletion, ibv_wc, qp_num);
VERBSIM_SAME_FIELD(WorkCompletion, ibv_wc, src_qp);
VERBSIM_SAME_FIELD(WorkCompletion, ibv_wc, wc_flags);
VERBSIM_SAME_FIELD(WorkCompletion, ibv_wc, pkey_index);
VERBSIM_SAME_FIELD(WorkCompletion, ibv_wc, slid);
VERBSIM_SAME_FIELD(WorkCompletion, ibv_wc, sl);
VERBSIM_SAME_FIELD(WorkCompletion, ibv_wc, dlid_path_bits);
// Off the data path: a QP's capabilities are ibv_qp_cap's five numbers, a Gid an ibv_gid's raw
// bytes (ibv_gid is also a union of two 64-bit words, so it is more aligned: values only).
static_assert(sizeof(QpCap) == sizeof(ibv_qp_cap) && alignof(QpCap) == alignof(ibv_qp_cap));
VERBSIM_SAME_FIELD(QpCap, ibv_qp_cap, max_send_wr);
VERBSIM_SAME_FIELD(QpCap, ibv_qp_cap, max_recv_wr);
VERBSIM_SAME_FIELD(QpCap, ibv_qp_cap, max_send_sge);
VERBSIM_SAME_FIELD(QpCap, ibv_qp_cap, max_recv_sge);
VERBSIM_SAME_FIELD(QpCap, ibv_qp_cap, max_inline_data);
static_assert(sizeof(Gid) == sizeof(ibv_gid) && offsetof(Gid, raw) == offsetof(ibv_gid, raw));
#undef VERBSIM_SAME_FIELD

// ---------------------------------------------------------------------------------------------
// Enums and flags

inline ibv_qp_type to_ibv(QpType t) noexcept { return static_cast<ibv_qp_type>(t); }
inline ibv_qp_state to_ibv(QpState s) noexcept { return static_cast<ibv_qp_state>(s); }
inline ibv_mtu to_ibv(Mtu m) noexcept { return static_cast<ibv_mtu>(m); }
inline ibv_wr_opcode to_ibv(WrOpcode o) noexcept { return static_cast<ibv_wr_opcode>(o); }
inline ibv_mw_type to_ibv(MwType t) noexcept { return static_cast<ibv_mw_type>(t); }
inline unsigned to_ibv(SendFlags f) noexcept { return to_underlying(f); }
inline unsigned to_ibv(Access a) noexcept { return to_underlying(a); }
inline int to_ibv(QpAttrMask m) noexcept { return static_cast<int>(to_underlying(m)); }
inline int to_ibv(SrqAttrMask m) noexcept { return static_cast<int>(to_underlying(m)); }

// Values libibverbs may report beyond verbsim's enumerators (IBV_QPS_UNKNOWN, IBV_WC_TSO, a
// newer event type) keep their number; to_string() names them "UNKNOWN".
inline QpState from_ibv(ibv_qp_state s) noexcept { return static_cast<QpState>(s); }
inline Mtu from_ibv(ibv_mtu m) noexcept { return static_cast<Mtu>(m); }
inline PortState from_ibv(ibv_port_state s) noexcept { return static_cast<PortState>(s); }
inline AsyncEventType from_ibv(ibv_event_type t) noexcept { return static_cast<AsyncEventType>(t); }

// Only the access bits verbsim names (ON_DEMAND, HUGETLB, ... are dropped).
inline Access access_from_ibv(unsigned flags) noexcept {
  return static_cast<Access>(flags & to_underlying(Access::local_write | Access::remote_write |
                                                   Access::remote_read | Access::remote_atomic |
                                                   Access::mw_bind | Access::zero_based));
}

// ---------------------------------------------------------------------------------------------
// Structs

inline ibv_gid to_ibv(const Gid& g) noexcept { return std::bit_cast<ibv_gid>(g); }
inline Gid from_ibv(const ibv_gid& g) noexcept { return std::bit_cast<Gid>(g); }

inline ibv_ah_attr to_ibv(const AhAttr& a) noexcept {
  ibv_ah_attr out{};
  out.grh.dgid = to_ibv(a.grh.dgid);
  out.grh.flow_label = a.grh.flow_label;
  out.grh.sgid_index = a.grh.sgid_index;
  out.grh.hop_limit = a.grh.hop_limit;
  out.grh.traffic_class = a.grh.traffic_class;
  out.dlid = a.dlid;
  out.sl = a.sl;
  out.src_path_bits = a.src_path_bits;
  out.static_rate = 0;  // IBV_RATE_MAX: verbsim does not limit rates
  out.is_global = a.is_global ? 1 : 0;
  out.port_num = a.port_num;
  return out;
}

inline AhAttr from_ibv(const ibv_ah_attr& a) noexcept {
  AhAttr out;
  out.grh.dgid = from_ibv(a.grh.dgid);
  out.grh.flow_label = a.grh.flow_label;
  out.grh.sgid_index = a.grh.sgid_index;
  out.grh.hop_limit = a.grh.hop_limit;
  out.grh.traffic_class = a.grh.traffic_class;
  out.is_global = a.is_global != 0;
  out.dlid = a.dlid;
  out.sl = a.sl;
  out.src_path_bits = a.src_path_bits;
  out.port_num = a.port_num;
  return out;
}

inline ibv_qp_cap to_ibv(const QpCap& c) noexcept { return std::bit_cast<ibv_qp_cap>(c); }
inline QpCap from_ibv(const ibv_qp_cap& c) noexcept { return std::bit_cast<QpCap>(c); }

// All fields; the mask passed alongside says which the verb reads.
inline ibv_qp_attr to_ibv(const QpAttr& a) noexcept {
  ibv_qp_attr out{};
  out.qp_state = to_ibv(a.qp_state);
  out.cur_qp_state = to_ibv(a.cur_qp_state);
  out.path_mtu = to_ibv(a.path_mtu);
  out.path_mig_state = IBV_MIG_MIGRATED;
  out.qkey = a.qkey;
  out.rq_psn = a.rq_psn;
  out.sq_psn = a.sq_psn;
  out.dest_qp_num = a.dest_qp_num;
  out.qp_access_flags = to_ibv(a.qp_access_flags);
  out.cap = to_ibv(a.cap);
  out.ah_attr = to_ibv(a.ah_attr);
  out.pkey_index = a.pkey_index;
  out.en_sqd_async_notify = a.en_sqd_async_notify;
  out.sq_draining = a.sq_draining;
  out.max_rd_atomic = a.max_rd_atomic;
  out.max_dest_rd_atomic = a.max_dest_rd_atomic;
  out.min_rnr_timer = a.min_rnr_timer;
  out.port_num = a.port_num;
  out.timeout = a.timeout;
  out.retry_cnt = a.retry_cnt;
  out.rnr_retry = a.rnr_retry;
  return out;
}

inline QpAttr from_ibv(const ibv_qp_attr& a) noexcept {
  QpAttr out;
  out.qp_state = from_ibv(a.qp_state);
  out.cur_qp_state = from_ibv(a.cur_qp_state);
  out.path_mtu = from_ibv(a.path_mtu);
  out.qkey = a.qkey;
  out.rq_psn = a.rq_psn;
  out.sq_psn = a.sq_psn;
  out.dest_qp_num = a.dest_qp_num;
  out.qp_access_flags = access_from_ibv(a.qp_access_flags);
  out.cap = from_ibv(a.cap);
  out.ah_attr = from_ibv(a.ah_attr);
  out.pkey_index = a.pkey_index;
  out.en_sqd_async_notify = a.en_sqd_async_notify;
  out.sq_draining = a.sq_draining;
  out.max_rd_atomic = a.max_rd_atomic;
  out.max_dest_rd_atomic = a.max_dest_rd_atomic;
  out.min_rnr_timer = a.min_rnr_timer;
  out.port_num = a.port_num;
  out.timeout = a.timeout;
  out.retry_cnt = a.retry_cnt;
  out.rnr_retry = a.rnr_retry;
  return out;
}

// The program's SGEs as the provider's sg_list (providers only read it).
inline ibv_sge* as_ibv(std::span<const Sge> sges) noexcept {
  return const_cast<ibv_sge*>(reinterpret_cast<const ibv_sge*>(sges.data()));
}

inline ibv_wc* as_ibv(WorkCompletion* wcs) noexcept { return reinterpret_cast<ibv_wc*>(wcs); }

// The other way, for the drop-in: a program's sg_list as core SGEs (the simulator copies them
// when the WR is posted), and its ibv_wc array as the simulator's completion array.
inline std::span<const Sge> as_core(const ibv_sge* sges, std::size_t n) noexcept {
  return {reinterpret_cast<const Sge*>(sges), n};
}

inline WorkCompletion* as_core(ibv_wc* wcs) noexcept {
  return reinterpret_cast<WorkCompletion*>(wcs);
}

// The kernel's ib_wc_flags differ from libibverbs' past bit 1: IB_WC_WITH_INVALIDATE is bit 2
// (IBV_WC_IP_CSUM_OK's), IB_WC_IP_CSUM_OK bit 3 (IBV_WC_WITH_INV's). A provider that copies
// the kernel's completions as they are (rxe) reports them in the kernel's numbering.
inline constexpr unsigned kKernelWcWithInv = 1u << 2;
inline constexpr unsigned kKernelWcIpCsumOk = 1u << 3;

// Turns a completion the provider wrote (in ibv_wc's terms, or with `kernel_flags` the kernel's
// wc_flags) into verbsim's: imm_data in host order with WITH_IMM, the invalidated rkey (ibv_wc's
// invalidated_rkey, already host order) with WITH_INV, 0 otherwise; wc_flags without the bits
// verbsim does not name. Fields past wr_id/status/qp_num/vendor_err are undefined for an error
// completion (see ibv_poll_cq(3)); they stay as the provider left them.
inline void fix_up_from_ibv(WorkCompletion& wc, bool kernel_flags) noexcept {
  constexpr unsigned kNamed = to_underlying(WcFlags::grh | WcFlags::with_imm | WcFlags::with_inv);
  unsigned flags = to_underlying(wc.wc_flags);
  if ((flags & ~to_underlying(WcFlags::grh)) == 0) [[likely]] {
    wc.imm_data = 0;
    return;
  }
  if (kernel_flags) {
    flags = (flags & ~(kKernelWcWithInv | kKernelWcIpCsumOk)) |
            ((flags & kKernelWcWithInv) != 0 ? unsigned{IBV_WC_WITH_INV} : 0u);
  }
  if ((flags & IBV_WC_WITH_IMM) != 0) {
    wc.imm_data = ntohl(wc.imm_data);
  } else if ((flags & IBV_WC_WITH_INV) == 0) {
    wc.imm_data = 0;
  }
  wc.wc_flags = static_cast<WcFlags>(flags & kNamed);
}

// Turns a completion the simulator wrote in verbsim's terms into ibv_wc's, in place (the
// drop-in's ibv_poll_cq): with WITH_IMM imm_data in network order; with WITH_INV the invalidated
// rkey (host order; ibv_wc's invalidated_rkey shares imm_data's place); 0 otherwise. Every other
// field already has ibv_wc's value.
inline void to_ibv_in_place(WorkCompletion& wc) noexcept {
  const unsigned flags = to_underlying(wc.wc_flags);
  if ((flags & IBV_WC_WITH_INV) == 0) {
    wc.imm_data = (flags & IBV_WC_WITH_IMM) != 0 ? htonl(wc.imm_data) : 0;
  }
}

// GUIDs travel in network order (__be64); verbsim shows them as host-order numbers, so
// 0x0002c903000a1b2c reads as ibv_devinfo prints it.
inline std::uint64_t guid_from_ibv(__be64 guid) noexcept { return be64toh(guid); }

}  // namespace verbsim::abi
