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
    "       verbsim-probe --compare PROFILE PROFILE\n"
    "\n"
    "Runs the conformance suite's cases on an RDMA device (the first, or --device's; through\n"
    "libibverbs) and writes the simulator profile it behaves as (--out, default stdout). Keys no\n"
    "case decides come from --base, a built-in profile's name or a file (default: rxe for rxe*\n"
    "devices, mlx5 for mlx5*, else strict; with --sim, the profile simulated).\n"
    "--sim probes the simulator in a profile instead (a check of the probe). --observations\n"
    "keeps what every case observed (VERBSIM_CONFORMANCE_LOG's format); --all-cases runs every\n"
    "case, not only those the profile needs. --compare lists where two profiles (files or\n"
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

// How an observed value decides a key's value; no answer when the value does not tell.
using Decide = Answer (*)(std::string_view observed);

Answer truth(bool b) { return std::string(b ? "true" : "false"); }
// "OK" -> when_ok; an errno -> the other.
template <bool WhenOk>
Answer accepted(std::string_view v) {
  if (v == "OK") return truth(WhenOk);
  if (v.starts_with("E")) return truth(!WhenOk);
  return std::nullopt;
}
Answer number(std::string_view v) {
  if (v.empty() || v.find_first_not_of("0123456789") != std::string_view::npos) return std::nullopt;
  return std::string(v);
}
Answer an_errno(std::string_view v) {
  if (v.starts_with("E") && v != "EDOM") return std::string(v);
  return std::nullopt;
}
// The status of a completion "STATUS/OPCODE/byte_len".
Answer status_of(std::string_view v) { return std::string(v.substr(0, v.find('/'))); }

// One key a conformance case decides: where to look, and how the value reads. `only_if` names a
// key=value the profile must already have (probed or from the base) for the case to tell.
struct Rule {
  std::string_view key;
  std::string_view test;  // Suite.Case
  std::string_view obs;
  Decide decide;
  std::string_view only_if = {};
};

// In an order where a rule's only_if key comes before it.
const Rule kRules[] = {
    {"pow2_minus_one_depths", "QpCreate.CapsGivenAndQueried", "query.max_send_wr",
     [](std::string_view v) -> Answer {  // asked for 4
       if (v == "7") return truth(true);
       if (v == "4") return truth(false);
       return std::nullopt;
     }},
    {"create_reports_requested", "QpCreate.CapsGivenAndQueried", "create.max_send_wr",
     [](std::string_view v) -> Answer { return truth(v == "4"); },
     "pow2_minus_one_depths=true"},  // the request (4) and the depth given (7) differ only so
    {"post_checks_opcode", "Ud.RdmaWriteOnUd", "post", accepted<false>},
    {"ud_oversize_refused", "Ud.LargerThanMtu", "post", accepted<false>},
    {"ud_ah_pd_checked", "Ud.SendThroughAnAddressHandleOfAnotherPd", "sender",
     [](std::string_view v) -> Answer {
       if (v.starts_with("LOC_QP_OP_ERR/")) return truth(true);
       if (v.starts_with("SUCCESS/")) return truth(false);
       return std::nullopt;
     }},
    {"clean_cq_on_qp_destroy", "Ordering.DestroyedQpsCompletionsInItsCq", "after_destroy",
     [](std::string_view v) -> Answer {
       if (v == "none") return truth(true);
       if (v.starts_with("SUCCESS/RECV/")) return truth(false);
       return std::nullopt;
     }},
    {"local_mr_rkey_zero", "Memory.KeysOfLocalAndRemoteRegions", "local_rkey",
     [](std::string_view v) -> Answer { return truth(v == "0"); }},
    {"retire_on_poll", "Overflow.SendSlotFreesWithoutPolling", "post_after_completion",
     accepted<false>},
    {"cq_overrun_is_error", "Overflow.SendCqOverrun", "sender_state",
     [](std::string_view v) -> Answer {
       if (v == "ERR") return truth(true);
       if (v == "RTS") return truth(false);
       return std::nullopt;
     }},
    {"recv_cq_overrun_errors_qp", "Overflow.RecvCqOverrun", "receiver_state",
     [](std::string_view v) -> Answer {
       if (v == "ERR") return truth(true);
       if (v == "RTS") return truth(false);
       return std::nullopt;
     },
     "cq_overrun_is_error=false"},  // a CQ error takes the QP to ERR anyway
    {"cq_ignore_overrun", "Overflow.IgnoreOverrunCq", "create", accepted<true>},
    {"post_send_needs_rts", "Errno.PostSendInInit", "post", accepted<false>},
    {"rejected_send_stays_queued", "PostEarly.SendInInit", "after_next",
     [](std::string_view v) -> Answer { return truth(v.find("SUCCESS/SEND/48") != v.npos); },
     "post_send_needs_rts=true"},
    {"rts_starts_send_queue", "PostEarly.SendInInit", "at_rts",
     [](std::string_view v) -> Answer { return truth(v != "none"); },
     "post_send_needs_rts=false"},
    {"rts_starts_send_queue", "PostEarly.SendInInit", "at_rts",
     [](std::string_view v) -> Answer { return truth(v != "none"); },
     "rejected_send_stays_queued=true"},
    {"post_recv_in_err_completes", "Posting.RecvInErr", "wcs",
     [](std::string_view v) -> Answer { return truth(v != "none"); }},
    {"modify_trusts_cur_state", "QpAttrs.CurStateNotTheQpState", "modify", accepted<true>},
    {"sqd_holds_while_draining", "QpStates.SqdWhileDrainingAcceptsOnlyErr", "sqd_to_sqd",
     accepted<false>},
    {"pkey_index_checked", "QpAttrs.PkeyIndexOutOfRange", "modify", accepted<false>},
    {"last_wqe_reached_event", "Async.SrqQpToErr", "events",
     [](std::string_view v) -> Answer { return truth(v.find("QP_LAST_WQE_REACHED") != v.npos); }},
    {"send_error_is_solicited", "Channel.SolicitedOnlyAndSendError", "get_cq_event",
     [](std::string_view v) -> Answer {
       if (v == "OK") return truth(true);
       if (v == "EAGAIN") return truth(false);
       return std::nullopt;
     }},
    {"responder_error_events", "Async.RemoteAccessErrorEvents", "events",
     [](std::string_view v) -> Answer { return truth(v.find("QP_ACCESS_ERR") != v.npos); }},
    {"responder_errors_are_qp_op", "Errors.ReceiveBufferTooSmall", "receiver_first",
     [](std::string_view v) -> Answer {
       if (v == "LOC_QP_OP_ERR") return truth(true);
       if (v == "LOC_LEN_ERR") return truth(false);
       return std::nullopt;
     }},
    {"qp_access_nak_inv_req", "RemoteAccess.WriteToQpWithoutRemoteWrite", "sender",
     [](std::string_view v) -> Answer {
       if (v.starts_with("REM_INV_REQ_ERR/")) return truth(true);
       if (v.starts_with("REM_ACCESS_ERR/")) return truth(false);
       return std::nullopt;
     }},
    {"comm_est_event", "Async.CommunicationEstablished", "events",
     [](std::string_view v) -> Answer { return truth(v.find("COMM_EST") != v.npos); }},
    {"error_wc_zeroed", "RemoteAccess.ReadWithBadRkey", "sender",  // an RDMA READ's error
     [](std::string_view v) -> Answer {
       if (v.starts_with("REM_ACCESS_ERR/SEND/0")) return truth(true);
       if (v.starts_with("REM_ACCESS_ERR/RDMA_READ/")) return truth(false);
       return std::nullopt;
     }},
    {"recv_wc_grh", "Datapath.SendRecv", "recv.wc_flags",
     [](std::string_view v) -> Answer {
       if (!number(v)) return std::nullopt;
       return truth((std::stoul(std::string(v)) & 1u) != 0);  // IBV_WC_GRH
     }},
    {"atomic_takes_longer_buffer", "Datapath.AtomicLocalBufferLongerThan8", "post",
     accepted<true>},
    {"uc_on_srq", "Async.UcQpOnSrq", "create", accepted<true>},
    {"imm_write_takes_recv_first", "RemoteAccess.WriteWithImmBadRkeyWithoutReceive", "receiver",
     [](std::string_view v) -> Answer {
       if (v.starts_with("REM_ACCESS_ERR/")) return truth(true);
       if (v.starts_with("WR_FLUSH_ERR/") || v == "none") return truth(false);
       return std::nullopt;
     }},
    {"window_range_is_mr", "MemoryWindows.Type1WritePastWindowEnd", "write",
     [](std::string_view v) -> Answer {
       if (v.starts_with("SUCCESS/")) return truth(true);
       if (v.starts_with("REM_ACCESS_ERR/")) return truth(false);
       return std::nullopt;
     }},
    {"rereg_mr", "Memory.ReregAddsRemoteWriteInPlace", "add_remote_write",
     [](std::string_view v) -> Answer {
       if (v == "EOPNOTSUPP") return truth(false);
       if (v == "OK") return truth(true);
       return std::nullopt;
     }},
    {"read_atomic_local_check_on_response", "Precedence.ReadBothKeysBadSignaled", "wc",
     [](std::string_view v) -> Answer {
       if (v.starts_with("REM_ACCESS_ERR/")) return truth(true);
       if (v.starts_with("LOC_PROT_ERR/")) return truth(false);
       return std::nullopt;
     }},
    {"rc_flushes_receives_first", "SharedCq.RefusedSendAndReceiveFlushedOnErr", "flushed",
     [](std::string_view v) -> Answer {  // a send and a receive both flushed: which first
       const auto recv = v.find("RECV:");
       const auto send = v.find("SEND:");
       if (recv == v.npos || send == v.npos) return std::nullopt;
       return truth(recv < send);
     }},
    {"ud_ttl_from_route", "UdGrh.HopLimitIsTheIpv4Ttl", "ttl_5",  // the AH asked for 5
     [](std::string_view v) -> Answer {
       if (v == "5") return truth(false);
       if (!number(v)) return std::nullopt;
       return truth(true);
     }},
    {"loopback_ipv4_checksum_zero", "UdGrh.Ipv4HeaderFields", "checksum_zero",
     [](std::string_view v) -> Answer {
       if (v == "true" || v == "false") return std::string(v);
       return std::nullopt;
     }},
    {"bad_lkey_status", "Memory.SendFromRegionOfAnotherPd", "wcs", status_of},
    {"send_limit_errno", "Datapath.TooManySendSges", "post", an_errno},
    {"max_qp_wr", "Device.QueryDeviceLimits", "max_qp_wr", number},
    {"max_cqe", "Device.QueryDeviceLimits", "max_cqe", number},
    {"max_sge", "Device.QueryDeviceLimits", "max_sge", number},
    {"min_inline_per_sge", "QpCreate.CapsGivenAndQueried", "query.max_inline_data", number},
    {"gid_tbl_len", "Device.PortTables", "gid_tbl_len", number},
    {"max_msg_sz", "Device.PortTables", "max_msg_sz", number},
    {"max_mw", "MemoryWindows.DeviceAttributes", "max_mw", number},
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

int probe(char* argv0, const Options& o) {
  // Where the cases run, what the profile starts from, and a backend to measure max_inline on.
  std::string instantiation = "Ibverbs";
  std::string device = o.device;
  std::string base = o.base;
  std::unique_ptr<verbsim::Backend> backend;
  std::string simulated_family;  // a device of the drop-in: its profile's family
  if (!o.sim.empty()) {
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

  // The cases.
  std::string log = o.observations;
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
  if (o.all_cases) {
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
  ::testing::InitGoogleTest(&argc, argv.data());
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  delete listeners.Release(listeners.default_result_printer());
  listeners.Append(new Progress);
  std::cerr << "verbsim-probe: running the conformance cases on " << device << " ("
            << instantiation << ")\n";
  (void)RUN_ALL_TESTS();  // failures are what a device differs in: their observations count
  const auto cases = read_observations(log);
  if (!tmp.empty()) std::remove(tmp.c_str());
  if (cases.empty()) throw std::runtime_error("no case ran (is the device usable?)");

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
    const Answer a = v != nullptr ? r.decide(*v) : std::nullopt;
    if (!a) {
      profile.note(key, "not probed: " + where + "=" + (v ? *v : std::string("(none)")) +
                            " does not tell; from base " + base);
      continue;
    }
    profile.set(key, *a);
    profile.note(key, "probed: " + where + "=" + *v);
    decided[key] = true;
  }
  if (const auto n = probe_max_inline(*backend, device)) {
    profile.set("max_inline", std::to_string(*n));
    profile.note("max_inline", "probed: the largest max_inline_data create_qp takes");
    decided["max_inline"] = true;
  }
  profile.note("family", "from base " + base);
  if (o.sim.empty() && simulated_family.empty()) {
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
