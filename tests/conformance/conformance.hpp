// The conformance suite: one set of tests written against the core API, instantiated for every
// backend (the simulator in its rxe, strict and mlx5 profiles, and real libibverbs).
//
// Where stacks legitimately differ, a test reads the expected outcome from the backend's
// Expect table (expect.cpp), never from an `if` on the backend. Every test records what it
// observed (the values it asserted) through obs()/CHECK_OBS; with VERBSIM_CONFORMANCE_LOG set,
// one line per test goes to that file (or to stdout with "-"), for tests/conformance/fidelity.sh.
#pragma once

#include <gtest/gtest.h>

#include <cerrno>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "verbsim/sim/extensions.hpp"
#include "verbsim/sim/world.hpp"
#include "verbsim/testing/backend_test.hpp"
#include "verbsim/verbsim.hpp"

namespace verbsim::conformance {

// Where a case runs: the test kit's targets (the simulator's profiles and libibverbs).
using Target = testing::Target;

// What a backend does where real stacks differ. `profile` names the table ("rxe", "strict",
// "mlx5"); the ibverbs instantiation takes the table of the device it runs on (rxe* -> rxe).
struct Expect {
  const char* profile;
  // Device limits (ibv_query_device).
  int max_qp_wr;
  int max_sge;
  int max_cqe;
  int max_qp_rd_atom;
  // Port facts (ibv_query_port) over the test network.
  int gid_tbl_len;
  int pkey_tbl_len;
  std::uint32_t max_msg_sz;
  // Send/receive queue depth given for a request of n: 2^k - 1 (rxe) or 2^k (hardware).
  bool wq_pow2_minus_one;
  // ibv_create_qp writes back the requested max_send_wr/max_recv_wr (rxe), not the depth.
  bool create_echoes_requested_wr;
  bool local_mr_rkey_zero;  // an MR without remote access has rkey 0 (rxe), else its lkey
  // max_inline_data given to a QP that asks for none, with one send SGE.
  std::uint32_t default_inline;
  // max_send_sge given for max_send_sge=1 and max_inline_data=64 (rxe sizes WQEs by inline).
  std::uint32_t sge_for_inline_64;
  // errno of post_send in RESET, INIT and RTR (0: accepted, the WR waits for RTS).
  int post_send_before_rts;
  // A send posted before RTS (accepted or refused) stays in the send queue and runs later.
  bool early_send_kept;
  // Moving to RTS (from RTR or SQD) starts the send queue; otherwise queued WRs wait for the
  // next post_send (rxe rings no doorbell on modify).
  bool rts_starts_send_queue;
  // post_recv on a QP in ERR completes the receive with WR_FLUSH_ERR.
  bool post_recv_in_err_completes;
  // A send slot frees when the WR completes, polled or not.
  bool slot_frees_without_poll;
  // errno of post_send with more SGEs than max_send_sge / inline data above max_inline_data.
  int send_too_many_sge;
  int inline_too_long;
  // errno of posting an opcode the QP type does not support (RDMA WRITE on UD), and the
  // completion status when the post is accepted.
  int bad_opcode_post;
  WcStatus bad_opcode_status;
  // A UD send larger than the path MTU: errno of the post (0: it "completes" unsent).
  int ud_oversize_post;
  // CQ overrun: drop with one CQ_ERR event per lost completion, QPs go on (rxe); or a CQ error
  // with a single event that takes the CQ's QPs to ERR (hardware).
  bool cq_overrun_drops;
  // IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN: the errno of creating such a CQ (rxe: EOPNOTSUPP; mlx5
  // supports it, and then a full CQ raises nothing and its QPs carry on).
  int ignore_overrun_create;
  // A receive lost to a full CQ is still acknowledged to the requester (else the responder
  // goes to ERR without answering and the requester runs out of retries).
  bool recv_cq_overrun_acked;
  // Error completions carry opcode SEND (0) and byte_len 0 (rxe fills them only on success).
  bool error_wc_zeroed;
  // RC/UC receive completions carry IBV_WC_GRH (RoCE: every packet has a network header).
  bool rc_recv_grh;
  // Requester status for a local SGE whose lkey is unknown or of another PD.
  WcStatus bad_lkey;
  // Responder failures: receive buffer too small (its status, and the requester's), receive
  // SGE without LOCAL_WRITE.
  WcStatus recv_too_small;
  WcStatus recv_too_small_requester;
  WcStatus recv_no_local_write;
  // Completion status of a requester whose RDMA WRITE the responder's QP access flags forbid.
  WcStatus qp_access_violation;
  // The responder raises QP_ACCESS_ERR / QP_REQ_ERR when a request fails on it.
  bool responder_error_events;
  // A QP in RTR raises COMM_EST on its first received packet.
  bool comm_est_event;
  // A send completing in error fires a CQ armed for solicited completions only.
  bool send_error_fires_solicited_arm;
  // A QP attached to an SRQ raises QP_LAST_WQE_REACHED when it goes to ERR.
  bool last_wqe_reached_event;
  // ibv_modify_qp checks the transition from IBV_QP_CUR_STATE when given, not the QP's state.
  bool trusts_cur_state;
  // From SQD, a modify to anything but ERR fails (EINVAL) while sent WRs are unacknowledged.
  bool sqd_holds_while_draining;
  // ibv_modify_qp refuses a pkey_index outside the port's P_Key table.
  bool pkey_index_checked;
  // A UD receive too small for GRH + payload: completion status, and does the QP go to ERR.
  WcStatus ud_recv_too_small;
  bool ud_recv_too_small_errors_qp;
  // An atomic whose local SGEs hold more than 8 bytes is accepted (the value lands in the
  // first 8, byte_len counts them all: rxe); otherwise it is EINVAL, as below 8 everywhere.
  bool atomic_takes_longer_buffer;
  // A UC QP may receive from an SRQ (rxe); otherwise ibv_create_qp refuses it (EINVAL).
  bool uc_on_srq;
  // An RDMA WRITE with immediate whose rkey or range fails has taken a receive first (RNR NAK
  // without one), which completes with REM_ACCESS_ERR (rxe); otherwise the receives are only
  // flushed when the QP goes to ERR.
  bool imm_write_error_takes_recv;
  // max_mw of ibv_query_device (every table has windows of types 1 and 2B).
  int max_mw;
  // A request through a window's key is checked against the range of the window's MR, not the
  // window's own (rxe: check_rkey() takes the MW's MR and checks the MR's bounds).
  bool mw_range_is_mr;
  // ibv_rereg_mr is supported (hardware); rxe has none (EOPNOTSUPP).
  bool rereg_mr;
  // A READ's or atomic's own SGEs are checked when its response arrives (rxe): a bad rkey is
  // found first, and an atomic with a bad local key has executed.
  bool local_check_on_response;
  // post_send's refusal of a QP in RESET, INIT or RTR comes from a system call (rxe's
  // doorbell), which leaves it in errno too.
  bool post_state_error_in_errno;
  // A UD message's IPv4 TTL is the AH's hop limit (rxe: the route's, 64).
  bool ud_ttl_is_hop_limit;
  // The IPv4 header of a message to the sender's own device has its checksum (rxe: 0).
  bool loopback_ipv4_checksum;
  // A receive a QP takes from an SRQ of another PD is checked against the QP's PD (rxe's
  // copy_data with qp->pd), not the SRQ's.
  bool srq_recv_checked_in_qp_pd;
  // An RC QP going to ERR flushes its receives before its sends (rxe); UC and UD, and other
  // stacks, the sends first.
  bool rc_flushes_receives_first;
  // A UD send through an address handle of another PD than the QP's fails (LOC_QP_OP_ERR, the
  // QP to ERR: rxe's rxe_get_av); mlx5 copies the address into the WQE and sends it.
  bool ud_ah_pd_checked;
  // Destroying a QP takes its completions out of its CQs (mlx5's __mlx5_cq_clean); otherwise
  // they stay, to be polled with the QP number of a QP that is gone.
  bool qp_destroy_cleans_cq;

  std::uint32_t wq_depth(std::uint32_t n) const noexcept;
  static std::uint32_t cq_depth(std::uint32_t n) noexcept;  // 2^k - 1 everywhere
};

// The ibverbs instantiation takes the table of its device: by firmware version for the
// simulator behind the libibverbs drop-in ("verbsim-0.1 (rxe)"), else by name (rxe* -> rxe,
// mlx5* -> mlx5, anything else -> strict).
const Expect& expect_for(Target t, std::string_view device_name, std::string_view fw_ver);

// errno names for observations: 0 is "OK".
std::string errno_name(int err);
inline std::string errno_name(const std::error_code& ec) { return errno_name(ec ? ec.value() : 0); }

// Canonical strings of observed values.
std::string obs_str(const std::string& v);
std::string obs_str(const char* v);
std::string obs_str(std::string_view v);
std::string obs_str(bool v);
std::string obs_str(WcStatus v);
std::string obs_str(WcOpcode v);
std::string obs_str(QpState v);
std::string obs_str(AsyncEventType v);
template <class T>
  requires std::is_integral_v<T>
std::string obs_str(T v) {
  return std::to_string(v);
}
// "SUCCESS/RECV/64" (status/opcode/byte_len) for one completion.
std::string describe(const WorkCompletion& wc);
// Comma-separated describe() of each, "none" for an empty list.
std::string describe(const std::vector<WorkCompletion>& wcs);
// "CQ_ERR,CQ_ERR" or "none".
std::string describe(const std::vector<AsyncEvent>& evs);
// Statuses with repeats counted: "7*SUCCESS,RETRY_EXC_ERR,4*WR_FLUSH_ERR" ("none" if empty).
std::string summary(const std::vector<WorkCompletion>& wcs);

// Runs `f`; 0 if it returns, the errno of a VerbError, -1 for any other exception.
template <class F>
int verb_errno(F&& f) {
  try {
    f();
    return 0;
  } catch (const VerbError& e) {
    return e.code().value();
  } catch (...) {
    return -1;
  }
}

// Two QPs of one device with a CQ each (send and receive), connected to each other or not.
struct Pair {
  std::unique_ptr<CompletionQueue> cq_a;
  std::unique_ptr<CompletionQueue> cq_b;
  std::unique_ptr<QueuePair> a;
  std::unique_ptr<QueuePair> b;
};

struct PairOptions {
  QpType type = QpType::rc;
  QpCap cap{16, 16, 4, 4, 0};
  int cqe = 64;
  bool connect = true;
  ConnectOptions a;  // sgid_index is filled in by the fixture
  ConnectOptions b;
  bool sq_sig_all = false;

  static PairOptions with(QpCap cap, QpType type = QpType::rc) {
    PairOptions o;
    o.cap = cap;
    o.type = type;
    return o;
  }
  static PairOptions unconnected() {
    PairOptions o;
    o.connect = false;
    return o;
  }
  static PairOptions signal_all() {
    PairOptions o;
    o.sq_sig_all = true;
    return o;
  }
};

// The test kit's BackendTest (which opens the backend, or skips without a device) with one
// device context, a PD and a registered buffer per case.
class Conformance : public testing::BackendTest {
 protected:
  void SetUp() override;
  void TearDown() override;
  // A world with one device, as on rxe in the VM, and nothing from the environment but what
  // every world takes (the seed): the cases assert exact outcomes, which a fault plan would
  // change.
  sim::Config sim_config(sim::Profile profile) const override;

  const Expect& expect() const noexcept { return *expect_; }
  Context& ctx() noexcept { return *ctx_; }
  ProtectionDomain& pd() noexcept { return *pd_; }
  int gid_index() const noexcept { return gid_index_; }
  const Gid& gid() const noexcept { return gid_; }

  // The fixture's 64 KiB buffer (8-byte aligned), registered with every access right.
  char* mem(std::size_t offset = 0) noexcept { return reinterpret_cast<char*>(mem_.data()) + offset; }
  MemoryRegion& mr() noexcept { return *mr_; }
  Sge sge(std::size_t offset, std::uint32_t length) const noexcept { return mr_->sge(offset, length); }
  static constexpr std::size_t kMemSize = 64 * 1024;

  std::unique_ptr<CompletionQueue> make_cq(int cqe = 64, CompletionChannel* channel = nullptr);
  std::unique_ptr<QueuePair> make_qp(CompletionQueue& scq, CompletionQueue& rcq, QpCap cap = {16, 16, 4, 4, 0},
                                     QpType type = QpType::rc, SharedReceiveQueue* srq = nullptr,
                                     bool sq_sig_all = false, ProtectionDomain* pd = nullptr);
  Endpoint endpoint(const QueuePair& qp, std::uint32_t psn) const { return {gid_, qp.qp_num(), psn}; }
  ConnectOptions options(ConnectOptions o = {}) const {
    o.sgid_index = static_cast<std::uint8_t>(gid_index_);
    return o;
  }
  // RESET -> RTS of `a` towards `b` and `b` towards `a` (PSNs 100 and 200).
  void connect_pair(QueuePair& a, QueuePair& b, ConnectOptions oa = {}, ConnectOptions ob = {});
  // An RC QP on `cq`, in RTS towards the number of a QP that no longer exists: nothing it sends
  // is ever acknowledged.
  std::unique_ptr<QueuePair> qp_to_missing_peer(CompletionQueue& cq, ConnectOptions o);
  Pair make_pair(const PairOptions& o = {});
  AhAttr ah_attr() const;
  // "STATUS/OPCODE/len" of an error completion as this backend reports it (rxe zeroes the
  // opcode and length of error completions).
  std::string err_wc(WcStatus status, WcOpcode opcode, std::uint32_t len) const;

  // Polls until `n` completions arrived or nothing more can (simulator: the world is idle or
  // 2 s of virtual time passed; ibverbs: 2 s of real time). Never takes more than `n`.
  std::vector<WorkCompletion> poll_n(CompletionQueue& cq, std::size_t n);
  // Lets the "nothing arrives" interval pass (200 ms), then takes what is in the CQ.
  std::vector<WorkCompletion> poll_quiet(CompletionQueue& cq);
  // Lets time pass: real time on ibverbs, virtual time on the simulator (and about as much of
  // it behind the libibverbs drop-in).
  void pass_time(std::chrono::milliseconds d);
  // RNR NAKs port 1 has received (the rcvd_rnr_err counter of rxe and of the simulator): the
  // simulator's count, or the device's hw_counters/rcvd_rnr_err file under its ibdev_path
  // (the drop-in's private sysfs tree too). None where the device has none.
  std::optional<std::uint64_t> rnr_naks_received() { return hw_counter("rcvd_rnr_err"); }
  // Port 1's counter `name` of rxe's hw_counters (rcvd_rnr_err, completer_retry_err,
  // retry_exceeded_err, ...): the simulator's, or the device's sysfs file. None where the device
  // has none.
  std::optional<std::uint64_t> hw_counter(std::string_view name);
  // errno as a C program finds it after `post` (returning a PostResult, kept in `result`):
  // "untouched" or the errno's name. On ibverbs errno itself, set first to EDOM, which no verb
  // returns; on the simulator what the libibverbs drop-in leaves, the post's error where the
  // profile's provider got it from a system call (sim::post_error_in_errno).
  template <class F>
  std::string errno_after_post(F&& post, PostResult& result) {
    errno = EDOM;
    result = post();
    const int after = errno;
    if (world_ != nullptr) return sim::post_error_in_errno(result) ? errno_name(result.err) : "untouched";
    return after == EDOM ? "untouched" : errno_name(after);
  }
  // The same for a control verb, whose errno (or 0) goes to `err`: on the simulator the
  // drop-in leaves every control verb's error in errno, as libibverbs' commands to the kernel do.
  template <class F>
  std::string errno_after_verb(F&& verb, int& err) {
    errno = EDOM;
    err = verb_errno(verb);
    const int after = errno;
    if (world_ != nullptr) return err != 0 ? errno_name(err) : "untouched";
    return after == EDOM ? "untouched" : errno_name(after);
  }
  // Async events pending now (call after poll_quiet/pass_time for the asynchronous ones).
  std::vector<AsyncEvent> take_async_events();
  // The QP's state once `want` is reached or 2 s passed (the device moves QPs on its own).
  QpState wait_state(const QueuePair& qp, QpState want);

  // Records `key=value` for the fidelity report.
  template <class T>
  void obs(std::string_view key, const T& value) {
    add_obs(key, obs_str(value));
  }
  void add_obs(std::string_view key, const std::string& value);

  sim::World* world_ = nullptr;

 private:
  const Expect* expect_ = nullptr;
  std::unique_ptr<Context> ctx_;
  std::unique_ptr<ProtectionDomain> pd_;
  std::vector<std::uint64_t> mem_;
  std::unique_ptr<MemoryRegion> mr_;
  bool through_dropin_ = false;  // the Ibverbs instantiation on the drop-in's simulator
  int gid_index_ = 1;
  Gid gid_;
  std::string observations_;
};

// Records `actual` under `key` and expects it to equal `expected` (compared as observations).
#define CHECK_OBS(key, actual, expected)                                                   \
  do {                                                                                     \
    const std::string obs_actual_ = ::verbsim::conformance::obs_str(actual);               \
    add_obs(key, obs_actual_);                                                             \
    EXPECT_EQ(obs_actual_, ::verbsim::conformance::obs_str(expected)) << "observation " << (key); \
  } while (0)

// Same for an errno (an int or a std::error_code), shown by name.
#define CHECK_ERR(key, actual, expected_errno)                                             \
  do {                                                                                     \
    const std::string obs_actual_ = ::verbsim::conformance::errno_name(actual);            \
    add_obs(key, obs_actual_);                                                             \
    EXPECT_EQ(obs_actual_, ::verbsim::conformance::errno_name(expected_errno))             \
        << "observation " << (key);                                                        \
  } while (0)

// Instantiates a suite derived from Conformance for every backend.
#define VERBSIM_CONFORMANCE_SUITE(Suite) \
  VERBSIM_BACKEND_SUITE(Suite);          \
  VERBSIM_PROFILE_FILE_SUITE(Suite)

// Work request builders.
inline SendWr send_wr(std::uint64_t id, const Sge* sge, WrOpcode op = WrOpcode::send,
                      SendFlags flags = SendFlags::signaled) {
  SendWr wr;
  wr.wr_id = id;
  wr.opcode = op;
  wr.flags = flags;
  if (sge != nullptr) wr.sg_list = {sge, 1};
  return wr;
}
inline SendWr rdma_wr(std::uint64_t id, WrOpcode op, const Sge* local, std::uint64_t remote_addr,
                      std::uint32_t rkey, SendFlags flags = SendFlags::signaled) {
  SendWr wr = send_wr(id, local, op, flags);
  wr.remote_addr = remote_addr;
  wr.rkey = rkey;
  return wr;
}
inline RecvWr recv_wr(std::uint64_t id, const Sge* sge) {
  RecvWr wr;
  wr.wr_id = id;
  if (sge != nullptr) wr.sg_list = {sge, 1};
  return wr;
}
void move_to(QueuePair& qp, QpState state);

}  // namespace verbsim::conformance
