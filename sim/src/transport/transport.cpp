// The wire protocol between QPs, at message granularity: RC with ACKs, NAKs (RNR, sequence,
// access, invalid request, operational), the local ACK timeout and both retry counters; UC and
// UD without acknowledgements. A message's data is read from the sender's memory when it
// arrives, as a NIC reads it by DMA while sending.
#include <algorithm>
#include <cstddef>
#include <cstring>

#include "transport/qp.hpp"

namespace verbsim::sim {

namespace {

bool is_read_or_atomic(WrOpcode op) noexcept {
  return op == WrOpcode::rdma_read || op == WrOpcode::atomic_cmp_and_swp ||
         op == WrOpcode::atomic_fetch_and_add;
}

// What a send WQE's own buffers must allow, and how many of their bytes a message touches: a
// READ's response fills them, an atomic's the first 8 bytes (rxe takes longer buffers), other
// messages are read from them whole.
Access local_need(const SendWqe& wq) noexcept {
  return is_read_or_atomic(wq.opcode) ? Access::local_write : Access::none;
}
std::uint64_t touched_bytes(const SendWqe& wq) noexcept {
  return is_read_or_atomic(wq.opcode) && wq.opcode != WrOpcode::rdma_read ? 8 : wq.length;
}

// UD sends only SENDs; UC has no READ or atomics. (Profiles that check at post time never
// let anything else into the queue.)
bool opcode_supported(QpType type, WrOpcode op) noexcept {
  if (type == QpType::ud) {
    return op == WrOpcode::send || op == WrOpcode::send_with_imm || op == WrOpcode::send_with_inv;
  }
  return type == QpType::rc || !is_read_or_atomic(op);
}

// What a SEND-family message's receive completion says of `imm`: with_imm, with_inv or none.
WcFlags recv_flag_of(WrOpcode op) noexcept {
  if (op == WrOpcode::send_with_imm) return WcFlags::with_imm;
  return op == WrOpcode::send_with_inv ? WcFlags::with_inv : WcFlags::none;
}

// BIND_MW and LOCAL_INV run in the requester and put nothing on the wire.
bool is_local_op(WrOpcode op) noexcept {
  static_assert(static_cast<int>(WrOpcode::bind_mw) == static_cast<int>(WrOpcode::local_inv) + 1);
  return static_cast<unsigned>(op) - static_cast<unsigned>(WrOpcode::local_inv) < 2;
}


// Scatters `len` bytes from `src` into the SGE list.
void scatter(const Sge* dst, std::uint32_t n, const std::uint8_t* src, std::uint64_t len) noexcept {
  for (std::uint32_t i = 0; i < n && len > 0; ++i) {
    const std::uint64_t k = std::min<std::uint64_t>(dst[i].length, len);
    std::memcpy(reinterpret_cast<void*>(dst[i].addr), src, k);
    src += k;
    len -= k;
  }
}

// Copies from one SGE list to another (sizes already checked), in general.
void sg_copy_lists(const Sge* dst, std::uint32_t nd, const Sge* src, std::uint32_t ns) noexcept {
  std::uint32_t di = 0;
  std::uint64_t doff = 0;
  for (std::uint32_t si = 0; si < ns; ++si) {
    auto* s = reinterpret_cast<const std::uint8_t*>(src[si].addr);
    std::uint64_t left = src[si].length;
    while (left > 0 && di < nd) {
      const std::uint64_t k = std::min<std::uint64_t>(left, dst[di].length - doff);
      std::memcpy(reinterpret_cast<std::uint8_t*>(dst[di].addr) + doff, s, k);
      s += k;
      left -= k;
      doff += k;
      if (doff == dst[di].length) {
        ++di;
        doff = 0;
      }
    }
  }
}

// Copies from one SGE list to another (sizes already checked).
[[gnu::always_inline]] inline void sg_copy(const Sge* dst, std::uint32_t nd, const Sge* src,
                                           std::uint32_t ns) noexcept {
  if (nd != 1 || ns != 1) return sg_copy_lists(dst, nd, src, ns);
  if (src->length == 0) return;  // its address may be anything
  std::memcpy(reinterpret_cast<void*>(dst->addr), reinterpret_cast<const void*>(src->addr),
              src->length);
}

// The 40 bytes a UD receive gets before the payload. RoCE v2 over IPv4 (IPv4-mapped GIDs), as
// rxe's build_rdma_network_hdr and mlx5 lay it out: 20 unused bytes, then the IPv4 header;
// otherwise an IPv6 header (RoCE v2 over IPv6, next header UDP).
void build_grh(std::uint8_t* out, const Gid& sgid, const Gid& dgid, std::uint32_t length) noexcept {
  std::memset(out, 0, 40);
  // UDP (8) + BTH (12) + DETH (8) + payload + ICRC (4)
  const std::uint32_t udp_len = 8 + 12 + 8 + length + 4;
  if (sgid.is_ipv4_mapped() && dgid.is_ipv4_mapped()) {
    std::uint8_t* ip = out + 20;
    const std::uint32_t total = 20 + udp_len;
    ip[0] = 0x45;  // version 4, 5 words
    ip[2] = static_cast<std::uint8_t>(total >> 8);
    ip[3] = static_cast<std::uint8_t>(total);
    ip[6] = 0x40;  // don't fragment
    ip[8] = 64;    // TTL
    ip[9] = 17;    // UDP
    std::memcpy(ip + 12, sgid.raw.data() + 12, 4);
    std::memcpy(ip + 16, dgid.raw.data() + 12, 4);
    std::uint32_t sum = 0;
    for (int i = 0; i < 20; i += 2) sum += static_cast<std::uint32_t>(ip[i] << 8 | ip[i + 1]);
    while (sum > 0xffff) sum = (sum & 0xffff) + (sum >> 16);
    ip[10] = static_cast<std::uint8_t>(~sum >> 8);
    ip[11] = static_cast<std::uint8_t>(~sum);
    return;
  }
  out[0] = 0x60;
  out[4] = static_cast<std::uint8_t>(udp_len >> 8);
  out[5] = static_cast<std::uint8_t>(udp_len);
  out[6] = 17;  // UDP
  out[7] = 64;  // hop limit
  std::memcpy(out + 8, sgid.raw.data(), 16);
  std::memcpy(out + 24, dgid.raw.data(), 16);
}

// Gathers from an SGE list into a plain buffer (for the GRH-prefixed UD receive path).
void gather_to(std::uint8_t* dst, const Sge* src, std::uint32_t ns) noexcept {
  for (std::uint32_t i = 0; i < ns; ++i) {
    std::memcpy(dst, reinterpret_cast<const void*>(src[i].addr), src[i].length);
    dst += src[i].length;
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Memory keys

[[gnu::always_inline]] inline const MrCore* SimQp::find_mr(std::uint32_t key) noexcept {
  if (mr_cache_.generation == dev_->mr_generation && mr_cache_.mr->key == key) [[likely]] {
    return mr_cache_.mr;
  }
  const MrCore* mr = dev_->mr_of(key);
  if (mr == nullptr || mr->pd.get() != pd_.get()) return nullptr;
  mr_cache_ = {dev_->mr_generation, mr};
  return mr;
}

inline bool SimQp::sge_keys_known(const Sge* sges, std::uint32_t n, std::uint64_t len) noexcept {
  for (std::uint32_t i = 0; i < n && len > 0; ++i) {
    if (sges[i].length == 0) continue;
    if (find_mr(sges[i].lkey) == nullptr) return false;
    len -= std::min<std::uint64_t>(sges[i].length, len);
  }
  return true;
}

[[gnu::always_inline]] inline bool SimQp::whole_sges_valid(const Sge* sges, std::uint32_t n,
                                                           Access need) noexcept {
  if (n == 1) {  // the common case, without the loop
    if (sges->length == 0) return true;
    const MrCore* mr = find_mr(sges->lkey);
    return mr != nullptr && covers(*mr, sges->addr, sges->length, need);
  }
  for (std::uint32_t i = 0; i < n; ++i) {
    if (sges[i].length == 0) continue;
    const MrCore* mr = find_mr(sges[i].lkey);
    if (mr == nullptr || !covers(*mr, sges[i].addr, sges[i].length, need)) return false;
  }
  return true;
}

[[gnu::noinline]] bool SimQp::bytes_valid(const Sge* sges, std::uint32_t n, std::uint64_t len,
                                          Access need) noexcept {
  for (std::uint32_t i = 0; i < n && len > 0; ++i) {
    if (sges[i].length == 0) continue;
    const std::uint64_t k = std::min<std::uint64_t>(sges[i].length, len);
    const MrCore* mr = find_mr(sges[i].lkey);
    if (mr == nullptr || !covers(*mr, sges[i].addr, k, need)) return false;
    len -= k;
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Requester

void SimQp::transmit() {
  if (sq_sent_ == sq_post_ || hot_.qp_state != QpState::rts || rnr_wait_) return;
  switch (type_) {
    case QpType::rc: return transmit_as<QpType::rc>();
    case QpType::uc: return transmit_as<QpType::uc>();
    case QpType::ud: return transmit_as<QpType::ud>();
  }
}

template <QpType Type>
void SimQp::transmit_as() {
  World::Impl& w = world();
  const bool had_outstanding = sq_done_ != sq_sent_;
  constexpr bool rc = Type == QpType::rc;
  constexpr bool ud = Type == QpType::ud;
  const std::uint8_t port = ud ? 1 : hot_.port_num;
  // What every packet of this QP has in common.
  Event e{};
  e.kind = EvKind::deliver;
  e.src_dev = static_cast<std::uint16_t>(dev_->index);
  e.wire = w.wire_of(*dev_, port);
  PortCore& egress = World::Impl::egress(*dev_, port);
  e.src_qpn = qpn_;
  e.epoch = epoch_;
  while (sq_sent_ != sq_post_) {
    SendWqe& wq = sq_at(sq_sent_);
    const bool rd = is_read_or_atomic(wq.opcode);
    if (rc) {
      if (rd && rd_atomic_outstanding_ >= std::max<std::uint32_t>(hot_.max_rd_atomic, 1)) break;
      if (any(wq.flags, SendFlags::fence) && rd_atomic_outstanding_ > 0) break;
    }
    if (!opcode_supported(Type, wq.opcode)) {
      // rxe accepted it at post time; its requester finds no packet opcode for it.
      if (sq_done_ != sq_sent_) break;
      ++sq_sent_;
      complete_next(WcStatus::loc_qp_op_err);
      enter_error(false);
      return;
    }
    if constexpr (!ud) {
      if (is_local_op(wq.opcode)) [[unlikely]] {
        // A bind or local invalidate runs once everything before it has completed (a NIC
        // runs it when it reaches it: the same outcome, a little later in virtual time), so
        // it never has to be undone by a retry.
        if (sq_done_ != sq_sent_) break;
        if (!run_next_local_op()) return;
        continue;
      }
    }
    // Local protection: the NIC finds a bad lkey when it reads the WQE's buffers. Completions
    // stay in order, so wait for everything before it first.
    if (!wq.inlined &&
        !sges_valid(sq_sge(sq_sent_), wq.num_sge, touched_bytes(wq), local_need(wq))) {
      if (sq_done_ != sq_sent_) break;
      const WcStatus status = local_fault_status(sq_sent_);
      ++sq_sent_;
      complete_next(status);
      enter_error(false);
      return;
    }
    wq.psn = (hot_.sq_psn + (sq_sent_ - sq_psn_base_index_)) & 0xffffff;
    wq.buffers_gone = false;  // the buffers were just found valid
    const int dst = ud ? wq.dst_dev : dst_dev_;
    const std::uint64_t bytes = wq.opcode == WrOpcode::rdma_read ? 0 : wq.length;
    if (rd) ++rd_atomic_outstanding_;
    e.index = sq_sent_;
    e.time = w.transmit_time(egress, bytes);
    // rxe completes a UD send larger than the MTU without sending anything.
    const bool oversize = ud && wq.length > mtu_bytes(dev_->ports[0].attr.active_mtu);
    if (dst >= 0 && !oversize) {
      e.dev = static_cast<std::uint16_t>(dst);
      e.qpn = ud ? wq.ud.remote_qpn : hot_.dest_qp_num;
      e.time = w.send_packet(e, wq.psn);
    }
    if (!rc) {
      // Unreliable: the send completes once the message is on the wire; ordered after the
      // delivery so the receiver reads the data before the slot can be reused.
      Event done = e;
      done.kind = EvKind::ack;
      done.dev = static_cast<std::uint16_t>(dev_->index);
      done.qpn = qpn_;
      w.schedule(done);
    }
    ++sq_sent_;
  }
  if (rc && !had_outstanding && sq_done_ != sq_sent_) arm_timer();
}

// Runs the bind or local invalidate at sq_sent_, everything before it complete, and completes
// it; false when that took the QP to ERR. It takes no PSN: the next message gets the one it
// would have had.
[[gnu::noinline]] bool SimQp::run_next_local_op() {
  const WcStatus status = run_local_op(sq_sent_);
  hot_.sq_psn = (hot_.sq_psn + (sq_sent_ - sq_psn_base_index_)) & 0xffffff;
  sq_psn_base_index_ = ++sq_sent_;
  if (status != WcStatus::success) {
    complete_next(status);
    enter_error(false);
    return false;
  }
  return acknowledge_until(sq_sent_);  // false: its CQ overran
}

// Restarts the local ACK timer. At most one timer event per QP is in the heap: when it fires
// before the (since pushed back) deadline, it re-arms itself for the deadline.
void SimQp::arm_timer() {
  if (hot_.timeout == 0) return;  // infinite: a lost message waits forever, as on hardware
  timer_deadline_ = world().now + ack_timeout_ns(hot_.timeout);
  if (!timer_armed_) schedule_timer();
}

void SimQp::schedule_timer() {
  World::Impl& w = world();
  timer_armed_ = true;
  Event e{};
  e.time = timer_deadline_;
  e.kind = EvKind::timeout;
  e.dev = static_cast<std::uint16_t>(dev_->index);
  e.qpn = qpn_;
  e.value = timer_gen_;
  w.schedule(e);
}

inline bool SimQp::acknowledge_until(std::uint32_t end) {
  while (sq_done_ != end) {
    if (is_read_or_atomic(sq_at(sq_done_).opcode) && rd_atomic_outstanding_ > 0) {
      --rd_atomic_outstanding_;
    }
    complete_send_ok(sq_done_++);  // advanced first: an overrun flushes from sq_done_ on
    if (hot_.qp_state == QpState::err) return false;  // its CQ overran
  }
  if (!traits().retire_on_poll) sq_retired_ = sq_done_;
  return true;
}

void SimQp::on_ack(const Event& e) {
  if (e.epoch != epoch_ || hot_.qp_state == QpState::err) return;
  if (static_cast<std::int32_t>(e.index - sq_done_) < 0) return;  // duplicate
  if (static_cast<std::int32_t>(e.index - sq_sent_) >= 0) return;  // acknowledges nothing sent
  if (type_ != QpType::rc && sq_at(e.index).buffers_gone) [[unlikely]] {
    // UC, UD: sent (completing) while its buffers went; the message was lost.
    if (!acknowledge_until(e.index)) return;
    complete_next(local_fault_status(e.index));
    enter_error(false);
    return;
  }
  if (!acknowledge_until(e.index + 1)) return;
  retry_left_ = hot_.retry_cnt;
  rnr_left_ = hot_.rnr_retry;
  if (type_ == QpType::rc && sq_done_ != sq_sent_) arm_timer();
  if (hot_.qp_state == QpState::sqd && sq_done_ == sq_sent_ && attr_.sq_draining) {
    attr_.sq_draining = 0;
    if (attr_.en_sqd_async_notify) raise(AsyncEventType::sq_drained);
  }
  transmit();
}

void SimQp::on_nak(const Event& e) {
  if (e.epoch != epoch_ || hot_.qp_state == QpState::err) return;
  if (static_cast<std::int32_t>(e.index - sq_done_) < 0) return;
  if (!acknowledge_until(e.index)) return;  // a NAK acknowledges everything before it
  WcStatus fatal = WcStatus::success;
  switch (static_cast<Nak>(e.code)) {
    case Nak::rnr:
      if (hot_.rnr_retry == 7 || rnr_left_ > 0) {
        if (hot_.rnr_retry != 7) --rnr_left_;
        ++epoch_;
        sq_sent_ = sq_done_;
        rd_atomic_outstanding_ = 0;
        rnr_wait_ = true;
        Event r{};
        r.time = world().now + rnr_timer_ns(static_cast<std::uint8_t>(e.value));
        r.kind = EvKind::rnr_retry;
        r.dev = static_cast<std::uint16_t>(dev_->index);
        r.qpn = qpn_;
        r.epoch = epoch_;
        world().schedule(r);
        return;
      }
      fatal = WcStatus::rnr_retry_exc_err;
      break;
    case Nak::psn_seq:
      ++epoch_;
      sq_sent_ = sq_done_;
      rd_atomic_outstanding_ = 0;
      transmit();
      return;
    case Nak::rem_access: fatal = WcStatus::rem_access_err; break;
    case Nak::inv_req: fatal = WcStatus::rem_inv_req_err; break;
    case Nak::rem_op: fatal = WcStatus::rem_op_err; break;
  }
  complete_next(fatal);
  enter_error(false);
}

bool SimQp::drop_idle_timer(const Event& e) noexcept {
  if (e.value != timer_gen_) return true;  // armed before a RESET or ERR
  if (hot_.qp_state != QpState::err && !rnr_wait_ && sq_done_ != sq_sent_) return false;
  timer_armed_ = false;  // nothing outstanding (or an RNR wait, or ERR): the timer stops
  return true;
}

void SimQp::on_timeout(const Event& e) {
  if (drop_idle_timer(e)) return;
  timer_armed_ = false;
  if (world().now < timer_deadline_) {
    schedule_timer();  // progress since it was armed: sleep until the current deadline
    return;
  }
  if (retry_left_ == 0) {
    complete_next(WcStatus::retry_exc_err);
    enter_error(false);
    return;
  }
  --retry_left_;
  ++epoch_;
  sq_sent_ = sq_done_;
  rd_atomic_outstanding_ = 0;
  transmit();
  if (sq_done_ != sq_sent_) arm_timer();
}

void SimQp::on_rnr_retry(const Event& e) {
  if (e.epoch != epoch_ || !rnr_wait_) return;
  rnr_wait_ = false;
  transmit();
}

// The simulator reads a message's buffers, and writes a READ or atomic response into them, when
// the message arrives. A program that deregisters (or re-registers) an MR while messages that
// use it are on the wire must not have them touch its memory then: those whose bytes the MR no
// longer covers are marked, and arrive as nothing (on_deliver). As on a NIC that had not yet
// read the buffers, the WR fails (local_fault_status): RC when it goes back and finds the key
// invalid, UC and UD when they complete (on_ack). A re-registration that still covers the
// bytes leaves them alone.
void SimQp::mr_changed(std::uint32_t key) noexcept {
  for (std::uint32_t i = sq_done_; i != sq_sent_; ++i) {
    SendWqe& wq = sq_at(i);
    if (wq.inlined || wq.buffers_gone) continue;
    const Sge* sges = sq_sge(i);
    bool names_key = false;
    for (std::uint32_t k = 0; k < wq.num_sge; ++k) {
      names_key |= sges[k].lkey == key && sges[k].length != 0;
    }
    if (names_key && !bytes_valid(sges, wq.num_sge, touched_bytes(wq), local_need(wq))) {
      wq.buffers_gone = true;
    }
  }
}

WcStatus SimQp::local_fault_status(std::uint32_t index) noexcept {
  const SendWqe& wq = sq_at(index);
  if (is_read_or_atomic(wq.opcode)) return WcStatus::loc_prot_err;
  return sge_keys_known(sq_sge(index), wq.num_sge, wq.length) ? WcStatus::loc_prot_err
                                                              : traits().bad_lkey_status;
}

// ---------------------------------------------------------------------------------------------
// Responder

// ACK coalescing, as hardware responders do it: while the next packet on the wire is this
// QP's next message, the response to that one (an ACK or a NAK) acknowledges this one too.
// Should this QP drop the next message for its state (it left RTR/RTS meanwhile), the ACK owed
// goes out then (the message carries kAckOwed); should the next message be lost on the way or
// arrive stale (its requester moved on), the requester retries both, or gave up on them.
[[gnu::always_inline]] inline Event* SimQp::ack_successor(const Event& e) noexcept {
  if (type_ != QpType::rc) return nullptr;  // only RC ACKs
  World::Impl& w = world();
  if (!w.traits->coalesce_acks) return nullptr;
  World::Impl::Fifo& wire = w.wires[e.wire];
  if (wire.empty()) return nullptr;
  Event& next = wire.front();
  // A deliver (code 0) of the same flow: kind, code, dev, qpn, src_dev, wire and src_qpn are
  // two words; then the next index of the same epoch.
  static_assert(offsetof(Event, kind) + 16 == offsetof(Event, index) &&
                offsetof(Event, src_qpn) + 4 == offsetof(Event, index));
  std::uint64_t a[2];
  std::uint64_t b[2];
  std::memcpy(a, &e.kind, sizeof a);
  std::memcpy(b, &next.kind, sizeof b);
  const bool same_flow =
      a[0] == b[0] && a[1] == b[1] && next.index == e.index + 1 && next.epoch == e.epoch;
  return same_flow ? &next : nullptr;
}

// A UD message: no PSN, no acknowledgement; the receive buffer gets the network header first.
void SimQp::deliver_ud(SimQp& req, std::uint32_t index) {
  const SendWqe& wq = req.sq_at(index);
  const Sge* src_sges = req.sq_sge(index);
  const std::uint8_t* src_inline = req.sq_inline(index);
  if (wq.buffers_gone) return;  // lost: the sender fails it when it completes (on_ack)
  if (wq.ud.remote_qkey != attr_.qkey) return;  // silently dropped, as the spec says
  RecvWqe rw;
  Sge* rs;
  if (!take_recv(rw, rs)) return;
  const std::uint64_t room = sges_length({rs, rw.num_sge});
  if (room < 40u + wq.length ||
      !sges_valid(rs, rw.num_sge, 40u + wq.length, Access::local_write)) {
    WcStatus st = room < 40u + wq.length ? WcStatus::loc_len_err : WcStatus::loc_prot_err;
    if (traits().responder_errors_are_qp_op) st = WcStatus::loc_qp_op_err;
    complete_recv(rw, st, WcOpcode::recv, 0, 0, WcFlags::none, req.qpn_, false);
    enter_error(false);
    return;
  }
  // 40 bytes of network header, then the payload.
  std::uint8_t payload[4096 + 40];
  build_grh(payload, req.dev_->ports[0].gids.back(), dev_->ports[0].gids.back(), wq.length);
  if (wq.inlined) {
    std::memcpy(payload + 40, src_inline, wq.length);
  } else {
    gather_to(payload + 40, src_sges, wq.num_sge);
  }
  scatter(rs, rw.num_sge, payload, 40u + wq.length);
  const WcFlags imm = wq.opcode == WrOpcode::send_with_imm ? WcFlags::with_imm : WcFlags::none;
  if (!complete_recv(rw, WcStatus::success, WcOpcode::recv, 40u + wq.length, wq.imm, imm,
                     req.qpn_, any(wq.flags, SendFlags::solicited)) &&
      traits().recv_cq_overrun_errors_qp) {
    enter_error(false);
  }
}

void SimQp::on_deliver(const Event& e) {
  World::Impl& w = world();
  SimQp* req = w.find_qp(e.src_dev, e.src_qpn);
  if (req == nullptr || req->epoch_ != e.epoch || req->type_ != type_) return;
  // A late copy (a fault delayed or duplicated it) of a message whose WQE has completed and
  // whose slot the program has posted over. A real packet carries its payload; here it is read
  // from the WQE on arrival, and that is gone: the message is lost.
  if (req->sq_overwritten(e.index)) [[unlikely]] return;
  const QpState s = hot_.qp_state;
  if (s != QpState::rtr && s != QpState::rts && s != QpState::sqd) {
    // Dropped. The ACK the previous message left to this one goes out now.
    if (e.value == kAckOwed) send_response(e, EvKind::ack, Nak::rnr, e.index - 1, 0, 0);
    return;
  }
  SendWqe& wq = req->sq_at(e.index);
  const Sge* src_sges = req->sq_sge(e.index);
  const std::uint8_t* src_inline = req->sq_inline(e.index);

  if (type_ == QpType::ud) return deliver_ud(*req, e.index);
  const bool rc = type_ == QpType::rc;
  const std::uint32_t diff = (wq.psn - epsn_) & 0xffffff;
  auto respond = [&](EvKind kind, Nak code, std::uint64_t value, std::uint64_t bytes) {
    if (rc) send_response(e, kind, code, e.index, value, bytes);
  };
  if (diff != 0) {
    if (!rc) {
      epsn_ = (wq.psn + 1) & 0xffffff;  // UC: a gap just loses messages
    } else if (diff >= 0x800000) {
      // A duplicate. A SEND or WRITE gets an ACK of the last message received (C9-105; rxe's
      // duplicate_request acks prev_psn), which may be past it, even past anything the
      // requester sent when the two sides disagree on the PSNs (the requester then ignores
      // it); a READ or atomic gets its own.
      const std::uint32_t last =
          is_read_or_atomic(wq.opcode) ? e.index : e.index + ((epsn_ - 1 - wq.psn) & 0xffffff);
      send_response(e, EvKind::ack, Nak::rnr, last, 0, 0);
      return;
    } else {
      // A message before it was lost: NAK with the PSN expected, i.e. the WQE `diff` earlier.
      send_response(e, EvKind::nak, Nak::psn_seq, e.index - diff, 0, 0);
      return;
    }
  }
  if (wq.buffers_gone) [[unlikely]] {
    // The requester's buffers went while it was on the wire: nothing of it arrives. RC NAKs
    // it, so the requester goes back, finds the buffers invalid and fails the WR
    // (local_fault_status); UC loses it, and the requester fails it when it completes (on_ack).
    if (rc) send_response(e, EvKind::nak, Nak::psn_seq, e.index, 0, 0);
    return;
  }
  if (s == QpState::rtr && !comm_est_raised_) {
    comm_est_raised_ = true;
    if (traits().comm_est_event) raise(AsyncEventType::comm_est);
  }
  // How a failed access check is NAKed: the QP's access flags (rxe: invalid request) or the
  // MR's key, bounds or rights (remote access error).
  Nak access_nak = Nak::rem_access;
  auto remote_ok = [&](Access qp_need, Access mr_need, std::uint64_t len) {
    if (!all(attr_.qp_access_flags, qp_need)) {
      if (traits().qp_access_nak_inv_req) access_nak = Nak::inv_req;
      return false;
    }
    if (len == 0) return true;
    const MrCore* mr = find_mr(wq.rkey);
    if (mr != nullptr) [[likely]] return covers(*mr, wq.remote_addr, len, mr_need);
    return window_covers(wq.rkey, wq.remote_addr, len, mr_need);
  };
  const bool solicited = any(wq.flags, SendFlags::solicited);
  std::uint64_t response_bytes = 0;

  switch (wq.opcode) {
    case WrOpcode::send:
    case WrOpcode::send_with_imm:
    case WrOpcode::send_with_inv: {
      RecvWqe rw;
      Sge* rs;
      if (!take_recv(rw, rs)) [[unlikely]] {
        if (rc) {
          respond(EvKind::nak, Nak::rnr, attr_.min_rnr_timer, 0);
        } else {
          epsn_ = (wq.psn + 1) & 0xffffff;
        }
        return;
      }
      const bool qp_op = traits().responder_errors_are_qp_op;
      if (sges_length({rs, rw.num_sge}) < wq.length) [[unlikely]] {
        complete_recv(rw, qp_op ? WcStatus::loc_qp_op_err : WcStatus::loc_len_err, WcOpcode::recv,
                      0, 0, WcFlags::none, 0, false);
        fail_request(e, qp_op ? Nak::rem_op : Nak::inv_req, AsyncEventType::qp_req_err);
        return;
      }
      if (!sges_valid(rs, rw.num_sge, wq.length, Access::local_write)) [[unlikely]] {
        complete_recv(rw, qp_op ? WcStatus::loc_qp_op_err : WcStatus::loc_prot_err,
                      WcOpcode::recv, 0, 0, WcFlags::none, 0, false);
        fail_request(e, Nak::rem_op, AsyncEventType::qp_access_err);
        return;
      }
      if (wq.inlined) {
        scatter(rs, rw.num_sge, src_inline, wq.length);
      } else {
        sg_copy(rs, rw.num_sge, src_sges, wq.num_sge);
      }
      const WcFlags imm_flag = recv_flag_of(wq.opcode);
      if (imm_flag == WcFlags::with_inv) [[unlikely]] {
        if (!invalidate(wq.imm, "SEND_WITH_INV")) return fail_invalidation(e, wq, rw.wr_id);
      }
      if (!complete_recv_ok(rw.wr_id, WcOpcode::recv, wq.length, wq.imm, imm_flag, 0, solicited) &&
          traits().recv_cq_overrun_errors_qp) {
        enter_error(false);  // rxe: no ACK; the requester times out
        return;
      }
      break;
    }
    case WrOpcode::rdma_write:
    case WrOpcode::rdma_write_with_imm: {
      const bool with_imm = wq.opcode == WrOpcode::rdma_write_with_imm;
      if (!remote_ok(Access::remote_write, Access::remote_write, wq.length)) {
        if (!rc) {
          // UC has no NAK to send: the message is dropped and the QP carries on (rxe's
          // drop_msg; conformance Datapath.UcWrite*).
          epsn_ = (wq.psn + 1) & 0xffffff;
          return;
        }
        if (with_imm && access_nak == Nak::rem_access && traits().imm_write_takes_recv_first) {
          // rxe takes the receive before it checks the rkey (check_resource, then check_rkey):
          // without one the request is RNR NAKed; the one taken completes with the error.
          RecvWqe rw;
          Sge* rs;
          if (!take_recv(rw, rs)) {
            respond(EvKind::nak, Nak::rnr, attr_.min_rnr_timer, 0);
            return;
          }
          complete_recv(rw, WcStatus::rem_access_err, WcOpcode::recv_rdma_with_imm, 0, 0,
                        WcFlags::none,
                        0, false);
        }
        fail_request(e, access_nak, AsyncEventType::qp_access_err);
        return;
      }
      RecvWqe rw{};
      Sge* rs = nullptr;
      if (with_imm && !take_recv(rw, rs)) {
        if (rc) {
          respond(EvKind::nak, Nak::rnr, attr_.min_rnr_timer, 0);
        } else {
          epsn_ = (wq.psn + 1) & 0xffffff;
        }
        return;
      }
      const Sge target{wq.remote_addr, wq.length, wq.rkey};
      if (wq.inlined) {
        scatter(&target, 1, src_inline, wq.length);
      } else {
        sg_copy(&target, 1, src_sges, wq.num_sge);
      }
      if (with_imm &&
          !complete_recv_ok(rw.wr_id, WcOpcode::recv_rdma_with_imm, wq.length, wq.imm,
                            WcFlags::with_imm, 0,
                            solicited) &&
          traits().recv_cq_overrun_errors_qp) {
        enter_error(false);  // rxe: no ACK; the requester times out
        return;
      }
      break;
    }
    case WrOpcode::rdma_read: {
      if (attr_.max_dest_rd_atomic == 0) {
        fail_request(e, Nak::inv_req, AsyncEventType::qp_req_err);
        return;
      }
      if (!remote_ok(Access::remote_read, Access::remote_read, wq.length)) {
        fail_request(e, access_nak, AsyncEventType::qp_access_err);
        return;
      }
      const Sge source{wq.remote_addr, wq.length, wq.rkey};
      sg_copy(src_sges, wq.num_sge, &source, 1);
      response_bytes = wq.length;
      break;
    }
    case WrOpcode::bind_mw:
    case WrOpcode::local_inv: return;  // never sent
    case WrOpcode::atomic_cmp_and_swp:
    case WrOpcode::atomic_fetch_and_add: {
      if (attr_.max_dest_rd_atomic == 0) {
        fail_request(e, Nak::inv_req, AsyncEventType::qp_req_err);
        return;
      }
      if (!remote_ok(Access::remote_atomic, Access::remote_atomic, 8)) {
        fail_request(e, access_nak, AsyncEventType::qp_access_err);
        return;
      }
      auto* target = reinterpret_cast<std::uint64_t*>(wq.remote_addr);
      const std::uint64_t original = *target;
      const AtomicOperands& op = req->sq_atomic(e.index);
      if (wq.opcode == WrOpcode::atomic_cmp_and_swp) {
        if (original == op.compare_add) *target = op.swap;
      } else {
        *target = original + op.compare_add;
      }
      scatter(src_sges, wq.num_sge, reinterpret_cast<const std::uint8_t*>(&original), 8);
      response_bytes = 8;
      break;
    }
  }
  epsn_ = (wq.psn + 1) & 0xffffff;
  if (response_bytes == 0) {
    if (Event* next = ack_successor(e)) {
      next->value = kAckOwed;
      return;
    }
  }
  respond(EvKind::ack, Nak::rnr, 0, response_bytes);
}

// The responder cannot execute request `e`: NAKs it with `code` (RC), goes to ERR and raises
// `event` where the profile does. Out of line: the error paths of on_deliver share it.
[[gnu::noinline]] void SimQp::fail_request(const Event& e, Nak code, AsyncEventType event) {
  if (type_ == QpType::rc) send_response(e, EvKind::nak, code, e.index, 0, 0);
  enter_error(false);
  if (traits().responder_error_events) raise(event);
}

// A SEND_WITH_INV whose key names no window this QP may invalidate: the data has landed; the
// receive fails (REM_INV_REQ_ERR) and this QP goes to ERR, while the SEND is still ACKed (rxe's
// RESPST_ERR_INVALIDATE_RKEY, class J).
[[gnu::noinline]] void SimQp::fail_invalidation(const Event& e, const SendWqe& wq,
                                                std::uint64_t wr_id) {
  complete_recv({wr_id, 0}, WcStatus::rem_inv_req_err, WcOpcode::recv, wq.length, 0,
                WcFlags::none, 0, false);
  epsn_ = (wq.psn + 1) & 0xffffff;
  if (type_ == QpType::rc) send_response(e, EvKind::ack, Nak::rnr, e.index, 0, 0);
  enter_error(false);
}

void SimQp::send_response(const Event& request, EvKind kind, Nak code, std::uint32_t index,
                          std::uint64_t value, std::uint64_t bytes) {
  World::Impl& w = world();
  Event r{};
  r.time = w.transmit_time(*dev_, hot_.port_num, bytes);
  r.wire = w.wire_of(*dev_, hot_.port_num);
  r.kind = kind;
  r.code = static_cast<std::uint8_t>(code);
  r.dev = request.src_dev;
  r.qpn = request.src_qpn;
  r.index = index;
  r.epoch = request.epoch;
  r.value = value;
  w.send_packet(r, kNoPsn);
}

}  // namespace verbsim::sim
