#pragma once

#include <span>

#include "verbsim/resource.hpp"
#include "verbsim/types.hpp"

namespace verbsim {

// A shared receive queue (ibv_create_srq). When the number of posted receives falls below a
// non-zero srq_limit the device raises AsyncEventType::srq_limit_reached once and the limit
// disarms (set it again with modify).
class SharedReceiveQueue : public Resource {
 public:
  // ibv_post_srq_recv. Errors: ENOMEM when full, EINVAL for too many SGEs.
  virtual PostResult post_recv(std::span<const RecvWr> wrs) noexcept = 0;
  // ibv_modify_srq (max_wr resize is not supported: EINVAL; limit arms the limit event).
  virtual void modify(const SrqAttr& attr, SrqAttrMask mask) = 0;
  virtual SrqAttr query() const = 0;

  PostResult post_recv(const RecvWr& wr) noexcept { return post_recv(std::span(&wr, 1)); }
};

}  // namespace verbsim
