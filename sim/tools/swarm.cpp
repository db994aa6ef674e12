// verbsim-swarm: runs a test binary under many seeds (optionally with a fault plan drawn from
// each seed), in parallel, and prints the seeds that fail with the command that reproduces each.
//
//   verbsim-swarm [--seeds N] [--first S] [--jobs J] [--timeout SEC]
//                 [--fault-probability P] [--verb-faults] [--faults PLAN] [--quiet]
//                 -- <binary> [args...]
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <string>
#include <vector>

#include "../src/fabric/rng.hpp"

namespace {

struct Options {
  std::uint64_t seeds = 32;
  std::uint64_t first = 1;
  int jobs = 2;
  int timeout_s = 300;
  double fault_probability = 0;
  bool verb_faults = false;
  bool quiet = false;
  std::string faults;
  std::vector<std::string> command;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "verbsim-swarm: %s\n"
               "usage: verbsim-swarm [--seeds N] [--first S] [--jobs J] [--timeout SEC]\n"
               "                     [--fault-probability P] [--verb-faults] [--faults PLAN]\n"
               "                     [--quiet] -- <binary> [args...]\n",
               why);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
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
    if (a == "--seeds") {
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
    } else if (a == "--quiet") {
      o.quiet = true;
    } else {
      usage(("unknown option " + a).c_str());
    }
  }
  for (; i < argc; ++i) o.command.emplace_back(argv[i]);
  if (o.command.empty()) usage("no command after --");
  if (o.jobs < 1) o.jobs = 1;
  if (o.fault_probability < 0 || o.fault_probability > 1) usage("--fault-probability is in [0, 1]");
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

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  std::vector<Run> running;
  std::vector<std::pair<Run, std::string>> failures;
  std::uint64_t next = o.first;
  const std::uint64_t end = o.first + o.seeds;
  std::uint64_t finished = 0;

  auto launch = [&](std::uint64_t seed) {
    int fds[2];
    if (::pipe(fds) != 0) {
      std::perror("verbsim-swarm: pipe");
      std::exit(2);
    }
    const std::string faults = draw_faults(o, seed);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::dup2(fds[1], 1);
      ::dup2(fds[1], 2);
      ::close(fds[0]);
      ::close(fds[1]);
      ::setenv("VERBSIM_SEED", std::to_string(seed).c_str(), 1);
      if (!faults.empty()) ::setenv("VERBSIM_FAULTS", faults.c_str(), 1);
      std::vector<char*> args;
      for (const auto& a : o.command) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execvp(args[0], args.data());
      std::fprintf(stderr, "verbsim-swarm: cannot run %s: %s\n", args[0], std::strerror(errno));
      ::_exit(127);
    }
    ::close(fds[1]);
    ::fcntl(fds[0], F_SETFL, O_NONBLOCK);
    running.push_back({seed, faults, pid, fds[0], {}, std::chrono::steady_clock::now()});
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
      const auto age = std::chrono::steady_clock::now() - r.started;
      std::string why;
      if (done == 0 && age > std::chrono::seconds(o.timeout_s)) {
        ::kill(r.pid, SIGKILL);
        ::waitpid(r.pid, &status, 0);
        why = "timed out after " + std::to_string(o.timeout_s) + " s";
      } else if (done == 0) {
        ++i;
        continue;
      } else if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
        why = "exit status " + std::to_string(WEXITSTATUS(status));
      } else if (WIFSIGNALED(status)) {
        why = std::string("killed by signal ") + strsignal(WTERMSIG(status));
      }
      while ((n = ::read(r.out_fd, buf, sizeof buf)) > 0) r.output.append(buf, static_cast<std::size_t>(n));
      ::close(r.out_fd);
      ++finished;
      if (!why.empty()) {
        std::printf("FAIL seed %llu (%s)\n", static_cast<unsigned long long>(r.seed), why.c_str());
        failures.emplace_back(std::move(r), why);
      } else if (!o.quiet) {
        std::printf("ok   seed %llu\n", static_cast<unsigned long long>(r.seed));
      }
      std::fflush(stdout);
      running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }

  for (const auto& [r, why] : failures) {
    std::string cmd = "VERBSIM_SEED=" + std::to_string(r.seed);
    // Appended piecewise: GCC 12 warns falsely (-Wrestrict) about " " + std::string&&.
    if (!r.faults.empty()) {
      cmd += " VERBSIM_FAULTS=";
      cmd += quote(r.faults);
    }
    for (const auto& a : o.command) {
      cmd += ' ';
      cmd += quote(a);
    }
    std::printf("\n--- seed %llu failed (%s); reproduce with:\n%s\n--- last output:\n",
                static_cast<unsigned long long>(r.seed), why.c_str(), cmd.c_str());
    const std::size_t keep = 3000;
    std::fputs(r.output.size() > keep ? r.output.c_str() + r.output.size() - keep : r.output.c_str(), stdout);
  }
  std::printf("\nswarm: %llu seeds, %zu failed\n", static_cast<unsigned long long>(finished),
              failures.size());
  return failures.empty() ? 0 : 1;
}
