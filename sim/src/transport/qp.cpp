// Queue pairs: creation, posting, the state machine and flushing.
#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>

#include "faults/faulty.hpp"
#include "transport/qp.hpp"
#include "transport/qp_state_table.hpp"
#include "transport/wire.hpp"
#include "verbsim/error.hpp"

namespace verbsim::sim {

namespace {
std::string str(std::uint64_t v) { return std::to_string(v); }

SimCq* sim_cq(CompletionQueue* cq, const std::shared_ptr<CtxCore>& ctx) {
  auto* s = dynamic_cast<SimCq*>(cq);
  return s != nullptr && s->core()->ctx == ctx ? s : nullptr;
}

}  // namespace

std::unique_ptr<QueuePair> SimPd::create_qp(const QpInitAttr& init) {
  const ProfileTraits& t = core_->ctx->world->traits();
  if (init.type != QpType::rc && init.type != QpType::uc && init.type != QpType::ud) {
    throw_verb_error("ibv_create_qp", EINVAL, "unsupported QP type");
  }
  if (sim_cq(init.send_cq, core_->ctx) == nullptr || sim_cq(init.recv_cq, core_->ctx) == nullptr) {
    throw_verb_error("ibv_create_qp", EINVAL, "send_cq and recv_cq must be CQs of the same device");
  }
  const QpCap& c = init.cap;
  if (c.max_send_wr > t.limits.max_qp_wr || (init.srq == nullptr && c.max_recv_wr > t.limits.max_qp_wr)) {
    throw_verb_error("ibv_create_qp", EINVAL,
         "max_send_wr=" + str(c.max_send_wr) + ", max_recv_wr=" + str(c.max_recv_wr) +
             " exceed max_qp_wr=" + str(t.limits.max_qp_wr));
  }
  if (c.max_send_sge > t.limits.max_sge || c.max_recv_sge > t.limits.max_sge) {
    throw_verb_error("ibv_create_qp", EINVAL,
         "max_send_sge=" + str(c.max_send_sge) + ", max_recv_sge=" + str(c.max_recv_sge) +
             " exceed max_sge=" + str(t.limits.max_sge));
  }
  if (c.max_inline_data > t.limits.max_inline) {
    throw_verb_error("ibv_create_qp", EINVAL,
         "max_inline_data=" + str(c.max_inline_data) + " exceeds " + str(t.limits.max_inline));
  }
  if (init.srq != nullptr) {
    auto* srq = dynamic_cast<SimSrq*>(init.srq);
    if (srq == nullptr || srq->core()->pd->ctx != core_->ctx) {
      throw_verb_error("ibv_create_qp", EINVAL, "the SRQ belongs to another device");
    }
    if (init.type == QpType::uc && !core_->ctx->world->traits().uc_on_srq) {
      throw_verb_error("ibv_create_qp", EINVAL, "UC QPs cannot use an SRQ");
    }
  }
  DevCore& dev = *core_->ctx->dev;
  World::Impl& w = *core_->ctx->world;
  if (const int err = w.verb_fault(Verb::create_qp, 0, &dev)) {
    throw_verb_error("ibv_create_qp", err, "injected by the fault plan");
  }
  if (dev.live_qps >= dev.limits.max_qp) {
    throw_verb_error("ibv_create_qp", w.traits().pool_full_errno,
                     "the device holds " + str(dev.limits.max_qp) + " QPs already (its max)");
  }
  std::uint32_t qpn = 0;
  if (w.shared()) {
    qpn = w.take_qpn(dev);  // unique in the fabric
  } else if (dev.qpns.fresh_left() || dev.qpns.freed_left()) {
    qpn = dev.qpns.fresh_left() ? dev.qpns.take_fresh() : dev.qpns.take_freed();
  }
  if (qpn == 0) throw_verb_error("ibv_create_qp", ENOMEM, "QP numbers exhausted");
  if (w.faults().targets(Verb::post_send) ||
      w.faults().targets(Verb::post_recv)) {
    return std::make_unique<FaultyQp>(core_, init, qpn);
  }
  return std::make_unique<SimQp>(core_, init, qpn);
}

SimQp::SimQp(std::shared_ptr<PdCore> pd, const QpInitAttr& init, std::uint32_t qpn)
    : world_(pd->ctx->world),
      dev_(pd->ctx->dev),
      qpn_(qpn),
      type_(init.type),
      sq_sig_all_(init.sq_sig_all),
      scq_(static_cast<SimCq*>(init.send_cq)->core()),
      pd_(std::move(pd)),
      rcq_(static_cast<SimCq*>(init.recv_cq)->core()),
      has_srq_(init.srq != nullptr),
      requested_cap_(init.cap) {
  const ProfileTraits& t = traits();
  if (init.srq != nullptr) srq_ = static_cast<SimSrq*>(init.srq)->core();
  QpCap actual = requested_cap_;
  actual.max_send_wr = t.round_wq(requested_cap_.max_send_wr);
  actual.max_recv_wr = srq_ ? 0 : t.round_wq(requested_cap_.max_recv_wr);
  if (srq_) requested_cap_.max_recv_wr = 0;
  actual.max_send_sge = std::max<std::uint32_t>(requested_cap_.max_send_sge, 1);
  actual.max_recv_sge = std::max<std::uint32_t>(requested_cap_.max_recv_sge, 1);
  actual.max_inline_data =
      std::max(requested_cap_.max_inline_data, t.limits.min_inline_per_sge * actual.max_send_sge);
  if (t.limits.min_inline_per_sge != 0) {
    // rxe sizes a send WQE for max(16 bytes per SGE, inline data) and gives every SGE that
    // fits in it: max_send_sge=1 with max_inline_data=64 gets 4 SGEs.
    actual.max_send_sge =
        std::max(actual.max_send_sge, actual.max_inline_data / t.limits.min_inline_per_sge);
  }
  reported_cap_ = actual;
  if (t.create_reports_requested) {
    // rxe's kernel writes back the SGE and inline sizes it chose, not the rounded depths.
    reported_cap_.max_send_wr = requested_cap_.max_send_wr;
    reported_cap_.max_recv_wr = requested_cap_.max_recv_wr;
    reported_cap_.max_recv_sge = requested_cap_.max_recv_sge;
  }

  const std::uint32_t slots = std::bit_ceil(std::max<std::uint32_t>(actual.max_send_wr, 1));
  sq_depth_ = actual.max_send_wr;
  sq_mask_ = slots - 1;
  max_send_sge_ = actual.max_send_sge;
  const std::uint32_t inline_stride = (actual.max_inline_data + 7u) & ~7u;
  sq_stride_ = static_cast<std::uint32_t>(sizeof(SendWqe) + max_send_sge_ * sizeof(Sge)) +
               inline_stride;
  static_assert(sizeof(SendWqe) % alignof(Sge) == 0 && alignof(SendWqe) >= alignof(Sge) &&
                alignof(SendWqe) >= alignof(AtomicOperands));
  const std::size_t slot_bytes = std::size_t{slots} * sq_stride_;
  const std::size_t atomic_bytes = type_ == QpType::ud ? 0 : slots * sizeof(AtomicOperands);
  // Value-initialised: a slot never posted reads as zeros.
  sq_mem_ = std::make_unique<std::byte[]>(slot_bytes + atomic_bytes);
  for (std::uint32_t i = 0; i < slots; ++i) {
    new (sq_slot(i)) SendWqe();
    new (sq_sge(i)) Sge[max_send_sge_]();
  }
  if (atomic_bytes != 0) new (sq_mem_.get() + slot_bytes) AtomicOperands[slots]();
  if (!srq_) {
    rq_.init(actual.max_recv_wr, actual.max_recv_sge);
  } else {
    rq_.max_sge = actual.max_recv_sge;  // for query(); the RQ itself stays empty
  }

  ++pd_->users;
  ++scq_->users;
  scq_->qps.add(qpn_, this);
  ++rcq_->users;
  if (rcq_ != scq_) rcq_->qps.add(qpn_, this);
  if (srq_) ++srq_->users;
  dev_->qps.insert(qpn_, this);
  ++dev_->live_qps;
}

SimQp::SimQp(StandIn, World::Impl& w, DevCore& dev, std::uint32_t qpn)
    : world_(&w), dev_(&dev), qpn_(qpn), type_(QpType::rc), sq_sig_all_(false), has_srq_(false) {
  constexpr std::uint32_t kSlots = 1024;  // more than a requester has outstanding
  sq_mask_ = kSlots - 1;
  sq_depth_ = kSlots;
  max_send_sge_ = 1;
  sq_stride_ = sizeof(SendWqe) + sizeof(Sge);
  const std::size_t slot_bytes = std::size_t{kSlots} * sq_stride_;
  sq_mem_ = std::make_unique<std::byte[]>(slot_bytes + kSlots * sizeof(AtomicOperands));
  destroyed_ = true;  // nothing of a device's tables to leave
}

void SimQp::load_stand_in(std::uint32_t index, std::uint32_t epoch, QpType type,
                          const SendWqe& wq, const AtomicOperands& atomic,
                          std::uint8_t* data, std::uint32_t responder) noexcept {
  type_ = type;
  epoch_ = epoch;
  hot_.dest_qp_num = responder;
  if (static_cast<std::int32_t>(index + 1 - sq_post_) > 0 || sq_overwritten(index)) {
    sq_post_ = index + 1;
  }
  SendWqe& slot = sq_at(index);
  slot = wq;
  slot.num_sge = 1;
  slot.inlined = false;
  *sq_sge(index) = Sge{reinterpret_cast<std::uint64_t>(data), is_atomic(wq.opcode) ? 8 : wq.length, 0};
  sq_atomic(index) = atomic;
}

SimQp::~SimQp() {
  if (!destroyed_) destroy();
}

void SimQp::destroy() {
  if (destroyed_) return;
  if (traits().type2_window_pins_qp && dev_->live_mws > 0) warn_if_windows_pin();
  world().acct().discarded += outstanding();
  forget_cq_entries();
  dev_->qps.erase(qpn_);
  if (world().shared()) {
    world().give_back_qpn(*dev_, qpn_);
  } else {
    dev_->qpns.give_back(qpn_);
  }
  --dev_->live_qps;
  --scq_->users;
  scq_->qps.remove(qpn_);
  --rcq_->users;
  rcq_->qps.remove(qpn_);
  if (srq_) --srq_->users;
  --pd_->users;
  pd_->ctx->forget_events_of(static_cast<QueuePair*>(this));
  destroyed_ = true;
}

// rxe's windows hold the QP they were bound through: the simulator goes on (the window stays
// bound and serves no QP), but the program would hang on rxe, and worse.
void SimQp::warn_if_windows_pin() const {
  int windows = 0;
  dev_->mws.for_each([&](const MwCore& mw) { windows += mw.bound && mw.qpn == qpn_ ? 1 : 0; });
  if (windows == 0) return;
  std::fprintf(stderr,
               "verbsim: ibv_destroy_qp: QP %u destroyed while %d type 2 memory windows are bound "
               "through it; on rxe (kernel 6.1) this blocks 50 s and frees the QP under them (a "
               "use-after-free): invalidate or deallocate them first\n",
               qpn_, windows);
}

void SimQp::forget_cq_entries() noexcept {
  const bool clean = traits().clean_cq_on_qp_destroy;
  for (CqCore* cq : {scq_.get(), rcq_.get()}) {
    const auto size = static_cast<std::uint32_t>(cq->ring.size());
    std::uint32_t kept = 0;
    for (std::uint32_t i = 0; i < cq->count; ++i) {
      CqEntry e = cq->ring[(cq->head + i) % size];
      if (e.qp == this) {
        if (clean) continue;
        e.qp = nullptr;
      }
      cq->ring[(cq->head + kept) % size] = e;
      ++kept;
    }
    cq->count = kept;
  }
}

// ---------------------------------------------------------------------------------------------
// Errors and flushing

void SimQp::raise(AsyncEventType type) {
  AsyncEvent ev;
  ev.type = type;
  ev.qp = this;
  ev.qp_num = qpn_;
  pd_->ctx->raise(ev);
}

void SimQp::flush_all() {
  const auto flush_receives = [this] {
    if (srq_) return;
    while (rq_.size() > 0) {
      const RecvWqe w = rq_.at(rq_.head++);
      complete_recv(w, WcStatus::wr_flush_err, WcOpcode::recv, 0, 0, WcFlags::none, 0, false);
    }
  };
  const bool receives_first =
      type_ == QpType::rc && traits().rc_flushes_receives_first;
  if (receives_first) flush_receives();
  while (sq_done_ != sq_post_) complete_next(WcStatus::wr_flush_err);
  sq_sent_ = sq_done_;
  rd_atomic_outstanding_ = 0;
  if (!traits().retire_on_poll) sq_retired_ = sq_done_;
  if (!receives_first) flush_receives();
  check_queues();
}

void SimQp::enter_error(ErrorCause cause) {
  if (hot_.qp_state == QpState::err) return;
  hot_.qp_state = QpState::err;
  ++epoch_;
  ++timer_gen_;
  timer_armed_ = false;
  rnr_wait_ = false;
  flush_all();
  if (cause == ErrorCause::device) raise(AsyncEventType::qp_fatal);
  if (srq_ && traits().last_wqe_reached_event) raise(AsyncEventType::qp_last_wqe_reached);
}

std::string SimQp::waiting() const {
  std::string out = "qp " + std::to_string(qpn_) + " (" + std::string(to_string(type_)) + ", " +
                    std::string(to_string(hot_.qp_state)) + "): ";
  const std::uint32_t sends = sq_post_ - sq_done_;
  if (sends == 0) {
    out += "no send WR outstanding";
  } else {
    out += std::to_string(sends) + " send WR(s) outstanding, " +
           std::to_string(sq_sent_ - sq_done_) + " of them sent and not acknowledged";
  }
  if (rnr_wait_) out += "; waiting out a receiver-not-ready NAK";
  if (rnr_naks_ != 0) {
    out += "; " + std::to_string(rnr_naks_) + " RNR NAK(s) received, " +
           (hot_.rnr_retry == 7 ? std::string("rnr_retry 7 retries forever (post the peer's "
                                              "receive, or set rnr_retry < 7)")
                                : std::to_string(rnr_left_) + " RNR retries left");
  }
  if (type_ == QpType::rc && retry_left_ != hot_.retry_cnt) {
    out += "; " + std::to_string(retry_left_) + " of " + std::to_string(hot_.retry_cnt) +
           " transport retries left";
  }
  if (srq_) {
    out += "; receives from an SRQ (" + std::to_string(srq_->rq.size()) + " posted)";
  } else {
    out += "; " + std::to_string(rq_.size()) + " receive(s) posted";
  }
  return out;
}

std::uint64_t SimQp::outstanding() const noexcept {
  return (sq_post_ - sq_done_) + (srq_ ? 0 : rq_.size());
}

void SimQp::reset_queues() {
  world().acct().discarded += outstanding();
  forget_cq_entries();
  sq_retired_ = sq_done_ = sq_sent_ = sq_post_ = 0;
  sq_psn_base_index_ = 0;
  rq_.clear();
  ++epoch_;
  ++timer_gen_;
  timer_armed_ = false;
  rnr_wait_ = false;
  rd_atomic_outstanding_ = 0;
  comm_est_raised_ = false;
  dst_dev_ = -1;
  check_queues();
}

// ---------------------------------------------------------------------------------------------
// State machine

void SimQp::modify(const QpAttr& attr, QpAttrMask mask) {
  const QpState cur = hot_.qp_state;
  const QpState next = any(mask, QpAttrMask::state) ? attr.qp_state : cur;
  auto bad = [&](const std::string& why) {
    throw_verb_error("ibv_modify_qp", EINVAL,
         std::string(to_string(cur)) + "->" + std::string(to_string(next)) + ": " + why);
  };
  // rxe checks the transition from the cur_qp_state it is told, whatever the QP's state.
  const bool trust_cur = any(mask, QpAttrMask::cur_state) && traits().modify_trusts_cur_state;
  if (any(mask, QpAttrMask::cur_state) && attr.cur_qp_state != cur && !trust_cur) {
    bad("cur_qp_state " + std::string(to_string(attr.cur_qp_state)) + " is not the QP's state");
  }
  if (const int err = world().verb_fault(Verb::modify_qp, qpn_, dev_)) {
    throw_verb_error("ibv_modify_qp", err, "injected by the fault plan");
  }
  const TransitionCheck check =
      check_transition(type_, trust_cur ? attr.cur_qp_state : cur, next, mask);
  if (!check.ok) bad(check.reason);
  if (cur == QpState::sqd && attr_.sq_draining && next != QpState::err &&
      any(mask, QpAttrMask::state) && traits().sqd_holds_while_draining) {
    bad("the send queue is still draining (only ERR is allowed until it has)");
  }

  const DevCore& dev = *dev_;
  if (any(mask, QpAttrMask::port) && (attr.port_num < 1 || attr.port_num > dev.ports.size())) {
    bad("port " + str(attr.port_num) + " does not exist");
  }
  if (any(mask, QpAttrMask::pkey_index) && attr.pkey_index >= 1 && traits().pkey_index_checked) {
    bad("pkey_index " + str(attr.pkey_index) + " out of range");
  }
  if (any(mask, QpAttrMask::access_flags) &&
      any(attr.qp_access_flags, ~(Access::local_write | Access::remote_write |
                                  Access::remote_read | Access::remote_atomic))) {
    bad("unknown access flags");
  }
  if (any(mask, QpAttrMask::path_mtu) &&
      (attr.path_mtu < Mtu::mtu_256 || attr.path_mtu > dev.ports[0].attr.max_mtu)) {
    bad("path_mtu above the port's max_mtu");
  }
  if (any(mask, QpAttrMask::av)) {
    // ib_uverbs' modify_qp checks the AV's port as any port (rdma_is_port_valid).
    const std::uint8_t port = attr.ah_attr.port_num;
    if (port < 1 || port > dev.ports.size()) bad("ah_attr.port_num " + str(port) + " does not exist");
    if (!attr.ah_attr.is_global) bad("RoCE needs a GRH in the address vector (is_global)");
    const PortCore& p = dev.ports[port - 1u];
    if (attr.ah_attr.grh.sgid_index >= p.attr.gid_tbl_len) {
      bad("sgid_index " + str(attr.ah_attr.grh.sgid_index) + " out of range");
    }
    if (attr.ah_attr.grh.sgid_index >= p.gids.size()) {
      // The kernel finds no GID attribute there (rdma_get_gid_attr): ENODATA, not EINVAL.
      throw_verb_error("ibv_modify_qp", ENODATA,
           "sgid_index " + str(attr.ah_attr.grh.sgid_index) + " names an empty GID entry");
    }
  }
  if (any(mask, QpAttrMask::dest_qpn) && attr.dest_qp_num > 0xffffff) {
    bad("dest_qp_num " + str(attr.dest_qp_num) + " above 24 bits");
  }
  if (any(mask, QpAttrMask::timeout) && attr.timeout > 31) bad("timeout above 31");
  if (any(mask, QpAttrMask::retry_cnt) && attr.retry_cnt > 7) bad("retry_cnt above 7");
  if (any(mask, QpAttrMask::rnr_retry) && attr.rnr_retry > 7) bad("rnr_retry above 7");
  if (any(mask, QpAttrMask::min_rnr_timer) && attr.min_rnr_timer > 31) bad("min_rnr_timer above 31");
  if (any(mask, QpAttrMask::max_qp_rd_atomic) && attr.max_rd_atomic > 128) {
    bad("max_rd_atomic above max_qp_init_rd_atom");
  }
  if (any(mask, QpAttrMask::max_dest_rd_atomic) && attr.max_dest_rd_atomic > 128) {
    bad("max_dest_rd_atomic above max_qp_rd_atom");
  }
  if (any(mask, QpAttrMask::cap)) bad("resizing a QP is not supported");

  apply(attr, mask);
  // A move to RESET empties the queues whatever the state before, RESET included: rxe runs
  // rxe_qp_reset() and libmlx5 resets its queue indices on every one.
  if (next == cur && next != QpState::sqd && next != QpState::reset) return;
  switch (next) {
    case QpState::reset: {
      attr_ = QpAttr{};
      hot_ = HotAttr{};
      reset_queues();
      break;
    }
    case QpState::err:
      hot_.qp_state = cur;  // so enter_error runs
      enter_error();
      break;
    case QpState::rtr:
      hot_.qp_state = next;
      epsn_ = attr_.rq_psn;
      if (type_ != QpType::ud) dst_dev_ = world().route(attr_.ah_attr.grh.dgid);
      break;
    case QpState::rts:
      hot_.qp_state = next;
      if (cur == QpState::rtr) {
        sq_psn_base_index_ = sq_sent_;
        retry_left_ = hot_.retry_cnt;
        rnr_left_ = hot_.rnr_retry;
      }
      attr_.sq_draining = 0;
      // WRs posted before (rxe: refused in RESET..RTR, or held in SQD) go now on hardware;
      // rxe starts its requester only from post_send.
      if (traits().rts_starts_send_queue) transmit();
      break;
    case QpState::sqd:
      hot_.qp_state = next;
      attr_.sq_draining = sq_done_ != sq_sent_;
      if (!attr_.sq_draining && cur != QpState::sqd && attr_.en_sqd_async_notify) {
        raise(AsyncEventType::sq_drained);
      }
      break;
    default: hot_.qp_state = next; break;
  }
}

void SimQp::apply(const QpAttr& a, QpAttrMask m) {
  if (any(m, QpAttrMask::en_sqd_async_notify)) attr_.en_sqd_async_notify = a.en_sqd_async_notify;
  if (any(m, QpAttrMask::access_flags)) attr_.qp_access_flags = a.qp_access_flags;
  if (any(m, QpAttrMask::pkey_index)) attr_.pkey_index = a.pkey_index;
  if (any(m, QpAttrMask::port)) hot_.port_num = a.port_num;
  if (any(m, QpAttrMask::qkey)) attr_.qkey = a.qkey;
  if (any(m, QpAttrMask::av)) attr_.ah_attr = a.ah_attr;
  if (any(m, QpAttrMask::path_mtu)) attr_.path_mtu = a.path_mtu;
  if (any(m, QpAttrMask::timeout)) hot_.timeout = a.timeout;
  if (any(m, QpAttrMask::retry_cnt)) {
    hot_.retry_cnt = a.retry_cnt;
    retry_left_ = a.retry_cnt;
  }
  if (any(m, QpAttrMask::rnr_retry)) {
    hot_.rnr_retry = a.rnr_retry;
    rnr_left_ = a.rnr_retry;
  }
  if (any(m, QpAttrMask::rq_psn)) attr_.rq_psn = a.rq_psn & 0xffffff;
  if (any(m, QpAttrMask::max_qp_rd_atomic)) hot_.max_rd_atomic = a.max_rd_atomic;
  if (any(m, QpAttrMask::min_rnr_timer)) attr_.min_rnr_timer = a.min_rnr_timer;
  if (any(m, QpAttrMask::sq_psn)) {
    hot_.sq_psn = a.sq_psn & 0xffffff;
    attr_.sq_psn = hot_.sq_psn;  // what query() reports: hot_.sq_psn moves past local ops
  }
  if (any(m, QpAttrMask::max_dest_rd_atomic)) attr_.max_dest_rd_atomic = a.max_dest_rd_atomic;
  if (any(m, QpAttrMask::dest_qpn)) hot_.dest_qp_num = a.dest_qp_num;
}

QpAttr SimQp::query(QpAttrMask) const {
  QpAttr a = attr_;
  a.qp_state = hot_.qp_state;
  a.port_num = hot_.port_num;
  a.timeout = hot_.timeout;
  a.retry_cnt = hot_.retry_cnt;
  a.rnr_retry = hot_.rnr_retry;
  a.max_rd_atomic = hot_.max_rd_atomic;
  a.dest_qp_num = hot_.dest_qp_num;
  a.cur_qp_state = a.qp_state;
  a.cap = reported_cap_;
  a.cap.max_send_wr = sq_depth_;
  a.cap.max_recv_wr = srq_ ? 0 : rq_.cap;
  a.cap.max_recv_sge = rq_.max_sge;
  return a;
}

}  // namespace verbsim::sim
