/* Shared receive queues from C as rxe has them (IBV_DEVICE_SRQ_RESIZE), against the drop-in's
 * rxe profile or real rxe. C against Debian's verbs.h, linked -libverbs.
 *
 *   1. ibv_create_srq leaves the init attributes as asked (rxe does not write the depth back);
 *      ibv_query_srq tells the depth (2^k - 1).
 *   2. ibv_modify_srq with IBV_SRQ_MAX_WR and receives posted: the depth is rounded as at
 *      creation and may not drop below what the SRQ holds (2 with 3 posted gives 3); 0 and a
 *      size below an armed limit are EINVAL; growing keeps the receives, which messages then
 *      take oldest first.
 * Run with VERBSIM_PROFILE=rxe on the drop-in. Exit status 0 and "PASS" when every check
 * passed. */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "rc.h"

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static union ibv_gid gid;
static char buf[8192];
static struct ibv_mr *mr;

static int post_srq_recv(struct ibv_srq *srq, uint64_t id) {
  struct ibv_sge s = {(uintptr_t)(buf + 4096), 64, mr->lkey};
  struct ibv_recv_wr wr = {.wr_id = id, .sg_list = &s, .num_sge = 1};
  struct ibv_recv_wr *bad;
  return ibv_post_srq_recv(srq, &wr, &bad);
}

static uint32_t depth(struct ibv_srq *srq) {
  struct ibv_srq_attr a;
  CHECK(ibv_query_srq(srq, &a) == 0, "ibv_query_srq");
  return a.max_wr;
}

static int resize(struct ibv_srq *srq, uint32_t max_wr) {
  struct ibv_srq_attr a = {.max_wr = max_wr};
  return ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR);
}

/* One SEND from `a`; the wr_id of the receive it took from the SRQ (b's CQ). */
static uint64_t one_message(struct ibv_qp *a, struct ibv_cq *cq, struct ibv_cq *cq_b) {
  struct ibv_sge s = {(uintptr_t)buf, 16, mr->lkey};
  struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
                           .send_flags = IBV_SEND_SIGNALED};
  struct ibv_send_wr *bad;
  CHECK(ibv_post_send(a, &wr, &bad) == 0, "ibv_post_send");
  struct ibv_wc wc;
  int got = 0;
  for (long spins = 0; got == 0 && spins < 100000000; ++spins) got = ibv_poll_cq(cq_b, 1, &wc);
  CHECK(got == 1 && wc.status == IBV_WC_SUCCESS, "the receive completion: %d, %s", got,
        got == 1 ? ibv_wc_status_str(wc.status) : "none");
  const uint64_t id = wc.wr_id;
  for (got = 0; got == 0;) got = ibv_poll_cq(cq, 1, &wc);
  CHECK(got == 1 && wc.status == IBV_WC_SUCCESS, "the send completion");
  return id;
}

int main(void) {
  ctx = first_device();
  struct ibv_device_attr dev;
  CHECK(ibv_query_device(ctx, &dev) == 0, "ibv_query_device");
  CHECK(dev.device_cap_flags & IBV_DEVICE_SRQ_RESIZE, "no IBV_DEVICE_SRQ_RESIZE (not rxe?)");
  CHECK(ibv_query_gid(ctx, 1, 1, &gid) == 0, "ibv_query_gid");
  pd = ibv_alloc_pd(ctx);
  mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
  CHECK(pd && mr, "PD and MR");

  /* 1. create */
  struct ibv_srq_init_attr init = {.attr = {.max_wr = 4, .max_sge = 1}};
  struct ibv_srq *srq = ibv_create_srq(pd, &init);
  CHECK(srq, "ibv_create_srq: %s", strerror(errno));
  CHECK(init.attr.max_wr == 4, "ibv_create_srq wrote max_wr %u back, want the 4 asked for",
        init.attr.max_wr);
  CHECK(depth(srq) == 7, "depth %u, want 7", depth(srq));
  printf("1. ibv_create_srq leaves max_wr 4 as asked; the depth is 7\n");

  /* 2. resize with receives posted */
  for (uint64_t i = 0; i < 3; ++i) CHECK(post_srq_recv(srq, 100 + i) == 0, "post_srq_recv");
  CHECK(resize(srq, 2) == 0 && depth(srq) == 3, "resize to 2 with 3 posted: depth %u, want 3",
        depth(srq));
  CHECK(post_srq_recv(srq, 103) == ENOMEM, "a 4th receive in a depth of 3: want ENOMEM");
  CHECK(resize(srq, 0) == EINVAL, "resize to 0: want EINVAL");
  CHECK(resize(srq, 16) == 0 && depth(srq) == 31, "resize to 16: depth %u, want 31", depth(srq));
  struct ibv_srq_attr limit = {.srq_limit = 20};
  CHECK(ibv_modify_srq(srq, &limit, IBV_SRQ_LIMIT) == 0, "arm the limit at 20");
  CHECK(resize(srq, 8) == EINVAL && depth(srq) == 31, "resize below the armed limit: want EINVAL");
  int more = 0;
  while (post_srq_recv(srq, 200 + (uint64_t)more) == 0) ++more;
  CHECK(more == 28, "%d more receives fit in the depth of 31 holding 3, want 28", more);

  struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
  struct ibv_cq *cq_b = ibv_create_cq(ctx, 64, NULL, NULL, 0);
  CHECK(cq && cq_b, "ibv_create_cq");
  struct ibv_qp *a = rc_qp(pd, cq, NULL), *b = rc_qp(pd, cq_b, srq);
  rc_connect(a, b->qp_num, &gid, 0, 7, 12);
  rc_connect(b, a->qp_num, &gid, 0, 7, 12);
  for (uint64_t i = 0; i < 4; ++i) {
    const uint64_t got = one_message(a, cq, cq_b);
    const uint64_t want = i < 3 ? 100 + i : 200;
    CHECK(got == want, "message %llu took receive %llu, want %llu (oldest first)",
          (unsigned long long)i, (unsigned long long)got, (unsigned long long)want);
  }
  printf("2. resized with receives posted: depth 3 for 2 (3 held), EINVAL for 0 and below the "
         "limit, 31 for 16; messages take the receives oldest first\n");

  CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0, "ibv_destroy_qp");
  CHECK(ibv_destroy_srq(srq) == 0, "ibv_destroy_srq");
  CHECK(ibv_destroy_cq(cq) == 0 && ibv_destroy_cq(cq_b) == 0, "ibv_destroy_cq");
  ibv_dereg_mr(mr);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  printf("PASS\n");
  return 0;
}
