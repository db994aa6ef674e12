// fork() in a C++ program on a shared fabric (Config::fabric): a child's exit, and the
// destruction of the child's copies of its parent's objects, leave the parent's membership of
// the fabric alone (docs/MULTIPROCESS.md, "Leaving, and vanishing").
//
// Two processes, each a sim::World on one fabric with an RC QP, connected through pipes. The
// client sends the server a message per round and the server answers it, every byte checked.
// Between rounds the server forks three children:
//   - one that calls std::exit at once (atexit: before the fix, the fabric's exit handler left
//     the fabric in the parent's place);
//   - one that returns through the destructors of its copies of the server's objects, the
//     world last (before the fix, ~World left the fabric in the parent's place, after running
//     the parent's world for up to 200 ms and taking the parcels sent to it);
//   - one that makes a world of its own on the same fabric (a process of its own there), moves
//     a message between two QPs of it, and exits.
// After each the rounds go on: the client's messages still reach the server's QP (before the
// fix, RETRY_EXC_ERR). Exit status 0 and "PASS" when both processes pass.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "verbsim/sim/world.hpp"
#include "verbsim/verbsim.hpp"

namespace {

using namespace verbsim;

#define EXPECT_OR_EXIT(cond, ...)                               \
  do {                                                          \
    if (!(cond)) {                                              \
      std::fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
      std::fprintf(stderr, __VA_ARGS__);                        \
      std::fprintf(stderr, "\n");                               \
      std::exit(1);                                             \
    }                                                           \
  } while (false)

constexpr std::uint32_t kBytes = 1000;
constexpr int kRounds = 40;
// What the child that returns through its destructors exits with (main passes it on).
constexpr int kReturnedChild = 0;

void put(int fd, const void* p, std::size_t n) {
  EXPECT_OR_EXIT(::write(fd, p, n) == static_cast<ssize_t>(n), "write to the pipe");
}
void get(int fd, void* p, std::size_t n) {
  EXPECT_OR_EXIT(::read(fd, p, n) == static_cast<ssize_t>(n), "the other process is gone");
}

char pattern(int round, std::uint32_t i) { return static_cast<char>(i * 13 + round * 7 + 1); }

sim::Config config(const std::string& fabric) {
  sim::Config c;
  c.fabric = fabric;
  c.env_faults = false;
  return c;
}

// A QP with its CQ and buffers, on a context of `world`.
struct Side {
  explicit Side(sim::World& world) {
    ctx = world.open("sim0");
    pd = ctx->alloc_pd();
    cq = ctx->create_cq(16);
    send_buf.assign(kBytes, 0);
    recv_buf.assign(kBytes, 0);
    send_mr = pd->reg_mr(send_buf.data(), send_buf.size(), Access::local_write);
    recv_mr = pd->reg_mr(recv_buf.data(), recv_buf.size(), Access::local_write);
    QpInitAttr init;
    init.send_cq = cq.get();
    init.recv_cq = cq.get();
    init.cap = {4, 4, 1, 1, 0};
    qp = pd->create_qp(init);
  }
  Endpoint endpoint() const { return {ctx->query_gid(1, 1), qp->qp_num(), 0}; }
  WorkCompletion wait_one(const char* what, int round) {
    WorkCompletion wc[1];
    for (long spins = 0;; ++spins) {
      const PollResult r = cq->poll(wc);
      EXPECT_OR_EXIT(!r.error(), "poll: %s", r.error().message().c_str());
      if (r.count == 1) break;
      EXPECT_OR_EXIT(spins < 500'000'000L, "%s of round %d: no completion", what, round);
    }
    EXPECT_OR_EXIT(wc[0].status == WcStatus::success, "%s of round %d: %s", what, round,
                   std::string(to_string(wc[0].status)).c_str());
    return wc[0];
  }
  void post_recv() {
    const Sge sge = recv_mr->sge(0, kBytes);
    EXPECT_OR_EXIT(!qp->post_recv(RecvWr{2, {&sge, 1}}).error(), "post_recv");
  }
  void send(int round) {
    for (std::uint32_t i = 0; i < kBytes; ++i) send_buf[i] = pattern(round, i);
    const Sge sge = send_mr->sge(0, kBytes);
    SendWr wr;
    wr.wr_id = 1;
    wr.sg_list = {&sge, 1};
    wr.flags = SendFlags::signaled;
    EXPECT_OR_EXIT(!qp->post_send({&wr, 1}).error(), "post_send of round %d", round);
    EXPECT_OR_EXIT(wait_one("the send", round).wr_id == 1, "round %d: a receive first", round);
  }
  void receive(int round) {
    const WorkCompletion wc = wait_one("the receive", round);
    EXPECT_OR_EXIT(wc.wr_id == 2 && wc.byte_len == kBytes, "round %d: %u bytes", round,
                   wc.byte_len);
    for (std::uint32_t i = 0; i < kBytes; ++i) {
      EXPECT_OR_EXIT(recv_buf[i] == pattern(round, i), "round %d: byte %u", round, i);
    }
    recv_buf.assign(kBytes, 0);
    post_recv();
  }
  std::unique_ptr<Context> ctx;
  std::unique_ptr<ProtectionDomain> pd;
  std::unique_ptr<CompletionQueue> cq;
  std::vector<char> send_buf, recv_buf;
  std::unique_ptr<MemoryRegion> send_mr, recv_mr;
  std::unique_ptr<QueuePair> qp;
};

// Waits up to 10 s for `child`: true if it exited 0. Meanwhile `idle` (a CQ of no QP) is
// polled: a world on a shared fabric moves only while its program calls the library, and a
// child with a world of its own on the fabric waits for it (docs/MULTIPROCESS.md, "Time").
bool reaped(pid_t child, const char* what, CompletionQueue& idle) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    for (int polls = 0; polls < 1000; ++polls) {
      WorkCompletion none[1];
      EXPECT_OR_EXIT(idle.poll(none).count == 0, "a completion on a CQ of no QP");
    }
    int status = 0;
    const pid_t got = ::waitpid(child, &status, WNOHANG);
    EXPECT_OR_EXIT(got >= 0, "waitpid");
    if (got == child) {
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return true;
      std::fprintf(stderr, "FAIL: %s ended with status %d\n", what, status);
      return false;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
      std::fprintf(stderr, "FAIL: %s is still running after 10 s (hung); killed\n", what);
      return false;
    }
  }
}

// A child with a world of its own on the fabric: two QPs in loopback, one message.
int child_with_own_world(const std::string& fabric) {
  sim::World world(config(fabric));
  Side a(world), b(world);
  connect(*a.qp, 0, b.endpoint());
  connect(*b.qp, 0, a.endpoint());
  b.post_recv();
  a.send(99);
  b.receive(99);
  return 0;
}

// Returns kReturnedChild in a child that is to return through its destructors.
int server(const std::string& fabric, int to_client, int from_client) {
  sim::World world(config(fabric));  // declared first: destroyed last
  Side s(world);
  const std::unique_ptr<CompletionQueue> idle = s.ctx->create_cq(1);
  Endpoint peer;
  get(from_client, &peer, sizeof peer);
  connect(*s.qp, 0, peer);
  s.post_recv();  // before the client has this side's endpoint
  const Endpoint self = s.endpoint();
  put(to_client, &self, sizeof self);
  bool ok = true;
  for (int round = 1; round <= kRounds; ++round) {
    s.receive(round);
    s.send(round + 1000);
    std::fflush(stdout);
    if (round == 10) {
      const pid_t c = ::fork();
      EXPECT_OR_EXIT(c >= 0, "fork");
      if (c == 0) std::exit(0);
      ok = reaped(c, "the server's child that exits at once", *idle) && ok;
    } else if (round == 20) {
      const pid_t c = ::fork();
      EXPECT_OR_EXIT(c >= 0, "fork");
      if (c == 0) return kReturnedChild;  // ~Side and ~World of the copies, then exit
      ok = reaped(c, "the server's child that destroys its copies", *idle) && ok;
    } else if (round == 30) {
      const pid_t c = ::fork();
      EXPECT_OR_EXIT(c >= 0, "fork");
      if (c == 0) std::exit(child_with_own_world(fabric));
      ok = reaped(c, "the server's child with a world of its own", *idle) && ok;
    }
  }
  EXPECT_OR_EXIT(ok, "a child failed");
  std::printf("server: %d rounds, 3 children forked and reaped\n", kRounds);
  char done;
  get(from_client, &done, 1);
  return 0;
}

int client(const std::string& fabric, int to_server, int from_server) {
  sim::World world(config(fabric));
  Side c(world);
  const Endpoint self = c.endpoint();
  put(to_server, &self, sizeof self);
  Endpoint peer;
  get(from_server, &peer, sizeof peer);
  connect(*c.qp, 0, peer);
  c.post_recv();
  for (int round = 1; round <= kRounds; ++round) {
    c.send(round);
    c.receive(round + 1000);
  }
  std::printf("client: %d rounds, every byte as sent\n", kRounds);
  put(to_server, "d", 1);
  return 0;
}

}  // namespace

int main() {
  const std::string fabric = "fork-cpp-" + std::to_string(::getpid());
  int to_client[2], to_server[2];
  EXPECT_OR_EXIT(::pipe(to_client) == 0 && ::pipe(to_server) == 0, "pipe");
  std::fflush(stdout);
  const pid_t s = ::fork();
  if (s == 0) {
    ::close(to_client[0]);
    ::close(to_server[1]);
    std::exit(server(fabric, to_client[1], to_server[0]));
  }
  const pid_t c = ::fork();
  if (c == 0) {
    ::close(to_server[0]);
    ::close(to_client[1]);
    std::exit(client(fabric, to_server[1], to_client[0]));
  }
  for (int fd : {to_client[0], to_client[1], to_server[0], to_server[1]}) ::close(fd);
  int ok = 0;
  for (pid_t p : {s, c}) {
    int status = 0;
    ::waitpid(p, &status, 0);
    ok += WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  const std::string path = "/dev/shm/verbsim-fabric-" + std::to_string(::getuid()) + "-" + fabric;
  if (ok != 2 || ::access(path.c_str(), F_OK) == 0) {
    std::printf("FAIL: %s\n", ok != 2 ? "a process failed" : "the fabric's file is left");
    return 1;
  }
  std::printf("PASS\n");
  return 0;
}
