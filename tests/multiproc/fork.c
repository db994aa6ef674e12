/* fork() in a process of a shared fabric, through the drop-in (docs/MULTIPROCESS.md, "Leaving,
 * and vanishing"): a child's exit must not take its parent out of the fabric.
 *
 * The program forks two processes, A and B, before either touches verbs; each joins the fabric
 * VERBSIM_FABRIC (fork-<pid> when unset) and they connect an RC QP each through pipes. Then B
 * sends A a message of N bytes per round and A answers it, every byte checked, for 30 rounds.
 * After round 10 A forks a child that calls exit() at once; after round 20 a child that opens a
 * device of its own (it joins the fabric as a process of its own), moves a message between two
 * QPs of its own, and exits. A reaps each (a child still there after 10 s is killed and fails
 * the test) and the rounds go on: B's messages still reach A's QP, A's answers still reach B.
 * Before the fix the first child hung in exit() (the lock it inherited was held by a thread of
 * the parent); a child that did exit left the fabric in the parent's place (the parent's QPs
 * became unreachable: B's next message ended in RETRY_EXC_ERR).
 *
 * The main process passes when both exit 0 and the fabric's file is gone. Exit status 0 and
 * "PASS" when every check held. */
#define _DEFAULT_SOURCE  // setenv, usleep
#include <errno.h>
#include <infiniband/verbs.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../dropin/check.h"
#include "../dropin/rc.h"

enum { kBytes = 1000, kRounds = 30 };

struct endpoint {
  uint32_t qpn;
  union ibv_gid gid;
};

static void put(int fd, const void *p, size_t n) {
  CHECK(write(fd, p, n) == (ssize_t)n, "write to the pipe: %s", strerror(errno));
}

static void get(int fd, void *p, size_t n) {
  CHECK(read(fd, p, n) == (ssize_t)n, "read from the pipe: the other process is gone");
}

static uint8_t pattern(int round, int i) { return (uint8_t)(i * 13 + round * 7 + 1); }

/* One side: a QP, its CQ, a buffer to send from and one to receive into. */
struct side {
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  struct ibv_cq *cq;
  struct ibv_qp *qp;
  struct ibv_mr *mr;
  uint8_t send_buf[kBytes];
  uint8_t recv_buf[kBytes];
};

static void make_side(struct side *s) {
  s->ctx = first_device();
  s->pd = ibv_alloc_pd(s->ctx);
  CHECK(s->pd, "ibv_alloc_pd");
  s->cq = ibv_create_cq(s->ctx, 16, NULL, NULL, 0);
  CHECK(s->cq, "ibv_create_cq");
  s->qp = rc_qp(s->pd, s->cq, NULL);
  s->mr = ibv_reg_mr(s->pd, s, sizeof *s, IBV_ACCESS_LOCAL_WRITE);
  CHECK(s->mr, "ibv_reg_mr: %s", strerror(errno));
}

static struct endpoint endpoint_of(const struct side *s) {
  struct endpoint e = {.qpn = s->qp->qp_num};
  CHECK(ibv_query_gid(s->ctx, 1, 1, &e.gid) == 0, "ibv_query_gid");
  return e;
}

static void post_recv(struct side *s) {
  struct ibv_sge sge = {(uintptr_t)s->recv_buf, kBytes, s->mr->lkey};
  struct ibv_recv_wr wr = {.wr_id = 2, .sg_list = &sge, .num_sge = 1}, *bad = NULL;
  CHECK(ibv_post_recv(s->qp, &wr, &bad) == 0, "ibv_post_recv");
}

static struct ibv_wc wait_one(struct side *s, const char *what, int round) {
  struct ibv_wc wc;
  for (long polls = 0;; ++polls) {
    const int n = ibv_poll_cq(s->cq, 1, &wc);
    CHECK(n >= 0, "ibv_poll_cq: %d", n);
    if (n == 1) break;
    CHECK(polls < 2000000000L, "%s of round %d: no completion", what, round);
  }
  CHECK(wc.status == IBV_WC_SUCCESS, "%s of round %d: %s", what, round,
        ibv_wc_status_str(wc.status));
  return wc;
}

/* Sends round `round`'s pattern and waits for the send's completion. */
static void send_round(struct side *s, int round) {
  for (int i = 0; i < kBytes; ++i) s->send_buf[i] = pattern(round, i);
  struct ibv_sge sge = {(uintptr_t)s->send_buf, kBytes, s->mr->lkey};
  struct ibv_send_wr wr = {.wr_id = 1,
                           .sg_list = &sge,
                           .num_sge = 1,
                           .opcode = IBV_WR_SEND,
                           .send_flags = IBV_SEND_SIGNALED},
                     *bad = NULL;
  CHECK(ibv_post_send(s->qp, &wr, &bad) == 0, "ibv_post_send of round %d", round);
  const struct ibv_wc wc = wait_one(s, "the send", round);
  CHECK(wc.wr_id == 1, "round %d: a receive where the send's completion was due", round);
}

/* Waits for round `round`'s message and checks every byte; a receive is posted again first. */
static void receive_round(struct side *s, int round) {
  const struct ibv_wc wc = wait_one(s, "the receive", round);
  CHECK(wc.wr_id == 2 && wc.byte_len == kBytes, "round %d: %u bytes", round, wc.byte_len);
  for (int i = 0; i < kBytes; ++i) {
    CHECK(s->recv_buf[i] == pattern(round, i), "round %d: byte %d is 0x%02x, want 0x%02x", round, i,
          s->recv_buf[i], pattern(round, i));
  }
  memset(s->recv_buf, 0, kBytes);
  post_recv(s);
}

/* Waits up to 10 s for `child`: 1 if it exited 0. */
static int reaped(pid_t child, const char *what) {
  const time_t deadline = time(NULL) + 10;
  for (;;) {
    int status = 0;
    const pid_t got = waitpid(child, &status, WNOHANG);
    CHECK(got >= 0, "waitpid: %s", strerror(errno));
    if (got == child) {
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 1;
      fprintf(stderr, "FAIL: %s %s %d\n", what, WIFEXITED(status) ? "exited" : "was killed by",
              WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
      return 0;
    }
    if (time(NULL) > deadline) {
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
      fprintf(stderr, "FAIL: %s is still running after 10 s (hung); killed\n", what);
      return 0;
    }
    usleep(1000);
  }
}

/* A's child with a device of its own: two QPs of its own in loopback, one message. */
static int child_with_own_device(void) {
  static struct side a, b;
  make_side(&a);
  make_side(&b);
  const struct endpoint ea = endpoint_of(&a), eb = endpoint_of(&b);
  rc_connect(a.qp, eb.qpn, &eb.gid, IBV_ACCESS_LOCAL_WRITE, 7, 12);
  rc_connect(b.qp, ea.qpn, &ea.gid, IBV_ACCESS_LOCAL_WRITE, 7, 12);
  post_recv(&b);
  send_round(&a, 99);
  receive_round(&b, 99);
  return 0;
}

static int process_a(int to_b, int from_b) {
  static struct side s;
  make_side(&s);
  const struct endpoint self = endpoint_of(&s);
  struct endpoint peer;
  put(to_b, &self, sizeof self);
  get(from_b, &peer, sizeof peer);
  rc_connect(s.qp, peer.qpn, &peer.gid, IBV_ACCESS_LOCAL_WRITE, 7, 12);
  post_recv(&s);
  put(to_b, "c", 1);  // connected, a receive posted
  int ok = 1;
  for (int round = 1; round <= kRounds; ++round) {
    receive_round(&s, round);
    send_round(&s, round + 1000);
    if (round == 10) {
      fflush(stdout);
      const pid_t c = fork();
      CHECK(c >= 0, "fork: %s", strerror(errno));
      if (c == 0) exit(0);
      ok &= reaped(c, "A's child that exits at once");
    } else if (round == 20) {
      fflush(stdout);
      const pid_t c = fork();
      CHECK(c >= 0, "fork: %s", strerror(errno));
      if (c == 0) exit(child_with_own_device());
      ok &= reaped(c, "A's child with a device of its own");
    }
  }
  CHECK(ok, "a child failed");
  printf("A: %d rounds, 2 children forked and reaped\n", kRounds);
  char done;
  get(from_b, &done, 1);
  return 0;
}

static int process_b(int to_a, int from_a) {
  static struct side s;
  make_side(&s);
  const struct endpoint self = endpoint_of(&s);
  struct endpoint peer;
  get(from_a, &peer, sizeof peer);
  rc_connect(s.qp, peer.qpn, &peer.gid, IBV_ACCESS_LOCAL_WRITE, 7, 12);
  post_recv(&s);
  put(to_a, &self, sizeof self);
  char connected;
  get(from_a, &connected, 1);
  for (int round = 1; round <= kRounds; ++round) {
    send_round(&s, round);
    receive_round(&s, round + 1000);
  }
  printf("B: %d rounds, every byte as sent\n", kRounds);
  put(to_a, "d", 1);
  return 0;
}

static int exited_zero(pid_t pid, const char *who) {
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 1;
  fprintf(stderr, "FAIL: %s %s %d\n", who, WIFEXITED(status) ? "exited" : "was killed by",
          WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
  return 0;
}

int main(void) {
  char name[64];
  if (getenv("VERBSIM_FABRIC") == NULL) {
    snprintf(name, sizeof name, "fork-%d", (int)getpid());
    setenv("VERBSIM_FABRIC", name, 1);
  }
  int to_a[2], to_b[2];
  CHECK(pipe(to_a) == 0 && pipe(to_b) == 0, "pipe");
  fflush(stdout);
  const pid_t a = fork();
  CHECK(a >= 0, "fork: %s", strerror(errno));
  if (a == 0) {
    close(to_a[1]);
    close(to_b[0]);
    exit(process_a(to_b[1], to_a[0]));
  }
  const pid_t b = fork();
  CHECK(b >= 0, "fork: %s", strerror(errno));
  if (b == 0) {
    close(to_b[1]);
    close(to_a[0]);
    exit(process_b(to_a[1], to_b[0]));
  }
  close(to_a[0]);
  close(to_a[1]);
  close(to_b[0]);
  close(to_b[1]);
  const int ok_b = exited_zero(b, "B");
  const int ok_a = exited_zero(a, "A");
  CHECK(ok_a && ok_b, "a process failed");
  char path[160];
  snprintf(path, sizeof path, "/dev/shm/verbsim-fabric-%d-%s", (int)getuid(),
           getenv("VERBSIM_FABRIC"));
  CHECK(access(path, F_OK) != 0, "the fabric's file %s is left", path);
  printf("PASS\n");
  return 0;
}
