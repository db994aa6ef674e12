// Shrinking a failing seed's reproducer (`verbsim-swarm --shrink SEED`, docs/CAMPAIGNS.md,
// "Shrinking"): the fault rules the failure does not need go, probabilistic rules become the
// nth= triggers that fired, and the run is cut to the fewest steps that still fail, each change
// kept only if the run still fails with the same signature (signature.hpp).
#pragma once

#include <cstdio>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace verbsim::swarm {

// One run of the test, with the seed fixed.
struct Trial {
  std::string faults;     // VERBSIM_FAULTS
  int steps = 0;          // VERBSIM_STEPS; 0: not set (the test's own count)
  std::string firings;    // VERBSIM_FAULT_FIRINGS: a file the run appends its rules' firings to
};

// Runs a trial: the failure's signature, or an empty string if it passed.
using RunTrial = std::function<std::string(const Trial&)>;

struct Shrunk {
  std::string signature;  // of the original run; empty: it did not fail (the rest is unset)
  std::string faults;     // the smallest plan found
  int steps = 0;          // the fewest steps found; 0: the test's own count
  int runs = 0;           // runs of the test it took, the first included
};

// `faults` a plan (rules separated by ';'); `steps` the test's step count if it honours
// VERBSIM_STEPS (0: it does not). `firings_file` a path runs may write firings to. Progress
// lines go to `log`.
Shrunk shrink(const std::string& faults, int steps, const std::string& firings_file,
              const RunTrial& run, std::FILE* log);

// The plan's rules: split at ';' and newlines, trimmed, comments and empty rules left out.
std::vector<std::string> rules_of(std::string_view plan);
// The rules joined with "; ".
std::string plan_of(const std::vector<std::string>& rules);

}  // namespace verbsim::swarm
