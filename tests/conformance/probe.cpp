// verbsim-probe: captures the simulator profile of an RDMA device (docs/FIDELITY.md, "Profile
// files"). It runs the conformance suite's cases on the device (through the ibverbs backend,
// or on the simulator to check the probe itself), reads what each case observed, and writes a
// profile file: every key a case decides, with the case and observation it came from, and every
// other key from a base profile, saying why it was not probed.
//
//   verbsim-probe --device rxe0 --out rxe0.profile
//   VERBSIM_PROFILE=rxe0.profile my_test              # the simulator, as rxe0 behaved
//   verbsim-probe --compare rxe0.profile rxe          # where it differs from the built-in rxe
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <unistd.h>
#include <vector>

#include "verbsim/sim/profile.hpp"
#include "verbsim/sim/world.hpp"
#include "verbsim/verbsim.hpp"

namespace {

using verbsim::sim::Profile;
using verbsim::sim::ProfileFile;
using Answer = std::optional<std::string>;

constexpr std::string_view kUsage =
    "usage: verbsim-probe [--device NAME | --sim strict|rxe|mlx5|FILE] [--base PROFILE]\n"
    "                     [--name NAME] [--out FILE|-] [--observations FILE] [--all-cases]\n"
    "       verbsim-probe --read OBSERVATIONS --base PROFILE [--name NAME] [--out FILE|-]\n"
    "       verbsim-probe --compare PROFILE PROFILE\n"
    "\n"
    "Runs the conformance suite's cases on an RDMA device (the first, or --device's; through\n"
    "libibverbs) and writes the simulator profile it behaves as (--out, default stdout). Keys no\n"
    "case decides come from --base, a built-in profile's name or a file (default: rxe for rxe*\n"
    "devices, mlx5 for mlx5*, else strict; with --sim, the profile simulated).\n"
    "--sim probes the simulator in a profile instead (a check of the probe). --observations\n"
    "keeps what every case observed (VERBSIM_CONFORMANCE_LOG's format); --all-cases runs every\n"
    "case, not only those the profile needs. --read derives the profile from observations kept\n"
    "earlier (--observations, or tests/conformance/rxe-results.tsv) without running anything.\n"
    "--compare lists where two profiles (files or\n"
    "built-in names) differ and exits 1 if they do.\n";

// What one conformance case observed: its status and its key=value observations, in order (a
// value runs to the next token that has an '=').
struct Case {
  std::string status;
  std::vector<std::pair<std::string, std::string>> obs;
  const std::string* get(std::string_view key) const {
    for (const auto& [k, v] : obs) {
      if (k == key) return &v;
    }
    return nullptr;
  }
};

std::map<std::string, Case> read_observations(const std::string& path) {
  std::map<std::string, Case> cases;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string name, status, rest;
    std::getline(fields, name, '\t');
    std::getline(fields, status, '\t');
    std::getline(fields, rest);
    if (const auto slash = name.find('/'); slash != std::string::npos) name.erase(0, slash + 1);
    Case c{status, {}};
    std::istringstream tokens(rest);
    std::string t;
    while (tokens >> t) {
      const auto eq = t.find('=');
      if (eq == std::string::npos || eq == 0) {
        if (!c.obs.empty()) c.obs.back().second += " " + t;
        continue;
      }
      c.obs.emplace_back(t.substr(0, eq), t.substr(eq + 1));
    }
    cases[name] = std::move(c);
  }
  return cases;
}

// One key a conformance case decides: where to look, and how the value reads. A true/false key
// is true when the observation matches `yes`, false when it matches `no` (a pattern ending in
// '/' matches a value that starts with it, "STATUS/" a completion of that status; "E*" any
// errno; else the value itself), and not told otherwise. Other keys take the value `value`
// makes of it. `only_if` names a key=value the profile must already have (probed, or from the
// base) for the case to tell.
struct Rule {
  std::string_view key;
  std::string_view test;  // Suite.Case
  std::string_view obs;
  std::string_view yes = {};
  std::string_view no = {};
  Answer (*value)(std::string_view observed) = nullptr;
  std::string_view only_if = {};
};

bool matches(std::string_view v, std::string_view pattern) {
  if (pattern == "E*") return v.size() > 1 && v[0] == 'E' && v != "EDOM";
  if (pattern.ends_with('/')) return v.starts_with(pattern);
  return v == pattern;
}

Answer decide(const Rule& r, std::string_view v) {
  if (r.value != nullptr) return r.value(v);
  if (matches(v, r.yes)) return std::string("true");
  if (matches(v, r.no)) return std::string("false");
  return std::nullopt;
}

Answer number(std::string_view v) {
  if (v.empty() || v.find_first_not_of("0123456789") != std::string_view::npos) return std::nullopt;
  return std::string(v);
}
Answer an_errno(std::string_view v) {
  return matches(v, "E*") ? Answer(std::string(v)) : std::nullopt;
}
// The status of a completion "STATUS/OPCODE/byte_len".
Answer status_of(std::string_view v) { return std::string(v.substr(0, v.find('/'))); }
Answer grh_flag(std::string_view v) {  // IBV_WC_GRH is bit 0 of wc_flags
  if (!number(v)) return std::nullopt;
  return std::string((std::stoul(std::string(v)) & 1u) != 0 ? "true" : "false");
}
Answer receive_flushed_first(std::string_view v) {  // a send and a receive both flushed
  const auto recv = v.find("RECV:");
  const auto send = v.find("SEND:");
  if (recv == v.npos || send == v.npos) return std::nullopt;
  return std::string(recv < send ? "true" : "false");
}

// In an order where a rule's only_if key comes before it.
const Rule kRules[] = {
    // QpCreate.CapsGivenAndQueried asks for 4 WRs a queue.
    {"pow2_minus_one_depths", "QpCreate.CapsGivenAndQueried", "query.max_send_wr", "7", "4"},
    {"create_reports_requested", "QpCreate.CapsGivenAndQueried", "create.max_send_wr", "4", "7",
     nullptr, "pow2_minus_one_depths=true"},  // the request and the depth given differ only so
    {"post_checks_opcode", "Ud.RdmaWriteOnUd", "post", "E*", "OK"},
    {"ud_oversize_refused", "Ud.LargerThanMtu", "post", "E*", "OK"},
    {"ud_ah_pd_checked", "Ud.SendThroughAnAddressHandleOfAnotherPd", "sender", "LOC_QP_OP_ERR/",
     "SUCCESS/"},
    {"clean_cq_on_qp_destroy", "Ordering.DestroyedQpsCompletionsInItsCq", "after_destroy", "none",
     "SUCCESS/"},
    {"local_mr_rkey_zero", "Memory.KeysOfLocalAndRemoteRegions", "local_rkey", "0", "lkey"},
    {"retire_on_poll", "Overflow.SendSlotFreesWithoutPolling", "post_after_completion", "E*",
     "OK"},
    {"cq_overrun_is_error", "Overflow.SendCqOverrun", "sender_state", "ERR", "RTS"},
    {"recv_cq_overrun_errors_qp", "Overflow.RecvCqOverrun", "receiver_state", "ERR", "RTS",
     nullptr, "cq_overrun_is_error=false"},  // a CQ error takes the QP to ERR anyway
    {"cq_ignore_overrun", "Overflow.IgnoreOverrunCq", "create", "OK", "E*"},
    {"post_send_needs_rts", "Errno.PostSendInInit", "post", "E*", "OK"},
    // PostEarly.SendInInit posts a 48-byte SEND in INIT, then a 24-byte one in RTS.
    {"rejected_send_stays_queued", "PostEarly.SendInInit", "after_next",
     "SUCCESS/SEND/48,SUCCESS/SEND/24", "SUCCESS/SEND/24", nullptr, "post_send_needs_rts=true"},
    {"rts_starts_send_queue", "PostEarly.SendInInit", "at_rts", "SUCCESS/", "none", nullptr,
     "post_send_needs_rts=false"},
    {"rts_starts_send_queue", "PostEarly.SendInInit", "at_rts", "SUCCESS/", "none", nullptr,
     "rejected_send_stays_queued=true"},
    {"post_recv_in_err_completes", "Posting.RecvInErr", "wcs", "WR_FLUSH_ERR", "none"},
    {"modify_trusts_cur_state", "QpAttrs.CurStateNotTheQpState", "modify", "OK", "E*"},
    {"sqd_holds_while_draining", "QpStates.SqdWhileDrainingAcceptsOnlyErr", "sqd_to_sqd", "E*",
     "OK"},
    {"pkey_index_checked", "QpAttrs.PkeyIndexOutOfRange", "modify", "E*", "OK"},
    {"last_wqe_reached_event", "Async.SrqQpToErr", "events", "QP_LAST_WQE_REACHED", "none"},
    {"send_error_is_solicited", "Channel.SolicitedOnlyAndSendError", "get_cq_event", "OK",
     "EAGAIN"},
    {"responder_error_events", "Async.RemoteAccessErrorEvents", "events", "QP_ACCESS_ERR", "none"},
    {"responder_errors_are_qp_op", "Errors.ReceiveBufferTooSmall", "receiver_first",
     "LOC_QP_OP_ERR", "LOC_LEN_ERR"},
    {"qp_access_nak_inv_req", "RemoteAccess.WriteToQpWithoutRemoteWrite", "sender",
     "REM_INV_REQ_ERR/", "REM_ACCESS_ERR/"},
    {"comm_est_event", "Async.CommunicationEstablished", "events", "COMM_EST", "none"},
    // An RDMA READ's error completion: opcode and length zeroed, or the READ's.
    {"error_wc_zeroed", "RemoteAccess.ReadWithBadRkey", "sender", "REM_ACCESS_ERR/SEND/",
     "REM_ACCESS_ERR/RDMA_READ/"},
    {"recv_wc_grh", "Datapath.SendRecv", "recv.wc_flags", {}, {}, grh_flag},
    {"atomic_takes_longer_buffer", "Datapath.AtomicLocalBufferLongerThan8", "post", "OK", "E*"},
    {"uc_on_srq", "Async.UcQpOnSrq", "create", "OK", "E*"},
    {"imm_write_takes_recv_first", "RemoteAccess.WriteWithImmBadRkeyWithoutReceive", "receiver",
     "REM_ACCESS_ERR/", "WR_FLUSH_ERR/"},
    {"window_range_is_mr", "MemoryWindows.Type1WritePastWindowEnd", "write", "SUCCESS/",
     "REM_ACCESS_ERR/"},
    {"rereg_mr", "Memory.ReregAddsRemoteWriteInPlace", "add_remote_write", "OK", "EOPNOTSUPP"},
    {"read_atomic_local_check_on_response", "Precedence.ReadBothKeysBadSignaled", "wc",
     "REM_ACCESS_ERR/", "LOC_PROT_ERR/"},
    {"rc_flushes_receives_first", "SharedCq.RefusedSendAndReceiveFlushedOnErr", "flushed", {}, {},
     receive_flushed_first},
    // The AH asks for hop limit 5; the route's TTL is 64.
    {"ud_ttl_from_route", "UdGrh.HopLimitIsTheIpv4Ttl", "ttl_5", "64", "5"},
    {"loopback_ipv4_checksum_zero", "UdGrh.Ipv4HeaderFields", "checksum_zero", "true", "false"},
    {"bad_lkey_status", "Memory.SendFromRegionOfAnotherPd", "wcs", {}, {}, status_of},
    {"send_limit_errno", "Datapath.TooManySendSges", "post", {}, {}, an_errno},
    {"max_qp_wr", "Device.QueryDeviceLimits", "max_qp_wr", {}, {}, number},
    {"max_cqe", "Device.QueryDeviceLimits", "max_cqe", {}, {}, number},
    {"max_sge", "Device.QueryDeviceLimits", "max_sge", {}, {}, number},
    {"min_inline_per_sge", "QpCreate.CapsGivenAndQueried", "query.max_inline_data", {}, {},
     number},  // asked for none, with one SGE
    {"gid_tbl_len", "Device.PortTables", "gid_tbl_len", {}, {}, number},
    {"max_msg_sz", "Device.PortTables", "max_msg_sz", {}, {}, number},
    {"max_mw", "MemoryWindows.DeviceAttributes", "max_mw", {}, {}, number},
};

// Keys no conformance case decides, and why.
const std::map<std::string_view, std::string_view> kNotProbed = {
    {"coalesce_acks", "ACKs are on the wire only; verbs do not see them"},
    {"srq_resize", "ibv_modify_srq's max_wr is not in the core API (the drop-in's)"},
    {"parent_domain", "not in the core API (the drop-in's)"},
    {"import_device", "not in the core API (the drop-in's)"},
    {"builder_limit_errno", "ibv_wr_* is not in the core API (the drop-in's)"},
    {"type2_window_pins_qp", "probing it hangs the kernel for 50 s (rxe) and corrupts it"},
    {"free_type2_invalidate_oopses", "probing it crashes the kernel (rxe)"},
    {"pool_full_errno", "needs the device's whole max_qp or max_cq created"},
};

struct Options {
  std::string device;
  std::string sim;  // a built-in profile's name or a file
  std::string base;
  std::string name;
  std::string out = "-";
  std::string observations;
  std::string read;  // derive from these saved observations instead of running the cases
  bool all_cases = false;
};

// The largest max_inline_data a create_qp takes (an RC QP), found by bisection; nullopt when
// the device cannot be opened.
std::optional<std::uint32_t> probe_max_inline(verbsim::Backend& backend, const std::string& dev) {
  using namespace verbsim;
  auto ctx = backend.open(dev);
  auto pd = ctx->alloc_pd();
  auto cq = ctx->create_cq(16);
  const auto creates = [&](std::uint32_t n) {
    try {
      pd->create_qp(QpInitAttr{.send_cq = cq.get(),
                               .recv_cq = cq.get(),
                               .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_inline_data = n}});
      return true;
    } catch (const VerbError&) {
      return false;
    }
  };
  std::uint32_t lo = 0, hi = 1u << 20;  // creates(lo); !creates(hi)
  if (creates(hi)) return hi;
  while (hi - lo > 1) {
    const std::uint32_t mid = lo + (hi - lo) / 2;
    (creates(mid) ? lo : hi) = mid;
  }
  return lo;
}

// Prints a dot per case and each failed case's name to stderr, nothing to stdout.
class Progress final : public ::testing::EmptyTestEventListener {
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed()) {
      std::cerr << "\n  differs from its expectations: " << info.test_suite_name() << "."
                << info.name() << "\n";
    } else {
      std::cerr << '.';
    }
  }
  void OnTestProgramEnd(const ::testing::UnitTest&) override { std::cerr << "\n"; }
};

std::string today() {
  char buf[16];
  const std::time_t t = std::time(nullptr);
  std::strftime(buf, sizeof buf, "%Y-%m-%d", std::gmtime(&t));
  return buf;
}

ProfileFile named_or_file(const std::string& s) {
  if (s == "strict" || s == "rxe" || s == "mlx5") {
    return ProfileFile::builtin(verbsim::sim::parse_profile(s));
  }
  return ProfileFile::load(s);
}

int compare(const std::string& a, const std::string& b) {
  const ProfileFile pa = named_or_file(a);
  const ProfileFile pb = named_or_file(b);
  const auto diffs = pa.differences(pb);
  for (const auto& d : diffs) std::cout << d.key << ": " << d.ours << " vs " << d.theirs << "\n";
  std::cout << diffs.size() << " difference" << (diffs.size() == 1 ? "" : "s") << " between " << a
            << " and " << b << " (the name aside)\n";
  return diffs.empty() ? 0 : 1;
}

// Runs the cases on `instantiation` (all of them, or those the rules read) and returns what
// they observed; keeps the log at `keep` if given.
std::map<std::string, Case> run_cases(char* argv0, const std::string& instantiation,
                                      const std::string& device, bool all, const std::string& keep) {
  std::string log = keep;
  std::string tmp;
  if (log.empty()) {
    char path[] = "/tmp/verbsim-probe-XXXXXX";
    const int fd = ::mkstemp(path);
    if (fd < 0) throw std::runtime_error(std::string("mkstemp: ") + std::strerror(errno));
    ::close(fd);
    tmp = log = path;
  }
  std::ofstream(log, std::ios::trunc).close();
  ::setenv("VERBSIM_CONFORMANCE_LOG", log.c_str(), 1);
  std::string filter;
  if (all) {
    filter = instantiation + "/*";
  } else {
    std::map<std::string_view, bool> seen;
    for (const Rule& r : kRules) {
      if (seen[r.test]) continue;
      seen[r.test] = true;
      filter += (filter.empty() ? "" : ":") + instantiation + "/" + std::string(r.test) + "/*";
    }
  }
  std::vector<std::string> args{argv0, "--gtest_filter=" + filter};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  int argc = static_cast<int>(argv.size());
  argv.push_back(nullptr);  // argv[argc], as main's: gtest moves it down with the flags it takes
  ::testing::InitGoogleTest(&argc, argv.data());
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  delete listeners.Release(listeners.default_result_printer());
  listeners.Append(new Progress);
  std::cerr << "verbsim-probe: running the conformance cases on " << device << " ("
            << instantiation << ")\n";
  // A case that fails differs from its expectations: what it observed counts all the same.
  if (RUN_ALL_TESTS() != 0) std::cerr << "verbsim-probe: some cases failed their expectations\n";
  auto cases = read_observations(log);
  if (!tmp.empty()) std::remove(tmp.c_str());
  if (cases.empty()) throw std::runtime_error("no case ran (is the device usable?)");
  return cases;
}

int probe(char* argv0, const Options& o) {
  // Where the cases run (or were run: --read), what the profile starts from, and a backend to
  // measure max_inline on.
  std::string instantiation = "Ibverbs";
  std::string device = o.device;
  std::string base = o.base;
  std::unique_ptr<verbsim::Backend> backend;
  std::string simulated_family;  // a device of the drop-in: its profile's family
  if (!o.read.empty()) {
    if (base.empty()) throw std::invalid_argument("--read needs --base");
    if (device.empty()) device = "the device of " + o.read;
  } else if (!o.sim.empty()) {
    verbsim::sim::Config config;
    if (o.sim == "strict" || o.sim == "rxe" || o.sim == "mlx5") {
      instantiation = o.sim == "strict" ? "SimStrict" : o.sim == "rxe" ? "SimRxe" : "SimMlx5";
      config.profile = verbsim::sim::parse_profile(o.sim);
      ::unsetenv("VERBSIM_PROFILE");
    } else {
      instantiation = "SimFile";
      config.profile_file = ProfileFile::load(o.sim);
      ::setenv("VERBSIM_PROFILE", o.sim.c_str(), 1);
    }
    if (base.empty()) base = o.sim;
    device = "sim0";
    ::unsetenv("VERBSIM_BACKEND");
    backend = std::make_unique<verbsim::sim::World>(config);
  } else {
    backend = verbsim::open_backend("ibverbs");
    const auto devices = backend->devices();
    if (devices.empty()) throw std::runtime_error("libibverbs lists no RDMA device");
    if (device.empty()) device = devices.front().name;
    ::setenv("VERBSIM_DEVICE", device.c_str(), 1);
    ::setenv("VERBSIM_BACKEND", "ibverbs", 1);
    // The simulator behind the libibverbs drop-in names its profile's family in fw_ver.
    const std::string fw = backend->open(device)->query_device().fw_ver;
    for (const char* family : {"strict", "rxe", "mlx5"}) {
      if (fw.starts_with("verbsim-") && fw.ends_with("(" + std::string(family) + ")")) {
        simulated_family = family;
      }
    }
    if (base.empty()) {
      base = !simulated_family.empty()      ? simulated_family
             : device.starts_with("rxe")  ? "rxe"
             : device.starts_with("mlx5") ? "mlx5"
                                          : "strict";
    }
  }
  const ProfileFile base_profile = named_or_file(base);
  ProfileFile profile = base_profile;
  profile.set("name", o.name.empty() ? device + " probed " + today() : o.name);

  const auto cases = o.read.empty()
                         ? run_cases(argv0, instantiation, device, o.all_cases, o.observations)
                         : read_observations(o.read);
  if (cases.empty()) throw std::runtime_error("no observations in " + o.read);

  // The keys.
  std::map<std::string, bool> decided;
  for (const Rule& r : kRules) {
    const std::string key(r.key);
    if (decided[key]) continue;
    if (!r.only_if.empty()) {
      const auto eq = r.only_if.find('=');
      if (profile.value(r.only_if.substr(0, eq)) != r.only_if.substr(eq + 1)) continue;
    }
    const auto c = cases.find(std::string(r.test));
    const std::string where = std::string(r.test) + " " + std::string(r.obs);
    if (c == cases.end() || c->second.status == "skip") {
      profile.note(key, "not probed: " + std::string(r.test) + " did not run; from base " + base);
      continue;
    }
    const std::string* v = c->second.get(r.obs);
    const Answer a = v != nullptr ? decide(r, *v) : std::nullopt;
    if (!a) {
      profile.note(key, "not probed: " + where + "=" + (v ? *v : std::string("(none)")) +
                            " does not tell; from base " + base);
      continue;
    }
    profile.set(key, *a);
    profile.note(key, "probed: " + where + "=" + *v);
    decided[key] = true;
  }
  if (const auto n = backend ? probe_max_inline(*backend, device) : std::nullopt) {
    profile.set("max_inline", std::to_string(*n));
    profile.note("max_inline", "probed: the largest max_inline_data create_qp takes");
    decided["max_inline"] = true;
  }
  profile.note("family", "from base " + base);
  if (o.sim.empty() && o.read.empty() && simulated_family.empty()) {
    profile.set("kernel_crossings", std::string(to_string(verbsim::provider_for_device(device))));
    profile.note("kernel_crossings", "from the device's name");
  } else {
    profile.note("kernel_crossings", "from base " + base);
  }
  int probed = 0, not_probed = 0;
  for (const std::string_view key : ProfileFile::keys()) {
    const std::string k(key);
    if (k == "name" || k == "family" || k == "kernel_crossings") continue;
    if (decided[k]) {
      ++probed;
      continue;
    }
    ++not_probed;
    if (const auto why = kNotProbed.find(key); why != kNotProbed.end()) {
      profile.note(key, "not probed (" + std::string(why->second) + "): from base " + base);
    }
  }

  const std::string text = profile.text();
  if (o.out == "-") {
    std::cout << text;
  } else {
    std::ofstream out(o.out);
    out << text;
    if (!out) throw std::runtime_error("cannot write " + o.out);
  }
  const auto diffs = profile.differences(base_profile);
  std::cerr << "verbsim-probe: " << probed << " keys probed on " << device << ", " << not_probed
            << " from base " << base << "; " << diffs.size() << " differ from " << base
            << (diffs.empty() ? "" : ":") << "\n";
  for (const auto& d : diffs) {
    std::cerr << "  " << d.key << " = " << d.ours << " (" << base << ": " << d.theirs << ")\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::vector<std::string> compare_args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "verbsim-probe: " << a << " needs a value\n" << kUsage;
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--device") o.device = next();
    else if (a == "--sim") o.sim = next();
    else if (a == "--base") o.base = next();
    else if (a == "--name") o.name = next();
    else if (a == "--out") o.out = next();
    else if (a == "--observations") o.observations = next();
    else if (a == "--all-cases") o.all_cases = true;
    else if (a == "--read") o.read = next();
    else if (a == "--compare") {
      compare_args.push_back(next());
      compare_args.push_back(next());
    } else if (a == "-h" || a == "--help") {
      std::cout << kUsage;
      return 0;
    } else {
      std::cerr << "verbsim-probe: unknown argument '" << a << "'\n" << kUsage;
      return 2;
    }
  }
  try {
    if (!compare_args.empty()) return compare(compare_args[0], compare_args[1]);
    return probe(argv[0], o);
  } catch (const std::exception& e) {
    std::cerr << "verbsim-probe: " << e.what() << "\n";
    return 1;
  }
}
