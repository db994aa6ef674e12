// The slow paths of the memory key checks (memory_keys.hpp).
#include <algorithm>
#include <cstdint>

#include "transport/memory_keys.hpp"

namespace verbsim::sim {

bool SimQp::sge_keys_known(const Sge* sges, std::uint32_t n, std::uint64_t len) noexcept {
  for (std::uint32_t i = 0; i < n && len > 0; ++i) {
    if (sges[i].length == 0) continue;
    if (find_mr(sges[i].lkey) == nullptr) return false;
    len -= std::min<std::uint64_t>(sges[i].length, len);
  }
  return true;
}

[[gnu::noinline]] bool SimQp::bytes_valid(const Sge* sges, std::uint32_t n, std::uint64_t len,
                                          Access need) noexcept {
  for (std::uint32_t i = 0; i < n && len > 0; ++i) {
    if (sges[i].length == 0) continue;
    const std::uint64_t k = std::min<std::uint64_t>(sges[i].length, len);
    const MrCore* mr = find_mr(sges[i].lkey);
    if (mr == nullptr || !covers(*mr, sges[i].addr, k, need)) return false;
    len -= k;
  }
  return true;
}

}  // namespace verbsim::sim
