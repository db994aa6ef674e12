// Fault plans: the text form, and each kind of fault produced through the public API.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>

#include "../support/sim_pair.hpp"
#include "verbsim/testing/wr_checker.hpp"
#include "verbsim/sim/faults.hpp"
#include "verbsim/sim/scenario.hpp"

namespace verbsim {
namespace {

using sim::FaultPlan;
using testing::drain;
using testing::PairOptions;
using testing::poll_n;
using testing::SimPair;
using testing::WrChecker;

// The plan `text` alone: these tests count what their own rules do, so a swarm's VERBSIM_FAULTS
// stays out (Config::env_faults).
sim::Config with_faults(const char* text, std::uint64_t seed = 1) {
  sim::Config c;
  c.seed = seed;
  c.faults = FaultPlan::parse(text);
  c.env_faults = false;
  return c;
}

SendWr send_wr(const testing::Side& s, const Sge& sge, std::uint64_t id) {
  (void)s;
  SendWr wr;
  wr.wr_id = id;
  wr.opcode = WrOpcode::send;
  wr.flags = SendFlags::signaled;
  wr.sg_list = {&sge, 1};
  return wr;
}

// The checker's names for a SimPair's QPs: a is on device 0, b on device 1.
testing::QpKey key_a(const SimPair& p) { return {0, p.a.qp->qp_num()}; }
testing::QpKey key_b(const SimPair& p) { return {1, p.b.qp->qp_num()}; }

// Posts `n` receives on b and `n` SENDs on a (n <= 16, the queues' depth), returns a's `n`
// send completions, polling as they come unless `poll` is false. A `checker` learns of every WR
// posted and every completion returned.
std::vector<WorkCompletion> exchange(SimPair& p, int n, bool poll = true,
                                     WrChecker* checker = nullptr) {
  const Sge rs = p.b.sge(0, 256);
  const Sge ss = p.a.sge(0, 64);
  for (int i = 0; i < n; ++i) {
    const auto id = static_cast<std::uint64_t>(100 + i);
    EXPECT_FALSE(p.b.qp->post_recv(RecvWr{id, {&rs, 1}}).error());
    if (checker != nullptr) checker->took_recv(key_b(p), id, {&rs, 1});
  }
  for (int i = 0; i < n; ++i) {
    const auto id = static_cast<std::uint64_t>(i);
    const PostResult r = p.a.qp->post_send(send_wr(p.a, ss, id));
    EXPECT_FALSE(r.error()) << r.reason;
    if (checker != nullptr) checker->took_send(key_a(p), id, WcOpcode::send, true, true);
  }
  if (!poll) return {};
  auto wcs = poll_n(p.world, *p.a.cq, static_cast<std::size_t>(n));
  if (checker != nullptr) checker->completed(0, wcs);
  return wcs;
}

TEST(FaultPlanText, PacketKinds) {
  const FaultPlan plan = FaultPlan::parse("drop p=0.01 packets=requests; delay nth=2 packets=responses");
  ASSERT_EQ(plan.packets.size(), 2u);
  EXPECT_EQ(plan.packets[0].kinds, sim::PacketKinds::requests);
  EXPECT_EQ(plan.packets[1].kinds, sim::PacketKinds::responses);
  EXPECT_EQ(FaultPlan::parse(plan.to_string()).to_string(), plan.to_string());
  EXPECT_NE(plan.to_string().find("packets=requests"), std::string::npos);
  EXPECT_THROW(FaultPlan::parse("drop packets=naks p=1"), std::invalid_argument);
  EXPECT_THROW(FaultPlan::parse("drop psn=5 packets=responses"), std::invalid_argument);
  EXPECT_THROW(FaultPlan::parse("drop psn=5 packets=acks"), std::invalid_argument);
  const FaultPlan acks = FaultPlan::parse("duplicate p=0.5 packets=acks");
  EXPECT_EQ(acks.packets[0].kinds, sim::PacketKinds::acks);
  EXPECT_EQ(acks.to_string(), "duplicate p=0.5 packets=acks");
}

TEST(FaultPlanText, ParsesEveryKindAndRoundTrips) {
  const char* text =
      "post_send nth=3 errno=ENOMEM; poll_cq every=10 errno=EAGAIN qp=17\n"
      "ibv_get_cq_event p=0.25 errno=11 dev=sim1  # comment\n"
      "drop p=0.01; drop psn=5 qp=17; delay p=0.5 by=20us; duplicate every=7; reorder p=0.1 by=5us\n"
      "link_down dev=sim1 port=1 at=2ms for=5ms; qp_fatal qp=18 at=1ms; device_fatal dev=sim0 at=3s\n"
      "srq_limit dev=sim1 at=10us; cq_overrun depth=4\n"
      "cm_drop msg=rep nth=1; cm_drop p=0.5 dev=sim0; rdma_connect nth=2 errno=ENETUNREACH";
  const FaultPlan plan = FaultPlan::parse(text);
  ASSERT_EQ(plan.verbs.size(), 4u);
  EXPECT_EQ(plan.verbs[3].verb, sim::Verb::rdma_connect);
  EXPECT_EQ(plan.verbs[3].err, ENETUNREACH);
  EXPECT_EQ(plan.verbs[0].verb, sim::Verb::post_send);
  EXPECT_EQ(plan.verbs[0].when.nth, 3u);
  EXPECT_EQ(plan.verbs[0].err, ENOMEM);
  EXPECT_EQ(plan.verbs[1].where.qpn, 17u);
  EXPECT_EQ(plan.verbs[2].verb, sim::Verb::get_cq_event);
  EXPECT_EQ(plan.verbs[2].err, EAGAIN);
  EXPECT_DOUBLE_EQ(plan.verbs[2].when.probability, 0.25);
  ASSERT_EQ(plan.packets.size(), 5u);
  EXPECT_EQ(plan.packets[1].psn, 5u);
  EXPECT_EQ(plan.packets[1].when.nth, 1u);
  EXPECT_EQ(plan.packets[2].by_ns, 20000u);
  ASSERT_EQ(plan.timed.size(), 4u);
  EXPECT_EQ(plan.timed[0].at_ns, 2000000u);
  EXPECT_EQ(plan.timed[0].for_ns, 5000000u);
  EXPECT_EQ(plan.timed[2].at_ns, 3000000000u);
  EXPECT_EQ(plan.cq_depth, 4u);
  ASSERT_EQ(plan.cm.size(), 2u);
  EXPECT_EQ(plan.cm[0].msg, sim::CmMessage::rep);
  EXPECT_EQ(plan.cm[1].msg, sim::CmMessage::any);
  EXPECT_EQ(plan.cm[1].where.device, "sim0");
  const FaultPlan again = FaultPlan::parse(plan.to_string());
  EXPECT_EQ(again.to_string(), plan.to_string());
}

// Every row of VERBSIM_FAULT_VERBS: its name parses (with or without ibv_) to its value, and
// the plan prints it back.
TEST(FaultPlanText, EveryVerbsNameRoundTrips) {
  for (int i = 0; i < sim::kVerbCount; ++i) {
    const auto verb = static_cast<sim::Verb>(i);
    const std::string name(sim::to_string(verb));
    SCOPED_TRACE(name);
    ASSERT_NE(name, "unknown");
    const std::string rule = name + " nth=2 errno=EIO qp=7";
    for (const std::string& text : {rule, "ibv_" + rule}) {
      const FaultPlan plan = FaultPlan::parse(text);
      ASSERT_EQ(plan.verbs.size(), 1u);
      EXPECT_EQ(plan.verbs[0].verb, verb);
      EXPECT_EQ(plan.verbs[0].err, EIO);
      EXPECT_EQ(plan.to_string(), rule);
      EXPECT_TRUE(plan.has_verb(verb));
    }
  }
  EXPECT_EQ(sim::to_string(static_cast<sim::Verb>(sim::kVerbCount)), "unknown");
}

TEST(FaultPlanText, RejectsBadRulesWithTheRuleNamed) {
  struct Bad {
    const char* rule;
    const char* why;
  };
  const Bad bads[] = {
      {"post_send errno=ENOMEM", "give exactly one of nth=, every= or p="},
      {"post_send nth=1", "errno= is required"},
      {"post_send nth=0 errno=EIO", "nth counts from 1"},
      {"post_send nth=1 errno=4096", "errno=4096 out of range"},
      {"frobnicate p=1", "unknown fault kind 'frobnicate'"},
      {"drop p=2", "p=2 is not in [0, 1]"},
      {"drop nth", "'nth' is not key=value"},
      {"delay p=0.1 by=3parsecs", "by=3parsecs: unknown unit (ns, us, ms or s)"},
      {"post_send nth=1 errno=ENOMEM colour=red", "unknown key 'colour'"},
      {"link_down at=1ms", "dev= is required"},
      {"link_down dev=sim0 at=1ms nth=1", "unknown key 'nth'"},
      {"qp_fatal at=1ms", "qp= is required"},
      {"cq_overrun", "depth= is required and at least 1"},
      {"post_send nth=1 every=2 errno=EIO", "give exactly one of nth=, every= or p="},
      {"cm_drop msg=mad nth=1", "msg=mad is not req, rep, rtu, rej, dreq, drep or any"},
      {"cm_drop msg=req", "give exactly one of nth=, every= or p="},
      // Found by the fault-plan fuzzer: a carriage return inside a name printed as its end.
      {"cm_drop dev=r\x01\r every=2",
       "dev=r\x01\r is not a device name (up to 64 letters, digits, '_', '-' or '.')"},
      {"link_down dev=sim0/1 at=1ms",
       "dev=sim0/1 is not a device name (up to 64 letters, digits, '_', '-' or '.')"},
  };
  for (const Bad& bad : bads) {
    // The second rule is the bad one: the message names it, not the good rule before it.
    const std::string text = std::string("drop p=0.5; ") + bad.rule;
    try {
      (void)FaultPlan::parse(text);
      ADD_FAILURE() << "accepted: " << bad.rule;
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()),
                std::string("fault plan: ") + bad.why + " in rule '" + bad.rule + "'");
    }
  }
}

TEST(VerbFaults, NthPostSendFailsWithTheErrnoAndNothingIsPosted) {
  SimPair p(with_faults("post_send nth=2 errno=ENOMEM"));
  const Sge ss = p.a.sge(0, 8);
  const Sge rs = p.b.sge(0, 64);
  for (int i = 0; i < 3; ++i) ASSERT_FALSE(p.b.qp->post_recv(RecvWr{1, {&rs, 1}}).error());
  EXPECT_FALSE(p.a.qp->post_send(send_wr(p.a, ss, 1)).error());
  const PostResult r = p.a.qp->post_send(send_wr(p.a, ss, 2));
  EXPECT_EQ(r.error().value(), ENOMEM);
  EXPECT_EQ(r.error(), Condition::queue_full);
  EXPECT_EQ(r.posted, 0u);
  EXPECT_FALSE(p.a.qp->post_send(send_wr(p.a, ss, 3)).error());
  const auto wcs = drain(p.world, *p.a.cq);
  std::vector<std::uint64_t> send_ids;
  for (const auto& wc : wcs) {
    if (wc.opcode == WcOpcode::send) send_ids.push_back(wc.wr_id);
  }
  EXPECT_EQ(send_ids, (std::vector<std::uint64_t>{1, 3}));
}

TEST(VerbFaults, EveryNthPollReturnsTheErrnoOnTheFilteredDeviceOnly) {
  SimPair p(with_faults("poll_cq every=2 errno=EAGAIN dev=sim0"));
  WorkCompletion wc[4];
  EXPECT_FALSE(p.a.cq->poll(wc).error());
  EXPECT_EQ(p.a.cq->poll(wc).error().value(), EAGAIN);
  EXPECT_FALSE(p.a.cq->poll(wc).error());
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(p.b.cq->poll(wc).error());
}

// Sets VERBSIM_FAULTS for one test, and puts back what was there (a swarm's plan) after.
class ScopedEnvFaults {
 public:
  explicit ScopedEnvFaults(const char* plan) {
    if (const char* old = std::getenv("VERBSIM_FAULTS")) saved_ = old;
    ::setenv("VERBSIM_FAULTS", plan, 1);
  }
  ~ScopedEnvFaults() {
    if (saved_) {
      ::setenv("VERBSIM_FAULTS", saved_->c_str(), 1);
    } else {
      ::unsetenv("VERBSIM_FAULTS");
    }
  }

 private:
  std::optional<std::string> saved_;
};

TEST(VerbFaults, EnvironmentRulesAreAppendedToTheConfigsOwn) {
  ScopedEnvFaults env("post_send nth=1 errno=ENOMEM");
  sim::Config c = with_faults("poll_cq nth=1 errno=EAGAIN dev=sim0");
  c.env_faults = true;  // the default
  SimPair p(c);
  EXPECT_EQ(p.world.config().faults.to_string(),
            "poll_cq nth=1 errno=EAGAIN dev=sim0; post_send nth=1 errno=ENOMEM");
  WorkCompletion wc[4];
  EXPECT_EQ(p.a.cq->poll(wc).error().value(), EAGAIN);  // the config's rule
  const Sge ss = p.a.sge(0, 8);
  const PostResult r = p.a.qp->post_send(send_wr(p.a, ss, 1));
  EXPECT_EQ(r.error().value(), ENOMEM);  // the environment's rule
  EXPECT_EQ(r.posted, 0u);
}

TEST(VerbFaults, EnvFaultsFalseKeepsTheConfigsPlanAlone) {
  ScopedEnvFaults env("post_send nth=1 errno=ENOMEM");
  sim::Config c = with_faults("poll_cq nth=1 errno=EAGAIN dev=sim0");
  c.env_faults = false;
  SimPair p(c);
  EXPECT_EQ(p.world.config().faults.to_string(), "poll_cq nth=1 errno=EAGAIN dev=sim0");
  WorkCompletion wc[4];
  EXPECT_EQ(p.a.cq->poll(wc).error().value(), EAGAIN);
  const Sge ss = p.a.sge(0, 8);
  const PostResult r = p.a.qp->post_send(send_wr(p.a, ss, 1));
  EXPECT_FALSE(r.error()) << r.reason;
  EXPECT_EQ(r.posted, 1u);
}

TEST(VerbFaults, ConfigFromEnvReadsTheEnvironmentsRulesOnce) {
  ScopedEnvFaults env("post_send nth=1 errno=ENOMEM");
  const sim::Config c = sim::Config::from_env();
  EXPECT_FALSE(c.env_faults);
  sim::World world(c);
  EXPECT_EQ(world.config().faults.to_string(), "post_send nth=1 errno=ENOMEM");
}

TEST(FaultPlanText, QpTakesANameAndRejectsWhatIsNeither) {
  const FaultPlan plan = FaultPlan::parse("post_send nth=1 errno=ENOMEM qp=server; drop p=0.5 qp=c-1.x");
  ASSERT_EQ(plan.verbs.size(), 1u);
  EXPECT_EQ(plan.verbs[0].where.qp_name, "server");
  EXPECT_FALSE(plan.verbs[0].where.qpn.has_value());
  EXPECT_EQ(plan.packets[0].where.qp_name, "c-1.x");
  EXPECT_EQ(plan.to_string(), "post_send nth=1 errno=ENOMEM qp=server; drop p=0.5 qp=c-1.x");
  try {
    (void)FaultPlan::parse("post_send nth=1 errno=ENOMEM qp=-x");
    FAIL() << "qp=-x accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "fault plan: qp=-x is neither a QP number nor a name (a letter or '_', then "
                 "letters, digits, '_', '-' or '.') in rule 'post_send nth=1 errno=ENOMEM qp=-x'");
  }
  try {
    (void)FaultPlan::parse("drop nth=1 qp=12ab");
    FAIL() << "qp=12ab accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "fault plan: qp=12ab is not a number from 0 to 4294967295 in rule 'drop nth=1 "
                 "qp=12ab'");
  }
}

// Every number a rule holds is checked against the range of what it sets: past it is an error
// naming the key and the value, never another value (a wrapped time, a truncated QP number).
TEST(FaultPlanText, NumbersPastTheirRangeAreRefusedNotWrapped) {
  struct Bad {
    const char* rule;
    const char* why;
  };
  const Bad bads[] = {
      // 18446744073709552 us is 2^64 ns and a bit: it wrapped to 384 ns.
      {"delay by=18446744073709552us p=0.1",
       "by=18446744073709552us is past the longest time a rule may name (2^62 ns, about 146 "
       "years)"},
      {"delay by=4611686018427387905ns p=0.1",
       "by=4611686018427387905ns is past the longest time a rule may name (2^62 ns, about 146 "
       "years)"},
      {"link_down dev=sim0 at=5000000000s", "at=5000000000s is past the longest time"},
      {"link_down dev=sim0 at=1ms for=99999999999999999999ms",
       "for=99999999999999999999ms is past the longest time"},
      {"post_send nth=18446744073709551616 errno=EIO",
       "nth=18446744073709551616 is not a number from 0 to 18446744073709551615"},
      {"post_send every=0x10000000000000000 errno=EIO",
       "every=0x10000000000000000 is not a number from 0 to 18446744073709551615"},
      {"post_send nth=-1 errno=EIO", "nth=-1 is not a number"},
      {"post_send nth=+1 errno=EIO", "nth=+1 is not a number"},
      {"post_send nth=1 errno=EIO qp=4294967296",
       "qp=4294967296 is not a number from 0 to 4294967295"},
      {"drop psn=16777216", "psn=16777216 is not a number from 0 to 16777215"},
      {"link_down dev=sim0 port=256 at=1ms", "port=256 is not a number from 0 to 255"},
      {"qp_fatal qp=0x100000011 at=1ms", "qp=0x100000011 is not a number from 0 to 4294967295"},
      {"cq_overrun depth=4294967296", "depth=4294967296 is not a number from 0 to 4294967295"},
      {"post_send nth=1 errno=18446744073709551616",
       "errno=18446744073709551616 is not a number from 0 to 18446744073709551615"},
      {"drop p=nan", "p=nan is not in [0, 1]"},
      {"drop p=1e-400", "p=1e-400 is not in [0, 1]"},
      {"drop p=0.5x", "p=0.5x is not in [0, 1]"},
      {"drop p=inf", "p=inf is not in [0, 1]"},
  };
  for (const Bad& bad : bads) {
    try {
      const FaultPlan plan = FaultPlan::parse(bad.rule);
      ADD_FAILURE() << "accepted: " << bad.rule << " as " << plan.to_string();
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(bad.why), std::string::npos)
          << bad.rule << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(bad.rule), std::string::npos) << e.what();
    }
  }
  // The edges themselves are numbers; a time's digits are decimal.
  const FaultPlan edges = FaultPlan::parse(
      "delay by=4611686018427387904ns p=1; drop psn=0xffffff; delay by=010us p=1; "
      "post_send nth=18446744073709551615 errno=EIO qp=4294967295; "
      "link_down dev=sim0 port=255 at=4611686018s for=0; cq_overrun depth=0xffffffff");
  EXPECT_EQ(edges.packets[0].by_ns, std::uint64_t{1} << 62);
  EXPECT_EQ(edges.packets[1].psn, 0xffffffu);
  EXPECT_EQ(edges.packets[2].by_ns, 10'000u);
  EXPECT_EQ(edges.verbs[0].when.nth, UINT64_MAX);
  EXPECT_EQ(edges.verbs[0].where.qpn, 0xffffffffu);
  EXPECT_EQ(edges.timed[0].port, 255);
  EXPECT_EQ(edges.cq_depth, 0xffffffffu);
}

// Both QPs of a SimPair are QP 17 (of sim0 and sim1): a name picks one of them.
TEST(VerbFaults, ARuleNamingAQpFiresOnThatQpOnceItIsNamed) {
  sim::Config c;
  c.faults.fail(sim::Verb::post_send, ENOMEM, {.nth = 1}, sim::Filter::named("client"));
  c.env_faults = false;
  SimPair p(c);
  ASSERT_EQ(p.a.qp->qp_num(), p.b.qp->qp_num());
  const Sge sa = p.a.sge(0, 8);
  const Sge sb = p.b.sge(0, 8);
  const Sge ra = p.a.sge(1024, 64);
  const Sge rb = p.b.sge(1024, 64);
  for (int i = 0; i < 4; ++i) {
    ASSERT_FALSE(p.a.qp->post_recv(RecvWr{50, {&ra, 1}}).error());
    ASSERT_FALSE(p.b.qp->post_recv(RecvWr{60, {&rb, 1}}).error());
  }
  EXPECT_FALSE(p.a.qp->post_send(send_wr(p.a, sa, 1)).error());  // not named yet: no match
  EXPECT_EQ(p.world.unnamed_rules(),
            "fault rule 'post_send nth=1 errno=ENOMEM qp=client' names QP 'client', which no QP "
            "was given (World::name): it never fired\n");
  p.world.name(*p.a.qp, "client");
  EXPECT_EQ(p.world.unnamed_rules(), "");
  EXPECT_FALSE(p.b.qp->post_send(send_wr(p.b, sb, 2)).error());  // sim1's QP 17: not it
  EXPECT_EQ(p.a.qp->post_send(send_wr(p.a, sa, 3)).error().value(), ENOMEM);
  EXPECT_FALSE(p.a.qp->post_send(send_wr(p.a, sa, 4)).error());  // nth=1: once
  (void)drain(p.world, *p.a.cq);
}

TEST(VerbFaults, NamingRejectsBadNamesAndTakenNames) {
  SimPair p(with_faults("post_send nth=1 errno=ENOMEM qp=server"));
  EXPECT_THROW(p.world.name(*p.b.qp, "9lives"), std::invalid_argument);
  p.world.name(*p.b.qp, "server");
  p.world.name(*p.b.qp, "server");  // the same QP again: fine
  try {
    p.world.name(*p.a.qp, "server");
    FAIL() << "a second QP took the name";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "World::name: 'server' already names QP 17 of device 1");
  }
  sim::World other;
  try {
    other.name(*p.a.qp, "x");
    FAIL() << "a QP of another world was named";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "World::name: QP 17 is not a QP of this simulated world");
  }
}

TEST(VerbFaults, AWorldEndingWithAnUnnamedRuleSaysSo) {
  ::testing::internal::CaptureStderr();
  {
    sim::Config c = with_faults("drop nth=2 qp=nobody; cm_drop nth=1 qp=server");
    c.env_faults = false;
    sim::World world(c);
  }
  EXPECT_EQ(::testing::internal::GetCapturedStderr(),
            "verbsim: fault rule 'drop nth=2 qp=nobody' names QP 'nobody', which no QP was given "
            "(World::name): it never fired\n"
            "fault rule 'cm_drop msg=any nth=1 qp=server' names QP 'server', which no QP was "
            "given (World::name): it never fired\n");
}

TEST(VerbFaults, ControlPathVerbsThrowVerbErrorNamingTheVerb) {
  sim::World world(with_faults("create_qp nth=1 errno=ENOMEM; reg_mr nth=1 errno=EFAULT"));
  auto ctx = world.open("sim0");
  auto pd = ctx->alloc_pd();
  auto cq = ctx->create_cq(8);
  QpInitAttr init;
  init.send_cq = init.recv_cq = cq.get();
  init.cap = {4, 4, 1, 1, 0};
  try {
    (void)pd->create_qp(init);
    FAIL() << "create_qp did not fail";
  } catch (const VerbError& e) {
    EXPECT_EQ(e.code().value(), ENOMEM);
    EXPECT_EQ(e.verb(), "ibv_create_qp");
  }
  EXPECT_NE(pd->create_qp(init), nullptr);
  char buf[64];
  try {
    (void)pd->reg_mr(buf, sizeof buf, Access::local_write);
    FAIL() << "reg_mr did not fail";
  } catch (const VerbError& e) {
    EXPECT_EQ(e.code().value(), EFAULT);
    EXPECT_EQ(e.verb(), "ibv_reg_mr");
  }
}

// resize_cq and rereg_mr fail like the other control verbs: VerbError with the rule's errno,
// naming the libibverbs verb, and the CQ or MR as it was.
TEST(VerbFaults, ResizeCqAndReregMrFailWithTheRulesErrnoAndChangeNothing) {
  sim::Config c = with_faults("resize_cq nth=2 errno=ENOMEM; rereg_mr nth=1 errno=EACCES");
  c.profile = sim::Profile::strict;  // rxe has no rereg_mr (EOPNOTSUPP whatever the plan)
  sim::World world(c);
  auto ctx = world.open("sim0");
  auto pd = ctx->alloc_pd();
  auto cq = ctx->create_cq(8);
  cq->resize(16);  // the first call: the rule fires on the 2nd
  const int cqe = cq->cqe();
  const int requested = cq->requested_cqe();
  try {
    cq->resize(64);
    FAIL() << "resize_cq did not fail";
  } catch (const VerbError& e) {
    EXPECT_EQ(e.code().value(), ENOMEM);
    EXPECT_EQ(e.verb(), "ibv_resize_cq");
  }
  EXPECT_EQ(cq->cqe(), cqe);
  EXPECT_EQ(cq->requested_cqe(), requested);
  cq->resize(64);
  EXPECT_EQ(cq->requested_cqe(), 64);

  char buf[64];
  auto mr = pd->reg_mr(buf, sizeof buf, Access::local_write);
  MrChange change;
  change.access = Access::local_write | Access::remote_read;
  try {
    mr->rereg(change);
    FAIL() << "rereg_mr did not fail";
  } catch (const VerbError& e) {
    EXPECT_EQ(e.code().value(), EACCES);
    EXPECT_EQ(e.verb(), "ibv_rereg_mr");
  }
  EXPECT_EQ(mr->access(), Access::local_write);
  mr->rereg(change);
  EXPECT_EQ(mr->access(), Access::local_write | Access::remote_read);
}

// Where the device has no rereg_mr the verb is not supported, and a rule on it never fires.
TEST(VerbFaults, ReregMrOnTheRxeProfileIsUnsupportedWhateverThePlan) {
  sim::Config c = with_faults("rereg_mr every=1 errno=EACCES");
  c.profile = sim::Profile::rxe;
  sim::World world(c);
  auto ctx = world.open("sim0");
  auto pd = ctx->alloc_pd();
  char buf[64];
  auto mr = pd->reg_mr(buf, sizeof buf, Access::local_write);
  try {
    mr->rereg(MrChange{});
    FAIL() << "rereg_mr did not fail";
  } catch (const VerbError& e) {
    EXPECT_EQ(e.code().value(), EOPNOTSUPP);
    EXPECT_EQ(e.verb(), "ibv_rereg_mr");
  }
}

TEST(PacketFaults, RcRecoversFromLostDuplicatedAndReorderedPackets) {
  for (const char* plan : {"drop p=0.2", "duplicate p=0.3", "reorder p=0.5 by=3us",
                           "delay p=0.3 by=2us; drop p=0.1; duplicate p=0.1"}) {
    SCOPED_TRACE(plan);
    SimPair p(with_faults(plan, 7));
    WrChecker checker;  // each WR once, in order, with its opcode, whatever the packets do
    const auto wcs = exchange(p, 16, true, &checker);
    ASSERT_EQ(wcs.size(), 16u) << plan;
    std::uint64_t next_send = 0;
    std::uint64_t next_recv = 100;
    for (const auto& wc : wcs) {
      EXPECT_EQ(wc.status, WcStatus::success) << plan << ": " << to_string(wc.status);
      if (wc.opcode == WcOpcode::send) {
        EXPECT_EQ(wc.wr_id, next_send++) << plan;
      }
    }
    // Receives complete in order on b (its own CQ is shared with its sends: none here).
    const auto recvs = drain(p.world, *p.b.cq);
    ASSERT_EQ(recvs.size(), 16u) << plan;
    for (const auto& wc : recvs) EXPECT_EQ(wc.wr_id, next_recv++) << plan;
    checker.completed(1, recvs);
    EXPECT_TRUE(checker.balanced());
  }
}

// An atomic runs once at the responder however often its request arrives: a duplicate, or a
// retry after its response was lost, is acknowledged without running it again (the value the
// first run returned is already in the requester's buffer; the simulator keeps no saved
// responses to replay). Each FETCH_ADD returns the sum of the ones before it and the word ends
// with the sum of all.
TEST(PacketFaults, AtomicsRunOnceWhateverIsLostOrDuplicated) {
  for (const char* plan : {"duplicate p=0.5", "drop p=0.1", "drop p=0.1; duplicate p=0.3",
                           "reorder p=0.5 by=3us; duplicate p=0.3"}) {
    SCOPED_TRACE(plan);
    PairOptions o;
    o.connect_options.timeout = 8;
    o.connect_options.retry_cnt = 7;
    SimPair p(with_faults(plan, 11), o);
    // The checker follows the same chain: each FETCH_ADD returns what the ones before it left.
    WrChecker checker;
    checker.start_chain(key_a(p), reinterpret_cast<std::byte*>(p.b.buf.data()), 0);
    std::uint64_t expected = 0;
    for (int batch = 0; batch < 4; ++batch) {
      std::vector<Sge> landing;
      for (int i = 0; i < 16; ++i) landing.push_back(p.a.sge(8 * static_cast<std::size_t>(i), 8));
      std::vector<SendWr> wrs(16);
      std::vector<std::uint64_t> before(16);
      for (int i = 0; i < 16; ++i) {
        SendWr& wr = wrs[static_cast<std::size_t>(i)];
        wr.wr_id = static_cast<std::uint64_t>(batch * 16 + i);
        wr.opcode = WrOpcode::atomic_fetch_and_add;
        wr.flags = SendFlags::signaled;
        wr.sg_list = {&landing[static_cast<std::size_t>(i)], 1};
        wr.remote_addr = p.b.mr->address(0);
        wr.rkey = p.b.mr->rkey();
        wr.compare_add = wr.wr_id + 1;
        before[static_cast<std::size_t>(i)] = expected;
        expected += wr.compare_add;
        const std::uint64_t result = landing[static_cast<std::size_t>(i)].addr;
        checker.chain_atomic(key_a(p), wr, reinterpret_cast<const std::byte*>(result));
      }
      ASSERT_EQ(p.a.qp->post_send(wrs).err, 0);
      for (const SendWr& wr : wrs) {
        checker.took_send(key_a(p), wr.wr_id, WcOpcode::fetch_add, true, true);
      }
      const auto wcs = poll_n(p.world, *p.a.cq, 16);
      checker.completed(0, wcs);
      ASSERT_EQ(wcs.size(), 16u);
      for (std::size_t i = 0; i < 16; ++i) {
        EXPECT_EQ(wcs[i].status, WcStatus::success) << to_string(wcs[i].status);
        std::uint64_t returned;
        std::memcpy(&returned, p.a.buf.data() + 8 * i, 8);
        EXPECT_EQ(returned, before[i]) << "wr_id " << wcs[i].wr_id;
      }
    }
    p.world.run_until_idle();  // late duplicates too
    std::uint64_t word;
    std::memcpy(&word, p.b.buf.data(), 8);
    EXPECT_EQ(word, expected);
    EXPECT_TRUE(checker.balanced());  // and the word holds what the chain computed
    EXPECT_EQ(checker.atomics_checked(), 64u);
  }
}

TEST(PacketFaults, DroppingTheLastPacketCostsOneTimeout) {
  PairOptions o;
  o.connect_options.timeout = 10;  // 4.2 ms
  SimPair p(with_faults("drop psn=103"), o);  // a's last message: nothing follows to expose it
  const auto wcs = exchange(p, 4);
  ASSERT_EQ(wcs.size(), 4u);
  for (const auto& wc : wcs) EXPECT_EQ(wc.status, WcStatus::success);
  EXPECT_GE(p.world.now(), ack_timeout_ns(10));
  EXPECT_LT(p.world.now(), 2 * ack_timeout_ns(10));
}

TEST(PacketFaults, DroppingOnePacketInTheMiddleCostsOneSequenceNak) {
  PairOptions o;
  o.connect_options.timeout = 10;  // 4.2 ms
  SimPair p(with_faults("drop psn=102"), o);  // a's third message (a starts at PSN 100)
  const auto wcs = exchange(p, 4);
  ASSERT_EQ(wcs.size(), 4u);
  for (const auto& wc : wcs) EXPECT_EQ(wc.status, WcStatus::success);
  // The next message arrives out of sequence: a sequence NAK makes a go back at once.
  EXPECT_LT(p.world.now(), ack_timeout_ns(10));
  EXPECT_EQ(drain(p.world, *p.b.cq).size(), 4u);
}

TEST(PacketFaults, LosingEveryPacketEndsInRetryExceededThenFlush) {
  PairOptions o;
  o.connect_options.timeout = 12;
  o.connect_options.retry_cnt = 2;
  SimPair p(with_faults("drop p=1 dev=sim0"), o);
  const auto wcs = exchange(p, 3);
  ASSERT_EQ(wcs.size(), 3u);
  EXPECT_EQ(wcs[0].status, WcStatus::retry_exc_err);
  EXPECT_EQ(wcs[1].status, WcStatus::wr_flush_err);
  EXPECT_EQ(wcs[2].status, WcStatus::wr_flush_err);
  EXPECT_EQ(p.a.qp->state(), QpState::err);
  EXPECT_EQ(p.b.qp->state(), QpState::rts);
  // (retry_cnt + 1) local ACK timeouts of 4.096 us * 2^12.
  EXPECT_GE(p.world.now(), 3 * ack_timeout_ns(12));
  EXPECT_LT(p.world.now(), 4 * ack_timeout_ns(12));
}

TEST(TimedFaults, LinkDownRaisesPortErrThenPortActiveAndRcRidesThrough) {
  SimPair p(with_faults("link_down dev=sim1 port=1 at=1us for=2ms"));
  const auto wcs = exchange(p, 5);
  ASSERT_EQ(wcs.size(), 5u);
  for (const auto& wc : wcs) EXPECT_EQ(wc.status, WcStatus::success);
  AsyncEvent ev;
  ASSERT_FALSE(p.b.ctx->get_async_event(ev, Wait::nonblocking));
  EXPECT_EQ(ev.type, AsyncEventType::port_err);
  EXPECT_EQ(ev.port_num, 1);
  ASSERT_FALSE(p.b.ctx->get_async_event(ev, Wait::nonblocking));
  EXPECT_EQ(ev.type, AsyncEventType::port_active);
  EXPECT_EQ(p.a.ctx->get_async_event(ev, Wait::nonblocking).value(), EAGAIN);
  EXPECT_GE(p.world.now(), 2'000'000u);
}

TEST(TimedFaults, QpFatalFlushesAndRaisesQpFatal) {
  SimPair p;  // connected first, so we know b's QP number
  const std::string rule = "qp_fatal qp=" + std::to_string(p.b.qp->qp_num()) + " dev=sim1 at=0";
  sim::World world(with_faults(rule.c_str()));
  testing::PairOptions o;
  testing::Side b = testing::make_side(world, "sim1", o);
  ASSERT_EQ(b.qp->qp_num(), p.b.qp->qp_num());
  modify_to_init(*b.qp);
  const Sge rs = b.sge(0, 64);
  ASSERT_FALSE(b.qp->post_recv(RecvWr{5, {&rs, 1}}).error());
  world.run_until_idle();
  EXPECT_EQ(b.qp->state(), QpState::err);
  AsyncEvent ev;
  ASSERT_FALSE(b.ctx->get_async_event(ev, Wait::nonblocking));
  EXPECT_EQ(ev.type, AsyncEventType::qp_fatal);
  EXPECT_EQ(ev.qp, b.qp.get());
  const auto wcs = drain(world, *b.cq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::wr_flush_err);
}

TEST(TimedFaults, DeviceFatalTakesEveryQpOfTheDeviceDown) {
  SimPair p(with_faults("device_fatal dev=sim0 at=5us"));
  const auto wcs = exchange(p, 2);
  AsyncEvent ev;
  ASSERT_FALSE(p.a.ctx->get_async_event(ev, Wait::nonblocking));
  EXPECT_EQ(ev.type, AsyncEventType::device_fatal);
  EXPECT_EQ(p.a.qp->state(), QpState::err);
  for (const auto& wc : wcs) EXPECT_NE(wc.status, WcStatus::rem_access_err);
}

TEST(ResourceFaults, CqOverrunDepthShrinksTheCqButNotItsReportedSize) {
  sim::Config c = with_faults("cq_overrun depth=2");
  PairOptions o;
  SimPair p(c, o);
  EXPECT_EQ(p.a.cq->cqe(), 127);  // 64 rounded as a real provider would
  (void)exchange(p, 4, /*poll=*/false);  // 4 send completions into a CQ that holds 2
  p.world.run_until_idle();
  AsyncEvent ev;
  ASSERT_FALSE(p.a.ctx->get_async_event(ev, Wait::nonblocking));
  EXPECT_EQ(ev.type, AsyncEventType::cq_err);
  EXPECT_EQ(ev.cq, p.a.cq.get());
}

TEST(Determinism, SameSeedSameDigestUnderRandomFaults) {
  VERBSIM_SKIP_IF_SEED_OVERRIDDEN();
  auto scenario = [](sim::World& world) {
    PairOptions o;
    testing::Side a = testing::make_side(world, "sim0", o);
    testing::Side b = testing::make_side(world, "sim1", o);
    connect(*a.qp, 1, testing::endpoint_of(b, 2));
    connect(*b.qp, 2, testing::endpoint_of(a, 1));
    const Sge rs = b.sge(0, 128);
    const Sge ss = a.sge(0, 100);
    for (int i = 0; i < 10; ++i) {
      ASSERT_FALSE(b.qp->post_recv(RecvWr{1, {&rs, 1}}).error());
      SendWr wr;
      wr.flags = SendFlags::signaled;
      wr.sg_list = {&ss, 1};
      ASSERT_FALSE(a.qp->post_send(wr).error());
    }
    (void)poll_n(world, *a.cq, 20);
  };
  const sim::Config c = with_faults("drop p=0.2; reorder p=0.3 by=4us; duplicate p=0.1", 99);
  const sim::ScenarioResult r = sim::run_scenario(c, scenario, /*check=*/true);
  EXPECT_TRUE(r.deterministic) << r.message;
  EXPECT_EQ(r.seed, 99u);
  const sim::ScenarioResult other = sim::run_scenario(with_faults("drop p=0.2; reorder p=0.3 by=4us; duplicate p=0.1", 100), scenario);
  EXPECT_NE(other.digest, r.digest);
}

}  // namespace
}  // namespace verbsim
