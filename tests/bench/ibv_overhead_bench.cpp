// verbsim-ibv-overhead: what the ibverbs backend's C++ layer costs per post and per poll over
// calling libibverbs directly, on the same QPs and CQ.
//
//   verbsim-ibv-overhead [-n ITERS] [--warmup ITERS] [--backend ibverbs[:DEVICE]]
//
// Meant to run under callgrind through tests/bench/ibv-overhead.sh, which prints instructions
// per call and the difference (docs/IBV_OVERHEAD.md has the figures). On its own it checks that
// both loops work and prints how often each measured function ran.
//
// One device, two RC QPs connected in loopback: the client QP sends, the server QP receives.
// Two loops of the same ITERS iterations run on them, one with libibverbs' own calls on the
// native objects, one through verbsim::QueuePair / verbsim::CompletionQueue. An iteration:
//   post_recv  one receive on the server QP (one SGE)
//   post_send  one signaled SEND from the client QP (one SGE), the CQ armed just before
//   poll one   after the CQ event says the send completed: a poll of 1 that returns it
//   poll empty a poll of 1 on the now empty CQ
// then the server's receive completion is reaped (not measured). Each measured call is a
// function of its own (raw_post_send, layer_post_send, ...) so that callgrind's inclusive cost of
// the function over its call count is the cost of one call, work request building included:
// the raw side fills an ibv_send_wr and ibv_sge the way ibv_rc_pingpong does, the layer side a
// verbsim::SendWr and Sge. The warm-up iterations run outside measured_pass(), which the script
// names in --toggle-collect, so lazy binding and first-touch costs are not counted.
#include <infiniband/verbs.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "../../examples/cli.hpp"
#include "verbsim/ibverbs/backend.hpp"
#include "verbsim/verbsim.hpp"

// Keeps a measured function out of line and distinct: GCC would otherwise fold identical bodies
// into one symbol (identical code folding) or clone them under another name.
#if defined(__clang__)
#define MEASURED __attribute__((noinline))
#else
#define MEASURED __attribute__((noinline, noipa))
#endif

using namespace verbsim;

namespace {

constexpr std::uint8_t kPort = 1;
constexpr std::uint32_t kMessage = 64;  // bytes per SEND

constexpr const char* kUsage =
    "usage: verbsim-ibv-overhead [-n ITERS] [--warmup ITERS] [--backend ibverbs[:DEVICE]]\n"
    "  -n ITERS        measured iterations per loop (default 2000)\n"
    "  --warmup ITERS  iterations per loop before the measured pass (default 50)\n"
    "  --backend SPEC  ibverbs or ibverbs:DEVICE (default: ibverbs, $VERBSIM_DEVICE or the\n"
    "                  first device)\n"
    "Run it under callgrind with tests/bench/ibv-overhead.sh for instructions per call.\n";

struct Options {
  DeviceSpec spec{"ibverbs", ""};
  std::uint64_t iters = 2000;
  std::uint64_t warmup = 50;
};

Options parse_args(int argc, char** argv) {
  Options o;
  if (const char* dev = std::getenv("VERBSIM_DEVICE")) o.spec.device = dev;
  cli::for_each_flag(argc, argv, {kUsage}, [&](std::string_view flag, std::string_view value) {
    if (flag == "-n" || flag == "--iters") {
      o.iters = cli::parse_number(flag, value, UINT32_MAX);
    } else if (flag == "--warmup") {
      o.warmup = cli::parse_number(flag, value, UINT32_MAX);
    } else if (flag == "--backend") {
      o.spec = DeviceSpec::parse(value);
    } else {
      return false;
    }
    return true;
  });
  if (o.spec.backend != "ibverbs") {
    throw std::invalid_argument("the overhead is measured over libibverbs: --backend ibverbs");
  }
  return o;
}

// A registered buffer, as both APIs take it.
struct Buffer {
  std::uint64_t addr;
  std::uint32_t length;
  std::uint32_t lkey;
};

// ---------------------------------------------------------------------------------------------
// The measured calls. Each returns what its caller checks: true when the post was accepted, the
// number of completions polled (or -1).

MEASURED bool raw_post_send(ibv_qp* qp, const Buffer& b, std::uint64_t wr_id) {
  ibv_sge sge{b.addr, b.length, b.lkey};
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(qp, &wr, &bad) == 0;
}

MEASURED bool raw_post_recv(ibv_qp* qp, const Buffer& b, std::uint64_t wr_id) {
  ibv_sge sge{b.addr, b.length, b.lkey};
  ibv_recv_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  return ibv_post_recv(qp, &wr, &bad) == 0;
}

MEASURED int raw_poll_one(ibv_cq* cq, ibv_wc& wc) { return ibv_poll_cq(cq, 1, &wc); }

MEASURED int raw_poll_empty(ibv_cq* cq, ibv_wc& wc) { return ibv_poll_cq(cq, 1, &wc); }

MEASURED bool layer_post_send(QueuePair& qp, const Buffer& b, std::uint64_t wr_id) {
  const Sge sge{b.addr, b.length, b.lkey};
  SendWr wr;
  wr.wr_id = wr_id;
  wr.opcode = WrOpcode::send;
  wr.flags = SendFlags::signaled;
  wr.sg_list = {&sge, 1};
  return static_cast<bool>(qp.post_send(wr));
}

MEASURED bool layer_post_recv(QueuePair& qp, const Buffer& b, std::uint64_t wr_id) {
  const Sge sge{b.addr, b.length, b.lkey};
  return static_cast<bool>(qp.post_recv(RecvWr{wr_id, {&sge, 1}}));
}

MEASURED int layer_poll_one(CompletionQueue& cq, WorkCompletion& wc) {
  const PollResult r = cq.poll({&wc, 1});
  return r.error() ? -1 : static_cast<int>(r.count);
}

MEASURED int layer_poll_empty(CompletionQueue& cq, WorkCompletion& wc) {
  const PollResult r = cq.poll({&wc, 1});
  return r.error() ? -1 : static_cast<int>(r.count);
}

// ---------------------------------------------------------------------------------------------

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error(what); }

struct Fixture {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Context> ctx;
  std::unique_ptr<ProtectionDomain> pd;
  std::vector<std::uint8_t> memory = std::vector<std::uint8_t>(2 * kMessage);
  std::unique_ptr<MemoryRegion> mr;
  std::unique_ptr<CompletionChannel> channel;
  std::unique_ptr<CompletionQueue> client_cq;  // the client's sends; has the channel
  std::unique_ptr<CompletionQueue> server_cq;  // the server's receives
  std::unique_ptr<QueuePair> client;
  std::unique_ptr<QueuePair> server;
  Buffer tx{};
  Buffer rx{};
  // The same objects as libibverbs sees them.
  ibv_qp* raw_client = nullptr;
  ibv_qp* raw_server = nullptr;
  ibv_cq* raw_client_cq = nullptr;
  ibv_cq* raw_server_cq = nullptr;

  explicit Fixture(const DeviceSpec& spec) {
    backend = open_backend(spec.backend);
    ctx = backend->open(spec.device);
    pd = ctx->alloc_pd();
    mr = pd->reg_mr(memory.data(), memory.size(), Access::local_write);
    channel = ctx->create_comp_channel();
    client_cq = ctx->create_cq(16, channel.get());
    server_cq = ctx->create_cq(16);
    QpInitAttr init;
    init.type = QpType::rc;
    init.cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1};
    init.send_cq = init.recv_cq = client_cq.get();
    client = pd->create_qp(init);
    init.send_cq = init.recv_cq = server_cq.get();
    server = pd->create_qp(init);

    const std::uint8_t gid_index = roce_v2_gid_index(*ctx, kPort);
    const ConnectOptions opt{.port_num = kPort, .sgid_index = gid_index};
    const Gid gid = ctx->query_gid(kPort, gid_index);
    const Endpoint c{gid, client->qp_num(), 0x1000};
    const Endpoint s{gid, server->qp_num(), 0x2000};
    connect(*client, c.psn, s, opt);
    connect(*server, s.psn, c, opt);

    const Sge t = mr->sge(0, kMessage);
    const Sge r = mr->sge(kMessage, kMessage);
    tx = {t.addr, t.length, t.lkey};
    rx = {r.addr, r.length, r.lkey};
    raw_client = ibverbs::native(*client);
    raw_server = ibverbs::native(*server);
    raw_client_cq = ibverbs::native(*client_cq);
    raw_server_cq = ibverbs::native(*server_cq);
    if (raw_client == nullptr || raw_client_cq == nullptr) fail("not an ibverbs device");
  }

  // Not measured, the same for both loops: arm the client CQ before a post, then wait for its
  // event, so that the measured poll finds the completion there.
  void arm() {
    if (const std::error_code ec = client_cq->req_notify(); ec) {
      throw std::system_error(ec, "ibv_req_notify_cq");
    }
  }
  void wait_for_send_completion() {
    CompletionQueue* fired = nullptr;
    if (const std::error_code ec = channel->get_cq_event(fired, Wait::blocking); ec) {
      throw std::system_error(ec, "ibv_get_cq_event");
    }
    fired->ack_events(1);
  }
  // Reaps the server's receive completion (rxe completes it before it acknowledges the SEND).
  void reap_receive(std::uint64_t wr_id) {
    ibv_wc wc;
    int n = 0;
    for (long spins = 0; (n = ibv_poll_cq(raw_server_cq, 1, &wc)) == 0; ++spins) {
      if (spins > 100'000'000) fail("the receive completion never came");
    }
    if (n < 0) fail("ibv_poll_cq on the server CQ failed");
    if (wc.status != IBV_WC_SUCCESS || wc.wr_id != wr_id || wc.byte_len != kMessage) {
      fail(std::string("bad receive completion: ") + ibv_wc_status_str(wc.status));
    }
  }
};

void check_send(bool ok_status, std::uint64_t got_id, std::uint64_t want_id, const char* status) {
  if (!ok_status || got_id != want_id) {
    fail(std::string("bad send completion (") + status + ", wr_id " + std::to_string(got_id) +
         ", expected " + std::to_string(want_id) + ")");
  }
}

void run_raw(Fixture& f, std::uint64_t iters) {
  for (std::uint64_t i = 0; i < iters; ++i) {
    if (!raw_post_recv(f.raw_server, f.rx, i)) fail("raw ibv_post_recv failed");
    f.arm();
    if (!raw_post_send(f.raw_client, f.tx, i)) fail("raw ibv_post_send failed");
    f.wait_for_send_completion();
    ibv_wc wc;
    if (raw_poll_one(f.raw_client_cq, wc) != 1) fail("raw poll: the completion is not there");
    check_send(wc.status == IBV_WC_SUCCESS, wc.wr_id, i, ibv_wc_status_str(wc.status));
    if (raw_poll_empty(f.raw_client_cq, wc) != 0) fail("raw poll: the CQ is not empty");
    f.reap_receive(i);
  }
}

void run_layer(Fixture& f, std::uint64_t iters) {
  for (std::uint64_t i = 0; i < iters; ++i) {
    if (!layer_post_recv(*f.server, f.rx, i)) fail("layer post_recv failed");
    f.arm();
    if (!layer_post_send(*f.client, f.tx, i)) fail("layer post_send failed");
    f.wait_for_send_completion();
    WorkCompletion wc;
    if (layer_poll_one(*f.client_cq, wc) != 1) fail("layer poll: the completion is not there");
    check_send(wc.status == WcStatus::success, wc.wr_id, i,
               std::string(to_string(wc.status)).c_str());
    if (layer_poll_empty(*f.client_cq, wc) != 0) fail("layer poll: the CQ is not empty");
    f.reap_receive(i);
  }
}

// The only part callgrind collects (--toggle-collect=*measured_pass*).
MEASURED void measured_pass(Fixture& f, std::uint64_t iters) {
  run_raw(f, iters);
  run_layer(f, iters);
}

int run(const Options& o) {
  Fixture f(o.spec);
  std::printf("verbsim-ibv-overhead: device %s, RC loopback, %llu iterations per loop after %llu "
              "warm-up\n",
              f.ctx->info().name.c_str(), static_cast<unsigned long long>(o.iters),
              static_cast<unsigned long long>(o.warmup));
  run_raw(f, o.warmup);
  run_layer(f, o.warmup);
  measured_pass(f, o.iters);
  // For the script: how often each measured function ran inside measured_pass().
  for (const char* fn : {"raw_post_send", "raw_post_recv", "raw_poll_one", "raw_poll_empty",
                         "layer_post_send", "layer_post_recv", "layer_poll_one",
                         "layer_poll_empty"}) {
    std::printf("calls %s %llu\n", fn, static_cast<unsigned long long>(o.iters));
  }
  destroy(f.client);
  destroy(f.server);
  destroy(f.client_cq);
  destroy(f.server_cq);
  destroy(f.channel);
  destroy(f.mr);
  destroy(f.pd);
  destroy(f.ctx);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse_args(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "verbsim-ibv-overhead: %s\n", e.what());
    return 1;
  }
}
