// event_server: an echo server that sleeps while idle, in its own epoll loop.
//
//   event_server [--backend SPEC] [--messages N] [--burst N] [--pause-us N] [--timeout-ms N] ...
//
// The server waits for requests with an EventPoller (verbsim/polling.hpp) driven from an
// application's epoll loop: epoll_wait on the completion channel's fd, then
// EventPoller::try_next, which never blocks. The client, in the same process, sends bursts of
// requests and busy-polls for the replies. At the end the server's statistics show how little it
// polled: one wake-up per burst or so, not a spinning core.
//
// The same loop runs on both backends. On the simulator nothing moves while a program sleeps in
// epoll_wait (the simulated world advances only inside verbs): the loop waits with a short
// timeout (0 there) and try_next runs the world's next instants. On a device the channel's fd
// wakes it, and the timeout only bounds how long it sleeps.
#include <sys/epoll.h>
#include <unistd.h>

#include <cerrno>

#include "echo.hpp"

using namespace verbsim;

namespace {

constexpr const char* kUsage =
    "usage: event_server [options]\n"
    "  --timeout-ms N    epoll_wait timeout (default 10; 0 on the simulator)\n";

// The server: an epoll loop over the completion channel's fd.
void serve(echo::Host& h, const echo::Options& o, int timeout_ms) {
  EventPoller poller(*h.rcq, *h.channel, h.ctx->clock());
  const int ep = ::epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) throw std::system_error(errno, std::generic_category(), "epoll_create1");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = h.channel->fd();
  if (::epoll_ctl(ep, EPOLL_CTL_ADD, h.channel->fd(), &ev) != 0) {
    ::close(ep);
    throw std::system_error(errno, std::generic_category(), "epoll_ctl");
  }
  std::uint64_t turns = 0;
  std::uint64_t readable = 0;
  WorkCompletion wc[8];
  for (std::uint32_t served = 0; served < o.messages;) {
    const PollResult r = poller.try_next(wc);
    if (r.count == 0) {
      if (r.error() != Condition::would_block) {
        ::close(ep);
        throw std::system_error(r.error(), "server: waiting for requests");
      }
      // Nothing yet, and the CQ is armed: sleep until the channel's fd is readable.
      epoll_event events[4];
      const int n = ::epoll_wait(ep, events, 4, timeout_ms);
      if (n > 0) ++readable;
      ++turns;
      continue;
    }
    h.check({wc, r.count});
    for (const WorkCompletion& c : std::span(wc, r.count)) {
      const std::uint32_t seq = h.received(c);
      h.send(seq, h.slot(c.wr_id));  // copies the request into a send slot first
      h.post_recv(c.wr_id);
      ++served;
    }
  }
  ::close(ep);
  while (h.unreaped > 0) h.reap();
  const PollStats& st = poller.stats();
  std::printf("server: %u requests, %llu wake-ups (%.1f requests per wake-up), "
              "%llu epoll waits (%llu saw the fd readable)\n",
              o.messages, static_cast<unsigned long long>(st.wakeups), st.completions_per_wake(),
              static_cast<unsigned long long>(turns), static_cast<unsigned long long>(readable));
  std::printf("server stats: %s\n", st.to_string().c_str());
}

// The client: bursts of requests, busy-polling for the replies.
void request(echo::Setup& s, const echo::Options& o) {
  echo::Host& h = s.client;
  BusyPoller poller(*h.rcq, h.ctx->clock());
  std::vector<std::uint8_t> req(o.size);
  WorkCompletion wc[8];
  for (std::uint32_t next = 0; next < o.messages;) {
    const std::uint32_t n = std::min(o.burst, o.messages - next);
    for (std::uint32_t i = 0; i < n; ++i) {
      echo::fill(req, next + i);
      h.send(next + i, req.data());
    }
    for (std::uint32_t got = 0; got < n;) {
      const PollResult r = poller.next(wc);
      if (r.err != 0) throw std::system_error(r.error(), "client: waiting for replies");
      h.check({wc, r.count});
      for (const WorkCompletion& c : std::span(wc, r.count)) {
        if (h.received(c) != next + got) throw std::runtime_error("client: a reply came out of order");
        h.post_recv(c.wr_id);
        ++got;
      }
    }
    next += n;
    s.pause(o.pause_us);
  }
  while (h.unreaped > 0) h.reap();
  std::printf("client: %u replies checked\n", o.messages);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const echo::Options o = echo::parse_args(argc, argv, kUsage);
    echo::Setup s(o);
    const int timeout_ms = o.timeout_ms >= 0 ? o.timeout_ms : s.world != nullptr ? 0 : 10;
    s.run([&] { serve(s.server, o, timeout_ms); }, [&] { request(s, o); });
    return 0;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "event_server: %s\n", e.what());
    return 1;
  }
}
