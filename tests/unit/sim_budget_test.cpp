// Run budgets (sim::Config::budget, VERBSIM_BUDGET): a run that makes no progress ends with a
// report of what every QP is waiting for, instead of spinning forever.
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>

#include "../support/sim_pair.hpp"
#include "verbsim/sim/simulation.hpp"

namespace verbsim {
namespace {

using testing::SimPair;

// A world with `budget` and no fault plan from the environment (the counts below are exact).
sim::Config budgeted(const char* budget) {
  sim::Config c;
  c.budget = sim::Budget::parse(budget);
  c.env_faults = false;
  return c;
}

// The forgotten receive: a SEND to a QP with no receive posted, with the default rnr_retry=7,
// meets receiver-not-ready NAKs forever.
void send_without_receive(SimPair& p) {
  const Sge ss = p.a.sge(0, 8);
  SendWr wr;
  wr.wr_id = 1;
  wr.opcode = WrOpcode::send;
  wr.flags = SendFlags::signaled;
  wr.sg_list = {&ss, 1};
  ASSERT_FALSE(p.a.qp->post_send(wr).error());
}

// The lines of the report that say what each QP of the pair waits for.
std::string client_line(const SimPair& p, int rnr_naks) {
  return "sim0 qp " + std::to_string(p.a.qp->qp_num()) +
         " (RC, RTS): 1 send WR(s) outstanding, 0 of them sent and not acknowledged; waiting out "
         "a receiver-not-ready NAK; " +
         std::to_string(rnr_naks) +
         " RNR NAK(s) received, rnr_retry 7 retries forever (post the peer's receive, or set "
         "rnr_retry < 7); 0 receive(s) posted\n";
}
std::string server_line(const SimPair& p) {
  return "sim1 qp " + std::to_string(p.b.qp->qp_num()) +
         " (RC, RTS): no send WR outstanding; 0 receive(s) posted\n";
}

double elapsed_ms(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since)
      .count();
}

TEST(Budget, ParsesAndPrints) {
  const sim::Budget b = sim::Budget::parse("time=2s events=1000");
  EXPECT_EQ(b.virtual_ns, 2'000'000'000u);
  EXPECT_EQ(b.events, 1000u);
  EXPECT_EQ(b.to_string(), "time=2000000000ns events=1000");
  EXPECT_EQ(sim::Budget::parse(b.to_string()).virtual_ns, b.virtual_ns);
  EXPECT_EQ(sim::Budget::parse("time=5ms").virtual_ns, 5'000'000u);
  EXPECT_FALSE(sim::Budget{}.enabled());
  EXPECT_EQ(sim::Budget{}.to_string(), "none");
  try {
    (void)sim::Budget::parse("time=2h");
    FAIL() << "time=2h accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "budget: 'time=2h' has an unknown unit (time=<n>[ns|us|ms|s] events=<n> "
                 "stall=<n>[ns|us|ms|s], or off)");
  }
  const sim::Budget stall = sim::Budget::parse("stall=10s");
  EXPECT_EQ(stall.stall_ns, 10'000'000'000u);
  EXPECT_TRUE(stall.enabled());
  EXPECT_EQ(stall.to_string(), "stall=10000000000ns");
  EXPECT_FALSE(sim::Budget::parse("off").enabled());
  EXPECT_FALSE(sim::Budget::parse(sim::Budget{}.to_string()).enabled()) << "none";
  EXPECT_THROW((void)sim::Budget::parse("steps=3"), std::invalid_argument);
  EXPECT_THROW((void)sim::Budget::parse("events=x"), std::invalid_argument);
}

// VERBSIM_BUDGET's numbers are checked: one past 2^64, a negative one, or a time whose unit
// takes it past 2^64 ns is an error naming it, not another budget.
TEST(Budget, NumbersPastTheirRangeAreRefused) {
  const auto error_of = [](const char* text) -> std::string {
    try {
      const sim::Budget b = sim::Budget::parse(text);
      return "(parsed: " + b.to_string() + ")";
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
  };
  EXPECT_EQ(error_of("events=18446744073709551616"),
            "budget: 'events=18446744073709551616' is past 18446744073709551615 (time=<n>[ns|us|"
            "ms|s] events=<n> stall=<n>[ns|us|ms|s], or off)");
  EXPECT_EQ(error_of("time=18446744074s"),
            "budget: 'time=18446744074s' is past 18446744073709551615 ns (time=<n>[ns|us|ms|s] "
            "events=<n> stall=<n>[ns|us|ms|s], or off)");
  EXPECT_EQ(error_of("stall=18446744073710ms"),
            "budget: 'stall=18446744073710ms' is past 18446744073709551615 ns (time=<n>[ns|us|ms|"
            "s] events=<n> stall=<n>[ns|us|ms|s], or off)");
  EXPECT_NE(error_of("events=-1").find("'events=-1' has no number"), std::string::npos);
  EXPECT_NE(error_of("time=+5ms").find("'time=+5ms' has no number"), std::string::npos);
  EXPECT_EQ(sim::Budget::parse("events=18446744073709551615").events, UINT64_MAX);
  EXPECT_EQ(sim::Budget::parse("time=18446744073s").virtual_ns, 18'446'744'073'000'000'000u);
}

TEST(Budget, VerbsimBudgetSetsEveryWorldsBudget) {
  std::optional<std::string> saved;
  if (const char* old = std::getenv("VERBSIM_BUDGET")) saved = old;
  ::setenv("VERBSIM_BUDGET", "time=3ms events=77", 1);
  const sim::World world{sim::Config{}};
  if (saved) {
    ::setenv("VERBSIM_BUDGET", saved->c_str(), 1);
  } else {
    ::unsetenv("VERBSIM_BUDGET");
  }
  EXPECT_EQ(world.config().budget.virtual_ns, 3'000'000u);
  EXPECT_EQ(world.config().budget.events, 77u);
}

// The program polls as programs do; the poll that would pass the budget returns ETIMEDOUT
// (poll is noexcept), and the report went to stderr.
TEST(Budget, AForgottenReceiveEndsAPollLoopWithEtimedout) {
  const auto start = std::chrono::steady_clock::now();
  SimPair p(budgeted("time=1s"));
  send_without_receive(p);
  WorkCompletion wc[4];
  PollResult r;
  std::uint64_t polls = 0;
  ::testing::internal::CaptureStderr();
  do {
    r = p.a.cq->poll(wc);
    ++polls;
  } while (r.count == 0 && r.err == 0);
  const std::string report = ::testing::internal::GetCapturedStderr();
  std::printf("forgotten receive, poll loop: %llu polls, %.1f ms of wall time\n",
              static_cast<unsigned long long>(polls), elapsed_ms(start));
  EXPECT_EQ(r.count, 0u);
  EXPECT_EQ(r.err, ETIMEDOUT);
  EXPECT_EQ(p.a.cq->poll(wc).err, ETIMEDOUT);  // the world stays stopped
  EXPECT_LE(p.world.now(), 1'000'000'000u);
  EXPECT_TRUE(
      report.starts_with("verbsim: run budget exceeded (time=1000000000ns): the next "
                         "event, at "))
      << report;
  EXPECT_NE(report.find(client_line(p, 1558)), std::string::npos) << report;
  EXPECT_NE(report.find(server_line(p)), std::string::npos) << report;
  EXPECT_THROW(p.world.step(), sim::BudgetExceeded);
}

// A blocking wait runs the world itself: it throws the report.
TEST(Budget, AForgottenReceiveEndsABlockingWaitWithBudgetExceeded) {
  const auto start = std::chrono::steady_clock::now();
  SimPair p(budgeted("time=1s"));
  auto ch = p.a.ctx->create_comp_channel();
  auto cq = p.a.ctx->create_cq(4, ch.get());
  ASSERT_FALSE(cq->req_notify(false));
  send_without_receive(p);
  try {
    CompletionQueue* fired = nullptr;
    (void)ch->get_cq_event(fired, Wait::blocking);
    FAIL() << "the wait returned";
  } catch (const sim::BudgetExceeded& e) {
    std::printf("forgotten receive, blocking wait: %.1f ms of wall time\n", elapsed_ms(start));
    const std::string what = e.what();
    EXPECT_NE(what.find(client_line(p, 1558)), std::string::npos) << what;
    EXPECT_NE(what.find("seed 1, profile strict, fault plan ''"), std::string::npos) << what;
  }
}

// Under fibers the driver runs the world: the fiber's poll returns ETIMEDOUT, and once it
// has returned Simulation::run() throws the report.
TEST(Budget, AForgottenReceiveUnderFibersEndsRun) {
  const auto start = std::chrono::steady_clock::now();
  SimPair p(budgeted("events=500"));
  int err = 0;
  sim::Simulation sim(p.world);
  sim.spawn("client", [&] {
    send_without_receive(p);
    WorkCompletion wc[4];
    PollResult r;
    do {
      r = p.a.cq->poll(wc);
    } while (r.count == 0 && r.err == 0);
    err = r.err;
  });
  try {
    (void)sim.run();
    FAIL() << "run() returned";
  } catch (const sim::BudgetExceeded& e) {
    std::printf("forgotten receive, fibers: %.1f ms of wall time\n", elapsed_ms(start));
    const std::string what = e.what();
    EXPECT_TRUE(
        what.starts_with("verbsim: run budget exceeded (events=500): 500 events ran, "
                         "the budget's limit; the run is stopped."))
        << what;
    EXPECT_NE(what.find(server_line(p)), std::string::npos) << what;
  }
  EXPECT_EQ(err, ETIMEDOUT);
}

// A fiber blocked in a wait gets the exception itself; run() rethrows it.
TEST(Budget, AFiberWaitingPastTheBudgetGetsBudgetExceeded) {
  SimPair p(budgeted("time=1s"));
  auto ch = p.a.ctx->create_comp_channel();
  auto cq = p.a.ctx->create_cq(4, ch.get());
  ASSERT_FALSE(cq->req_notify(false));
  bool thrown = false;
  sim::Simulation sim(p.world);
  sim.spawn("waiter", [&] {
    send_without_receive(p);
    try {
      CompletionQueue* fired = nullptr;
      (void)ch->get_cq_event(fired, Wait::blocking);
    } catch (const sim::BudgetExceeded&) {
      thrown = true;
      throw;
    }
  });
  EXPECT_THROW((void)sim.run(), sim::BudgetExceeded);
  EXPECT_TRUE(thrown);
}

// Sets VERBSIM_BUDGET (nullptr: unsets it) for its lifetime.
class BudgetEnv {
 public:
  explicit BudgetEnv(const char* value) {
    if (const char* old = std::getenv("VERBSIM_BUDGET")) saved_ = old;
    if (value != nullptr) {
      ::setenv("VERBSIM_BUDGET", value, 1);
    } else {
      ::unsetenv("VERBSIM_BUDGET");
    }
  }
  ~BudgetEnv() {
    if (saved_) {
      ::setenv("VERBSIM_BUDGET", saved_->c_str(), 1);
    } else {
      ::unsetenv("VERBSIM_BUDGET");
    }
  }

 private:
  std::optional<std::string> saved_;
};

// This binary links verbsim::gtest_main, which gives every world without a budget of its own
// the test kit's; VERBSIM_BUDGET replaces it, and "off" lifts it.
TEST(Budget, TheTestKitGivesEveryWorldABudget) {
  const sim::Budget kit = sim::Budget::parse(sim::kTestKitBudget);
  ASSERT_TRUE(kit.enabled());
  {
    BudgetEnv env(nullptr);
    EXPECT_EQ(sim::default_budget().to_string(), kit.to_string());
    const sim::World plain{sim::Config{}};
    EXPECT_EQ(plain.config().budget.to_string(), kit.to_string());
    const sim::World own{budgeted("time=5ms")};
    EXPECT_EQ(own.config().budget.to_string(), "time=5000000ns") << "a world's own budget stays";
  }
  {
    BudgetEnv env("off");
    const sim::World off{sim::Config{}};
    EXPECT_FALSE(off.config().budget.enabled());
  }
}

// The kit's budget ends the forgotten receive too (in well under a second of wall time: the
// run prints what it took).
TEST(Budget, TheTestKitsBudgetEndsAForgottenReceive) {
  BudgetEnv env(nullptr);
  const auto start = std::chrono::steady_clock::now();
  sim::Config c;
  c.env_faults = false;
  SimPair p(c);
  send_without_receive(p);
  WorkCompletion wc[4];
  PollResult r;
  ::testing::internal::CaptureStderr();
  do {
    r = p.a.cq->poll(wc);
  } while (r.count == 0 && r.err == 0);
  const std::string report = ::testing::internal::GetCapturedStderr();
  std::printf("forgotten receive under the kit's budget: %.1f ms of wall time\n",
              elapsed_ms(start));
  EXPECT_EQ(r.err, ETIMEDOUT);
  EXPECT_NE(report.find("rnr_retry 7 retries forever"), std::string::npos) << report;
}

// A stall budget counts virtual time since the last progress, not since the start: a run that
// keeps completing work goes on past it, and the same run stops once the receives run out.
TEST(Budget, AStallBudgetLetsAProgressingRunGoOnAndStopsAStalledOne) {
  SimPair p(budgeted("stall=10ms"));
  const Sge ss = p.a.sge(0, 8);
  const Sge rs = p.b.sge(0, 64);
  WorkCompletion wc[4];
  // 40 messages, 1 ms of virtual time apart: 40 ms in all, never 10 ms without progress.
  for (std::uint64_t i = 0; i < 40; ++i) {
    ASSERT_FALSE(p.b.qp->post_recv(RecvWr{i, {&rs, 1}}).error());
    ASSERT_FALSE(p.a.qp->post_send(testing::send_wr(i, ss)).error());
    p.world.run_until(p.world.now() + 1'000'000);
    ASSERT_EQ(p.a.cq->poll(wc).count, 1u) << "message " << i;
    ASSERT_EQ(p.b.cq->poll(wc).count, 1u) << "message " << i;
  }
  EXPECT_GE(p.world.now(), 40'000'000u);  // four times the stall limit
  const std::uint64_t last_progress = p.world.now();
  ASSERT_FALSE(p.a.qp->post_send(testing::send_wr(99, ss)).error());  // no receive for this one
  try {
    p.world.run_until_idle();
    FAIL() << "the stalled run was not stopped";
  } catch (const sim::BudgetExceeded& e) {
    EXPECT_NE(std::string(e.what()).find("past the last progress"), std::string::npos) << e.what();
  }
  EXPECT_LE(p.world.now(), last_progress + 10'000'000u);
  EXPECT_GT(p.world.now(), last_progress + 9'000'000u) << "it RNR-looped until the limit";
}

TEST(Budget, NoBudgetNoLimit) {
  BudgetEnv env("off");
  sim::Config c;
  c.env_faults = false;
  SimPair p(c);
  send_without_receive(p);
  EXPECT_EQ(p.world.run_until_idle(5000), 5000u);  // still retrying
}

}  // namespace
}  // namespace verbsim
