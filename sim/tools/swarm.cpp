// verbsim-swarm: runs a test binary under many seeds (optionally with a fault plan drawn from
// each seed), in parallel, and prints the seeds that fail, grouped by what failed, with the
// command that reproduces each group. A campaign can be cut into shards run anywhere, each
// writing JUnit XML, and merged (docs/CAMPAIGNS.md).
//
//   verbsim-swarm [--seeds N] [--first S] [--shard K/N] [--jobs J] [--timeout SEC]
//                 [--fault-probability P] [--verb-faults] [--faults PLAN] [--quiet]
//                 [--junit FILE] [--progress SEC] [--check-without-faults] [--keep-env NAME]
//                 -- <binary> [args...]
//   verbsim-swarm --shrink SEED [--steps N] [the campaign's options] -- <binary> [args...]
//   verbsim-swarm merge [--junit FILE] <junit files...>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <initializer_list>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "../src/fabric/rng.hpp"
#include "swarm/campaign.hpp"
#include "swarm/junit.hpp"
#include "swarm/progress.hpp"
#include "swarm/shrink.hpp"
#include "swarm/signature.hpp"
#include "swarm/summary.hpp"
#include "verbsim/sim/rerun_env.hpp"

extern char** environ;

namespace {

using verbsim::swarm::Campaign;
using verbsim::swarm::SeedResult;

struct Options {
  std::uint64_t seeds = 32;
  std::uint64_t first = 1;
  verbsim::swarm::Shard shard;
  std::string junit;
  double progress_s = 30;
  int jobs = 2;
  int timeout_s = 300;
  double fault_probability = 0;
  bool verb_faults = false;
  bool quiet = false;
  bool check_without_faults = false;
  std::string faults;
  std::string keep_env;      // VERBSIM_KEEP_ENV and every --keep-env, ','-separated
  std::uint64_t shrink = 0;  // --shrink: the seed; 0: a campaign
  int steps = 0;             // --steps: the test's step count, which VERBSIM_STEPS lowers
  std::vector<std::string> command;
};

constexpr const char* kUsage =
    "usage: verbsim-swarm [--seeds N] [--first S] [--shard K/N] [--jobs J]\n"
    "                     [--timeout SEC] [--fault-probability P] [--verb-faults]\n"
    "                     [--faults PLAN] [--quiet] [--junit FILE] [--progress SEC]\n"
    "                     [--check-without-faults] [--keep-env NAME]\n"
    "                     -- <binary> [args...]\n"
    "       verbsim-swarm --shrink SEED [--steps N] [--timeout SEC]\n"
    "                     [--fault-probability P] [--verb-faults] [--faults PLAN]\n"
    "                     [--keep-env NAME] -- <binary> [args...]\n"
    "       verbsim-swarm merge [--junit FILE] <junit files...>\n";

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr, "verbsim-swarm: %s\n%s", why, kUsage);
  std::exit(2);
}

// --help: the usage and what each option does, on stdout (docs/CAMPAIGNS.md says more).
[[noreturn]] void help() {
  std::printf(
      "verbsim-swarm: runs a test binary under many seeds (VERBSIM_SEED), each with a fault plan\n"
      "drawn from it (VERBSIM_FAULTS) if asked, and reports the seeds that fail, grouped by the\n"
      "GoogleTest test that failed and its first failure site (other programs: by signature).\n"
      "\n%s\n"
      "  --seeds N              seeds to run (32)\n"
      "  --first S              the first seed (1)\n"
      "  --shard K/N            run the K-th of N slices of the seeds\n"
      "  --jobs J               runs at a time (2)\n"
      "  --timeout SEC          a run taking longer fails (300)\n"
      "  --fault-probability P  draw a fault plan per seed, each fault at a probability up to P\n"
      "  --verb-faults          the drawn plans refuse posts too\n"
      "  --faults PLAN          rules added to every seed's plan\n"
      "  --quiet                no line per passing seed\n"
      "  --junit FILE           write the campaign as JUnit XML\n"
      "  --progress SEC         a progress line every SEC seconds off a terminal (30; 0: none)\n"
      "  --check-without-faults run each group's smallest seed again without a fault plan and\n"
      "                         say whether it still fails, the same way or another\n"
      "  --keep-env NAME        reproducers carry variable NAME as the runs had it (NAME* every\n"
      "                         variable NAME begins; VERBSIM_* are always carried, and those\n"
      "                         VERBSIM_KEEP_ENV lists, 'A,B*')\n"
      "  --shrink SEED          make the seed's reproducer as small as it still fails\n"
      "  --steps N              with --shrink: the test's step count, which VERBSIM_STEPS lowers\n"
      "  merge                  put shards' JUnit files back together as one campaign\n"
      "\nExit status: 0 every seed passed, 1 some failed, 2 a usage or file error.\n",
      kUsage);
  std::exit(0);
}

Options parse(int argc, char** argv) {
  Options o;
  if (const char* keep = std::getenv("VERBSIM_KEEP_ENV"); keep != nullptr) o.keep_env = keep;
  int i = 1;
  auto value = [&](const char* flag) -> const char* {
    if (i + 1 >= argc) usage((std::string(flag) + " needs a value").c_str());
    return argv[++i];
  };
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a == "-h" || a == "--help") {
      help();
    } else if (a == "--seeds") {
      o.seeds = std::strtoull(value("--seeds"), nullptr, 0);
    } else if (a == "--first") {
      o.first = std::strtoull(value("--first"), nullptr, 0);
    } else if (a == "--jobs") {
      o.jobs = std::atoi(value("--jobs"));
    } else if (a == "--timeout") {
      o.timeout_s = std::atoi(value("--timeout"));
    } else if (a == "--fault-probability") {
      o.fault_probability = std::strtod(value("--fault-probability"), nullptr);
    } else if (a == "--verb-faults") {
      o.verb_faults = true;
    } else if (a == "--faults") {
      o.faults = value("--faults");
    } else if (a == "--shrink") {
      o.shrink = std::strtoull(value("--shrink"), nullptr, 0);
      if (o.shrink == 0) usage("--shrink takes a seed (at least 1)");
    } else if (a == "--steps") {
      o.steps = std::atoi(value("--steps"));
      if (o.steps < 1) usage("--steps is at least 1");
    } else if (a == "--quiet") {
      o.quiet = true;
    } else if (a == "--check-without-faults") {
      o.check_without_faults = true;
    } else if (a == "--keep-env") {
      o.keep_env += std::string(",") + value("--keep-env");
    } else if (a == "--shard") {
      const char* v = value("--shard");
      char end = 0;
      if (std::sscanf(v, "%" SCNu64 "/%" SCNu64 "%c", &o.shard.index, &o.shard.count, &end) != 2 ||
          o.shard.count == 0 || o.shard.count > UINT32_MAX || o.shard.index == 0 ||
          o.shard.index > o.shard.count) {
        usage("--shard is K/N with 1 <= K <= N < 2^32");
      }
    } else if (a == "--junit") {
      o.junit = value("--junit");
    } else if (a == "--progress") {
      o.progress_s = std::strtod(value("--progress"), nullptr);
    } else {
      usage(("unknown option " + a).c_str());
    }
  }
  for (; i < argc; ++i) o.command.emplace_back(argv[i]);
  if (o.command.empty()) usage("no command after --");
  if (o.jobs < 1) o.jobs = 1;
  if (o.fault_probability < 0 || o.fault_probability > 1) usage("--fault-probability is in [0, 1]");
  if (o.steps != 0 && o.shrink == 0) usage("--steps goes with --shrink");
  if (o.check_without_faults && o.shrink != 0) usage("--check-without-faults is for a campaign");
  return o;
}

// A fault plan drawn from the seed: each packet fault (and the loss of connection manager
// messages) at a probability up to P.
std::string draw_faults(const Options& o, std::uint64_t seed) {
  std::string plan = o.faults;
  if (o.fault_probability <= 0) return plan;
  verbsim::sim::Rng rng(seed ^ 0x5eed5eed5eedull);
  auto p = [&] {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.4f", rng.unit() * o.fault_probability);
    return std::string(buf);
  };
  auto add = [&](const std::string& rule) { plan += (plan.empty() ? "" : "; ") + rule; };
  add("drop p=" + p());
  add("duplicate p=" + p());
  add("reorder p=" + p() + " by=5us");
  add("delay p=" + p() + " by=20us");
  if (o.verb_faults) {
    add("post_send p=" + p() + " errno=EAGAIN");
    add("post_recv p=" + p() + " errno=EAGAIN");
  }
  add("cm_drop p=" + p());  // drawn last: the plans of earlier versions keep their other rules
  return plan;
}

std::string quote(const std::string& s) {
  if (s.find_first_of(" \t'\"$;&|<>()*?\\") == std::string::npos && !s.empty()) return s;
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

struct Run {
  std::uint64_t seed;
  std::string faults;
  pid_t pid;
  int out_fd;
  std::string output;
  std::chrono::steady_clock::time_point started;
};

std::string command_line(const Options& o) {
  std::string cmd;
  for (const auto& a : o.command) {
    if (!cmd.empty()) cmd += ' ';
    cmd += quote(a);
  }
  return cmd;
}

// The variables of the swarm's environment that its runs inherit and a rerun keeps
// (verbsim/sim/rerun_env.hpp), less those in `skip`, which the command line sets: "A=1 B=2 ".
std::string kept_env(const Options& o, std::initializer_list<std::string_view> skip) {
  std::string text;
  for (const auto& [name, value] : verbsim::sim::rerun_environment(environ, o.keep_env, skip)) {
    text += name;
    text += '=';
    text += quote(value);
    text += ' ';
  }
  return text;
}

// The command that runs `r`'s seed again as the swarm ran it. A campaign's run inherits the
// swarm's environment but for VERBSIM_SEED and, when the seed has a plan, VERBSIM_FAULTS;
// a shrinking run (`shrinking`) has VERBSIM_FAULTS, VERBSIM_STEPS and VERBSIM_FAULT_FIRINGS
// set or unset by the swarm too.
std::string reproducer(const Options& o, const Run& r, int steps = 0, bool shrinking = false) {
  std::string cmd = "VERBSIM_SEED=" + std::to_string(r.seed);
  if (steps > 0) cmd += " VERBSIM_STEPS=" + std::to_string(steps);
  // Appended piecewise: GCC 12 warns falsely (-Wrestrict) about " " + std::string&&.
  if (!r.faults.empty() || shrinking) {
    cmd += " VERBSIM_FAULTS=";
    cmd += quote(r.faults);
  }
  cmd += ' ';
  if (shrinking) {
    cmd +=
        kept_env(o, {"VERBSIM_SEED", "VERBSIM_FAULTS", "VERBSIM_STEPS", "VERBSIM_FAULT_FIRINGS"});
  } else if (!r.faults.empty()) {
    cmd += kept_env(o, {"VERBSIM_SEED", "VERBSIM_FAULTS"});
  } else {
    cmd += kept_env(o, {"VERBSIM_SEED"});
  }
  cmd += command_line(o);
  return cmd;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  return buf;
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

std::string range_text(std::uint64_t first, std::uint64_t count) {
  return std::to_string(first) + " to " + std::to_string(first + count - 1);
}

void save_junit(const std::string& path, const Campaign& c) {
  if (path.empty()) return;
  try {
    verbsim::swarm::write_junit(path, c);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "verbsim-swarm: %s\n", e.what());
    std::exit(2);
  }
}

// verbsim-swarm merge [--junit FILE] <files...>: the shards' JUnit files as one campaign.
int merge(int argc, char** argv) {
  std::string junit;
  std::vector<Campaign> shards;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") help();
    if (a == "--junit") {
      if (++i == argc) usage("--junit needs a value");
      junit = argv[i];
      continue;
    }
    try {
      shards.push_back(verbsim::swarm::read_junit(a));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "verbsim-swarm merge: %s\n", e.what());
      return 2;
    }
  }
  if (shards.empty()) usage("merge: no JUnit files");
  std::vector<std::string> problems;
  const Campaign all = verbsim::swarm::merge(shards, problems);
  verbsim::swarm::print_summary(stdout, all,
                                " (merged from " + std::to_string(shards.size()) +
                                    " files; a campaign of " +
                                    std::to_string(shards.front().shard.count) + " shards, seeds " +
                                    range_text(all.range.first, all.range.count) + ")");
  for (const std::string& p : problems) std::printf("swarm merge: %s\n", p.c_str());
  save_junit(junit, all);
  if (!problems.empty()) return 2;
  return std::any_of(all.results.begin(), all.results.end(),
                     [](const SeedResult& r) { return r.failed; })
             ? 1
             : 0;
}

// One variable of a test's environment: set to `value`, or unset when it is null.
struct EnvVar {
  const char* name;
  const char* value;
};

// Starts the command with `env` on top of the swarm's own environment, its stdout and stderr
// into a pipe whose read end goes to `out_fd`; returns the child's pid.
pid_t start_test(const Options& o, std::initializer_list<EnvVar> env, int& out_fd) {
  int fds[2];
  if (::pipe(fds) != 0) {
    std::perror("verbsim-swarm: pipe");
    std::exit(2);
  }
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::close(fds[0]);
    ::close(fds[1]);
    for (const EnvVar& v : env) {
      if (v.value != nullptr) {
        ::setenv(v.name, v.value, 1);
      } else {
        ::unsetenv(v.name);
      }
    }
    std::vector<char*> args;
    for (const auto& a : o.command) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    std::fprintf(stderr, "verbsim-swarm: cannot run %s: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  ::close(fds[1]);
  out_fd = fds[0];
  return pid;
}

// What a test's wait status says went wrong: empty for exit status 0.
std::string ending(int status) {
  if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
    return "exit status " + std::to_string(WEXITSTATUS(status));
  }
  if (WIFSIGNALED(status)) return std::string("killed by signal ") + strsignal(WTERMSIG(status));
  return {};
}

std::string timed_out(const Options& o) {
  return "timed out after " + std::to_string(o.timeout_s) + " s";
}

// What one run printed, and how it ended: empty `why` for exit status 0.
struct Ending {
  std::string output;
  std::string why;
};

// Runs the command once for `seed` as `t` says, to its end or the timeout.
Ending run_to_end(const Options& o, std::uint64_t seed, const verbsim::swarm::Trial& t) {
  const std::string seed_text = std::to_string(seed);
  const std::string steps_text = std::to_string(t.steps);
  int fd = -1;
  const pid_t pid = start_test(o,
                               {{"VERBSIM_SEED", seed_text.c_str()},
                                {"VERBSIM_FAULTS", t.faults.c_str()},
                                {"VERBSIM_STEPS", t.steps > 0 ? steps_text.c_str() : nullptr},
                                {"VERBSIM_FAULT_FIRINGS",
                                 !t.firings.empty() ? t.firings.c_str() : nullptr}},
                               fd);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(o.timeout_s);
  std::string output;
  std::string why;
  int status = 0;
  for (;;) {
    pollfd pfd{fd, POLLIN, 0};
    ::poll(&pfd, 1, 100);
    char buf[4096];
    const ssize_t n = pfd.revents != 0 ? ::read(fd, buf, sizeof buf) : -1;
    if (n > 0) {
      output.append(buf, static_cast<std::size_t>(n));
      continue;
    }
    if (n == 0) break;  // every writer is gone
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      why = timed_out(o);
      break;
    }
  }
  ::close(fd);
  ::waitpid(pid, &status, 0);
  if (why.empty()) why = ending(status);
  return {std::move(output), std::move(why)};
}

// The failure's signature of one run, or an empty string if it passed.
std::string run_once(const Options& o, std::uint64_t seed, const verbsim::swarm::Trial& t) {
  const Ending e = run_to_end(o, seed, t);
  return e.why.empty() ? std::string() : verbsim::swarm::signature(e.output, e.why);
}

// --check-without-faults: a group's smallest seed run again with an empty fault plan
// (VERBSIM_FAULTS set empty, the swarm's own too); each seed runs once, whatever the groups.
class WithoutFaults {
 public:
  explicit WithoutFaults(const Options& o) : o_(o) {}

  std::string note(const verbsim::swarm::Group& g) {
    const std::uint64_t seed = g.seeds.front()->seed;
    const char* inherited = std::getenv("VERBSIM_FAULTS");
    if (draw_faults(o_, seed).empty() && (inherited == nullptr || *inherited == '\0')) {
      return "    without faults: the seed ran without a fault plan";
    }
    auto [it, fresh] = runs_.try_emplace(seed);
    if (fresh) it->second = run_to_end(o_, seed, {"", 0, {}});
    const Ending& e = it->second;
    const std::string seed_text = "seed " + std::to_string(seed);
    if (e.why.empty()) return "    without faults: " + seed_text + " passes";
    std::string same;
    std::string others;
    for (const verbsim::swarm::Failure& f : verbsim::swarm::failures(e.output, e.why)) {
      if (f.group() == g.key) {
        same = f.group();
      } else {
        others += (others.empty() ? "" : "; ") + f.group();
      }
    }
    std::string text = "    without faults: " + seed_text;
    text += same.empty() ? " fails otherwise (" + e.why + "): " + others
                         : " fails the same way (" + e.why + ")";
    if (!same.empty() && !others.empty()) text += ", and also: " + others;
    text += "\n    VERBSIM_SEED=" + std::to_string(seed) +
            " VERBSIM_FAULTS= " + kept_env(o_, {"VERBSIM_SEED", "VERBSIM_FAULTS"}) +
            command_line(o_);
    return text;
  }

 private:
  const Options& o_;
  std::map<std::uint64_t, Ending> runs_;
};

// --shrink SEED: the seed's run with its plan (drawn as the campaign draws it), shrunk.
int shrink(const Options& o) {
  char firings[] = "/tmp/verbsim-firings-XXXXXX";
  if (const int fd = ::mkstemp(firings); fd >= 0) {
    ::close(fd);
  } else {
    std::perror("verbsim-swarm: mkstemp");
    return 2;
  }
  const Run before{o.shrink, draw_faults(o, o.shrink), 0, -1, {}, {}};
  const verbsim::swarm::Shrunk s = verbsim::swarm::shrink(
      before.faults, o.steps, firings,
      [&](const verbsim::swarm::Trial& t) { return run_once(o, o.shrink, t); }, stdout);
  std::remove(firings);
  if (s.signature.empty()) {
    std::printf("swarm shrink: seed %llu did not fail; nothing to shrink\n",
                static_cast<unsigned long long>(o.shrink));
    return 0;
  }
  Run after = before;
  after.faults = s.faults;
  auto size = [](const std::string& faults, int steps) {
    const std::size_t n = verbsim::swarm::rules_of(faults).size();
    std::string text = std::to_string(n) + (n == 1 ? " fault rule" : " fault rules");
    if (steps > 0) text += ", " + std::to_string(steps) + " steps";
    return text;
  };
  std::printf(
      "--- before: %s\n%s\n--- after: %s, the same failure:\n%s\n"
      "swarm shrink: seed %llu, %d runs, fails with: %s\n",
      size(before.faults, o.steps).c_str(), reproducer(o, before, 0, true).c_str(),
      size(after.faults, s.steps).c_str(), reproducer(o, after, s.steps, true).c_str(),
      static_cast<unsigned long long>(o.shrink), s.runs, s.signature.c_str());
  return 1;
}

int run(const Options& o) {
  const verbsim::swarm::SeedRange slice = verbsim::swarm::slice({o.first, o.seeds}, o.shard);
  Campaign campaign;
  campaign.name = o.command.front().substr(o.command.front().rfind('/') + 1);
  campaign.command = command_line(o);
  campaign.range = {o.first, o.seeds};
  campaign.shard = o.shard;
  campaign.timestamp = utc_now();
  campaign.hostname = host_name();
  const auto started = std::chrono::steady_clock::now();

  std::vector<Run> running;
  std::uint64_t next = slice.first;
  const std::uint64_t end = slice.first + slice.count;
  std::uint64_t failed = 0;
  verbsim::swarm::Progress progress(slice.count, o.progress_s);

  auto launch = [&](std::uint64_t seed) {
    const std::string faults = draw_faults(o, seed);
    const std::string seed_text = std::to_string(seed);
    int fd = -1;
    // An empty plan leaves the swarm's own VERBSIM_FAULTS, if any, to the test.
    const EnvVar seed_var{"VERBSIM_SEED", seed_text.c_str()};
    const pid_t pid = faults.empty()
                          ? start_test(o, {seed_var}, fd)
                          : start_test(o, {seed_var, {"VERBSIM_FAULTS", faults.c_str()}}, fd);
    ::fcntl(fd, F_SETFL, O_NONBLOCK);
    running.push_back({seed, faults, pid, fd, {}, std::chrono::steady_clock::now()});
  };

  while (next < end || !running.empty()) {
    while (next < end && static_cast<int>(running.size()) < o.jobs) launch(next++);
    std::vector<pollfd> pfds;
    for (const Run& r : running) pfds.push_back({r.out_fd, POLLIN, 0});
    ::poll(pfds.data(), pfds.size(), 100);
    for (std::size_t i = 0; i < running.size();) {
      Run& r = running[i];
      char buf[4096];
      ssize_t n;
      while ((n = ::read(r.out_fd, buf, sizeof buf)) > 0) r.output.append(buf, static_cast<std::size_t>(n));
      int status = 0;
      const pid_t done = ::waitpid(r.pid, &status, WNOHANG);
      const auto now = std::chrono::steady_clock::now();
      std::string why;
      if (done == 0 && now - r.started > std::chrono::seconds(o.timeout_s)) {
        ::kill(r.pid, SIGKILL);
        ::waitpid(r.pid, &status, 0);
        why = timed_out(o);
      } else if (done == 0) {
        ++i;
        continue;
      } else {
        why = ending(status);
      }
      while ((n = ::read(r.out_fd, buf, sizeof buf)) > 0) r.output.append(buf, static_cast<std::size_t>(n));
      ::close(r.out_fd);
      SeedResult result;
      result.seed = r.seed;
      result.seconds = std::chrono::duration<double>(now - r.started).count();
      progress.clear();
      if (!why.empty()) {
        ++failed;
        std::printf("FAIL seed %llu (%s)\n", static_cast<unsigned long long>(r.seed), why.c_str());
        result.failed = true;
        result.failures = verbsim::swarm::failures(r.output, why);
        result.reproducer = reproducer(o, r);
        // The last 3000 bytes or so, from the start of a line.
        std::size_t from = r.output.size() > 3000 ? r.output.size() - 3000 : 0;
        const std::size_t line = from > 0 ? r.output.find('\n', from - 1) : std::string::npos;
        if (line != std::string::npos) from = line + 1;
        result.output = r.output.substr(from);
        result.why = std::move(why);
      } else if (!o.quiet) {
        std::printf("ok   seed %llu\n", static_cast<unsigned long long>(r.seed));
      }
      std::fflush(stdout);
      campaign.results.push_back(std::move(result));
      running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
    }
    progress.update(campaign.results.size(), failed);
  }
  progress.clear();

  campaign.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::sort(campaign.results.begin(), campaign.results.end(),
            [](const SeedResult& a, const SeedResult& b) { return a.seed < b.seed; });
  std::string scope;
  if (o.shard.count > 1) {
    scope = " (shard " + std::to_string(o.shard.index) + "/" + std::to_string(o.shard.count) +
            ": " +
            (slice.count == 0 ? std::string("no seeds")
                              : "seeds " + range_text(slice.first, slice.count)) +
            " of " + range_text(o.first, o.seeds) + ")";
  }
  WithoutFaults without(o);
  verbsim::swarm::GroupNote note;
  if (o.check_without_faults) {
    note = [&](const verbsim::swarm::Group& g) { return without.note(g); };
  }
  verbsim::swarm::print_summary(stdout, campaign, scope, note);
  save_junit(o.junit, campaign);
  return failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "merge") == 0) return merge(argc - 1, argv + 1);
  const Options o = parse(argc, argv);
  return o.shrink != 0 ? shrink(o) : run(o);
}
