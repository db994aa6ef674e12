/* fork() after verbs, through the drop-in (backends/dropin/README.md, "fork"). rdma-core's rule
 * (ibv_fork_init(3)): a child may not use its parent's verbs objects, but it exits cleanly and
 * may open devices of its own. In the drop-in a child gets a world of its own.
 *
 * The parent opens a device, connects two RC QPs in loopback and moves a message between them
 * (a round); then, three times over, it forks:
 *   - a child that calls exit() at once (its atexit handlers run);
 *   - a child that finds the parent's objects refused (ibv_alloc_pd on the parent's context,
 *     ibv_poll_cq on its CQ, ibv_post_send on its QP), opens a device from the parent's device
 *     list and one from a list of its own, runs a round on objects of its own, and exits;
 *   - a child that does a round of its own while the parent does its next one;
 * and after each the parent runs a round (its world goes on). A child that does not exit within
 * 10 s is killed and the test fails (before the fix a child hung in exit(): the lock it
 * inherited was held by the parent's thread).
 *
 * With --fork-init the program calls ibv_fork_init() first (0, as rdma-core when the kernel
 * needs nothing: ibv_is_fork_initialized() says IBV_FORK_UNNEEDED either way). Exit status 0
 * and "PASS" when every check held. */
#define _DEFAULT_SOURCE
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

#include "check.h"
#include "rc.h"

enum { kBytes = 256 };

/* Two RC QPs of one context in loopback, a CQ each, and a buffer each. */
struct pair {
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  struct ibv_cq *cq[2];
  struct ibv_qp *qp[2];
  struct ibv_mr *mr[2];
  uint8_t buf[2][kBytes];
};

static void make_pair(struct pair *p, struct ibv_context *ctx) {
  memset(p, 0, sizeof *p);
  p->ctx = ctx;
  p->pd = ibv_alloc_pd(ctx);
  CHECK(p->pd, "ibv_alloc_pd: %s", strerror(errno));
  union ibv_gid gid;
  CHECK(ibv_query_gid(ctx, 1, 1, &gid) == 0, "ibv_query_gid");
  for (int i = 0; i < 2; ++i) {
    p->cq[i] = ibv_create_cq(ctx, 16, NULL, NULL, 0);
    CHECK(p->cq[i], "ibv_create_cq: %s", strerror(errno));
    p->qp[i] = rc_qp(p->pd, p->cq[i], NULL);
    p->mr[i] = ibv_reg_mr(p->pd, p->buf[i], kBytes, IBV_ACCESS_LOCAL_WRITE);
    CHECK(p->mr[i], "ibv_reg_mr: %s", strerror(errno));
  }
  for (int i = 0; i < 2; ++i) {
    rc_connect(p->qp[i], p->qp[1 - i]->qp_num, &gid, IBV_ACCESS_LOCAL_WRITE, 7, 12);
  }
}

static struct ibv_wc wait_one(struct ibv_cq *cq) {
  struct ibv_wc wc;
  for (long polls = 0;; ++polls) {
    const int n = ibv_poll_cq(cq, 1, &wc);
    CHECK(n >= 0, "ibv_poll_cq: %d", n);
    if (n == 1) return wc;
    CHECK(polls < 50000000L, "no completion");
  }
}

/* QP 0 sends kBytes of a pattern drawn from `round` to QP 1; both completions and every byte
 * are checked. */
static void run_round(struct pair *p, int round) {
  memset(p->buf[1], 0, kBytes);
  for (int i = 0; i < kBytes; ++i) p->buf[0][i] = (uint8_t)(i * 7 + round);
  struct ibv_sge rs = {(uintptr_t)p->buf[1], kBytes, p->mr[1]->lkey};
  struct ibv_recv_wr rwr = {.wr_id = 2, .sg_list = &rs, .num_sge = 1}, *bad_r = NULL;
  CHECK(ibv_post_recv(p->qp[1], &rwr, &bad_r) == 0, "ibv_post_recv");
  struct ibv_sge ss = {(uintptr_t)p->buf[0], kBytes, p->mr[0]->lkey};
  struct ibv_send_wr swr = {.wr_id = 1,
                            .sg_list = &ss,
                            .num_sge = 1,
                            .opcode = IBV_WR_SEND,
                            .send_flags = IBV_SEND_SIGNALED},
                     *bad_s = NULL;
  CHECK(ibv_post_send(p->qp[0], &swr, &bad_s) == 0, "ibv_post_send");
  const struct ibv_wc s = wait_one(p->cq[0]);
  CHECK(s.status == IBV_WC_SUCCESS && s.wr_id == 1, "round %d: send status %d", round, s.status);
  const struct ibv_wc r = wait_one(p->cq[1]);
  CHECK(r.status == IBV_WC_SUCCESS && r.wr_id == 2 && r.byte_len == kBytes,
        "round %d: receive status %d, %u bytes", round, r.status, r.byte_len);
  for (int i = 0; i < kBytes; ++i) {
    CHECK(p->buf[1][i] == (uint8_t)(i * 7 + round), "round %d: byte %d", round, i);
  }
}

/* Waits up to 10 s for `child`; kills it then. Its exit status, or -1 if it had to be killed. */
static int reap(pid_t child, const char *what) {
  const time_t deadline = time(NULL) + 10;
  for (;;) {
    int status = 0;
    const pid_t got = waitpid(child, &status, WNOHANG);
    CHECK(got >= 0, "waitpid: %s", strerror(errno));
    if (got == child) {
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      fprintf(stderr, "FAIL %s: killed by signal %d\n", what, WTERMSIG(status));
      return -1;
    }
    if (time(NULL) > deadline) {
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
      fprintf(stderr, "FAIL %s: still running after 10 s (hung), killed\n", what);
      return -1;
    }
    usleep(1000);
  }
}

/* In a child: the parent's objects are not the child's. */
static void parent_objects_refused(struct pair *parent) {
  errno = 0;
  CHECK(ibv_alloc_pd(parent->ctx) == NULL && errno != 0,
        "child: ibv_alloc_pd on the parent's context");
  struct ibv_wc wc;
  CHECK(ibv_poll_cq(parent->cq[0], 1, &wc) < 0, "child: ibv_poll_cq on the parent's CQ");
  struct ibv_sge ss = {(uintptr_t)parent->buf[0], kBytes, parent->mr[0]->lkey};
  struct ibv_send_wr swr = {.wr_id = 9, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND},
                     *bad = NULL;
  CHECK(ibv_post_send(parent->qp[0], &swr, &bad) != 0, "child: ibv_post_send on the parent's QP");
}

static int child_of_its_own(struct pair *parent, struct ibv_device *from_parent, int round) {
  if (parent != NULL) parent_objects_refused(parent);
  /* A device from the list the parent got (device structs are plain data, as in rdma-core). */
  struct ibv_context *inherited = ibv_open_device(from_parent);
  CHECK(inherited, "child: ibv_open_device of the parent's list's device: %s", strerror(errno));
  struct pair own;
  make_pair(&own, inherited);
  run_round(&own, round);
  /* And one from a list of its own. */
  struct ibv_context *ctx = first_device();
  struct pair second;
  make_pair(&second, ctx);
  run_round(&second, round + 1);
  return 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IONBF, 0);
  const int fork_init = argc > 1 && strcmp(argv[1], "--fork-init") == 0;
  if (fork_init) CHECK(ibv_fork_init() == 0, "ibv_fork_init: %s", strerror(errno));
  CHECK(ibv_is_fork_initialized() == IBV_FORK_UNNEEDED, "ibv_is_fork_initialized: %d",
        (int)ibv_is_fork_initialized());

  int n = 0;
  struct ibv_device **list = ibv_get_device_list(&n);
  CHECK(list && n > 0, "no device (LD_LIBRARY_PATH at the drop-in?)");
  struct ibv_context *ctx = ibv_open_device(list[0]);
  CHECK(ctx, "ibv_open_device");
  static struct pair p;
  make_pair(&p, ctx);
  int round = 1;
  run_round(&p, round++);

  int failed = 0;
  for (int cycle = 0; cycle < 3; ++cycle) {
    pid_t c = fork();
    CHECK(c >= 0, "fork: %s", strerror(errno));
    if (c == 0) exit(0);
    failed |= reap(c, "a child that exits at once") != 0;
    run_round(&p, round++);

    c = fork();
    CHECK(c >= 0, "fork: %s", strerror(errno));
    if (c == 0) exit(child_of_its_own(&p, list[0], 100 + cycle));
    failed |= reap(c, "a child that opens devices of its own") != 0;
    run_round(&p, round++);

    c = fork();
    CHECK(c >= 0, "fork: %s", strerror(errno));
    if (c == 0) exit(child_of_its_own(NULL, list[0], 200 + cycle));
    run_round(&p, round++); /* meanwhile */
    failed |= reap(c, "a child running beside its parent") != 0;
    run_round(&p, round++);
  }
  ibv_free_device_list(list);
  CHECK(!failed, "a child failed");
  printf("PASS: %d rounds in the parent, 9 children exited%s\n", round - 1,
         fork_init ? " (after ibv_fork_init)" : "");
  return 0;
}
