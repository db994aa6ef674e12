#pragma once

#include <system_error>

#include "verbsim/resource.hpp"

namespace verbsim {

class CompletionQueue;

enum class Wait : bool { nonblocking = false, blocking = true };

// A completion event channel (ibv_create_comp_channel). A CQ attached to it and armed with
// CompletionQueue::req_notify delivers one event here when its next completion arrives.
class CompletionChannel : public Resource {
 public:
  // ibv_get_cq_event. On success stores the CQ that fired in `cq`; every event must later be
  // acknowledged with cq->ack_events(). Errors: EAGAIN with Wait::nonblocking and no event
  // pending; on the simulator, EDEADLK when blocking could never end (nothing left to happen).
  [[nodiscard]] virtual std::error_code get_cq_event(CompletionQueue*& cq, Wait wait = Wait::blocking) = 0;

  // A file descriptor that polls readable while an event is pending, or -1 if the backend has
  // none.
  virtual int fd() const noexcept = 0;
};

}  // namespace verbsim
