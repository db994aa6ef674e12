// main() for every verbsim test binary: GoogleTest plus two checks on every simulated world a
// test creates. A failing test prints the seed that reproduces it; a world whose accounting
// does not balance (a posted work request that neither completed, nor is outstanding, nor was
// discarded by RESET/destroy) fails the test.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "verbsim/sim/world.hpp"

namespace {

class SeedReporter final : public ::testing::EmptyTestEventListener,
                           public verbsim::sim::WorldObserver {
 public:
  explicit SeedReporter(std::string argv0) : argv0_(std::move(argv0)) {}

  void created(verbsim::sim::World& world) override { seeds_.push_back(world.seed()); }

  void destroyed(verbsim::sim::World& world) override {
    const verbsim::sim::Accounting a = world.accounting();
    if (!a.balanced()) {
      ADD_FAILURE() << "work request accounting does not balance (seed " << world.seed()
                    << "): posted " << a.posted << " != completed " << a.completed
                    << " + discarded " << a.discarded << " + outstanding " << a.outstanding;
    }
  }

  void OnTestStart(const ::testing::TestInfo&) override { seeds_.clear(); }

  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (!info.result()->Failed() || seeds_.empty()) return;
    std::printf("[  SEED    ] %s.%s ran %zu simulated world(s), first seed %llu; reproduce with:\n"
                "             VERBSIM_SEED=%llu %s --gtest_filter='%s.%s'\n",
                info.test_suite_name(), info.name(), seeds_.size(),
                static_cast<unsigned long long>(seeds_.front()),
                static_cast<unsigned long long>(seeds_.front()), argv0_.c_str(),
                info.test_suite_name(), info.name());
  }

 private:
  std::string argv0_;
  std::vector<std::uint64_t> seeds_;
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto* reporter = new SeedReporter(argc > 0 ? argv[0] : "test");
  ::testing::UnitTest::GetInstance()->listeners().Append(reporter);  // gtest owns it
  verbsim::sim::set_world_observer(reporter);
  const int rc = RUN_ALL_TESTS();
  verbsim::sim::set_world_observer(nullptr);
  return rc;
}
