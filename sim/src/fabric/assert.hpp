// VERBSIM_ASSERT: the simulator's invariants, checked where its state changes. On in Debug
// builds and in every sanitizer build (VERBSIM_ASSERTS, set by CMake), compiled out of Release:
// the Release data path pays nothing for them.
#pragma once

#if !defined(NDEBUG) || defined(VERBSIM_ASSERTS)
#define VERBSIM_ASSERTS_ON 1
#else
#define VERBSIM_ASSERTS_ON 0
#endif

namespace verbsim::sim {

// Prints "verbsim: invariant broken at FILE:LINE: EXPR (WHAT)" on stderr and aborts.
[[noreturn]] void assertion_failed(const char* expr, const char* what, const char* file,
                                   int line) noexcept;

}  // namespace verbsim::sim

#if VERBSIM_ASSERTS_ON
// `what` says which invariant, in words, for the message.
#define VERBSIM_ASSERT(cond, what)                                                   \
  do {                                                                               \
    if (!(cond)) [[unlikely]] {                                                      \
      ::verbsim::sim::assertion_failed(#cond, what, __FILE__, __LINE__);             \
    }                                                                                \
  } while (false)
#else
#define VERBSIM_ASSERT(cond, what) \
  do {                             \
  } while (false && (cond))
#endif
