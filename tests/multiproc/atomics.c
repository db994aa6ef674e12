/* Atomics and RDMA READs between two processes on one simulated fabric, with every result
 * checked (perftest's ib_atomic_bw and ib_read_bw check none). C against Debian's verbs.h,
 * linked -libverbs, run with LD_LIBRARY_PATH at the drop-in.
 *
 * The program forks a responder and a requester before either touches verbs, so each loads
 * its own drop-in and joins the fabric VERBSIM_FABRIC (a name of its own, atomics-<pid>, when
 * unset). They exchange QP numbers, the address and the rkey through pipes. The requester
 * runs N operations (argument 1, 2000 by default) one at a time on an RC QP against a 64-bit
 * word and a patterned buffer of the responder, in turn:
 *   fetch-and-add 1; compare-and-swap that matches (adds 1); compare-and-swap that does not;
 *   a READ of 64 bytes of the pattern at an offset that moves;
 * and checks that each completes with IBV_WC_SUCCESS and that the value fetched (the word
 * before the operation) or the bytes read are the ones expected. The responder checks the word
 * at the end. The parent passes when both exit 0 and the fabric's file is gone.
 *
 * Under VERBSIM_FAULTS that lose responses (drop p=0.02 packets=responses) the requester
 * sends a request again whose response was lost, and the responder answers the duplicate
 * with the result of the first execution, as in one process (an atomic is not executed
 * twice). Exit status 0 and "PASS" when every check passed. */
#define _DEFAULT_SOURCE  // setenv
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../dropin/check.h"
#include "../dropin/rc.h"

enum { kPattern = 4096, kRead = 64 };
static const uint64_t kBase = 1000;  // the word's first value: a lost result reads 0, not this

struct endpoint {
  uint32_t qpn;
  union ibv_gid gid;
  uint64_t addr;  // responder: the word; the pattern follows it
  uint32_t rkey;
};

static void put(int fd, const void *p, size_t n) {
  CHECK(write(fd, p, n) == (ssize_t)n, "write to the pipe: %s", strerror(errno));
}

static void get(int fd, void *p, size_t n) {
  CHECK(read(fd, p, n) == (ssize_t)n, "read from the pipe: the other process is gone");
}

static uint8_t pattern_at(size_t i) { return (uint8_t)(i * 7 + 1); }

/* The responder's memory: the word, then the pattern. */
static struct {
  uint64_t word;
  uint8_t pattern[kPattern];
} target __attribute__((aligned(64)));

static int responder(int to_req, int from_req) {
  struct ibv_context *ctx = first_device();
  struct ibv_pd *pd = ibv_alloc_pd(ctx);
  CHECK(pd, "ibv_alloc_pd");
  target.word = kBase;
  for (size_t i = 0; i < kPattern; ++i) target.pattern[i] = pattern_at(i);
  const unsigned access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                          IBV_ACCESS_REMOTE_ATOMIC;
  struct ibv_mr *mr = ibv_reg_mr(pd, &target, sizeof target, (int)access);
  CHECK(mr, "ibv_reg_mr: %s", strerror(errno));
  struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
  CHECK(cq, "ibv_create_cq");
  struct ibv_qp *qp = rc_qp(pd, cq, NULL);

  struct endpoint peer, self = {.qpn = qp->qp_num, .addr = (uintptr_t)&target, .rkey = mr->rkey};
  CHECK(ibv_query_gid(ctx, 1, 1, &self.gid) == 0, "ibv_query_gid");
  get(from_req, &peer, sizeof peer);
  rc_connect(qp, peer.qpn, &peer.gid, access, 7, 12);
  put(to_req, &self, sizeof self);

  uint64_t want;  // the word as the requester left it; the world runs meanwhile
  get(from_req, &want, sizeof want);
  CHECK(target.word == want, "responder: the word is %llu, the requester counted %llu",
        (unsigned long long)target.word, (unsigned long long)want);
  CHECK(ibv_destroy_qp(qp) == 0 && ibv_destroy_cq(cq) == 0, "destroy");
  ibv_dereg_mr(mr);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  return 0;
}

/* Posts one signaled WR and waits for its completion, which must succeed. */
static void run_one(struct ibv_qp *qp, struct ibv_cq *cq, struct ibv_send_wr *wr, long n) {
  struct ibv_send_wr *bad;
  CHECK(ibv_post_send(qp, wr, &bad) == 0, "ibv_post_send of operation %ld", n);
  struct ibv_wc wc;
  int got = 0;
  for (long spins = 0; got == 0 && spins < 2000000000L; ++spins) got = ibv_poll_cq(cq, 1, &wc);
  CHECK(got == 1, "operation %ld: no completion", n);
  CHECK(wc.status == IBV_WC_SUCCESS, "operation %ld: %s", n, ibv_wc_status_str(wc.status));
}

static int requester(int to_resp, int from_resp, long ops) {
  struct ibv_context *ctx = first_device();
  struct ibv_pd *pd = ibv_alloc_pd(ctx);
  CHECK(pd, "ibv_alloc_pd");
  static uint8_t local[kRead] __attribute__((aligned(64)));
  struct ibv_mr *mr = ibv_reg_mr(pd, local, sizeof local, IBV_ACCESS_LOCAL_WRITE);
  CHECK(mr, "ibv_reg_mr: %s", strerror(errno));
  struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
  CHECK(cq, "ibv_create_cq");
  struct ibv_qp *qp = rc_qp(pd, cq, NULL);

  struct endpoint peer, self = {.qpn = qp->qp_num};
  CHECK(ibv_query_gid(ctx, 1, 1, &self.gid) == 0, "ibv_query_gid");
  put(to_resp, &self, sizeof self);
  get(from_resp, &peer, sizeof peer);
  rc_connect(qp, peer.qpn, &peer.gid, 0, 7, 12);

  uint64_t word = kBase;
  long counts[4] = {0, 0, 0, 0};
  for (long n = 0; n < ops; ++n) {
    memset(local, 0xee, sizeof local);
    struct ibv_sge sge = {(uintptr_t)local, 8, mr->lkey};
    struct ibv_send_wr wr = {.wr_id = (uint64_t)n, .sg_list = &sge, .num_sge = 1,
                             .send_flags = IBV_SEND_SIGNALED};
    wr.wr.atomic.remote_addr = peer.addr;
    wr.wr.atomic.rkey = peer.rkey;
    const int kind = (int)(n % 4);
    ++counts[kind];
    if (kind == 0) {
      wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
      wr.wr.atomic.compare_add = 1;
    } else if (kind == 1 || kind == 2) {
      wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
      wr.wr.atomic.compare_add = kind == 1 ? word : word + 5;  // matches; does not
      wr.wr.atomic.swap = word + 1;
    } else {
      const size_t at = (size_t)(n * 8) % (kPattern - kRead);
      wr.opcode = IBV_WR_RDMA_READ;
      wr.wr.rdma.remote_addr = peer.addr + 8 + at;
      wr.wr.rdma.rkey = peer.rkey;
      sge.length = kRead;
      run_one(qp, cq, &wr, n);
      for (size_t i = 0; i < kRead; ++i) {
        CHECK(local[i] == pattern_at(at + i),
              "READ %ld: byte %zu is 0x%02x, want 0x%02x (the pattern at %zu)", n, i, local[i],
              pattern_at(at + i), at + i);
      }
      continue;
    }
    run_one(qp, cq, &wr, n);
    uint64_t fetched;
    memcpy(&fetched, local, 8);
    CHECK(fetched == word, "%s %ld fetched %llu, want %llu",
          kind == 0 ? "fetch-and-add" : "compare-and-swap", n, (unsigned long long)fetched,
          (unsigned long long)word);
    if (kind != 2) ++word;
  }
  printf("requester: %ld fetch-and-adds, %ld compare-and-swaps (%ld matched), %ld READs: "
         "every result as expected; the word is %llu\n",
         counts[0], counts[1] + counts[2], counts[1], counts[3], (unsigned long long)word);
  put(to_resp, &word, sizeof word);
  CHECK(ibv_destroy_qp(qp) == 0 && ibv_destroy_cq(cq) == 0, "destroy");
  ibv_dereg_mr(mr);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  return 0;
}

/* Runs `role` in a child with its end of the pipes; its pid. */
static pid_t spawn(int (*role)(int, int, long), int to, int from, long ops, int close1,
                   int close2) {
  const pid_t pid = fork();
  CHECK(pid >= 0, "fork: %s", strerror(errno));
  if (pid == 0) {
    close(close1);
    close(close2);
    exit(role(to, from, ops));
  }
  return pid;
}

static int responder_role(int to, int from, long ops) {
  (void)ops;
  return responder(to, from);
}

static int exited_zero(pid_t pid, const char *who) {
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 1;
  fprintf(stderr, "FAIL: the %s %s %d\n", who, WIFEXITED(status) ? "exited" : "was killed by",
          WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
  return 0;
}

int main(int argc, char **argv) {
  const long ops = argc > 1 ? atol(argv[1]) : 2000;
  CHECK(ops > 0, "usage: %s [OPERATIONS]", argv[0]);
  char name[64];
  if (getenv("VERBSIM_FABRIC") == NULL) {
    snprintf(name, sizeof name, "atomics-%d", (int)getpid());
    setenv("VERBSIM_FABRIC", name, 1);
  }
  int to_req[2], to_resp[2];
  CHECK(pipe(to_req) == 0 && pipe(to_resp) == 0, "pipe");
  fflush(stdout);
  const pid_t resp = spawn(responder_role, to_req[1], to_resp[0], ops, to_req[0], to_resp[1]);
  const pid_t req = spawn(requester, to_resp[1], to_req[0], ops, to_resp[0], to_req[1]);
  close(to_req[0]);
  close(to_req[1]);
  close(to_resp[0]);
  close(to_resp[1]);
  const int ok_req = exited_zero(req, "requester");
  const int ok_resp = exited_zero(resp, "responder");
  CHECK(ok_req && ok_resp, "a process failed");
  char path[160];
  snprintf(path, sizeof path, "/dev/shm/verbsim-fabric-%d-%s", (int)getuid(),
           getenv("VERBSIM_FABRIC"));
  CHECK(access(path, F_OK) != 0, "the fabric's file %s is left", path);
  printf("PASS\n");
  return 0;
}
