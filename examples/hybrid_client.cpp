// hybrid_client: a client that polls while messages keep coming and sleeps when they stop.
//
//   hybrid_client [--backend SPEC] [--messages N] [--burst N] [--pause-us N] [--idle-us N] ...
//
// The client asks a server in the same process for bursts of messages: one request, then
// --burst messages back to back, which the server sends after --pause-us of "work". The client
// takes them with a HybridPoller (verbsim/polling.hpp): it polls for --idle-us, then arms the CQ
// and sleeps on the completion channel through the rest of the server's pause, and once woken
// polls through the burst without sleeping again. The server waits for requests with an
// EventPoller.
//
// Each message carries the time it was sent; the client prints the delivery latency (p50, p99,
// max) by the context's clock: steady_clock on a device, virtual time on the simulator (where
// a wake-up costs nothing), and how much of the run it spent polling.
#include <algorithm>

#include "echo.hpp"

using namespace verbsim;

namespace {

constexpr const char* kUsage =
    "usage: hybrid_client [options]\n"
    "  --idle-us N       poll this long without a message before sleeping (default 20)\n";

// The server: for each request (its immediate data is the first message number wanted), a pause,
// then a burst of messages, each stamped with the time it was posted.
void serve(echo::Setup& s, const echo::Options& o) {
  echo::Host& h = s.server;
  const Clock& clock = h.ctx->clock();
  EventPoller poller(*h.rcq, *h.channel, clock);
  std::vector<std::uint8_t> msg(o.size);
  WorkCompletion wc[1];
  for (std::uint32_t sent = 0; sent < o.messages;) {
    const PollResult r = poller.next(wc);
    if (r.err != 0) throw std::system_error(r.error(), "server: waiting for requests");
    h.check({wc, r.count});
    const std::uint32_t first = h.received(wc[0]);
    h.post_recv(wc[0].wr_id);
    s.pause(o.pause_us);  // the server's work before it answers
    const std::uint32_t n = std::min(o.burst, o.messages - first);
    for (std::uint32_t i = 0; i < n; ++i) {
      echo::fill(msg, first + i);
      const std::uint64_t now = clock.now_ns();
      std::memcpy(msg.data(), &now, sizeof now);
      h.send(first + i, msg.data());
    }
    sent += n;
  }
  while (h.unreaped > 0) h.reap();
  std::printf("server: %u messages in %llu bursts, %llu wake-ups\n", o.messages,
              static_cast<unsigned long long>(poller.stats().completions),
              static_cast<unsigned long long>(poller.stats().wakeups));
}

// The client: one request per burst, the burst taken with hybrid polling.
void request(echo::Setup& s, const echo::Options& o) {
  echo::Host& h = s.client;
  const Clock& clock = h.ctx->clock();
  HybridPoller poller(*h.rcq, *h.channel, clock, o.idle_us * 1000);
  std::vector<std::uint8_t> req(o.size);
  std::vector<std::uint64_t> latency;
  latency.reserve(o.messages);
  WorkCompletion wc[8];
  const std::uint64_t start = clock.now_ns();
  for (std::uint32_t next = 0; next < o.messages;) {
    echo::fill(req, next);
    h.send(next, req.data());
    const std::uint32_t n = std::min(o.burst, o.messages - next);
    for (std::uint32_t got = 0; got < n;) {
      const PollResult r = poller.next(wc);
      if (r.err != 0) throw std::system_error(r.error(), "client: waiting for messages");
      const std::uint64_t now = clock.now_ns();
      h.check({wc, r.count});
      for (const WorkCompletion& c : std::span(wc, r.count)) {
        if (h.received(c) != next + got) throw std::runtime_error("client: a message came out of order");
        std::uint64_t stamp = 0;
        std::memcpy(&stamp, h.slot(c.wr_id), sizeof stamp);
        latency.push_back(now - stamp);
        h.post_recv(c.wr_id);
        ++got;
      }
    }
    next += n;
  }
  const std::uint64_t elapsed = clock.now_ns() - start;
  while (h.unreaped > 0) h.reap();
  std::sort(latency.begin(), latency.end());
  const auto at = [&](double p) {
    const auto i = static_cast<std::size_t>(p * static_cast<double>(latency.size() - 1));
    return static_cast<double>(latency[i]) / 1e3;
  };
  const PollStats& st = poller.stats();
  std::printf("client: %u messages checked; latency p50 %.2f us, p99 %.2f us, max %.2f us (%s)\n",
              o.messages, at(0.5), at(0.99), at(1.0),
              s.world != nullptr ? "virtual time" : "steady_clock");
  std::printf("client: slept %llu times for %llu bursts; polled %.0f%% of the run\n",
              static_cast<unsigned long long>(st.sleeps),
              static_cast<unsigned long long>((o.messages + o.burst - 1) / o.burst),
              100.0 * static_cast<double>(st.polling_ns) /
                  static_cast<double>(std::max<std::uint64_t>(elapsed, 1)));
  std::printf("client stats: %s\n", st.to_string().c_str());
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const echo::Options o = echo::parse_args(argc, argv, kUsage);
    echo::Setup s(o);
    s.run([&] { serve(s, o); }, [&] { request(s, o); });
    return 0;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "hybrid_client: %s\n", e.what());
    return 1;
  }
}
