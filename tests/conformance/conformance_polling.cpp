// The polling strategies of verbsim/polling.hpp against each backend: every strategy takes every
// message exactly once, several pollers share one CQ and one channel, and an application's own
// epoll loop works. Hosts are threads on a device and fibers of a sim::Simulation on the
// simulator (with tickers: verbsim/sim/ticker.hpp), so the same test code runs on both.
#include <sys/epoll.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <functional>
#include <memory>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "conformance.hpp"
#include "verbsim/polling.hpp"
#include "verbsim/sim/simulation.hpp"
#include "verbsim/sim/ticker.hpp"

namespace verbsim::conformance {
namespace {

using namespace std::chrono_literals;

constexpr std::uint32_t kSentinel = 0xffffffffu;
constexpr std::uint32_t kExtra = 64;  // receives for wake-up messages

enum class Kind { busy, event, hybrid, batch };
const char* name(Kind k) {
  switch (k) {
    case Kind::busy: return "busy";
    case Kind::event: return "event";
    case Kind::hybrid: return "hybrid";
    case Kind::batch: return "batch";
  }
  return "?";
}

class Polling : public Conformance {
 protected:
  // A sender QP `a` and a receiver QP `b` whose receive CQ reports to the channel.
  struct Link {
    std::unique_ptr<CompletionChannel> ch;
    std::unique_ptr<CompletionQueue> cq_a;
    std::unique_ptr<CompletionQueue> cq_b;
    std::unique_ptr<CompletionQueue> rcq;
    std::unique_ptr<QueuePair> a;
    std::unique_ptr<QueuePair> b;
    std::uint64_t sends = 0;
  };

  Link make_link(std::uint32_t messages) {
    Link l;
    l.ch = ctx().create_comp_channel();
    l.cq_a = make_cq(64);
    l.cq_b = make_cq(16);
    l.rcq = make_cq(static_cast<int>(messages + kExtra), l.ch.get());
    l.a = make_qp(*l.cq_a, *l.cq_a, QpCap{16, 4, 1, 1, 0});
    l.b = make_qp(*l.cq_b, *l.rcq, QpCap{4, messages + kExtra, 1, 1, 0});
    connect_pair(*l.a, *l.b);
    const Sge r = sge(8192, 64);
    for (std::uint32_t i = 0; i < messages + kExtra; ++i) {
      EXPECT_FALSE(l.b->post_recv(recv_wr(i, &r)).error());
    }
    return l;
  }

  // A SEND carrying `imm`; "queue full" is back-pressure. Every 8th is signaled and the send CQ
  // is polled here (hardware frees send slots only when their completions are polled).
  void send(Link& l, std::uint32_t imm) {
    const Sge s = sge(0, 8);
    SendWr wr = send_wr(imm, &s, WrOpcode::send_with_imm,
                        ++l.sends % 8 == 0 ? SendFlags::signaled : SendFlags::none);
    wr.imm_data = imm;
    for (int tries = 0;; ++tries) {
      WorkCompletion wc[16];
      (void)l.cq_a->poll(wc);
      const PostResult r = l.a->post_send(wr);
      if (!r.error()) return;
      ASSERT_TRUE(r.error() == Condition::queue_full) << r.error().message() << " " << r.reason;
      ASSERT_LT(tries, 100000);
      pause(1us);
    }
  }

  void pause(std::chrono::nanoseconds d) {
    if (world_ != nullptr) {
      sim::sleep_for(*world_, d);
    } else {
      std::this_thread::sleep_for(d);
    }
  }

  // Runs the hosts to completion: threads on a device, fibers on the simulator.
  void run_hosts(const std::vector<std::function<void()>>& hosts) {
    if (world_ != nullptr) {
      sim::Simulation sim(*world_);
      int live = static_cast<int>(hosts.size());
      bool running = true;
      for (std::size_t i = 0; i < hosts.size(); ++i) {
        sim.spawn("host-" + std::to_string(i), [&, i] {
          hosts[i]();
          running = --live > 0;
        });
      }
      sim::spawn_tickers(sim, 1us, running);
      sim.run();
      return;
    }
    std::vector<std::thread> threads;
    for (const auto& h : hosts) threads.emplace_back(h);
    for (auto& t : threads) t.join();
  }

  std::unique_ptr<CompletionPoller> make(Kind k, Link& l) {
    const Clock& clock = ctx().clock();
    switch (k) {
      case Kind::busy: return std::make_unique<BusyPoller>(*l.rcq, clock);
      case Kind::hybrid: return std::make_unique<HybridPoller>(*l.rcq, *l.ch, clock, 50'000);
      case Kind::event:
      case Kind::batch: break;
    }
    return std::make_unique<EventPoller>(*l.rcq, *l.ch, clock);
  }

  // Message time gaps: long enough on a device for a poller to fall asleep.
  std::chrono::nanoseconds gap() const { return world_ != nullptr ? 100us : 2ms; }
};

TEST_P(Polling, EachStrategyTakesEveryMessageOnce) {
  constexpr std::uint32_t kMessages = 64;
  for (const Kind k : {Kind::busy, Kind::event, Kind::hybrid, Kind::batch}) {
    SCOPED_TRACE(name(k));
    Link l = make_link(kMessages);
    auto poller = make(k, l);
    BatchDrainer drainer(*poller, 5);
    std::vector<int> seen(kMessages, 0);
    std::atomic<std::uint32_t> got{0};  // the sender waits for it between bursts
    std::atomic<std::uint32_t> failed{0};
    std::size_t largest_drain = 0;
    auto take = [&](std::span<const WorkCompletion> wcs) {
      for (const WorkCompletion& wc : wcs) {
        if (wc.status != WcStatus::success || wc.imm_data >= kMessages) {
          ++failed;
          continue;
        }
        ++seen[wc.imm_data];
        ++got;
      }
    };
    run_hosts({[&] {
                 std::vector<WorkCompletion> buf(4);
                 while (got < kMessages && failed == 0) {
                   PollResult r;
                   if (k == Kind::batch) {
                     r = drainer.drain(buf, take);
                     largest_drain = std::max<std::size_t>(largest_drain, r.count);
                   } else {
                     r = poller->next(buf);
                     if (!r.error()) take({buf.data(), r.count});
                   }
                   ASSERT_FALSE(r.error()) << r.error().message();
                 }
               },
               [&] {
                 for (std::uint32_t i = 0; i < kMessages; ++i) {
                   send(l, i);
                   if (i % 8 != 7) continue;
                   // A gap the poller sees: the burst taken, then nothing for a while. (On a
                   // device, a poller held up for longer than the gaps would otherwise find
                   // every message waiting and never sleep.)
                   for (int n = 0; got.load() <= i && failed.load() == 0 && n < 1000; ++n) {
                     pause(gap() / 4);
                   }
                   pause(gap());
                 }
               }});
    int once = 0;
    for (int n : seen) once += n == 1 ? 1 : 0;
    const std::string key = name(k);
    CHECK_OBS(key + ".once", once, kMessages);
    CHECK_OBS(key + ".failed", failed.load(), 0);
    const PollStats& st = poller->stats();
    CHECK_OBS(key + ".slept", st.sleeps > 0, k != Kind::busy);
    EXPECT_EQ(st.completions, kMessages);
    EXPECT_LE(st.empty_wakeups, st.wakeups);
    if (k == Kind::batch) {
      EXPECT_LE(largest_drain, 5u);
    }
  }
}

TEST_P(Polling, SeveralPollersShareOneCqAndChannel) {
  constexpr std::uint32_t kMessages = 90;
  Link l = make_link(kMessages);
  const std::vector<Kind> kinds{Kind::event, Kind::event, Kind::hybrid, Kind::busy};
  std::vector<std::unique_ptr<CompletionPoller>> pollers;
  for (const Kind k : kinds) pollers.push_back(make(k, l));
  std::vector<std::atomic<int>> seen(kMessages);
  std::atomic<std::uint32_t> got{0};
  std::atomic<int> running{static_cast<int>(kinds.size())};
  std::stop_source stop;
  std::vector<std::function<void()>> hosts;
  for (std::size_t i = 0; i < kinds.size(); ++i) {
    hosts.emplace_back([&, i] {
      WorkCompletion wc[4];
      for (;;) {
        const PollResult r = pollers[i]->next(wc, stop.get_token());
        if (r.error().value() == ECANCELED) break;
        if (r.error()) {
          ADD_FAILURE() << name(kinds[i]) << ": " << r.error().message();
          break;
        }
        for (const WorkCompletion& c : std::span(wc, r.count)) {
          if (c.status == WcStatus::success && c.imm_data < kMessages) {
            seen[c.imm_data].fetch_add(1);
            got.fetch_add(1);
          }
        }
        if (stop.stop_requested()) break;
      }
      // Leaving after a wake-up: re-arm so that the pollers still asleep can be woken.
      EXPECT_FALSE(l.rcq->req_notify(false));
      running.fetch_sub(1);
    });
  }
  hosts.emplace_back([&] {
    for (std::uint32_t i = 0; i < kMessages; ++i) {
      send(l, i);
      if (i % 6 == 5) pause(gap());
    }
    for (int n = 0; got.load() < kMessages; ++n) {
      ASSERT_LT(n, 5000) << "messages were lost";
      pause(1ms);
    }
    stop.request_stop();
    for (std::uint32_t n = 0; running.load() > 0; ++n) {
      ASSERT_LT(n, kExtra) << "pollers do not stop";
      send(l, kSentinel);
      pause(world_ != nullptr ? 5us : 1ms);
    }
  });
  run_hosts(hosts);
  int once = 0;
  for (const auto& n : seen) once += n.load() == 1 ? 1 : 0;
  CHECK_OBS("once", once, kMessages);
  PollStats all;
  for (const auto& p : pollers) all += p->stats();
  EXPECT_LE(all.empty_wakeups, all.wakeups);
  EXPECT_GE(all.completions, kMessages);
}

TEST_P(Polling, EpollLoopOverTheChannelFd) {
  constexpr std::uint32_t kMessages = 40;
  Link l = make_link(kMessages);
  EventPoller poller(*l.rcq, *l.ch, ctx().clock());
  std::vector<int> seen(kMessages, 0);
  std::uint64_t readable = 0;
  // On the simulator the world moves only inside verbs: no point sleeping in epoll_wait there.
  const int timeout_ms = world_ != nullptr ? 0 : 10;
  run_hosts({[&] {
               const int ep = ::epoll_create1(EPOLL_CLOEXEC);
               ASSERT_GE(ep, 0);
               epoll_event ev{};
               ev.events = EPOLLIN;
               ASSERT_EQ(::epoll_ctl(ep, EPOLL_CTL_ADD, l.ch->fd(), &ev), 0);
               WorkCompletion wc[4];
               for (std::uint32_t got = 0, turns = 0; got < kMessages; ++turns) {
                 if (turns > 2'000'000) {
                   ADD_FAILURE() << "the loop got " << got << " messages";
                   break;
                 }
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
                 epoll_event out[2];
                 if (::epoll_wait(ep, out, 2, timeout_ms) > 0) ++readable;
               }
               ::close(ep);
             },
             [&] {
               for (std::uint32_t i = 0; i < kMessages; ++i) {
                 send(l, i);
                 if (i % 4 == 3) pause(gap());
               }
             }});
  int once = 0;
  for (int n : seen) once += n == 1 ? 1 : 0;
  CHECK_OBS("once", once, kMessages);
  CHECK_OBS("fd_readable", readable > 0, true);
  // The event that made the fd readable was taken by the poller (a wake-up), or it is still on
  // the channel: every poll after it found completions (on a device they can come in one burst,
  // however the sender spaces them).
  bool pending = false;
  if (poller.stats().wakeups == 0) {
    CompletionQueue* fired = nullptr;
    if (!l.ch->get_cq_event(fired, Wait::nonblocking)) {
      pending = fired == l.rcq.get();
      fired->ack_events(1);
    }
  }
  EXPECT_TRUE(poller.stats().wakeups > 0 || pending)
      << "the fd was readable " << readable << " times, and no event was taken or is pending";
}

VERBSIM_CONFORMANCE_SUITE(Polling);

}  // namespace
}  // namespace verbsim::conformance
