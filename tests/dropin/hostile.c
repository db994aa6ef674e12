/* Hostile arguments through the drop-in: every case gets the errno real verbs return, never a
 * crash and never silent data loss (docs/HARDENING.md lists each case and what rxe and mlx5
 * return). C against Debian's verbs.h, linked -libverbs, run with VERBSIM_PROFILE=rxe.
 *
 *   sge_counts   num_sge past max_send_sge / max_recv_sge / the SRQ's max_sge, with the list
 *                ending at a page boundary, 1 << 20, INT_MAX and negative: EINVAL, *bad_wr
 *                the WR, nothing read past the list (ibv_post_send, ibv_post_recv,
 *                ibv_post_srq_recv); ibv_wr_set_sge_list: ENOSPC from ibv_wr_complete.
 * Exit status 0 when every check passed. */
#include <errno.h>
#include <infiniband/verbs.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"
#include "rc.h"

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static union ibv_gid gid;
static char buf[4096];
static struct ibv_mr *mr;

/* `n` SGEs ending exactly at a page that cannot be read: reading one entry past them faults. */
static struct ibv_sge *sges_before_guard(int n) {
  const long page = sysconf(_SC_PAGESIZE);
  char *two = mmap(NULL, 2 * (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
  CHECK(two != MAP_FAILED, "mmap");
  CHECK(mprotect(two + page, (size_t)page, PROT_NONE) == 0, "mprotect");
  struct ibv_sge *s = (struct ibv_sge *)(two + page) - n;
  for (int i = 0; i < n; ++i) {
    s[i].addr = (uintptr_t)buf;
    s[i].length = 8;
    s[i].lkey = mr->lkey;
  }
  return s;
}

static void free_guarded(struct ibv_sge *s, int n) {
  const long page = sysconf(_SC_PAGESIZE);
  munmap((char *)(s + n) - page, 2 * (size_t)page);
}

/* An RC QP in RTS (loopback to itself is enough: nothing here is meant to be sent). */
static struct ibv_qp *qp_with_sges(uint32_t send_sge, uint32_t recv_sge, int extended) {
  struct ibv_qp_init_attr_ex init = {
      .send_cq = cq,
      .recv_cq = cq,
      .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = send_sge,
              .max_recv_sge = recv_sge},
      .qp_type = IBV_QPT_RC,
      .comp_mask = IBV_QP_INIT_ATTR_PD,
      .pd = pd,
  };
  if (extended) {
    init.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    init.send_ops_flags = IBV_QP_EX_WITH_SEND;
  }
  struct ibv_qp *qp = ibv_create_qp_ex(ctx, &init);
  CHECK(qp, "ibv_create_qp_ex: %s", strerror(errno));
  rc_connect(qp, qp->qp_num, &gid, 0, 0, 12);
  return qp;
}

static int max_send_sge(struct ibv_qp *qp) {
  struct ibv_qp_attr a;
  struct ibv_qp_init_attr i;
  CHECK(ibv_query_qp(qp, &a, IBV_QP_CAP, &i) == 0, "ibv_query_qp");
  return (int)a.cap.max_send_sge;
}

static int max_recv_sge(struct ibv_qp *qp) {
  struct ibv_qp_attr a;
  struct ibv_qp_init_attr i;
  CHECK(ibv_query_qp(qp, &a, IBV_QP_CAP, &i) == 0, "ibv_query_qp");
  return (int)a.cap.max_recv_sge;
}

static void sge_counts(void) {
  struct ibv_qp *qp = qp_with_sges(2, 2, 0);
  const int smax = max_send_sge(qp), rmax = max_recv_sge(qp);
  const int counts[] = {0 /* max + 1, below */, 1 << 20, INT_MAX, -1, INT_MIN};
  for (size_t k = 0; k < sizeof counts / sizeof counts[0]; ++k) {
    /* Sends: the list holds max entries and ends at the guard page. */
    struct ibv_sge *s = sges_before_guard(smax);
    struct ibv_send_wr wr = {.wr_id = 2, .sg_list = s, .num_sge = k == 0 ? smax + 1 : counts[k],
                             .opcode = IBV_WR_SEND};
    struct ibv_send_wr *bad = NULL;
    int r = ibv_post_send(qp, &wr, &bad);
    CHECK(r == EINVAL && bad == &wr, "ibv_post_send num_sge %d: %d (%s)", wr.num_sge, r,
          strerror(r));
    free_guarded(s, smax);

    struct ibv_sge *rs = sges_before_guard(rmax);
    struct ibv_recv_wr rwr = {.wr_id = 3, .sg_list = rs, .num_sge = k == 0 ? rmax + 1 : counts[k]};
    struct ibv_recv_wr *rbad = NULL;
    r = ibv_post_recv(qp, &rwr, &rbad);
    CHECK(r == EINVAL && rbad == &rwr, "ibv_post_recv num_sge %d: %d", rwr.num_sge, r);
    free_guarded(rs, rmax);
  }
  /* The WR before the bad one is posted, the bad one is *bad_wr. */
  {
    struct ibv_sge *s = sges_before_guard(smax);
    struct ibv_recv_wr second = {.wr_id = 5, .sg_list = s, .num_sge = 1 << 20};
    struct ibv_recv_wr first = {.wr_id = 4, .sg_list = s, .num_sge = 1, .next = &second};
    struct ibv_recv_wr *bad = NULL;
    CHECK(ibv_post_recv(qp, &first, &bad) == EINVAL && bad == &second, "post_recv chain");
    free_guarded(s, smax);
  }
  CHECK(ibv_destroy_qp(qp) == 0, "ibv_destroy_qp");

  /* SRQ receives. */
  struct ibv_srq_init_attr si = {.attr = {.max_wr = 8, .max_sge = 2}};
  struct ibv_srq *srq = ibv_create_srq(pd, &si);
  CHECK(srq, "ibv_create_srq");
  struct ibv_srq_attr sa;
  CHECK(ibv_query_srq(srq, &sa) == 0, "ibv_query_srq");
  for (size_t k = 0; k < sizeof counts / sizeof counts[0]; ++k) {
    struct ibv_sge *s = sges_before_guard((int)sa.max_sge);
    struct ibv_recv_wr wr = {.wr_id = 6, .sg_list = s,
                             .num_sge = k == 0 ? (int)sa.max_sge + 1 : counts[k]};
    struct ibv_recv_wr *bad = NULL;
    const int r = ibv_post_srq_recv(srq, &wr, &bad);
    CHECK(r == EINVAL && bad == &wr, "ibv_post_srq_recv num_sge %d: %d", wr.num_sge, r);
    free_guarded(s, (int)sa.max_sge);
  }
  CHECK(ibv_destroy_srq(srq) == 0, "ibv_destroy_srq");

  /* ibv_wr_set_sge_list: remembered, ibv_wr_complete returns it and posts nothing. */
  qp = qp_with_sges(2, 1, 1);
  const int xmax = max_send_sge(qp);
  struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(qp);
  CHECK(qx, "ibv_qp_to_qp_ex");
  const size_t xcounts[] = {0, (size_t)1 << 20, (size_t)INT_MAX, SIZE_MAX, (size_t)-1 << 31};
  for (size_t k = 0; k < sizeof xcounts / sizeof xcounts[0]; ++k) {
    struct ibv_sge *s = sges_before_guard(xmax);
    ibv_wr_start(qx);
    qx->wr_id = 7;
    ibv_wr_send(qx);
    ibv_wr_set_sge_list(qx, k == 0 ? (size_t)xmax + 1 : xcounts[k], s);
    const int r = ibv_wr_complete(qx);
    CHECK(r == ENOSPC, "ibv_wr_set_sge_list %zu: ibv_wr_complete %d", xcounts[k], r);
    free_guarded(s, xmax);
  }
  struct ibv_wc wc;
  CHECK(ibv_poll_cq(cq, 1, &wc) == 0, "a refused WR completed");
  CHECK(ibv_destroy_qp(qp) == 0, "ibv_destroy_qp");
}

int main(void) {
  ctx = first_device();
  CHECK(ibv_query_gid(ctx, 1, 1, &gid) == 0, "ibv_query_gid");
  pd = ibv_alloc_pd(ctx);
  CHECK(pd, "ibv_alloc_pd");
  mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
  CHECK(mr, "ibv_reg_mr");
  cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
  CHECK(cq, "ibv_create_cq");

  sge_counts();

  CHECK(ibv_destroy_cq(cq) == 0, "ibv_destroy_cq");
  CHECK(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
  CHECK(ibv_dealloc_pd(pd) == 0, "ibv_dealloc_pd");
  CHECK(ibv_close_device(ctx) == 0, "ibv_close_device");
  printf("PASS\n");
  return 0;
}
