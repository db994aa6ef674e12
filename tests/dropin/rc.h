/* The first device, and RC QPs in loopback on its port 1 through GID index 1 (RoCE v2), for
 * the C tests that need a connected pair (events.c, srq.c). Failures go through check.h's
 * CHECK. */
#ifndef VERBSIM_DROPIN_RC_H
#define VERBSIM_DROPIN_RC_H

#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <string.h>

#include "check.h"

/* The first device of the list, opened. */
static inline struct ibv_context *first_device(void) {
  int n = 0;
  struct ibv_device **list = ibv_get_device_list(&n);
  CHECK(list && n > 0, "no device (LD_LIBRARY_PATH at the drop-in?)");
  struct ibv_context *ctx = ibv_open_device(list[0]);
  CHECK(ctx, "ibv_open_device");
  ibv_free_device_list(list);
  return ctx;
}

/* An RC QP on `cq` for both directions, its receives from `srq` if not NULL. */
static inline struct ibv_qp *rc_qp(struct ibv_pd *pd, struct ibv_cq *cq, struct ibv_srq *srq) {
  struct ibv_qp_init_attr init = {
      .send_cq = cq,
      .recv_cq = cq,
      .srq = srq,
      .cap = {.max_send_wr = 16, .max_recv_wr = srq ? 0 : 16, .max_send_sge = 1,
              .max_recv_sge = 1},
      .qp_type = IBV_QPT_RC,
  };
  struct ibv_qp *qp = ibv_create_qp(pd, &init);
  CHECK(qp, "ibv_create_qp: %s", strerror(errno));
  return qp;
}

/* `qp` through INIT and RTR to RTS, talking to QP `remote` at `gid`. */
static inline void rc_connect(struct ibv_qp *qp, uint32_t remote, const union ibv_gid *gid,
                              unsigned access, uint8_t rnr_retry, uint8_t rnr_timer) {
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = access};
  CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0,
        "INIT");
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = remote;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = rnr_timer;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = *gid;
  a.ah_attr.grh.sgid_index = 1;
  a.ah_attr.port_num = 1;
  CHECK(ibv_modify_qp(qp, &a,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == 0,
        "RTR");
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = rnr_retry;
  a.max_rd_atomic = 1;
  CHECK(ibv_modify_qp(qp, &a,
                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                          IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) == 0,
        "RTS");
}

#endif
