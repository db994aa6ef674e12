#include "verbsim/sim/scenario.hpp"

#include <cstdlib>
#include <cstring>

namespace verbsim::sim {

namespace {
thread_local WorldObserver* t_observer = nullptr;
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
  {
    World world(config);
    scenario(world);
    r.seed = world.seed();
    r.digest = world.digest();
  }
  if (!check) return r;
  World again(config);
  scenario(again);
  if (again.digest() != r.digest) {
    r.deterministic = false;
    r.message = "seed " + std::to_string(r.seed) + ": digest " + std::to_string(r.digest) +
                " then " + std::to_string(again.digest()) + " on a second run";
  }
  return r;
}

}  // namespace verbsim::sim
