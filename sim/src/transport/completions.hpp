// The success paths of completing WQEs, inline where messages complete (the requester, the
// responder and the completer): what every SEND costs in completions is here.
#pragma once

#include <cstdint>

#include "transport/qp.hpp"
#include "transport/wire.hpp"

namespace verbsim::sim {

inline WcOpcode wc_opcode_of(WrOpcode op) noexcept {
  switch (op) {
    case WrOpcode::send:
    case WrOpcode::send_with_imm: return WcOpcode::send;
    case WrOpcode::rdma_write:
    case WrOpcode::rdma_write_with_imm: return WcOpcode::rdma_write;
    case WrOpcode::rdma_read: return WcOpcode::rdma_read;
    case WrOpcode::atomic_cmp_and_swp: return WcOpcode::comp_swap;
    case WrOpcode::atomic_fetch_and_add: return WcOpcode::fetch_add;
    case WrOpcode::local_inv: return WcOpcode::local_inv;
    case WrOpcode::bind_mw: return WcOpcode::bind_mw;
    case WrOpcode::send_with_inv: return WcOpcode::send;
  }
  return WcOpcode::send;
}

// Writes the completion of send WQE `index` into the send CQ; `detail`: with its opcode and
// length (rxe leaves them out of an error completion).
inline void SimQp::push_send_wc(std::uint32_t index, WcStatus status, bool detail) {
  const SendWqe& w = sq_at(index);
  CqEntry& e = scq_->next_slot();
  e.wc = WorkCompletion{};
  e.wc.wr_id = w.wr_id;
  e.wc.status = status;
  if (detail) {
    e.wc.opcode = wc_opcode_of(w.opcode);
    e.wc.byte_len = w.length;
  }
  // A SEND or RDMA WRITE with immediate says so in its own successful completion too (rxe's
  // make_send_cqe, mlx5's handle_good_req), with no immediate value.
  if (status == WcStatus::success &&
      (w.opcode == WrOpcode::send_with_imm || w.opcode == WrOpcode::rdma_write_with_imm)) {
    e.wc.wc_flags = WcFlags::with_imm;
  }
  e.wc.qp_num = qpn_;
  e.qp = this;
  e.sq_index = index;
  e.send = true;
  scq_->commit(e, false);
}

inline void SimQp::complete_send_ok(std::uint32_t index) {
  ++world().acct().completed;
  if (sq_at(index).signaled) push_send_wc(index, WcStatus::success, true);
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
  check_queues();
  return true;
}

// Writes a receive completion into the receive CQ; false when the CQ dropped it. An error
// completion carries only wr_id, status and qp_num on rxe (error_wc_zeroed).
inline bool SimQp::push_recv_wc(std::uint64_t wr_id, WcStatus status, WcOpcode opcode,
                                std::uint32_t byte_len, std::uint32_t imm, WcFlags imm_flag,
                                std::uint32_t src_qp, bool solicited) {
  CqEntry& e = rcq_->next_slot();
  e.wc = WorkCompletion{};
  e.wc.wr_id = wr_id;
  e.wc.status = status;
  if (status == WcStatus::success || !traits().error_wc_zeroed) {
    e.wc.opcode = opcode;
    e.wc.byte_len = byte_len;
    e.wc.src_qp = src_qp;
    if (imm_flag != WcFlags::none) {
      e.wc.imm_data = imm;
      e.wc.wc_flags = imm_flag;
    }
  }
  if (status == WcStatus::success && (type_ == QpType::ud || traits().recv_wc_grh)) {
    e.wc.wc_flags |= WcFlags::grh;
  }
  e.wc.qp_num = qpn_;
  e.qp = this;
  e.sq_index = 0;
  e.send = false;
  return rcq_->commit(e, solicited);
}

inline bool SimQp::complete_recv_ok(std::uint64_t wr_id, WcOpcode opcode, std::uint32_t byte_len,
                                    std::uint32_t imm, WcFlags imm_flag, std::uint32_t src_qp,
                                    bool solicited) {
  ++world().acct().completed;
  return push_recv_wc(wr_id, WcStatus::success, opcode, byte_len, imm, imm_flag, src_qp,
                      solicited);
}

}  // namespace verbsim::sim
