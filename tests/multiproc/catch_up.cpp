// A C++ program on the sim backend that shares a fabric (Config::fabric) and posts after a long
// passive wait catches up, as the drop-in does (docs/MULTIPROCESS.md, "Time").
//
// Two processes, each a sim::World on one fabric. The client connects, polls its empty CQ once
// (a passive wait: nothing due, so its bound is "never"), then waits for a word from the server
// through a pipe, outside the library (as a program blocked on its socket). Meanwhile the
// server computes for 2 s of virtual time (World::run_until: the client's bound lets it). Then the server says "go" and waits for
// a SEND; the client posts it. Without catching up, the SEND reaches the server 2 s in its
// past, the server answers at its present, and the client's seven retries (timeout 14: 67 ms
// each) run out first: RETRY_EXC_ERR. With it, the SEND and every byte arrive, and the
// completion is SUCCESS. Exit status 0 and "PASS" when both processes pass.
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "verbsim/sim/world.hpp"
#include "verbsim/verbsim.hpp"

namespace {

using namespace verbsim;

#define EXPECT_OR_EXIT(cond, ...)                                     \
  do {                                                                \
    if (!(cond)) {                                                    \
      std::fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);       \
      std::fprintf(stderr, __VA_ARGS__);                              \
      std::fprintf(stderr, "\n");                                     \
      std::exit(1);                                                   \
    }                                                                 \
  } while (false)

constexpr std::uint32_t kBytes = 3000;
constexpr std::uint64_t kAhead = 2'000'000'000;  // what the server computes, virtual ns

void put(int fd, const void* p, std::size_t n) {
  EXPECT_OR_EXIT(::write(fd, p, n) == static_cast<ssize_t>(n), "write to the pipe");
}
void get(int fd, void* p, std::size_t n) {
  EXPECT_OR_EXIT(::read(fd, p, n) == static_cast<ssize_t>(n), "the other process is gone");
}

struct Side {
  explicit Side(const std::string& fabric) : world(config(fabric)) {
    ctx = world.open("sim0");
    pd = ctx->alloc_pd();
    cq = ctx->create_cq(16);
    buf.assign(kBytes, 0);
    mr = pd->reg_mr(buf.data(), buf.size(), Access::local_write);
    QpInitAttr init;
    init.send_cq = cq.get();
    init.recv_cq = cq.get();
    init.cap = {4, 4, 1, 1, 0};
    qp = pd->create_qp(init);
  }
  static sim::Config config(const std::string& fabric) {
    sim::Config c;
    c.fabric = fabric;
    c.env_faults = false;
    return c;
  }
  Endpoint endpoint() const { return {ctx->query_gid(1, 1), qp->qp_num(), 0}; }
  WorkCompletion wait_one() {
    WorkCompletion wc[1];
    for (long spins = 0;; ++spins) {
      const PollResult r = cq->poll(wc);
      EXPECT_OR_EXIT(!r.error(), "poll: %s", r.error().message().c_str());
      if (r.count == 1) return wc[0];
      EXPECT_OR_EXIT(spins < 200'000'000L, "no completion");
    }
  }
  // Declared first: destroyed last.
  sim::World world;
  std::unique_ptr<Context> ctx;
  std::unique_ptr<ProtectionDomain> pd;
  std::unique_ptr<CompletionQueue> cq;
  std::vector<char> buf;
  std::unique_ptr<MemoryRegion> mr;
  std::unique_ptr<QueuePair> qp;
};

// Polls `s`'s CQ (a wait in the library: its world answers and lets time pass) until a word
// comes through `fd`, outside it.
void wait_polling(Side& s, int fd) {
  for (long polls = 0;; ++polls) {
    WorkCompletion wc[1];
    EXPECT_OR_EXIT(s.cq->poll(wc).count == 0, "a completion nothing was posted for");
    if (polls % 64 == 0) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 0) == 1) break;
    }
  }
  char word;
  get(fd, &word, 1);
}

int server(const std::string& fabric, int to_client, int from_client) {
  Side s(fabric);
  Endpoint peer;
  get(from_client, &peer, sizeof peer);
  connect(*s.qp, 0, peer);
  const Sge sge = s.mr->sge(0, kBytes);
  EXPECT_OR_EXIT(!s.qp->post_recv(RecvWr{1, {&sge, 1}}).error(), "post_recv");
  const Endpoint self = s.endpoint();
  put(to_client, &self, sizeof self);
  char ready;
  get(from_client, &ready, 1);  // the client waits on its CQ from now on
  // The client is about to wait in its polls; until it does, its bound holds this clock.
  const std::uint64_t start = s.world.now();
  for (int tries = 0; tries < 5000 && s.world.now() < start + kAhead; ++tries) {
    s.world.run_until(start + kAhead);
    if (s.world.now() < start + kAhead) ::usleep(1000);
  }
  EXPECT_OR_EXIT(s.world.now() >= start + kAhead,
                 "the server's clock got to %llu ns of %llu: the client's wait held it",
                 static_cast<unsigned long long>(s.world.now() - start),
                 static_cast<unsigned long long>(kAhead));
  put(to_client, "g", 1);
  const WorkCompletion wc = s.wait_one();
  EXPECT_OR_EXIT(wc.status == WcStatus::success && wc.byte_len == kBytes,
                 "server: receive status %d, %u bytes", static_cast<int>(wc.status), wc.byte_len);
  for (std::uint32_t i = 0; i < kBytes; ++i) {
    EXPECT_OR_EXIT(s.buf[i] == static_cast<char>(i * 7 + 1), "server: byte %u", i);
  }
  std::printf("server: ran %llu ms ahead, then received %u bytes\n",
              static_cast<unsigned long long>(kAhead / 1'000'000), kBytes);
  wait_polling(s, from_client);  // the client has its completion
  return 0;
}

int client(const std::string& fabric, int to_server, int from_server) {
  Side c(fabric);
  const Endpoint self = c.endpoint();
  put(to_server, &self, sizeof self);
  Endpoint peer;
  get(from_server, &peer, sizeof peer);
  connect(*c.qp, 0, peer);
  put(to_server, "r", 1);
  // A passive wait: an empty poll with nothing due (the world promises nothing before its
  // next event: never), then the wait for the word from outside, as a program blocked on its
  // socket.
  WorkCompletion none[1];
  EXPECT_OR_EXIT(c.cq->poll(none).count == 0, "a completion before anything was posted");
  char go;
  get(from_server, &go, 1);
  for (std::uint32_t i = 0; i < kBytes; ++i) c.buf[i] = static_cast<char>(i * 7 + 1);
  const Sge sge = c.mr->sge(0, kBytes);
  SendWr wr;
  wr.wr_id = 7;
  wr.sg_list = {&sge, 1};
  wr.flags = SendFlags::signaled;
  EXPECT_OR_EXIT(!c.qp->post_send({&wr, 1}).error(), "post_send");
  const WorkCompletion wc = c.wait_one();
  EXPECT_OR_EXIT(wc.status == WcStatus::success,
                 "client: the SEND after the wait completed with %s (the server was %llu ms "
                 "ahead; its answer came after the retries)",
                 std::string(to_string(wc.status)).c_str(),
                 static_cast<unsigned long long>(kAhead / 1'000'000));
  std::printf("client: SEND after a passive wait: SUCCESS\n");
  put(to_server, "d", 1);
  return 0;
}

}  // namespace

int main() {
  const std::string fabric = "catch-up-" + std::to_string(::getpid());
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
  if (ok != 2) {
    std::printf("FAIL: a process failed\n");
    return 1;
  }
  std::printf("PASS\n");
  return 0;
}
