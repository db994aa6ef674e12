// What a swarm campaign is made of: a range of seeds, the slice of it one swarm runs, and what
// each seed's run gave. The runner (swarm.cpp) fills it, a JUnit file keeps it (junit.hpp), and
// `verbsim-swarm merge` puts the slices back together (summary.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "signature.hpp"

namespace verbsim::swarm {

// One seed's run.
struct SeedResult {
  std::uint64_t seed = 0;
  bool failed = false;
  double seconds = 0;     // wall time
  std::string why;        // failures: "exit status 1", "killed by signal ...", "timed out ..."
  std::vector<Failure> failures;  // failures: each failed test, or what failed (signature.hpp)
  std::string reproducer;  // failures: the command line that runs this seed again
  std::string output;      // failures: the end of what the run printed
};

// The K-th of N disjoint slices of a seed range, K from 1 to N.
struct Shard {
  std::uint64_t index = 1;
  std::uint64_t count = 1;
};

// Seeds [first, first + count).
struct SeedRange {
  std::uint64_t first = 0;
  std::uint64_t count = 0;
};

// Shard K of N of the range: contiguous, sizes differ by at most one, and the N slices cover
// the range exactly (slice K ends where slice K + 1 begins). N < 2^32.
inline SeedRange slice(SeedRange range, Shard shard) {
  // first + floor(count * k / N), without the overflow of count * k.
  const std::uint64_t q = range.count / shard.count;
  const std::uint64_t r = range.count % shard.count;
  const auto edge = [&](std::uint64_t k) { return range.first + q * k + r * k / shard.count; };
  const std::uint64_t begin = edge(shard.index - 1);
  return {begin, edge(shard.index) - begin};
}

struct Campaign {
  std::string name;                 // the tested binary's base name
  std::string command;              // the tested command line, quoted for a shell
  SeedRange range;                  // the whole campaign's seeds
  Shard shard;                      // the slice of them these results are (1/1: all)
  std::string timestamp;            // when it started, UTC, ISO 8601 without zone
  std::string hostname;             // where it ran
  double seconds = 0;               // wall time
  std::vector<SeedResult> results;  // sorted by seed
};

}  // namespace verbsim::swarm
