// The end of a campaign: failures grouped by test and first failure site (or by signature,
// for programs that are not GoogleTest binaries), one reproducer per group, a table of the
// failed tests, and the putting together of shards (`verbsim-swarm merge`).
#pragma once

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "campaign.hpp"

namespace verbsim::swarm {

// The failed seeds of one group (Failure::group()), smallest seed first. A seed that failed two
// tests is in the group of each.
struct Group {
  std::string key;   // "Suite.Name at x_test.cpp:42", or a signature
  std::string test;  // empty: not a GoogleTest test
  std::vector<const SeedResult*> seeds;
  std::string signature;       // the smallest seed's signature of this failure
  std::size_t signatures = 0;  // how many different signatures the group holds
};

// Largest group first; among equals, the one whose smallest seed is smaller.
std::vector<Group> groups(const Campaign& campaign);

// Lines to print under a group, after its seeds (`--check-without-faults`); may be empty.
using GroupNote = std::function<std::string(const Group&)>;

// Each group: its size, key and seeds, the signature of its smallest seed, `note`'s lines, then
// its smallest seed's reproducer and last output; then, when a GoogleTest test failed, a table
// of the failed tests (seeds, groups, test); then the closing line, "swarm: N seeds, F
// failed[, G groups]" followed by `scope`.
void print_summary(std::FILE* out, const Campaign& campaign, const std::string& scope,
                   const GroupNote& note = {});

// The shards of one campaign as one. Adds a line to `problems` for each thing that keeps the
// result from being the whole campaign exactly once: files of different campaigns, a shard
// missing, a seed missing, a seed run twice, a seed out of the range.
Campaign merge(const std::vector<Campaign>& shards, std::vector<std::string>& problems);

}  // namespace verbsim::swarm
