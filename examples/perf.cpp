// verbsim-perf: perftest-like bandwidth and latency tests (ib_send_bw, ib_write_lat, ib_read_bw...)
// on the simulator or on an RDMA device.
//
//   verbsim-perf --test send_bw|send_lat|write_bw|write_lat|read_bw|read_lat
//                [-s BYTES] [-n ITERS] [-q QPS] [-t TX_DEPTH] [--backend SPEC] [--seed N]
//
// Both sides live in this process and one thread drives them: two devices of one sim::World on
// the simulator, one device's loopback on ibverbs. On the simulator every figure is given twice:
// in virtual time (what the simulated fabric would achieve) and in wall-clock time (how fast the
// simulator itself runs). docs/PERFORMANCE.md has the commands and the measurements.
#include <algorithm>
#include <chrono>
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
#include <utility>
#include <vector>

#include "cli.hpp"
#include "verbsim/sim/world.hpp"
#include "verbsim/verbsim.hpp"

using namespace verbsim;

namespace {

constexpr std::uint8_t kPort = 1;

enum class Op { send, write, read };

struct Options {
  DeviceSpec spec = DeviceSpec::from_env();
  Op op = Op::send;
  bool latency = false;
  std::string test = "send_bw";
  std::optional<std::uint32_t> size;  // default: 65536 for bandwidth, 2 for latency (perftest's)
  std::uint64_t iters = 1000;
  std::uint32_t qps = 1;
  std::uint32_t tx_depth = 128;
  std::optional<std::uint64_t> seed;
  bool rdma_cm = false;  // -R: connect through the connection manager
};

constexpr const char* kUsage =
    "usage: verbsim-perf --test NAME [-s BYTES] [-n ITERS] [-q QPS] [-t DEPTH] [--backend SPEC]\n"
    "                    [--seed N]\n"
    "  --test NAME     send_bw, send_lat, write_bw, write_lat, read_bw or read_lat\n"
    "  -s BYTES        message size (default 65536 for *_bw, 2 for *_lat)\n"
    "  -n ITERS        messages per QP (*_bw) or round trips (*_lat) (default 1000)\n"
    "  -q QPS          QPs, bandwidth tests only (default 1)\n"
    "  -t DEPTH        work requests in flight per QP, bandwidth tests (default 128)\n"
    "  --backend SPEC  sim, ibverbs or ibverbs:rxe0 (default: $VERBSIM_BACKEND, else sim)\n"
    "  --seed N        simulator seed (default 1; $VERBSIM_SEED, when set, wins)\n"
    "  -R              connect the QPs through the connection manager (rdma_cm), like\n"
    "                  perftest's -R, instead of exchanging GIDs, QP numbers and PSNs\n";

Options parse_args(int argc, char** argv) {
  Options o;
  // -R takes no value (as perftest's): taken out before the "--flag value" parsing.
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (i > 0 && (a == "-R" || a == "--rdma-cm")) {
      o.rdma_cm = true;
    } else {
      args.push_back(argv[i]);
    }
  }
  cli::for_each_flag(static_cast<int>(args.size()), args.data(), {kUsage},
                     [&](std::string_view flag, std::string_view value) {
    if (flag == "--test") {
      o.test = std::string(value);
      const auto us = value.find('_');
      const std::string_view op = value.substr(0, us);
      const std::string_view kind = us == std::string_view::npos ? "" : value.substr(us + 1);
      if (op == "send") {
        o.op = Op::send;
      } else if (op == "write") {
        o.op = Op::write;
      } else if (op == "read") {
        o.op = Op::read;
      } else {
        throw std::invalid_argument("unknown test '" + o.test + "' (see --help)");
      }
      if (kind != "bw" && kind != "lat") {
        throw std::invalid_argument("unknown test '" + o.test + "' (see --help)");
      }
      o.latency = kind == "lat";
    } else if (flag == "-s" || flag == "--size") {
      o.size = static_cast<std::uint32_t>(
          std::max<std::uint64_t>(1, cli::parse_number(flag, value, 1u << 30)));
    } else if (flag == "-n" || flag == "--iters") {
      o.iters = std::max<std::uint64_t>(1, cli::parse_number(flag, value, UINT32_MAX));
    } else if (flag == "-q" || flag == "--qps") {
      o.qps =
          static_cast<std::uint32_t>(std::max<std::uint64_t>(1, cli::parse_number(flag, value, 1024)));
    } else if (flag == "-t" || flag == "--tx-depth") {
      o.tx_depth =
          static_cast<std::uint32_t>(std::max<std::uint64_t>(1, cli::parse_number(flag, value, 8192)));
    } else if (flag == "--backend") {
      o.spec = DeviceSpec::parse(value);
    } else if (flag == "--seed") {
      o.seed = cli::parse_number(flag, value, UINT64_MAX);
    } else {
      return false;
    }
    return true;
  });
  if (o.latency && o.qps != 1) throw std::invalid_argument("latency tests use one QP (-q 1)");
  return o;
}

// One side: a PD, one CQ for all its QPs, one MR over [tx of QP 0..q) [rx of QP 0..q).
struct Side {
  std::unique_ptr<Context> ctx;
  std::uint8_t gid_index = 0;
  std::unique_ptr<ProtectionDomain> pd;
  std::unique_ptr<CompletionQueue> cq;
  std::vector<std::uint8_t> buf;
  std::unique_ptr<MemoryRegion> mr;
  std::vector<std::unique_ptr<QueuePair>> qps;
  std::uint32_t size = 0;
  std::uint32_t q = 0;

  std::size_t tx_off(std::uint32_t i) const { return std::size_t{i} * size; }
  std::size_t rx_off(std::uint32_t i) const { return (std::size_t{q} + i) * size; }
  std::uint8_t* rx_last(std::uint32_t i) { return buf.data() + rx_off(i) + size - 1; }
};

void create_side(Side& s, const Options& o, std::uint32_t size, std::uint32_t rx_depth) {
  s.size = size;
  s.q = o.qps;
  s.gid_index = roce_v2_gid_index(*s.ctx, kPort);
  s.pd = s.ctx->alloc_pd();
  s.cq = s.ctx->create_cq(static_cast<int>((o.tx_depth + rx_depth) * o.qps));
  s.buf.assign(2 * std::size_t{o.qps} * size, 0);
  s.mr = s.pd->reg_mr(s.buf.data(), s.buf.size(),
                      Access::local_write | Access::remote_write | Access::remote_read);
  QpInitAttr init;
  init.type = QpType::rc;
  init.send_cq = s.cq.get();
  init.recv_cq = s.cq.get();
  init.cap = {
      .max_send_wr = o.tx_depth, .max_recv_wr = rx_depth, .max_send_sge = 1, .max_recv_sge = 1};
  for (std::uint32_t i = 0; i < o.qps; ++i) s.qps.push_back(s.pd->create_qp(init));
}

// Connects client QP i to server QP i through the connection manager: the server listens on its
// port's address (perftest's port, 18515), each client QP connects from the client's address.
// The ids are returned; they must go before the QPs.
std::vector<std::unique_ptr<CmId>> connect_with_cm(
    Backend& backend, Side& client, Side& server, std::uint32_t qps, int rd,
    std::vector<std::unique_ptr<CmEventChannel>>& chs) {
  chs.push_back(backend.create_cm_channel());
  chs.push_back(backend.create_cm_channel());
  CmEventChannel& cch = *chs[0];
  CmEventChannel& sch = *chs[1];
  auto address = [](Side& s, std::uint16_t port) {
    SockAddr a;
    a.ip = s.ctx->query_gid(kPort, s.gid_index).raw;
    a.port = port;
    return a;
  };
  auto expect = [](CmEventChannel& ch, CmEventType want) {
    CmEvent ev;
    if (const std::error_code err = ch.get_event(ev, Wait::blocking)) {
      throw std::system_error(err, "rdma_get_cm_event");
    }
    if (ev.type != want) {
      throw std::runtime_error(std::string(to_string(ev.type)) + " (status " +
                               std::to_string(ev.status) + "), expected " +
                               std::string(to_string(want)));
    }
    return ev;
  };
  std::vector<std::unique_ptr<CmId>> ids;
  ids.push_back(sch.create_id());
  ids.back()->bind_addr(address(server, 18515));
  ids.back()->listen();
  ConnParam param;
  param.responder_resources = param.initiator_depth = static_cast<std::uint8_t>(std::max(1, rd));
  for (std::uint32_t i = 0; i < qps; ++i) {
    ids.push_back(cch.create_id());
    CmId& c = *ids.back();
    c.bind_addr(address(client, 0));
    c.resolve_addr(address(server, 18515));
    expect(cch, CmEventType::addr_resolved);
    c.resolve_route();
    expect(cch, CmEventType::route_resolved);
    c.connect(*client.qps[i], param);
    CmEvent req = expect(sch, CmEventType::connect_request);
    req.new_id->accept(*server.qps[i], param);
    ids.push_back(std::move(req.new_id));
    expect(cch, CmEventType::established);
    expect(sch, CmEventType::established);
  }
  return ids;
}

struct Clocks {
  const sim::World* world;
  static std::uint64_t wall() {
    const auto t = std::chrono::steady_clock::now().time_since_epoch();
    return static_cast<std::uint64_t>(std::chrono::nanoseconds(t).count());
  }
  std::uint64_t virt() const { return world != nullptr ? world->now() : 0; }
};

// Everything a test needs to move data: both sides, the world (null on hardware), sizes.
struct Bench {
  const Options& o;
  Side& client;
  Side& server;
  const sim::World* world;
  std::uint32_t size;
  std::uint32_t rx_depth;

  // wr_id: QP index in the low 32 bits.
  void post_recv(std::uint32_t qi) {
    const Sge sge = server.mr->sge(server.rx_off(qi), size);
    if (const PostResult r = server.qps[qi]->post_recv(RecvWr{qi, {&sge, 1}}); !r) {
      throw std::system_error(r.error(), std::string("server: ibv_post_recv (") + r.reason + ")");
    }
  }
  void post(Side& from, Side& to, std::uint32_t qi, bool signaled) {
    const Sge sge = o.op == Op::read ? from.mr->sge(from.rx_off(qi), size)
                                     : from.mr->sge(from.tx_off(qi), size);
    SendWr wr;
    wr.wr_id = qi;
    wr.opcode = o.op == Op::send    ? WrOpcode::send
                : o.op == Op::write ? WrOpcode::rdma_write
                                    : WrOpcode::rdma_read;
    wr.flags = signaled ? SendFlags::signaled : SendFlags::none;
    wr.sg_list = {&sge, 1};
    const std::size_t remote = o.op == Op::read ? to.tx_off(qi) : to.rx_off(qi);
    wr.remote_addr = reinterpret_cast<std::uintptr_t>(to.buf.data() + remote);
    wr.rkey = to.mr->rkey();
    if (const PostResult r = from.qps[qi]->post_send(wr); !r) {
      throw std::system_error(r.error(), std::string("ibv_post_send (") + r.reason + ")");
    }
  }
  // Polls `s`'s CQ once; throws on a failed completion.
  std::span<const WorkCompletion> poll(Side& s, std::span<WorkCompletion> wc) {
    const PollResult r = s.cq->poll(wc);
    if (r.err != 0) throw std::system_error(r.error(), "ibv_poll_cq");
    for (const WorkCompletion& c : wc.first(r.count)) {
      if (c.status != WcStatus::success) {
        throw std::runtime_error("a completion has status " + std::string(to_string(c.status)));
      }
    }
    return wc.first(r.count);
  }
  // Called when a round of polls found nothing: on an idle simulated fabric the wait would
  // never end.
  void check_progress() const {
    if (world != nullptr && world->pending_events() == 0) {
      throw std::runtime_error("waiting for a completion that never comes");
    }
  }
};

struct Result {
  std::uint64_t messages = 0;
  std::uint64_t wall_ns = 0;
  std::uint64_t virt_ns = 0;
  std::vector<std::uint64_t> wall_samples;  // latency tests: per iteration
  std::vector<std::uint64_t> virt_samples;
};

// *_bw: every QP keeps tx_depth work requests in flight until it posted `iters`. All are
// signaled (perftest signals one in 100; see docs/PERFORMANCE.md).
Result run_bw(Bench& b) {
  const Options& o = b.o;
  const Clocks clocks{b.world};
  std::vector<std::uint64_t> posted(o.qps, 0);
  std::vector<std::uint64_t> done(o.qps, 0);
  std::vector<std::uint64_t> received(o.qps, 0);
  if (o.op == Op::send) {
    for (std::uint32_t qi = 0; qi < o.qps; ++qi) {
      for (std::uint32_t k = 0; k < b.rx_depth && k < o.iters; ++k) b.post_recv(qi);
    }
  }
  std::vector<WorkCompletion> wc(64);
  const std::uint64_t total = o.iters * o.qps;
  std::uint64_t completed = 0;
  std::uint64_t all_received = o.op == Op::send ? 0 : total;
  const std::uint64_t w0 = Clocks::wall();
  const std::uint64_t v0 = clocks.virt();
  while (completed < total || all_received < total) {
    for (std::uint32_t qi = 0; qi < o.qps; ++qi) {
      while (posted[qi] < o.iters && posted[qi] - done[qi] < o.tx_depth) {
        b.post(b.client, b.server, qi, true);
        ++posted[qi];
      }
    }
    std::size_t found = 0;
    // A CQ is polled only while something is awaited on it: on the simulator an empty poll
    // runs the world's next event, which could be a retransmission timer far in the future.
    for (const WorkCompletion& c :
         completed < total ? b.poll(b.client, wc) : std::span<const WorkCompletion>{}) {
      ++done[c.wr_id];
      ++completed;
      ++found;
    }
    if (all_received < total) {
      for (const WorkCompletion& c : b.poll(b.server, wc)) {
        const auto qi = static_cast<std::uint32_t>(c.wr_id);
        ++all_received;
        ++found;
        if (++received[qi] + b.rx_depth <= o.iters) b.post_recv(qi);
      }
    }
    if (found == 0) b.check_progress();
  }
  return {total, Clocks::wall() - w0, clocks.virt() - v0, {}, {}};
}

// *_lat: one message at a time on QP 0. send_lat and write_lat are ping-pongs (client to
// server and back) and report half the round trip like perftest; read_lat reports a whole read.
Result run_lat(Bench& b) {
  const Options& o = b.o;
  const Clocks clocks{b.world};
  Result res;
  res.messages = o.iters;
  res.wall_samples.reserve(o.iters);
  if (b.world != nullptr) res.virt_samples.reserve(o.iters);
  std::vector<WorkCompletion> wc(8);
  // Waits until `n` completions came on `s` or, for writes, the last byte of `s`'s receive
  // buffer reads `mark` (like perftest's write_lat, which polls memory).
  const auto await_cqes = [&](Side& s, int n) {
    while (n > 0) {
      const auto got = static_cast<int>(b.poll(s, wc).size());
      if (got == 0) b.check_progress();
      n -= got;
    }
  };
  const auto await_mark = [&](Side& s, std::uint8_t mark) {
    volatile std::uint8_t* last = s.rx_last(0);
    while (*last != mark) {
      // Reaps the send completions; on the simulator an empty poll also moves time on.
      if (b.poll(b.client, wc).empty() && b.poll(b.server, wc).empty() && *last != mark) {
        b.check_progress();
      }
    }
  };
  if (o.op == Op::send) {
    b.post_recv(0);
  }
  const std::uint64_t w0 = Clocks::wall();
  const std::uint64_t v0 = clocks.virt();
  for (std::uint64_t i = 0; i < o.iters; ++i) {
    const std::uint64_t ws = Clocks::wall();
    const std::uint64_t vs = clocks.virt();
    const auto mark = static_cast<std::uint8_t>(i % 255 + 1);
    if (o.op == Op::read) {
      b.post(b.client, b.server, 0, true);
      await_cqes(b.client, 1);
    } else if (o.op == Op::write) {
      b.client.buf[b.client.tx_off(0) + b.size - 1] = mark;
      b.post(b.client, b.server, 0, true);
      await_mark(b.server, mark);
      b.server.buf[b.server.tx_off(0) + b.size - 1] = mark;
      b.post(b.server, b.client, 0, true);
      await_mark(b.client, mark);
    } else {
      // The client's receive for the reply is posted before its SEND can be answered.
      const Sge rsge = b.client.mr->sge(b.client.rx_off(0), b.size);
      if (const PostResult r = b.client.qps[0]->post_recv(RecvWr{0, {&rsge, 1}}); !r) {
        throw std::system_error(r.error(), std::string("client: ibv_post_recv (") + r.reason + ")");
      }
      b.post(b.client, b.server, 0, true);
      await_cqes(b.server, 1);  // the request
      b.post_recv(0);
      b.post(b.server, b.client, 0, true);
      await_cqes(b.client, 2);  // the SEND's completion and the reply
      await_cqes(b.server, 1);  // the reply's SEND completion
    }
    res.wall_samples.push_back(Clocks::wall() - ws);
    if (b.world != nullptr) res.virt_samples.push_back(clocks.virt() - vs);
  }
  res.wall_ns = Clocks::wall() - w0;
  res.virt_ns = clocks.virt() - v0;
  if (o.op != Op::read) {
    for (auto* v : {&res.wall_samples, &res.virt_samples}) {
      for (std::uint64_t& x : *v) x /= 2;  // one way, like perftest's send_lat and write_lat
    }
  }
  return res;
}

void print_bw(const char* what, std::uint64_t bytes, std::uint64_t msgs, std::uint64_t ns) {
  const double s = static_cast<double>(ns) / 1e9;
  const double bps = static_cast<double>(bytes) / s;
  std::printf(" %-22s %12.2f %10.3f %12.6f %14.0f\n", what, bps / (1 << 20), bps * 8 / 1e9,
              static_cast<double>(msgs) / s / 1e6, static_cast<double>(msgs) / s);
}

void print_lat(const char* what, std::vector<std::uint64_t> v) {
  std::sort(v.begin(), v.end());
  const auto pct = [&v](double p) {
    const auto k = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1));
    return static_cast<double>(v[k]) / 1e3;
  };
  double sum = 0;
  for (const std::uint64_t x : v) sum += static_cast<double>(x);
  std::printf(" %-14s %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f\n", what, pct(0.0), pct(0.5),
              sum / static_cast<double>(v.size()) / 1e3, pct(0.99), pct(0.999), pct(1.0));
}

int run(const Options& opt) {
  std::unique_ptr<Backend> backend;
  sim::World* world = nullptr;
  std::string client_dev = opt.spec.device;
  std::string server_dev = opt.spec.device;
  if (opt.spec.backend == "sim") {
    sim::Config config = sim::Config::from_env();
    if (opt.seed) config.seed = *opt.seed;
    config.devices = std::max(config.devices, 2);
    auto w = std::make_unique<sim::World>(config);
    world = w.get();
    backend = std::move(w);
    if (client_dev.empty()) client_dev = "sim0";
    server_dev = client_dev == "sim1" ? "sim0" : "sim1";
  } else {
    if (opt.seed) std::fputs("verbsim-perf: --seed only applies to the simulator\n", stderr);
    backend = open_backend(opt.spec.backend);
    if (client_dev.empty()) {
      const auto devs = backend->devices();
      if (devs.empty()) throw std::runtime_error("no RDMA device");
      client_dev = server_dev = devs.front().name;
    }
  }
  const std::uint32_t size = opt.size.value_or(opt.latency ? 2u : 65536u);
  const std::uint32_t rx_depth = opt.latency ? 1 : 2 * opt.tx_depth;
  Options o = opt;
  if (opt.latency) o.tx_depth = 4;  // room for write_lat's not yet reaped completions
  Side client;
  Side server;
  client.ctx = backend->open(client_dev);
  server.ctx = backend->open(server_dev);
  create_side(client, o, size, rx_depth);
  create_side(server, o, size, rx_depth);
  // Reads in flight per QP: the device's maximum, like perftest (rxe: 128).
  const DeviceAttr dev = client.ctx->query_device();
  const int rd = std::min({255, dev.max_qp_rd_atom, dev.max_qp_init_rd_atom});
  ConnectOptions copt_c{.sgid_index = client.gid_index};
  ConnectOptions copt_s{.sgid_index = server.gid_index};
  for (ConnectOptions* c : {&copt_c, &copt_s}) {
    c->max_rd_atomic = c->max_dest_rd_atomic = static_cast<std::uint8_t>(std::max(1, rd));
  }
  std::vector<std::unique_ptr<CmEventChannel>> cm_channels;
  std::vector<std::unique_ptr<CmId>> cm_ids;
  if (opt.rdma_cm) {
    cm_ids = connect_with_cm(*backend, client, server, o.qps, rd, cm_channels);
  } else {
    for (std::uint32_t i = 0; i < o.qps; ++i) {
      const Endpoint cep{client.ctx->query_gid(kPort, client.gid_index), client.qps[i]->qp_num(),
                         0x1000 + i};
      const Endpoint sep{server.ctx->query_gid(kPort, server.gid_index), server.qps[i]->qp_num(),
                         0x2000 + i};
      connect(*client.qps[i], cep.psn, sep, copt_c);
      connect(*server.qps[i], sep.psn, cep, copt_s);
    }
  }

  std::printf("verbsim-perf: %s, backend %s", opt.test.c_str(),
              std::string(backend->name()).c_str());
  if (world != nullptr) std::printf(" (seed %llu)", static_cast<unsigned long long>(world->seed()));
  std::printf(", %s -> %s\n", client.ctx->info().name.c_str(), server.ctx->info().name.c_str());
  std::printf(" size %u B, %llu iterations, %u QP(s), tx depth %u, reads in flight %d, RC%s\n",
              size, static_cast<unsigned long long>(o.iters), o.qps, opt.latency ? 1 : o.tx_depth,
              std::max(1, rd), opt.rdma_cm ? ", connected by rdma_cm" : "");

  Bench b{o, client, server, world, size, rx_depth};
  const Result r = opt.latency ? run_lat(b) : run_bw(b);

  const char* wall = world != nullptr ? "wall clock (simulator)" : "wall clock";
  if (opt.latency) {
    std::printf(" %-14s %10s %10s %10s %10s %10s %10s   (usec)\n", "clock", "t_min", "t_typical",
                "t_avg", "t_99%", "t_99.9%", "t_max");
    if (world != nullptr) print_lat("virtual", r.virt_samples);
    print_lat(world != nullptr ? "wall (sim)" : "wall", r.wall_samples);
    const double wall_s = static_cast<double>(r.wall_ns) / 1e9;
    std::printf(" round trips per second (%s): %.0f\n", wall,
                static_cast<double>(r.messages) / wall_s);
  } else {
    std::printf(" %-22s %12s %10s %12s %14s\n", "clock", "BW[MB/sec]", "BW[Gb/s]", "MsgRate[Mpps]",
                "msgs/s");
    const std::uint64_t bytes = r.messages * size;
    if (world != nullptr) print_bw("virtual", bytes, r.messages, r.virt_ns);
    print_bw(wall, bytes, r.messages, r.wall_ns);
  }
  if (world != nullptr) {
    std::printf(" virtual time %.3f ms, wall time %.3f ms (%.2fx real time)\n",
                static_cast<double>(r.virt_ns) / 1e6, static_cast<double>(r.wall_ns) / 1e6,
                static_cast<double>(r.virt_ns) / static_cast<double>(r.wall_ns));
  }
  cm_ids.clear();  // before their QPs
  cm_channels.clear();
  for (auto& qp : client.qps) verbsim::destroy(qp);
  for (auto& qp : server.qps) verbsim::destroy(qp);
  for (Side* s : {&client, &server}) {
    verbsim::destroy(s->mr);
    verbsim::destroy(s->cq);
    verbsim::destroy(s->pd);
    verbsim::destroy(s->ctx);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse_args(argc, argv));
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "verbsim-perf: %s\n", e.what());
    return 1;
  }
}
