// Hosts as fibers over one simulated world: blocking event waits, seeded interleavings,
// deadlock detection, and application logic (back-pressure, the lost-wakeup race, recovery
// from a fatal QP error) driven through the faults that exercise it.
#include <gtest/gtest.h>

#include <boost/fiber/operations.hpp>

#include <cerrno>
#include <cstdio>
#include <set>
#include <system_error>
#include <cstring>
#include <string>
#include <vector>

#include "../support/sim_pair.hpp"
#include "verbsim/sim/simulation.hpp"

namespace verbsim {
namespace {

using testing::PairOptions;
using testing::Side;
using testing::SimPair;

SendWr signaled_send(const Sge& sge, std::uint64_t id) {
  SendWr wr;
  wr.wr_id = id;
  wr.flags = SendFlags::signaled;
  wr.sg_list = {&sge, 1};
  return wr;
}

// Busy-polls `cq` until one completion comes, and returns it.
WorkCompletion busy_poll_one(CompletionQueue& cq) {
  WorkCompletion wc[1];
  while (cq.poll(wc).count == 0) {
  }
  return wc[0];
}

// Application code: waits for one completion event on `cq`, then drains it. `robust` code
// accepts that the CQ may already be empty (another thread took the completion between the
// event and the poll); naive code treats that as an error. Returns completions taken.
int wait_and_drain(CompletionQueue& cq, CompletionChannel& ch, bool robust, bool& saw_empty) {
  CompletionQueue* fired = nullptr;
  if (const auto err = ch.get_cq_event(fired, Wait::blocking)) throw std::system_error(err, "get_cq_event");
  fired->ack_events(1);
  if (const auto err = cq.req_notify(false)) throw std::system_error(err, "req_notify");
  int taken = 0;
  WorkCompletion wc[8];
  for (;;) {
    const PollResult r = cq.poll(wc);
    taken += static_cast<int>(r.count);
    if (r.count == 0) break;
  }
  if (taken == 0) {
    saw_empty = true;
    if (!robust) throw std::runtime_error("woken by a completion event but the CQ was empty");
  }
  return taken;
}

TEST(Fibers, EventDrivenServerAndClientRunAsFibers) {
  sim::World world;
  PairOptions o;
  Side a = testing::make_side(world, "sim0", o);
  Side b = testing::make_side(world, "sim1", o);
  auto ch = b.ctx->create_comp_channel();
  auto cq = b.ctx->create_cq(16, ch.get());
  QpInitAttr init;
  init.send_cq = b.cq.get();
  init.recv_cq = cq.get();
  init.cap = {4, 16, 1, 1, 0};
  auto server_qp = b.pd->create_qp(init);
  connect(*a.qp, 1, {b.ctx->query_gid(1, 1), server_qp->qp_num(), 2});
  connect(*server_qp, 2, testing::endpoint_of(a, 1));

  constexpr int kMessages = 10;
  int received = 0;
  sim::Simulation sim(world);
  sim.spawn("server", [&] {
    const Sge rs = b.sge(0, 64);
    for (int i = 0; i < kMessages; ++i) {
      ASSERT_FALSE(server_qp->post_recv(RecvWr{static_cast<std::uint64_t>(i), {&rs, 1}}).error());
    }
    ASSERT_FALSE(cq->req_notify(false));
    bool empty = false;
    while (received < kMessages) received += wait_and_drain(*cq, *ch, true, empty);
  });
  sim.spawn("client", [&] {
    const Sge ss = a.sge(0, 32);
    for (int i = 0; i < kMessages; ++i) {
      ASSERT_FALSE(a.qp->post_send(signaled_send(ss, static_cast<std::uint64_t>(i))).error());
      sim::sleep_for(world, std::chrono::microseconds(5));
    }
    WorkCompletion wc[4];
    int done = 0;
    while (done < kMessages) done += static_cast<int>(a.cq->poll(wc).count);
  });
  sim.run();
  EXPECT_EQ(received, kMessages);
  EXPECT_GE(world.now(), 10 * 5000u);  // the client slept 10 x 5 us of virtual time
  server_qp.reset();
}

TEST(Fibers, DeadlockIsReportedWithTheSeedAndHistory) {
  VERBSIM_SKIP_IF_SEED_OVERRIDDEN();
  sim::Config c;
  c.seed = 4242;
  SimPair p(c);
  auto ch = p.b.ctx->create_comp_channel();
  auto cq = p.b.ctx->create_cq(4, ch.get());
  ASSERT_FALSE(cq->req_notify(false));
  std::error_code got;
  sim::Simulation sim(p.world);
  sim.spawn("waiter", [&] {
    CompletionQueue* fired = nullptr;
    got = ch->get_cq_event(fired, Wait::blocking);  // nothing will ever complete on cq
  });
  // The waiter handled its EDEADLK (it returned): run() reports the deadlock, not throws.
  const sim::RunOutcome out = sim.run();
  EXPECT_TRUE(out.deadlocked);
  EXPECT_TRUE(out.report.starts_with("deadlock: every fiber is blocked (waiter) and the "
                                     "simulated world has nothing left to run; reproduce with "
                                     "VERBSIM_SEED=4242 "))
      << out.report;
  EXPECT_EQ(got.value(), EDEADLK);
}

TEST(Fibers, RunWithoutADeadlockReturnsAnEmptyOutcome) {
  SimPair p;
  int slept = 0;
  sim::Simulation sim(p.world);
  sim.spawn("sleeper", [&] {
    sim::sleep_for(p.world, std::chrono::microseconds(3));
    ++slept;
  });
  const sim::RunOutcome out = sim.run();
  EXPECT_FALSE(out.deadlocked);
  EXPECT_EQ(out.report, "");
  EXPECT_EQ(slept, 1);
  EXPECT_EQ(p.world.now(), 3000u);
}

// A fiber that takes EDEADLK for an answer no more than the first time and waits again: the
// run gives up on it and throws, naming it.
TEST(Fibers, AFiberThatKeepsWaitingAfterEdeadlkMakesRunThrow) {
  SimPair p;
  auto ch = p.b.ctx->create_comp_channel();
  auto cq = p.b.ctx->create_cq(4, ch.get());
  ASSERT_FALSE(cq->req_notify(false));
  int deadlocks = 0;
  sim::Simulation sim(p.world);
  sim.spawn("stubborn", [&] {
    for (;;) {
      CompletionQueue* fired = nullptr;
      if (ch->get_cq_event(fired, Wait::blocking).value() == EDEADLK) ++deadlocks;
    }
  });
  try {
    (void)sim.run();
    FAIL() << "run() returned while a fiber still waits";
  } catch (const sim::DeadlockError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("every fiber is blocked (stubborn)"), std::string::npos) << what;
    EXPECT_NE(what.find("fiber 'stubborn' went on waiting after 10000 answers of EDEADLK"),
              std::string::npos)
        << what;
  }
  EXPECT_EQ(deadlocks, 10000);
}

// A fiber that turns its EDEADLK into an exception: that exception, not DeadlockError.
TEST(Fibers, AnExceptionAfterEdeadlkIsRethrownAsItIs) {
  SimPair p;
  auto ch = p.b.ctx->create_comp_channel();
  auto cq = p.b.ctx->create_cq(4, ch.get());
  ASSERT_FALSE(cq->req_notify(false));
  sim::Simulation sim(p.world);
  sim.spawn("thrower", [&] {
    CompletionQueue* fired = nullptr;
    const std::error_code err = ch->get_cq_event(fired, Wait::blocking);
    if (err) throw std::system_error(err, "waiting for the server");
  });
  try {
    (void)sim.run();
    FAIL() << "nothing thrown";
  } catch (const sim::DeadlockError& e) {
    FAIL() << "DeadlockError instead of the fiber's exception: " << e.what();
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code().value(), EDEADLK);
  }
}

// The report names what the world did last: the verbs posted, the packets and the completions
// a FlightRecorder kept, and the counters of the QPs involved.
TEST(Fibers, DeadlockReportShowsTheLastRecordsOfTheRun) {
  sim::FlightRecorder recorder;  // outlives the world, as observers must
  SimPair p;
  p.world.add_observer(recorder);
  auto ch = p.b.ctx->create_comp_channel();
  auto idle_cq = p.b.ctx->create_cq(4, ch.get());
  ASSERT_FALSE(idle_cq->req_notify(false));
  sim::Simulation sim(p.world);
  sim.spawn("waiter", [&] {
    const Sge rs = p.b.sge(0, 64);
    ASSERT_FALSE(p.b.qp->post_recv(RecvWr{7, {&rs, 1}}).error());
    const Sge ss = p.a.sge(0, 32);
    ASSERT_FALSE(p.a.qp->post_send(signaled_send(ss, 9)).error());
    CompletionQueue* fired = nullptr;
    (void)ch->get_cq_event(fired, Wait::blocking);  // nothing ever completes on idle_cq
  });
  const sim::RunOutcome out = sim.run();
  ASSERT_TRUE(out.deadlocked);
  {
    const std::string& what = out.report;
    const std::string a_qp = "sim0 qp " + std::to_string(p.a.qp->qp_num());
    const std::string b_qp = "sim1 qp " + std::to_string(p.b.qp->qp_num());
    const std::vector<std::string> lines = {
        "seed 1, profile strict, fault plan '', virtual time 2012 ns",
        "t=0 ns post " + b_qp + " recv wr_id=7 64 B",
        "t=0 ns post " + a_qp + " send wr_id=9 SEND 32 B",
        "packet " + a_qp + " -> " + b_qp + " SEND psn 100 32 B",
        "completion " + b_qp + " recv wr_id=7 SUCCESS 32 B",
        "completion " + a_qp + " send wr_id=9 SUCCESS",
        "counters of the QPs involved:",
        a_qp + ": sent 1 (32 bytes)"};
    for (const std::string& line : lines) {
      EXPECT_NE(what.find(line), std::string::npos) << "no '" << line << "' in:\n" << what;
    }
  }
}

// A host that goes on after EDEADLK and sleeps: the sleep returns at once (the world is
// deadlocked) and its wake event, still pending, must not touch the sleep's gone frame when
// the world runs it (under ASan this was a stack use-after-return).
TEST(Fibers, SleepingAfterADeadlockLeavesNoDanglingWakeUp) {
  SimPair p;
  auto ch = p.b.ctx->create_comp_channel();
  auto cq = p.b.ctx->create_cq(4, ch.get());
  ASSERT_FALSE(cq->req_notify(false));
  std::error_code got;
  int slept = 0;
  sim::Simulation sim(p.world);
  sim.spawn("waiter", [&] {
    CompletionQueue* fired = nullptr;
    got = ch->get_cq_event(fired, Wait::blocking);  // nothing will ever complete on cq
    for (int i = 0; i < 3; ++i) {
      sim::sleep_for(p.world, std::chrono::microseconds(1));
      ++slept;
    }
  });
  EXPECT_TRUE(sim.run().deadlocked);
  EXPECT_EQ(got.value(), EDEADLK);
  EXPECT_EQ(slept, 3);
  p.world.run_until_idle();  // the wake events left behind run harmlessly
}

// Three fibers appending to a log: the interleaving is a function of the seed.
std::string interleaving(std::uint64_t seed) {
  sim::Config c;
  c.seed = seed;
  sim::World world(c);
  std::string log;
  sim::Simulation sim(world);
  for (const char* name : {"a", "b", "c"}) {
    sim.spawn(name, [&world, &log, name] {
      for (int i = 0; i < 4; ++i) {
        log += name;
        sim::sleep_for(world, std::chrono::nanoseconds(0));
      }
    });
  }
  sim.run();
  return log;
}

TEST(Fibers, TheSeedFixesTheInterleaving) {
  VERBSIM_SKIP_IF_SEED_OVERRIDDEN();
  EXPECT_EQ(interleaving(1), interleaving(1));
  EXPECT_EQ(interleaving(2), interleaving(2));
  std::set<std::string> seen;
  for (std::uint64_t seed = 1; seed <= 20; ++seed) seen.insert(interleaving(seed));
  EXPECT_GT(seen.size(), 5u) << "the seed should change the order fibers run in";
}

// The seeds' race (chapter 2.3): an event-driven thread is woken for a completion that a
// polling thread takes first. Runs one CQ shared by an event waiter and a busy poller.
// Returns whether the waiter ever woke to an empty CQ; throws if naive code tripped on it.
bool shared_cq_run(std::uint64_t seed, bool robust) {
  sim::Config c;
  c.seed = seed;
  sim::World world(c);
  PairOptions o;
  Side a = testing::make_side(world, "sim0", o);
  Side b = testing::make_side(world, "sim1", o);
  auto ch = b.ctx->create_comp_channel();
  auto cq = b.ctx->create_cq(64, ch.get());
  QpInitAttr init;
  init.send_cq = b.cq.get();
  init.recv_cq = cq.get();
  init.cap = {4, 32, 1, 1, 0};
  auto rqp = b.pd->create_qp(init);
  connect(*a.qp, 1, {b.ctx->query_gid(1, 1), rqp->qp_num(), 2});
  connect(*rqp, 2, testing::endpoint_of(a, 1));
  constexpr int kMessages = 20;
  const Sge rs = b.sge(0, 64);
  for (int i = 0; i < kMessages; ++i) (void)rqp->post_recv(RecvWr{static_cast<std::uint64_t>(i), {&rs, 1}});
  int taken = 0;
  bool saw_empty = false;
  sim::Simulation sim(world);
  sim.spawn("event-waiter", [&] {
    (void)cq->req_notify(false);
    while (taken < kMessages) taken += wait_and_drain(*cq, *ch, robust, saw_empty);
  });
  sim.spawn("poller", [&] {
    WorkCompletion wc[1];
    while (taken < kMessages) {
      taken += static_cast<int>(cq->poll(wc).count);
      sim::sleep_for(world, std::chrono::nanoseconds(500));
    }
    // The waiter may be blocked for an event that will never come: wake it with one more
    // message it does not count.
  });
  sim.spawn("sender", [&] {
    const Sge ss = a.sge(0, 16);
    WorkCompletion wc[4];
    for (int i = 0; i < kMessages; ++i) {
      (void)a.qp->post_send(signaled_send(ss, static_cast<std::uint64_t>(i)));
      while (a.cq->poll(wc).count == 0) {
      }
      sim::sleep_for(world, std::chrono::microseconds(1));
    }
  });
  try {
    sim.run();
  } catch (const sim::DeadlockError&) {
    // The poller took the last completion while the waiter waits for its event: the run ends
    // with the waiter blocked. Not the failure this test is about.
  }
  rqp.reset();
  return saw_empty;
}

TEST(Fibers, ExploringSeedsFindsTheEmptyCqAfterAnEventRace) {
  std::uint64_t failing_seed = 0;
  for (std::uint64_t seed = 1; seed <= 200 && failing_seed == 0; ++seed) {
    try {
      (void)shared_cq_run(seed, /*robust=*/false);
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "woken by a completion event but the CQ was empty");
      failing_seed = seed;
    }
  }
  ASSERT_NE(failing_seed, 0u) << "no seed in 1..200 reproduced the race";
  std::printf("the race reproduces with VERBSIM_SEED=%llu\n",
              static_cast<unsigned long long>(failing_seed));
  // The same seed, with application code that tolerates an empty CQ after an event, passes
  // and shows it met the race.
  EXPECT_TRUE(shared_cq_run(failing_seed, /*robust=*/true));
}

// Application code: posts `wr`, treating "queue full" (ENOMEM on rxe/mlx5, EAGAIN or ENOSPC
// elsewhere) as back-pressure: poll, then retry. Counts completions it polled.
void post_with_backpressure(QueuePair& qp, CompletionQueue& cq, const SendWr& wr, int& completed,
                            int& backoffs) {
  for (;;) {
    const PostResult r = qp.post_send(wr);
    if (!r.error()) return;
    if (r.error() != Condition::queue_full) throw std::system_error(r.error(), r.reason);
    ++backoffs;
    WorkCompletion wc[16];
    const PollResult p = cq.poll(wc);
    for (std::uint32_t i = 0; i < p.count; ++i) {
      if (wc[i].status != WcStatus::success) throw std::runtime_error(std::string(to_string(wc[i].status)));
    }
    completed += static_cast<int>(p.count);
  }
}

TEST(Fibers, BackPressureThroughSqFullAndInjectedEagain) {
  sim::Config c;
  c.faults = sim::FaultPlan::parse("post_send p=0.2 errno=EAGAIN dev=sim0");
  PairOptions o;
  o.cap = {8, 64, 1, 1, 0};  // a small send queue: ENOMEM comes often
  o.cqe = 256;
  SimPair p(c, o);
  constexpr int kMessages = 200;
  int received = 0;
  int completed = 0;
  int backoffs = 0;
  sim::Simulation sim(p.world);
  sim.spawn("receiver", [&] {
    const Sge rs = p.b.sge(0, 64);
    WorkCompletion wc[16];
    for (int i = 0; i < 32; ++i) (void)p.b.qp->post_recv(RecvWr{0, {&rs, 1}});
    while (received < kMessages) {
      const PollResult r = p.b.cq->poll(wc);
      for (std::uint32_t i = 0; i < r.count; ++i) {
        ASSERT_EQ(wc[i].status, WcStatus::success);
        ASSERT_EQ(std::memcmp(p.b.buf.data(), "msg", 3), 0);
        (void)p.b.qp->post_recv(RecvWr{0, {&rs, 1}});
      }
      received += static_cast<int>(r.count);
    }
  });
  sim.spawn("sender", [&] {
    std::memcpy(p.a.buf.data(), "msg", 3);
    const Sge ss = p.a.sge(0, 32);
    for (int i = 0; i < kMessages; ++i) {
      post_with_backpressure(*p.a.qp, *p.a.cq, signaled_send(ss, static_cast<std::uint64_t>(i)),
                             completed, backoffs);
    }
    WorkCompletion wc[16];
    while (completed < kMessages) completed += static_cast<int>(p.a.cq->poll(wc).count);
  });
  sim.run();
  EXPECT_EQ(received, kMessages);
  EXPECT_EQ(completed, kMessages);
  EXPECT_GT(backoffs, 20);  // both ENOMEM (8-deep SQ) and injected EAGAIN were met
}

TEST(Fibers, RecoversFromAFatalQpErrorByReconnecting) {
  // Learn the QP numbers a fresh world hands out, then aim the fault at the client's QP.
  std::uint32_t client_qpn = 0;
  {
    SimPair probe;
    client_qpn = probe.a.qp->qp_num();
  }
  sim::Config c;
  c.faults = sim::FaultPlan::parse("qp_fatal qp=" + std::to_string(client_qpn) + " dev=sim0 at=40us");
  PairOptions o;
  SimPair p(c, o);
  ASSERT_EQ(p.a.qp->qp_num(), client_qpn);
  constexpr int kMessages = 60;
  int delivered = 0;  // taken by the server, in order, no gaps
  int reconnects = 0;
  bool fatal_event = false;
  sim::Simulation sim(p.world);
  // Each receive has its own 64-byte slot of b's buffer; wr_id names the slot.
  auto post_slot = [&p](std::uint64_t slot) {
    const Sge rs = p.b.sge(slot * 64, 64);
    (void)p.b.qp->post_recv(RecvWr{slot, {&rs, 1}});
  };
  sim.spawn("server", [&] {
    WorkCompletion wc[16];
    for (std::uint64_t slot = 0; slot < 16; ++slot) post_slot(slot);
    while (delivered < kMessages) {
      const PollResult r = p.b.cq->poll(wc);
      for (std::uint32_t i = 0; i < r.count; ++i) {
        if (wc[i].status != WcStatus::success) continue;  // flushed during a reconnect
        int seq;
        std::memcpy(&seq, p.b.buf.data() + wc[i].wr_id * 64, sizeof seq);
        EXPECT_EQ(seq, delivered) << "a message was lost or duplicated";
        if (seq == delivered) ++delivered;
        post_slot(wc[i].wr_id);
      }
      if (p.b.qp->state() == QpState::err) {  // the client reset the connection
        sim::sleep_for(p.world, std::chrono::microseconds(1));
      }
    }
  });
  sim.spawn("client", [&] {
    const Sge ss = p.a.sge(0, sizeof(int));
    WorkCompletion wc[16];
    int next = 0;
    while (next < kMessages) {
      std::memcpy(p.a.buf.data(), &next, sizeof next);
      (void)p.a.qp->post_send(signaled_send(ss, static_cast<std::uint64_t>(next)));
      PollResult r{};
      while ((r = p.a.cq->poll(std::span(wc, 1))).count == 0) {
      }
      if (wc[0].status == WcStatus::success) {
        ++next;
        continue;
      }
      // The QP failed: expect the async event, then reset both ends and connect again.
      AsyncEvent ev;
      if (!p.a.ctx->get_async_event(ev, Wait::nonblocking) && ev.type == AsyncEventType::qp_fatal) {
        fatal_event = true;
      }
      ++reconnects;
      QpAttr reset;
      reset.qp_state = QpState::reset;
      p.a.qp->modify(reset, QpAttrMask::state);
      p.b.qp->modify(reset, QpAttrMask::state);
      p.connect_both();
      for (std::uint64_t slot = 0; slot < 16; ++slot) post_slot(slot);
      // Resynchronise out of band, as a real reconnect handshake would: the reset dropped
      // whatever the server had not polled yet, so resume from what it did take.
      next = delivered;
    }
  });
  sim.run();
  EXPECT_EQ(delivered, kMessages);
  EXPECT_EQ(reconnects, 1);
  EXPECT_TRUE(fatal_event);
}

// A busy poller does not run the world ahead of a fiber that has work to do: the world moves
// only once every ready fiber waits on it. Here a timer 10 ms away is all that is pending
// while the sender computes (yields) before it posts: an empty poll that stepped the world
// would jump to 10 ms and the message would leave late.
TEST(Fibers, AnEmptyPollWaitsForTheOtherReadyFibers) {
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    sim::Config c;
    c.seed = seed;
    SimPair p(c);
    const Sge ss = p.a.sge(0, 8);
    const Sge rs = p.b.sge(0, 8);
    ASSERT_FALSE(p.b.qp->post_recv(RecvWr{7, {&rs, 1}}).error());
    std::uint64_t posted_at = UINT64_MAX;
    std::uint64_t received_at = UINT64_MAX;
    sim::Simulation sim(p.world);
    sim.spawn("timer", [&] { sim::sleep_for(p.world, std::chrono::milliseconds(10)); });
    sim.spawn("receiver", [&] {
      busy_poll_one(*p.b.cq);
      received_at = p.world.now();
    });
    sim.spawn("sender", [&] {
      for (int i = 0; i < 5; ++i) boost::this_fiber::yield();  // computing
      posted_at = p.world.now();
      ASSERT_FALSE(p.a.qp->post_send(signaled_send(ss, 1)).error());
      busy_poll_one(*p.a.cq);
    });
    sim.run();
    EXPECT_EQ(posted_at, 0u);
    EXPECT_LT(received_at, 100'000u);  // a few microseconds of wire, not the 10 ms timer
  }
}

void all_poll_empty_then_send(const sim::Config& c);

// Every fiber polling an empty CQ while nothing is scheduled is not a deadlock: a poll that
// finds nothing returns, and its caller may go on to post.
TEST(Fibers, FibersThatAllPollEmptyCqsWithNothingScheduledAreNotDeadlocked) {
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    sim::Config c;
    c.seed = seed;
    all_poll_empty_then_send(c);
  }
}

void all_poll_empty_then_send(const sim::Config& c) {
  SimPair p(c);
  const Sge ss = p.a.sge(0, 8);
  const Sge rs = p.b.sge(0, 8);
  ASSERT_FALSE(p.b.qp->post_recv(RecvWr{7, {&rs, 1}}).error());
  bool received = false;
  sim::Simulation sim(p.world);
  sim.spawn("sender", [&] {
    WorkCompletion wc[1];
    EXPECT_EQ(p.a.cq->poll(wc).count, 0u);  // nothing yet, and nothing scheduled
    sim::sleep_for(p.world, std::chrono::microseconds(1));
    ASSERT_FALSE(p.a.qp->post_send(signaled_send(ss, 1)).error());
    busy_poll_one(*p.a.cq);
  });
  sim.spawn("receiver", [&] {
    const WorkCompletion wc = busy_poll_one(*p.b.cq);
    received = wc.wr_id == 7 && wc.status == WcStatus::success;
  });
  EXPECT_NO_THROW(sim.run());
  EXPECT_TRUE(received);
  EXPECT_GE(p.world.now(), 1000u);
}

TEST(VirtualTime, SevenRnrNaksOf655MsEachRunInVirtualTime) {
  PairOptions o;
  o.connect_options.rnr_retry = 6;
  o.connect_options.min_rnr_timer = 0;  // 655.36 ms
  SimPair p({}, o);
  const Sge ss = p.a.sge(0, 8);
  ASSERT_FALSE(p.a.qp->post_send(signaled_send(ss, 1)).error());  // no receive is ever posted
  const auto wcs = testing::poll_n(p.world, *p.a.cq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::rnr_retry_exc_err);
  // The first try plus six retries, each answered by an RNR NAK and a 655.36 ms wait.
  EXPECT_GE(p.world.now(), 6 * rnr_timer_ns(0));
  EXPECT_LT(p.world.now(), 7 * rnr_timer_ns(0));
}

}  // namespace
}  // namespace verbsim
