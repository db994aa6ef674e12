/* Completion channels and async events through the drop-in have real file descriptors: poll()
 * and epoll work on them, O_NONBLOCK gives EAGAIN, and the simulated world moves on its own
 * while the program waits outside the library. C against Debian's verbs.h, linked -libverbs.
 *
 *   1. A completion event: arm, post a SEND, poll() the channel fd, ibv_get_cq_event, ack.
 *   2. O_NONBLOCK on the channel fd: ibv_get_cq_event fails with EAGAIN when nothing is there.
 *   3. An event that comes later: a SEND to a QP with no receive posted and rnr_retry=1 fails
 *      with RNR_RETRY_EXC_ERR after two 655 ms RNR waits (virtual time); the program sleeps in
 *      epoll_wait on the channel fd meanwhile, and the event arrives.
 *   4. Async events: a CQ overrun on the rxe profile raises IBV_EVENT_CQ_ERR; epoll_wait on
 *      the non-blocking async fd, then ibv_get_async_event / ibv_ack_async_event.
 * Run with VERBSIM_PROFILE=rxe. Exit status 0 when every check passed. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "check.h"
#include "rc.h"

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static union ibv_gid gid;
static char buf[8192];
static struct ibv_mr *mr;

static void post_one_send(struct ibv_qp *qp, uint64_t id) {
  struct ibv_sge s = {(uintptr_t)buf, 16, mr->lkey};
  struct ibv_send_wr wr = {.wr_id = id, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
                           .send_flags = IBV_SEND_SIGNALED};
  struct ibv_send_wr *bad;
  CHECK(ibv_post_send(qp, &wr, &bad) == 0, "ibv_post_send");
}

static void post_one_recv(struct ibv_qp *qp, uint64_t id) {
  struct ibv_sge s = {(uintptr_t)(buf + 4096), 64, mr->lkey};
  struct ibv_recv_wr wr = {.wr_id = id, .sg_list = &s, .num_sge = 1};
  struct ibv_recv_wr *bad;
  CHECK(ibv_post_recv(qp, &wr, &bad) == 0, "ibv_post_recv");
}

static void take_cq_event(struct ibv_comp_channel *ch, struct ibv_cq *want, void *want_ctx) {
  struct ibv_cq *cq = NULL;
  void *cq_ctx = NULL;
  CHECK(ibv_get_cq_event(ch, &cq, &cq_ctx) == 0, "ibv_get_cq_event: %s", strerror(errno));
  CHECK(cq == want && cq_ctx == want_ctx, "the event names another CQ");
  ibv_ack_cq_events(cq, 1);
}

int main(void) {
  ctx = first_device();
  CHECK(ibv_query_gid(ctx, 1, 1, &gid) == 0, "ibv_query_gid");
  pd = ibv_alloc_pd(ctx);
  mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  CHECK(pd && mr, "PD and MR");

  /* 1. poll() on the channel fd */
  struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
  CHECK(ch && ch->fd >= 0, "ibv_create_comp_channel");
  int tag = 7;
  struct ibv_cq *cq = ibv_create_cq(ctx, 16, &tag, ch, 0);
  struct ibv_cq *cq_b = ibv_create_cq(ctx, 16, NULL, NULL, 0);
  CHECK(cq && cq_b, "ibv_create_cq");
  struct ibv_qp *a = rc_qp(pd, cq, NULL), *b = rc_qp(pd, cq_b, NULL);
  rc_connect(a, b->qp_num, &gid, IBV_ACCESS_REMOTE_WRITE, 7, 12);
  rc_connect(b, a->qp_num, &gid, IBV_ACCESS_REMOTE_WRITE, 7, 12);
  struct pollfd p = {ch->fd, POLLIN, 0};
  CHECK(poll(&p, 1, 0) == 0, "the channel fd is readable before anything happened");
  CHECK(ibv_req_notify_cq(cq, 0) == 0, "ibv_req_notify_cq");
  post_one_recv(b, 1);
  post_one_send(a, 2);
  CHECK(poll(&p, 1, 5000) == 1 && (p.revents & POLLIN), "poll on the channel fd timed out");
  take_cq_event(ch, cq, &tag);
  struct ibv_wc wc;
  CHECK(ibv_poll_cq(cq, 1, &wc) == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 2, "send wc");
  CHECK(ibv_poll_cq(cq_b, 1, &wc) == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 1, "recv wc");
  printf("1. poll() on the completion channel fd, ibv_get_cq_event, ibv_ack_cq_events\n");

  /* 2. O_NONBLOCK */
  CHECK(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK) == 0, "fcntl");
  struct ibv_cq *ev_cq;
  void *ev_ctx;
  errno = 0;
  CHECK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == -1 && errno == EAGAIN,
        "non-blocking ibv_get_cq_event with nothing pending: want -1/EAGAIN, got errno %d", errno);
  CHECK(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) & ~O_NONBLOCK) == 0, "fcntl");
  printf("2. O_NONBLOCK: ibv_get_cq_event fails with EAGAIN\n");

  /* 3. an event 1.3 s of virtual time later, waited for in epoll_wait */
  struct ibv_qp *c = rc_qp(pd, cq, NULL), *d = rc_qp(pd, cq_b, NULL);
  rc_connect(c, d->qp_num, &gid, IBV_ACCESS_REMOTE_WRITE, 1, 0);  /* rnr_retry 1 */
  rc_connect(d, c->qp_num, &gid, IBV_ACCESS_REMOTE_WRITE, 1, 0);  /* min_rnr_timer 0: 655.36 ms */
  CHECK(ibv_req_notify_cq(cq, 0) == 0, "ibv_req_notify_cq");
  post_one_send(c, 3);  /* d has no receive posted */
  int ep = epoll_create1(0);
  struct epoll_event ev = {.events = EPOLLIN, .data.u32 = 1};
  CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, ch->fd, &ev) == 0, "epoll_ctl");
  CHECK(epoll_wait(ep, &ev, 1, 10000) == 1, "epoll_wait on the channel fd timed out");
  take_cq_event(ch, cq, &tag);
  CHECK(ibv_poll_cq(cq, 1, &wc) == 1 && wc.wr_id == 3 && wc.status == IBV_WC_RNR_RETRY_EXC_ERR,
        "want RNR_RETRY_EXC_ERR, got %s", ibv_wc_status_str(wc.status));
  printf("3. epoll_wait on the channel fd while the world ran: %s\n", ibv_wc_status_str(wc.status));

  /* 4. async events: overrun a 1-entry CQ (rxe: one CQ_ERR per completion dropped) */
  struct ibv_cq *small = ibv_create_cq(ctx, 1, NULL, NULL, 0);
  CHECK(small && small->cqe == 1, "ibv_create_cq(1)");
  struct ibv_qp *e = rc_qp(pd, small, NULL), *f = rc_qp(pd, cq_b, NULL);
  rc_connect(e, f->qp_num, &gid, IBV_ACCESS_REMOTE_WRITE, 7, 12);
  rc_connect(f, e->qp_num, &gid, IBV_ACCESS_REMOTE_WRITE, 7, 12);
  for (int i = 0; i < 3; ++i) post_one_recv(f, 10 + (uint64_t)i);
  for (int i = 0; i < 3; ++i) post_one_send(e, 20 + (uint64_t)i);
  CHECK(fcntl(ctx->async_fd, F_SETFL, fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK) == 0, "fcntl");
  ev.data.u32 = 2;
  CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, ctx->async_fd, &ev) == 0, "epoll_ctl async");
  int got = 0;
  while (epoll_wait(ep, &ev, 1, got == 0 ? 10000 : 200) == 1) {
    struct ibv_async_event ae;
    if (ibv_get_async_event(ctx, &ae) != 0) {
      CHECK(errno == EAGAIN, "ibv_get_async_event: %s", strerror(errno));
      break;
    }
    CHECK(ae.event_type == IBV_EVENT_CQ_ERR && ae.element.cq == small, "want CQ_ERR on the small CQ, got %s",
          ibv_event_type_str(ae.event_type));
    ibv_ack_async_event(&ae);
    ++got;
  }
  CHECK(got == 2, "want 2 CQ_ERR events (3 completions into a CQ of 1), got %d", got);
  CHECK(small->async_events_completed == 2, "ibv_ack_async_event did not count");
  printf("4. epoll on the async fd: %d CQ_ERR events\n", got);

  while (ibv_poll_cq(small, 1, &wc) == 1) {}
  while (ibv_poll_cq(cq, 1, &wc) == 1) {}
  while (ibv_poll_cq(cq_b, 1, &wc) == 1) {}
  CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0 && ibv_destroy_qp(c) == 0 &&
            ibv_destroy_qp(d) == 0 && ibv_destroy_qp(e) == 0 && ibv_destroy_qp(f) == 0,
        "ibv_destroy_qp");
  CHECK(ibv_destroy_comp_channel(ch) == EBUSY, "destroying a channel with a CQ must be EBUSY");
  CHECK(ibv_destroy_cq(cq) == 0 && ibv_destroy_cq(cq_b) == 0 && ibv_destroy_cq(small) == 0,
        "ibv_destroy_cq");
  CHECK(ibv_destroy_comp_channel(ch) == 0, "ibv_destroy_comp_channel");
  CHECK(ibv_dereg_mr(mr) == 0 && ibv_dealloc_pd(pd) == 0 && ibv_close_device(ctx) == 0, "teardown");
  printf("PASS\n");
  return 0;
}
