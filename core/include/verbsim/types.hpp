// Value types of the verbs API: enums, work requests, completions, attributes.
//
// Numeric values of every enum equal their libibverbs counterparts (IBV_WC_REM_ACCESS_ERR is
// WcStatus::rem_access_err == 10), so logs and test expectations read the same on every backend.
// Sge and WorkCompletion also have the layout of ibv_sge and ibv_wc, so the ibverbs backend hands
// them to the provider without copying (backends/abi/include/verbsim/abi/translate.hpp checks it).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <system_error>

#include "verbsim/flags.hpp"

namespace verbsim {

class AddressHandle;
class CompletionQueue;
class MemoryRegion;
class MemoryWindow;
class QueuePair;
class SharedReceiveQueue;

// ---------------------------------------------------------------------------------------------
// Enums

enum class QpType : std::uint8_t { rc = 2, uc = 3, ud = 4 };

enum class QpState : std::uint8_t { reset = 0, init, rtr, rts, sqd, sqe, err };

enum class Mtu : std::uint8_t { mtu_256 = 1, mtu_512, mtu_1024, mtu_2048, mtu_4096 };

constexpr std::uint32_t mtu_bytes(Mtu m) noexcept { return 128u << static_cast<unsigned>(m); }

enum class WrOpcode : std::uint8_t {
  rdma_write = 0,
  rdma_write_with_imm = 1,
  send = 2,
  send_with_imm = 3,
  rdma_read = 4,
  atomic_cmp_and_swp = 5,
  atomic_fetch_and_add = 6,
  local_inv = 7,      // invalidates the type 2 memory window whose rkey is `imm_data`
  bind_mw = 8,        // binds the memory window of `bind_mw` (see SendWr)
  send_with_inv = 9,  // a SEND that invalidates the receiver's window whose rkey is `imm_data`
};

enum class WcOpcode : std::uint32_t {  // 32 bits, as in ibv_wc
  send = 0,
  rdma_write = 1,
  rdma_read = 2,
  comp_swap = 3,
  fetch_add = 4,
  bind_mw = 5,
  local_inv = 6,
  recv = 128,
  recv_rdma_with_imm = 129,
};

enum class WcStatus : std::uint32_t {  // 32 bits, as in ibv_wc
  success = 0,
  loc_len_err,
  loc_qp_op_err,
  loc_eec_op_err,
  loc_prot_err,
  wr_flush_err,
  mw_bind_err,
  bad_resp_err,
  loc_access_err,
  rem_inv_req_err,
  rem_access_err,
  rem_op_err,
  retry_exc_err,
  rnr_retry_exc_err,
  loc_rdd_viol_err,
  rem_inv_rd_req_err,
  rem_abort_err,
  inv_eecn_err,
  inv_eec_state_err,
  fatal_err,
  resp_timeout_err,
  general_err,
};

enum class SendFlags : std::uint32_t {
  none = 0,
  fence = 1u << 0,
  signaled = 1u << 1,
  solicited = 1u << 2,
  inline_data = 1u << 3,
};
template <>
struct is_flag_enum<SendFlags> : std::true_type {};

enum class Access : std::uint32_t {
  none = 0,
  local_write = 1u << 0,
  remote_write = 1u << 1,
  remote_read = 1u << 2,
  remote_atomic = 1u << 3,
  mw_bind = 1u << 4,  // memory windows may be bound to the MR
  // IBV_ACCESS_ZERO_BASED. In a window's bind: a request's address is an offset into the window.
  // In a registration: what the device does with it varies (ProtectionDomain::reg_mr_iova).
  zero_based = 1u << 5,
};
template <>
struct is_flag_enum<Access> : std::true_type {};

// ibv_mw_type. A type 1 window is bound with QueuePair::bind_mw and belongs to its PD; a type 2
// window (2B) is bound by a BIND_MW work request and then serves only the QP that bound it,
// until LOCAL_INV or a SEND_WITH_INV invalidates it.
enum class MwType : std::uint8_t { type1 = 1, type2 = 2 };

// ibv_create_cq_ex's flags (IBV_CREATE_CQ_ATTR_*) that change what the CQ does.
enum class CqCreateFlags : std::uint32_t {
  none = 0,
  // IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN: a full CQ is not an error. A completion that finds the
  // CQ full takes the place of the oldest one not yet polled (which is lost); no CQ_ERR event,
  // and the QPs feeding it carry on. Providers that lack it (rxe) refuse it with EOPNOTSUPP.
  ignore_overrun = 1u << 1,
};
template <>
struct is_flag_enum<CqCreateFlags> : std::true_type {};

enum class WcFlags : std::uint32_t {
  none = 0,
  grh = 1u << 0,
  with_imm = 1u << 1,
  with_inv = 1u << 3,  // a SEND_WITH_INV invalidated WorkCompletion::invalidated_rkey()
};
template <>
struct is_flag_enum<WcFlags> : std::true_type {};

// Which fields of QpAttr a modify/query uses (ibv_qp_attr_mask).
enum class QpAttrMask : std::uint32_t {
  none = 0,
  state = 1u << 0,
  cur_state = 1u << 1,
  en_sqd_async_notify = 1u << 2,
  access_flags = 1u << 3,
  pkey_index = 1u << 4,
  port = 1u << 5,
  qkey = 1u << 6,
  av = 1u << 7,
  path_mtu = 1u << 8,
  timeout = 1u << 9,
  retry_cnt = 1u << 10,
  rnr_retry = 1u << 11,
  rq_psn = 1u << 12,
  max_qp_rd_atomic = 1u << 13,
  alt_path = 1u << 14,
  min_rnr_timer = 1u << 15,
  sq_psn = 1u << 16,
  max_dest_rd_atomic = 1u << 17,
  path_mig_state = 1u << 18,
  cap = 1u << 19,
  dest_qpn = 1u << 20,
};
template <>
struct is_flag_enum<QpAttrMask> : std::true_type {};

enum class SrqAttrMask : std::uint32_t { none = 0, max_wr = 1u << 0, limit = 1u << 1 };
template <>
struct is_flag_enum<SrqAttrMask> : std::true_type {};

enum class AsyncEventType : std::uint8_t {
  cq_err = 0,
  qp_fatal,
  qp_req_err,
  qp_access_err,
  comm_est,
  sq_drained,
  path_mig,
  path_mig_err,
  device_fatal,
  port_active,
  port_err,
  lid_change,
  pkey_change,
  sm_change,
  srq_err,
  srq_limit_reached,
  qp_last_wqe_reached,
  client_reregister,
  gid_change,
  wq_fatal,
};

enum class PortState : std::uint8_t { nop = 0, down, init, armed, active, active_defer };

enum class LinkLayer : std::uint8_t { unspecified = 0, infiniband = 1, ethernet = 2 };

// "SUCCESS", "WR_FLUSH_ERR", ... as ibv_wc_status_str names them without the prefix.
std::string_view to_string(WcStatus s) noexcept;
std::string_view to_string(WcOpcode o) noexcept;
std::string_view to_string(WrOpcode o) noexcept;
std::string_view to_string(QpState s) noexcept;
std::string_view to_string(QpType t) noexcept;
std::string_view to_string(MwType t) noexcept;
std::string_view to_string(AsyncEventType t) noexcept;

// ---------------------------------------------------------------------------------------------
// Addressing

struct Gid {
  std::array<std::uint8_t, 16> raw{};

  bool is_zero() const noexcept;
  // ::ffff:a.b.c.d, the GID RoCE v2 gives an IPv4 address. Inline: the librdmacm drop-in,
  // which does not link the core, uses it too.
  bool is_ipv4_mapped() const noexcept {
    for (std::size_t i = 0; i < 10; ++i) {
      if (raw[i] != 0) return false;
    }
    return raw[10] == 0xff && raw[11] == 0xff;
  }
  // "fe80:0000:0000:0000:0000:0000:0000:0001", the format of sysfs gids/N files.
  std::string to_string() const;
  // IPv4-mapped GID ::ffff:a.b.c.d, as RoCE v2 uses for an IPv4 address.
  static Gid from_ipv4(std::uint8_t a, std::uint8_t b, std::uint8_t c, std::uint8_t d) noexcept;
  friend bool operator==(const Gid&, const Gid&) = default;
};

struct GlobalRoute {
  Gid dgid;
  std::uint32_t flow_label = 0;
  std::uint8_t sgid_index = 0;
  std::uint8_t hop_limit = 64;
  std::uint8_t traffic_class = 0;
};

// Address vector: where a QP (RC/UC: in RTR) or a UD send (through an AddressHandle) goes.
struct AhAttr {
  GlobalRoute grh;
  bool is_global = false;  // RoCE requires it
  std::uint16_t dlid = 0;
  std::uint8_t sl = 0;
  std::uint8_t src_path_bits = 0;
  std::uint8_t port_num = 1;
};

// ---------------------------------------------------------------------------------------------
// Work requests and completions

// One scatter/gather element: `length` bytes at `addr`, inside the memory region of `lkey`.
struct Sge {
  std::uint64_t addr = 0;
  std::uint32_t length = 0;
  std::uint32_t lkey = 0;
};

// What a bind gives a memory window (ibv_mw_bind_info): `length` bytes at `addr` (an address of
// `mr`'s, from its iova), inside `mr` (registered with Access::mw_bind), with remote `access`;
// with Access::zero_based (type 2 only) requests address the window by offsets from 0. Binding
// a type 1 window with length 0 unbinds it.
struct MwBindInfo {
  const MemoryRegion* mr = nullptr;
  std::uint64_t addr = 0;
  std::uint64_t length = 0;
  Access access = Access::none;
};

// A bind of a type 1 window (ibv_mw_bind): posted on a send queue like a work request.
struct MwBind {
  std::uint64_t wr_id = 0;
  SendFlags flags = SendFlags::none;
  MwBindInfo info;
};

// A BIND_MW work request's window and what it is to cover (ibv_send_wr's bind_mw).
struct BindMwWr {
  MemoryWindow* mw = nullptr;
  MwBindInfo info;
};

// A send-queue work request. `sg_list` refers to caller memory that must stay valid during the
// post call only (the data itself must stay valid until completion, as with libibverbs, unless
// SendFlags::inline_data is set). `imm_data` is in host byte order here; backends convert.
// It stays at 88 bytes, so that building one on the stack takes a few vector stores (GCC
// zero-fills larger ones with `rep stos`, 13 instructions more per post): LOCAL_INV and
// SEND_WITH_INV name their key in `imm_data`, as ibv_send_wr's union does, and a BIND_MW's
// details sit behind one pointer.
struct SendWr {
  std::uint64_t wr_id = 0;
  WrOpcode opcode = WrOpcode::send;
  SendFlags flags = SendFlags::none;
  std::span<const Sge> sg_list;
  std::uint32_t imm_data = 0;  // LOCAL_INV, SEND_WITH_INV: the rkey to invalidate
  // RDMA and atomic operations; BIND_MW: the window's new key (inc_rkey of its current one)
  std::uint32_t rkey = 0;
  std::uint64_t remote_addr = 0;
  std::uint64_t compare_add = 0;  // compare value (CMP_AND_SWP) or addend (FETCH_AND_ADD)
  std::uint64_t swap = 0;
  // UD
  const AddressHandle* ah = nullptr;
  std::uint32_t remote_qpn = 0;
  std::uint32_t remote_qkey = 0;
  // BIND_MW: caller memory read during the post only, like sg_list
  const BindMwWr* bind_mw = nullptr;
};
static_assert(sizeof(SendWr) == 88, "see the comment above");

// The key a bind gives a window: the same index, the next value of the low byte (ibv_inc_rkey).
constexpr std::uint32_t inc_rkey(std::uint32_t rkey) noexcept {
  return (rkey & 0xffffff00u) | ((rkey + 1) & 0xffu);
}

struct RecvWr {
  std::uint64_t wr_id = 0;
  std::span<const Sge> sg_list;
};

// A completion, in ibv_wc's field order. Unlike ibv_wc, `imm_data` is in host byte order and 0
// without WcFlags::with_imm or WcFlags::with_inv, and `wc_flags` holds only the flags named by
// WcFlags. With WcFlags::with_inv the field holds the invalidated rkey, as ibv_wc's union does.
// Like ibv_wc it has no default member initialisers: a poll writes every field of the entries
// it returns, and an array that only receives completions costs nothing to declare (zeroing 16
// of them cost the simulator's benchmark 13 instructions per WR); `WorkCompletion wc{}` zeroes
// one.
struct WorkCompletion {
  std::uint32_t invalidated_rkey() const noexcept { return imm_data; }

  std::uint64_t wr_id;
  WcStatus status;
  WcOpcode opcode;
  std::uint32_t vendor_err;
  std::uint32_t byte_len;
  std::uint32_t imm_data;  // host byte order; valid with WcFlags::with_imm
  std::uint32_t qp_num;
  std::uint32_t src_qp;    // UD receives
  WcFlags wc_flags;
  std::uint16_t pkey_index;
  std::uint16_t slid;
  std::uint8_t sl;
  std::uint8_t dlid_path_bits;
};

// Result of post_send / post_recv. `posted` WRs were accepted; when `err` is set, WR number
// `posted` of the batch is the first that failed (libibverbs' bad_wr) and none after it was
// posted. `err` is the errno a provider returns, 0 on success; error() gives it as a
// std::error_code to compare against a Condition. `reason` is a static string naming the cause
// ("send queue full", "too many SGEs"). 16 bytes: it comes back in registers.
struct [[nodiscard]] PostResult {
  std::uint32_t posted = 0;
  int err = 0;
  const char* reason = "";
  explicit operator bool() const noexcept { return err == 0; }
  std::error_code error() const noexcept {
    return err == 0 ? std::error_code{} : std::error_code{err, std::generic_category()};
  }
};

// Result of CompletionQueue::poll: `count` completions were written to the front of the span.
// `err` is 0 or an errno: EIO from a provider that failed to poll; the pollers of polling.hpp
// add their own, such as EAGAIN and ECANCELED. error() gives it as a std::error_code.
struct [[nodiscard]] PollResult {
  std::uint32_t count = 0;
  int err = 0;
  std::error_code error() const noexcept {
    return err == 0 ? std::error_code{} : std::error_code{err, std::generic_category()};
  }
};

// ---------------------------------------------------------------------------------------------
// Attributes

struct DeviceInfo {
  std::string backend;  // "sim" or "ibverbs"
  std::string name;     // "sim0", "rxe0", "mlx5_0"
  std::uint64_t node_guid = 0;
};

struct DeviceAttr {
  std::string fw_ver;
  std::uint64_t node_guid = 0;
  std::uint64_t sys_image_guid = 0;
  std::uint64_t max_mr_size = 0;
  std::uint64_t page_size_cap = 0;
  std::uint32_t vendor_id = 0;
  std::uint32_t vendor_part_id = 0;
  std::uint32_t hw_ver = 0;
  int max_qp = 0;
  int max_qp_wr = 0;
  int max_sge = 0;
  int max_sge_rd = 0;
  int max_cq = 0;
  int max_cqe = 0;
  int max_mr = 0;
  int max_pd = 0;
  int max_qp_rd_atom = 0;
  int max_qp_init_rd_atom = 0;
  int max_srq = 0;
  int max_srq_wr = 0;
  int max_srq_sge = 0;
  int max_ah = 0;
  std::uint16_t max_pkeys = 0;
  std::uint8_t phys_port_cnt = 0;
  bool atomics = false;  // atomic_cap != IBV_ATOMIC_NONE
  int max_mw = 0;
  bool mw_type1 = false;  // IBV_DEVICE_MEM_WINDOW
  bool mw_type2 = false;  // IBV_DEVICE_MEM_WINDOW_TYPE_2B
};

struct PortAttr {
  PortState state = PortState::down;
  Mtu max_mtu = Mtu::mtu_4096;
  Mtu active_mtu = Mtu::mtu_1024;
  int gid_tbl_len = 0;
  std::uint32_t port_cap_flags = 0;
  std::uint32_t max_msg_sz = 0;
  std::uint16_t lid = 0;
  std::uint16_t sm_lid = 0;
  std::uint16_t pkey_tbl_len = 0;
  std::uint8_t lmc = 0;
  std::uint8_t active_width = 0;
  std::uint8_t active_speed = 0;
  LinkLayer link_layer = LinkLayer::ethernet;
};

struct QpCap {
  std::uint32_t max_send_wr = 0;
  std::uint32_t max_recv_wr = 0;
  std::uint32_t max_send_sge = 1;
  std::uint32_t max_recv_sge = 1;
  std::uint32_t max_inline_data = 0;
};

struct QpInitAttr {
  QpType type = QpType::rc;
  CompletionQueue* send_cq = nullptr;
  CompletionQueue* recv_cq = nullptr;
  SharedReceiveQueue* srq = nullptr;  // receives come from this SRQ; cap.max_recv_wr is ignored
  QpCap cap;
  bool sq_sig_all = false;  // every send WR completes, signaled or not
};

struct QpAttr {
  QpState qp_state = QpState::reset;
  QpState cur_qp_state = QpState::reset;
  Mtu path_mtu = Mtu::mtu_1024;
  std::uint32_t qkey = 0;
  std::uint32_t rq_psn = 0;
  std::uint32_t sq_psn = 0;
  std::uint32_t dest_qp_num = 0;
  Access qp_access_flags = Access::none;
  QpCap cap;
  AhAttr ah_attr;
  std::uint16_t pkey_index = 0;
  std::uint8_t en_sqd_async_notify = 0;
  std::uint8_t sq_draining = 0;
  std::uint8_t max_rd_atomic = 0;       // outstanding READ/atomic as requester
  std::uint8_t max_dest_rd_atomic = 0;  // responder resources
  std::uint8_t min_rnr_timer = 0;       // IB encoding 0..31 (0 = 655.36 ms)
  std::uint8_t port_num = 0;
  std::uint8_t timeout = 0;    // 4.096 us * 2^timeout; 0 = infinite
  std::uint8_t retry_cnt = 0;  // 0..7
  std::uint8_t rnr_retry = 0;  // 0..7, 7 = infinite
};

struct SrqInitAttr {
  std::uint32_t max_wr = 0;
  std::uint32_t max_sge = 1;
  std::uint32_t srq_limit = 0;  // ignored, as by ibv_create_srq: arm the limit with modify()
};

struct SrqAttr {
  std::uint32_t max_wr = 0;
  std::uint32_t max_sge = 0;
  std::uint32_t srq_limit = 0;
};

// An asynchronous event from the device. Exactly one of the pointers is set, as the event type
// says, or `port_num` for port events; none for device_fatal. `qp_num` repeats the QP's number.
struct AsyncEvent {
  AsyncEventType type = AsyncEventType::device_fatal;
  QueuePair* qp = nullptr;
  CompletionQueue* cq = nullptr;
  SharedReceiveQueue* srq = nullptr;
  std::uint32_t qp_num = 0;
  std::uint8_t port_num = 0;
};

// Duration of the RNR NAK timer encoding `min_rnr_timer` (IB spec table 45), in nanoseconds.
std::uint64_t rnr_timer_ns(std::uint8_t min_rnr_timer) noexcept;
// Local ACK timeout for `timeout` (4.096 us * 2^timeout), in nanoseconds; 0 means infinite.
constexpr std::uint64_t ack_timeout_ns(std::uint8_t timeout) noexcept {
  return timeout == 0 ? 0 : 4096ull << (timeout & 31u);
}

}  // namespace verbsim
