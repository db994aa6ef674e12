// forgetful_server: an echo service with a bug, for the worked example of docs/OBSERVABILITY.md.
//
//   forgetful_server [--backend SPEC] [--messages N] [--seed N] [--faults PLAN]
//
// The client sends requests in windows of kWindow SENDs; the server answers each and gives its
// receive buffer back to the QP. The bug: when that ibv_post_recv fails, the server counts the
// failure and goes on, so the buffer never returns to the receive queue. On a NIC post_recv
// hardly ever fails and the bug sleeps. Under a fault plan that makes post_recv fail now and
// then (`verbsim-swarm --verb-faults`), the queue runs dry: a request meets no receive, the
// server's QP answers receiver-not-ready NAKs, the client's QP retries rnr_retry (3) times and
// fails with RNR_RETRY_EXC_ERR, and the program exits 1.
//
// The client does it right: a post refused for a full queue or an injected EAGAIN is tried
// again, never dropped.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "cli.hpp"
#include "verbsim/sim/world.hpp"
#include "verbsim/verbsim.hpp"

using namespace verbsim;

namespace {

constexpr std::uint8_t kPort = 1;
constexpr std::uint32_t kSize = 64;
constexpr std::uint32_t kReceives = 8;  // the server's receive buffers
constexpr std::uint32_t kWindow = 4;    // requests the client has in flight

struct Options {
  DeviceSpec spec = DeviceSpec::from_env();
  std::uint32_t messages = 200;
  std::optional<std::uint64_t> seed;
  std::optional<std::string> faults;
};

constexpr const char* kUsage =
    "usage: forgetful_server [--backend SPEC] [--messages N] [--seed N] [--faults PLAN]\n"
    "  --backend SPEC  sim, ibverbs or ibverbs:rxe0 (default: $VERBSIM_BACKEND, else sim)\n"
    "  --messages N    requests (default 200)\n"
    "  --seed N        simulator seed ($VERBSIM_SEED wins)\n"
    "  --faults PLAN   simulator fault plan (default: $VERBSIM_FAULTS), e.g.\n"
    "                  'post_recv p=0.05 errno=EAGAIN'\n";

struct Host {
  std::unique_ptr<Context> ctx;
  std::uint8_t gid_index = 0;
  std::unique_ptr<ProtectionDomain> pd;
  std::unique_ptr<CompletionQueue> scq;  // sends
  std::unique_ptr<CompletionQueue> rcq;  // receives
  std::vector<std::uint8_t> buf = std::vector<std::uint8_t>((kReceives + 1) * kSize);
  std::unique_ptr<MemoryRegion> mr;
  std::unique_ptr<QueuePair> qp;

  void create() {
    gid_index = roce_v2_gid_index(*ctx, kPort);
    pd = ctx->alloc_pd();
    scq = ctx->create_cq(2 * kWindow);
    rcq = ctx->create_cq(kReceives);
    mr = pd->reg_mr(buf.data(), buf.size(), Access::local_write);
    QpInitAttr init;
    init.send_cq = scq.get();
    init.recv_cq = rcq.get();
    init.cap = {
        .max_send_wr = kWindow, .max_recv_wr = kReceives, .max_send_sge = 1, .max_recv_sge = 1};
    qp = pd->create_qp(init);
  }
  Endpoint endpoint(std::uint32_t psn) const {
    return {ctx->query_gid(kPort, gid_index), qp->qp_num(), psn};
  }
  // Receive buffer `slot` (wr_id = slot).
  PostResult post_recv(std::uint64_t slot) {
    const Sge sge = mr->sge(slot * kSize, kSize);
    return qp->post_recv(RecvWr{slot, {&sge, 1}});
  }
  // The same, tried again while the post is refused for a full queue or an injected EAGAIN.
  void repost(std::uint64_t slot, const char* who) {
    while (true) {
      const PostResult r = post_recv(slot);
      if (r) return;
      if (r.error() != Condition::queue_full) {
        throw std::system_error(r.error(), std::string(who) + ": ibv_post_recv (" + r.reason + ")");
      }
    }
  }
  // A SEND from the last slot, which no receive uses; a post refused for a full queue (or an
  // injected EAGAIN) is tried again once the send CQ was reaped.
  void send(std::uint64_t wr_id, const char* who) {
    const Sge sge = mr->sge(kReceives * kSize, kSize);
    SendWr wr;
    wr.wr_id = wr_id;
    wr.opcode = WrOpcode::send;
    wr.flags = SendFlags::signaled;
    wr.sg_list = {&sge, 1};
    while (true) {
      const PostResult r = qp->post_send(wr);
      if (r) return;
      if (r.error() != Condition::queue_full) {
        throw std::system_error(r.error(), std::string(who) + ": ibv_post_send (" + r.reason + ")");
      }
      reap_sends(who);
    }
  }
  // Takes the send completions there are; a failed one ends the program.
  void reap_sends(const char* who) {
    WorkCompletion wc[8];
    const PollResult r = scq->poll(wc);
    for (const WorkCompletion& c : std::span(wc, r.count)) {
      if (c.status != WcStatus::success) {
        throw std::runtime_error(std::string(who) + ": SEND " + std::to_string(c.wr_id) +
                                 " completed with " + std::string(to_string(c.status)));
      }
    }
  }
};

class Service {
 public:
  Service(Backend& backend, const std::string& client_dev, const std::string& server_dev) {
    client_.ctx = backend.open(client_dev);
    server_.ctx = backend.open(server_dev);
    client_.create();
    server_.create();
    ConnectOptions client_opts{.sgid_index = client_.gid_index};
    client_opts.rnr_retry = 3;  // give up after three receiver-not-ready NAKs
    connect(*client_.qp, 0x1000, server_.endpoint(0x2000), client_opts);
    connect(*server_.qp, 0x2000, client_.endpoint(0x1000), {.sgid_index = server_.gid_index});
    for (std::uint64_t slot = 0; slot < kReceives; ++slot) {
      server_.repost(slot, "server");
      client_.repost(slot, "client");
    }
  }

  // Runs `messages` requests, kWindow at a time.
  void run(std::uint32_t messages) {
    std::uint32_t sent = 0;
    std::uint32_t answered = 0;
    while (answered < messages) {
      for (; sent < messages && sent - answered < kWindow; ++sent) client_.send(sent, "client");
      serve();
      answered += answers();
    }
    std::printf("%u requests answered; the server lost %u receive buffers\n", answered, lost_);
  }

 private:
  // The server answers each request and gives its buffer back.
  void serve() {
    WorkCompletion wc[8];
    const PollResult r = server_.rcq->poll(wc);
    for (const WorkCompletion& c : std::span(wc, r.count)) {
      if (c.status != WcStatus::success) {
        throw std::runtime_error("server: receive " + std::string(to_string(c.status)));
      }
      server_.send(c.wr_id, "server");
      // THE BUG: a refused post_recv loses the buffer for good. Trying again, as the client
      // does below, fixes the program.
      if (!server_.post_recv(c.wr_id)) ++lost_;
    }
    server_.reap_sends("server");
  }

  // The answers that arrived.
  std::uint32_t answers() {
    client_.reap_sends("client");
    WorkCompletion wc[8];
    const PollResult r = client_.rcq->poll(wc);
    for (const WorkCompletion& c : std::span(wc, r.count)) {
      if (c.status != WcStatus::success) {
        client_.reap_sends("client");  // the SEND that failed says why the QP is in error
        throw std::runtime_error("client: answer " + std::string(to_string(c.status)));
      }
      client_.repost(c.wr_id, "client");
    }
    return static_cast<std::uint32_t>(r.count);
  }

  Host client_;
  Host server_;
  std::uint32_t lost_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  try {
    Options o;
    cli::for_each_flag(argc, argv, {kUsage}, [&](std::string_view flag, std::string_view value) {
      if (flag == "--backend") {
        o.spec = DeviceSpec::parse(value);
      } else if (flag == "--messages") {
        o.messages = static_cast<std::uint32_t>(
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
    std::unique_ptr<Backend> backend;
    std::string client_dev = o.spec.device;
    std::string server_dev = o.spec.device;
    if (o.spec.backend == "sim") {
      sim::Config config = sim::Config::from_env();
      if (o.seed && std::getenv("VERBSIM_SEED") == nullptr) config.seed = *o.seed;
      if (o.faults) config.faults = sim::FaultPlan::parse(*o.faults);
      config.devices = std::max(config.devices, 2);
      backend = log_verbs_from_env(std::make_unique<sim::World>(config));
      client_dev = "sim0";
      server_dev = "sim1";
    } else {
      backend = open_backend(o.spec.backend);
    }
    Service service(*backend, client_dev, server_dev);
    service.run(o.messages);
    return 0;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "forgetful_server: %s\n", e.what());
    return 1;
  }
}
