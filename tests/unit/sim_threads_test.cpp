// A world entered by two threads at once is reported (World::Impl::Entry): the run would be
// nondeterministic, so the process aborts naming both threads and what to do. Threads that take
// turns, as the drop-in's lock makes them, are fine.
#include <gtest/gtest.h>
#include <pthread.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "../support/sim_pair.hpp"
#include "verbsim/sim/observe.hpp"

namespace verbsim {
namespace {

using testing::SimPair;

// Holds the thread that runs the world inside it: the first completion it is told about
// signals `inside` and then waits forever (the test's other thread ends the process).
class Trap final : public sim::Observer {
 public:
  void completion(const sim::CompletionRecord&) override {
    inside.store(true);
    for (;;) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::atomic<bool> inside{false};
};

// Thread "host-a" runs the world and stays inside it (Trap); then the calling thread, named
// "host-b", does `enter`.
template <class Enter>
void second_thread_enters(Enter enter) {
  SimPair p;
  Trap trap;
  p.world.add_observer(trap);
  const Sge rs = p.b.sge(0, 64);
  const Sge ss = p.a.sge(0, 8);
  (void)p.b.qp->post_recv(RecvWr{1, {&rs, 1}});
  (void)p.a.qp->post_send(testing::send_wr(2, ss));
  std::thread a([&] {
    pthread_setname_np(pthread_self(), "host-a");
    p.world.run_until_idle();
  });
  a.detach();
  while (!trap.inside.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  pthread_setname_np(pthread_self(), "host-b");
  enter(p);
}

constexpr const char* kReport =
    "verbsim: two threads are in one simulated world \\(seed 1\\) at once: thread 0x[0-9a-f]+ "
    "\\('host-a'\\) is inside it and thread 0x[0-9a-f]+ \\('host-b'\\) entered it\\. A "
    "sim::World is single-threaded.*Run the hosts as fibers of one thread under "
    "sim::Simulation.*or make the threads take turns: one lock";

TEST(ThreadsDeathTest, ASecondThreadRunningTheWorldAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(second_thread_enters([](SimPair& p) { (void)p.world.step(); }), kReport);
}

TEST(ThreadsDeathTest, ASecondThreadPostingAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(second_thread_enters([](SimPair& p) {
                 const Sge ss = p.a.sge(0, 8);
                 (void)p.a.qp->post_send(testing::send_wr(3, ss));
               }),
               kReport);
}

// Two threads, each a host, taking turns under one lock (what the drop-in does): no report,
// and every message arrives.
TEST(Threads, ThreadsThatTakeTurnsUnderALockAreFine) {
  SimPair p;
  std::mutex mu;
  constexpr int kMessages = 50;
  int received = 0;
  std::thread server([&] {
    const Sge rs = p.b.sge(0, 64);
    {
      const std::lock_guard lock(mu);
      for (int i = 0; i < 8; ++i) ASSERT_FALSE(p.b.qp->post_recv(RecvWr{1, {&rs, 1}}).error());
    }
    WorkCompletion wc[4];
    while (received < kMessages) {
      const std::lock_guard lock(mu);
      const PollResult r = p.b.cq->poll(wc);
      for (std::uint32_t i = 0; i < r.count; ++i) {
        ++received;
        ASSERT_FALSE(p.b.qp->post_recv(RecvWr{1, {&rs, 1}}).error());
      }
      if (r.count == 0) (void)p.world.step();
    }
  });
  const Sge ss = p.a.sge(0, 8);
  WorkCompletion wc[4];
  for (int i = 0; i < kMessages; ++i) {
    {
      const std::lock_guard lock(mu);
      const auto id = static_cast<std::uint64_t>(i);
      ASSERT_FALSE(p.a.qp->post_send(testing::send_wr(id, ss)).error());
    }
    for (;;) {
      const std::lock_guard lock(mu);
      if (p.a.cq->poll(wc).count == 1) break;
      (void)p.world.step();
    }
  }
  server.join();
  EXPECT_EQ(received, kMessages);
}

}  // namespace
}  // namespace verbsim
