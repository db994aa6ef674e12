// The environment a rerun command carries, so that the rerun is the run: the test kit's
// "[  RERUN   ]" command (verbsim::gtest_main) and verbsim-swarm's reproducers both keep
//  - every VERBSIM_* variable that was set (the simulator's and the tests' own switches), and
//  - the program's own variables named in VERBSIM_KEEP_ENV (and, for verbsim-swarm, by
//    --keep-env): names separated by commas or spaces, a name ending in '*' keeping every
//    variable it is a prefix of (VERBSIM_KEEP_ENV='MYAPP_*,OMP_NUM_THREADS').
// Header-only: verbsim-swarm links no library. docs/OBSERVABILITY.md ("Failure report") and
// docs/CAMPAIGNS.md say the same.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace verbsim::sim {

// Whether variable `name` goes into a rerun command, given the patterns `keep` (the list above).
inline bool kept_in_rerun(std::string_view name, std::string_view keep) {
  if (name.starts_with("VERBSIM_")) return true;
  while (!keep.empty()) {
    const auto end = keep.find_first_of(", \t\n");
    std::string_view pattern = keep.substr(0, end);
    keep.remove_prefix(end == std::string_view::npos ? keep.size() : end + 1);
    if (pattern.empty()) continue;
    if (pattern.back() == '*' ? name.starts_with(pattern.substr(0, pattern.size() - 1))
                              : name == pattern) {
      return true;
    }
  }
  return false;
}

// The variables of `env` (a null-terminated array of "NAME=value", as environ) that a rerun
// keeps, in `env`'s order, less those named in `skip` (what the rerun command sets itself).
inline std::vector<std::pair<std::string, std::string>> rerun_environment(
    char** env, std::string_view keep, std::initializer_list<std::string_view> skip) {
  std::vector<std::pair<std::string, std::string>> out;
  for (char** e = env; e != nullptr && *e != nullptr; ++e) {
    const std::string_view kv = *e;
    const auto eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string_view name = kv.substr(0, eq);
    bool skipped = false;
    for (std::string_view s : skip) skipped = skipped || s == name;
    if (skipped || !kept_in_rerun(name, keep)) continue;
    out.emplace_back(std::string(name), std::string(kv.substr(eq + 1)));
  }
  return out;
}

}  // namespace verbsim::sim
