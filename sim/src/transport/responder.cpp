// The responder: receives, and executes what arrives (SEND into a posted receive, WRITE, READ,
// atomics) after its PSN, access and key checks; answers RC requests with ACKs and NAKs.
// A message's data is read from the sender's memory when it arrives, as a NIC reads it by
// DMA while sending.
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "transport/completions.hpp"
#include "transport/memory_keys.hpp"
#include "transport/qp.hpp"
#include "transport/user_memory.hpp"
#include "transport/wire.hpp"

namespace verbsim::sim {

PostResult SimQp::post_recv(std::span<const RecvWr> wrs) noexcept {
  world().check_entry();
  if (has_srq_) return {0, EINVAL, "QP receives from an SRQ"};
  if (hot_.qp_state == QpState::reset) return {0, EINVAL, "QP is in RESET"};
  // The queue's indices in locals: the stores into its slots cannot change them.
  const std::uint32_t room = rq_.cap - rq_.size();
  const std::uint32_t max_sge = rq_.max_sge;
  std::uint32_t tail = rq_.tail;
  std::uint32_t i = 0;
  int err = 0;
  const char* why = "";
  for (; i < wrs.size(); ++i) {
    const RecvWr& wr = wrs[i];
    if (wr.sg_list.size() > max_sge) {
      err = EINVAL;
      why = "too many SGEs";
      break;
    }
    if (i == room) {
      err = ENOMEM;
      why = "receive queue full";
      break;
    }
    RecvWqe& w = rq_.at(tail);
    w.wr_id = wr.wr_id;
    w.num_sge = static_cast<std::uint32_t>(wr.sg_list.size());
    copy_sges(wr.sg_list, rq_.sge_at(tail));
    sges_to_host(*dev_, rq_.sge_at(tail), wr.sg_list.size());
    ++tail;
  }
  rq_.tail = tail;
  if (world().observing() && world().observes_work_requests()) [[unlikely]] {
    for (std::uint32_t k = 0; k < i; ++k) {
      PostRecord rec;
      rec.time_ns = world().now();
      rec.dev = static_cast<std::uint16_t>(dev_->index);
      rec.qpn = qpn_;
      rec.wr_id = wrs[k].wr_id;
      rec.length = static_cast<std::uint32_t>(sges_length(wrs[k].sg_list));
      world().observe_posted(rec);
    }
  }
  world().acct().posted += i;
  // On an ERR QP what was taken is flushed at once, also when a later WR of the batch failed.
  if (hot_.qp_state == QpState::err && traits().post_recv_in_err_completes) {
    while (rq_.size() > 0) {
      const RecvWqe w = rq_.at(rq_.head++);
      complete_recv(w, WcStatus::wr_flush_err, WcOpcode::recv, 0, 0, WcFlags::none, 0, false);
    }
  }
  check_queues();
  if (err != 0) return {i, err, why};
  return {static_cast<std::uint32_t>(wrs.size()), 0, ""};
}

// ---------------------------------------------------------------------------------------------
// Executing requests

// ACK coalescing, as hardware responders do it: while the next packet on the wire is this
// QP's next message, the response to that one (an ACK or a NAK) acknowledges this one too.
// Should this QP drop the next message for its state (it left RTR/RTS meanwhile), the ACK owed
// goes out then (the message carries kAckOwed); should the next message be lost on the way or
// arrive stale (its requester moved on), the requester retries both, or gave up on them.
[[gnu::always_inline]] inline Event* SimQp::ack_successor(const Event& e) noexcept {
  if (type_ != QpType::rc) return nullptr;  // only RC ACKs
  World::Impl& w = world();
  if (!w.traits().coalesce_acks) return nullptr;
  Event* on_wire = w.wire_front(e.wire);
  if (on_wire == nullptr) return nullptr;
  Event& next = *on_wire;
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
    enter_error();
    return;
  }
  // 40 bytes of network header, then the payload.
  std::uint8_t payload[4096 + 40];
  const Gid& sgid = req.dev_->ports[0].gids.back();
  const Gid& dgid = dev_->ports[0].gids.back();
  const ProfileTraits& q = traits();
  NetworkHeader h;
  h.tclass = wq.tclass;
  h.ttl = q.ud_ttl_from_route ? kRouteTtl : wq.hop_limit;
  h.ipv4_checksum = !(q.loopback_ipv4_checksum_zero && sgid == dgid);
  build_grh(payload, sgid, dgid, wq.length, h);
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
    enter_error();
  }
}

void SimQp::on_deliver(const Event& e) {
  SimQp* req = world().find_qp(e.src_dev, e.src_qpn);
  if (req == nullptr) return;
  deliver_from(e, *req);
}

void SimQp::on_deliver_from(const Event& e, SimQp& req) { deliver_from(e, req); }

[[gnu::always_inline]] inline void SimQp::deliver_from(const Event& e, SimQp& requester) {
  SimQp* req = &requester;
  if (req->epoch_ != e.epoch || req->type_ != type_) return;
  // A late copy (a fault delayed or duplicated it) of a message whose WQE has completed and
  // whose slot the program has posted over. A real packet carries its payload; here it is read
  // from the WQE on arrival, and that is gone: the message is lost.
  if (req->sq_overwritten(e.index)) [[unlikely]] return;
  const QpState s = hot_.qp_state;
  if (s != QpState::rtr && s != QpState::rts && s != QpState::sqd) {
    // Dropped. The ACK the previous message left to this one goes out now.
    if (e.value == kAckOwed) send_ack(e, e.index - 1, 0);
    return;
  }
  if (type_ == QpType::ud) return deliver_ud(*req, e.index);
  const SendWqe& wq = req->sq_at(e.index);
  if (!in_sequence(e, wq, *req)) return;
  if (wq.buffers_gone) [[unlikely]] {
    // The requester's buffers went while it was on the wire: nothing of it arrives. RC NAKs
    // it, so the requester goes back, finds the buffers invalid and fails the WR
    // (local_fault_status); UC loses it, and the requester fails it when it completes (on_ack).
    if (type_ == QpType::rc) send_nak(e, Nak::psn_seq, e.index);
    return;
  }
  if (s == QpState::rtr && !comm_est_raised_) {
    comm_est_raised_ = true;
    if (traits().comm_est_event) raise(AsyncEventType::comm_est);
  }
  std::uint64_t response_bytes = 0;  // a READ's or atomic's response carries data
  switch (wq.opcode) {
    case WrOpcode::send:
    case WrOpcode::send_with_imm:
    case WrOpcode::send_with_inv:
      if (!execute_send(e, *req)) return;
      break;
    case WrOpcode::rdma_write:
    case WrOpcode::rdma_write_with_imm:
      if (!execute_write(e, *req)) return;
      break;
    case WrOpcode::rdma_read:
      if (!execute_read(e, *req)) return;
      response_bytes = wq.length;
      break;
    case WrOpcode::atomic_cmp_and_swp:
    case WrOpcode::atomic_fetch_and_add:
      if (!execute_atomic(e, *req)) return;
      response_bytes = 8;
      break;
    case WrOpcode::bind_mw:
    case WrOpcode::local_inv: return;  // never sent
  }
  epsn_ = (wq.psn + 1) & 0xffffff;
  if (type_ != QpType::rc) return;
  if (response_bytes == 0) {
    if (Event* next = ack_successor(e)) {
      next->value = kAckOwed;
      return;
    }
  }
  send_ack(e, e.index, response_bytes, is_read_or_atomic(wq.opcode));
}

// Is `wq`, of message `e`, the next message expected? An RC duplicate is answered (C9-105) and a
// gap NAKed (PSN sequence error); UC takes the message after a gap (the messages between are
// lost).
[[gnu::always_inline]] inline bool SimQp::in_sequence(const Event& e, const SendWqe& wq,
                                                      SimQp& req) {
  const std::uint32_t diff = (wq.psn - epsn_) & 0xffffff;
  if (diff == 0) [[likely]] return true;
  if (type_ != QpType::rc) {
    epsn_ = (wq.psn + 1) & 0xffffff;  // UC: a gap just loses messages
    return true;
  }
  if (diff >= 0x800000) {
    // A duplicate. A SEND or WRITE gets an ACK of the last message received (C9-105; rxe's
    // duplicate_request acks prev_psn), which may be past it, even past anything the
    // requester sent when the two sides disagree on the PSNs (the requester then ignores
    // it); a READ or atomic gets its own.
    const bool data = is_read_or_atomic(wq.opcode);
    const std::uint32_t last = data ? e.index : e.index + ((epsn_ - 1 - wq.psn) & 0xffffff);
    ++port_counters().duplicate_request;
    // A READ sent again reads the memory again, as IB responders do (an atomic is answered
    // with its first result). In one process the first execution wrote the requester's
    // buffers already; the stand-in of a requester of another process holds the response.
    if (wq.opcode == WrOpcode::rdma_read && req.stand_in()) [[unlikely]] reread(e, req);
    const std::uint64_t bytes = !data ? 0 : wq.opcode == WrOpcode::rdma_read ? wq.length : 8;
    send_ack(e, last, bytes, data);
  } else {
    ++port_counters().out_of_seq_request;
    // A message before it was lost: NAK with the PSN expected, i.e. the WQE `diff` earlier.
    send_nak(e, Nak::psn_seq, e.index - diff);
  }
  return false;
}

// Does the QP (its access flags) and the key of `wq` (an MR, or a window) let the request reach
// `len` bytes at its remote address with every bit of `need`? If so, `target` is where that
// address is in the buffer (the key's MR may be addressed from an iova, or the window from 0).
// When not, `nak` says how it is NAKed: as an invalid request where the QP's flags forbid it on
// rxe, else a remote access error.
bool SimQp::remote_ok(const SendWqe& wq, Access need, std::uint64_t len, Nak& nak,
                      std::uint64_t& target) noexcept {
  nak = Nak::rem_access;
  if (!all(attr_.qp_access_flags, need)) {
    if (traits().qp_access_nak_inv_req) nak = Nak::inv_req;
    return false;
  }
  target = wq.remote_addr;
  if (len == 0) return true;
  const MrCore* mr = find_mr(wq.rkey);
  if (mr != nullptr) [[likely]] {
    target = host_address(*mr, wq.remote_addr);
    return covers(*mr, target, len, need);
  }
  return window_covers(wq.rkey, wq.remote_addr, len, need, target);
}

// A message that needs a receive finds none: RC NAKs it (receiver not ready), UC loses it.
void SimQp::no_receive(const Event& e, const SendWqe& wq) {
  if (type_ == QpType::rc) {
    send_nak(e, Nak::rnr, e.index, attr_.min_rnr_timer);
  } else {
    epsn_ = (wq.psn + 1) & 0xffffff;
  }
}

// SEND, SEND_WITH_IMM, SEND_WITH_INV: into the next receive. False when it is not to be ACKed
// (no receive, an error, or a receive CQ that overran on rxe).
[[gnu::always_inline]] inline bool SimQp::execute_send(const Event& e, SimQp& req) {
  const SendWqe& wq = req.sq_at(e.index);
  RecvWqe rw;
  Sge* rs;
  if (!take_recv(rw, rs)) [[unlikely]] {
    no_receive(e, wq);
    return false;
  }
  const bool qp_op = traits().responder_errors_are_qp_op;
  if (sges_length({rs, rw.num_sge}) < wq.length) [[unlikely]] {
    complete_recv(rw, qp_op ? WcStatus::loc_qp_op_err : WcStatus::loc_len_err, WcOpcode::recv, 0,
                  0, WcFlags::none, 0, false);
    fail_request(e, qp_op ? Nak::rem_op : Nak::inv_req, AsyncEventType::qp_req_err);
    return false;
  }
  if (!sges_valid(rs, rw.num_sge, wq.length, Access::local_write)) [[unlikely]] {
    complete_recv(rw, qp_op ? WcStatus::loc_qp_op_err : WcStatus::loc_prot_err, WcOpcode::recv,
                  0, 0, WcFlags::none, 0, false);
    fail_request(e, Nak::rem_op, AsyncEventType::qp_access_err);
    return false;
  }
  if (wq.inlined) {
    scatter(rs, rw.num_sge, req.sq_inline(e.index), wq.length);
  } else {
    sg_copy(rs, rw.num_sge, req.sq_sge(e.index), wq.num_sge);
  }
  const WcFlags imm_flag = recv_flag_of(wq.opcode);
  if (imm_flag == WcFlags::with_inv) [[unlikely]] {
    if (!invalidate(wq.imm, "SEND_WITH_INV")) {
      fail_invalidation(e, wq, rw.wr_id);
      return false;
    }
  }
  if (!complete_recv_ok(rw.wr_id, WcOpcode::recv, wq.length, wq.imm, imm_flag, 0,
                        any(wq.flags, SendFlags::solicited)) &&
      traits().recv_cq_overrun_errors_qp) {
    enter_error();  // rxe: no ACK; the requester times out
    return false;
  }
  return true;
}

// RDMA WRITE and WRITE with immediate (which takes a receive for its immediate).
bool SimQp::execute_write(const Event& e, SimQp& req) {
  const SendWqe& wq = req.sq_at(e.index);
  const bool with_imm = wq.opcode == WrOpcode::rdma_write_with_imm;
  Nak nak;
  std::uint64_t target;
  if (!remote_ok(wq, Access::remote_write, wq.length, nak, target)) {
    if (type_ != QpType::rc) {
      // UC has no NAK to send: the message is dropped and the QP carries on (rxe's drop_msg;
      // conformance Datapath.UcWrite*).
      epsn_ = (wq.psn + 1) & 0xffffff;
      return false;
    }
    if (with_imm && nak == Nak::rem_access && traits().imm_write_takes_recv_first) {
      // rxe takes the receive before it checks the rkey (check_resource, then check_rkey):
      // without one the request is RNR NAKed; the one taken completes with the error.
      RecvWqe rw;
      Sge* rs;
      if (!take_recv(rw, rs)) {
        send_nak(e, Nak::rnr, e.index, attr_.min_rnr_timer);
        return false;
      }
      complete_recv(rw, WcStatus::rem_access_err, WcOpcode::recv_rdma_with_imm, 0, 0,
                    WcFlags::none, 0, false);
    }
    fail_request(e, nak, AsyncEventType::qp_access_err);
    return false;
  }
  RecvWqe rw{};
  Sge* rs = nullptr;
  if (with_imm && !take_recv(rw, rs)) {
    no_receive(e, wq);
    return false;
  }
  const Sge into{target, wq.length, wq.rkey};
  if (wq.inlined) {
    scatter(&into, 1, req.sq_inline(e.index), wq.length);
  } else {
    sg_copy(&into, 1, req.sq_sge(e.index), wq.num_sge);
  }
  if (with_imm &&
      !complete_recv_ok(rw.wr_id, WcOpcode::recv_rdma_with_imm, wq.length, wq.imm,
                        WcFlags::with_imm, 0, any(wq.flags, SendFlags::solicited)) &&
      traits().recv_cq_overrun_errors_qp) {
    enter_error();  // rxe: no ACK; the requester times out
    return false;
  }
  return true;
}

// RDMA READ: the response's data is written into the requester's SGEs on arrival here.
bool SimQp::execute_read(const Event& e, SimQp& req) {
  const SendWqe& wq = req.sq_at(e.index);
  if (attr_.max_dest_rd_atomic == 0) {
    fail_request(e, Nak::inv_req, AsyncEventType::qp_req_err);
    return false;
  }
  Nak nak;
  std::uint64_t target;
  if (!remote_ok(wq, Access::remote_read, wq.length, nak, target)) {
    fail_request(e, nak, AsyncEventType::qp_access_err);
    return false;
  }
  // Where the requester checks its SGEs when the response arrives (rxe), a response that
  // cannot land there is sent all the same, and the requester fails the READ (on_ack).
  if (checks_local_on_response() && !req.response_lands(e.index)) [[unlikely]] return true;
  const Sge source{target, wq.length, wq.rkey};
  sg_copy(req.sq_sge(e.index), wq.num_sge, &source, 1);
  return true;
}

// A duplicate READ from another process: its data again into the stand-in's buffer, if the
// request still may read it (else the response carries what the buffer held).
[[gnu::noinline]] void SimQp::reread(const Event& e, SimQp& req) {
  const SendWqe& wq = req.sq_at(e.index);
  Nak nak;
  std::uint64_t target;
  if (attr_.max_dest_rd_atomic == 0 || !remote_ok(wq, Access::remote_read, wq.length, nak, target)) {
    return;
  }
  const Sge source{target, wq.length, wq.rkey};
  sg_copy(req.sq_sge(e.index), wq.num_sge, &source, 1);
}

// Compare-and-swap and fetch-and-add on an aligned 64-bit word; the original value is written
// into the requester's SGEs.
bool SimQp::execute_atomic(const Event& e, SimQp& req) {
  const SendWqe& wq = req.sq_at(e.index);
  if (attr_.max_dest_rd_atomic == 0) {
    fail_request(e, Nak::inv_req, AsyncEventType::qp_req_err);
    return false;
  }
  Nak nak;
  std::uint64_t at;
  if (!remote_ok(wq, Access::remote_atomic, 8, nak, at)) {
    fail_request(e, nak, AsyncEventType::qp_access_err);
    return false;
  }
  auto* target = reinterpret_cast<std::uint64_t*>(at);
  std::uint64_t original;
  {
    const user_memory::Touching touching;  // MR memory (wire.hpp, copy_mr)
    original = *target;
    const AtomicOperands& op = req.sq_atomic(e.index);
    if (wq.opcode == WrOpcode::atomic_cmp_and_swp) {
      if (original == op.compare_add) *target = op.swap;
    } else {
      *target = original + op.compare_add;
    }
  }
  // The atomic has executed; its original value reaches the requester's SGEs only if they
  // take it (rxe checks them when the response arrives: on_ack).
  if (checks_local_on_response() && !req.response_lands(e.index)) [[unlikely]] return true;
  scatter(req.sq_sge(e.index), wq.num_sge, reinterpret_cast<const std::uint8_t*>(&original), 8);
  return true;
}

// The responder cannot execute request `e`: NAKs it with `code` (RC), goes to ERR and raises
// `event` where the profile does. Out of line: the error paths of on_deliver share it.
[[gnu::noinline]] void SimQp::fail_request(const Event& e, Nak code, AsyncEventType event) {
  if (type_ == QpType::rc) send_nak(e, code, e.index);
  enter_error();
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
  if (type_ == QpType::rc) send_ack(e, e.index, 0);
  enter_error();
}

void SimQp::send_ack(const Event& request, std::uint32_t index, std::uint64_t bytes,
                     bool data) {
  Event r = response_to(request, index, bytes);
  r.kind = EvKind::ack;
  world().send_packet(r, data ? kDataResponsePsn : kNoPsn);
}

void SimQp::send_nak(const Event& request, Nak code, std::uint32_t index,
                     std::uint8_t rnr_timer) {
  if (code == Nak::rnr) ++port_counters().send_rnr_err;
  Event r = response_to(request, index, 0);
  r.kind = EvKind::nak;
  r.code = static_cast<std::uint8_t>(code);
  r.value = rnr_timer;
  world().send_packet(r, kNoPsn);
}

Event SimQp::response_to(const Event& request, std::uint32_t index, std::uint64_t bytes) {
  World::Impl& w = world();
  Event r{};
  r.time = w.transmit_time(*dev_, hot_.port_num, bytes);
  r.wire = w.wire_of(*dev_, hot_.port_num);
  r.dev = request.src_dev;
  r.qpn = request.src_qpn;
  r.index = index;
  r.epoch = request.epoch;
  return r;
}

}  // namespace verbsim::sim
