// The completer: ACKs and NAKs from the responder complete the send queue's WQEs in order, or
// fail the oldest and take the QP to ERR; completions are written into the CQs here.
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "transport/completions.hpp"
#include "transport/memory_keys.hpp"
#include "transport/qp.hpp"
#include "transport/wire.hpp"

namespace verbsim::sim {

void SimQp::on_ack(const Event& e) {
  if (e.epoch != epoch_ || hot_.qp_state == QpState::err) return;
  if (static_cast<std::int32_t>(e.index - sq_done_) < 0) return;  // duplicate
  if (static_cast<std::int32_t>(e.index - sq_sent_) >= 0) return;  // acknowledges nothing sent
  if (passes_lost_response(e.index)) [[unlikely]] return;
  if (type_ != QpType::rc && sq_at(e.index).buffers_gone) [[unlikely]] {
    // UC, UD: sent (completing) while its buffers went; the message was lost.
    if (!acknowledge_until(e.index)) return;
    complete_next(local_fault_status(e.index));
    enter_error();
    return;
  }
  if (type_ == QpType::rc && is_read_or_atomic(sq_at(e.index).opcode)) [[unlikely]] {
    if (checks_local_on_response() && !response_lands(e.index)) {
      // rxe's completer copies the response into the WQE's SGEs, and fails the WQE when one
      // of them does not take it (the responder has executed the request).
      if (!acknowledge_until(e.index)) return;
      complete_next(WcStatus::loc_prot_err);
      enter_error();
      return;
    }
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

// A READ's or atomic's response is the only way its data or its original value reaches the
// requester: a response to a later message cannot complete it. When the response (ACK or NAK)
// to WQE `index` arrives while a READ or atomic before it still waits for its own, that one was
// lost: everything before the READ completes (the response acknowledges it), and the requester
// sends again from the READ, as after a timeout, a retry of retry_cnt (IBA 9.7.5.1.5; rxe's
// check_psn answers COMPST_ERROR_RETRY for a response past a pending READ or atomic). Without
// this, a READ whose response was lost completed with its buffer never written.
[[gnu::noinline]] bool SimQp::lost_response_before(std::uint32_t index) {
  std::uint32_t read = sq_done_;
  while (read != index && !is_read_or_atomic(sq_at(read).opcode)) ++read;
  if (read == index) return false;
  if (!acknowledge_until(read)) return true;  // its CQ overran: ERR
  if (world().observing()) {
    world().observe_instant(static_cast<std::uint16_t>(dev_->index), qpn_,
                            "lost response: send again from the READ or atomic");
  }
  retry_or_fail();
  return true;
}

bool SimQp::awaits_response(const Event& e) noexcept {
  if (e.epoch != epoch_ || hot_.qp_state == QpState::err || type_ != QpType::rc) return false;
  if (static_cast<std::int32_t>(e.index - sq_done_) < 0) return false;
  if (static_cast<std::int32_t>(e.index - sq_sent_) >= 0) return false;
  if (!is_read_or_atomic(sq_at(e.index).opcode)) return false;
  for (std::uint32_t i = sq_done_; i != e.index; ++i) {
    if (is_read_or_atomic(sq_at(i).opcode)) return false;
  }
  return true;
}

namespace {

// What the requester's completion says of a NAK that ends the WR (not RNR, not PSN sequence).
WcStatus nak_status(Nak code) noexcept {
  switch (code) {
    case Nak::rem_access: return WcStatus::rem_access_err;
    case Nak::inv_req: return WcStatus::rem_inv_req_err;
    case Nak::rem_op: return WcStatus::rem_op_err;
    case Nak::rnr:
    case Nak::psn_seq: break;
  }
  return WcStatus::general_err;
}

}  // namespace

void SimQp::on_nak(const Event& e) {
  if (e.epoch != epoch_ || hot_.qp_state == QpState::err) return;
  if (static_cast<std::int32_t>(e.index - sq_done_) < 0) return;
  if (passes_lost_response(e.index)) [[unlikely]] return;
  if (!acknowledge_until(e.index)) return;  // a NAK acknowledges everything before it
  const auto code = static_cast<Nak>(e.code);
  if (code == Nak::rnr) {
    ++port_counters().rcvd_rnr_err;
    return on_rnr_nak(e);
  }
  if (code == Nak::psn_seq) {  // a message was lost: send again from the one NAKed
    ++port_counters().rcvd_seq_err;
    ++port_counters().completer_retry_err;
    rewind();
    transmit();
    return;
  }
  complete_next(nak_status(code));
  enter_error();
}

// Receiver not ready: wait the responder's RNR timer and send again from the WQE NAKed, while
// retries are left (rnr_retry 7: forever); then RNR_RETRY_EXC_ERR.
void SimQp::on_rnr_nak(const Event& e) {
  ++rnr_naks_;
  if (hot_.rnr_retry != 7 && rnr_left_ == 0) {
    ++port_counters().retry_rnr_exceeded_err;
    complete_next(WcStatus::rnr_retry_exc_err);
    enter_error();
    return;
  }
  if (hot_.rnr_retry != 7) --rnr_left_;
  rewind();
  rnr_wait_ = true;
  Event r{};
  r.time = world().now() + rnr_timer_ns(static_cast<std::uint8_t>(e.value));
  r.kind = EvKind::rnr_retry;
  r.dev = static_cast<std::uint16_t>(dev_->index);
  r.qpn = qpn_;
  r.epoch = epoch_;
  world().schedule(r);
}

// ---------------------------------------------------------------------------------------------
// Completions

void SimQp::complete_next(WcStatus status) {
  // Advance first: pushing the completion may overrun the CQ, which (strict profile) takes
  // this QP to ERR and flushes from sq_done_ on, re-entrantly.
  const std::uint32_t index = sq_done_++;
  complete_send(index, status);
}

void SimQp::complete_send(std::uint32_t index, WcStatus status) {
  if (status == WcStatus::success) return complete_send_ok(index);
  ++world().acct().completed;
  push_send_wc(index, status, !traits().error_wc_zeroed);  // an error is always completed
}

bool SimQp::complete_recv(RecvWqe wqe, WcStatus status, WcOpcode opcode, std::uint32_t byte_len,
                          std::uint32_t imm, WcFlags imm_flag, std::uint32_t src_qp,
                          bool solicited) {
  ++world().acct().completed;
  return push_recv_wc(wqe.wr_id, status, opcode, byte_len, imm, imm_flag, src_qp, solicited);
}

}  // namespace verbsim::sim
