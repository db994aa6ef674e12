/* A fixed sequence of RC operations whose packets two captures compare (tests/rxe/wire-compare.sh):
 * the drop-in's simulator with VERBSIM_PCAP, and real rxe in the VM under tcpdump. C against
 * Debian's verbs.h, linked -libverbs; one process, two RC QPs (a requester A, a responder B) on
 * the first device, one operation at a time, each waited for:
 *
 *   SEND 64 B; SEND 3000 B (3 packets at MTU 1024); WRITE 100 B; WRITE with immediate 200 B;
 *   READ 2500 B (3 response packets); atomic fetch-and-add; a SEND that meets no receive, with
 *   rnr_retry 1: RNR NAK, one retry, RNR NAK, RNR_RETRY_EXC_ERR.
 *
 *   wire [--sgid-a N] [--sgid-b N]     GID indexes of A and B (default 1 and 1)
 *
 * In the VM the QPs use different GIDs (10.0.0.1 and 10.0.0.2) so that their packets leave the
 * netdev; on the simulator one GID serves both. Exit status 0 and "PASS" when every completion
 * was as expected. */
#include <endian.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

enum { kBuf = 8192 };

static char buf_a[kBuf];
static char buf_b[kBuf];
static uint64_t atomic_b __attribute__((aligned(8)));

struct side {
  struct ibv_qp *qp;
  struct ibv_cq *cq;
  union ibv_gid gid;
  int sgid;
};

static struct ibv_mr *mr_a;
static struct ibv_mr *mr_b;
static struct ibv_mr *mr_atomic;

/* `s.qp` through INIT, RTR, RTS to the other side's QP at its GID. */
static void connect_qp(struct side *s, const struct side *peer, uint8_t rnr_retry) {
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT,
                          .port_num = 1,
                          .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                             IBV_ACCESS_REMOTE_ATOMIC};
  CHECK(ibv_modify_qp(s->qp, &a,
                      IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0,
        "INIT");
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = peer->qp->qp_num;
  a.rq_psn = 0;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 1; /* 0.01 ms */
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = peer->gid;
  a.ah_attr.grh.sgid_index = (uint8_t)s->sgid;
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.port_num = 1;
  CHECK(ibv_modify_qp(s->qp, &a,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == 0,
        "RTR: %s", strerror(errno));
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = rnr_retry;
  a.sq_psn = 0;
  a.max_rd_atomic = 1;
  CHECK(ibv_modify_qp(s->qp, &a,
                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                          IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) == 0,
        "RTS");
}

/* One completion from `cq`, waited for. */
static struct ibv_wc poll_one(struct ibv_cq *cq, const char *what) {
  struct ibv_wc wc;
  int got = 0;
  for (long spins = 0; got == 0 && spins < 200000000; ++spins) got = ibv_poll_cq(cq, 1, &wc);
  CHECK(got == 1, "%s: no completion", what);
  return wc;
}

static void post_recv(struct side *b, uint64_t id) {
  struct ibv_sge s = {(uintptr_t)buf_b, kBuf, mr_b->lkey};
  struct ibv_recv_wr wr = {.wr_id = id, .sg_list = &s, .num_sge = 1};
  struct ibv_recv_wr *bad;
  CHECK(ibv_post_recv(b->qp, &wr, &bad) == 0, "ibv_post_recv");
}

/* Posts one WR from A and checks its completion's status (and B's receive when `recv`). */
static void op(struct side *a, struct side *b, struct ibv_send_wr *wr, uint32_t len,
               enum ibv_wc_status want, int recv, const char *what) {
  struct ibv_sge s = {(uintptr_t)buf_a, len, mr_a->lkey};
  wr->sg_list = &s;
  wr->num_sge = 1;
  wr->send_flags = IBV_SEND_SIGNALED;
  struct ibv_send_wr *bad;
  CHECK(ibv_post_send(a->qp, wr, &bad) == 0, "%s: ibv_post_send", what);
  const struct ibv_wc wc = poll_one(a->cq, what);
  CHECK(wc.status == want, "%s: %s, expected %s", what, ibv_wc_status_str(wc.status),
        ibv_wc_status_str(want));
  if (recv) {
    const struct ibv_wc r = poll_one(b->cq, what);
    CHECK(r.status == IBV_WC_SUCCESS, "%s: the receive: %s", what, ibv_wc_status_str(r.status));
  }
  printf("%s: %s\n", what, ibv_wc_status_str(wc.status));
}

int main(int argc, char **argv) {
  struct side a = {.sgid = 1};
  struct side b = {.sgid = 1};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--sgid-a") == 0) {
      a.sgid = atoi(argv[i + 1]);
    } else if (strcmp(argv[i], "--sgid-b") == 0) {
      b.sgid = atoi(argv[i + 1]);
    } else {
      CHECK(0, "usage: wire [--sgid-a N] [--sgid-b N]");
    }
  }
  int n = 0;
  struct ibv_device **list = ibv_get_device_list(&n);
  CHECK(list && n > 0, "no device (LD_LIBRARY_PATH at the drop-in?)");
  struct ibv_context *ctx = ibv_open_device(list[0]);
  CHECK(ctx, "ibv_open_device");
  ibv_free_device_list(list);
  struct ibv_pd *pd = ibv_alloc_pd(ctx);
  CHECK(pd, "ibv_alloc_pd");
  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                     IBV_ACCESS_REMOTE_ATOMIC;
  mr_a = ibv_reg_mr(pd, buf_a, kBuf, access);
  mr_b = ibv_reg_mr(pd, buf_b, kBuf, access);
  mr_atomic = ibv_reg_mr(pd, &atomic_b, sizeof atomic_b, access);
  CHECK(mr_a && mr_b && mr_atomic, "ibv_reg_mr");
  for (struct side *s = &a; s; s = s == &a ? &b : NULL) {
    s->cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
    CHECK(s->cq, "ibv_create_cq");
    struct ibv_qp_init_attr init = {
        .send_cq = s->cq,
        .recv_cq = s->cq,
        .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1},
        .qp_type = IBV_QPT_RC,
    };
    s->qp = ibv_create_qp(pd, &init);
    CHECK(s->qp, "ibv_create_qp: %s", strerror(errno));
    CHECK(ibv_query_gid(ctx, 1, s->sgid, &s->gid) == 0, "ibv_query_gid %d", s->sgid);
  }
  connect_qp(&a, &b, 1);
  connect_qp(&b, &a, 1);
  memset(buf_a, 0x5a, sizeof buf_a);

  post_recv(&b, 1);
  op(&a, &b, &(struct ibv_send_wr){.wr_id = 1, .opcode = IBV_WR_SEND}, 64, IBV_WC_SUCCESS, 1,
     "SEND 64");
  post_recv(&b, 2);
  op(&a, &b, &(struct ibv_send_wr){.wr_id = 2, .opcode = IBV_WR_SEND}, 3000, IBV_WC_SUCCESS, 1,
     "SEND 3000");
  struct ibv_send_wr w = {.wr_id = 3, .opcode = IBV_WR_RDMA_WRITE};
  w.wr.rdma.remote_addr = (uintptr_t)buf_b;
  w.wr.rdma.rkey = mr_b->rkey;
  op(&a, &b, &w, 100, IBV_WC_SUCCESS, 0, "WRITE 100");
  post_recv(&b, 4);
  w.wr_id = 4;
  w.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  w.imm_data = htobe32(0x1234);
  op(&a, &b, &w, 200, IBV_WC_SUCCESS, 1, "WRITE_WITH_IMM 200");
  w.wr_id = 5;
  w.opcode = IBV_WR_RDMA_READ;
  op(&a, &b, &w, 2500, IBV_WC_SUCCESS, 0, "READ 2500");
  struct ibv_send_wr f = {.wr_id = 6, .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD};
  f.wr.atomic.remote_addr = (uintptr_t)&atomic_b;
  f.wr.atomic.rkey = mr_atomic->rkey;
  f.wr.atomic.compare_add = 5;
  op(&a, &b, &f, 8, IBV_WC_SUCCESS, 0, "FETCH_ADD");
  CHECK(atomic_b == 5, "the atomic: %llu", (unsigned long long)atomic_b);
  op(&a, &b, &(struct ibv_send_wr){.wr_id = 7, .opcode = IBV_WR_SEND}, 64, IBV_WC_RNR_RETRY_EXC_ERR,
     0, "SEND without a receive");

  ibv_destroy_qp(a.qp);
  ibv_destroy_qp(b.qp);
  ibv_destroy_cq(a.cq);
  ibv_destroy_cq(b.cq);
  ibv_dereg_mr(mr_atomic);
  ibv_dereg_mr(mr_b);
  ibv_dereg_mr(mr_a);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  printf("PASS\n");
  return 0;
}
