/* Memory windows through the drop-in, in plain C against Debian's <infiniband/verbs.h> and linked
 * with -libverbs (run with LD_LIBRARY_PATH pointing at the drop-in). Two RC QPs on one device:
 * A writes into B's memory through windows B binds; B's MR itself grants no remote access
 * (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND), so every WRITE that succeeds went through a
 * window.
 *
 *   1. the device reports windows (max_mw, IBV_DEVICE_MEM_WINDOW, _TYPE_2B); bad arguments
 *      fail with EINVAL;
 *   2. type 1: ibv_bind_mw gives mw->rkey its next key (ibv_inc_rkey), the bind completes
 *      (IBV_WC_BIND_MW), a WRITE through it lands, one past its end fails with
 *      IBV_WC_REM_ACCESS_ERR; rebinding with length 0 invalidates it (REM_ACCESS_ERR after);
 *   3. type 2 bound by IBV_WR_BIND_MW in ibv_post_send, invalidated by IBV_WR_LOCAL_INV
 *      (IBV_WC_LOCAL_INV), then REM_ACCESS_ERR;
 *   4. type 2 invalidated by the peer's IBV_WR_SEND_WITH_INV: the receive completes with
 *      IBV_WC_WITH_INV and invalidated_rkey (ibv_poll_cq), then REM_ACCESS_ERR;
 *   5. the same with ibv_wr_bind_mw and ibv_wr_send_inv, polled with ibv_start_poll
 *      (ibv_wc_read_invalidated_rkey);
 *   6. ibv_wr_bind_mw then ibv_wr_local_inv; then a bound window deallocated: REM_ACCESS_ERR;
 *   7. errors: EINVAL at post (a range without an MR, a zero-based type 1 window, a QP
 *      without IBV_QP_EX_WITH_BIND_MW, a UD QP), ibv_dereg_mr refused while a window is bound,
 *      IBV_WC_MW_BIND_ERR for an MR without IBV_ACCESS_MW_BIND and for a type 2 bind naming a
 *      stale key (a type 2 bind leaves mw->rkey to the program).
 *
 * After each access error both QPs go back through RESET to RTS (a new connection).
 *
 *   mw [--device sim0]
 *
 * Exit status 0 and "PASS" when every check passed; "FAIL <line>: <what>" otherwise. */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SIZE 8192
#define GID_INDEX 1
#define SEND_OPS                                                                   \
  (IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_BIND_MW |      \
   IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_SEND_WITH_INV)

#define CHECK(cond, ...)                                   \
  do {                                                     \
    if (!(cond)) {                                         \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                        \
      fprintf(stderr, "\n");                               \
      return -1;                                           \
    }                                                      \
  } while (0)
#define TRY(call) \
  do {            \
    if ((call) != 0) return -1; \
  } while (0)

struct side {
  struct ibv_cq *cq;     /* A: a plain CQ; B: an extended one (both polling styles) */
  struct ibv_cq_ex *cqx; /* B only */
  struct ibv_mr *mr;
  struct ibv_qp *qp;
  struct ibv_qp_ex *qpx;
  char *buf;
};

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static union ibv_gid gid;
static struct side a, b;
static int on_simulator; /* the drop-in's device (its fw_ver says so), not a real one */

/* The flag of a receive that invalidated a key. Real rxe reports the kernel's
 * IB_WC_WITH_INVALIDATE, bit 2 (libibverbs' IBV_WC_IP_CSUM_OK), instead of IBV_WC_WITH_INV. */
static unsigned with_inv_flags(void) {
  return on_simulator ? IBV_WC_WITH_INV : IBV_WC_WITH_INV | IBV_WC_IP_CSUM_OK;
}

/* Polls until one completion arrives. */
static int wait_one(struct ibv_cq *cq, struct ibv_wc *wc) {
  for (long i = 0; i < 1000000; ++i) {
    const int n = ibv_poll_cq(cq, 1, wc);
    CHECK(n >= 0, "ibv_poll_cq returned %d", n);
    if (n == 1) return 0;
  }
  CHECK(0, "no completion");
  return 1;
}

/* One completion on `cq` with this wr_id, status and opcode. */
static int expect(struct ibv_cq *cq, uint64_t wr_id, enum ibv_wc_status status,
                  enum ibv_wc_opcode opcode, const char *what) {
  struct ibv_wc wc;
  TRY(wait_one(cq, &wc));
  CHECK(wc.wr_id == wr_id && wc.status == status,
        "%s: want wr_id %llu %s, got wr_id %llu %s", what, (unsigned long long)wr_id,
        ibv_wc_status_str(status), (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status));
  if (status == IBV_WC_SUCCESS) {
    CHECK(wc.opcode == opcode, "%s: want opcode %d, got %d", what, opcode, wc.opcode);
  }
  return 0;
}

static int modify_to_rts(struct ibv_qp *qp, uint32_t remote_qpn) {
  struct ibv_qp_attr r = {.qp_state = IBV_QPS_RESET};
  int err = ibv_modify_qp(qp, &r, IBV_QP_STATE);
  CHECK(err == 0, "modify to RESET: %s", strerror(err));
  struct ibv_qp_attr q = {.qp_state = IBV_QPS_INIT,
                          .pkey_index = 0,
                          .port_num = 1,
                          .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ};
  err = ibv_modify_qp(qp, &q,
                      IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  CHECK(err == 0, "modify to INIT: %s", strerror(err));
  memset(&q, 0, sizeof q);
  q.qp_state = IBV_QPS_RTR;
  q.path_mtu = IBV_MTU_1024;
  q.dest_qp_num = remote_qpn;
  q.max_dest_rd_atomic = 1;
  q.min_rnr_timer = 12;
  q.ah_attr.is_global = 1;
  q.ah_attr.grh.dgid = gid;
  q.ah_attr.grh.sgid_index = GID_INDEX;
  q.ah_attr.grh.hop_limit = 1;
  q.ah_attr.port_num = 1;
  err = ibv_modify_qp(qp, &q,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                          IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  CHECK(err == 0, "modify to RTR: %s", strerror(err));
  memset(&q, 0, sizeof q);
  q.qp_state = IBV_QPS_RTS;
  q.timeout = 14;
  q.retry_cnt = 7;
  q.rnr_retry = 7;
  q.max_rd_atomic = 1;
  err = ibv_modify_qp(qp, &q,
                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                          IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
  CHECK(err == 0, "modify to RTS: %s", strerror(err));
  return 0;
}

/* A new connection: both QPs through RESET to RTS, their CQs emptied of what RESET left. */
static int reconnect(void) {
  TRY(modify_to_rts(a.qp, b.qp->qp_num));
  TRY(modify_to_rts(b.qp, a.qp->qp_num));
  struct ibv_wc wc;
  while (ibv_poll_cq(a.cq, 1, &wc) > 0) {
  }
  while (ibv_poll_cq(b.cq, 1, &wc) > 0) {
  }
  return 0;
}

static int create_side(struct side *s, int extended_cq, int mr_access) {
  if (extended_cq) {
    struct ibv_cq_init_attr_ex cq_attr = {.cqe = 16, .wc_flags = IBV_WC_STANDARD_FLAGS};
    s->cqx = ibv_create_cq_ex(ctx, &cq_attr);
    CHECK(s->cqx, "ibv_create_cq_ex: %s", strerror(errno));
    s->cq = ibv_cq_ex_to_cq(s->cqx);
  } else {
    s->cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
    CHECK(s->cq, "ibv_create_cq: %s", strerror(errno));
  }
  s->buf = calloc(1, SIZE);
  CHECK(s->buf, "calloc");
  s->mr = ibv_reg_mr(pd, s->buf, SIZE, mr_access);
  CHECK(s->mr, "ibv_reg_mr(access %#x): %s", mr_access, strerror(errno));
  struct ibv_qp_init_attr_ex init = {
      .send_cq = s->cq,
      .recv_cq = s->cq,
      .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1},
      .qp_type = IBV_QPT_RC,
      .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
      .pd = pd,
      .send_ops_flags = SEND_OPS,
  };
  s->qp = ibv_create_qp_ex(ctx, &init);
  CHECK(s->qp, "ibv_create_qp_ex with BIND_MW, LOCAL_INV, SEND_WITH_INV: %s", strerror(errno));
  s->qpx = ibv_qp_to_qp_ex(s->qp);
  CHECK(s->qpx, "ibv_qp_to_qp_ex");
  return 0;
}

static int post(struct ibv_qp *qp, struct ibv_send_wr *wr) {
  struct ibv_send_wr *bad = NULL;
  const int err = ibv_post_send(qp, wr, &bad);
  CHECK(err == 0, "ibv_post_send (opcode %d): %s", wr->opcode, strerror(err));
  return 0;
}

/* A writes `len` bytes of `text` to B's `remote` through `rkey`; wants `status`. On success the
 * bytes must be there. */
static int write_through(uint32_t rkey, char *remote, uint32_t len, const char *text,
                         enum ibv_wc_status status, const char *what) {
  static uint64_t id = 1000;
  snprintf(a.buf, len, "%s", text);
  struct ibv_sge sge = {(uintptr_t)a.buf, len, a.mr->lkey};
  struct ibv_send_wr wr = {.wr_id = ++id,
                           .sg_list = &sge,
                           .num_sge = 1,
                           .opcode = IBV_WR_RDMA_WRITE,
                           .send_flags = IBV_SEND_SIGNALED,
                           .wr.rdma = {.remote_addr = (uintptr_t)remote, .rkey = rkey}};
  TRY(post(a.qp, &wr));
  TRY(expect(a.cq, id, status, IBV_WC_RDMA_WRITE, what));
  if (status == IBV_WC_SUCCESS) {
    CHECK(strcmp(remote, text) == 0, "%s: B holds '%.40s'", what, remote);
  } else {
    TRY(reconnect());
  }
  return 0;
}

/* B posts a receive for a SEND_WITH_INV. */
static int post_recv_b(uint64_t wr_id) {
  struct ibv_sge sge = {(uintptr_t)(b.buf + 6144), 256, b.mr->lkey};
  struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1};
  struct ibv_recv_wr *bad = NULL;
  const int err = ibv_post_recv(b.qp, &wr, &bad);
  CHECK(err == 0, "ibv_post_recv: %s", strerror(err));
  return 0;
}

static int check_device(void) {
  struct ibv_device_attr_ex attr;
  memset(&attr, 0, sizeof attr);
  CHECK(ibv_query_device_ex(ctx, NULL, &attr) == 0, "ibv_query_device_ex");
  on_simulator = strstr(attr.orig_attr.fw_ver, "verbsim") != NULL;
  CHECK(attr.orig_attr.max_mw > 0, "max_mw is %d", attr.orig_attr.max_mw);
  CHECK(attr.orig_attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW, "no IBV_DEVICE_MEM_WINDOW");
  CHECK(attr.orig_attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B,
        "no IBV_DEVICE_MEM_WINDOW_TYPE_2B");
  CHECK(attr.device_cap_flags_ex & IBV_DEVICE_MEM_WINDOW_TYPE_2B,
        "device_cap_flags_ex lacks IBV_DEVICE_MEM_WINDOW_TYPE_2B");
  struct ibv_device_attr old;
  CHECK(ibv_query_device(ctx, &old) == 0 && old.max_mw == attr.orig_attr.max_mw,
        "ibv_query_device's max_mw differs");
  printf("1. device: max_mw %d, type 1 and type 2B windows\n", old.max_mw);

  errno = 0;
  struct ibv_mw *bad = ibv_alloc_mw(pd, (enum ibv_mw_type)3);
  CHECK(!bad && errno == EINVAL, "ibv_alloc_mw(type 3): want NULL/EINVAL, got %p/%d",
        (void *)bad, errno);
  return 0;
}

/* 2. Type 1. */
static int type1(void) {
  struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
  CHECK(mw, "ibv_alloc_mw(IBV_MW_TYPE_1): %s", strerror(errno));
  CHECK(mw->type == IBV_MW_TYPE_1 && mw->pd == pd && mw->context == ctx, "ibv_mw fields");
  /* The window ends where the MR does: rxe checks an access through a window against the
   * MR's range rather than the window's (measured), and the rxe profile does the same, so only
   * an access past both fails in every profile. */
  char *at = b.buf + SIZE - 512;
  struct ibv_mw_bind bind = {.wr_id = 10,
                             .send_flags = IBV_SEND_SIGNALED,
                             .bind_info = {.mr = b.mr,
                                           .addr = (uintptr_t)at,
                                           .length = 512,
                                           .mw_access_flags = IBV_ACCESS_REMOTE_WRITE}};
  /* A bad bind is refused at post and leaves the key alone: a range without an MR. */
  uint32_t old = mw->rkey;
  bind.bind_info.mr = NULL;
  int err = ibv_bind_mw(b.qp, mw, &bind);
  CHECK(err == EINVAL && mw->rkey == old, "bind of a range without an MR: want EINVAL, got %d",
        err);
  bind.bind_info.mr = b.mr;
  /* Local flags in a window's access are taken and mean nothing (rxe accepts them: conformance
   * MemoryWindows.Type1WindowAccessWithLocalFlags). */
  bind.bind_info.mw_access_flags =
      IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND;

  err = ibv_bind_mw(b.qp, mw, &bind);
  CHECK(err == 0, "ibv_bind_mw: %s", strerror(err));
  CHECK(mw->rkey == ibv_inc_rkey(old), "mw->rkey after ibv_bind_mw: want %#x, got %#x",
        ibv_inc_rkey(old), mw->rkey);
  const uint32_t bound = mw->rkey;
  TRY(expect(b.cq, 10, IBV_WC_SUCCESS, IBV_WC_BIND_MW, "type 1 bind"));
  TRY(write_through(mw->rkey, at, 64, "through a type 1 window", IBV_WC_SUCCESS,
                    "WRITE through the type 1 window"));
  TRY(write_through(mw->rkey, at + 512 - 32, 64, "past its end", IBV_WC_REM_ACCESS_ERR,
                    "WRITE past the type 1 window's end"));
  TRY(write_through(b.mr->rkey, at, 64, "through the MR", IBV_WC_REM_ACCESS_ERR,
                    "WRITE through the MR's own rkey (no remote access)"));

  /* Rebinding with length 0 invalidates it. */
  old = mw->rkey;
  bind.wr_id = 11;
  bind.bind_info.length = 0;
  bind.bind_info.mw_access_flags = 0;
  err = ibv_bind_mw(b.qp, mw, &bind);
  CHECK(err == 0, "ibv_bind_mw with length 0: %s", strerror(err));
  CHECK(mw->rkey == ibv_inc_rkey(old), "mw->rkey after the second ibv_bind_mw");
  TRY(expect(b.cq, 11, IBV_WC_SUCCESS, IBV_WC_BIND_MW, "type 1 unbind"));
  TRY(write_through(old, at, 64, "old key", IBV_WC_REM_ACCESS_ERR,
                    "WRITE through the type 1 window's previous key"));
  TRY(write_through(mw->rkey, at, 64, "unbound", IBV_WC_REM_ACCESS_ERR,
                    "WRITE through the unbound type 1 window"));
  const uint32_t unbound = mw->rkey;
  CHECK(ibv_dealloc_mw(mw) == 0, "ibv_dealloc_mw(type 1)");
  printf("2. type 1: bound (key %#x), written through, unbound (key %#x), REM_ACCESS_ERR "
         "after\n", bound, unbound);
  return 0;
}

/* An IBV_WR_BIND_MW giving type 2 window `mw` the key `rkey` over 256 bytes of B's buffer. */
static struct ibv_send_wr bind2(struct ibv_mw *mw, uint32_t rkey, char *at, uint64_t wr_id) {
  struct ibv_send_wr wr = {.wr_id = wr_id, .opcode = IBV_WR_BIND_MW,
                           .send_flags = IBV_SEND_SIGNALED};
  wr.bind_mw.mw = mw;
  wr.bind_mw.rkey = rkey;
  wr.bind_mw.bind_info.mr = b.mr;
  wr.bind_mw.bind_info.addr = (uintptr_t)at;
  wr.bind_mw.bind_info.length = 256;
  wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  return wr;
}

/* IBV_WR_BIND_MW of a type 2 window through ibv_post_send. The bind does not update mw->rkey:
 * the program does, since the next bind names the key found there (rxe refuses a stale one). */
static int bind2_post(struct ibv_mw *mw, uint32_t rkey, char *at, uint64_t wr_id) {
  struct ibv_send_wr wr = bind2(mw, rkey, at, wr_id);
  TRY(post(b.qp, &wr));
  TRY(expect(b.cq, wr_id, IBV_WC_SUCCESS, IBV_WC_BIND_MW, "IBV_WR_BIND_MW"));
  mw->rkey = rkey;
  return 0;
}

/* ibv_wr_bind_mw of a type 2 window. */
static int bind2_wr(struct ibv_mw *mw, uint32_t rkey, char *at, uint64_t wr_id) {
  const struct ibv_mw_bind_info info = {.mr = b.mr,
                                        .addr = (uintptr_t)at,
                                        .length = 256,
                                        .mw_access_flags = IBV_ACCESS_REMOTE_WRITE};
  ibv_wr_start(b.qpx);
  b.qpx->wr_id = wr_id;
  b.qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_bind_mw(b.qpx, mw, rkey, &info);
  const int err = ibv_wr_complete(b.qpx);
  CHECK(err == 0, "ibv_wr_bind_mw + ibv_wr_complete: %s", strerror(err));
  TRY(expect(b.cq, wr_id, IBV_WC_SUCCESS, IBV_WC_BIND_MW, "ibv_wr_bind_mw"));
  mw->rkey = rkey;  /* as in bind2_post */
  return 0;
}

/* One completion on B's extended CQ through ibv_start_poll. */
static int start_poll_one(struct ibv_cq_ex *cq) {
  struct ibv_poll_cq_attr attr = {0};
  for (long i = 0; i < 1000000; ++i) {
    const int err = ibv_start_poll(cq, &attr);
    if (err == 0) return 0;
    CHECK(err == ENOENT, "ibv_start_poll: %s", strerror(err));
  }
  CHECK(0, "no completion");
  return 1;
}

static int type2(void) {
  struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
  CHECK(mw, "ibv_alloc_mw(IBV_MW_TYPE_2): %s", strerror(errno));
  CHECK(mw->type == IBV_MW_TYPE_2, "ibv_mw type");
  char *at = b.buf + 2048;

  /* Refused at post: ibv_bind_mw is for type 1; a BIND_MW without a window. */
  struct ibv_mw_bind mb = {.wr_id = 1, .bind_info = {.mr = b.mr, .addr = (uintptr_t)at,
                                                     .length = 8}};
  CHECK(ibv_bind_mw(b.qp, mw, &mb) == EINVAL, "ibv_bind_mw of a type 2 window: want EINVAL");
  if (on_simulator) { /* rxe's provider dereferences the missing window and crashes */
    struct ibv_send_wr nowin = {.wr_id = 1, .opcode = IBV_WR_BIND_MW};
    struct ibv_send_wr *bad = NULL;
    CHECK(ibv_post_send(b.qp, &nowin, &bad) == EINVAL && bad == &nowin,
          "IBV_WR_BIND_MW without a window: want EINVAL");
  }

  /* 3. ibv_post_send: BIND_MW, WRITE, LOCAL_INV. */
  uint32_t key = ibv_inc_rkey(mw->rkey);
  TRY(bind2_post(mw, key, at, 20));
  TRY(write_through(key, at, 64, "through a type 2 window", IBV_WC_SUCCESS,
                    "WRITE through the type 2 window"));
  struct ibv_send_wr inv = {.wr_id = 21, .opcode = IBV_WR_LOCAL_INV,
                            .send_flags = IBV_SEND_SIGNALED, .invalidate_rkey = key};
  TRY(post(b.qp, &inv));
  TRY(expect(b.cq, 21, IBV_WC_SUCCESS, IBV_WC_LOCAL_INV, "IBV_WR_LOCAL_INV"));
  TRY(write_through(key, at, 64, "invalidated", IBV_WC_REM_ACCESS_ERR,
                    "WRITE through the locally invalidated type 2 window"));
  printf("3. type 2: IBV_WR_BIND_MW (key %#x), written through, IBV_WR_LOCAL_INV, "
         "REM_ACCESS_ERR after\n", key);

  /* 4. Invalidated by the peer: IBV_WR_SEND_WITH_INV, received through ibv_poll_cq. */
  key = ibv_inc_rkey(key);
  TRY(bind2_post(mw, key, at, 30));
  TRY(write_through(key, at, 64, "bound again", IBV_WC_SUCCESS,
                    "WRITE through the rebound type 2 window"));
  TRY(post_recv_b(31));
  strcpy(a.buf + 512, "invalidate, please");
  struct ibv_sge sge = {(uintptr_t)(a.buf + 512), 32, a.mr->lkey};
  struct ibv_send_wr sinv = {.wr_id = 32, .sg_list = &sge, .num_sge = 1,
                             .opcode = IBV_WR_SEND_WITH_INV, .send_flags = IBV_SEND_SIGNALED,
                             .invalidate_rkey = key};
  TRY(post(a.qp, &sinv));
  TRY(expect(a.cq, 32, IBV_WC_SUCCESS, IBV_WC_SEND, "IBV_WR_SEND_WITH_INV"));
  struct ibv_wc wc;
  TRY(wait_one(b.cq, &wc));
  CHECK(wc.wr_id == 31 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV &&
            wc.byte_len == 32,
        "receive of the SEND_WITH_INV: wr_id %llu %s opcode %d, %u bytes",
        (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status), wc.opcode, wc.byte_len);
  CHECK((wc.wc_flags & with_inv_flags()) && !(wc.wc_flags & IBV_WC_WITH_IMM),
        "receive of the SEND_WITH_INV: wc_flags %#x", wc.wc_flags);
  CHECK(wc.invalidated_rkey == key, "invalidated_rkey: want %#x, got %#x", key,
        wc.invalidated_rkey);
  CHECK(strcmp(b.buf + 6144, "invalidate, please") == 0, "received '%s'", b.buf + 6144);
  TRY(write_through(key, at, 64, "invalidated", IBV_WC_REM_ACCESS_ERR,
                    "WRITE through the remotely invalidated type 2 window"));
  printf("4. type 2: IBV_WR_SEND_WITH_INV (key %#x): IBV_WC_WITH_INV, invalidated_rkey, "
         "REM_ACCESS_ERR after\n", key);

  /* 5. The same with ibv_wr_bind_mw and ibv_wr_send_inv, polled with ibv_start_poll. */
  key = ibv_inc_rkey(key);
  TRY(bind2_wr(mw, key, at, 40));
  TRY(write_through(key, at, 64, "bound by ibv_wr_bind_mw", IBV_WC_SUCCESS,
                    "WRITE through the window ibv_wr_bind_mw bound"));
  TRY(post_recv_b(41));
  ibv_wr_start(a.qpx);
  a.qpx->wr_id = 42;
  a.qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send_inv(a.qpx, key);
  ibv_wr_set_sge(a.qpx, a.mr->lkey, (uintptr_t)(a.buf + 512), 16);
  int err = ibv_wr_complete(a.qpx);
  CHECK(err == 0, "ibv_wr_send_inv + ibv_wr_complete: %s", strerror(err));
  TRY(expect(a.cq, 42, IBV_WC_SUCCESS, IBV_WC_SEND, "ibv_wr_send_inv"));
  TRY(start_poll_one(b.cqx));
  const uint64_t got_id = b.cqx->wr_id;
  const enum ibv_wc_status got_status = b.cqx->status;
  const enum ibv_wc_opcode got_op = ibv_wc_read_opcode(b.cqx);
  const unsigned got_flags = ibv_wc_read_wc_flags(b.cqx);
  const uint32_t got_key = ibv_wc_read_invalidated_rkey(b.cqx);
  const uint32_t got_len = ibv_wc_read_byte_len(b.cqx);
  ibv_end_poll(b.cqx);
  CHECK(got_id == 41 && got_status == IBV_WC_SUCCESS && got_op == IBV_WC_RECV && got_len == 16,
        "ibv_start_poll: wr_id %llu %s opcode %d, %u bytes", (unsigned long long)got_id,
        ibv_wc_status_str(got_status), got_op, got_len);
  CHECK(got_flags & with_inv_flags(), "ibv_wc_read_wc_flags: %#x", got_flags);
  CHECK(got_key == key, "ibv_wc_read_invalidated_rkey: want %#x, got %#x", key, got_key);
  TRY(write_through(key, at, 64, "invalidated", IBV_WC_REM_ACCESS_ERR,
                    "WRITE through the window ibv_wr_send_inv invalidated"));
  printf("5. type 2: ibv_wr_bind_mw, ibv_wr_send_inv (key %#x), ibv_wc_read_invalidated_rkey, "
         "REM_ACCESS_ERR after\n", key);

  /* 6. ibv_wr_local_inv, polled with ibv_start_poll; then deallocation of a bound window. */
  key = ibv_inc_rkey(key);
  TRY(bind2_wr(mw, key, at, 50));
  ibv_wr_start(b.qpx);
  b.qpx->wr_id = 51;
  b.qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_local_inv(b.qpx, key);
  err = ibv_wr_complete(b.qpx);
  CHECK(err == 0, "ibv_wr_local_inv + ibv_wr_complete: %s", strerror(err));
  TRY(start_poll_one(b.cqx));
  CHECK(b.cqx->wr_id == 51 && b.cqx->status == IBV_WC_SUCCESS &&
            ibv_wc_read_opcode(b.cqx) == IBV_WC_LOCAL_INV,
        "ibv_wr_local_inv completion: wr_id %llu %s", (unsigned long long)b.cqx->wr_id,
        ibv_wc_status_str(b.cqx->status));
  ibv_end_poll(b.cqx);
  TRY(write_through(key, at, 64, "invalidated", IBV_WC_REM_ACCESS_ERR,
                    "WRITE through the window ibv_wr_local_inv invalidated"));

  key = ibv_inc_rkey(key);
  TRY(bind2_wr(mw, key, at, 60));
  TRY(write_through(key, at, 64, "bound before dealloc", IBV_WC_SUCCESS,
                    "WRITE through the window about to be deallocated"));
  CHECK(ibv_dealloc_mw(mw) == 0, "ibv_dealloc_mw of a bound type 2 window");
  TRY(write_through(key, at, 64, "deallocated", IBV_WC_REM_ACCESS_ERR,
                    "WRITE through the deallocated window"));
  printf("6. type 2: ibv_wr_local_inv, then ibv_dealloc_mw of a bound window: REM_ACCESS_ERR "
         "after each\n");
  return 0;
}

/* 7. What real verbs refuse: errnos at post, MW_BIND_ERR for a bind the device refuses. */
static int errors(void) {
  struct ibv_mw *w1 = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
  struct ibv_mw *w2 = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
  CHECK(w1 && w2, "ibv_alloc_mw: %s", strerror(errno));
  char *at = b.buf + 3072;
  struct ibv_send_wr wr = {.wr_id = 70, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED};
  wr.bind_mw.mw = w2;
  wr.bind_mw.rkey = ibv_inc_rkey(w2->rkey);
  wr.bind_mw.bind_info.addr = (uintptr_t)at;
  wr.bind_mw.bind_info.length = 64;
  wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
  struct ibv_send_wr *bad = NULL;
  int err;
  if (on_simulator) { /* rxe's provider dereferences the missing MR and crashes */
    err = ibv_post_send(b.qp, &wr, &bad);
    CHECK(err == EINVAL && bad == &wr,
          "IBV_WR_BIND_MW of a range without an MR: want EINVAL, got %d", err);
  }
  wr.bind_mw.bind_info.mr = b.mr;
  /* o10-36.2.2: a type 1 window is never zero-based (the provider refuses it; zero-based type 2
   * windows: zero_based.c). */
  struct ibv_mw_bind zero = {.wr_id = 70, .send_flags = IBV_SEND_SIGNALED,
                             .bind_info = {.mr = b.mr, .addr = (uintptr_t)at, .length = 64,
                                           .mw_access_flags = IBV_ACCESS_REMOTE_WRITE |
                                                              IBV_ACCESS_ZERO_BASED}};
  const uint32_t w1_key = w1->rkey;
  err = ibv_bind_mw(b.qp, w1, &zero);
  CHECK(err == EINVAL && w1->rkey == w1_key, "a zero-based type 1 window: want EINVAL, got %d",
        err);

  /* A QP created without IBV_QP_EX_WITH_BIND_MW cannot build one; a UD QP cannot bind. */
  struct ibv_qp_init_attr_ex init = {
      .send_cq = a.cq,
      .recv_cq = a.cq,
      .cap = {.max_send_wr = 2, .max_recv_wr = 2, .max_send_sge = 1, .max_recv_sge = 1},
      .qp_type = IBV_QPT_RC,
      .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
      .pd = pd,
      .send_ops_flags = IBV_QP_EX_WITH_SEND,
  };
  const struct ibv_mw_bind_info info = {.mr = b.mr, .addr = (uintptr_t)at, .length = 64,
                                        .mw_access_flags = IBV_ACCESS_REMOTE_WRITE};
  if (on_simulator) { /* rxe leaves the op unset and the call crashes */
    struct ibv_qp *plain = ibv_create_qp_ex(ctx, &init);
    CHECK(plain, "ibv_create_qp_ex: %s", strerror(errno));
    struct ibv_qp_ex *plainx = ibv_qp_to_qp_ex(plain);
    ibv_wr_start(plainx);
    ibv_wr_bind_mw(plainx, w2, ibv_inc_rkey(w2->rkey), &info);
    err = ibv_wr_complete(plainx);
    CHECK(err == EINVAL, "ibv_wr_bind_mw without IBV_QP_EX_WITH_BIND_MW: want EINVAL, got %d",
          err);
    CHECK(ibv_destroy_qp(plain) == 0, "ibv_destroy_qp");
  }
  struct ibv_qp_init_attr ud_init = {
      .send_cq = a.cq,
      .recv_cq = a.cq,
      .cap = {.max_send_wr = 2, .max_recv_wr = 2, .max_send_sge = 1, .max_recv_sge = 1},
      .qp_type = IBV_QPT_UD,
  };
  struct ibv_qp *ud = ibv_create_qp(pd, &ud_init);
  CHECK(ud, "ibv_create_qp(UD): %s", strerror(errno));
  struct ibv_mw_bind mb = {.wr_id = 71, .send_flags = IBV_SEND_SIGNALED, .bind_info = info};
  uint32_t old = w1->rkey;
  err = ibv_bind_mw(ud, w1, &mb);
  CHECK(err == EINVAL && w1->rkey == old, "ibv_bind_mw on a UD QP: want EINVAL, got %d", err);
  CHECK(ibv_destroy_qp(ud) == 0, "ibv_destroy_qp(UD)");

  /* An MR with a window bound cannot be deregistered (rxe: EINVAL). */
  mb.wr_id = 72;
  TRY(ibv_bind_mw(b.qp, w1, &mb));
  TRY(expect(b.cq, 72, IBV_WC_SUCCESS, IBV_WC_BIND_MW, "type 1 bind before ibv_dereg_mr"));
  err = ibv_dereg_mr(b.mr);
  CHECK(err != 0, "ibv_dereg_mr of an MR with a bound window succeeded");
  TRY(write_through(w1->rkey, at, 64, "still there", IBV_WC_SUCCESS,
                    "WRITE through the window after the refused ibv_dereg_mr"));
  mb.wr_id = 73;
  mb.bind_info.length = 0;
  TRY(ibv_bind_mw(b.qp, w1, &mb));
  TRY(expect(b.cq, 73, IBV_WC_SUCCESS, IBV_WC_BIND_MW, "type 1 unbind"));

  /* A's MR was registered without IBV_ACCESS_MW_BIND: the bind is posted, then fails. */
  mb.wr_id = 74;
  mb.bind_info.mr = a.mr;
  mb.bind_info.addr = (uintptr_t)a.buf;
  mb.bind_info.length = 64;
  old = w1->rkey;
  TRY(ibv_bind_mw(b.qp, w1, &mb));
  CHECK(w1->rkey == ibv_inc_rkey(old), "mw->rkey after posting a bind that will fail");
  TRY(expect(b.cq, 74, IBV_WC_MW_BIND_ERR, IBV_WC_BIND_MW,
             "bind to an MR without IBV_ACCESS_MW_BIND"));
  TRY(reconnect());

  /* A type 2 bind naming a key the window no longer has (mw->rkey not updated after its last
   * bind): the device refuses it, as rxe's kernel does. */
  struct ibv_mw *w3 = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
  CHECK(w3, "ibv_alloc_mw: %s", strerror(errno));
  const uint32_t first = w3->rkey;
  TRY(bind2_post(w3, ibv_inc_rkey(first), at, 75));
  struct ibv_send_wr inv = {.wr_id = 76, .opcode = IBV_WR_LOCAL_INV,
                            .send_flags = IBV_SEND_SIGNALED, .invalidate_rkey = w3->rkey};
  TRY(post(b.qp, &inv));
  TRY(expect(b.cq, 76, IBV_WC_SUCCESS, IBV_WC_LOCAL_INV, "IBV_WR_LOCAL_INV"));
  w3->rkey = first; /* the program forgot the key of the last bind */
  struct ibv_send_wr stale = bind2(w3, ibv_inc_rkey(ibv_inc_rkey(first)), at, 77);
  TRY(post(b.qp, &stale));
  TRY(expect(b.cq, 77, IBV_WC_MW_BIND_ERR, IBV_WC_BIND_MW, "IBV_WR_BIND_MW naming a stale key"));
  TRY(reconnect());
  CHECK(ibv_dealloc_mw(w1) == 0 && ibv_dealloc_mw(w2) == 0 && ibv_dealloc_mw(w3) == 0,
        "ibv_dealloc_mw");
  printf("7. errors: EINVAL (a zero-based type 1 window too), ibv_dereg_mr refused while bound, "
         "IBV_WC_MW_BIND_ERR (an MR without MW_BIND, a stale window key)\n");
  return 0;
}

static int run(const char *want) {
  int n = 0;
  struct ibv_device **list = ibv_get_device_list(&n);
  CHECK(list && n > 0, "no RDMA device (is LD_LIBRARY_PATH set to the drop-in?)");
  struct ibv_device *dev = NULL;
  for (int i = 0; i < n; ++i) {
    if (strcmp(ibv_get_device_name(list[i]), want) == 0) dev = list[i];
  }
  CHECK(dev, "no device %s", want);
  ctx = ibv_open_device(dev);
  CHECK(ctx, "ibv_open_device: %s", strerror(errno));
  ibv_free_device_list(list);
  CHECK(ibv_query_gid(ctx, 1, GID_INDEX, &gid) == 0, "ibv_query_gid");
  pd = ibv_alloc_pd(ctx);
  CHECK(pd, "ibv_alloc_pd: %s", strerror(errno));
  TRY(check_device());
  TRY(create_side(&a, 0, IBV_ACCESS_LOCAL_WRITE));
  TRY(create_side(&b, 1, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND));
  TRY(reconnect());
  TRY(type1());
  TRY(type2());
  TRY(errors());

  CHECK(ibv_destroy_qp(a.qp) == 0 && ibv_destroy_qp(b.qp) == 0, "ibv_destroy_qp");
  CHECK(ibv_dereg_mr(a.mr) == 0 && ibv_dereg_mr(b.mr) == 0, "ibv_dereg_mr");
  CHECK(ibv_destroy_cq(a.cq) == 0 && ibv_destroy_cq(b.cq) == 0, "ibv_destroy_cq");
  CHECK(ibv_dealloc_pd(pd) == 0, "ibv_dealloc_pd");
  CHECK(ibv_close_device(ctx) == 0, "ibv_close_device");
  free(a.buf);
  free(b.buf);
  return 0;
}

int main(int argc, char **argv) {
  const char *want = "sim0";
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
      want = argv[++i];
    } else {
      fprintf(stderr, "usage: %s [--device NAME]\n", argv[0]);
      return 2;
    }
  }
  if (run(want) != 0) return 1;
  printf("PASS\n");
  return 0;
}
