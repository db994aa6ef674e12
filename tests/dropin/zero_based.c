/* Zero-based addressing from C, against Debian's <infiniband/verbs.h> and linked with -libverbs:
 * on the drop-in (LD_LIBRARY_PATH) or on real rxe. Two RC QPs in loopback; A reads and writes
 * B's memory by offset.
 *
 *   1. ibv_reg_mr_iova with hca_va 0 (a zero-based MR, ibv_reg_mr(3)): RDMA WRITE, READ and
 *      FETCH_AND_ADD at offsets from 0 reach the buffer's bytes at those offsets;
 *   2. ibv_reg_mr_iova2 with an iova other than the address: a local SGE is addressed by the
 *      iova too; an iova whose offset in its page differs from the buffer's is EINVAL;
 *   3. ibv_reg_mr with IBV_ACCESS_ZERO_BASED is accepted and still addressed by the buffer's
 *      address (rxe);
 *   4. a type 2 window bound with IBV_ACCESS_ZERO_BASED (IBV_WR_BIND_MW): a WRITE at an offset
 *      lands that far into the window; ibv_bind_mw of a zero-based type 1 window is EINVAL;
 *   5. the buffer's own address is outside a zero-based MR: IBV_WC_REM_ACCESS_ERR.
 *
 *   zero_based
 *
 * Exit status 0 and "PASS" when every check passed; "FAIL file:line: what" otherwise. */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "rc.h"

#define PAGE 4096
#define ACCESS                                                                          \
  (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |          \
   IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND)

static struct ibv_pd *pd;
static struct ibv_cq *cq_a, *cq_b;
static struct ibv_qp *qp_a, *qp_b;
static _Alignas(PAGE) char src[PAGE]; /* A's buffer */
static _Alignas(PAGE) char dst[4 * PAGE]; /* B's buffer, registered in several ways */
static struct ibv_mr *src_mr;

/* One completion on `cq`: its status (and opcode `op` when it succeeded). */
static enum ibv_wc_status complete(struct ibv_cq *cq, enum ibv_wc_opcode op) {
  struct ibv_wc wc;
  int n = 0;
  for (long spins = 0; n == 0 && spins < 100000000; ++spins) n = ibv_poll_cq(cq, 1, &wc);
  CHECK(n == 1, "no completion");
  CHECK(wc.status != IBV_WC_SUCCESS || wc.opcode == op, "opcode %d, want %d", wc.opcode, op);
  return wc.status;
}

static void post(struct ibv_qp *qp, struct ibv_send_wr *wr) {
  struct ibv_send_wr *bad;
  const int err = ibv_post_send(qp, wr, &bad);
  CHECK(err == 0, "ibv_post_send: %s", strerror(err));
}

/* A signaled RDMA operation of `len` bytes from A's buffer at `addr` through `rkey`: its
 * completion status. */
static enum ibv_wc_status rdma(enum ibv_wr_opcode opcode, uint64_t addr, uint32_t rkey,
                               uint32_t len) {
  struct ibv_sge s = {(uintptr_t)src, len, src_mr->lkey};
  struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &s, .num_sge = 1, .opcode = opcode,
                           .send_flags = IBV_SEND_SIGNALED};
  if (opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
    wr.wr.atomic.remote_addr = addr;
    wr.wr.atomic.rkey = rkey;
    wr.wr.atomic.compare_add = 1;
  } else {
    wr.wr.rdma.remote_addr = addr;
    wr.wr.rdma.rkey = rkey;
  }
  post(qp_a, &wr);
  static const enum ibv_wc_opcode done[] = {
      [IBV_WR_RDMA_WRITE] = IBV_WC_RDMA_WRITE,
      [IBV_WR_RDMA_READ] = IBV_WC_RDMA_READ,
      [IBV_WR_ATOMIC_FETCH_AND_ADD] = IBV_WC_FETCH_ADD,
  };
  return complete(cq_a, done[opcode]);
}

/* 64 bytes of a pattern in A's buffer; did they land at `at`? */
static void fill_src(char seed) {
  for (int i = 0; i < 64; ++i) src[i] = (char)(seed + i);
}
static int landed(const char *at) { return memcmp(at, src, 64) == 0; }

static void zero_based_mr(void) {
  struct ibv_mr *mr = ibv_reg_mr_iova(pd, dst, sizeof dst, 0, ACCESS);
  CHECK(mr, "ibv_reg_mr_iova(hca_va 0): %s", strerror(errno));
  CHECK(mr->addr == dst, "mr->addr %p, want the buffer %p", mr->addr, (void *)dst);
  fill_src(0x10);
  CHECK(rdma(IBV_WR_RDMA_WRITE, 256, mr->rkey, 64) == IBV_WC_SUCCESS, "WRITE at offset 256");
  CHECK(landed(dst + 256), "the WRITE at offset 256 landed elsewhere");
  memset(src, 0, 64);
  CHECK(rdma(IBV_WR_RDMA_READ, 256, mr->rkey, 64) == IBV_WC_SUCCESS, "READ at offset 256");
  CHECK(memcmp(src, dst + 256, 64) == 0, "the READ at offset 256 fetched other bytes");
  const uint64_t before = 41;
  memcpy(dst + 1024, &before, 8);
  CHECK(rdma(IBV_WR_ATOMIC_FETCH_AND_ADD, 1024, mr->rkey, 8) == IBV_WC_SUCCESS,
        "FETCH_AND_ADD at offset 1024");
  uint64_t after, fetched;
  memcpy(&after, dst + 1024, 8);
  memcpy(&fetched, src, 8);
  CHECK(after == 42 && fetched == 41, "FETCH_AND_ADD: %llu in memory, %llu fetched",
        (unsigned long long)after, (unsigned long long)fetched);
  CHECK(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
  printf("1. ibv_reg_mr_iova(hca_va 0): WRITE, READ, FETCH_AND_ADD by offset\n");
}

static void iova_mr(void) {
  const uint64_t iova = 0x40000000;
  errno = 0;
  CHECK(!ibv_reg_mr_iova2(pd, dst, sizeof dst, iova + 8, ACCESS) && errno == EINVAL,
        "an iova of another page offset: want EINVAL, got %s", strerror(errno));
  struct ibv_mr *mr = ibv_reg_mr_iova2(pd, dst, sizeof dst, iova, ACCESS);
  CHECK(mr, "ibv_reg_mr_iova2: %s", strerror(errno));
  /* B sends from its iova-addressed buffer into A's. */
  memset(dst + 512, 0x5a, 64);
  struct ibv_sge into = {(uintptr_t)src, 64, src_mr->lkey};
  struct ibv_recv_wr recv = {.wr_id = 2, .sg_list = &into, .num_sge = 1};
  struct ibv_recv_wr *bad_recv;
  CHECK(ibv_post_recv(qp_a, &recv, &bad_recv) == 0, "ibv_post_recv");
  struct ibv_sge from = {iova + 512, 64, mr->lkey};
  struct ibv_send_wr send = {.wr_id = 3, .sg_list = &from, .num_sge = 1, .opcode = IBV_WR_SEND,
                             .send_flags = IBV_SEND_SIGNALED};
  post(qp_b, &send);
  CHECK(complete(cq_b, IBV_WC_SEND) == IBV_WC_SUCCESS, "SEND from an SGE at the iova");
  CHECK(complete(cq_a, IBV_WC_RECV) == IBV_WC_SUCCESS, "its receive");
  CHECK(memcmp(src, dst + 512, 64) == 0, "the SEND carried other bytes");
  CHECK(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
  printf("2. ibv_reg_mr_iova2: a local SGE at the iova; another page offset is EINVAL\n");
}

static void zero_based_flag(void) {
  struct ibv_mr *mr = ibv_reg_mr(pd, dst, sizeof dst, ACCESS | IBV_ACCESS_ZERO_BASED);
  CHECK(mr, "ibv_reg_mr(IBV_ACCESS_ZERO_BASED): %s", strerror(errno));
  fill_src(0x20);
  CHECK(rdma(IBV_WR_RDMA_WRITE, (uintptr_t)(dst + 128), mr->rkey, 64) == IBV_WC_SUCCESS,
        "WRITE at the buffer's address");
  CHECK(landed(dst + 128), "the WRITE landed elsewhere");
  CHECK(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
  printf("3. ibv_reg_mr(IBV_ACCESS_ZERO_BASED): addressed by the buffer's address\n");
}

static void zero_based_windows(void) {
  struct ibv_mr *mr = ibv_reg_mr(pd, dst, sizeof dst, ACCESS);
  struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
  struct ibv_mw *mw1 = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
  CHECK(mr && mw && mw1, "MR and windows: %s", strerror(errno));
  struct ibv_send_wr bind = {.wr_id = 4, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED};
  bind.bind_mw.mw = mw;
  bind.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
  bind.bind_mw.bind_info = (struct ibv_mw_bind_info){
      .mr = mr, .addr = (uintptr_t)(dst + PAGE), .length = PAGE,
      .mw_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_ZERO_BASED};
  post(qp_b, &bind);
  CHECK(complete(cq_b, IBV_WC_BIND_MW) == IBV_WC_SUCCESS, "zero-based IBV_WR_BIND_MW");
  mw->rkey = bind.bind_mw.rkey;
  fill_src(0x30);
  CHECK(rdma(IBV_WR_RDMA_WRITE, 64, mw->rkey, 64) == IBV_WC_SUCCESS, "WRITE at window offset 64");
  CHECK(landed(dst + PAGE + 64), "the WRITE through the window landed elsewhere");
  struct ibv_mw_bind b1 = {.wr_id = 5, .send_flags = IBV_SEND_SIGNALED,
                           .bind_info = bind.bind_mw.bind_info};
  const uint32_t key = mw1->rkey;
  const int err = ibv_bind_mw(qp_b, mw1, &b1);
  CHECK(err == EINVAL && mw1->rkey == key, "zero-based type 1 bind: want EINVAL, got %d", err);
  CHECK(ibv_dealloc_mw(mw) == 0 && ibv_dealloc_mw(mw1) == 0, "ibv_dealloc_mw");
  CHECK(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
  printf("4. a zero-based type 2 window by offset; a zero-based type 1 bind is EINVAL\n");
}

static void address_outside(void) {
  struct ibv_mr *mr = ibv_reg_mr_iova(pd, dst, sizeof dst, 0, ACCESS);
  CHECK(mr, "ibv_reg_mr_iova: %s", strerror(errno));
  CHECK(rdma(IBV_WR_RDMA_WRITE, (uintptr_t)dst, mr->rkey, 64) == IBV_WC_REM_ACCESS_ERR,
        "WRITE at the buffer's address into a zero-based MR: want IBV_WC_REM_ACCESS_ERR");
  CHECK(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
  printf("5. the buffer's address is outside a zero-based MR: IBV_WC_REM_ACCESS_ERR\n");
}

int main(void) {
  struct ibv_context *ctx = first_device();
  union ibv_gid gid;
  CHECK(ibv_query_gid(ctx, 1, 1, &gid) == 0, "ibv_query_gid");
  pd = ibv_alloc_pd(ctx);
  cq_a = ibv_create_cq(ctx, 16, NULL, NULL, 0);
  cq_b = ibv_create_cq(ctx, 16, NULL, NULL, 0);
  CHECK(pd && cq_a && cq_b, "PD and CQs");
  src_mr = ibv_reg_mr(pd, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  CHECK(src_mr, "ibv_reg_mr: %s", strerror(errno));
  qp_a = rc_qp(pd, cq_a, NULL);
  qp_b = rc_qp(pd, cq_b, NULL);
  const unsigned remote = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                          IBV_ACCESS_REMOTE_ATOMIC;
  rc_connect(qp_a, qp_b->qp_num, &gid, remote, 7, 12);
  rc_connect(qp_b, qp_a->qp_num, &gid, remote, 7, 12);

  zero_based_mr();
  iova_mr();
  zero_based_flag();
  zero_based_windows();
  address_outside();  /* last: it takes both QPs to ERR */

  CHECK(ibv_destroy_qp(qp_a) == 0 && ibv_destroy_qp(qp_b) == 0, "ibv_destroy_qp");
  CHECK(ibv_dereg_mr(src_mr) == 0, "ibv_dereg_mr");
  CHECK(ibv_destroy_cq(cq_a) == 0 && ibv_destroy_cq(cq_b) == 0, "ibv_destroy_cq");
  CHECK(ibv_dealloc_pd(pd) == 0 && ibv_close_device(ctx) == 0, "teardown");
  printf("PASS\n");
  return 0;
}
