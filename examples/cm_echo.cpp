// cm_echo: an echo service whose connection is set up by the connection manager (rdma_cm), the
// way most RDMA applications connect: the server listens on an IP address and port, the client
// resolves that address, connects with private data, and either side may disconnect. Nobody
// exchanges GIDs, QP numbers or PSNs by hand.
//
//   cm_echo [--backend sim|ibverbs[:DEVICE]] [--server ADDR:PORT] [--client ADDR]
//           [--messages N] [--size BYTES] [--role both|server|client]
//
// Client and server run in one thread, driven by one loop over both event channels and both
// CQs (non-blocking calls only), as an event-driven server would. `--role server` and
// `--role client` run one side each, as two processes: on the simulator they meet on a fabric
// shared between processes (VERBSIM_FABRIC=<name> in both; docs/MULTIPROCESS.md). On the simulator the server
// listens on sim1's address and the client binds to sim0's; on rxe both use the device's own
// address (10.0.0.1 in the rxe VM).
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "cli.hpp"
#include "verbsim/sim/world.hpp"
#include "verbsim/verbsim.hpp"

namespace {

using namespace verbsim;

constexpr const char* kUsage =
    "usage: cm_echo [--backend sim|ibverbs[:DEVICE]] [--server ADDR:PORT] [--client ADDR]\n"
    "               [--messages N] [--size BYTES] [--role both|server|client]\n"
    "  The client connects to the server by address through the connection manager, sends\n"
    "  N messages that the server echoes, then disconnects. --role runs one side only (two\n"
    "  processes; on the simulator with VERBSIM_FABRIC=<name> set in both).\n";
constexpr std::string_view kHello = "cm_echo v1";

// One end of the connection: its CM id and the verbs resources on the id's device.
struct End {
  explicit End(const char* n) : name(n) {}

  const char* name;
  std::unique_ptr<CmId> id;
  std::unique_ptr<Context> ctx;
  std::unique_ptr<ProtectionDomain> pd;
  std::unique_ptr<CompletionQueue> cq;
  std::vector<char> buf;  // [0, size): receive, [size, 2 * size): send
  std::unique_ptr<MemoryRegion> mr;
  std::unique_ptr<QueuePair> qp;
  bool done = false;

  // Resources on the device the connection manager chose for the id.
  void create(Backend& backend, std::uint32_t size) {
    ctx = backend.open(id->device_name());
    pd = ctx->alloc_pd();
    cq = ctx->create_cq(16);
    buf.assign(2 * std::size_t{size}, 0);
    mr = pd->reg_mr(buf.data(), buf.size(), Access::local_write);
    QpInitAttr init;
    init.send_cq = cq.get();
    init.recv_cq = cq.get();
    // Room for sends whose ACK was lost (a later one completes them) under a fault plan.
    init.cap = {.max_send_wr = 8, .max_recv_wr = 2, .max_send_sge = 1, .max_recv_sge = 1};
    qp = pd->create_qp(init);
    // INIT now, so that a receive can be posted before the connection exists; connect() and
    // accept() take a QP in RESET or INIT.
    ConnectOptions opt;
    opt.port_num = id->port_num();
    modify_to_init(*qp, opt);
  }
  void post_recv(std::uint32_t size) {
    const Sge s = mr->sge(0, size);
    check(qp->post_recv(RecvWr{1, {&s, 1}}), "ibv_post_recv");
  }
  void send(std::uint32_t size) {
    const Sge s = mr->sge(size, size);
    SendWr wr;
    wr.wr_id = 2;
    wr.sg_list = {&s, 1};
    wr.flags = SendFlags::signaled;
    check(qp->post_send(wr), "ibv_post_send");
  }
  void check(const PostResult& r, const char* verb) const {
    if (!r)
      throw std::system_error(r.error(), std::string(name) + ": " + verb + " (" + r.reason + ")");
  }
  // The id goes before the QP it connected (cm.hpp), then the rest.
  void release() {
    id.reset();
    qp.reset();
    mr.reset();
    cq.reset();
    pd.reset();
    ctx.reset();
  }
};

[[noreturn]] void unexpected(const End& e, const CmEvent& ev) {
  throw std::runtime_error(std::string(e.name) + ": unexpected " + std::string(to_string(ev.type)) +
                           " (status " + std::to_string(ev.status) + ")");
}

int run(int argc, char** argv) {
  DeviceSpec spec{"sim", ""};
  std::string server_addr;
  std::string client_addr;
  std::uint64_t messages = 16;
  std::uint32_t size = 64;
  bool run_server = true;
  bool run_client = true;
  cli::for_each_flag(argc, argv, {kUsage}, [&](std::string_view flag, std::string_view value) {
    if (flag == "--backend") {
      spec = DeviceSpec::parse(value);
    } else if (flag == "--server") {
      server_addr = value;
    } else if (flag == "--client") {
      client_addr = value;
    } else if (flag == "--messages") {
      messages = cli::parse_number(flag, value, 1u << 30);
    } else if (flag == "--size") {
      size = static_cast<std::uint32_t>(cli::parse_number(flag, value, 1u << 20));
      if (size < 8) throw std::invalid_argument("--size must be at least 8");
    } else if (flag == "--role") {
      if (value != "both" && value != "server" && value != "client") {
        throw std::invalid_argument("--role is both, server or client, not '" +
                                    std::string(value) + "'");
      }
      run_server = value != "client";
      run_client = value != "server";
    } else {
      return false;
    }
    return true;
  });

  std::unique_ptr<Backend> backend;
  sim::World* world = nullptr;
  if (spec.backend == "sim") {
    sim::Config config = sim::Config::from_env();
    config.devices = std::max(config.devices, 2);
    auto w = std::make_unique<sim::World>(config);
    world = w.get();
    backend = std::move(w);
    if (server_addr.empty()) server_addr = "10.0.1.1:7471";  // sim1, port 1
    if (client_addr.empty()) client_addr = "10.0.0.1";       // sim0, port 1
  } else {
    backend = open_backend(spec.backend);
    if (server_addr.empty()) server_addr = "10.0.0.1:7471";  // rxe0 in the rxe VM
  }

  auto server_events = backend->create_cm_channel();
  auto client_events = backend->create_cm_channel();
  std::unique_ptr<CmId> listener;
  End client("client");
  End server("server");
  if (run_server) {
    listener = server_events->create_id();
    listener->bind_addr(SockAddr::parse(server_addr));
    listener->listen();
  } else {
    server.done = true;
  }
  if (run_client) {
    client.id = client_events->create_id();
    if (!client_addr.empty()) client.id->bind_addr(SockAddr::parse(client_addr));
    client.id->resolve_addr(SockAddr::parse(server_addr));
  } else {
    client.done = true;
  }
  std::printf("cm_echo: %s, server %s\n", spec.to_string().c_str(), server_addr.c_str());

  std::uint64_t echoed = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  CmEvent ev;
  WorkCompletion wc;
  while (!client.done || !server.done) {
    if ((world == nullptr || world->shared()) && std::chrono::steady_clock::now() > deadline) {
      throw std::runtime_error("no progress for 30 s");
    }
    // The client's connection steps.
    if (!client_events->get_event(ev, Wait::nonblocking)) {
      switch (ev.type) {
        case CmEventType::addr_resolved: client.id->resolve_route(); break;
        case CmEventType::route_resolved: {
          client.create(*backend, size);
          client.post_recv(size);
          ConnParam param;
          param.private_data.assign(kHello.begin(), kHello.end());
          client.id->connect(*client.qp, param);
          std::printf("  client: %s resolved to %s port %u, connecting from %s\n",
                      server_addr.c_str(), client.id->device_name().c_str(), client.id->port_num(),
                      client.id->local_addr().to_string().c_str());
          break;
        }
        case CmEventType::established:
          std::printf("  client: connected (QP %u to %u), server says \"%s\"\n",
                      client.qp->qp_num(), ev.peer_qp_num,
                      reinterpret_cast<const char*>(ev.private_data.data()));
          std::snprintf(client.buf.data() + size, size, "message %llu", 0ull);
          client.send(size);
          break;
        case CmEventType::disconnected:
          std::printf("  client: disconnected (status %d)\n", ev.status);
          client.done = true;
          break;
        case CmEventType::timewait_exit: break;  // 2 s after a disconnect: the QP may be reused
        default: unexpected(client, ev);
      }
    }
    // The server's: a request, its establishment, the client's disconnection.
    if (!server_events->get_event(ev, Wait::nonblocking)) {
      switch (ev.type) {
        case CmEventType::connect_request: {
          const std::string hello(ev.private_data.begin(), ev.private_data.begin() + kHello.size());
          if (hello != kHello) {
            ev.new_id->reject();  // not our protocol
            break;
          }
          server.id = std::move(ev.new_id);
          server.create(*backend, size);
          server.post_recv(size);
          ConnParam param;
          const std::string_view welcome = "welcome";
          param.private_data.assign(welcome.begin(), welcome.end());
          param.private_data.push_back(0);
          server.id->accept(*server.qp, param);
          std::printf("  server: request from %s on %s, accepted\n",
                      server.id->peer_addr().to_string().c_str(), server.id->device_name().c_str());
          break;
        }
        case CmEventType::established: std::printf("  server: connected\n"); break;
        case CmEventType::disconnected:
          server.id->disconnect();  // answers the client's DREQ; the QP goes to ERR
          std::printf("  server: the client disconnected, %llu messages echoed\n",
                      static_cast<unsigned long long>(echoed));
          server.done = true;
          break;
        case CmEventType::timewait_exit: break;
        default: unexpected(server, ev);
      }
    }
    // The echo: the server sends back what it received; the client checks it and sends the
    // next one, or disconnects after the last.
    if (server.cq && server.cq->poll({&wc, 1}).count == 1) {
      if (wc.status != WcStatus::success) {
        if (server.done || wc.status == WcStatus::wr_flush_err) continue;  // flushed by the ERR
        throw std::runtime_error("server: " + std::string(to_string(wc.status)));
      }
      if (wc.opcode == WcOpcode::recv) {
        std::memcpy(server.buf.data() + size, server.buf.data(), size);
        server.post_recv(size);
        server.send(size);
        ++echoed;
      }
    }
    if (client.cq && client.cq->poll({&wc, 1}).count == 1) {
      if (wc.status != WcStatus::success) {
        if (wc.status == WcStatus::wr_flush_err) continue;
        throw std::runtime_error("client: " + std::string(to_string(wc.status)));
      }
      if (wc.opcode == WcOpcode::recv) {
        if (std::memcmp(client.buf.data(), client.buf.data() + size, size) != 0) {
          throw std::runtime_error("client: the echo differs from the message");
        }
        const std::uint64_t next = std::strtoull(client.buf.data() + 8, nullptr, 10) + 1;
        if (next == messages) {
          std::printf("  client: %llu messages echoed, disconnecting\n",
                      static_cast<unsigned long long>(messages));
          client.id->disconnect();
        } else {
          client.post_recv(size);
          std::snprintf(client.buf.data() + size, size, "message %llu",
                        static_cast<unsigned long long>(next));
          client.send(size);
        }
      }
    }
  }
  if (run_server && echoed != messages) {
    throw std::runtime_error("the server echoed " + std::to_string(echoed));
  }

  client.release();
  server.release();
  listener.reset();
  if (world != nullptr) {
    std::printf("virtual time %.3f ms, digest: %s\n", static_cast<double>(world->now()) / 1e6,
                world->digest_hex().c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "cm_echo: %s\n", e.what());
    return 1;
  }
}
