/* Port counters where libibverbs programs read them (ibv_read_sysfs_file, and files under the
 * device's ibdev_path): sim0 sends N SENDs of SIZE bytes, one at a time, to sim1 under a fault
 * plan that drops PSNs 2 and 5 (each sent again after a local ACK timeout) and duplicates
 * PSN 7 (the responder gets it twice and ACKs it twice). The expected counts follow from
 * that traffic:
 *   sim0 sends N + 2 requests of SIZE / 4 words each and receives N + 1 ACKs (no data);
 *   sim1 receives N + 1 requests (2 lost, 1 twice) and sends N + 1 ACKs.
 * The work runs in a child process, so the parent can check that the child's private sysfs
 * directory is gone once it has exited.
 *
 *   counters          (LD_LIBRARY_PATH at the drop-in; it sets its own VERBSIM_FAULTS) */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "rc.h"

/* ibv_read_sysfs_file and ibv_get_sysfs_path are libibverbs' (driver.h, not installed). */
int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size);
const char *ibv_get_sysfs_path(void);

enum { N = 10, SIZE = 256, WORDS = SIZE / 4 };

static struct ibv_context *open_named(struct ibv_device **list, int n, const char *name) {
  for (int i = 0; i < n; ++i) {
    if (strcmp(ibv_get_device_name(list[i]), name) == 0) {
      struct ibv_context *ctx = ibv_open_device(list[i]);
      CHECK(ctx, "ibv_open_device %s", name);
      return ctx;
    }
  }
  CHECK(0, "no device %s", name);
  return NULL;
}

static void wait_one(struct ibv_cq *cq, enum ibv_wc_opcode opcode) {
  struct ibv_wc wc;
  int n;
  while ((n = ibv_poll_cq(cq, 1, &wc)) == 0) {
  }
  CHECK(n == 1, "ibv_poll_cq returned %d", n);
  CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == opcode, "completion: %s, opcode %d",
        ibv_wc_status_str(wc.status), wc.opcode);
}

/* A counter of port 1 read with ibv_read_sysfs_file; the same read with fopen. */
static unsigned long long by_verbs(const char *ibdev_path, const char *group, const char *name) {
  char file[128], buf[64];
  snprintf(file, sizeof file, "ports/1/%s/%s", group, name);
  const int n = ibv_read_sysfs_file(ibdev_path, file, buf, sizeof buf);
  CHECK(n > 0, "ibv_read_sysfs_file %s/%s: %d (%s)", ibdev_path, file, n, strerror(errno));
  CHECK((size_t)n == strlen(buf) && buf[n - 1] != '\n', "%s: %d characters '%s'", file, n, buf);
  return strtoull(buf, NULL, 10);
}

static unsigned long long by_file(const char *ibdev_path, const char *group, const char *name) {
  char path[512], buf[64] = "";
  snprintf(path, sizeof path, "%s/ports/1/%s/%s", ibdev_path, group, name);
  FILE *f = fopen(path, "r");
  CHECK(f, "fopen %s: %s", path, strerror(errno));
  CHECK(fgets(buf, sizeof buf, f), "%s is empty", path);
  fclose(f);
  const size_t len = strlen(buf);
  CHECK(len > 1 && buf[len - 1] == '\n', "%s: '%s' is not a number and a newline", path, buf);
  return strtoull(buf, NULL, 10);
}

static void expect(const char *ibdev_path, const char *group, const char *name,
                   unsigned long long want) {
  const unsigned long long v = by_verbs(ibdev_path, group, name);
  const unsigned long long f = by_file(ibdev_path, group, name);
  CHECK(v == want && f == want, "%s %s/%s: ibv_read_sysfs_file %llu, file %llu, expected %llu",
        ibdev_path, group, name, v, f, want);
}

/* The child: the traffic, then the counters. Prints the sysfs root on `out`. */
static void run(FILE *out) {
  int n = 0;
  struct ibv_device **list = ibv_get_device_list(&n);
  CHECK(list && n >= 2, "two devices wanted (LD_LIBRARY_PATH at the drop-in?)");
  struct ibv_context *cctx = open_named(list, n, "sim0");
  struct ibv_context *sctx = open_named(list, n, "sim1");

  /* Where the counters are: a private directory, ibdev_path under ibv_get_sysfs_path(). */
  char path0[512], path1[512];
  snprintf(path0, sizeof path0, "%s", cctx->device->ibdev_path);
  snprintf(path1, sizeof path1, "%s", sctx->device->ibdev_path);
  const char *root = ibv_get_sysfs_path();
  char want[512];
  snprintf(want, sizeof want, "%s/class/infiniband/sim0", root);
  CHECK(strcmp(path0, want) == 0, "ibdev_path %s, expected %s", path0, want);
  CHECK(strncmp(root, "/sys", 4) != 0, "ibv_get_sysfs_path is %s", root);
  struct stat st;
  CHECK(stat(root, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 0777) == 0700,
        "%s: not a directory of mode 0700", root);
  fprintf(out, "%s\n", root);
  fflush(out);
  expect(path0, "counters", "port_xmit_packets", 0);
  expect(path1, "hw_counters", "rcvd_pkts", 0);

  struct ibv_pd *cpd = ibv_alloc_pd(cctx);
  struct ibv_pd *spd = ibv_alloc_pd(sctx);
  CHECK(cpd && spd, "ibv_alloc_pd");
  struct ibv_cq *ccq = ibv_create_cq(cctx, 16, NULL, NULL, 0);
  struct ibv_cq *scq = ibv_create_cq(sctx, 16, NULL, NULL, 0);
  CHECK(ccq && scq, "ibv_create_cq");
  static char cbuf[SIZE], sbuf[SIZE];
  struct ibv_mr *cmr = ibv_reg_mr(cpd, cbuf, SIZE, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *smr = ibv_reg_mr(spd, sbuf, SIZE, IBV_ACCESS_LOCAL_WRITE);
  CHECK(cmr && smr, "ibv_reg_mr");
  struct ibv_qp *cqp = rc_qp(cpd, ccq, NULL);
  struct ibv_qp *sqp = rc_qp(spd, scq, NULL);
  union ibv_gid cgid, sgid;
  CHECK(ibv_query_gid(cctx, 1, 1, &cgid) == 0 && ibv_query_gid(sctx, 1, 1, &sgid) == 0,
        "ibv_query_gid");
  rc_connect(cqp, sqp->qp_num, &sgid, 0, 7, 12);
  rc_connect(sqp, cqp->qp_num, &cgid, 0, 7, 12);

  for (int i = 0; i < N; ++i) {
    struct ibv_sge rs = {.addr = (uintptr_t)sbuf, .length = SIZE, .lkey = smr->lkey};
    struct ibv_recv_wr rwr = {.wr_id = (uint64_t)i, .sg_list = &rs, .num_sge = 1}, *bad_r;
    CHECK(ibv_post_recv(sqp, &rwr, &bad_r) == 0, "ibv_post_recv");
    memset(cbuf, 'a' + i, SIZE);
    struct ibv_sge ss = {.addr = (uintptr_t)cbuf, .length = SIZE, .lkey = cmr->lkey};
    struct ibv_send_wr swr = {.wr_id = (uint64_t)i,
                              .sg_list = &ss,
                              .num_sge = 1,
                              .opcode = IBV_WR_SEND,
                              .send_flags = IBV_SEND_SIGNALED},
                       *bad_s;
    CHECK(ibv_post_send(cqp, &swr, &bad_s) == 0, "ibv_post_send");
    wait_one(ccq, IBV_WC_SEND);
    wait_one(scq, IBV_WC_RECV);
  }

  /* A control verb makes the files current (sysfs.hpp); ibv_read_sysfs_file always is. */
  struct ibv_port_attr pa;
  CHECK(ibv_query_port(cctx, 1, &pa) == 0, "ibv_query_port");

  expect(path0, "counters", "port_xmit_packets", N + 2);
  expect(path0, "counters", "unicast_xmit_packets", N + 2);
  expect(path0, "counters", "port_xmit_data", (N + 2) * WORDS);
  expect(path0, "counters", "port_rcv_packets", N + 1);
  expect(path0, "counters", "port_rcv_data", 0);
  expect(path0, "counters", "port_xmit_discards", 0);
  expect(path0, "counters", "symbol_error", 0);
  expect(path0, "hw_counters", "sent_pkts", N + 2);
  expect(path0, "hw_counters", "rcvd_pkts", N + 1);
  expect(path0, "hw_counters", "completer_retry_err", 2);
  expect(path0, "hw_counters", "rcvd_seq_err", 0);
  expect(path0, "hw_counters", "retry_exceeded_err", 0);
  expect(path0, "hw_counters", "rdma_sends", N);
  expect(path0, "hw_counters", "duplicate_request", 0);
  expect(path0, "hw_counters", "lifespan", 10);

  expect(path1, "counters", "port_rcv_packets", N + 1);
  expect(path1, "counters", "port_rcv_data", (N + 1) * WORDS);
  expect(path1, "counters", "port_xmit_packets", N + 1);
  expect(path1, "counters", "port_xmit_data", 0);
  expect(path1, "hw_counters", "sent_pkts", N + 1);
  expect(path1, "hw_counters", "rcvd_pkts", N + 1);
  expect(path1, "hw_counters", "duplicate_request", 1);
  expect(path1, "hw_counters", "out_of_seq_request", 0);
  expect(path1, "hw_counters", "rdma_recvs", N);
  expect(path1, "hw_counters", "completer_retry_err", 0);

  /* Not a counter: ENOENT. */
  char buf[16];
  CHECK(ibv_read_sysfs_file(path0, "ports/1/counters/no_such_counter", buf, sizeof buf) < 0 &&
            errno == ENOENT,
        "a counter that does not exist");
  printf("PASS counters: sim0 sent %d and received %d packets, sim1 saw 1 duplicate\n", N + 2,
         N + 1);

  CHECK(ibv_destroy_qp(cqp) == 0 && ibv_destroy_qp(sqp) == 0, "ibv_destroy_qp");
  CHECK(ibv_dereg_mr(cmr) == 0 && ibv_dereg_mr(smr) == 0, "ibv_dereg_mr");
  CHECK(ibv_destroy_cq(ccq) == 0 && ibv_destroy_cq(scq) == 0, "ibv_destroy_cq");
  CHECK(ibv_dealloc_pd(cpd) == 0 && ibv_dealloc_pd(spd) == 0, "ibv_dealloc_pd");
  CHECK(ibv_close_device(cctx) == 0 && ibv_close_device(sctx) == 0, "ibv_close_device");
  ibv_free_device_list(list);
}

int main(void) {
  /* Before the first verb: the world reads them when it is made. */
  setenv("VERBSIM_FAULTS", "drop psn=2; drop psn=5; duplicate psn=7", 1);
  setenv("VERBSIM_PROFILE", "rxe", 1);
  setenv("VERBSIM_DROPIN_PROGRESS", "0", 1);
  int fds[2];
  CHECK(pipe(fds) == 0, "pipe");
  fflush(stdout);
  const pid_t child = fork();
  CHECK(child >= 0, "fork");
  if (child == 0) {
    close(fds[0]);
    FILE *out = fdopen(fds[1], "w");
    CHECK(out, "fdopen");
    run(out);
    fclose(out);
    exit(0); /* a normal exit: the drop-in removes its directory */
  }
  close(fds[1]);
  FILE *in = fdopen(fds[0], "r");
  char root[512] = "";
  CHECK(in && fgets(root, sizeof root, in), "the child printed no sysfs root");
  fclose(in);
  root[strcspn(root, "\n")] = '\0';
  int status = 0;
  CHECK(waitpid(child, &status, 0) == child, "waitpid");
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child failed (status %d)", status);
  struct stat st;
  CHECK(stat(root, &st) != 0 && errno == ENOENT, "%s is still there after the child exited", root);
  printf("PASS counters: %s removed at exit\n", root);
  return 0;
}
