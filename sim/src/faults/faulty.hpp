// Resource classes used instead of the plain ones when the fault plan targets their verbs.
#pragma once

#include "resources/handles.hpp"
#include "transport/qp.hpp"

namespace verbsim::sim {

// Variants created instead of the plain classes when the world's fault plan targets their data
// path verbs: the check happens here, never as a branch in the plain classes' hot path.
class FaultyQp final : public SimQp {
 public:
  using SimQp::SimQp;
  PostResult post_send(std::span<const SendWr> wrs) noexcept override;
  PostResult post_recv(std::span<const RecvWr> wrs) noexcept override;
};

class FaultyCq final : public SimCq {
 public:
  using SimCq::SimCq;
  PollResult poll(std::span<WorkCompletion> out) noexcept override;
  std::error_code req_notify(bool solicited_only) noexcept override;
};

class FaultyChannel final : public SimChannel {
 public:
  using SimChannel::SimChannel;
  std::error_code get_cq_event(CompletionQueue*& cq, Wait wait) override;
};

class FaultySrq final : public SimSrq {
 public:
  using SimSrq::SimSrq;
  PostResult post_recv(std::span<const RecvWr> wrs) noexcept override;
};


}  // namespace verbsim::sim
