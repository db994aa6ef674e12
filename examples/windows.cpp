// windows: one-shot remote access with memory windows, the pattern of storage protocols
// (NVMe over RDMA, iSER, SMB Direct). For each request the server binds a type 2 window over
// the buffer the client may fill and sends the client its key; the client RDMA WRITEs the data
// through the window, then answers with a SEND_WITH_INV that names the key, so the window is
// closed by the time the server sees the answer (its completion carries the key invalidated).
// A WRITE that comes late, with the old key, fails with REM_ACCESS_ERR.
//
//   windows [--backend sim|ibverbs[:DEVICE]] [--requests N] [--size BYTES]
//
// On the simulator client and server are two devices of one world; on hardware (rxe) both
// sides use the device's loopback.
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
    "usage: windows [--backend sim|ibverbs[:DEVICE]] [--requests N] [--size BYTES]\n"
    "  Each request: the server binds a type 2 memory window over its buffer, the client\n"
    "  RDMA WRITEs through it and closes it with a SEND_WITH_INV; a late WRITE must fail.\n";

struct Side {
  std::unique_ptr<Context> ctx;
  std::unique_ptr<ProtectionDomain> pd;
  std::unique_ptr<CompletionQueue> cq;
  std::vector<char> buf;
  std::unique_ptr<MemoryRegion> mr;
  std::unique_ptr<QueuePair> qp;
};

void create(Side& s, std::size_t size, Access access) {
  s.pd = s.ctx->alloc_pd();
  s.cq = s.ctx->create_cq(16);
  s.buf.assign(size, 0);
  s.mr = s.pd->reg_mr(s.buf.data(), s.buf.size(), access);
  QpInitAttr init;
  init.send_cq = s.cq.get();
  init.recv_cq = s.cq.get();
  init.cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1};
  s.qp = s.pd->create_qp(init);
}

void posted(const PostResult& r, const char* verb) {
  if (!r) throw std::system_error(r.error(), std::string(verb) + " (" + r.reason + ")");
}

// The next completion of `cq` (busy polling; on the simulator an empty poll moves virtual time).
WorkCompletion next(CompletionQueue& cq, const sim::World* world) {
  WorkCompletion wc;
  for (;;) {
    const PollResult r = cq.poll(std::span(&wc, 1));
    if (r.err != 0) throw std::system_error(r.error(), "ibv_poll_cq");
    if (r.count == 1) return wc;
    if (world != nullptr && world->pending_events() == 0) {
      throw std::runtime_error("waiting for a completion that never comes");
    }
  }
}

WorkCompletion expect(CompletionQueue& cq, const sim::World* world, WcStatus status,
                      const char* what) {
  const WorkCompletion wc = next(cq, world);
  if (wc.status != status) {
    throw std::runtime_error(std::string(what) + ": " + std::string(to_string(wc.status)) +
                             ", expected " + std::string(to_string(status)));
  }
  return wc;
}

int run(int argc, char** argv) {
  DeviceSpec spec = DeviceSpec::parse("sim");
  std::uint64_t requests = 4;
  std::uint32_t size = 4096;
  cli::for_each_flag(argc, argv, {kUsage}, [&](std::string_view flag, std::string_view value) {
    if (flag == "--backend") {
      spec = DeviceSpec::parse(value);
    } else if (flag == "--requests") {
      requests = std::max<std::uint64_t>(1, cli::parse_number(flag, value, 1u << 20));
    } else if (flag == "--size") {
      size = static_cast<std::uint32_t>(
          std::max<std::uint64_t>(8, cli::parse_number(flag, value, 1u << 24)));
    } else {
      return false;
    }
    return true;
  });

  std::unique_ptr<Backend> backend;
  sim::World* world = nullptr;
  std::string client_dev = spec.device;
  std::string server_dev = spec.device;
  if (spec.backend == "sim") {
    sim::Config config = sim::Config::from_env();
    config.devices = std::max(config.devices, 2);
    auto w = std::make_unique<sim::World>(config);
    world = w.get();
    backend = std::move(w);
    client_dev = "sim0";
    server_dev = "sim1";
  } else {
    backend = open_backend(spec.backend);
  }
  Side client;
  Side server;
  client.ctx = backend->open(client_dev);
  server.ctx = backend->open(server_dev);
  if (!server.ctx->query_device().mw_type2) {
    std::printf("windows: %s has no type 2 memory windows\n", server.ctx->info().name.c_str());
    return 77;
  }
  // The server's MR itself grants no remote access: only its windows do.
  create(client, size, Access::local_write);
  create(server, size, Access::local_write | Access::mw_bind);
  const auto gid_index = [](Context& ctx) { return roce_v2_gid_index(ctx, 1); };
  const std::uint8_t cg = gid_index(*client.ctx);
  const std::uint8_t sg = gid_index(*server.ctx);
  connect(*client.qp, 100, {server.ctx->query_gid(1, sg), server.qp->qp_num(), 200},
          {.sgid_index = cg});
  connect(*server.qp, 200, {client.ctx->query_gid(1, cg), client.qp->qp_num(), 100},
          {.sgid_index = sg});
  auto window = server.pd->alloc_mw(MwType::type2);
  std::printf("windows: %s, client %s, server %s, %llu requests of %u bytes\n",
              std::string(backend->name()).c_str(), client.ctx->info().name.c_str(),
              server.ctx->info().name.c_str(), static_cast<unsigned long long>(requests), size);

  for (std::uint64_t i = 0; i < requests; ++i) {
    // Server: a window over its buffer for this request, remote write only, with a new key.
    const BindMwWr bind{window.get(), {server.mr.get(), server.mr->address(), size,
                                       Access::remote_write}};
    SendWr b;
    b.wr_id = 1;
    b.opcode = WrOpcode::bind_mw;
    b.flags = SendFlags::signaled;
    b.rkey = inc_rkey(window->rkey());
    b.bind_mw = &bind;
    posted(server.qp->post_send(b), "server: ibv_post_send(BIND_MW)");
    expect(*server.cq, world, WcStatus::success, "server: bind");
    const std::uint32_t rkey = window->rkey();
    const Sge rs = server.mr->sge(0, 0);
    posted(server.qp->post_recv(RecvWr{2, {&rs, 0}}), "server: ibv_post_recv");

    // Client: the data through the window, then the answer that closes it.
    std::memset(client.buf.data(), static_cast<int>('a' + i % 26), size);
    const Sge data = client.mr->sge(0, size);
    SendWr w;
    w.wr_id = 3;
    w.opcode = WrOpcode::rdma_write;
    w.sg_list = {&data, 1};
    w.remote_addr = server.mr->address();
    w.rkey = rkey;
    SendWr done;
    done.wr_id = 4;
    done.opcode = WrOpcode::send_with_inv;
    done.flags = SendFlags::signaled;
    done.imm_data = rkey;  // the key to invalidate
    const SendWr batch[] = {w, done};
    posted(client.qp->post_send(batch), "client: ibv_post_send(WRITE, SEND_WITH_INV)");
    expect(*client.cq, world, WcStatus::success, "client: SEND_WITH_INV");

    // Server: the answer says the data is there and the window closed.
    const WorkCompletion got = expect(*server.cq, world, WcStatus::success, "server: receive");
    if (!any(got.wc_flags, WcFlags::with_inv) || got.invalidated_rkey() != rkey) {
      throw std::runtime_error("server: the answer did not invalidate the window's key");
    }
    if (server.buf[size - 1] != static_cast<char>('a' + i % 26)) {
      throw std::runtime_error("server: the data did not land");
    }
    std::printf("  request %llu: window key 0x%08x, %u bytes written through it, closed by the "
                "answer\n",
                static_cast<unsigned long long>(i), rkey, size);
  }

  // A WRITE with a key whose window is closed fails, and takes the client's QP to ERR.
  const Sge data = client.mr->sge(0, 8);
  SendWr late;
  late.wr_id = 5;
  late.opcode = WrOpcode::rdma_write;
  late.flags = SendFlags::signaled;
  late.sg_list = {&data, 1};
  late.remote_addr = server.mr->address();
  late.rkey = window->rkey();
  posted(client.qp->post_send(late), "client: ibv_post_send(late WRITE)");
  // The server answers with an access NAK and goes to ERR. Should that NAK be lost (a fault
  // plan that drops packets), the client's retries meet a QP in ERR, which drops them: the
  // WRITE then runs out of retries instead. Either way it never lands.
  const WorkCompletion wc = next(*client.cq, world);
  if (wc.status != WcStatus::rem_access_err && wc.status != WcStatus::retry_exc_err) {
    throw std::runtime_error("client: late WRITE: " + std::string(to_string(wc.status)) +
                             ", expected REM_ACCESS_ERR");
  }
  std::printf("  a late WRITE with the last key: %s, as it should\n",
              std::string(to_string(wc.status)).c_str());

  window->destroy();
  for (Side* s : {&client, &server}) {
    verbsim::destroy(s->qp);
    verbsim::destroy(s->mr);
    verbsim::destroy(s->cq);
    verbsim::destroy(s->pd);
  }
  if (world != nullptr) std::printf("digest: %s\n", world->digest_hex().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "windows: %s\n", e.what());
    return 1;
  }
}
