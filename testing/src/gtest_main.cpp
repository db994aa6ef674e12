// main() of verbsim::gtest_main, which test binaries link instead of GTest::gtest_main:
// GoogleTest plus checks and a report for every simulated world a test creates. A world whose
// accounting does not balance (a posted work request that neither completed, nor is outstanding,
// nor was discarded by RESET/destroy) fails the test. A failing test prints, for each world it ran,
// the seed, profile and fault plan, the world's last records (posts, packets, completions, events)
// and the counters of the QPs they name; then a command that reruns it with the packet capture and
// the timeline switched on, with the environment that shaped the run: every VERBSIM_* variable
// and the program's own that VERBSIM_KEEP_ENV names (verbsim/sim/rerun_env.hpp;
// docs/OBSERVABILITY.md). A failing test that ran no world (on hardware) still prints the
// command, without the seed, capture and timeline. Every world whose config sets no
// budget gets sim::kTestKitBudget (VERBSIM_BUDGET overrides it).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include "verbsim/sim/observe.hpp"
#include "verbsim/sim/rerun_env.hpp"
#include "verbsim/sim/world.hpp"

extern char** environ;

namespace {

// Single quotes for a shell.
std::string shell_quoted(const std::string& s) {
  std::string out = "'";
  for (const char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

// argv[0] as a path the rerun command finds from any directory (a name found through PATH
// stays as it is).
std::string program_path(const std::string& argv0) {
  if (argv0.find('/') == std::string::npos) return argv0;
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::absolute(argv0, ec);
  return shell_quoted(ec ? argv0 : p.lexically_normal().string());
}

class FailureReporter final : public ::testing::EmptyTestEventListener,
                              public verbsim::sim::WorldObserver {
 public:
  explicit FailureReporter(std::string argv0) : argv0_(std::move(argv0)) {}

  void created(verbsim::sim::World& world) override {
    seeds_.push_back(world.seed());
    world.own_observer(std::make_unique<verbsim::sim::FlightRecorder>(50));
    recorded_.insert(&world);
  }

  void destroyed(verbsim::sim::World& world) override {
    const verbsim::sim::Accounting a = world.accounting();
    if (!a.balanced()) {
      ADD_FAILURE() << "work request accounting does not balance (seed " << world.seed()
                    << "): posted " << a.posted << " != completed " << a.completed
                    << " + discarded " << a.discarded << " + outstanding " << a.outstanding;
    }
    if (recorded_.erase(&world) == 0) return;
    if (::testing::Test::HasFailure()) {
      std::printf("[  WORLD   ] %s", world.report().c_str());
    }
  }

  void OnTestStart(const ::testing::TestInfo&) override { seeds_.clear(); }

  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (!info.result()->Failed()) return;
    const std::string test = std::string(info.test_suite_name()) + "." + info.name();
    // Every variable that shaped the run, as it was set (VERBSIM_FAULTS, VERBSIM_PROFILE,
    // VERBSIM_BACKEND, ..., and the program's own that VERBSIM_KEEP_ENV names), then the seed
    // and the capture and timeline on.
    const char* keep = std::getenv("VERBSIM_KEEP_ENV");
    std::string env;
    for (const auto& [name, value] :
         verbsim::sim::rerun_environment(environ, keep != nullptr ? keep : "",
                                         {"VERBSIM_SEED", "VERBSIM_PCAP", "VERBSIM_TIMELINE"})) {
      env += name + "=" + shell_quoted(value) + " ";
    }
    const std::string command = argv0_ + " --gtest_filter=" + shell_quoted(test);
    if (seeds_.empty()) {
      std::printf("[  RERUN   ] %s ran no simulated world; reproduce with:\n             %s%s\n",
                  test.c_str(), env.c_str(), command.c_str());
      return;
    }
    std::string file = test;
    for (char& ch : file) {
      if (ch == '/' || ch == '.') ch = '_';
    }
    // VERBSIM_SEED overrides every world's seed: name it only when the worlds shared one (or
    // it was set), else the rerun would give the test's other worlds another seed.
    const bool one_seed = std::all_of(seeds_.begin(), seeds_.end(),
                                      [&](std::uint64_t s) { return s == seeds_.front(); });
    const std::string seed =
        one_seed ? "VERBSIM_SEED=" + std::to_string(seeds_.front()) + " " : std::string();
    std::printf(
        "[  RERUN   ] %s ran %zu simulated world(s), %s %llu; reproduce with:\n"
        "             %s%sVERBSIM_PCAP=/tmp/%s.pcapng VERBSIM_TIMELINE=/tmp/%s.json %s\n",
        test.c_str(), seeds_.size(), one_seed ? "seed" : "seeds set by the test, first",
        static_cast<unsigned long long>(seeds_.front()), env.c_str(), seed.c_str(), file.c_str(),
        file.c_str(), command.c_str());
  }

 private:
  std::string argv0_;
  std::vector<std::uint64_t> seeds_;
  std::set<const verbsim::sim::World*> recorded_;  // worlds with the recorder attached
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto* reporter = new FailureReporter(program_path(argc > 0 ? argv[0] : "test"));
  ::testing::UnitTest::GetInstance()->listeners().Append(reporter);  // gtest owns it
  verbsim::sim::set_world_observer(reporter);
  // A world that livelocks (an RNR or retry loop) ends with a report instead of spinning:
  // VERBSIM_BUDGET changes the limit, VERBSIM_BUDGET=off lifts it.
  verbsim::sim::set_default_budget(verbsim::sim::Budget::parse(verbsim::sim::kTestKitBudget));
  const int rc = RUN_ALL_TESTS();
  verbsim::sim::set_world_observer(nullptr);
  return rc;
}
