// verbsim-polling-bench: what each polling strategy costs in latency and CPU.
//
//   verbsim-polling-bench [--backend SPEC] [--strategy busy|event|hybrid|all] [--bursts N]
//                         [--burst N] [--pause-us N] [--idle-us N] [--size BYTES]
//                         [--wake-ns N] [--seed N]
//
// A server answers a client's requests, one at a time: bursts of --burst requests back to back,
// then a pause of --pause-us. The server waits for each request with the strategy under test
// (verbsim/polling.hpp); the client busy-polls for the reply and measures the round trip with
// the context's clock (--client picks another strategy for it). Printed per strategy: the server's CPU use, the round-trip percentiles,
// and the server's poller statistics, as a Markdown table (docs/POLLING.md has one).
//
// On a device (--backend ibverbs) server and client are two threads, the server's CPU time is
// getrusage(RUSAGE_THREAD) over the wall time of the run, and latencies are real.
// On the simulator (the default) they are two fibers and everything is in virtual time: the
// server's "CPU" is the virtual time its poller spent awake (PollStats::polling_ns) over the
// virtual length of the run, with fibers ticking every 250 ns so that a poll costs virtual time
// (verbsim/sim/ticker.hpp). The simulator has no interrupts or scheduler, so a wake-up there is
// free unless modelled: --wake-ns N adds N ns of virtual time after each wake-up before the
// server answers (default 0). The simulator's own CPU time (getrusage of the process) is printed
// too but measures the simulator, not the strategy.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <range/v3/algorithm/sort.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include "../../examples/cli.hpp"
#include "verbsim/polling.hpp"
#include "verbsim/sim/simulation.hpp"
#include "verbsim/sim/ticker.hpp"
#include "verbsim/sim/world.hpp"
#include "verbsim/verbsim.hpp"

using namespace verbsim;

namespace {

constexpr std::uint8_t kPort = 1;
constexpr std::uint32_t kSlots = 16;  // receive buffers per side

struct Options {
  DeviceSpec spec = DeviceSpec::from_env();
  std::vector<PollStrategy> strategies{PollStrategy::busy, PollStrategy::event, PollStrategy::hybrid,
                                       PollStrategy::adaptive};
  std::uint32_t bursts = 200;
  std::uint32_t burst = 20;
  std::uint64_t pause_us = 200;
  std::uint64_t idle_us = 20;
  std::uint32_t size = 64;
  std::uint64_t wake_ns = 0;
  std::optional<std::uint64_t> seed;
  PollStrategy client = PollStrategy::busy;
};

constexpr const char* kUsage =
    "usage: verbsim-polling-bench [options]\n"
    "  --backend SPEC    sim (default), ibverbs or ibverbs:rxe0\n"
    "  --strategy S      busy, event, hybrid, adaptive or all (default all)\n"
    "  --bursts N        bursts (default 200); --burst N: requests per burst (default 20)\n"
    "  --pause-us N      pause between bursts (default 200)\n"
    "  --idle-us N       hybrid: idle period before sleeping; adaptive: its longest (default 20)\n"
    "  --size BYTES      request and reply size (default 64)\n"
    "  --wake-ns N       simulator: virtual cost of a wake-up (default 0)\n"
    "  --client S        how the client waits for replies: busy (default), event or hybrid\n"
    "  --seed N          simulator seed\n";

Options parse_args(int argc, char** argv) {
  Options o;
  cli::for_each_flag(argc, argv, {kUsage}, [&](std::string_view flag, std::string_view value) {
    if (flag == "--backend") {
      o.spec = DeviceSpec::parse(value);
    } else if (flag == "--strategy") {
      if (value != "all") o.strategies = {parse_poll_strategy(value)};
    } else if (flag == "--bursts") {
      o.bursts = static_cast<std::uint32_t>(std::max<std::uint64_t>(2, cli::parse_number(flag, value)));
    } else if (flag == "--burst") {
      o.burst = static_cast<std::uint32_t>(std::clamp<std::uint64_t>(cli::parse_number(flag, value), 1, 1u << 20));
    } else if (flag == "--pause-us") {
      o.pause_us = cli::parse_number(flag, value);
    } else if (flag == "--idle-us") {
      o.idle_us = cli::parse_number(flag, value);
    } else if (flag == "--size") {
      o.size = static_cast<std::uint32_t>(std::clamp<std::uint64_t>(cli::parse_number(flag, value), 1, 1u << 20));
    } else if (flag == "--wake-ns") {
      o.wake_ns = cli::parse_number(flag, value);
    } else if (flag == "--seed") {
      o.seed = cli::parse_number(flag, value);
    } else if (flag == "--client") {
      o.client = parse_poll_strategy(value);
    } else {
      return false;
    }
    return true;
  });
  return o;
}

// One side: its receive CQ reports to a channel; sends are signaled every 8th and reaped
// without waiting (hardware-like profiles free send slots only when a completion is polled).
struct Side {
  std::unique_ptr<Context> ctx;
  std::uint8_t gid = 0;
  std::unique_ptr<ProtectionDomain> pd;
  std::unique_ptr<CompletionChannel> channel;
  std::unique_ptr<CompletionQueue> rcq;
  std::unique_ptr<CompletionQueue> scq;
  std::vector<std::uint8_t> buf;
  std::unique_ptr<MemoryRegion> mr;
  std::unique_ptr<QueuePair> qp;
  std::uint32_t size = 0;
  std::uint64_t sends = 0;

  void create(std::uint32_t bytes) {
    size = bytes;
    gid = roce_v2_gid_index(*ctx, kPort);
    pd = ctx->alloc_pd();
    channel = ctx->create_comp_channel();
    rcq = ctx->create_cq(2 * kSlots, channel.get());
    scq = ctx->create_cq(2 * kSlots);
    buf.assign((kSlots + 1) * std::size_t{size}, 0);
    mr = pd->reg_mr(buf.data(), buf.size(), Access::local_write);
    QpInitAttr init;
    init.send_cq = scq.get();
    init.recv_cq = rcq.get();
    init.cap = {.max_send_wr = kSlots, .max_recv_wr = kSlots, .max_send_sge = 1, .max_recv_sge = 1};
    qp = pd->create_qp(init);
  }
  void post_recv(std::uint64_t slot) {
    const Sge sge = mr->sge(slot * size, size);
    if (const PostResult r = qp->post_recv(RecvWr{slot, {&sge, 1}}); !r) {
      throw std::system_error(r.error(), "ibv_post_recv");
    }
  }
  void send(std::uint32_t seq) {
    WorkCompletion wc[kSlots];
    const PollResult p = scq->poll(wc);
    for (std::uint32_t i = 0; i < p.count; ++i) {
      if (wc[i].status != WcStatus::success) throw std::runtime_error("a SEND failed");
    }
    const Sge sge = mr->sge(kSlots * std::size_t{size}, size);
    SendWr wr;
    wr.wr_id = seq;
    wr.opcode = WrOpcode::send_with_imm;
    wr.flags = ++sends % 8 == 0 ? SendFlags::signaled : SendFlags::none;
    wr.imm_data = seq;
    wr.sg_list = {&sge, 1};
    if (const PostResult r = qp->post_send(wr); !r) throw std::system_error(r.error(), "ibv_post_send");
  }
};

struct Result {
  PollStrategy strategy;
  std::uint64_t requests = 0;
  double server_cpu = 0;  // cores
  double p50_us = 0, p90_us = 0, p99_us = 0, max_us = 0;
  PollStats stats;
  double process_cpu_s = 0;  // simulator: the simulator's own CPU time
};

std::uint64_t cpu_ns(int who) {
  rusage u{};
  ::getrusage(who, &u);
  const auto ns = [](const timeval& t) {
    return static_cast<std::uint64_t>(t.tv_sec) * 1'000'000'000ull + static_cast<std::uint64_t>(t.tv_usec) * 1000ull;
  };
  return ns(u.ru_utime) + ns(u.ru_stime);
}

class Bench {
 public:
  explicit Bench(const Options& o) : o_(o) {
    std::string server_dev = o.spec.device;
    std::string client_dev = o.spec.device;
    if (o.spec.backend == "sim") {
      sim::Config config = sim::Config::from_env();
      if (o.seed) config.seed = *o.seed;
      config.devices = std::max(config.devices, 2);
      auto w = std::make_unique<sim::World>(config);
      world_ = w.get();
      backend_ = std::move(w);
      server_dev = "sim1";
      client_dev = "sim0";
    } else {
      backend_ = open_backend(o.spec.backend);
    }
    server_.ctx = backend_->open(server_dev);
    client_.ctx = backend_->open(client_dev);
    server_.create(o.size);
    client_.create(o.size);
    const Endpoint se{server_.ctx->query_gid(kPort, server_.gid), server_.qp->qp_num(), 0x2000};
    const Endpoint ce{client_.ctx->query_gid(kPort, client_.gid), client_.qp->qp_num(), 0x1000};
    connect(*server_.qp, se.psn, ce, {.sgid_index = server_.gid});
    connect(*client_.qp, ce.psn, se, {.sgid_index = client_.gid});
    for (std::uint64_t i = 0; i < kSlots; ++i) {
      server_.post_recv(i);
      client_.post_recv(i);
    }
  }
  ~Bench() {
    for (Side* s : {&client_, &server_}) {
      s->qp.reset();
      s->mr.reset();
      s->scq.reset();
      s->rcq.reset();
      s->channel.reset();
      s->pd.reset();
      s->ctx.reset();
    }
  }

  sim::World* world() const noexcept { return world_; }
  const char* backend_name() const noexcept { return world_ != nullptr ? "sim" : "ibverbs"; }
  std::string device() const { return server_.ctx->info().name; }

  Result run(PollStrategy strategy) {
    Result res;
    res.strategy = strategy;
    const std::uint32_t total = o_.bursts * o_.burst;
    const std::uint32_t warmup = o_.burst;  // the first burst is not measured
    std::vector<std::uint64_t> rtt(total);
    std::uint64_t server_cpu = 0;
    std::uint64_t server_wall = 0;
    const std::uint64_t process0 = cpu_ns(RUSAGE_SELF);
    auto poller = make_poller(strategy, *server_.rcq, server_.channel.get(), server_.ctx->clock(),
                              o_.idle_us * 1000);

    auto serve = [&] {
      const Clock& clock = server_.ctx->clock();
      WorkCompletion wc[kSlots];
      std::uint64_t t0 = 0;
      std::uint64_t cpu0 = 0;
      for (std::uint32_t n = 0; n < total;) {
        if (n == warmup) {
          poller->reset_stats();
          t0 = clock.now_ns();
          cpu0 = cpu_ns(RUSAGE_THREAD);
        }
        const std::uint64_t woke = poller->stats().wakeups;
        const PollResult r = poller->next(wc);
        if (r.err != 0) throw std::system_error(r.error(), "server");
        // The simulator's model of what a wake-up costs on a host: interrupt, event, scheduler.
        if (world_ != nullptr && o_.wake_ns > 0 && poller->stats().wakeups != woke) {
          sim::sleep_for(*world_, std::chrono::nanoseconds(o_.wake_ns));
        }
        for (std::uint32_t i = 0; i < r.count; ++i) {
          if (wc[i].status != WcStatus::success) throw std::runtime_error("a request failed");
          server_.send(wc[i].imm_data);
          server_.post_recv(wc[i].wr_id);
        }
        n += r.count;
      }
      server_wall = clock.now_ns() - t0;
      server_cpu = cpu_ns(RUSAGE_THREAD) - cpu0;
    };
    auto request = [&] {
      const Clock& clock = client_.ctx->clock();
      auto waiter = make_poller(o_.client, *client_.rcq, client_.channel.get(), clock, o_.idle_us * 1000);
      WorkCompletion wc[1];
      for (std::uint32_t seq = 0; seq < total; ++seq) {
        const std::uint64_t t = clock.now_ns();
        client_.send(seq);
        const PollResult r = waiter->next(wc);
        if (r.error() || wc[0].status != WcStatus::success || wc[0].imm_data != seq) {
          throw std::runtime_error("client: bad reply");
        }
        rtt[seq] = clock.now_ns() - t;
        client_.post_recv(wc[0].wr_id);
        if ((seq + 1) % o_.burst == 0) pause();
      }
    };
    run_hosts(serve, request);

    std::vector<std::uint64_t> measured(rtt.begin() + warmup, rtt.end());
    ranges::sort(measured);
    const auto at = [&](double p) {
      return static_cast<double>(measured[static_cast<std::size_t>(p * static_cast<double>(measured.size() - 1))]) / 1e3;
    };
    res.requests = measured.size();
    res.p50_us = at(0.5);
    res.p90_us = at(0.9);
    res.p99_us = at(0.99);
    res.max_us = at(1.0);
    res.stats = poller->stats();
    const double wall = static_cast<double>(std::max<std::uint64_t>(server_wall, 1));
    // On the simulator the server's CPU is the virtual time its poller was awake.
    res.server_cpu = world_ != nullptr ? static_cast<double>(res.stats.polling_ns) / wall
                                       : static_cast<double>(server_cpu) / wall;
    res.process_cpu_s = static_cast<double>(cpu_ns(RUSAGE_SELF) - process0) / 1e9;
    return res;
  }

 private:
  void pause() const {
    if (o_.pause_us == 0) return;
    if (world_ != nullptr) {
      sim::sleep_for(*world_, std::chrono::microseconds(o_.pause_us));
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(o_.pause_us));
    }
  }

  void run_hosts(const std::function<void()>& server, const std::function<void()>& client) {
    if (world_ != nullptr) {
      sim::Simulation sim(*world_);
      bool running = true;
      sim.spawn("server", [&] {
        server();
        running = false;
      });
      sim.spawn("client", client);
      sim::spawn_tickers(sim, std::chrono::nanoseconds(250), running);
      sim.run();
      return;
    }
    std::exception_ptr error;
    std::thread t([&] {
      try {
        server();
      } catch (...) {
        error = std::current_exception();
      }
    });
    try {
      client();
    } catch (...) {
      t.detach();  // the server may wait for a request forever: leave it to the process exit
      throw;
    }
    t.join();
    if (error) std::rethrow_exception(error);
  }

  Options o_;
  std::unique_ptr<Backend> backend_;
  sim::World* world_ = nullptr;
  Side server_;
  Side client_;
};

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse_args(argc, argv);
    Bench bench(o);
    std::printf("# %s on %s: %u bursts of %u requests of %u bytes, %llu us pauses, hybrid idle %llu us, "
                "client %s%s\n",
                bench.backend_name(), bench.device().c_str(), o.bursts, o.burst, o.size,
                static_cast<unsigned long long>(o.pause_us), static_cast<unsigned long long>(o.idle_us),
                std::string(to_string(o.client)).c_str(),
                bench.world() != nullptr ? (", virtual time, wake-up cost " + std::to_string(o.wake_ns) + " ns").c_str() : "");
    std::printf("| strategy | server CPU (cores) | RTT p50 (us) | p90 | p99 | max | wake-ups | polls per request |%s\n",
                bench.world() != nullptr ? " simulator CPU (s) |" : "");
    std::printf("|---|---|---|---|---|---|---|---|%s\n", bench.world() != nullptr ? "---|" : "");
    for (const PollStrategy s : o.strategies) {
      const Result r = bench.run(s);
      std::printf("| %s | %.3f | %.2f | %.2f | %.2f | %.2f | %llu | %.1f |", std::string(to_string(s)).c_str(),
                  r.server_cpu, r.p50_us, r.p90_us, r.p99_us, r.max_us,
                  static_cast<unsigned long long>(r.stats.wakeups),
                  static_cast<double>(r.stats.polls) / static_cast<double>(r.requests));
      if (bench.world() != nullptr) std::printf(" %.2f |", r.process_cpu_s);
      std::printf("\n");
      std::fflush(stdout);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "verbsim-polling-bench: %s\n", e.what());
    return 1;
  }
}
