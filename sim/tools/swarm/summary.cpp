#include "summary.hpp"

#include <algorithm>
#include <map>
#include <set>

namespace verbsim::swarm {
namespace {

std::string seeds_text(std::uint64_t first, std::uint64_t last) {
  return first == last ? "seed " + std::to_string(first)
                       : "seeds " + std::to_string(first) + " to " + std::to_string(last);
}

}  // namespace

std::vector<Group> groups(const Campaign& c) {
  std::map<std::string, Group> by_key;
  std::map<std::string, std::set<std::string>> signatures;
  for (const SeedResult& r : c.results) {
    if (!r.failed) continue;
    std::set<std::string> seen;  // a seed that fails a test twice the same way counts once
    for (const Failure& f : r.failures) {
      const std::string key = f.group();
      if (!seen.insert(key).second) continue;
      Group& g = by_key[key];
      g.key = key;
      g.test = f.test;
      // Results are sorted by seed (run() and merge() sort them): the first is the smallest.
      if (g.seeds.empty() || r.seed < g.seeds.front()->seed) g.signature = f.signature;
      g.seeds.push_back(&r);
      signatures[key].insert(f.signature);
    }
  }
  std::vector<Group> out;
  for (auto& [key, g] : by_key) {
    std::sort(g.seeds.begin(), g.seeds.end(),
              [](const SeedResult* a, const SeedResult* b) { return a->seed < b->seed; });
    g.signatures = signatures[key].size();
    out.push_back(std::move(g));
  }
  std::sort(out.begin(), out.end(), [](const Group& a, const Group& b) {
    if (a.seeds.size() != b.seeds.size()) return a.seeds.size() > b.seeds.size();
    if (a.seeds.front()->seed != b.seeds.front()->seed) {
      return a.seeds.front()->seed < b.seeds.front()->seed;
    }
    return a.key < b.key;
  });
  return out;
}

void print_summary(std::FILE* out, const Campaign& c, const std::string& scope,
                   const GroupNote& note) {
  const std::vector<Group> all = groups(c);
  std::size_t failed = 0;
  for (const SeedResult& r : c.results) failed += r.failed ? 1 : 0;
  for (const Group& g : all) {
    std::fprintf(out, "\n=== %zu of %zu failed seeds: %s\n    seeds", g.seeds.size(), failed,
                 g.key.c_str());
    constexpr std::size_t kListed = 20;
    for (std::size_t i = 0; i < g.seeds.size() && i < kListed; ++i) {
      std::fprintf(out, "%s %llu", i == 0 ? "" : ",",
                   static_cast<unsigned long long>(g.seeds[i]->seed));
    }
    if (g.seeds.size() > kListed) std::fprintf(out, " and %zu more", g.seeds.size() - kListed);
    const SeedResult& r = *g.seeds.front();
    if (!g.test.empty()) {
      std::fprintf(out, "\n    seed %llu: %s", static_cast<unsigned long long>(r.seed),
                   g.signature.c_str());
      if (g.signatures > 1) {
        std::fprintf(out, "\n    (%zu different messages or last records in the group)",
                     g.signatures);
      }
    }
    if (note) {
      const std::string lines = note(g);
      if (!lines.empty()) std::fprintf(out, "\n%s", lines.c_str());
    }
    std::fprintf(out, "\n--- seed %llu failed (%s); reproduce with:\n%s\n--- last output:\n",
                 static_cast<unsigned long long>(r.seed), r.why.c_str(), r.reproducer.c_str());
    std::fputs(r.output.c_str(), out);
    if (!r.output.empty() && r.output.back() != '\n') std::fputc('\n', out);
  }
  // Per test: the seeds that failed it and the groups (first failure sites) they make.
  std::map<std::string, std::pair<std::set<std::uint64_t>, std::size_t>> tests;
  for (const Group& g : all) {
    if (g.test.empty()) continue;
    auto& [seeds, n_groups] = tests[g.test];
    for (const SeedResult* r : g.seeds) seeds.insert(r->seed);
    ++n_groups;
  }
  if (!tests.empty()) {
    std::vector<std::pair<std::string, std::pair<std::set<std::uint64_t>, std::size_t>>> rows(
        tests.begin(), tests.end());
    std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
      return a.second.first.size() > b.second.first.size();
    });
    std::fprintf(out,
                 "\nfailed tests (a seed that failed two counts under both):\n"
                 "  seeds  sites  test\n");
    for (const auto& [test, row] : rows) {
      std::fprintf(out, "  %5zu  %5zu  %s\n", row.first.size(), row.second, test.c_str());
    }
  }
  std::fprintf(out, "\nswarm: %zu seeds, %zu failed", c.results.size(), failed);
  if (failed > 0) std::fprintf(out, ", %zu group%s", all.size(), all.size() == 1 ? "" : "s");
  std::fprintf(out, "%s\n", scope.c_str());
}

Campaign merge(const std::vector<Campaign>& shards, std::vector<std::string>& problems) {
  Campaign all;
  if (shards.empty()) return all;
  const Campaign& first = shards.front();
  all.name = first.name;
  all.command = first.command;
  all.range = first.range;
  all.timestamp = first.timestamp;
  std::set<std::string> hosts;
  std::set<std::uint64_t> indices;
  for (const Campaign& s : shards) {
    if (s.command != first.command || s.range.first != first.range.first ||
        s.range.count != first.range.count || s.shard.count != first.shard.count) {
      problems.push_back("not one campaign: shard " + std::to_string(s.shard.index) + "/" +
                         std::to_string(s.shard.count) + " of " +
                         seeds_text(s.range.first, s.range.first + s.range.count - 1) + " runs " +
                         s.command + "; shard " + std::to_string(first.shard.index) + "/" +
                         std::to_string(first.shard.count) + " of " +
                         seeds_text(first.range.first, first.range.first + first.range.count - 1) +
                         " runs " + first.command);
    }
    if (!indices.insert(s.shard.index).second) {
      problems.push_back("shard " + std::to_string(s.shard.index) + "/" +
                         std::to_string(s.shard.count) + " given twice");
    }
    all.timestamp = std::min(all.timestamp, s.timestamp);
    all.seconds += s.seconds;
    hosts.insert(s.hostname);
    all.results.insert(all.results.end(), s.results.begin(), s.results.end());
  }
  for (std::uint64_t k = 1; k <= first.shard.count; ++k) {
    if (indices.count(k) == 0) {
      problems.push_back("shard " + std::to_string(k) + "/" + std::to_string(first.shard.count) +
                         " missing");
    }
  }
  for (const std::string& h : hosts) all.hostname += (all.hostname.empty() ? "" : " ") + h;
  std::stable_sort(all.results.begin(), all.results.end(),
                   [](const SeedResult& a, const SeedResult& b) { return a.seed < b.seed; });
  // Every seed of the range exactly once: report the gaps, the repeats and the strays.
  const std::uint64_t end = all.range.first + all.range.count;
  std::uint64_t expected = all.range.first;
  for (std::size_t i = 0; i < all.results.size(); ++i) {
    const std::uint64_t seed = all.results[i].seed;
    if (seed < all.range.first || seed >= end) {
      problems.push_back("seed " + std::to_string(seed) + " is outside the campaign's " +
                         seeds_text(all.range.first, end - 1));
      continue;
    }
    if (i > 0 && all.results[i - 1].seed == seed) {
      problems.push_back("seed " + std::to_string(seed) + " ran more than once");
      continue;
    }
    if (seed > expected) problems.push_back(seeds_text(expected, seed - 1) + " missing");
    expected = seed + 1;
  }
  if (expected < end) problems.push_back(seeds_text(expected, end - 1) + " missing");
  return all;
}

}  // namespace verbsim::swarm
