// The polling strategies (verbsim/polling.hpp) on the simulator: each one alone and several
// sharing one CQ and one channel as fibers, under delayed packets, injected EAGAIN from the
// channel and CQ overrun; every message is delivered exactly once and the statistics add up.
#include <gtest/gtest.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <chrono>
#include <cstdint>
#include <memory>
#include <range/v3/algorithm/count.hpp>
#include <range/v3/algorithm/count_if.hpp>
#include <stop_token>
#include <string>
#include <vector>

#include "../support/sim_pair.hpp"
#include "verbsim/polling.hpp"
#include "verbsim/sim/simulation.hpp"
#include "verbsim/sim/ticker.hpp"

namespace verbsim {
namespace {

using namespace std::chrono_literals;
using testing::PairOptions;
using testing::Side;

constexpr std::uint32_t kSentinel = 0xffffffffu;  // imm_data of a wake-up message
constexpr std::uint32_t kExtraRecvs = 128;        // receives posted for wake-up messages

// Pairs of QPs without inline data (limits differ per profile).
PairOptions pair_options() {
  PairOptions o;
  o.cap = {16, 16, 1, 1, 0};
  return o;
}

// What a receiving fiber runs: a plain strategy, or batch draining over event waits.
enum class Kind { busy, event, hybrid, adaptive, batch };

const char* name(Kind k) {
  switch (k) {
    case Kind::busy: return "busy";
    case Kind::event: return "event";
    case Kind::hybrid: return "hybrid";
    case Kind::adaptive: return "adaptive";
    case Kind::batch: return "batch";
  }
  return "?";
}

// Which CQ the pollers take completions from: the receiver's receive CQ (numbered SENDs with
// immediate data), or the sender's send CQ (numbered signaled RDMA WRITEs: no receive
// completions at all, so that a CQ overrun only ever drops send completions, which rxe survives).
enum class Watch { receives, sends };

struct Spec {
  std::uint64_t seed = 1;
  sim::Profile profile = sim::Profile::strict;
  std::string faults;
  Watch watch = Watch::receives;
  std::vector<Kind> pollers{Kind::event};
  std::uint32_t messages = 64;
  // Sender: `burst` messages back to back, then `pause` of virtual time.
  std::uint32_t burst = 8;
  std::chrono::nanoseconds pause = 30us;
  std::uint64_t idle_ns = 10'000;      // hybrid
  AdaptiveIdle adaptive{.min_idle_ns = 1'000, .max_idle_ns = 50'000, .gap_factor = 4};
  std::size_t max_per_wake = 3;        // batch
  std::size_t wc_batch = 4;            // completions asked for per call
  std::chrono::nanoseconds work = 0ns;  // receiver's processing time per batch
  // Hosts that keep virtual time moving in steps of tick/8 while a poller spins (see
  // verbsim/sim/ticker.hpp); 0: none.
  std::chrono::nanoseconds tick = 1us;
  int cqe = 256;
};

struct Outcome {
  std::vector<int> seen;       // deliveries per message number
  std::uint64_t sentinels = 0;
  std::uint64_t failed = 0;    // completions with an error status
  std::uint64_t cq_errs = 0;   // CQ_ERR events on the watched CQ's device
  std::uint64_t lost_to_overrun = 0;
  PollStats total;
  std::vector<PollStats> per_poller;
  std::vector<std::size_t> batch_sizes;
};

// The sender's QP is on sim0, the receiver's on sim1; the watched CQ reports to a channel.
struct Rig {
  explicit Rig(const Spec& s) : world(config(s)), watch(s.watch) {
    const PairOptions o = pair_options();
    a = testing::make_side(world, "sim0", o);
    b = testing::make_side(world, "sim1", o);
    Side& owner = watch == Watch::receives ? b : a;
    ch = owner.ctx->create_comp_channel();
    watched = owner.ctx->create_cq(s.cqe, ch.get());
    QpInitAttr init;
    if (watch == Watch::receives) {
      init.send_cq = b.cq.get();
      init.recv_cq = watched.get();
      init.cap = {4, s.messages + kExtraRecvs, 1, 1, 0};
      own_qp = b.pd->create_qp(init);
      sqp = a.qp.get();
      rqp = own_qp.get();
    } else {
      init.send_cq = watched.get();
      init.recv_cq = a.cq.get();
      init.cap = {32, 1, 1, 1, 0};
      own_qp = a.pd->create_qp(init);
      sqp = own_qp.get();
      rqp = b.qp.get();
    }
    connect(*sqp, 1, {b.ctx->query_gid(1, 1), rqp->qp_num(), 2});
    connect(*rqp, 2, {a.ctx->query_gid(1, 1), sqp->qp_num(), 1});
    if (watch == Watch::receives) {
      const Sge rs = b.sge(0, 64);
      for (std::uint32_t i = 0; i < s.messages + kExtraRecvs; ++i) {
        EXPECT_FALSE(rqp->post_recv(RecvWr{i, {&rs, 1}}).error());
      }
    }
  }
  ~Rig() { own_qp.reset(); }

  static sim::Config config(const Spec& s) {
    sim::Config c;
    c.seed = s.seed;
    c.profile = s.profile;
    c.faults = sim::FaultPlan::parse(s.faults);
    return c;
  }

  Context& watched_ctx() const { return watch == Watch::receives ? *b.ctx : *a.ctx; }
  std::uint32_t id_of(const WorkCompletion& wc) const {
    return watch == Watch::receives ? wc.imm_data : static_cast<std::uint32_t>(wc.wr_id);
  }

  // Posts message `id`, treating "queue full" as back-pressure. A SEND carries it as immediate
  // data (every 8th signaled: hardware profiles free send slots only when a completion is
  // polled); a signaled RDMA WRITE as its wr_id.
  void send(std::uint32_t id) {
    const Sge ss = a.sge(0, 8);
    SendWr wr;
    wr.wr_id = id;
    wr.sg_list = {&ss, 1};
    if (watch == Watch::receives) {
      wr.opcode = WrOpcode::send_with_imm;
      wr.imm_data = id;
      wr.flags = ++sends % 8 == 0 ? SendFlags::signaled : SendFlags::none;
    } else {
      wr.opcode = WrOpcode::rdma_write;
      wr.flags = SendFlags::signaled;
      wr.remote_addr = b.mr->address(0);
      wr.rkey = b.mr->rkey();
    }
    for (;;) {
      if (watch == Watch::receives) {
        WorkCompletion wc[8];
        (void)a.cq->poll(wc);
      }
      const PostResult r = sqp->post_send(wr);
      if (!r.error()) return;
      ASSERT_TRUE(r.error() == Condition::queue_full) << r.error().message() << " " << r.reason;
      sim::sleep_for(world, 1us);
    }
  }

  sim::World world;
  Watch watch;
  Side a, b;
  std::unique_ptr<CompletionChannel> ch;
  std::unique_ptr<CompletionQueue> watched;
  std::unique_ptr<QueuePair> own_qp;
  QueuePair* sqp = nullptr;
  QueuePair* rqp = nullptr;
  std::uint64_t sends = 0;
};

// One run: the sender fiber sends `messages` numbered messages in bursts; each poller fiber
// takes completions with its strategy until the sender, once every message is accounted for
// (delivered, or dropped by an overrun with its CQ_ERR event), asks them to stop and wakes the
// sleeping ones with sentinel messages.
Outcome run(const Spec& s) {
  Rig rig(s);
  Outcome out;
  out.seen.assign(s.messages, 0);
  std::stop_source stop;
  const Clock& clock = rig.watched_ctx().clock();
  CompletionQueue& cq = *rig.watched;
  std::vector<std::unique_ptr<CompletionPoller>> pollers;
  std::vector<std::unique_ptr<BatchDrainer>> drainers;
  for (const Kind k : s.pollers) {
    switch (k) {
      case Kind::busy: pollers.push_back(std::make_unique<BusyPoller>(cq, clock)); break;
      case Kind::hybrid:
        pollers.push_back(std::make_unique<HybridPoller>(cq, *rig.ch, clock, s.idle_ns));
        break;
      case Kind::adaptive:
        pollers.push_back(std::make_unique<AdaptivePoller>(cq, *rig.ch, clock, s.adaptive));
        break;
      case Kind::event:
      case Kind::batch: pollers.push_back(std::make_unique<EventPoller>(cq, *rig.ch, clock)); break;
    }
    drainers.push_back(k == Kind::batch ? std::make_unique<BatchDrainer>(*pollers.back(), s.max_per_wake)
                                        : nullptr);
  }
  std::uint64_t delivered = 0;
  int running = static_cast<int>(pollers.size());
  bool ticking = s.tick.count() > 0;

  auto handle = [&](std::span<const WorkCompletion> wcs) {
    out.batch_sizes.push_back(wcs.size());
    for (const WorkCompletion& wc : wcs) {
      if (wc.status != WcStatus::success) {
        ++out.failed;
        continue;
      }
      const std::uint32_t id = rig.id_of(wc);
      if (id == kSentinel) {
        ++out.sentinels;
      } else if (id < s.messages) {
        ++out.seen[id];
        ++delivered;
      } else {
        ADD_FAILURE() << "unknown message " << id;
      }
    }
  };

  sim::Simulation sim(rig.world);
  for (std::size_t i = 0; i < pollers.size(); ++i) {
    sim.spawn(std::string(name(s.pollers[i])) + "-" + std::to_string(i), [&, i] {
      std::vector<WorkCompletion> buf(s.wc_batch);
      for (;;) {
        PollResult r;
        if (drainers[i]) {
          r = drainers[i]->drain(buf, handle, stop.get_token());
          EXPECT_LE(r.count, s.max_per_wake);
        } else {
          r = pollers[i]->next(buf, stop.get_token());
          if (!r.error()) handle({buf.data(), r.count});
        }
        if (r.error().value() == ECANCELED) break;
        if (r.error() == Condition::would_block) continue;  // an injected poll_cq EAGAIN
        if (r.error()) {
          ADD_FAILURE() << pollers[i]->name() << ": " << r.error().message();
          break;
        }
        if (s.work.count() > 0) sim::sleep_for(rig.world, s.work);
        if (stop.stop_requested()) break;
      }
      // A poller that leaves after taking an event (which disarmed the CQ) re-arms it, so that
      // the others asleep on the channel can still be woken.
      EXPECT_FALSE(cq.req_notify(false));
      --running;
    });
  }
  auto sender = [&] {
    for (std::uint32_t i = 0; i < s.messages; ++i) {
      rig.send(i);
      if ((i + 1) % s.burst == 0) sim::sleep_for(rig.world, s.pause);
    }
    // Wait until every message is accounted for: delivered, or lost to a CQ overrun (rxe raises
    // one CQ_ERR per lost completion).
    // A reordered packet can cost a local ACK timeout (67 ms) before the last one is acknowledged.
    const std::uint64_t deadline = rig.world.now() + 2'000'000'000ull;
    for (int spins = 0; delivered + out.cq_errs < s.messages; ++spins) {
      AsyncEvent ev;
      while (!rig.watched_ctx().get_async_event(ev, Wait::nonblocking)) {
        if (ev.type == AsyncEventType::cq_err) ++out.cq_errs;
      }
      sim::sleep_for(rig.world, spins < 1000 ? 1us : 100us);
      ASSERT_LT(rig.world.now(), deadline)
          << "messages were lost: delivered " << delivered << ", CQ_ERR " << out.cq_errs;
    }
    stop.request_stop();
    // Pollers asleep on the channel see the stop only when something wakes them.
    for (std::uint32_t n = 0; running > 0; ++n) {
      ASSERT_LT(n, kExtraRecvs) << "pollers do not stop";
      rig.send(kSentinel);
      sim::sleep_for(rig.world, 5us);
    }
  };
  sim.spawn("sender", [&] {
    sender();
    stop.request_stop();
    ticking = false;
  });
  if (ticking) sim::spawn_tickers(sim, s.tick, ticking);
  sim.run();
  for (const auto& p : pollers) {
    out.per_poller.push_back(p->stats());
    out.total += p->stats();
  }
  out.lost_to_overrun = rig.world.accounting().lost_to_overrun;
  return out;
}

// Every message delivered exactly once, and statistics that add up.
void expect_exactly_once(const Outcome& o, const Spec& s) {
  EXPECT_EQ(ranges::count(o.seen, 1), static_cast<std::ptrdiff_t>(s.messages))
      << "lost: " << ranges::count(o.seen, 0)
      << ", duplicated: " << ranges::count_if(o.seen, [](int n) { return n > 1; });
  EXPECT_EQ(o.failed, 0u);
  EXPECT_EQ(o.cq_errs, 0u);
  EXPECT_EQ(o.total.completions, s.messages + o.sentinels);
}

void expect_sane(const Outcome& o) {
  for (const PollStats& st : o.per_poller) {
    EXPECT_LE(st.empty_polls, st.polls);
    EXPECT_LE(st.completions, (st.polls - st.empty_polls) * 64);
    EXPECT_LE(st.wakeups, st.sleeps);
    EXPECT_LE(st.empty_wakeups, st.wakeups);
    EXPECT_LE(st.channel_retries, st.sleeps);
  }
}

// ---------------------------------------------------------------------------------------------
// Each strategy alone, under each fault

struct Case {
  Kind kind;
  const char* faults;
  sim::Profile profile;
};

class EachStrategy : public ::testing::TestWithParam<Case> {};

TEST_P(EachStrategy, DeliversEveryMessageOnceUnderFaults) {
  const Case c = GetParam();
  Spec s;
  s.pollers = {c.kind};
  s.faults = c.faults;
  s.profile = c.profile;
  s.messages = 96;
  const Outcome o = run(s);
  expect_exactly_once(o, s);
  expect_sane(o);
  const PollStats& st = o.total;
  switch (c.kind) {
    case Kind::busy:
      EXPECT_EQ(st.sleeps, 0u);
      EXPECT_EQ(st.wakeups, 0u);
      EXPECT_EQ(st.sleeping_ns, 0u);
      EXPECT_GT(st.empty_polls, 0u);
      break;
    case Kind::event:
    case Kind::batch:
      // One sleep per pause at least (12 bursts), and never a poll loop while idle.
      EXPECT_GE(st.sleeps, 12u);
      EXPECT_GE(st.wakeups, 12u);
      EXPECT_LE(st.wakeups - st.empty_wakeups, st.completions);
      break;
    case Kind::hybrid:
      // Pauses (30 us) are longer than the idle period (10 us): it sleeps in each (a sleep cut
      // short by an injected EAGAIN may end with the burst found by a poll, not an event).
      EXPECT_GE(st.sleeps, 12u);
      EXPECT_GE(st.wakeups + st.channel_retries, 12u);
      break;
    case Kind::adaptive:
      // Its window is 4 gaps within a burst, so it sleeps in each pause, unless delayed packets
      // spread the bursts out: then it learns longer gaps and may poll through a pause, as it
      // should, but it still sleeps.
      if (std::string(c.faults).find("delay") == std::string::npos) {
        EXPECT_GE(st.sleeps, 12u);
        EXPECT_GE(st.wakeups + st.channel_retries, 12u);
      } else {
        EXPECT_GE(st.sleeps, 1u);
      }
      break;
  }
  if (c.kind == Kind::batch) {
    for (std::size_t n : o.batch_sizes) EXPECT_LE(n, s.wc_batch);
  }
  if (std::string(c.faults).find("get_cq_event") != std::string::npos && c.kind != Kind::busy) {
    EXPECT_GT(st.channel_retries, 0u) << "the injected EAGAIN never reached the poller";
  }
  if (std::string(c.faults).find("delay") != std::string::npos) {
    EXPECT_GT(o.total.polling_ns + o.total.sleeping_ns, 0u);
  }
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const Kind k : {Kind::busy, Kind::event, Kind::hybrid, Kind::adaptive, Kind::batch}) {
    for (const char* f : {"", "delay p=0.3 by=20us", "get_cq_event every=3 errno=EAGAIN",
                          "delay p=0.2 by=5us; get_cq_event every=3 errno=EAGAIN; poll_cq p=0.05 errno=EAGAIN"}) {
      out.push_back({k, f, sim::Profile::strict});
    }
  }
  return out;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string n = name(info.param.kind);
  const std::string f = info.param.faults;
  if (f.empty()) return n + "_no_faults";
  if (f.find("poll_cq") != std::string::npos) return n + "_mixed";
  if (f.find("delay") != std::string::npos) return n + "_delayed";
  return n + "_channel_eagain";
}

INSTANTIATE_TEST_SUITE_P(Faults, EachStrategy, ::testing::ValuesIn(cases()), case_name);

// ---------------------------------------------------------------------------------------------
// CQ overrun (rxe: each lost completion is dropped with one CQ_ERR, the CQ carries on)

class Overrun : public ::testing::TestWithParam<Kind> {};

std::string kind_name(const ::testing::TestParamInfo<Kind>& p) { return name(p.param); }

TEST_P(Overrun, EveryMessageIsDeliveredOnceOrReportedLost) {
  Spec s;
  s.profile = sim::Profile::rxe;
  s.faults = "cq_overrun depth=4";
  s.watch = Watch::sends;  // rxe survives an overrun of send completions, not of receives
  s.pollers = {GetParam()};
  s.messages = 64;
  s.burst = 16;         // 16 back to back into a CQ that holds 4 ...
  s.wc_batch = 1;       // ... taken one at a time,
  s.work = 2us;         // with 2 us of work after each
  const Outcome o = run(s);
  EXPECT_EQ(ranges::count_if(o.seen, [](int n) { return n > 1; }), 0) << "duplicated";
  const auto delivered = ranges::count(o.seen, 1);
  EXPECT_GT(o.cq_errs, 0u) << "the CQ never overran";
  EXPECT_EQ(static_cast<std::uint64_t>(delivered) + o.cq_errs, s.messages);
  EXPECT_EQ(o.lost_to_overrun, o.cq_errs);
  EXPECT_EQ(o.failed, 0u);
  expect_sane(o);
}

INSTANTIATE_TEST_SUITE_P(Strategies, Overrun,
                         ::testing::Values(Kind::busy, Kind::event, Kind::hybrid, Kind::adaptive,
                                           Kind::batch),
                         kind_name);

// ---------------------------------------------------------------------------------------------
// Several fibers on one CQ and one channel

TEST(SharedCq, SeveralPollersNeverLoseOrDuplicateAndMeetTheEmptyWakeupRace) {
  PollStats all;
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Spec s;
    s.seed = seed;
    s.pollers = {Kind::event, Kind::event, Kind::busy, Kind::hybrid, Kind::adaptive, Kind::batch};
    s.messages = 120;
    s.burst = 5;
    s.pause = 15us;
    s.tick = 500ns;
    const Outcome o = run(s);
    expect_exactly_once(o, s);
    expect_sane(o);
    all += o.total;
  }
  // An event poller woken for a completion that another poller took first is normal.
  EXPECT_GT(all.empty_wakeups, 0u) << "no seed reproduced the race";
  EXPECT_GT(all.wakeups, 0u);
}

TEST(SharedCq, EventPollersOnlyUnderInjectedChannelEagainAndDelays) {
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Spec s;
    s.seed = seed;
    s.faults = "get_cq_event p=0.3 errno=EAGAIN; delay p=0.2 by=10us";
    s.pollers = {Kind::event, Kind::event, Kind::event, Kind::hybrid};
    s.messages = 80;
    const Outcome o = run(s);
    expect_exactly_once(o, s);
    expect_sane(o);
  }
}

// ---------------------------------------------------------------------------------------------
// Behaviour of each strategy

TEST(Hybrid, StaysPollingWhileGapsAreShorterThanTheIdlePeriod) {
  Spec s;
  s.pollers = {Kind::hybrid};
  s.messages = 64;
  s.burst = 1;
  s.pause = 3us;
  s.idle_ns = 50'000;
  s.tick = 250ns;
  const Outcome o = run(s);
  expect_exactly_once(o, s);
  // It may sleep before the first message and once the sender stops, never in between.
  EXPECT_LE(o.total.sleeps, 3u);
  EXPECT_GT(o.total.empty_polls, 64u);
}

TEST(Hybrid, SleepsInEveryGapLongerThanTheIdlePeriodAfterPollingForIt) {
  Spec s;
  s.pollers = {Kind::hybrid};
  s.messages = 32;
  s.burst = 1;
  s.pause = 100us;
  s.idle_ns = 20'000;
  s.tick = 250ns;
  const Outcome o = run(s);
  expect_exactly_once(o, s);
  EXPECT_GE(o.total.sleeps, 31u);
  EXPECT_GE(o.total.wakeups, 31u);
  // Each gap: about 20 us of polling (the idle period), the rest asleep.
  EXPECT_GT(o.total.polling_ns, 31u * 20'000u);
  EXPECT_LT(o.total.polling_ns, 33u * 30'000u);
  EXPECT_GT(o.total.sleeping_ns, 31u * 60'000u);
}

// Bursts of back-to-back messages with long pauses: a fixed idle period polls that long into
// every pause; the adaptive poller learns the short gaps within a burst and sleeps a few gaps
// after it, at the same number of sleeps.
TEST(Adaptive, SleepsSoonAfterABurstWhereAFixedPeriodPollsOn) {
  Spec s;
  s.messages = 160;
  s.burst = 8;
  s.pause = 200us;
  s.idle_ns = 50'000;
  s.adaptive.max_idle_ns = 50'000;
  s.tick = 250ns;
  s.pollers = {Kind::hybrid};
  const Outcome fixed = run(s);
  s.pollers = {Kind::adaptive};
  const Outcome adaptive = run(s);
  expect_exactly_once(fixed, s);
  expect_exactly_once(adaptive, s);
  expect_sane(adaptive);
  EXPECT_GE(adaptive.total.sleeps, 19u) << "it sleeps in every pause";
  EXPECT_LE(adaptive.total.sleeps, fixed.total.sleeps + 2);
  EXPECT_LT(adaptive.total.polling_ns * 4, fixed.total.polling_ns)
      << "adaptive " << adaptive.total.to_string() << "\nfixed " << fixed.total.to_string();
}

// Gaps a little longer than a fixed idle period: the fixed poller sleeps (and pays a wake-up)
// in every one; the adaptive poller's window grows to cover them and it keeps polling.
TEST(Adaptive, GrowsItsWindowOverGapsAFixedPeriodSleepsThrough) {
  Spec s;
  s.messages = 64;
  s.burst = 1;
  s.pause = 15us;
  s.idle_ns = 10'000;
  s.adaptive = {.min_idle_ns = 1'000, .max_idle_ns = 100'000, .gap_factor = 4};
  s.tick = 250ns;
  s.pollers = {Kind::hybrid};
  const Outcome fixed = run(s);
  s.pollers = {Kind::adaptive};
  const Outcome adaptive = run(s);
  expect_exactly_once(fixed, s);
  expect_exactly_once(adaptive, s);
  EXPECT_GE(fixed.total.sleeps, 60u);
  EXPECT_LE(adaptive.total.sleeps, 3u) << adaptive.total.to_string();
}

// A message now and then, each after a pause longer than the longest window: polling never
// catches one, so the fixed poller wastes its whole idle period every time and the adaptive
// one learns to sleep at once.
TEST(Adaptive, SleepsAtOnceWhenOnlyPausesCome) {
  Spec s;
  s.messages = 40;
  s.burst = 1;
  s.pause = 300us;
  s.idle_ns = 100'000;
  s.adaptive = {.min_idle_ns = 2'000, .max_idle_ns = 100'000, .gap_factor = 4};
  s.tick = 250ns;
  s.pollers = {Kind::hybrid};
  const Outcome fixed = run(s);
  s.pollers = {Kind::adaptive};
  const Outcome adaptive = run(s);
  expect_exactly_once(fixed, s);
  expect_exactly_once(adaptive, s);
  EXPECT_GE(fixed.total.polling_ns, 39u * 100'000u) << "a whole idle period per message";
  EXPECT_LT(adaptive.total.polling_ns * 10, fixed.total.polling_ns)
      << "adaptive " << adaptive.total.to_string() << "\nfixed " << fixed.total.to_string();
}

TEST(Adaptive, WindowStaysWithinItsLimits) {
  testing::SimPair p({}, pair_options());
  auto ch = p.a.ctx->create_comp_channel();
  auto cq = p.a.ctx->create_cq(4, ch.get());
  AdaptivePoller fresh(*cq, *ch, p.a.ctx->clock(), {.min_idle_ns = 3'000, .max_idle_ns = 40'000});
  EXPECT_EQ(fresh.idle_ns(), 40'000u) << "nothing learned: the longest";
  EXPECT_EQ(fresh.typical_gap_ns(), 0u);
  EXPECT_EQ(fresh.name(), "adaptive");
}

TEST(Busy, PollsEvenWhenNothingComesAndNeverSleeps) {
  Spec s;
  s.pollers = {Kind::busy};
  s.messages = 16;
  s.burst = 1;
  s.pause = 20us;
  s.tick = 250ns;
  const Outcome o = run(s);
  expect_exactly_once(o, s);
  EXPECT_EQ(o.total.sleeps, 0u);
  // 16 gaps of 20 us with a poll per 250 ns tick.
  EXPECT_GT(o.total.empty_polls, 16u * 40u);
  EXPECT_GT(o.total.polling_ns, 16u * 19'000u);
}

TEST(Batch, HandsOverAtMostMaxPerWakeAndTakesTheRestNextTime) {
  Spec s;
  s.pollers = {Kind::batch};
  s.messages = 60;
  s.burst = 20;
  s.pause = 50us;
  s.max_per_wake = 7;
  s.wc_batch = 3;
  s.work = 5us;  // the whole burst is in the CQ by the time the drainer returns
  const Outcome o = run(s);
  expect_exactly_once(o, s);
  for (std::size_t n : o.batch_sizes) EXPECT_LE(n, 3u);
  // 20 per burst at most 7 per drain: 3 drains per burst, the later ones without sleeping.
  EXPECT_GE(o.batch_sizes.size(), 3u * 7u);
  EXPECT_LT(o.total.sleeps, o.batch_sizes.size());
}

TEST(Event, SolicitedOnlyWakesForTheSolicitedSend) {
  sim::World world;
  const PairOptions po = pair_options();
  Side a = testing::make_side(world, "sim0", po);
  Side b = testing::make_side(world, "sim1", po);
  auto ch = b.ctx->create_comp_channel();
  auto rcq = b.ctx->create_cq(16, ch.get());
  QpInitAttr init;
  init.send_cq = b.cq.get();
  init.recv_cq = rcq.get();
  init.cap = {4, 8, 1, 1, 0};
  auto rqp = b.pd->create_qp(init);
  connect(*a.qp, 1, {b.ctx->query_gid(1, 1), rqp->qp_num(), 2});
  connect(*rqp, 2, testing::endpoint_of(a, 1));
  const Sge rs = b.sge(0, 64);
  for (std::uint64_t i = 0; i < 4; ++i) ASSERT_FALSE(rqp->post_recv(RecvWr{i, {&rs, 1}}).error());
  EventPoller poller(*rcq, *ch, b.ctx->clock(), /*solicited_only=*/true);
  std::uint64_t woke_at = 0;
  std::uint32_t got = 0;
  sim::Simulation sim(world);
  sim.spawn("server", [&] {
    WorkCompletion wc[8];
    const PollResult r = poller.next(wc);
    ASSERT_FALSE(r.error());
    woke_at = world.now();
    got = r.count;
  });
  bool ticking = true;
  sim.spawn("client", [&] {
    const Sge ss = a.sge(0, 8);
    SendWr wr;
    wr.sg_list = {&ss, 1};
    sim::sleep_for(world, 10us);
    for (int i = 0; i < 3; ++i) ASSERT_FALSE(a.qp->post_send(wr).error());  // unsolicited
    sim::sleep_for(world, 50us);
    wr.flags = SendFlags::solicited;
    ASSERT_FALSE(a.qp->post_send(wr).error());
    sim::sleep_for(world, 10us);
    ticking = false;
  });
  // Without them the server's first poll could jump to the client's first SEND.
  sim::spawn_tickers(sim, 1us, ticking);
  sim.run();
  EXPECT_EQ(got, 4u) << "the unsolicited completions are in the CQ when the solicited one wakes it";
  EXPECT_GE(woke_at, 60'000u) << "an unsolicited SEND woke a solicited-only waiter";
  EXPECT_EQ(poller.stats().sleeps, 1u);
  EXPECT_EQ(poller.stats().wakeups, 1u);
  rqp.reset();
}

TEST(Event, ReturnsEdeadlkWhenNothingCanEverComplete) {
  testing::SimPair p({}, pair_options());
  auto ch = p.b.ctx->create_comp_channel();
  auto cq = p.b.ctx->create_cq(4, ch.get());
  EventPoller poller(*cq, *ch, p.b.ctx->clock());
  WorkCompletion wc[1];
  const PollResult r = poller.next(wc);
  EXPECT_EQ(r.error().value(), EDEADLK);
  EXPECT_EQ(poller.stats().sleeps, 1u);
  EXPECT_EQ(poller.stats().polls, 2u) << "poll, arm, poll once more, sleep";
}

TEST(Busy, StopsWhenAsked) {
  testing::SimPair p({}, pair_options());
  BusyPoller poller(*p.a.cq, p.a.ctx->clock());
  std::stop_source stop;
  stop.request_stop();
  WorkCompletion wc[1];
  const PollResult r = poller.next(wc, stop.get_token());
  EXPECT_EQ(r.error().value(), ECANCELED);
  EXPECT_EQ(r.count, 0u);
  EXPECT_EQ(poller.stats().polls, 1u);
}

TEST(Choose, ByNameWithAChannelWhereOneIsNeeded) {
  testing::SimPair p({}, pair_options());
  EXPECT_EQ(parse_poll_strategy("hybrid"), PollStrategy::hybrid);
  EXPECT_THROW((void)parse_poll_strategy("spin"), std::invalid_argument);
  EXPECT_THROW((void)make_poller(PollStrategy::event, *p.a.cq, nullptr, p.a.ctx->clock()),
               std::invalid_argument);
  EXPECT_EQ(make_poller(PollStrategy::busy, *p.a.cq, nullptr, p.a.ctx->clock())->name(), "busy");
  auto ch = p.a.ctx->create_comp_channel();
  auto cq = p.a.ctx->create_cq(4, ch.get());
  EXPECT_EQ(make_poller(PollStrategy::hybrid, *cq, ch.get(), p.a.ctx->clock())->name(), "hybrid");
  EXPECT_EQ(parse_poll_strategy("adaptive"), PollStrategy::adaptive);
  auto adaptive = make_poller(PollStrategy::adaptive, *cq, ch.get(), p.a.ctx->clock(), 30'000);
  EXPECT_EQ(adaptive->name(), "adaptive");
  EXPECT_EQ(static_cast<AdaptivePoller&>(*adaptive).limits().max_idle_ns, 30'000u);
}

// Arming a CQ without a channel succeeds (as on rxe and mlx5), so a poller given a channel that
// is not its CQ's refuses to sleep on it instead of waiting for an event that cannot come.
TEST(Choose, AChannelThatIsNotTheCqsIsEinvalWhenThePollerWouldSleep) {
  testing::SimPair p({}, pair_options());
  auto ch = p.a.ctx->create_comp_channel();
  auto poller = make_poller(PollStrategy::event, *p.a.cq, ch.get(), p.a.ctx->clock());
  WorkCompletion wc[1];
  const PollResult r = poller->next(wc);
  EXPECT_EQ(r.error().value(), EINVAL);
  EXPECT_EQ(r.count, 0u);
}

TEST(Clock, IsTheWorldsVirtualTime) {
  testing::SimPair p({}, pair_options());
  const std::uint64_t t0 = p.a.ctx->clock().now_ns();
  sim::sleep_for(p.world, 7us);
  EXPECT_EQ(p.a.ctx->clock().now_ns() - t0, 7'000u);
  EXPECT_EQ(p.b.ctx->clock().now_ns(), p.world.now());
}

// ---------------------------------------------------------------------------------------------
// The application's own epoll loop (docs/POLLING.md): a real epoll fd watching the channel's fd,
// a short timeout, and ChannelPoller::try_next, which never blocks and on the simulator runs
// the world's next instants.

struct EpollLoop {
  std::uint64_t turns = 0;
  std::uint64_t readable = 0;  // epoll_wait reported the channel's fd
  std::uint64_t timeouts = 0;
};

// Takes `n` completions through `poller` in an epoll loop; fails after `max_turns`.
EpollLoop epoll_receive(ChannelPoller& poller, std::uint32_t n, std::vector<int>& seen,
                        std::uint64_t max_turns) {
  EpollLoop loop;
  const int ep = ::epoll_create1(EPOLL_CLOEXEC);
  EXPECT_GE(ep, 0);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = poller.channel().fd();
  EXPECT_EQ(::epoll_ctl(ep, EPOLL_CTL_ADD, poller.channel().fd(), &ev), 0);
  std::uint32_t got = 0;
  WorkCompletion wc[4];
  while (got < n && loop.turns < max_turns) {
    ++loop.turns;
    const PollResult r = poller.try_next(wc);
    if (r.count > 0) {
      for (const WorkCompletion& c : std::span(wc, r.count)) ++seen.at(c.imm_data);
      got += r.count;
      continue;
    }
    if (r.error() != Condition::would_block) {
      ADD_FAILURE() << r.error().message();
      break;
    }
    epoll_event events[2];
    const int k = ::epoll_wait(ep, events, 2, /*timeout_ms=*/1);
    if (k > 0) ++loop.readable;
    if (k == 0) ++loop.timeouts;
  }
  ::close(ep);
  EXPECT_EQ(got, n) << "after " << loop.turns << " turns";
  return loop;
}

TEST(EpollLoop, WorksOnTheSimulatorWithoutFibers) {
  for (const char* faults : {"", "get_cq_event p=0.3 errno=EAGAIN"}) {
    SCOPED_TRACE(faults);
    Spec s;
    s.faults = faults;
    s.messages = 12;  // fewer than the send queue holds: nothing has moved yet
    Rig rig(s);
    EventPoller poller(*rig.watched, *rig.ch, rig.b.ctx->clock());
    // One thread, no fibers: the sends are posted first, the loop then runs the world. Nothing
    // else moves it, so the fd is never readable while the loop sleeps in epoll_wait: the
    // short timeout is what keeps the loop turning.
    for (std::uint32_t i = 0; i < s.messages; ++i) rig.send(i);
    std::vector<int> seen(s.messages, 0);
    const EpollLoop loop = epoll_receive(poller, s.messages, seen, 10'000);
    EXPECT_EQ(ranges::count(seen, 1), static_cast<std::ptrdiff_t>(s.messages));
    EXPECT_LT(loop.turns, 200u);
    rig.world.run_until_idle();
  }
}

TEST(EpollLoop, WorksInAFiberNextToASenderFiber) {
  Spec s;
  s.messages = 30;
  s.faults = "get_cq_event p=0.3 errno=EAGAIN; delay p=0.2 by=10us";
  Rig rig(s);
  EventPoller poller(*rig.watched, *rig.ch, rig.b.ctx->clock());
  std::vector<int> seen(s.messages, 0);
  EpollLoop loop;
  sim::Simulation sim(rig.world);
  sim.spawn("server", [&] { loop = epoll_receive(poller, s.messages, seen, 100'000); });
  sim.spawn("client", [&] {
    for (std::uint32_t i = 0; i < s.messages; ++i) {
      rig.send(i);
      sim::sleep_for(rig.world, 20us);
    }
  });
  sim.run();
  EXPECT_EQ(ranges::count(seen, 1), static_cast<std::ptrdiff_t>(s.messages));
  EXPECT_GT(loop.readable, 0u);
}

}  // namespace
}  // namespace verbsim
