// Symbol versions (see ../libibverbs.map). Verbs that libibverbs exports twice, as an old
// IBVERBS_1.0 entry point and the current IBVERBS_1.1 one, are defined here as <name>_1_1 and
// bound to name@@IBVERBS_1.1 (the default a new link picks); the 1.0 entry points are stubs in
// compat.cpp. VERBSIM_SAME_TYPE checks the definition against verbs.h's declaration.
#pragma once

#include <type_traits>

#define VERBSIM_SYMVER(impl, name, version) __asm__(".symver " #impl "," #name version)
#define VERBSIM_DEFAULT_1_1(name) VERBSIM_SYMVER(name##_1_1, name, "@@IBVERBS_1.1")
#define VERBSIM_SAME_TYPE(name) \
  static_assert(std::is_same_v<decltype(&name##_1_1), decltype(&name)>, #name)
