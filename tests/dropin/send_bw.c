/* What perftest's ib_send_bw does between two processes, in one process and one thread: the
 * figure against which tests/multiproc/speed.sh compares the two-process run. C against
 * Debian's verbs.h, linked -libverbs, run with LD_LIBRARY_PATH at the drop-in.
 *
 *   send_bw [-n ITERS] [-s BYTES]        defaults: 1000 iterations, 64 bytes
 *
 * Two RC QPs on the first device (sim0; the two-process run has both of its QPs there too),
 * talking through port 1 and GID index 1 (RoCE v2) as rc.h connects them, no inline data. As
 * ib_send_bw's client: ITERS SENDs of BYTES, at most 128 outstanding (TX depth), one in 100
 * signaled and the last (CQ moderation 100), the send CQ polled 16 at a time. As its server:
 * 512 receives posted (RX depth), each completed one posted again while more messages are to
 * come, the receive CQ polled 16 at a time until it is empty. Every completion must succeed and every receive
 * hold BYTES. Prints perftest's columns for the wall time from the first post to the last
 * completion (both sides), then "PASS". */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "rc.h"

enum { kTxDepth = 128, kRxDepth = 512, kCqMod = 100, kPollBatch = 16 };

static double seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static struct ibv_qp *qp_of(struct ibv_pd *pd, struct ibv_cq *send_cq, struct ibv_cq *recv_cq) {
  struct ibv_qp_init_attr init = {
      .send_cq = send_cq,
      .recv_cq = recv_cq,
      .cap = {.max_send_wr = kTxDepth, .max_recv_wr = kRxDepth, .max_send_sge = 1,
              .max_recv_sge = 1},
      .qp_type = IBV_QPT_RC,
  };
  struct ibv_qp *qp = ibv_create_qp(pd, &init);
  CHECK(qp, "ibv_create_qp: %s", strerror(errno));
  return qp;
}

static void post_recv(struct ibv_qp *qp, struct ibv_sge *sge) {
  struct ibv_recv_wr wr = {.sg_list = sge, .num_sge = 1}, *bad;
  const int rc = ibv_post_recv(qp, &wr, &bad);
  CHECK(rc == 0, "ibv_post_recv: %s", strerror(rc));
}

int main(int argc, char **argv) {
  long iters = 1000;
  uint32_t size = 64;
  for (int opt; (opt = getopt(argc, argv, "n:s:")) != -1;) {
    if (opt == 'n') {
      iters = atol(optarg);
    } else if (opt == 's') {
      size = (uint32_t)atol(optarg);
    } else {
      fprintf(stderr, "usage: %s [-n ITERS] [-s BYTES]\n", argv[0]);
      return 2;
    }
  }
  CHECK(iters > 0 && size > 0 && size <= 65536, "-n and -s out of range");

  struct ibv_context *ctx = first_device();
  union ibv_gid gid;
  CHECK(ibv_query_gid(ctx, 1, 1, &gid) == 0, "ibv_query_gid");
  struct ibv_pd *pd = ibv_alloc_pd(ctx);
  CHECK(pd, "ibv_alloc_pd");
  char *send_buf = calloc(1, size), *recv_buf = calloc(1, size);
  CHECK(send_buf && recv_buf, "calloc");
  struct ibv_mr *send_mr = ibv_reg_mr(pd, send_buf, size, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *recv_mr = ibv_reg_mr(pd, recv_buf, size, IBV_ACCESS_LOCAL_WRITE);
  CHECK(send_mr && recv_mr, "ibv_reg_mr: %s", strerror(errno));
  struct ibv_cq *send_cq = ibv_create_cq(ctx, kTxDepth, NULL, NULL, 0);
  struct ibv_cq *recv_cq = ibv_create_cq(ctx, kRxDepth, NULL, NULL, 0);
  struct ibv_cq *unused_cq = ibv_create_cq(ctx, 1, NULL, NULL, 0);
  CHECK(send_cq && recv_cq && unused_cq, "ibv_create_cq: %s", strerror(errno));
  struct ibv_qp *client = qp_of(pd, send_cq, unused_cq), *server = qp_of(pd, unused_cq, recv_cq);
  rc_connect(client, server->qp_num, &gid, 0, 7, 12);
  rc_connect(server, client->qp_num, &gid, 0, 7, 12);

  struct ibv_sge recv_sge = {(uintptr_t)recv_buf, size, recv_mr->lkey};
  long posted = 0;  // receives posted so far
  for (; posted < iters && posted < kRxDepth; ++posted) post_recv(server, &recv_sge);

  struct ibv_sge send_sge = {(uintptr_t)send_buf, size, send_mr->lkey};
  struct ibv_send_wr wr = {.sg_list = &send_sge, .num_sge = 1, .opcode = IBV_WR_SEND}, *bad;
  struct ibv_wc wc[kPollBatch];
  long sent = 0, completed = 0, received = 0;
  const double start = seconds();
  while (completed < iters || received < iters) {
    while (sent < iters && sent - completed < kTxDepth) {
      wr.wr_id = (uint64_t)sent;
      wr.send_flags = sent % kCqMod == kCqMod - 1 || sent == iters - 1 ? IBV_SEND_SIGNALED : 0;
      const int rc = ibv_post_send(client, &wr, &bad);
      CHECK(rc == 0, "ibv_post_send of SEND %ld: %s", sent, strerror(rc));
      ++sent;
    }
    if (completed < iters) {
      const int n = ibv_poll_cq(send_cq, kPollBatch, wc);
      CHECK(n >= 0, "ibv_poll_cq (send): %d", n);
      for (int i = 0; i < n; ++i) {
        CHECK(wc[i].status == IBV_WC_SUCCESS, "SEND %llu: %s", (unsigned long long)wc[i].wr_id,
              ibv_wc_status_str(wc[i].status));
        completed = (long)wc[i].wr_id + 1;  // a signaled SEND completes those before it
      }
    }
    // The server's process polls all the time; here the receive CQ is drained every turn, or
    // the SENDs (acknowledged as they land) would outrun the receives posted again.
    for (int n = kPollBatch; n == kPollBatch && received < iters;) {
      n = ibv_poll_cq(recv_cq, kPollBatch, wc);
      CHECK(n >= 0, "ibv_poll_cq (recv): %d", n);
      for (int i = 0; i < n; ++i) {
        CHECK(wc[i].status == IBV_WC_SUCCESS && wc[i].byte_len == size,
              "receive %ld: %s, %u bytes", received, ibv_wc_status_str(wc[i].status),
              wc[i].byte_len);
        ++received;
        if (posted < iters) {
          post_recv(server, &recv_sge);
          ++posted;
        }
      }
    }
  }
  const double elapsed = seconds() - start;
  CHECK(sent == iters && completed == iters && received == iters,
        "%ld sent, %ld completed, %ld received, want %ld", sent, completed, received, iters);

  const double rate = (double)iters / elapsed;
  printf(" #bytes     #iterations    BW average[MB/sec]   MsgRate[Mpps]   (one process, sim0)\n");
  printf(" %-10u %-14ld %-20.2f %.6f\n", size, iters, rate * size / (1 << 20), rate / 1e6);

  CHECK(ibv_destroy_qp(client) == 0 && ibv_destroy_qp(server) == 0, "ibv_destroy_qp");
  CHECK(ibv_destroy_cq(send_cq) == 0 && ibv_destroy_cq(recv_cq) == 0 &&
            ibv_destroy_cq(unused_cq) == 0,
        "ibv_destroy_cq");
  CHECK(ibv_dereg_mr(send_mr) == 0 && ibv_dereg_mr(recv_mr) == 0, "ibv_dereg_mr");
  CHECK(ibv_dealloc_pd(pd) == 0, "ibv_dealloc_pd");
  CHECK(ibv_close_device(ctx) == 0, "ibv_close_device");
  free(send_buf);
  free(recv_buf);
  printf("PASS: %ld SENDs of %u bytes, every one received\n", iters, size);
  return 0;
}
