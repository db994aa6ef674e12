// The end of a campaign: failures grouped by signature, one reproducer per group, and the
// putting together of shards (`verbsim-swarm merge`).
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "campaign.hpp"

namespace verbsim::swarm {

// The failed seeds of one signature, smallest seed first.
struct Group {
  std::string signature;
  std::vector<const SeedResult*> seeds;
};

// Largest group first; among equals, the one whose smallest seed is smaller.
std::vector<Group> groups(const Campaign& campaign);

// Each group: its size, signature and seeds, then its smallest seed's reproducer and last
// output; then the closing line, "swarm: N seeds, F failed[, G signatures]" followed by `scope`.
void print_summary(std::FILE* out, const Campaign& campaign, const std::string& scope);

// The shards of one campaign as one. Adds a line to `problems` for each thing that keeps the
// result from being the whole campaign exactly once: files of different campaigns, a shard
// missing, a seed missing, a seed run twice, a seed out of the range.
Campaign merge(const std::vector<Campaign>& shards, std::vector<std::string>& problems);

}  // namespace verbsim::swarm
