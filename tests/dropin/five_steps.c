/* The five steps of a verbs program, in plain C against Debian's <infiniband/verbs.h> and linked
 * with -libverbs: run with LD_LIBRARY_PATH pointing at the drop-in, it runs on the simulator.
 * Two RC QPs on one device talk to each other: a SEND into a posted receive, then an RDMA WRITE.
 *
 *   five_steps [--device sim0] [--faults]
 *
 * --faults: runs under the fault plan below (it sets VERBSIM_FAULTS before the first verb: the
 * drop-in creates its world then) and checks that each verb fails as the plan asks, with
 * libibverbs' error convention for that verb, then retries and finishes the flow:
 *   reg_mr nth=2 errno=ENOMEM      the second ibv_reg_mr returns NULL with errno ENOMEM
 *   post_send nth=1 errno=ENOMEM   the first ibv_post_send returns ENOMEM, *bad_wr = the WR
 *   poll_cq nth=1 errno=EAGAIN     the first ibv_poll_cq returns -EAGAIN
 * Exit status 0 when every check passed. */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SIZE 4096
#define FAULT_PLAN "reg_mr nth=2 errno=ENOMEM; post_send nth=1 errno=ENOMEM; poll_cq nth=1 errno=EAGAIN"
#define GID_INDEX 1 /* RoCE v2 on rxe and on the simulator */

static int failures;

#define CHECK(cond, ...)                              \
  do {                                                \
    if (!(cond)) {                                    \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                   \
      fprintf(stderr, "\n");                          \
      ++failures;                                     \
      return -1;                                      \
    }                                                 \
  } while (0)

struct side {
  struct ibv_cq *cq;
  struct ibv_mr *mr;
  struct ibv_qp *qp;
  char *buf;
};

static int faults;
static int poll_errors;

/* Polls until one completion arrives; returns its status. */
static int wait_one(struct ibv_cq *cq, struct ibv_wc *wc) {
  for (long i = 0; i < 1000000; ++i) {
    const int n = ibv_poll_cq(cq, 1, wc);
    if (n == 1) return 0;
    if (n < 0) {
      /* ibv_poll_cq reports an error as a negative number. */
      CHECK(faults && n == -EAGAIN && poll_errors == 0, "ibv_poll_cq returned %d", n);
      ++poll_errors;
      printf("ibv_poll_cq failed with -EAGAIN as the plan asks\n");
    }
  }
  CHECK(0, "no completion");
  return -1;
}

static int create_side(struct ibv_context *ctx, struct ibv_pd *pd, struct side *s, int nth_mr) {
  s->cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
  CHECK(s->cq, "ibv_create_cq: %s", strerror(errno));
  s->buf = calloc(1, SIZE);
  int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  errno = 0;
  s->mr = ibv_reg_mr(pd, s->buf, SIZE, access);
  if (faults && nth_mr == 2) {
    CHECK(!s->mr && errno == ENOMEM, "the second ibv_reg_mr: want NULL/ENOMEM, got %p/%d",
          (void *)s->mr, errno);
    printf("ibv_reg_mr failed with ENOMEM as the plan asks\n");
    s->mr = ibv_reg_mr(pd, s->buf, SIZE, access);
  }
  CHECK(s->mr, "ibv_reg_mr: %s", strerror(errno));
  struct ibv_qp_init_attr init = {
      .send_cq = s->cq,
      .recv_cq = s->cq,
      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1},
      .qp_type = IBV_QPT_RC,
  };
  s->qp = ibv_create_qp(pd, &init);
  CHECK(s->qp, "ibv_create_qp: %s", strerror(errno));
  CHECK(s->qp->state == IBV_QPS_RESET, "new QP not in RESET");
  return 0;
}

static int connect_qp(struct ibv_qp *qp, uint32_t remote_qpn, const union ibv_gid *gid) {
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT,
                          .pkey_index = 0,
                          .port_num = 1,
                          .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
  int err = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  CHECK(err == 0, "modify to INIT: %s", strerror(err));
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = remote_qpn;
  a.rq_psn = 0;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = *gid;
  a.ah_attr.grh.sgid_index = GID_INDEX;
  a.ah_attr.grh.hop_limit = 1;
  a.ah_attr.port_num = 1;
  err = ibv_modify_qp(qp, &a,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  CHECK(err == 0, "modify to RTR: %s", strerror(err));
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = 0;
  a.max_rd_atomic = 1;
  err = ibv_modify_qp(qp, &a,
                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                          IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
  CHECK(err == 0, "modify to RTS: %s", strerror(err));
  CHECK(qp->state == IBV_QPS_RTS, "qp->state not updated");
  return 0;
}

static int post_send(struct ibv_qp *qp, struct ibv_send_wr *wr) {
  struct ibv_send_wr *bad = NULL;
  int err = ibv_post_send(qp, wr, &bad);
  static int posts;
  if (faults && ++posts == 1) {
    /* ibv_post_send returns the errno and points bad_wr at the WR that failed. */
    CHECK(err == ENOMEM && bad == wr, "the first ibv_post_send: want ENOMEM, got %d", err);
    printf("ibv_post_send failed with ENOMEM as the plan asks\n");
    err = ibv_post_send(qp, wr, &bad);
  }
  CHECK(err == 0, "ibv_post_send: %s", strerror(err));
  return 0;
}

static int run(const char *want) {
  /* 1. init */
  int n = 0;
  struct ibv_device **list = ibv_get_device_list(&n);
  CHECK(list && n > 0, "no RDMA device (is LD_LIBRARY_PATH set to the drop-in?)");
  struct ibv_device *dev = NULL;
  for (int i = 0; i < n; ++i) {
    if (strcmp(ibv_get_device_name(list[i]), want) == 0) dev = list[i];
  }
  CHECK(dev, "no device %s", want);
  struct ibv_context *ctx = ibv_open_device(dev);
  CHECK(ctx, "ibv_open_device: %s", strerror(errno));
  ibv_free_device_list(list);
  struct ibv_port_attr port;
  CHECK(ibv_query_port(ctx, 1, &port) == 0, "ibv_query_port");
  CHECK(port.state == IBV_PORT_ACTIVE, "port 1 not active");
  union ibv_gid gid;
  CHECK(ibv_query_gid(ctx, 1, GID_INDEX, &gid) == 0, "ibv_query_gid");
  printf("1. init: %s, port 1 active, GID %d ends in %u.%u.%u.%u\n", want, GID_INDEX, gid.raw[12],
         gid.raw[13], gid.raw[14], gid.raw[15]);

  /* 2. resources */
  struct ibv_pd *pd = ibv_alloc_pd(ctx);
  CHECK(pd, "ibv_alloc_pd: %s", strerror(errno));
  struct side a, b;
  if (create_side(ctx, pd, &a, 1) || create_side(ctx, pd, &b, 2)) return -1;
  printf("2. resources: QPs %u and %u\n", a.qp->qp_num, b.qp->qp_num);

  /* 3. connect */
  if (connect_qp(a.qp, b.qp->qp_num, &gid) || connect_qp(b.qp, a.qp->qp_num, &gid)) return -1;
  printf("3. connect: both QPs in RTS\n");

  /* 4. transfer: SEND into a posted receive, then RDMA WRITE */
  struct ibv_sge rsge = {(uintptr_t)b.buf, SIZE, b.mr->lkey};
  struct ibv_recv_wr rwr = {.wr_id = 2, .sg_list = &rsge, .num_sge = 1};
  struct ibv_recv_wr *rbad = NULL;
  CHECK(ibv_post_recv(b.qp, &rwr, &rbad) == 0, "ibv_post_recv");
  strcpy(a.buf, "hello over SEND");
  struct ibv_sge ssge = {(uintptr_t)a.buf, 64, a.mr->lkey};
  struct ibv_send_wr swr = {.wr_id = 1,
                            .sg_list = &ssge,
                            .num_sge = 1,
                            .opcode = IBV_WR_SEND_WITH_IMM,
                            .send_flags = IBV_SEND_SIGNALED,
                            .imm_data = htonl(0x1234)};
  if (post_send(a.qp, &swr)) return -1;
  struct ibv_wc wc;
  if (wait_one(a.cq, &wc)) return -1;
  CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 1 && wc.opcode == IBV_WC_SEND,
        "send completion: %s", ibv_wc_status_str(wc.status));
  if (wait_one(b.cq, &wc)) return -1;
  CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 2 && wc.opcode == IBV_WC_RECV && wc.byte_len == 64,
        "receive completion: %s, %u bytes", ibv_wc_status_str(wc.status), wc.byte_len);
  CHECK((wc.wc_flags & IBV_WC_WITH_IMM) && ntohl(wc.imm_data) == 0x1234, "immediate data");
  CHECK(strcmp(b.buf, "hello over SEND") == 0, "received '%s'", b.buf);

  strcpy(a.buf + 128, "hello over RDMA WRITE");
  struct ibv_sge wsge = {(uintptr_t)(a.buf + 128), 64, a.mr->lkey};
  struct ibv_send_wr wwr = {.wr_id = 3,
                            .sg_list = &wsge,
                            .num_sge = 1,
                            .opcode = IBV_WR_RDMA_WRITE,
                            .send_flags = IBV_SEND_SIGNALED,
                            .wr.rdma = {.remote_addr = (uintptr_t)(b.buf + 1024), .rkey = b.mr->rkey}};
  if (post_send(a.qp, &wwr)) return -1;
  if (wait_one(a.cq, &wc)) return -1;
  CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 3 && wc.opcode == IBV_WC_RDMA_WRITE,
        "write completion: %s", ibv_wc_status_str(wc.status));
  CHECK(strcmp(b.buf + 1024, "hello over RDMA WRITE") == 0, "written '%s'", b.buf + 1024);
  printf("4. transfer: SEND (with immediate) and RDMA WRITE arrived\n");

  /* 5. clean up, in reverse order */
  CHECK(ibv_dealloc_pd(pd) == EBUSY, "ibv_dealloc_pd of a PD in use must be EBUSY");
  CHECK(ibv_destroy_qp(a.qp) == 0 && ibv_destroy_qp(b.qp) == 0, "ibv_destroy_qp");
  CHECK(ibv_dereg_mr(a.mr) == 0 && ibv_dereg_mr(b.mr) == 0, "ibv_dereg_mr");
  CHECK(ibv_destroy_cq(a.cq) == 0 && ibv_destroy_cq(b.cq) == 0, "ibv_destroy_cq");
  CHECK(ibv_dealloc_pd(pd) == 0, "ibv_dealloc_pd");
  CHECK(ibv_close_device(ctx) == 0, "ibv_close_device");
  free(a.buf);
  free(b.buf);
  printf("5. clean up: done\n");
  if (faults) {
    CHECK(poll_errors == 1, "ibv_poll_cq failed %d times, want once", poll_errors);
  }
  return 0;
}

int main(int argc, char **argv) {
  const char *want = "sim0";
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--faults") == 0) {
      faults = 1;
    } else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
      want = argv[++i];
    } else {
      fprintf(stderr, "usage: %s [--device NAME] [--faults]\n", argv[0]);
      return 2;
    }
  }
  if (faults && setenv("VERBSIM_FAULTS", FAULT_PLAN, 1) != 0) return 1;
  if (run(want) != 0 || failures != 0) return 1;
  printf("PASS\n");
  return 0;
}
