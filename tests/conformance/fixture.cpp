// The backend fixture: opening a backend per test, waiting for completions in real or virtual
// time, and writing each test's observations to the fidelity log.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "conformance.hpp"

#ifdef VERBSIM_CONFORMANCE_IBVERBS
#include <infiniband/verbs.h>

#include "verbsim/ibverbs/backend.hpp"
#endif

namespace verbsim::conformance {

namespace {

constexpr auto kDeadline = std::chrono::seconds(2);
constexpr auto kQuiet = std::chrono::milliseconds(200);

std::uint64_t ns(std::chrono::nanoseconds d) { return static_cast<std::uint64_t>(d.count()); }

// "SimRxe/QpState.ResetToInit" from gtest's "SimRxe/QpState" and "ResetToInit/0".
std::string case_name() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = info->name();
  if (const auto slash = name.rfind('/'); slash != std::string::npos) name.resize(slash);
  return std::string(info->test_suite_name()) + "." + name;
}

void write_log_line(const std::string& line) {
  const char* path = std::getenv("VERBSIM_CONFORMANCE_LOG");
  if (path == nullptr || *path == '\0') return;
  if (std::strcmp(path, "-") == 0) {
    // One write per line, so the lines stay whole between gtest's own output.
    const std::string out = "VERBSIM-CONFORMANCE\t" + line + "\n";
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fflush(stdout);
    return;
  }
  if (std::FILE* f = std::fopen(path, "a")) {
    std::fprintf(f, "%s\n", line.c_str());
    std::fclose(f);
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Fixture

sim::Config Conformance::sim_config(sim::Profile profile) const {
  sim::Config config;
  config.profile = profile;
  config.profile_file = profile_file();
  config.devices = 1;  // one device with two QPs, as on rxe in the VM
  return config;
}

std::optional<std::uint64_t> Conformance::hw_counter(std::string_view name) {
  if (world_ != nullptr) {
    const sim::PortHwCounters c = world_->port_counters(0, 1);
    if (name == "rcvd_rnr_err") return c.rcvd_rnr_err;
    if (name == "send_rnr_err") return c.send_rnr_err;
    if (name == "completer_retry_err") return c.completer_retry_err;
    if (name == "retry_exceeded_err") return c.retry_exceeded_err;
    if (name == "retry_rnr_exceeded_err") return c.retry_rnr_exceeded_err;
    if (name == "duplicate_request") return c.duplicate_request;
    if (name == "out_of_seq_request") return c.out_of_seq_request;
    if (name == "rcvd_seq_err") return c.rcvd_seq_err;
    return std::nullopt;
  }
#ifdef VERBSIM_CONFORMANCE_IBVERBS
  const ibv_context* c = ibverbs::native(*ctx_);
  if (c == nullptr) return std::nullopt;
  // ib_core caches a device's hw_counters for 10 ms (the stats' lifespan): a read sooner after
  // the last one gives that one's values. Waiting longer shows what happened before the call.
  if (!through_dropin_) std::this_thread::sleep_for(std::chrono::milliseconds(15));
  const std::string path =
      std::string(c->device->ibdev_path) + "/ports/1/hw_counters/" + std::string(name);
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return std::nullopt;
  unsigned long long n = 0;
  const bool read = std::fscanf(f, "%llu", &n) == 1;
  std::fclose(f);
  if (!read) return std::nullopt;
  return n;
#else
  return std::nullopt;
#endif
}

void Conformance::SetUp() {
  BackendTest::SetUp();
  if (IsSkipped()) return;
  const Target target = GetParam();
  world_ = world();
  ctx_ = backend().open(device());
  const std::string fw_ver = ctx_->query_device().fw_ver;
  expect_ = &expect_for(target, ctx_->info().name, fw_ver);
  through_dropin_ = world_ == nullptr && fw_ver.starts_with("verbsim-");
  pd_ = ctx_->alloc_pd();
  mem_.assign(kMemSize / sizeof(std::uint64_t), 0);
  mr_ = pd_->reg_mr(
      mem_.data(), kMemSize,
      Access::local_write | Access::remote_write | Access::remote_read | Access::remote_atomic);
  // RoCE v2: the IPv4-mapped GID, index 1 on rxe and the simulator.
  gid_index_ = 1;
  const int table = ctx_->query_port(1).gid_tbl_len;
  for (int i = 0; i < std::min(table, 16); ++i) {
    Gid g;
    if (verb_errno([&] { g = ctx_->query_gid(1, i); }) == 0 && g.is_ipv4_mapped()) {
      gid_index_ = i;
      break;
    }
  }
  gid_ = ctx_->query_gid(1, gid_index_);
}

void Conformance::TearDown() {
  mr_.reset();
  pd_.reset();
  ctx_.reset();
  world_ = nullptr;
  BackendTest::TearDown();  // a world checks its accounting here
  const char* status = HasFailure() ? "fail" : IsSkipped() ? "skip" : "pass";
  write_log_line(case_name() + "\t" + status + "\t" + observations_);
}

void Conformance::add_obs(std::string_view key, const std::string& value) {
  if (!observations_.empty()) observations_ += ' ';
  observations_ += key;
  observations_ += '=';
  observations_ += value;
}

std::unique_ptr<CompletionQueue> Conformance::make_cq(int cqe, CompletionChannel* channel) {
  return ctx_->create_cq(cqe, channel);
}

std::unique_ptr<QueuePair> Conformance::qp_to_missing_peer(CompletionQueue& cq, ConnectOptions o) {
  auto a = make_qp(cq, cq);
  std::uint32_t gone = 0;
  {
    auto cq2 = make_cq(16);
    auto b = make_qp(*cq2, *cq2);
    gone = b->qp_num();
  }
  modify_to_init(*a, options(o));
  modify_to_rtr(*a, Endpoint{gid(), gone, 200}, options(o));
  modify_to_rts(*a, 100, options(o));
  return a;
}

std::unique_ptr<QueuePair> Conformance::make_qp(CompletionQueue& scq, CompletionQueue& rcq,
                                                QpCap cap, QpType type, SharedReceiveQueue* srq,
                                                bool sq_sig_all, ProtectionDomain* pd) {
  QpInitAttr init;
  init.type = type;
  init.send_cq = &scq;
  init.recv_cq = &rcq;
  init.srq = srq;
  init.cap = cap;
  init.sq_sig_all = sq_sig_all;
  return (pd != nullptr ? *pd : *pd_).create_qp(init);
}

void Conformance::connect_pair(QueuePair& a, QueuePair& b, ConnectOptions oa, ConnectOptions ob) {
  connect(a, 100, endpoint(b, 200), options(oa));
  connect(b, 200, endpoint(a, 100), options(ob));
}

Pair Conformance::make_pair(const PairOptions& o) {
  Pair p;
  p.cq_a = make_cq(o.cqe);
  p.cq_b = make_cq(o.cqe);
  p.a = make_qp(*p.cq_a, *p.cq_a, o.cap, o.type, nullptr, o.sq_sig_all);
  p.b = make_qp(*p.cq_b, *p.cq_b, o.cap, o.type, nullptr, o.sq_sig_all);
  if (o.connect) connect_pair(*p.a, *p.b, o.a, o.b);
  return p;
}

AhAttr Conformance::ah_attr() const {
  AhAttr a;
  a.is_global = true;
  a.grh.dgid = gid_;
  a.grh.sgid_index = static_cast<std::uint8_t>(gid_index_);
  a.grh.hop_limit = 64;
  a.port_num = 1;
  return a;
}

std::string Conformance::err_wc(WcStatus status, WcOpcode opcode, std::uint32_t len) const {
  WorkCompletion wc{};
  wc.status = status;
  wc.opcode = expect_->error_wc_zeroed ? WcOpcode::send : opcode;
  wc.byte_len = expect_->error_wc_zeroed ? 0 : len;
  return describe(wc);
}

std::vector<WorkCompletion> Conformance::poll_n(CompletionQueue& cq, std::size_t n) {
  std::vector<WorkCompletion> out;
  WorkCompletion wc[16];
  const auto real_deadline = std::chrono::steady_clock::now() + kDeadline;
  const std::uint64_t virtual_deadline = world_ != nullptr ? world_->now() + ns(kDeadline) : 0;
  while (out.size() < n) {
    const std::size_t want = std::min<std::size_t>(16, n - out.size());
    const PollResult r = cq.poll(std::span(wc, want));
    if (r.error()) {
      ADD_FAILURE() << "poll: " << r.error().message();
      break;
    }
    out.insert(out.end(), wc, wc + r.count);
    if (r.count != 0) continue;
    if (world_ != nullptr) {
      if (world_->pending_events() == 0 || world_->now() > virtual_deadline) break;
    } else {
      if (std::chrono::steady_clock::now() > real_deadline) break;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  return out;
}

std::vector<WorkCompletion> Conformance::poll_quiet(CompletionQueue& cq) {
  pass_time(kQuiet);
  std::vector<WorkCompletion> out;
  WorkCompletion wc[16];
  for (;;) {
    const PollResult r = cq.poll(wc);
    if (r.error() || r.count == 0) break;
    out.insert(out.end(), wc, wc + r.count);
  }
  return out;
}

void Conformance::pass_time(std::chrono::milliseconds d) {
  if (world_ != nullptr) {
    world_->run_until(world_->now() + ns(d));
  } else if (through_dropin_) {
    // The drop-in's progress thread runs the simulator 1000 times as fast as the wall clock
    // while the program sleeps, as fast while it computes: spin, so that about `d` passes there
    // too, as on the simulator instantiation.
    const auto until = std::chrono::steady_clock::now() + d;
    while (std::chrono::steady_clock::now() < until) {
    }
  } else {
    std::this_thread::sleep_for(d);
  }
}

std::vector<AsyncEvent> Conformance::take_async_events() {
  std::vector<AsyncEvent> out;
  AsyncEvent ev;
  while (!ctx_->get_async_event(ev, Wait::nonblocking)) out.push_back(ev);
  return out;
}

QpState Conformance::wait_state(const QueuePair& qp, QpState want) {
  if (world_ != nullptr) {
    const std::uint64_t deadline = world_->now() + ns(kDeadline);
    while (qp.state() != want && world_->now() < deadline && world_->step()) {
    }
    return qp.state();
  }
  const auto deadline = std::chrono::steady_clock::now() + kDeadline;
  QpState s = qp.state();
  while (s != want && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    s = qp.state();
  }
  return s;
}

void move_to(QueuePair& qp, QpState state) {
  QpAttr a;
  a.qp_state = state;
  qp.modify(a, QpAttrMask::state);
}

// ---------------------------------------------------------------------------------------------
// Observations

std::string errno_name(int err) {
  switch (err) {
    case 0: return "OK";
    case -1: return "EXCEPTION";
    case EPERM: return "EPERM";
    case ENOENT: return "ENOENT";
    case EIO: return "EIO";
    case EAGAIN: return "EAGAIN";
    case ENOMEM: return "ENOMEM";
    case EFAULT: return "EFAULT";
    case EBUSY: return "EBUSY";
    case ENODEV: return "ENODEV";
    case EINVAL: return "EINVAL";
    case ENOSPC: return "ENOSPC";
    case EDEADLK: return "EDEADLK";
    case ENOSYS: return "ENOSYS";
    case ENODATA: return "ENODATA";
    case EOPNOTSUPP: return "EOPNOTSUPP";
    default: return "E" + std::to_string(err);
  }
}

std::string obs_str(const std::string& v) { return v; }
std::string obs_str(const char* v) { return v; }
std::string obs_str(std::string_view v) { return std::string(v); }
std::string obs_str(bool v) { return v ? "true" : "false"; }
std::string obs_str(WcStatus v) { return std::string(to_string(v)); }
std::string obs_str(WcOpcode v) { return std::string(to_string(v)); }
std::string obs_str(QpState v) { return std::string(to_string(v)); }
std::string obs_str(AsyncEventType v) { return std::string(to_string(v)); }

std::string describe(const WorkCompletion& wc) {
  return obs_str(wc.status) + "/" + obs_str(wc.opcode) + "/" + std::to_string(wc.byte_len);
}

std::string describe(const std::vector<WorkCompletion>& wcs) {
  if (wcs.empty()) return "none";
  std::string out;
  for (const auto& wc : wcs) {
    if (!out.empty()) out += ',';
    out += describe(wc);
  }
  return out;
}

std::string summary(const std::vector<WorkCompletion>& wcs) {
  if (wcs.empty()) return "none";
  std::string out;
  std::size_t i = 0;
  while (i < wcs.size()) {
    std::size_t j = i;
    while (j < wcs.size() && wcs[j].status == wcs[i].status) ++j;
    if (!out.empty()) out += ',';
    if (j - i > 1) out += std::to_string(j - i) + "*";
    out += obs_str(wcs[i].status);
    i = j;
  }
  return out;
}

std::string describe(const std::vector<AsyncEvent>& evs) {
  if (evs.empty()) return "none";
  std::string out;
  for (const auto& e : evs) {
    if (!out.empty()) out += ',';
    out += to_string(e.type);
  }
  return out;
}

}  // namespace verbsim::conformance
