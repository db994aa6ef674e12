// main() for every verbsim test binary: GoogleTest plus checks and a report for every
// simulated world a test creates. A world whose accounting does not balance (a posted work
// request that neither completed, nor is outstanding, nor was discarded by RESET/destroy)
// fails the test. A failing test prints, for each world it ran, the seed, profile and fault
// plan, the world's last records (posts, packets, completions, events) and the counters of
// the QPs they name; then a command that reruns it with the packet capture and the timeline
// switched on (docs/OBSERVABILITY.md).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <set>
#include <memory>
#include <string>
#include <vector>

#include "verbsim/sim/observe.hpp"
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
    if (!info.result()->Failed() || seeds_.empty()) return;
    const std::string test = std::string(info.test_suite_name()) + "." + info.name();
    // Every variable that shaped the run, as it was set, with the seed of its first world and
    // the capture and timeline on.
    std::string env;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string kv = *e;
      const auto eq = kv.find('=');
      const std::string name = kv.substr(0, eq);
      if (name.rfind("VERBSIM_", 0) != 0 || name == "VERBSIM_SEED" || name == "VERBSIM_PCAP" ||
          name == "VERBSIM_TIMELINE") {
        continue;
      }
      env += name + "=" + shell_quoted(kv.substr(eq + 1)) + " ";
    }
    std::string file = test;
    for (char& ch : file) {
      if (ch == '/' || ch == '.') ch = '_';
    }
    std::printf("[  RERUN   ] %s ran %zu simulated world(s), first seed %llu; reproduce with:\n"
                "             %sVERBSIM_SEED=%llu VERBSIM_PCAP=/tmp/%s.pcapng "
                "VERBSIM_TIMELINE=/tmp/%s.json %s --gtest_filter=%s\n",
                test.c_str(), seeds_.size(), static_cast<unsigned long long>(seeds_.front()),
                env.c_str(), static_cast<unsigned long long>(seeds_.front()), file.c_str(),
                file.c_str(), argv0_.c_str(), shell_quoted(test).c_str());
  }

 private:
  std::string argv0_;
  std::vector<std::uint64_t> seeds_;
  std::set<const verbsim::sim::World*> recorded_;  // worlds with the recorder attached
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto* reporter = new FailureReporter(argc > 0 ? argv[0] : "test");
  ::testing::UnitTest::GetInstance()->listeners().Append(reporter);  // gtest owns it
  verbsim::sim::set_world_observer(reporter);
  const int rc = RUN_ALL_TESTS();
  verbsim::sim::set_world_observer(nullptr);
  return rc;
}
