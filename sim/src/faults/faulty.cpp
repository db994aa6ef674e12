// The Faulty* resources: each data-path verb asks the fault injector first.
#include "faults/faulty.hpp"

#include "verbsim/error.hpp"

namespace verbsim::sim {

PostResult FaultyQp::post_send(std::span<const SendWr> wrs) noexcept {
  if (int err = world().verb_fault(Verb::post_send, qpn_, dev_)) {
    return {0, err, "injected by the fault plan"};
  }
  return SimQp::post_send(wrs);
}

PostResult FaultyQp::post_recv(std::span<const RecvWr> wrs) noexcept {
  if (int err = world().verb_fault(Verb::post_recv, qpn_, dev_)) {
    return {0, err, "injected by the fault plan"};
  }
  return SimQp::post_recv(wrs);
}

PollResult FaultyCq::poll(std::span<WorkCompletion> out) noexcept {
  if (int err = core_->ctx->world->verb_fault(Verb::poll_cq, 0, core_->ctx->dev)) {
    return {0, err};
  }
  return SimCq::poll(out);
}

std::error_code FaultyCq::req_notify(bool solicited_only) noexcept {
  if (int err = core_->ctx->world->verb_fault(Verb::req_notify_cq, 0, core_->ctx->dev)) {
    return errno_code(err);
  }
  return SimCq::req_notify(solicited_only);
}

std::error_code FaultyChannel::get_cq_event(CompletionQueue*& cq, Wait wait) {
  if (int err = core_->ctx->world->verb_fault(Verb::get_cq_event, 0, core_->ctx->dev)) {
    return errno_code(err);
  }
  return SimChannel::get_cq_event(cq, wait);
}

PostResult FaultySrq::post_recv(std::span<const RecvWr> wrs) noexcept {
  if (int err = core_->pd->ctx->world->verb_fault(Verb::post_srq_recv, 0, core_->dev)) {
    return {0, err, "injected by the fault plan"};
  }
  return SimSrq::post_recv(wrs);
}

}  // namespace verbsim::sim
