#pragma once

#include <cstdint>
#include <span>

#include "verbsim/resource.hpp"
#include "verbsim/types.hpp"

namespace verbsim {

// A queue pair (ibv_create_qp).
class QueuePair : public Resource {
 public:
  virtual std::uint32_t qp_num() const noexcept = 0;
  virtual QpType type() const noexcept = 0;
  // Capabilities actually given (rounded up by the provider) and those asked for.
  virtual const QpCap& cap() const noexcept = 0;
  virtual const QpCap& requested_cap() const noexcept = 0;

  // ibv_post_send. Errors (the errno real providers return): ENOMEM when the send queue is
  // full, there are more SGEs than max_send_sge, or inline data exceeds max_inline_data (rxe
  // says EINVAL for these two);
  // EINVAL for a QP in RESET, INIT or RTR on providers that check (rxe), a bad opcode for the
  // QP type, a value that is no WrOpcode (every QP type and provider), or a missing address
  // handle on UD.
  virtual PostResult post_send(std::span<const SendWr> wrs) noexcept = 0;

  // ibv_post_recv. Errors: ENOMEM when the receive queue is full, EINVAL for too many SGEs,
  // a QP in RESET, or a QP attached to an SRQ.
  virtual PostResult post_recv(std::span<const RecvWr> wrs) noexcept = 0;

  // ibv_modify_qp. Throws VerbError: EINVAL for a transition the QP state table does not allow
  // or a mask with missing required / disallowed attributes (the QP is then unchanged).
  virtual void modify(const QpAttr& attr, QpAttrMask mask) = 0;

  // ibv_query_qp. Fills at least the fields `mask` names; the state is always current.
  virtual QpAttr query(QpAttrMask mask = QpAttrMask::none) const = 0;
  virtual QpState state() const noexcept = 0;

  // ibv_bind_mw: binds the type 1 window `mw` as a BIND_MW work request on this send queue
  // and gives it its next key (inc_rkey), which mw.rkey() returns from now on; should the
  // bind complete with an error, the key given is not valid (as with libibverbs). The bind
  // runs and completes (WcOpcode::bind_mw) in send-queue order; a window or MR it may not
  // bind completes with WcStatus::mw_bind_err and takes the QP to ERR. Errors on post:
  // EINVAL for a type 2 window, a UD QP, Access::zero_based (a type 1 window is never
  // zero-based: the providers refuse it) or remote access in `bind.info` the MR cannot give,
  // as for post_send otherwise.
  virtual PostResult bind_mw(MemoryWindow& mw, const MwBind& bind) noexcept = 0;
  PostResult post_send(const SendWr& wr) noexcept { return post_send(std::span(&wr, 1)); }
  PostResult post_recv(const RecvWr& wr) noexcept { return post_recv(std::span(&wr, 1)); }
};

}  // namespace verbsim
