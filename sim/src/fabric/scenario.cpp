#include "verbsim/sim/scenario.hpp"

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "verbsim/sim/observe.hpp"

namespace verbsim::sim {

namespace {
thread_local WorldObserver* t_observer = nullptr;

// Every record of a run, one line each, to find where two runs part.
class Trail final : public Observer {
 public:
  void posted(const PostRecord& r) override { lines.push_back(describe(r)); }
  void packet(const PacketRecord& r) override { lines.push_back(describe(r)); }
  void completion(const CompletionRecord& r) override { lines.push_back(describe(r)); }
  void instant(const InstantRecord& r) override { lines.push_back(describe(r)); }
  std::vector<std::string> lines;
};

// Where two trails differ first, in words.
std::string first_divergence(const Trail& a, const Trail& b) {
  const std::size_t n = std::min(a.lines.size(), b.lines.size());
  for (std::size_t i = 0; i < n; ++i) {
    if (a.lines[i] != b.lines[i]) {
      return "; they part at record " + std::to_string(i) + ": first run '" + a.lines[i] +
             "', second run '" + b.lines[i] + "'";
    }
  }
  if (a.lines.size() != b.lines.size()) {
    const bool first_longer = a.lines.size() > b.lines.size();
    return "; the " + std::string(first_longer ? "first" : "second") + " run goes on after record " +
           std::to_string(n) + ": '" + (first_longer ? a.lines[n] : b.lines[n]) + "'";
  }
  return "; their posts, packets, completions and events agree: the runs differ in an "
         "event's order or timing the observers do not see";
}
}  // namespace

void set_world_observer(WorldObserver* observer) noexcept { t_observer = observer; }

void notify_created(World& w) {
  if (t_observer != nullptr) t_observer->created(w);
}

void notify_destroyed(World& w) {
  if (t_observer != nullptr) t_observer->destroyed(w);
}

ScenarioResult run_scenario(const Config& config, const std::function<void(World&)>& scenario,
                            bool check) {
  const char* env = std::getenv("VERBSIM_CHECK_DETERMINISM");
  check = check || (env != nullptr && std::strcmp(env, "0") != 0 && *env != '\0');
  ScenarioResult r;
  Trail first;
  {
    World world(config);
    if (check) world.add_observer(first);
    scenario(world);
    r.seed = world.seed();
    r.digest = world.digest();
  }
  if (!check) return r;
  Trail second;
  World again(config);
  again.add_observer(second);
  scenario(again);
  if (again.digest() != r.digest) {
    r.deterministic = false;
    r.message = "seed " + std::to_string(r.seed) + ": digest " + std::to_string(r.digest) +
                " then " + std::to_string(again.digest()) + " on a second run" +
                first_divergence(first, second);
  }
  return r;
}

}  // namespace verbsim::sim
