#include "shrink.hpp"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <map>
#include <set>
#include <utility>

#include "verbsim/sim/faults.hpp"

namespace verbsim::swarm {
namespace {

std::vector<std::string_view> words_of(std::string_view rule) {
  std::vector<std::string_view> words;
  while (!(rule = sim::trim_blanks(rule)).empty()) {
    const std::size_t end = rule.find_first_of(" \t");
    words.push_back(rule.substr(0, end));
    rule = end == std::string_view::npos ? std::string_view{} : rule.substr(end);
  }
  return words;
}

// The kind a rule's firings are reported under (VERBSIM_FAULT_FIRINGS, faults/injector.hpp):
// "verb", "packet" or "cm"; empty for the rules that do not fire on matches (timed ones and
// cq_overrun).
std::string_view firing_kind(std::string_view rule) {
  const std::vector<std::string_view> words = words_of(rule);
  if (words.empty()) return {};
  std::string_view kind = words.front();
  if (kind.starts_with("ibv_")) kind.remove_prefix(4);
  for (std::string_view packet : {"drop", "delay", "duplicate", "reorder"}) {
    if (kind == packet) return "packet";
  }
  if (kind == "cm_drop") return "cm";
  for (std::string_view other :
       {"link_down", "link_up", "qp_fatal", "device_fatal", "srq_limit", "cq_overrun"}) {
    if (kind == other) return {};
  }
  return "verb";
}

bool probabilistic(std::string_view rule) {
  const std::vector<std::string_view> words = words_of(rule);
  return std::any_of(words.begin(), words.end(),
                     [](std::string_view w) { return w.starts_with("p="); });
}

// The rule with its p= replaced by nth=n.
std::string with_nth(std::string_view rule, std::uint64_t n) {
  std::string out;
  for (std::string_view w : words_of(rule)) {
    if (!out.empty()) out += ' ';
    out += w.starts_with("p=") ? "nth=" + std::to_string(n) : std::string(w);
  }
  return out;
}

class Shrinker {
 public:
  Shrinker(std::string signature, std::string firings_file, const RunTrial& run, std::FILE* log)
      : signature_(std::move(signature)),
        firings_file_(std::move(firings_file)),
        run_(run),
        log_(log) {}

  int runs() const { return runs_; }

  // Does the run still fail the same way?
  bool same(const std::vector<std::string>& rules, int steps) {
    ++runs_;
    return run_({plan_of(rules), steps, {}}) == signature_;
  }

  // Delta debugging (Zeller's ddmin): a subset of `rules` that fails the same way and from
  // which no single rule can go.
  std::vector<std::string> fewest_rules(std::vector<std::string> rules, int steps) {
    if (rules.empty() || same({}, steps)) return {};
    std::size_t n = 2;
    while (rules.size() >= 2) {
      const std::size_t size = rules.size();
      n = std::min(n, size);
      auto chunk = [&](std::size_t i, bool inside) {
        std::vector<std::string> part;
        for (std::size_t j = 0; j < size; ++j) {
          if ((j >= i * size / n && j < (i + 1) * size / n) == inside) part.push_back(rules[j]);
        }
        return part;
      };
      bool reduced = false;
      for (std::size_t i = 0; i < n && !reduced; ++i) {
        if (std::vector<std::string> part = chunk(i, true); same(part, steps)) {
          rules = std::move(part);
          n = 2;
          reduced = true;
        }
      }
      for (std::size_t i = 0; i < n && !reduced && n > 2; ++i) {
        if (std::vector<std::string> rest = chunk(i, false); same(rest, steps)) {
          rules = std::move(rest);
          n = std::max<std::size_t>(n - 1, 2);
          reduced = true;
        }
      }
      if (!reduced) {
        if (n == size) break;
        n = std::min(n * 2, size);
      }
    }
    return rules;
  }

  // The fewest steps, at most `steps`, with which the run fails the same way (a binary search:
  // it takes a run that fails with k steps to fail with more).
  int fewest_steps(const std::vector<std::string>& rules, int steps) {
    int passes = 0;
    int fails = steps;
    while (fails - passes > 1) {
      const int mid = passes + (fails - passes) / 2;
      (same(rules, mid) ? fails : passes) = mid;
    }
    return fails;
  }

  // The rules with each probabilistic one (all, or only rules[only]) replaced by one nth= rule
  // per match it fired on in a run of `rules`; a rule that never fired goes.
  std::vector<std::string> specific(const std::vector<std::string>& rules, int steps,
                                    std::size_t only) {
    std::remove(firings_file_.c_str());
    ++runs_;
    run_({plan_of(rules), steps, firings_file_});
    // "packet 2 nth=14": the third packet rule fired on its 14th match (of some world).
    std::map<std::pair<std::string, std::size_t>, std::set<std::uint64_t>> fired;
    std::ifstream in(firings_file_);
    std::string kind;
    std::size_t index = 0;
    std::string nth;
    while (in >> kind >> index >> nth) {
      if (nth.starts_with("nth=")) fired[{kind, index}].insert(std::stoull(nth.substr(4)));
    }
    std::remove(firings_file_.c_str());
    std::vector<std::string> out;
    std::map<std::string, std::size_t> seen;  // rules of each kind so far
    for (std::size_t i = 0; i < rules.size(); ++i) {
      const std::string k(firing_kind(rules[i]));
      const std::size_t ordinal = k.empty() ? 0 : seen[k]++;
      if (k.empty() || !probabilistic(rules[i]) || (only != kAll && only != i)) {
        out.push_back(rules[i]);
        continue;
      }
      // A verb or CM rule that fires ends the search (faults/injector.hpp): the k-th nth= rule
      // does not count the matches the k before it took.
      std::uint64_t before = 0;
      for (std::uint64_t n : fired[{k, ordinal}]) {
        out.push_back(with_nth(rules[i], k == "packet" ? n : n - before));
        ++before;
      }
    }
    return out;
  }

  static constexpr std::size_t kAll = static_cast<std::size_t>(-1);

  // A line on how far the shrink got; the plan itself when it is short.
  void note(const char* what, const std::vector<std::string>& rules, int steps) {
    std::string line = "shrink: " + std::string(what) + ": " + std::to_string(rules.size()) +
                       (rules.size() == 1 ? " rule" : " rules");
    if (steps > 0) line += ", " + std::to_string(steps) + " steps";
    if (!rules.empty() && rules.size() <= 8) line += ": " + plan_of(rules);
    std::fprintf(log_, "%s (%d runs so far)\n", line.c_str(), runs_);
    std::fflush(log_);
  }

 private:
  std::string signature_;
  std::string firings_file_;
  const RunTrial& run_;
  std::FILE* log_;
  int runs_ = 0;
};

}  // namespace

std::vector<std::string> rules_of(std::string_view plan) {
  const std::vector<std::string_view> texts = sim::rule_texts(plan);
  return {texts.begin(), texts.end()};
}

std::string plan_of(const std::vector<std::string>& rules) {
  std::string plan;
  for (const std::string& r : rules) plan += (plan.empty() ? "" : "; ") + r;
  return plan;
}

Shrunk shrink(const std::string& faults, int steps, const std::string& firings_file,
              const RunTrial& run, std::FILE* log) {
  Shrunk out;
  out.runs = 1;
  out.signature = run({faults, 0, {}});
  if (out.signature.empty()) return out;
  std::fprintf(log, "shrink: fails: %s\n", out.signature.c_str());
  Shrinker s(out.signature, firings_file, run, log);
  std::vector<std::string> rules = s.fewest_rules(rules_of(faults), 0);
  s.note("rules it needs", rules, 0);
  int fewest = steps;
  if (steps > 0) {
    fewest = s.fewest_steps(rules, steps);
    s.note("steps it needs", rules, fewest);
  }
  // Probabilistic rules as the matches they fired on: all at once, or else one at a time (from
  // the last, so that the indexes of the ones before stay).
  if (std::any_of(rules.begin(), rules.end(), [](const std::string& r) { return probabilistic(r); })) {
    if (std::vector<std::string> all = s.specific(rules, fewest, Shrinker::kAll);
        all != rules && s.same(all, fewest)) {
      rules = std::move(all);
    } else {
      for (std::size_t i = rules.size(); i-- > 0;) {
        if (!probabilistic(rules[i])) continue;
        if (std::vector<std::string> one = s.specific(rules, fewest, i);
            one != rules && s.same(one, fewest)) {
          rules = std::move(one);
        }
      }
    }
    s.note("as the matches that fired", rules, fewest);
    rules = s.fewest_rules(std::move(rules), fewest);
    s.note("triggers it needs", rules, fewest);
    if (steps > 0) {
      fewest = s.fewest_steps(rules, fewest);
      s.note("steps it needs", rules, fewest);
    }
  }
  out.faults = plan_of(rules);
  out.steps = fewest == steps ? 0 : fewest;
  out.runs = 1 + s.runs();
  return out;
}

}  // namespace verbsim::swarm
