#include "fabric/assert.hpp"

#include <cstdio>
#include <cstdlib>

namespace verbsim::sim {

void assertion_failed(const char* expr, const char* what, const char* file, int line) noexcept {
  std::fprintf(stderr, "verbsim: invariant broken at %s:%d: %s (%s)\n", file, line, expr, what);
  std::fflush(stderr);
  std::abort();
}

}  // namespace verbsim::sim
