// pingpong: the five steps of every verbs program, on the simulator or on an RDMA device.
//
//   pingpong [--backend SPEC] [--iters N] [--size BYTES] [--seed N] [--faults PLAN]
//
// A client QP sends --size bytes to a server QP with an RC SEND and the server sends them back,
// --iters times. Both QPs live in this process, so step 3's out-of-band "exchange" is a struct
// copy; between two hosts the same Endpoint would travel over a TCP socket.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "cli.hpp"
#include "verbsim/sim/world.hpp"
#include "verbsim/verbsim.hpp"

using namespace verbsim;

namespace {

constexpr std::uint8_t kPort = 1;
// wr_id tells which work request a completion is for; programs often store an index there.
constexpr std::uint64_t kRecvId = 1;
constexpr std::uint64_t kSendId = 2;

struct Options {
  DeviceSpec spec = DeviceSpec::from_env();
  std::uint64_t iters = 1000;
  std::uint32_t size = 64;
  std::optional<std::uint64_t> seed;
  std::optional<std::string> faults;
};

constexpr const char* kUsage =
    "usage: pingpong [--backend SPEC] [--iters N] [--size BYTES] [--seed N] [--faults PLAN]\n"
    "  --backend SPEC  sim, sim:sim1, ibverbs or ibverbs:rxe0 (default: $VERBSIM_BACKEND,\n"
    "                  $VERBSIM_DEVICE, else sim)\n"
    "  --iters N       round trips (default 1000)\n"
    "  --size BYTES    message size (default 64)\n"
    "  --seed N        simulator seed (default 1; $VERBSIM_SEED, when set, wins)\n"
    "  --faults PLAN   simulator fault plan, e.g. 'drop p=0.01; post_send every=50 errno=EAGAIN'\n"
    "                  (default: $VERBSIM_FAULTS; see the README)\n";

Options parse_args(int argc, char** argv) {
  Options o;
  cli::for_each_flag(argc, argv, {kUsage}, [&](std::string_view flag, std::string_view value) {
    if (flag == "--backend") {
      o.spec = DeviceSpec::parse(value);
    } else if (flag == "--iters") {
      o.iters = std::max<std::uint64_t>(1, cli::parse_number(flag, value, UINT32_MAX));
    } else if (flag == "--size") {
      o.size = static_cast<std::uint32_t>(
          std::max<std::uint64_t>(1, cli::parse_number(flag, value, 1u << 30)));
    } else if (flag == "--seed") {
      o.seed = cli::parse_number(flag, value, UINT64_MAX);
    } else if (flag == "--faults") {
      o.faults = std::string(value);
    } else {
      return false;
    }
    return true;
  });
  return o;
}

// Everything one side of the connection creates, declared in creation order so that even an
// early exit (an exception) destroys them in the right order.
struct Side {
  explicit Side(const char* r) : role(r) {}

  const char* role;
  std::unique_ptr<Context> ctx;
  std::uint8_t gid_index = 0;
  std::unique_ptr<ProtectionDomain> pd;
  std::unique_ptr<CompletionQueue> cq;
  std::vector<std::uint8_t> buf;  // [0, size): what this side sends, [size, 2 size): receives
  std::unique_ptr<MemoryRegion> mr;
  std::unique_ptr<QueuePair> qp;
  std::uint32_t size = 0;
  Side* peer = nullptr;

  std::span<std::uint8_t> tx() { return {buf.data(), size}; }
  std::span<std::uint8_t> rx() { return {buf.data() + size, size}; }

  void post_recv() {
    const Sge sge = mr->sge(size, size);
    if (const PostResult r = qp->post_recv(RecvWr{kRecvId, {&sge, 1}}); !r) {
      throw std::system_error(r.error(), std::string(role) + ": ibv_post_recv (" + r.reason + ")");
    }
  }
  void post_send() {
    const Sge sge = mr->sge(0, size);
    SendWr wr;
    wr.wr_id = kSendId;
    wr.opcode = WrOpcode::send;
    wr.flags = SendFlags::signaled;
    wr.sg_list = {&sge, 1};
    if (const PostResult r = qp->post_send(wr); !r) {
      throw std::system_error(r.error(), std::string(role) + ": ibv_post_send (" + r.reason + ")");
    }
  }
  // Busy-polls the CQ until `n` completions arrived (on the simulator an empty poll lets virtual
  // time move on). A failed completion, or a receive of the wrong length, ends the program.
  void await(int n, const sim::World* world) {
    WorkCompletion wc[2];
    while (n > 0) {
      const PollResult r = cq->poll(std::span(wc, std::min(n, 2)));
      if (r.err != 0) throw std::system_error(r.error(), std::string(role) + ": ibv_poll_cq");
      check_completions(std::span(wc, r.count));
      n -= static_cast<int>(r.count);
      if (r.count == 0 && world != nullptr && world->pending_events() == 0) {
        // The simulated fabric is idle, so this wait would never end: say why if the peer knows.
        const PollResult p = peer->cq->poll(wc);
        peer->check_completions(std::span(wc, p.count));
        throw std::runtime_error(std::string(role) + ": waiting for a completion that never comes");
      }
    }
  }
  void check_completions(std::span<const WorkCompletion> wcs) const {
    for (const WorkCompletion& c : wcs) {
      // Of a failed completion only status, wr_id and qp_num are valid (not opcode).
      const char* wr = c.wr_id == kRecvId ? "receive" : "SEND";
      if (c.status != WcStatus::success) {
        throw std::runtime_error(std::string(role) + ": " + wr + " completed with status " +
                                 std::string(to_string(c.status)));
      }
      if (c.wr_id == kRecvId && c.byte_len != size) {
        throw std::runtime_error(std::string(role) + ": received " + std::to_string(c.byte_len) +
                                 " bytes, expected " + std::to_string(size));
      }
    }
  }
};

// (2) resources: a PD, a CQ for both queues, an RC QP and one registered buffer.
void create_resources(Side& s, std::uint32_t size) {
  s.size = size;
  s.gid_index = roce_v2_gid_index(*s.ctx, kPort);
  s.pd = s.ctx->alloc_pd();
  s.cq = s.ctx->create_cq(4);
  s.buf.assign(2 * std::size_t{size}, 0);
  s.mr = s.pd->reg_mr(s.buf.data(), s.buf.size(), Access::local_write);
  QpInitAttr init;
  init.type = QpType::rc;
  init.send_cq = s.cq.get();
  init.recv_cq = s.cq.get();
  init.cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1};
  s.qp = s.pd->create_qp(init);
}

// Payload of round trip `iter`: it changes every time, so a stale buffer cannot pass the check.
void fill(std::span<std::uint8_t> buf, std::uint64_t iter) {
  for (std::size_t j = 0; j < buf.size(); ++j) buf[j] = static_cast<std::uint8_t>((iter + j) % 251);
}
void check(const Side& s, std::span<const std::uint8_t> buf, std::uint64_t iter) {
  for (std::size_t j = 0; j < buf.size(); ++j) {
    if (buf[j] != static_cast<std::uint8_t>((iter + j) % 251)) {
      throw std::runtime_error(std::string(s.role) + ": round trip " + std::to_string(iter) +
                               ": byte " + std::to_string(j) + " is wrong");
    }
  }
}

int run(const Options& opt) {
  // (1) init. On the simulator the backend is a sim::World of our own, so that we can read its
  // virtual clock and digest; client and server are two devices of that one fabric. On
  // hardware both sides open the same device and talk through its loopback.
  std::unique_ptr<Backend> backend;
  sim::World* world = nullptr;
  std::string client_dev = opt.spec.device;
  std::string server_dev = opt.spec.device;
  if (opt.spec.backend == "sim") {
    sim::Config config = sim::Config::from_env();
    if (opt.seed) config.seed = *opt.seed;
    if (opt.faults) config.faults = sim::FaultPlan::parse(*opt.faults);
    config.devices = std::max(config.devices, 2);
    auto w = std::make_unique<sim::World>(config);
    world = w.get();
    backend = log_verbs_from_env(std::move(w));  // VERBSIM_VERB_LOG, as open_backend() does
    if (client_dev.empty()) client_dev = "sim0";
    server_dev = client_dev == "sim1" ? "sim0" : "sim1";
  } else {
    if (opt.seed) std::fputs("pingpong: --seed only applies to the simulator\n", stderr);
    backend = open_backend(opt.spec.backend);
  }
  Side client("client");
  Side server("server");
  client.peer = &server;
  server.peer = &client;
  client.ctx = backend->open(client_dev);
  server.ctx = backend->open(server_dev);
  std::printf("[1/5] init: backend %s", std::string(backend->name()).c_str());
  if (world != nullptr) std::printf(" (seed %llu)", static_cast<unsigned long long>(world->seed()));
  if (world != nullptr && !world->config().faults.empty()) {
    std::printf(", faults '%s'", world->config().faults.to_string().c_str());
  }
  std::printf(", client on %s, server on %s\n", client.ctx->info().name.c_str(),
              server.ctx->info().name.c_str());

  create_resources(client, opt.size);
  create_resources(server, opt.size);
  std::printf("[2/5] resources: PD, CQ, RC QP and a %zu-byte MR on each side\n", client.buf.size());

  // (3) connect: each side publishes an Endpoint (GID, QP number, first PSN) and moves its QP
  // RESET -> INIT -> RTR (towards the peer's Endpoint) -> RTS. Real programs pick a random
  // first PSN; fixed ones keep the simulated run the same every time.
  const Endpoint client_ep{client.ctx->query_gid(kPort, client.gid_index), client.qp->qp_num(),
                           0x1000};
  const Endpoint server_ep{server.ctx->query_gid(kPort, server.gid_index), server.qp->qp_num(),
                           0x2000};
  connect(*client.qp, client_ep.psn, server_ep, {.sgid_index = client.gid_index});
  connect(*server.qp, server_ep.psn, client_ep, {.sgid_index = server.gid_index});
  std::printf("[3/5] connect: exchanged endpoints, both QPs in RTS\n");
  for (const auto& [side, ep] : {std::pair{&client, client_ep}, std::pair{&server, server_ep}}) {
    std::printf("      %s: QP 0x%06x, PSN 0x%06x, GID %s (index %d)\n", side->role, ep.qpn, ep.psn,
                ep.gid.to_string().c_str(), side->gid_index);
  }

  // (4) transfer. Each side's receive is posted before the peer's SEND can arrive, and a send
  // buffer is reused only after its SEND completed.
  const auto clock_ns = [world] {
    if (world != nullptr) return world->now();  // virtual nanoseconds
    const auto t = std::chrono::steady_clock::now().time_since_epoch();
    return static_cast<std::uint64_t>(std::chrono::nanoseconds(t).count());
  };
  const std::uint64_t start = clock_ns();
  server.post_recv();
  for (std::uint64_t i = 0; i < opt.iters; ++i) {
    client.post_recv();  // for the reply
    fill(client.tx(), i);
    client.post_send();

    // The request and, from the second round on, the previous reply's SEND completion.
    server.await(i == 0 ? 1 : 2, world);
    check(server, server.rx(), i);
    std::memcpy(server.tx().data(), server.rx().data(), opt.size);
    server.post_recv();  // for the next request, before this reply lets the client send it
    server.post_send();

    client.await(2, world);  // its SEND completion and the reply, in either order
    check(client, client.rx(), i);
  }
  const std::uint64_t elapsed_ns = clock_ns() - start;
  server.await(1, world);  // the last reply's SEND completion
  std::printf("[4/5] transfer: %llu round trips of %u bytes, each checked: %.3f us average (%s)\n",
              static_cast<unsigned long long>(opt.iters), opt.size,
              static_cast<double>(elapsed_ns) / 1e3 / static_cast<double>(opt.iters),
              world != nullptr ? "virtual time" : "steady_clock");

  // (5) clean up, users before what they use. destroy() reports EBUSY as a VerbError where
  // plain destruction could only warn.
  for (Side* s : {&client, &server}) verbsim::destroy(s->qp);
  for (Side* s : {&client, &server}) verbsim::destroy(s->mr);
  for (Side* s : {&client, &server}) verbsim::destroy(s->cq);
  for (Side* s : {&client, &server}) verbsim::destroy(s->pd);
  for (Side* s : {&client, &server}) verbsim::destroy(s->ctx);
  const std::string digest = world != nullptr ? world->digest_hex() : "";
  backend.reset();
  std::printf("[5/5] clean up: QPs, MRs, CQs, PDs, contexts and backend destroyed\n");
  if (world != nullptr) std::printf("digest: %s\n", digest.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse_args(argc, argv));
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "pingpong: %s\n", e.what());
    return 1;
  }
}
