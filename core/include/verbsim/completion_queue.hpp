#pragma once

#include <cstdint>
#include <span>
#include <system_error>

#include "verbsim/resource.hpp"
#include "verbsim/types.hpp"

namespace verbsim {

class CompletionChannel;

// A completion queue (ibv_create_cq).
class CompletionQueue : public Resource {
 public:
  // ibv_poll_cq: moves up to out.size() completions into `out`, oldest first. Never blocks.
  // On the simulator it also lets the simulated world make progress.
  virtual PollResult poll(std::span<WorkCompletion> out) noexcept = 0;

  // ibv_req_notify_cq: the next completion (solicited_only: the next solicited or error one)
  // raises one event on the CQ's channel. A CQ without a channel is armed all the same and
  // never raises one (rxe and mlx5 return 0). Returns the provider's errno on failure (the
  // simulator fails it only when a fault plan says so).
  [[nodiscard]] virtual std::error_code req_notify(bool solicited_only = false) noexcept = 0;

  // ibv_ack_cq_events: acknowledge `n` events taken from the channel for this CQ.
  virtual void ack_events(unsigned n) noexcept = 0;

  // ibv_resize_cq: the CQ holds at least `cqe` completions from now on (cqe() and
  // requested_cqe() tell the new depths); the completions it holds stay, oldest first. Throws
  // VerbError: EINVAL for cqe below 1 or above the device's max_cqe, or fewer than the
  // completions the CQ holds now. The default throws EOPNOTSUPP.
  virtual void resize(int cqe);

  // Depth given by the provider (>= the depth asked for) and the depth asked for.
  virtual int cqe() const noexcept = 0;
  virtual int requested_cqe() const noexcept = 0;
  virtual CompletionChannel* channel() const noexcept = 0;
};

}  // namespace verbsim
