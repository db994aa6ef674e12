/* Threads sharing the libibverbs drop-in, as a multithreaded verbs server does: two threads
 * posting SENDs on one QP and a third on its own QP; a poller busy-polling one CQ shared by two
 * QPs; a thread blocked in ibv_get_cq_event on a second CQ, re-arming and acknowledging; and a
 * thread creating and destroying PDs, MRs, CQs and QPs the whole time. Every SEND completes
 * successfully exactly once and every message arrives exactly once. Under ThreadSanitizer
 * (the TSan stage of scripts/test.sh) it must give no report. Exit status 0 and "PASS" when
 * every check passed. */
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "rc.h"

enum { kPerPoster = 200, kPosters = 3, kMsg = 32 };

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_mr *mr;
static char buf[kPosters * kPerPoster * kMsg * 2];
/* a1 and a2 send to b1 and b2. a1 and a2 share send_cq (polled by the poller thread); b1 and
 * b2 share recv_cq, whose completions the event thread waits for. */
static struct ibv_cq *send_cq, *recv_cq;
static struct ibv_comp_channel *channel;
static struct ibv_qp *a1, *a2, *b1, *b2;
static atomic_int sends_done, recvs_done, churn_rounds;
static atomic_int seen[kPosters * kPerPoster];
static atomic_bool stop_churn;

struct poster {
  struct ibv_qp *qp;
  int first; /* wr_ids first .. first + kPerPoster - 1 */
};

static void *post_sends(void *arg) {
  const struct poster *p = arg;
  for (int i = 0; i < kPerPoster; ++i) {
    const int id = p->first + i;
    struct ibv_sge sge = {.addr = (uintptr_t)(buf + (size_t)id * kMsg), .length = kMsg,
                          .lkey = mr->lkey};
    memcpy(buf + (size_t)id * kMsg, &id, sizeof id);
    struct ibv_send_wr wr = {.wr_id = (uint64_t)id, .sg_list = &sge, .num_sge = 1,
                             .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED};
    struct ibv_send_wr *bad = NULL;
    int rc;
    while ((rc = ibv_post_send(p->qp, &wr, &bad)) == ENOMEM) sched_yield(); /* queue full */
    CHECK(rc == 0, "ibv_post_send: %s", strerror(rc));
  }
  return NULL;
}

static void *poll_sends(void *arg) {
  (void)arg;
  struct ibv_wc wc[8];
  while (atomic_load(&sends_done) < kPosters * kPerPoster) {
    const int n = ibv_poll_cq(send_cq, 8, wc);
    CHECK(n >= 0, "ibv_poll_cq");
    for (int i = 0; i < n; ++i) {
      CHECK(wc[i].status == IBV_WC_SUCCESS && wc[i].opcode == IBV_WC_SEND,
            "send %llu: %s", (unsigned long long)wc[i].wr_id, ibv_wc_status_str(wc[i].status));
      atomic_fetch_add(&sends_done, 1);
    }
    if (n == 0) sched_yield();
  }
  return NULL;
}

static void post_recv(struct ibv_qp *qp, int slot) {
  char *at = buf + sizeof buf / 2 + (size_t)slot * kMsg;
  struct ibv_sge sge = {.addr = (uintptr_t)at, .length = kMsg, .lkey = mr->lkey};
  struct ibv_recv_wr wr = {.wr_id = (uint64_t)slot, .sg_list = &sge, .num_sge = 1};
  struct ibv_recv_wr *bad = NULL;
  CHECK(ibv_post_recv(qp, &wr, &bad) == 0, "ibv_post_recv");
}

/* Blocked in ibv_get_cq_event until receives complete; drains, re-arms, acknowledges. */
static void *wait_receives(void *arg) {
  (void)arg;
  struct ibv_wc wc[8];
  while (atomic_load(&recvs_done) < kPosters * kPerPoster) {
    struct ibv_cq *cq = NULL;
    void *cq_ctx = NULL;
    CHECK(ibv_get_cq_event(channel, &cq, &cq_ctx) == 0, "ibv_get_cq_event: %s", strerror(errno));
    CHECK(cq == recv_cq, "event for another CQ");
    ibv_ack_cq_events(cq, 1);
    CHECK(ibv_req_notify_cq(cq, 0) == 0, "ibv_req_notify_cq");
    int n;
    while ((n = ibv_poll_cq(cq, 8, wc)) > 0) {
      for (int i = 0; i < n; ++i) {
        CHECK(wc[i].status == IBV_WC_SUCCESS && wc[i].byte_len == kMsg, "receive: %s",
              ibv_wc_status_str(wc[i].status));
        int id;
        memcpy(&id, buf + sizeof buf / 2 + wc[i].wr_id * kMsg, sizeof id);
        CHECK(id >= 0 && id < kPosters * kPerPoster, "message %d", id);
        CHECK(atomic_fetch_add(&seen[id], 1) == 0, "message %d arrived twice", id);
        atomic_fetch_add(&recvs_done, 1);
      }
    }
    CHECK(n == 0, "ibv_poll_cq");
  }
  return NULL;
}

/* Resources come and go beside the traffic, on the same context and PD. */
static void *churn(void *arg) {
  (void)arg;
  static char mine[4096];
  while (!atomic_load(&stop_churn)) {
    struct ibv_pd *p = ibv_alloc_pd(ctx);
    CHECK(p, "ibv_alloc_pd");
    struct ibv_mr *m = ibv_reg_mr(p, mine, sizeof mine, IBV_ACCESS_LOCAL_WRITE);
    CHECK(m, "ibv_reg_mr");
    struct ibv_cq *c = ibv_create_cq(ctx, 8, NULL, NULL, 0);
    CHECK(c, "ibv_create_cq");
    struct ibv_qp *q = rc_qp(p, c, NULL);
    CHECK(ibv_destroy_qp(q) == 0, "ibv_destroy_qp");
    CHECK(ibv_destroy_cq(c) == 0, "ibv_destroy_cq");
    CHECK(ibv_dereg_mr(m) == 0, "ibv_dereg_mr");
    CHECK(ibv_dealloc_pd(p) == 0, "ibv_dealloc_pd");
    atomic_fetch_add(&churn_rounds, 1);
  }
  return NULL;
}

static struct ibv_qp *make_qp(struct ibv_cq *scq, struct ibv_cq *rcq) {
  struct ibv_qp_init_attr init = {
      .send_cq = scq,
      .recv_cq = rcq,
      .cap = {.max_send_wr = 16, .max_recv_wr = 2 * kPerPoster + 1, .max_send_sge = 1,
              .max_recv_sge = 1},
      .qp_type = IBV_QPT_RC,
  };
  struct ibv_qp *qp = ibv_create_qp(pd, &init);
  CHECK(qp, "ibv_create_qp: %s", strerror(errno));
  return qp;
}

int main(void) {
  ctx = first_device();
  pd = ibv_alloc_pd(ctx);
  CHECK(pd, "ibv_alloc_pd");
  mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
  CHECK(mr, "ibv_reg_mr");
  channel = ibv_create_comp_channel(ctx);
  CHECK(channel, "ibv_create_comp_channel");
  send_cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
  recv_cq = ibv_create_cq(ctx, kPosters * kPerPoster + 8, NULL, channel, 0);
  CHECK(send_cq && recv_cq, "ibv_create_cq");
  a1 = make_qp(send_cq, send_cq);
  a2 = make_qp(send_cq, send_cq);
  b1 = make_qp(send_cq, recv_cq);
  b2 = make_qp(send_cq, recv_cq);
  union ibv_gid gid;
  CHECK(ibv_query_gid(ctx, 1, 1, &gid) == 0, "ibv_query_gid");
  rc_connect(a1, b1->qp_num, &gid, 0, 7, 1);
  rc_connect(b1, a1->qp_num, &gid, 0, 7, 1);
  rc_connect(a2, b2->qp_num, &gid, 0, 7, 1);
  rc_connect(b2, a2->qp_num, &gid, 0, 7, 1);
  int slot = 0;
  for (int i = 0; i < 2 * kPerPoster; ++i) post_recv(b1, slot++);
  for (int i = 0; i < kPerPoster; ++i) post_recv(b2, slot++);
  CHECK(ibv_req_notify_cq(recv_cq, 0) == 0, "ibv_req_notify_cq");

  struct poster posters[kPosters] = {{a1, 0}, {a1, kPerPoster}, {a2, 2 * kPerPoster}};
  pthread_t post_threads[kPosters], poller, waiter, churner;
  CHECK(pthread_create(&waiter, NULL, wait_receives, NULL) == 0, "pthread_create");
  CHECK(pthread_create(&poller, NULL, poll_sends, NULL) == 0, "pthread_create");
  CHECK(pthread_create(&churner, NULL, churn, NULL) == 0, "pthread_create");
  for (int i = 0; i < kPosters; ++i) {
    CHECK(pthread_create(&post_threads[i], NULL, post_sends, &posters[i]) == 0, "pthread_create");
  }
  for (int i = 0; i < kPosters; ++i) pthread_join(post_threads[i], NULL);
  pthread_join(poller, NULL);
  pthread_join(waiter, NULL);
  atomic_store(&stop_churn, true);
  pthread_join(churner, NULL);

  CHECK(atomic_load(&sends_done) == kPosters * kPerPoster, "sends %d", atomic_load(&sends_done));
  CHECK(atomic_load(&recvs_done) == kPosters * kPerPoster, "receives %d", atomic_load(&recvs_done));
  for (int i = 0; i < kPosters * kPerPoster; ++i) CHECK(atomic_load(&seen[i]) == 1, "message %d", i);
  CHECK(atomic_load(&churn_rounds) > 0, "the churn thread never finished a round");
  ibv_destroy_qp(a1);
  ibv_destroy_qp(a2);
  ibv_destroy_qp(b1);
  ibv_destroy_qp(b2);
  CHECK(ibv_destroy_cq(send_cq) == 0, "ibv_destroy_cq");
  CHECK(ibv_destroy_cq(recv_cq) == 0, "ibv_destroy_cq");
  CHECK(ibv_destroy_comp_channel(channel) == 0, "ibv_destroy_comp_channel");
  CHECK(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
  CHECK(ibv_dealloc_pd(pd) == 0, "ibv_dealloc_pd");
  CHECK(ibv_close_device(ctx) == 0, "ibv_close_device");
  printf("PASS threads: %d sends by %d threads, %d receives by one waiting thread, %d churn rounds\n",
         kPosters * kPerPoster, kPosters, atomic_load(&recvs_done), atomic_load(&churn_rounds));
  return 0;
}
