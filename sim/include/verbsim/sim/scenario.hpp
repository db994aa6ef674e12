// Running a scenario deterministically.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "verbsim/sim/world.hpp"

namespace verbsim::sim {

struct ScenarioResult {
  std::uint64_t seed = 0;
  std::uint64_t digest = 0;
  bool deterministic = true;  // false when a second run gave another digest
  std::string message;        // what differed, with both digests and the seed
};

// Runs `scenario` in a fresh world made from `config`. With VERBSIM_CHECK_DETERMINISM=1 in the
// environment (or `check` true) it runs it twice and compares the digests, so any dependence
// on addresses, wall-clock time or unordered containers shows up as a mismatch.
ScenarioResult run_scenario(const Config& config, const std::function<void(World&)>& scenario,
                            bool check = false);

}  // namespace verbsim::sim
