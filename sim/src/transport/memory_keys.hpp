// The checks of memory keys both roles make on their own side: the requester on the buffers a
// message is read from (or a READ or atomic response written to), the responder on its
// receive buffers. The last MR found is cached per QP (SimQp::find_mr).
#pragma once

#include <cstdint>

#include "transport/qp.hpp"

namespace verbsim::sim {

[[gnu::always_inline]] inline const MrCore* SimQp::find_mr(std::uint32_t key) noexcept {
  if (mr_cache_.generation == dev_->mr_generation && mr_cache_.mr->key == key) [[likely]] {
    return mr_cache_.mr;
  }
  const MrCore* mr = dev_->mr_of(key);
  if (mr == nullptr || mr->pd.get() != pd_.get()) return nullptr;
  mr_cache_ = {dev_->mr_generation, mr};
  return mr;
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

}  // namespace verbsim::sim
