// A queue pair: its send queue and requester, its receive side and responder, and the
// completer that turns ACKs and NAKs into completions (requester.cpp, responder.cpp,
// completer.cpp; control verbs in qp.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "fabric/assert.hpp"
#include "fabric/event.hpp"
#include "fabric/world_impl.hpp"
#include "resources/handles.hpp"
#include "transport/send_wqe.hpp"
#include "transport/wire.hpp"
#include "verbsim/queue_pair.hpp"

namespace verbsim::sim {

// The reasons of a post_send whose doorbell rxe's kernel refused (a write() to the uverbs device,
// in RESET, INIT or RTR), the one refusal of a post that libibverbs leaves in errno
// (post_error_in_errno, verbsim/sim/extensions.hpp): every WR was queued (and runs once the QP
// is in RTS and a later post rings), or WR `posted` was refused before the doorbell and the
// ones before it were queued.
extern const char kDoorbellRefused[];
extern const char kDoorbellRefusedWrRefused[];

// A queue pair is both handle and state: nothing else keeps it alive. Not final: with a fault
// plan that targets its verbs, the QP is a FaultyQp (below), chosen when it is created.
class alignas(64) SimQp : public QueuePair {
 public:
  SimQp(std::shared_ptr<PdCore> pd, const QpInitAttr& init, std::uint32_t qpn);
  // A QP of another process of a shared fabric as the responder here sees it, its requester:
  // send-queue slots only, each loaded from the parcel that brought its message (stand_in()).
  struct StandIn {};
  SimQp(StandIn, World::Impl& w, DevCore& dev, std::uint32_t qpn);
  // Puts the message of parcel `index` into its slot; `data` holds a SEND's or WRITE's
  // payload, or takes a READ's or atomic's result (at least max(wq.length, 8) bytes);
  // `responder`: the QP of this world it was sent to.
  void load_stand_in(std::uint32_t index, std::uint32_t epoch, QpType type, const SendWqe& wq,
                     const AtomicOperands& atomic, std::uint8_t* data,
                     std::uint32_t responder) noexcept;
  ~SimQp() override;
  void destroy() override;

  std::uint32_t qp_num() const noexcept override { return qpn_; }
  QpType type() const noexcept override { return type_; }
  const QpCap& cap() const noexcept override { return reported_cap_; }
  const QpCap& requested_cap() const noexcept override { return requested_cap_; }
  PostResult post_send(std::span<const SendWr> wrs) noexcept override;
  // What post_send(wrs) would refuse, without posting anything: {wrs.size(), 0} or the first
  // WR refused, with its errno and reason (sim::check_post_send).
  PostResult check_posts(std::span<const SendWr> wrs) const noexcept;
  PostResult post_recv(std::span<const RecvWr> wrs) noexcept override;
  PostResult bind_mw(MemoryWindow& mw, const MwBind& bind) noexcept override;
  void modify(const QpAttr& attr, QpAttrMask mask) override;
  QpAttr query(QpAttrMask mask) const override;
  QpState state() const noexcept override { return hot_.qp_state; }

  // Transport (transport.cpp), driven by the world's events.
  void on_deliver(const Event& e);  // this QP is the responder
  void on_deliver_from(const Event& e, SimQp& req);  // of a requester of another process
  void deliver_ud(SimQp& req, std::uint32_t index);  // on_deliver for UD
  void on_ack(const Event& e);
  void on_nak(const Event& e);
  void on_rnr_nak(const Event& e);  // on_nak for a receiver-not-ready NAK
  void on_timeout(const Event& e);
  // For a timer event of this QP that would do nothing when it fires (armed before a RESET or
  // ERR, or nothing outstanding any more): forgets it and returns true. step() drops such an
  // event before time can jump to it; a NIC stops the timer when the last WQE is acknowledged.
  bool drop_idle_timer(const Event& e) noexcept;
  void on_rnr_retry(const Event& e);
  // Frees send slots up to and including `index` (a polled completion, hardware profiles).
  void retire_through(std::uint32_t index) noexcept {
    if (static_cast<std::int32_t>(index + 1 - sq_retired_) > 0 &&
        static_cast<std::int32_t>(index + 1 - sq_done_) <= 0) {
      sq_retired_ = index + 1;
    }
    check_queues();
  }
  // The queues' invariants, checked where they change (VERBSIM_ASSERT; nothing in Release):
  // retired <= done <= sent <= posted on the send queue (indices that wrap), no more WQEs than
  // slots, READs and atomics outstanding only among those sent, the receive queue within its
  // capacity, PSNs within 24 bits.
  void check_queues() const noexcept {
#if VERBSIM_ASSERTS_ON
    auto ordered = [](std::uint32_t a, std::uint32_t b) {
      return static_cast<std::int32_t>(b - a) >= 0;
    };
    VERBSIM_ASSERT(ordered(sq_retired_, sq_done_) && ordered(sq_done_, sq_sent_) &&
                       ordered(sq_sent_, sq_post_),
                   "send queue: retired <= done <= sent <= posted");
    VERBSIM_ASSERT(sq_post_ - sq_retired_ <= sq_mask_ + 1u, "send queue: WQEs fit its slots");
    VERBSIM_ASSERT(rd_atomic_outstanding_ <= sq_sent_ - sq_done_,
                   "READs and atomics outstanding are among the WQEs sent");
    VERBSIM_ASSERT(rq_.size() <= rq_.cap, "receive queue within its capacity");
    VERBSIM_ASSERT(hot_.sq_psn <= 0xffffff && epsn_ <= 0xffffff, "PSNs have 24 bits");
#endif
  }
  // Why a QP goes to ERR, where that matters: the device failed it (the fault plan's qp_fatal
  // or device_fatal) raises QP_FATAL; anything else (a transport error, a CQ of its in error
  // after a strict-profile overrun, modify) raises nothing of its own.
  enum class ErrorCause : std::uint8_t { transport, device };
  // Takes the QP to ERR, once: stale events void, timers stop, every WQE flushed; raises
  // QP_LAST_WQE_REACHED for a QP on an SRQ where the profile does. The one way to ERR.
  void enter_error(ErrorCause cause = ErrorCause::transport);
  // The MR of `key` was deregistered or re-registered: marks the messages in flight whose bytes
  // it no longer covers (SendWqe::buffers_gone). Walks the in-flight WQEs of this QP.
  void mr_changed(std::uint32_t key) noexcept;
  // The status of send WQE `index` whose own buffers failed their check: a READ or atomic
  // response that cannot be written is a protection error everywhere; data that cannot be read
  // through an unknown key may be reported apart (rxe: LOC_QP_OP_ERR).
  WcStatus local_fault_status(std::uint32_t index) noexcept;
  // Work requests still in its queues (for the accounting invariant).
  std::uint64_t outstanding() const noexcept;
  // What it waits for, for World::waiting(): "qp 17 (RC, RTS): ...".
  std::string waiting() const;
  void forget_cq_entries() noexcept;
  // On rxe, warns when type 2 windows are bound through this QP, being destroyed.
  void warn_if_windows_pin() const;
  // Invalidates the type 2 window of `key` for LOCAL_INV or SEND_WITH_INV (`what`); false when
  // `key` names nothing that can be invalidated (on rxe, warns when that would oops the kernel).
  bool invalidate(std::uint32_t key, const char* what) noexcept;

  // Send queue slot of index `i`: its WQE, then its max_send_sge_ SGEs, then its inline room.
  std::byte* sq_slot(std::uint32_t i) noexcept {
    return sq_mem_.get() + (i & sq_mask_) * sq_stride_;
  }
  SendWqe& sq_at(std::uint32_t i) noexcept { return *reinterpret_cast<SendWqe*>(sq_slot(i)); }
  // WQE `i` was posted over: its slot holds a later WQE (i + slots, or later still).
  bool sq_overwritten(std::uint32_t i) const noexcept { return sq_post_ - i - 1 > sq_mask_; }
  Sge* sq_sge(std::uint32_t i) noexcept {
    return reinterpret_cast<Sge*>(sq_slot(i) + sizeof(SendWqe));
  }
  std::uint8_t* sq_inline(std::uint32_t i) noexcept {
    return reinterpret_cast<std::uint8_t*>(sq_slot(i) + sizeof(SendWqe) +
                                           std::size_t{max_send_sge_} * sizeof(Sge));
  }
  // The operands of the atomic WR in slot `i` (RC and UC QPs), after the last slot.
  AtomicOperands& sq_atomic(std::uint32_t i) noexcept {
    return reinterpret_cast<AtomicOperands*>(sq_mem_.get() + (sq_mask_ + std::size_t{1}) *
                                                                sq_stride_)[i & sq_mask_];
  }
  // The rest of the BIND_MW in slot `i`, in the place of an atomic's operands.
  BindOperands& sq_bind(std::uint32_t i) noexcept {
    return *reinterpret_cast<BindOperands*>(&sq_atomic(i));
  }
  DevCore& dev() noexcept { return *dev_; }
  // Which world and device it is of (World::name).
  bool of_world(const World::Impl& w) const noexcept { return world_ == &w; }
  int device_index() const noexcept { return dev_->index; }
  // For observers (observe/packets.cpp): the RC/UC peer the AV names, and whether send queue
  // index `i` still holds its WQE (posted, and not posted over since).
  int peer_dev() const noexcept { return dst_dev_; }
  std::uint32_t peer_qpn() const noexcept { return hot_.dest_qp_num; }
  std::uint8_t port_num() const noexcept { return hot_.port_num; }
  bool holds_wqe(std::uint32_t i) const noexcept { return sq_post_ - i - 1 <= sq_mask_; }
  // A stand-in for a requester of another process (the StandIn constructor): no PD.
  bool stand_in() const noexcept { return pd_ == nullptr; }
  std::uint32_t epoch() const noexcept { return epoch_; }
  // Whether the response to READ or atomic WQE `index` was written into its SGEs (on the rxe
  // profile they are checked only when it lands: observers must not read them otherwise).
  bool response_written(std::uint32_t index) noexcept {
    return !checks_local_on_response() || response_lands(index);
  }
  const PdCore* pd() const noexcept { return pd_.get(); }
  // The counters of the QP's port (port 1's before the QP has one).
  PortHwCounters& port_counters() noexcept {
    const std::size_t p = hot_.port_num;
    return dev_->ports[p > 0 && p <= dev_->ports.size() ? p - 1 : 0].counters;
  }
  // What a message is cut into packets by on the wire: the path MTU (RC, UC; the port's
  // active MTU until one is set), the port's active MTU (UD).
  std::uint32_t wire_mtu() const noexcept {
    const std::size_t p = hot_.port_num;
    const PortCore& port = dev_->ports[p > 0 && p <= dev_->ports.size() ? p - 1 : 0];
    const bool path = type_ != QpType::ud && attr_.path_mtu >= Mtu::mtu_256;
    return mtu_bytes(path ? attr_.path_mtu : port.attr.active_mtu);
  }

 protected:
  World::Impl& world() const noexcept { return *world_; }
  const ProfileTraits& traits() const noexcept { return world_->traits(); }
  // A READ's or atomic's own SGEs are checked when its response arrives, not before it is sent
  // (TransportQuirks; rxe). Not in a shared fabric, where a response from another process is
  // written into the SGEs before the requester looks at it: there they are checked first.
  bool checks_local_on_response() const noexcept {
    return traits().read_atomic_local_check_on_response &&
           !world_->shared();
  }
  // Can the response to READ or atomic WQE `index` be written into its SGEs? (Only asked where
  // checks_local_on_response(); a stand-in's SGEs are its parcel's buffer.)
  bool response_lands(std::uint32_t index) noexcept {
    const SendWqe& wq = sq_at(index);
    return pd_ == nullptr || wq.inlined ||
           sges_valid(sq_sge(index), wq.num_sge, touched_bytes(wq), Access::local_write);
  }
  // post_send for a QP of type `Type`, and its steps for each WR.
  template <QpType Type>
  PostResult post_send_as(std::span<const SendWr> wrs) noexcept;
  // Why `wr` cannot be posted: 0, or an errno with `reason` set; `length` is its byte count.
  // `ahead`: WRs of the same batch that would be in the send queue before it.
  template <QpType Type>
  int check_send(const SendWr& wr, std::uint64_t& length, const char*& reason,
                 std::uint32_t ahead = 0) const noexcept;
  template <QpType Type>
  PostResult check_posts_as(std::span<const SendWr> wrs) const noexcept;
  template <QpType Type>
  void enqueue_send(const SendWr& wr, std::uint32_t length) noexcept;
  void observe_posts(std::span<const SendWr> wrs);
  // check_send for BIND_MW, LOCAL_INV and SEND_WITH_INV: why it is refused (EINVAL), or
  // nullptr.
  const char* window_op_refusal(const SendWr& wr) const noexcept;
  // The part of enqueue_send that a BIND_MW adds, for slot `i`.
  void enqueue_bind(const SendWr& wr, std::uint32_t i) noexcept;
  // Runs the BIND_MW or LOCAL_INV of send WQE `index` (memory windows: mw.cpp).
  WcStatus run_local_op(std::uint32_t index) noexcept;
  bool run_next_local_op();
  void fail_invalidation(const Event& e, const SendWqe& wq, std::uint64_t wr_id);
  void fail_request(const Event& e, Nak code, AsyncEventType event);
  // Does the window of `key` let requests arriving at this QP reach [addr, addr+len) with
  // every access bit of `need`? If so, `target` is where in the buffer addr is.
  bool window_covers(std::uint32_t key, std::uint64_t addr, std::uint64_t len, Access need,
                     std::uint64_t& target) const noexcept;
  // May a window with `access` be bound to `length` bytes at `addr` of `mr`?
  bool bind_fits(const MrCore& mr, std::uint64_t addr, std::uint64_t length,
                 Access access) const noexcept;
  void deliver_from(const Event& e, SimQp& req);  // on_deliver once the requester is found
  void transmit();
  template <QpType Type>
  void transmit_as();  // transmit() for a QP of type `Type`
  void arm_timer();
  // Goes back to the oldest WQE not yet acknowledged, to send it and those after it again (a
  // retry after a timeout or a NAK): a new epoch voids the responses still on their way.
  void rewind() noexcept {
    ++epoch_;
    sq_sent_ = sq_done_;
    rd_atomic_outstanding_ = 0;
    check_queues();
  }
  void schedule_timer();
  // Sends again from the oldest WQE not acknowledged while retry_cnt allows (the local ACK
  // timer fired, or a READ's response was lost), else fails it with RETRY_EXC_ERR.
  void retry_or_fail();
  // Whether a response to WQE `index` passes a READ or atomic that still waits for its own
  // (lost_response_before: the requester then sends again from it). One comparison while no
  // READ or atomic is outstanding or the response is to the oldest WQE.
  bool passes_lost_response(std::uint32_t index) {
    return rd_atomic_outstanding_ != 0 && index != sq_done_ && type_ == QpType::rc &&
           lost_response_before(index);
  }
  bool lost_response_before(std::uint32_t index);

 public:
  // Whether response `e` (an ACK) is the one a READ or atomic waits for: of this epoch, to a
  // READ or atomic sent and not complete, with none before it still waiting for its own. A
  // shared fabric writes the data a response from another process carries only then
  // (World::Impl::run_parcel).
  bool awaits_response(const Event& e) noexcept;

 protected:
  void complete_send(std::uint32_t index, WcStatus status);
  void complete_send_ok(std::uint32_t index);
  void push_send_wc(std::uint32_t index, WcStatus status, bool detail);
  // Completes the oldest incomplete send WQE (sq_done_).
  void complete_next(WcStatus status);
  // Completes the send WQEs from sq_done_ up to `end` (excluded) successfully, as an ACK or a
  // NAK acknowledges them; false when that overran the CQ and took the QP to ERR.
  bool acknowledge_until(std::uint32_t end);
  // False when the receive CQ dropped the completion.
  // `imm_flag`: none, with_imm (`imm` is the immediate) or with_inv (`imm` is the rkey
  // invalidated).
  bool complete_recv(RecvWqe wqe, WcStatus status, WcOpcode opcode, std::uint32_t byte_len,
                     std::uint32_t imm, WcFlags imm_flag, std::uint32_t src_qp, bool solicited);
  bool complete_recv_ok(std::uint64_t wr_id, WcOpcode opcode, std::uint32_t byte_len,
                        std::uint32_t imm, WcFlags imm_flag, std::uint32_t src_qp,
                        bool solicited);
  bool push_recv_wc(std::uint64_t wr_id, WcStatus status, WcOpcode opcode, std::uint32_t byte_len,
                    std::uint32_t imm, WcFlags imm_flag, std::uint32_t src_qp, bool solicited);
  void flush_all();
  void reset_queues();
  // The responder's answers to the requester of `request`, for its WQE `index`: an ACK (with
  // `bytes` of data for a READ or atomic response), or a NAK with its code (and an RNR NAK's
  // timer); response_to() is what both packets have in common.
  // `data`: the response of a READ or atomic (which the fault rules' packets=acks leaves).
  void send_ack(const Event& request, std::uint32_t index, std::uint64_t bytes,
                bool data = false);
  void send_nak(const Event& request, Nak code, std::uint32_t index, std::uint8_t rnr_timer = 0);
  Event response_to(const Event& request, std::uint32_t index, std::uint64_t bytes);
  // The responder's steps for a message (responder.cpp): its PSN, the remote access check, a
  // missing receive, and executing each opcode family (false: not to be ACKed).
  bool in_sequence(const Event& e, const SendWqe& wq, SimQp& req);
  void reread(const Event& e, SimQp& req);
  bool remote_ok(const SendWqe& wq, Access need, std::uint64_t len, Nak& nak,
                 std::uint64_t& target) noexcept;
  void no_receive(const Event& e, const SendWqe& wq);
  bool execute_send(const Event& e, SimQp& req);
  bool execute_write(const Event& e, SimQp& req);
  bool execute_read(const Event& e, SimQp& req);
  bool execute_atomic(const Event& e, SimQp& req);
  // The next message of `e`'s flow, already on the wire behind it, whose response can
  // acknowledge `e` too (ACK coalescing); nullptr if there is none or this QP does not coalesce.
  Event* ack_successor(const Event& e) noexcept;
  // The MR of this QP's PD that `key` names on its device, or nullptr. The last one found is
  // remembered until an MR of the device is deregistered or re-registered (mr_generation).
  const MrCore* find_mr(std::uint32_t key) noexcept;
  // Do the first `len` bytes of the SGE list lie in MRs of this QP's PD with every access bit
  // of `need`? Only what a message reads or writes is checked, as rxe's copy_data does while it
  // copies (conformance Datapath.ReceiveIsCheckedOnlyWhereTheMessageLands): an SGE past the
  // message's last byte, the part of an SGE past it and every SGE of a 0-byte message are not
  // looked at. The fast test is that every SGE is valid whole; only if one is not are the
  // bytes counted.
  bool sges_valid(const Sge* sges, std::uint32_t n, std::uint64_t len, Access need) noexcept {
    return whole_sges_valid(sges, n, need) || bytes_valid(sges, n, len, need);
  }
  bool whole_sges_valid(const Sge* sges, std::uint32_t n, Access need) noexcept;
  bool bytes_valid(const Sge* sges, std::uint32_t n, std::uint64_t len, Access need) noexcept;
  // Does every SGE the first `len` bytes reach name an MR of this QP's PD (whatever its bounds
  // and rights)?
  bool sge_keys_known(const Sge* sges, std::uint32_t n, std::uint64_t len) noexcept;
  // Takes the next receive WQE from the RQ or SRQ; false if none.
  bool take_recv(RecvWqe& wqe, Sge*& sges) {
    RecvQueue& rq = has_srq_ ? srq_->rq : rq_;
    if (rq.size() == 0) return false;
    wqe = rq.at(rq.head);
    sges = rq.sge_at(rq.head);
    ++rq.head;
    if (has_srq_) [[unlikely]] srq_->consumed();
    return true;
  }
  void apply(const QpAttr& attr, QpAttrMask mask);
  void raise(AsyncEventType type);

  // The fields sit by who reads them, so that a SEND touches few cache lines of a QP whose
  // state has gone cold (many QPs): the object is aligned to a line, line 0 holds what the
  // requester and the responder both read, line 1 the requester's send queue, line 2 its timer
  // and retries (then owners the data path does not read), line 3 the responder's receive
  // queue; what the data path does not read follows. (The vtable pointer is at offset 0.) Keep
  // the sizes: moving a field across a line costs a miss per message at 10,000 QPs, and the
  // object must stay within 384 bytes (6 lines; docs/PERFORMANCE.md, "Memory and scaling").

  // The fields of QpAttr that a SEND's requester and responder read. attr_ holds every other
  // field; its copies of these are not used (query() fills them in from here), except
  // attr_.sq_psn, the PSN modify() set (hot_.sq_psn is the PSN of the WQE at
  // sq_psn_base_index_, which a bind or local invalidate moves on). RDMA and atomic
  // requests also read attr_.qp_access_flags (and more on their error paths), UD receives
  // attr_.qkey: one more line for those.
  struct HotAttr {
    QpState qp_state = QpState::reset;
    std::uint8_t port_num = 0;
    std::uint8_t timeout = 0;
    std::uint8_t retry_cnt = 0;
    std::uint8_t rnr_retry = 0;
    std::uint8_t max_rd_atomic = 0;
    std::uint32_t sq_psn = 0;
    std::uint32_t dest_qp_num = 0;
  };
  // The MR find_mr found last; it still exists, with the same key and PD, while `generation`
  // is the device's mr_generation (0: none found yet).
  struct MrCache {
    std::uint64_t generation = 0;
    const MrCore* mr = nullptr;
  };

  // Line 0: both roles.
  World::Impl* world_;  // pd_->ctx->world
  DevCore* dev_;
  MrCache mr_cache_;
  std::uint32_t qpn_;
  HotAttr hot_;
  QpType type_;
  bool sq_sig_all_;
  bool comm_est_raised_ = false;

  // Line 1: the requester's send queue. Indices grow without bound; slot = index & sq_mask_.
  // One allocation holds the slots (sq_stride_ bytes each: a WQE, its SGEs, its inline room),
  // then, except on UD QPs, an AtomicOperands per slot.
  std::shared_ptr<CqCore> scq_;  // its first half, the pointer, is what the data path reads
  std::unique_ptr<std::byte[]> sq_mem_;
  std::uint32_t sq_depth_ = 0;  // max_send_wr given
  std::uint32_t sq_mask_ = 0;
  std::uint32_t max_send_sge_ = 1;
  std::uint32_t sq_stride_ = 0;
  std::uint32_t sq_retired_ = 0;  // slots before this are free
  std::uint32_t sq_done_ = 0;     // WQEs before this are complete
  std::uint32_t sq_sent_ = 0;     // WQEs before this were transmitted (in this epoch)
  std::uint32_t sq_post_ = 0;     // next WQE to post
  std::uint32_t sq_psn_base_index_ = 0;  // index whose PSN is hot_.sq_psn
  std::uint32_t epoch_ = 0;

  // Line 2: the requester's timer and retries; then owners the data path does not read (the
  // PD owns the context; the PD, the CQs and the SRQ stay alive while the QP is).
  std::uint64_t timer_deadline_ = 0;  // local ACK timeout of the oldest outstanding WQE
  std::uint64_t timer_gen_ = 0;       // changes on RESET/ERR: older timer events are void
  std::uint32_t rd_atomic_outstanding_ = 0;
  int dst_dev_ = -1;  // RC/UC peer device from the AV
  bool timer_armed_ = false;  // one timer event per QP is in the heap
  std::uint8_t retry_left_ = 0;
  std::uint8_t rnr_left_ = 0;
  bool rnr_wait_ = false;
  std::uint32_t rnr_naks_ = 0;  // RNR NAKs received (World::waiting())
  std::shared_ptr<SrqCore> srq_;
  std::shared_ptr<PdCore> pd_;

  // Line 3: the responder's receive queue; then what the data path does not read.
  RecvQueue rq_;
  std::shared_ptr<CqCore> rcq_;
  std::uint32_t epsn_ = 0;
  bool has_srq_;  // srq_ != nullptr (it never changes), in the responder's line
  bool destroyed_ = false;
  // What cap() and requested_cap() return. The capabilities actually given (query()) differ
  // from reported_cap_ only on rxe, in the depths and max_recv_sge: those are sq_depth_,
  // rq_.cap and rq_.max_sge.
  QpCap requested_cap_;
  QpCap reported_cap_;
  QpAttr attr_;
};
static_assert(sizeof(SimQp) <= 384, "6 cache lines at most: see the comment on SimQp's fields");

// An MR of `dev` was deregistered or re-registered: the QPs' remembered MR lookups are stale,
// and messages in flight that use it may no longer touch its memory (SimQp::mr_changed). It
// visits every QP of the device: a deregistration costs O(QPs), on the control path.
inline void mr_changed(DevCore& dev, std::uint32_t key) noexcept {
  ++dev.mr_generation;
  dev.qps.for_each([key](SimQp& qp) { qp.mr_changed(key); });
}

}  // namespace verbsim::sim
