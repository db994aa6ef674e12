// What examples/event_server.cpp and examples/hybrid_client.cpp share: a server and a client in
// one process exchanging numbered messages whose bytes are checked on arrival. Each side is a
// host with its own device context, PD, memory region, a receive CQ on a completion channel (for
// the pollers of verbsim/polling.hpp) and a send CQ.
//
// Hosts run as two threads on an RDMA device (one device, the two QPs talk through its
// loopback), and as two fibers of one sim::Simulation on the simulator (two devices of one
// world), so the same host code runs on both backends (sim::run_hosts, verbsim/sim/hosts.hpp).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <range/v3/view/filter.hpp>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "cli.hpp"
#include "verbsim/sim/hosts.hpp"
#include "verbsim/sim/world.hpp"
#include "verbsim/verbsim.hpp"

namespace echo {

using namespace verbsim;

constexpr std::uint8_t kPort = 1;
constexpr std::uint32_t kSlots = 32;  // receive buffers per host

struct Options {
  DeviceSpec spec = DeviceSpec::from_env();
  std::uint32_t messages = 200;
  std::uint32_t burst = 10;
  std::uint64_t pause_us = 50;  // between bursts
  std::uint32_t size = 64;
  std::optional<std::uint64_t> seed;
  std::optional<std::string> faults;
  std::uint64_t idle_us = 20;   // hybrid_client: idle period before sleeping
  int timeout_ms = -1;          // event_server: epoll_wait timeout (-1: 0 on the simulator, else 10)
};

inline constexpr const char* kCommonUsage =
    "  --backend SPEC    sim, ibverbs or ibverbs:rxe0 (default: $VERBSIM_BACKEND, else sim)\n"
    "  --messages N      requests (default 200)\n"
    "  --burst N         requests per burst, sent back to back (default 10)\n"
    "  --pause-us N      pause between bursts (default 50)\n"
    "  --size BYTES      message size, at least 16 (default 64)\n"
    "  --seed N          simulator seed; --faults PLAN: simulator fault plan (see the README)\n";

inline Options parse_args(int argc, char** argv, const char* usage) {
  Options o;
  cli::for_each_flag(argc, argv, {usage, kCommonUsage}, [&](std::string_view flag, std::string_view value) {
    if (flag == "--backend") {
      o.spec = DeviceSpec::parse(value);
    } else if (flag == "--messages") {
      o.messages = static_cast<std::uint32_t>(std::max<std::uint64_t>(1, cli::parse_number(flag, value, 1u << 30)));
    } else if (flag == "--burst") {
      o.burst = static_cast<std::uint32_t>(std::max<std::uint64_t>(1, cli::parse_number(flag, value, kSlots)));
    } else if (flag == "--pause-us") {
      o.pause_us = cli::parse_number(flag, value, 10'000'000);
    } else if (flag == "--size") {
      o.size = static_cast<std::uint32_t>(std::max<std::uint64_t>(16, cli::parse_number(flag, value, 1u << 20)));
    } else if (flag == "--seed") {
      o.seed = cli::parse_number(flag, value, UINT64_MAX);
    } else if (flag == "--faults") {
      o.faults = std::string(value);
    } else if (flag == "--idle-us") {
      o.idle_us = cli::parse_number(flag, value, 10'000'000);
    } else if (flag == "--timeout-ms") {
      o.timeout_ms = static_cast<int>(cli::parse_number(flag, value, 60'000));
    } else {
      return false;
    }
    return true;
  });
  return o;
}

// Payload of message `seq`: an 8-byte header (free for a timestamp), then bytes that depend on
// `seq`, so that a stale or misplaced buffer cannot pass the check.
constexpr std::uint32_t kHeader = 8;
inline void fill(std::span<std::uint8_t> b, std::uint32_t seq) {
  for (std::size_t j = kHeader; j < b.size(); ++j) b[j] = static_cast<std::uint8_t>((seq * 7 + j) % 251);
}
inline bool matches(std::span<const std::uint8_t> b, std::uint32_t seq) {
  for (std::size_t j = kHeader; j < b.size(); ++j) {
    if (b[j] != static_cast<std::uint8_t>((seq * 7 + j) % 251)) return false;
  }
  return true;
}

// One side of the echo service. Receive slot i is bytes [i*size, (i+1)*size) of the buffer; kSlots
// send slots follow the kSlots receive slots.
struct Host {
  explicit Host(const char* r) : role(r) {}

  const char* role;
  std::unique_ptr<Context> ctx;
  std::uint8_t gid_index = 0;
  std::unique_ptr<ProtectionDomain> pd;
  std::unique_ptr<CompletionChannel> channel;
  std::unique_ptr<CompletionQueue> rcq;  // receives, on the channel
  std::unique_ptr<CompletionQueue> scq;  // sends, polled
  std::vector<std::uint8_t> buf;
  std::unique_ptr<MemoryRegion> mr;
  std::unique_ptr<QueuePair> qp;
  std::uint32_t size = 0;
  std::uint32_t unreaped = 0;  // signaled sends whose completion was not polled yet

  std::uint8_t* slot(std::uint64_t i) { return buf.data() + i * size; }

  void create(std::uint32_t bytes) {
    size = bytes;
    gid_index = roce_v2_gid_index(*ctx, kPort);
    pd = ctx->alloc_pd();
    channel = ctx->create_comp_channel();
    rcq = ctx->create_cq(2 * kSlots, channel.get());
    scq = ctx->create_cq(2 * kSlots);
    buf.assign(2 * kSlots * std::size_t{size}, 0);
    mr = pd->reg_mr(buf.data(), buf.size(), Access::local_write);
    QpInitAttr init;
    init.send_cq = scq.get();
    init.recv_cq = rcq.get();
    init.cap = {.max_send_wr = kSlots, .max_recv_wr = kSlots, .max_send_sge = 1, .max_recv_sge = 1};
    qp = pd->create_qp(init);
  }
  Endpoint endpoint(std::uint32_t psn) const { return {ctx->query_gid(kPort, gid_index), qp->qp_num(), psn}; }

  void post_recv(std::uint64_t i) {
    const Sge sge = mr->sge(i * size, size);
    if (const PostResult r = qp->post_recv(RecvWr{i, {&sge, 1}}); !r) {
      throw std::system_error(r.error(), std::string(role) + ": ibv_post_recv (" + r.reason + ")");
    }
  }
  // Sends `seq` as immediate data with its payload from tx slot seq % kSlots. Every send is
  // signaled; at most kSlots/2 go unreaped, so the send queue never fills and a tx slot is
  // reused only after its previous SEND completed (completions come in order).
  void send(std::uint32_t seq, const std::uint8_t* payload) {
    while (unreaped >= kSlots / 2) reap();
    const std::size_t offset = (kSlots + seq % kSlots) * std::size_t{size};
    std::memcpy(buf.data() + offset, payload, size);
    const Sge sge = mr->sge(offset, size);
    SendWr wr;
    wr.wr_id = seq;
    wr.opcode = WrOpcode::send_with_imm;
    wr.flags = SendFlags::signaled;
    wr.imm_data = seq;
    wr.sg_list = {&sge, 1};
    if (const PostResult r = qp->post_send(wr); !r) {
      throw std::system_error(r.error(), std::string(role) + ": ibv_post_send (" + r.reason + ")");
    }
    ++unreaped;
  }
  // Takes the send completions there are, without waiting.
  void reap() {
    WorkCompletion wc[16];
    const PollResult r = scq->poll(wc);
    if (r.err != 0) throw std::system_error(r.error(), std::string(role) + ": ibv_poll_cq");
    check(std::span<const WorkCompletion>(wc, r.count));
    unreaped -= r.count;
  }
  // The request or reply in receive completion `wc`: checks its length and bytes, returns its
  // sequence number.
  std::uint32_t received(const WorkCompletion& wc) {
    const std::uint32_t seq = wc.imm_data;
    if (wc.byte_len != size || !matches({slot(wc.wr_id), size}, seq)) {
      throw std::runtime_error(std::string(role) + ": message " + std::to_string(seq) + " is corrupt");
    }
    return seq;
  }
  // A failed completion ends the program (its status says why).
  void check(std::span<const WorkCompletion> wcs) const {
    const auto failed = [](const WorkCompletion& c) { return c.status != WcStatus::success; };
    for (const WorkCompletion& c : wcs | ranges::views::filter(failed)) {
      throw std::runtime_error(std::string(role) + ": work request " + std::to_string(c.wr_id) +
                               " completed with " + std::string(to_string(c.status)));
    }
  }
};

// The backend and the two hosts, created, connected, receives posted. On the simulator the
// backend is our own sim::World (for its Simulation and virtual clock).
struct Setup {
  std::unique_ptr<Backend> backend;
  sim::World* world = nullptr;
  Host server{"server"};
  Host client{"client"};

  explicit Setup(const Options& o) {
    std::string client_dev = o.spec.device;
    std::string server_dev = o.spec.device;
    if (o.spec.backend == "sim") {
      sim::Config config = sim::Config::from_env();
      if (o.seed) config.seed = *o.seed;
      if (o.faults) config.faults = sim::FaultPlan::parse(*o.faults);
      config.devices = std::max(config.devices, 2);
      auto w = std::make_unique<sim::World>(config);
      world = w.get();
      backend = std::move(w);
      if (client_dev.empty()) client_dev = "sim0";
      server_dev = client_dev == "sim1" ? "sim0" : "sim1";
    } else {
      backend = open_backend(o.spec.backend);
    }
    server.ctx = backend->open(server_dev);
    client.ctx = backend->open(client_dev);
    server.create(o.size);
    client.create(o.size);
    connect(*server.qp, 0x2000, client.endpoint(0x1000), {.sgid_index = server.gid_index});
    connect(*client.qp, 0x1000, server.endpoint(0x2000), {.sgid_index = client.gid_index});
    for (std::uint64_t i = 0; i < kSlots; ++i) {
      server.post_recv(i);
      client.post_recv(i);
    }
    std::printf("backend %s", std::string(backend->name()).c_str());
    if (world != nullptr) std::printf(" (seed %llu, virtual time)", static_cast<unsigned long long>(world->seed()));
    std::printf(": server on %s, client on %s\n", server.ctx->info().name.c_str(),
                client.ctx->info().name.c_str());
  }
  ~Setup() {
    for (Host* h : {&client, &server}) {
      h->qp.reset();
      h->mr.reset();
      h->scq.reset();
      h->rcq.reset();
      h->channel.reset();
      h->pd.reset();
      h->ctx.reset();
    }
  }

  // Runs the two hosts to completion (sim::run_hosts): fibers on the simulator, threads on
  // hardware. An exception in either is rethrown here.
  void run(std::function<void()> server_body, std::function<void()> client_body) {
    sim::run_hosts(world, {{"server", std::move(server_body)}, {"client", std::move(client_body)}});
  }

  // The client's pause between bursts: virtual time on the simulator, real time on hardware.
  void pause(std::uint64_t us) const { sim::pause(world, std::chrono::microseconds(us)); }
};

}  // namespace echo
