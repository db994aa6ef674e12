/* Hostile arguments through the drop-in: every case gets the errno real verbs return, never a
 * crash and never silent data loss (docs/HARDENING.md lists each case and what rxe and mlx5
 * return). C against Debian's verbs.h, linked -libverbs, run with VERBSIM_PROFILE=rxe.
 *
 *   sge_counts   num_sge past max_send_sge / max_recv_sge / the SRQ's max_sge, with the list
 *                ending at a page boundary, 1 << 20, INT_MAX and negative: EINVAL, *bad_wr
 *                the WR, nothing read past the list (ibv_post_send, ibv_post_recv,
 *                ibv_post_srq_recv); ibv_wr_set_sge_list: ENOSPC from ibv_wr_complete.
 *   inline_sizes ibv_wr_set_inline_data(_list) past max_inline_data, also by a total past 4 GiB
 *                or one that wraps size_t: ENOSPC from ibv_wr_complete, nothing copied.
 *   batch_whole  ibv_wr_complete of a batch one WR longer than the send queue: ENOSPC and none
 *                of it runs; one WR shorter: taken whole, completions in posting order.
 *   unmapped_after_reg  a WRITE into and a READ from an MR whose memory the program unmapped:
 *                both SUCCESS, the READ gives back what the WRITE put there (pinned pages).
 *   modify_null  ibv_modify_qp(qp, NULL, 0) is 0 (only masked fields are read); NULL with a
 *                mask is EINVAL.
 *   destroy_cq_waits  ibv_destroy_cq with a completion event taken and not acknowledged waits
 *                for ibv_ack_cq_events (another thread), then returns 0, as libibverbs.
 *   busy_errno   ibv_dealloc_pd of a PD in use: EBUSY, returned and in errno.
 *   sysfs        ibv_get_sysfs_path before any other verb, ibv_read_sysfs_file and
 *                ibv_get_device_name/guid/index with NULL or a copied device.
 *   listen_backlog  rdma_listen with backlog -1, 0 and INT_MAX: 0 (the kernel's maximum).
 *   forged_handles  copies of every kind of object (and objects whose handle or context was
 *                changed) passed to destroy, modify, query, post and create-with verbs: the
 *                kernel's lookup errnos (ENOENT, EINVAL for a handle of another kind; EINVAL
 *                for write commands), and the originals untouched.
 *   hostile_args NULL, huge and wrapping arguments: ibv_create_cq cqe INT_MAX and -1,
 *                ibv_create_qp max_send_wr / max_inline_data huge, opcodes out of range,
 *                modify_qp to invalid states and with unknown mask bits, ports 0 and 255,
 *                GID indexes huge and negative, an AH on port 0, NULL attributes; ibv_reg_mr
 *                with NULL (EFAULT), SIZE_MAX and a wrapping range (EINVAL), of length 0 at
 *                a page boundary or NULL (EINVAL) and inside a page (an MR of length 0);
 *                ibv_req_notify_cq on a CQ without a channel (0).
 * Exit status 0 when every check passed. */
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#ifdef HOSTILE_RDMACM
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>
#endif
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "check.h"
#include "rc.h"

/* ibv_read_sysfs_file and ibv_get_sysfs_path are libibverbs' (driver.h, not installed). */
int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size);
const char *ibv_get_sysfs_path(void);

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

static struct ibv_qp *qp_inline(uint32_t max_inline) {
  struct ibv_qp_init_attr_ex init = {
      .send_cq = cq,
      .recv_cq = cq,
      .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1,
              .max_inline_data = max_inline},
      .qp_type = IBV_QPT_RC,
      .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
      .pd = pd,
      .send_ops_flags = IBV_QP_EX_WITH_SEND,
  };
  struct ibv_qp *qp = ibv_create_qp_ex(ctx, &init);
  CHECK(qp, "ibv_create_qp_ex: %s", strerror(errno));
  rc_connect(qp, qp->qp_num, &gid, 0, 0, 12);
  return qp;
}

static void inline_sizes(void) {
  struct ibv_qp *qp = qp_inline(16);
  struct ibv_qp_attr a;
  struct ibv_qp_init_attr i;
  CHECK(ibv_query_qp(qp, &a, IBV_QP_CAP, &i) == 0, "ibv_query_qp");
  const size_t max = a.cap.max_inline_data;
  struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(qp);
  /* Each list's total is past max_inline_data; narrowed to 32 bits, or wrapped, it would not be.
   * Nothing may be copied: the buffers are far smaller than the lengths. */
  const struct ibv_data_buf lists[][2] = {
      {{buf, (size_t)1 << 32}, {buf, 16}},          /* 4 GiB + 16: 16 in 32 bits */
      {{buf, SIZE_MAX}, {buf, 2}},                  /* wraps size_t to 1 */
      {{buf, max}, {buf, 1}},                       /* one byte too many */
  };
  for (size_t k = 0; k < sizeof lists / sizeof lists[0]; ++k) {
    ibv_wr_start(qx);
    qx->wr_id = 10;
    ibv_wr_send(qx);
    ibv_wr_set_inline_data_list(qx, 2, lists[k]);
    const int r = ibv_wr_complete(qx);
    CHECK(r == ENOSPC, "ibv_wr_set_inline_data_list %zu: ibv_wr_complete %d", k, r);
  }
  const size_t lengths[] = {max + 1, (size_t)1 << 32, SIZE_MAX};
  for (size_t k = 0; k < sizeof lengths / sizeof lengths[0]; ++k) {
    ibv_wr_start(qx);
    qx->wr_id = 11;
    ibv_wr_send(qx);
    ibv_wr_set_inline_data(qx, buf, lengths[k]);
    const int r = ibv_wr_complete(qx);
    CHECK(r == ENOSPC, "ibv_wr_set_inline_data %zu: ibv_wr_complete %d", lengths[k], r);
  }
  struct ibv_wc wc;
  CHECK(ibv_poll_cq(cq, 1, &wc) == 0, "a refused WR completed");
  CHECK(ibv_destroy_qp(qp) == 0, "ibv_destroy_qp");
}

/* ibv_wr_complete posts the whole batch or none of it (rxe's builders check the send queue as
 * each WR is built, mlx5's too): a batch one WR longer than the send queue is ENOSPC and none of
 * it runs; the same batch one shorter is taken whole, in order. */
static void batch_whole(void) {
  struct ibv_qp *qp = qp_with_sges(1, 1, 1);
  struct ibv_qp_attr a;
  struct ibv_qp_init_attr i;
  CHECK(ibv_query_qp(qp, &a, IBV_QP_CAP, &i) == 0, "ibv_query_qp");
  const uint32_t depth = a.cap.max_send_wr;
  CHECK(depth <= a.cap.max_recv_wr && 2 * depth <= 64, "queue depths %u/%u", depth,
        a.cap.max_recv_wr);
  for (uint32_t k = 0; k < depth; ++k) {
    struct ibv_recv_wr r = {.wr_id = 200 + k};
    struct ibv_recv_wr *bad = NULL;
    CHECK(ibv_post_recv(qp, &r, &bad) == 0, "ibv_post_recv");
  }
  struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(qp);
  CHECK(qx, "ibv_qp_to_qp_ex");
  for (int whole = 0; whole < 2; ++whole) {
    const uint32_t n = whole ? depth : depth + 1;
    ibv_wr_start(qx);
    for (uint32_t k = 0; k < n; ++k) {
      qx->wr_id = 100 + k;
      qx->wr_flags = IBV_SEND_SIGNALED;
      ibv_wr_send(qx);
      ibv_wr_set_sge_list(qx, 0, NULL);
    }
    const int r = ibv_wr_complete(qx);
    CHECK(r == (whole ? 0 : ENOSPC), "ibv_wr_complete of %u WRs, %u slots: %d", n, depth, r);
  }
  /* The first batch ran nothing: exactly depth sends (100, 101, ...) and depth receives. */
  struct ibv_wc wc[64];
  int got = 0;
  for (long spins = 0; got < (int)(2 * depth) && spins < 1000000; ++spins) {
    const int n = ibv_poll_cq(cq, 64 - got, wc + got);
    CHECK(n >= 0, "ibv_poll_cq %d", n);
    got += n;
  }
  CHECK(got == (int)(2 * depth), "%d completions, want %u", got, 2 * depth);
  uint64_t next_send = 100;
  for (int k = 0; k < got; ++k) {
    CHECK(wc[k].status == IBV_WC_SUCCESS, "completion %d: %s", k, ibv_wc_status_str(wc[k].status));
    if (wc[k].opcode == IBV_WC_SEND) {
      CHECK(wc[k].wr_id == next_send, "send wr_id %llu, want %llu",
            (unsigned long long)wc[k].wr_id, (unsigned long long)next_send);
      ++next_send;
    }
  }
  CHECK(ibv_poll_cq(cq, 1, wc) == 0, "a WR of the refused batch completed");
  CHECK(ibv_destroy_qp(qp) == 0, "ibv_destroy_qp");
}

/* A buffer unmapped while registered: hardware pinned its pages, so transfers into and out of
 * it complete and the program does not crash. A WRITE lands in the stand-in page and a READ of
 * the same bytes gives them back; the world warns once on stderr, naming the MR. */
static void unmapped_after_reg(void) {
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  char *gone = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(gone != MAP_FAILED, "mmap");
  struct ibv_mr *m = ibv_reg_mr(pd, gone, page,
                                IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                    IBV_ACCESS_REMOTE_READ);
  CHECK(m, "ibv_reg_mr");
  CHECK(munmap(gone, page) == 0, "munmap");
  struct ibv_qp *qp = rc_qp(pd, cq, NULL);
  rc_connect(qp, qp->qp_num, &gid, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ, 0, 12);
  memset(buf, 0x42, 64);
  memset(buf + 64, 0, 64);
  struct ibv_sge out = {.addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey};
  struct ibv_sge in = {.addr = (uintptr_t)(buf + 64), .length = 64, .lkey = mr->lkey};
  struct ibv_send_wr read = {.wr_id = 78, .sg_list = &in, .num_sge = 1,
                             .opcode = IBV_WR_RDMA_READ, .send_flags = IBV_SEND_SIGNALED,
                             .wr.rdma = {.remote_addr = (uintptr_t)gone, .rkey = m->rkey}};
  struct ibv_send_wr write = {.wr_id = 77, .sg_list = &out, .num_sge = 1, .next = &read,
                              .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
                              .wr.rdma = {.remote_addr = (uintptr_t)gone, .rkey = m->rkey}};
  struct ibv_send_wr *bad = NULL;
  CHECK(ibv_post_send(qp, &write, &bad) == 0, "ibv_post_send");
  struct ibv_wc wc[2];
  int got = 0;
  for (long spins = 0; got < 2 && spins < 1000000; ++spins) got += ibv_poll_cq(cq, 2 - got, wc + got);
  CHECK(got == 2, "%d completions", got);
  for (int k = 0; k < 2; ++k) {
    CHECK(wc[k].status == IBV_WC_SUCCESS && wc[k].wr_id == (uint64_t)(77 + k), "wr_id %llu: %s",
          (unsigned long long)wc[k].wr_id, ibv_wc_status_str(wc[k].status));
  }
  CHECK(memcmp(buf, buf + 64, 64) == 0, "the READ gives back what the WRITE put there");
  CHECK(ibv_destroy_qp(qp) == 0, "ibv_destroy_qp");
  CHECK(ibv_dereg_mr(m) == 0, "ibv_dereg_mr");
}

static void modify_null(void) {
  struct ibv_qp *qp = rc_qp(pd, cq, NULL);
  CHECK(ibv_modify_qp(qp, NULL, 0) == 0, "ibv_modify_qp(qp, NULL, 0)");
  CHECK(ibv_modify_qp(qp, NULL, IBV_QP_STATE) == EINVAL, "ibv_modify_qp(qp, NULL, STATE)");
  CHECK(qp->state == IBV_QPS_RESET, "the QP left RESET");
  CHECK(ibv_destroy_qp(qp) == 0, "ibv_destroy_qp");
}

/* destroy_cq_waits: the thread acknowledges the event once the main thread sleeps inside
 * ibv_destroy_cq (its state in /proc turns to S: no timing involved). */
static volatile int destroying;
static pid_t main_tid;
static struct ibv_cq *event_cq;

static char thread_state(pid_t tid) {
  char path[64], line[512];
  snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)tid);
  FILE *f = fopen(path, "r");
  if (f == NULL) return '?';
  const size_t n = fread(line, 1, sizeof line - 1, f);
  fclose(f);
  line[n] = '\0';
  const char *close = strrchr(line, ')');
  return close != NULL && close[1] == ' ' ? close[2] : '?';
}

static void *ack_later(void *arg) {
  (void)arg;
  while (!__atomic_load_n(&destroying, __ATOMIC_ACQUIRE) || thread_state(main_tid) != 'S') {
    sched_yield();
  }
  ibv_ack_cq_events(event_cq, 1);
  return NULL;
}

static void destroy_cq_waits(void) {
  struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
  CHECK(ch, "ibv_create_comp_channel");
  event_cq = ibv_create_cq(ctx, 16, NULL, ch, 0);
  struct ibv_cq *other = ibv_create_cq(ctx, 16, NULL, NULL, 0);
  CHECK(event_cq && other, "ibv_create_cq");
  struct ibv_qp *a = rc_qp(pd, event_cq, NULL), *b = rc_qp(pd, other, NULL);
  rc_connect(a, b->qp_num, &gid, 0, 7, 12);
  rc_connect(b, a->qp_num, &gid, 0, 7, 12);
  CHECK(ibv_req_notify_cq(event_cq, 0) == 0, "ibv_req_notify_cq");
  struct ibv_sge s = {(uintptr_t)buf, 8, mr->lkey};
  struct ibv_recv_wr rwr = {.wr_id = 1, .sg_list = &s, .num_sge = 1}, *rbad;
  struct ibv_send_wr swr = {.wr_id = 2, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
                            .send_flags = IBV_SEND_SIGNALED}, *sbad;
  CHECK(ibv_post_recv(b, &rwr, &rbad) == 0 && ibv_post_send(a, &swr, &sbad) == 0, "post");
  struct ibv_cq *got;
  void *got_ctx;
  CHECK(ibv_get_cq_event(ch, &got, &got_ctx) == 0 && got == event_cq, "ibv_get_cq_event");
  struct ibv_wc wc;
  CHECK(ibv_poll_cq(event_cq, 1, &wc) == 1 && wc.status == IBV_WC_SUCCESS, "the SEND");
  CHECK(ibv_poll_cq(other, 1, &wc) == 1 && wc.status == IBV_WC_SUCCESS, "the receive");
  CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0, "ibv_destroy_qp");

  main_tid = (pid_t)syscall(SYS_gettid);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, ack_later, NULL) == 0, "pthread_create");
  __atomic_store_n(&destroying, 1, __ATOMIC_RELEASE);
  const int r = ibv_destroy_cq(event_cq);
  CHECK(r == 0, "ibv_destroy_cq with an event not acknowledged: %d (%s)", r, strerror(r));
  CHECK(pthread_join(t, NULL) == 0, "pthread_join");
  CHECK(ibv_destroy_cq(other) == 0, "ibv_destroy_cq");
  CHECK(ibv_destroy_comp_channel(ch) == 0, "ibv_destroy_comp_channel");
}

static void busy_errno(void) {
  struct ibv_pd *p = ibv_alloc_pd(ctx);
  CHECK(p, "ibv_alloc_pd");
  struct ibv_mr *m = ibv_reg_mr(p, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
  CHECK(m, "ibv_reg_mr");
  errno = 0;
  CHECK(ibv_dealloc_pd(p) == EBUSY && errno == EBUSY, "ibv_dealloc_pd in use: errno %d", errno);
  CHECK(ibv_dereg_mr(m) == 0 && ibv_dealloc_pd(p) == 0, "teardown");
}

/* Before any other verb (the first thing librdmacm's ucma_init does). */
static void sysfs_first(void) {
  const char *root = ibv_get_sysfs_path();
  CHECK(root != NULL && root[0] == '/', "ibv_get_sysfs_path");
  char value[16];
  errno = 0;
  CHECK(ibv_read_sysfs_file(root, "class/misc/rdma_cm/abi_version", value, sizeof value) == -1 &&
            errno == ENOENT,
        "ibv_read_sysfs_file of a file the tree lacks: errno %d", errno);
}

static void sysfs(void) {
  char value[16];
  errno = 0;
  CHECK(ibv_read_sysfs_file(NULL, "x", value, sizeof value) == -1 && errno == EINVAL, "dir NULL");
  errno = 0;
  CHECK(ibv_read_sysfs_file(ibv_get_sysfs_path(), NULL, value, sizeof value) == -1 &&
            errno == EINVAL,
        "file NULL");
  errno = 0;
  CHECK(ibv_get_device_name(NULL) == NULL && errno == EINVAL, "ibv_get_device_name(NULL)");
  errno = 0;
  CHECK(ibv_get_device_guid(NULL) == 0 && errno == EINVAL, "ibv_get_device_guid(NULL)");
  errno = 0;
  CHECK(ibv_get_device_index(NULL) == -1 && errno == EINVAL, "ibv_get_device_index(NULL)");
  int n = 0;
  struct ibv_device **list = ibv_get_device_list(&n);
  CHECK(list && n > 0, "ibv_get_device_list");
  struct ibv_device copy = *list[0];
  CHECK(strcmp(ibv_get_device_name(&copy), list[0]->name) == 0, "the copy's name");
  errno = 0;
  CHECK(ibv_get_device_guid(&copy) == 0 && errno == ENODEV, "ibv_get_device_guid(copy)");
  errno = 0;
  CHECK(ibv_get_device_index(&copy) == -1 && errno == ENODEV, "ibv_get_device_index(copy)");
  errno = 0;
  CHECK(ibv_open_device(&copy) == NULL && errno == ENODEV, "ibv_open_device(copy)");
  errno = 0;
  CHECK(ibv_open_device(NULL) == NULL && errno == EINVAL, "ibv_open_device(NULL)");
  ibv_free_device_list(list);
}

static void listen_backlog(void) {
#ifdef HOSTILE_RDMACM
  struct rdma_event_channel *ec = rdma_create_event_channel();
  CHECK(ec, "rdma_create_event_channel");
  const int backlogs[] = {-1, 0, INT_MAX, INT_MIN};
  for (size_t k = 0; k < sizeof backlogs / sizeof backlogs[0]; ++k) {
    struct rdma_cm_id *id = NULL;
    CHECK(rdma_create_id(ec, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)(7470 + k))};
    inet_pton(AF_INET, "10.0.0.1", &sin.sin_addr);
    CHECK(rdma_bind_addr(id, (struct sockaddr *)&sin) == 0, "rdma_bind_addr");
    CHECK(rdma_listen(id, backlogs[k]) == 0, "rdma_listen backlog %d: errno %d", backlogs[k], errno);
    CHECK(rdma_destroy_id(id) == 0, "rdma_destroy_id");
  }
  rdma_destroy_event_channel(ec);
#endif
}

/* The copies are made on the heap at their struct's exact size, so anything that read past the
 * struct (the drop-in's own object) would be caught by ASan. */
#define COPY(type, p) ((type *)memcpy(malloc(sizeof(type)), (p), sizeof(type)))

static void forged_handles(void) {
  struct ibv_context *ctx2 = first_device(); /* another open context of the same device */
  struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
  struct ibv_cq *fcq = ibv_create_cq(ctx, 16, NULL, ch, 0);
  struct ibv_srq_init_attr si = {.attr = {.max_wr = 4, .max_sge = 1}};
  struct ibv_srq *srq = ibv_create_srq(pd, &si);
  struct ibv_qp *qp = rc_qp(pd, fcq, NULL);
  struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
  struct ibv_ah_attr aa = {.is_global = 1, .grh = {.dgid = gid, .sgid_index = 1}, .port_num = 1};
  struct ibv_ah *ah = ibv_create_ah(pd, &aa);
  CHECK(ch && fcq && srq && qp && mw && ah, "objects");

  /* PD */
  struct ibv_pd *pd_copy = COPY(struct ibv_pd, pd);
  CHECK(ibv_dealloc_pd(pd_copy) == ENOENT && errno == ENOENT, "ibv_dealloc_pd(copy)");
  errno = 0;
  CHECK(ibv_reg_mr(pd_copy, buf, 64, 0) == NULL && errno == EINVAL, "ibv_reg_mr(copy): %d", errno);
  errno = 0;
  CHECK(ibv_create_ah(pd_copy, &aa) == NULL && errno == EINVAL, "ibv_create_ah(copy)");
  errno = 0;
  CHECK(ibv_create_srq(pd_copy, &si) == NULL && errno == EINVAL, "ibv_create_srq(copy)");
  errno = 0;
  CHECK(ibv_alloc_mw(pd_copy, IBV_MW_TYPE_1) == NULL && errno == EINVAL, "ibv_alloc_mw(copy)");
  struct ibv_qp_init_attr qi = {.send_cq = fcq, .recv_cq = fcq,
                                .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1,
                                        .max_recv_sge = 1},
                                .qp_type = IBV_QPT_RC};
  errno = 0;
  CHECK(ibv_create_qp(pd_copy, &qi) == NULL && errno == ENOENT, "ibv_create_qp(copy): %d", errno);
  pd_copy->handle += 1000;
  CHECK(ibv_dealloc_pd(pd_copy) == ENOENT, "ibv_dealloc_pd(handle + 1000)");
  pd_copy->handle = fcq->handle; /* a CQ's handle: the kernel finds an object of another type */
  CHECK(ibv_dealloc_pd(pd_copy) == EINVAL, "ibv_dealloc_pd(a CQ's handle)");
  free(pd_copy);
  pd->context = ctx2; /* the genuine PD, told it is another context's */
  CHECK(ibv_dealloc_pd(pd) == ENOENT, "ibv_dealloc_pd(another context)");
  pd->context = ctx;
  const uint32_t pd_handle = pd->handle;
  pd->handle = mr->handle; /* the genuine PD under an MR's handle */
  CHECK(ibv_dealloc_pd(pd) == EINVAL, "ibv_dealloc_pd(an MR's handle)");
  pd->handle = pd_handle;

  /* MR */
  struct ibv_mr *mr_copy = COPY(struct ibv_mr, mr);
  CHECK(ibv_dereg_mr(mr_copy) == ENOENT, "ibv_dereg_mr(copy)");
  free(mr_copy);

  /* CQ */
  struct ibv_cq *cq_copy = COPY(struct ibv_cq, fcq);
  CHECK(ibv_destroy_cq(cq_copy) == ENOENT, "ibv_destroy_cq(copy)");
  CHECK(ibv_resize_cq(cq_copy, 32) == EINVAL, "ibv_resize_cq(copy)");
  CHECK(ibv_req_notify_cq(cq_copy, 0) == EINVAL, "ibv_req_notify_cq(copy)");
  struct ibv_wc wc;
  CHECK(ibv_poll_cq(cq_copy, 1, &wc) == -EINVAL, "ibv_poll_cq(copy)");
  ibv_ack_cq_events(cq_copy, 1); /* nothing to acknowledge: no effect */
  struct ibv_qp_init_attr_ex qx = {.send_cq = cq_copy, .recv_cq = fcq,
                                   .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1,
                                           .max_recv_sge = 1},
                                   .qp_type = IBV_QPT_RC, .comp_mask = IBV_QP_INIT_ATTR_PD,
                                   .pd = pd};
  errno = 0;
  CHECK(ibv_create_qp_ex(ctx, &qx) == NULL && errno == ENOENT, "create_qp_ex(CQ copy): %d", errno);
  free(cq_copy);

  /* QP */
  struct ibv_qp *qp_copy = COPY(struct ibv_qp, qp);
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1};
  CHECK(ibv_modify_qp(qp_copy, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                       IBV_QP_ACCESS_FLAGS) == EINVAL,
        "ibv_modify_qp(copy)");
  struct ibv_qp_init_attr init;
  CHECK(ibv_query_qp(qp_copy, &a, IBV_QP_STATE, &init) == EINVAL, "ibv_query_qp(copy)");
  struct ibv_sge sge = {(uintptr_t)buf, 8, mr->lkey};
  struct ibv_send_wr swr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND}, *sbad = NULL;
  CHECK(ibv_post_send(qp_copy, &swr, &sbad) == EINVAL && sbad == &swr, "ibv_post_send(copy)");
  struct ibv_recv_wr rwr = {.sg_list = &sge, .num_sge = 1}, *rbad = NULL;
  CHECK(ibv_post_recv(qp_copy, &rwr, &rbad) == EINVAL && rbad == &rwr, "ibv_post_recv(copy)");
  CHECK(ibv_qp_to_qp_ex(qp_copy) == NULL, "ibv_qp_to_qp_ex(copy)");
  CHECK(ibv_destroy_qp(qp_copy) == ENOENT, "ibv_destroy_qp(copy)");
  free(qp_copy);
  CHECK(qp->state == IBV_QPS_RESET, "the QP changed");

  /* SRQ */
  struct ibv_srq *srq_copy = COPY(struct ibv_srq, srq);
  struct ibv_srq_attr sa = {.srq_limit = 1};
  CHECK(ibv_modify_srq(srq_copy, &sa, IBV_SRQ_LIMIT) == EINVAL, "ibv_modify_srq(copy)");
  CHECK(ibv_query_srq(srq_copy, &sa) == EINVAL, "ibv_query_srq(copy)");
  rbad = NULL;
  CHECK(ibv_post_srq_recv(srq_copy, &rwr, &rbad) == EINVAL && rbad == &rwr,
        "ibv_post_srq_recv(copy)");
  CHECK(ibv_destroy_srq(srq_copy) == ENOENT, "ibv_destroy_srq(copy)");
  free(srq_copy);

  /* AH and MW */
  struct ibv_ah *ah_copy = COPY(struct ibv_ah, ah);
  CHECK(ibv_destroy_ah(ah_copy) == ENOENT, "ibv_destroy_ah(copy)");
  free(ah_copy);
  struct ibv_mw *mw_copy = COPY(struct ibv_mw, mw);
  CHECK(ibv_dealloc_mw(mw_copy) == ENOENT, "ibv_dealloc_mw(copy)");
  free(mw_copy);

  /* Completion channel: no handle, the fd is what the kernel checks. */
  struct ibv_comp_channel *ch_copy = COPY(struct ibv_comp_channel, ch);
  errno = 0;
  CHECK(ibv_create_cq(ctx, 4, NULL, ch_copy, 0) == NULL && errno == EBADF, "create_cq(copy)");
  struct ibv_cq *got;
  void *got_ctx;
  errno = 0;
  CHECK(ibv_get_cq_event(ch_copy, &got, &got_ctx) == -1 && errno == EINVAL, "get_cq_event(copy)");
  CHECK(ibv_destroy_comp_channel(ch_copy) == EINVAL, "ibv_destroy_comp_channel(copy)");
  free(ch_copy);

  /* Context: a copy is no open context (only verbs libibverbs exports reach the drop-in with
   * it; the inline ones read its verbs_context before the struct). */
  struct ibv_context *ctx_copy = COPY(struct ibv_context, ctx);
  errno = 0;
  CHECK(ibv_alloc_pd(ctx_copy) == NULL && errno == EINVAL, "ibv_alloc_pd(context copy)");
  errno = 0;
  CHECK(ibv_create_cq(ctx_copy, 4, NULL, NULL, 0) == NULL && errno == EINVAL, "create_cq(ctx copy)");
  errno = 0;
  CHECK(ibv_create_comp_channel(ctx_copy) == NULL && errno == EINVAL, "create_comp_channel(ctx copy)");
  struct ibv_device_attr da;
  CHECK(ibv_query_device(ctx_copy, &da) == EINVAL, "ibv_query_device(context copy)");
  CHECK(ibv_query_gid(ctx_copy, 1, 0, &gid) == -1 && errno == EINVAL, "query_gid(context copy)");
  CHECK(ibv_close_device(ctx_copy) == EINVAL, "ibv_close_device(context copy)");
  free(ctx_copy);

  /* The originals are intact and go as usual. */
  CHECK(ibv_query_qp(qp, &a, IBV_QP_STATE, &init) == 0 && a.qp_state == IBV_QPS_RESET, "query");
  CHECK(ibv_destroy_qp(qp) == 0, "ibv_destroy_qp");
  CHECK(ibv_destroy_ah(ah) == 0 && ibv_dealloc_mw(mw) == 0, "ibv_destroy_ah, ibv_dealloc_mw");
  CHECK(ibv_destroy_srq(srq) == 0, "ibv_destroy_srq");
  CHECK(ibv_destroy_cq(fcq) == 0, "ibv_destroy_cq");
  CHECK(ibv_destroy_comp_channel(ch) == 0, "ibv_destroy_comp_channel");
  CHECK(ibv_close_device(ctx2) == 0, "ibv_close_device");
}

#define ERRNO_IS(call_fails, want, what)                                              \
  do {                                                                                \
    errno = 0;                                                                        \
    CHECK((call_fails) && errno == (want), "%s: errno %d (%s), want %d", what, errno, \
          strerror(errno), want);                                                     \
  } while (0)

static void hostile_args(void) {
  /* CQs */
  ERRNO_IS(ibv_create_cq(ctx, INT_MAX, NULL, NULL, 0) == NULL, EINVAL, "create_cq INT_MAX");
  ERRNO_IS(ibv_create_cq(ctx, -1, NULL, NULL, 0) == NULL, EINVAL, "create_cq -1");
  ERRNO_IS(ibv_create_cq(ctx, 4, NULL, NULL, -1) == NULL, EINVAL, "create_cq vector -1");
  ERRNO_IS(ibv_create_cq(ctx, 4, NULL, NULL, INT_MAX) == NULL, EINVAL, "create_cq vector max");

  /* QPs */
  const uint32_t huge[] = {UINT32_MAX, 1u << 31, (1u << 20) + 1};
  for (size_t k = 0; k < sizeof huge / sizeof huge[0]; ++k) {
    struct ibv_qp_init_attr qi = {.send_cq = cq, .recv_cq = cq,
                                  .cap = {.max_send_wr = huge[k], .max_recv_wr = 1,
                                          .max_send_sge = 1, .max_recv_sge = 1},
                                  .qp_type = IBV_QPT_RC};
    ERRNO_IS(ibv_create_qp(pd, &qi) == NULL, EINVAL, "create_qp max_send_wr huge");
    qi.cap.max_send_wr = 1;
    qi.cap.max_recv_wr = huge[k];
    ERRNO_IS(ibv_create_qp(pd, &qi) == NULL, EINVAL, "create_qp max_recv_wr huge");
    qi.cap.max_recv_wr = 1;
    qi.cap.max_inline_data = huge[k];
    ERRNO_IS(ibv_create_qp(pd, &qi) == NULL, EINVAL, "create_qp max_inline_data huge");
    qi.cap.max_inline_data = 0;
    qi.cap.max_send_sge = huge[k];
    ERRNO_IS(ibv_create_qp(pd, &qi) == NULL, EINVAL, "create_qp max_send_sge huge");
  }
  struct ibv_qp_init_attr nocq = {.qp_type = IBV_QPT_RC, .cap = {.max_send_wr = 1}};
  ERRNO_IS(ibv_create_qp(pd, &nocq) == NULL, EINVAL, "create_qp without CQs");
  ERRNO_IS(ibv_create_qp(pd, NULL) == NULL, EINVAL, "create_qp NULL attr");

  /* Opcodes out of range, in RTS */
  struct ibv_qp *qp = rc_qp(pd, cq, NULL);
  rc_connect(qp, qp->qp_num, &gid, 0, 0, 12);
  struct ibv_sge sge = {(uintptr_t)buf, 8, mr->lkey};
  const int opcodes[] = {IBV_WR_DRIVER1 + 1, 200, -1, INT_MAX, IBV_WR_TSO};
  for (size_t k = 0; k < sizeof opcodes / sizeof opcodes[0]; ++k) {
    struct ibv_send_wr wr = {.wr_id = 20, .sg_list = &sge, .num_sge = 1,
                             .opcode = (enum ibv_wr_opcode)opcodes[k]}, *bad = NULL;
    const int r = ibv_post_send(qp, &wr, &bad);
    CHECK(r == EINVAL && bad == &wr, "opcode %d: %d", opcodes[k], r);
  }
  struct ibv_wc wc;
  CHECK(ibv_poll_cq(cq, 1, &wc) == 0, "a refused WR completed");

  /* modify_qp: states that do not exist, transitions the table has not, unknown mask bits */
  struct ibv_qp *fresh = rc_qp(pd, cq, NULL);
  struct ibv_qp_attr a = {.qp_state = (enum ibv_qp_state)99};
  CHECK(ibv_modify_qp(fresh, &a, IBV_QP_STATE) == EINVAL, "modify_qp to state 99");
  a.qp_state = (enum ibv_qp_state)-1;
  CHECK(ibv_modify_qp(fresh, &a, IBV_QP_STATE) == EINVAL, "modify_qp to state -1");
  a.qp_state = IBV_QPS_RTS;
  CHECK(ibv_modify_qp(fresh, &a, IBV_QP_STATE) == EINVAL, "modify_qp RESET -> RTS");
  a.qp_state = IBV_QPS_SQD;
  CHECK(ibv_modify_qp(fresh, &a, IBV_QP_STATE) == EINVAL, "modify_qp RESET -> SQD");
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  CHECK(ibv_modify_qp(fresh, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                     IBV_QP_ACCESS_FLAGS | (1 << 30)) == EOPNOTSUPP,
        "modify_qp with an unknown mask bit");
  CHECK(ibv_modify_qp(fresh, &a, -1) == EOPNOTSUPP, "modify_qp mask -1");
  a.port_num = 0;
  CHECK(ibv_modify_qp(fresh, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                     IBV_QP_ACCESS_FLAGS) == EINVAL,
        "modify_qp to INIT on port 0");
  a.port_num = 255;
  CHECK(ibv_modify_qp(fresh, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                     IBV_QP_ACCESS_FLAGS) == EINVAL,
        "modify_qp to INIT on port 255");
  CHECK(fresh->state == IBV_QPS_RESET, "the QP left RESET");
  CHECK(ibv_destroy_qp(fresh) == 0 && ibv_destroy_qp(qp) == 0, "ibv_destroy_qp");

  /* Ports and GIDs */
  struct ibv_port_attr pa;
  CHECK(ibv_query_port(ctx, 0, &pa) == EINVAL, "query_port 0");
  CHECK(ibv_query_port(ctx, 255, &pa) == EINVAL, "query_port 255");
  union ibv_gid g;
  ERRNO_IS(ibv_query_gid(ctx, 1, INT_MAX, &g) == -1, EINVAL, "query_gid INT_MAX");
  ERRNO_IS(ibv_query_gid(ctx, 1, -1, &g) == -1, EINVAL, "query_gid -1");
  ERRNO_IS(ibv_query_gid(ctx, 0, 0, &g) == -1, EINVAL, "query_gid port 0");
  ERRNO_IS(ibv_query_gid(ctx, 1, 0, NULL) == -1, EINVAL, "query_gid NULL");
  __be16 pkey;
  ERRNO_IS(ibv_query_pkey(ctx, 1, -1, &pkey) == -1, EINVAL, "query_pkey -1");
  ERRNO_IS(ibv_query_pkey(ctx, 1, INT_MAX, &pkey) == -1, EINVAL, "query_pkey INT_MAX");
  CHECK(ibv_query_device(ctx, NULL) == EINVAL, "query_device NULL");

  /* AHs */
  struct ibv_ah_attr aa = {.is_global = 1, .grh = {.dgid = gid, .sgid_index = 1}, .port_num = 0};
  ERRNO_IS(ibv_create_ah(pd, &aa) == NULL, EINVAL, "create_ah port 0");
  aa.port_num = 255;
  ERRNO_IS(ibv_create_ah(pd, &aa) == NULL, EINVAL, "create_ah port 255");
  ERRNO_IS(ibv_create_ah(pd, NULL) == NULL, EINVAL, "create_ah NULL");

  /* MRs: NULL cannot be pinned (EFAULT), a wrapping range is EINVAL. Length 0 (rxe, kernel
   * 6.1): the pages the range touches are pinned, none at a page boundary (EINVAL, NULL too),
   * the one it is in otherwise, which gives an MR of length 0. */
  char *page = aligned_alloc(4096, 4096);
  struct {
    void *addr;
    size_t length;
    int err;
  } regs[] = {{NULL, 4096, EFAULT},
              {buf, SIZE_MAX, EINVAL},
              {(void *)(UINTPTR_MAX - 4095), 8192, EINVAL},
              {NULL, 0, EINVAL},
              {page, 0, EINVAL},
              {(void *)8, 0, EFAULT}};
  for (size_t k = 0; k < sizeof regs / sizeof regs[0]; ++k) {
    errno = 0;
    struct ibv_mr *m = ibv_reg_mr(pd, regs[k].addr, regs[k].length, IBV_ACCESS_LOCAL_WRITE);
    CHECK(m == NULL && errno == regs[k].err, "ibv_reg_mr case %zu: %p, errno %d, want %d", k,
          (void *)m, errno, regs[k].err);
  }
  struct ibv_mr *empty = ibv_reg_mr(pd, page + 8, 0, IBV_ACCESS_LOCAL_WRITE);
  CHECK(empty != NULL && empty->length == 0 && empty->addr == page + 8,
        "ibv_reg_mr of length 0 inside a page: %p, errno %d", (void *)empty, errno);
  if (empty != NULL) CHECK(ibv_dereg_mr(empty) == 0, "ibv_dereg_mr of length 0");
  free(page);

  /* A CQ without a completion channel is armed (rxe and mlx5 return 0). */
  CHECK(ibv_req_notify_cq(cq, 0) == 0 && ibv_req_notify_cq(cq, 1) == 0,
        "ibv_req_notify_cq without a channel");

  /* SRQs */
  ERRNO_IS(ibv_create_srq(pd, NULL) == NULL, EINVAL, "create_srq NULL");
  struct ibv_srq_init_attr si = {.attr = {.max_wr = UINT32_MAX, .max_sge = 1}};
  ERRNO_IS(ibv_create_srq(pd, &si) == NULL, EINVAL, "create_srq max_wr huge");
}

int main(void) {
  /* Deterministic: no background progress thread (destroy_cq_waits watches the main thread). */
  setenv("VERBSIM_DROPIN_PROGRESS", "0", 1);
  sysfs_first();
  ctx = first_device();
  CHECK(ibv_query_gid(ctx, 1, 1, &gid) == 0, "ibv_query_gid");
  pd = ibv_alloc_pd(ctx);
  CHECK(pd, "ibv_alloc_pd");
  mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
  CHECK(mr, "ibv_reg_mr");
  cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
  CHECK(cq, "ibv_create_cq");

  /* HOSTILE_ONLY=<name> runs one group of cases (with the setup above). */
  const char *only = getenv("HOSTILE_ONLY");
#define RUN(name) \
  if (only == NULL || strcmp(only, #name) == 0) name()
  RUN(sge_counts);
  RUN(inline_sizes);
  RUN(batch_whole);
  RUN(unmapped_after_reg);
  RUN(modify_null);
  RUN(destroy_cq_waits);
  RUN(busy_errno);
  RUN(sysfs);
  RUN(listen_backlog);
  RUN(forged_handles);
  RUN(hostile_args);

  CHECK(ibv_destroy_cq(cq) == 0, "ibv_destroy_cq");
  CHECK(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
  CHECK(ibv_dealloc_pd(pd) == 0, "ibv_dealloc_pd");
  CHECK(ibv_close_device(ctx) == 0, "ibv_close_device");
  printf("PASS\n");
  return 0;
}
