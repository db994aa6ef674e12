/* rdma_cm from C: librdmacm's API as rping, rdma_server/rdma_client and udaddy use it, against
 * the drop-in librdmacm.so.1 (simulator) or real librdmacm (rxe). C against Debian's rdma_cma.h
 * and rdma_verbs.h, linked -lrdmacm -libverbs. Both ends run in this process.
 *
 *   1. rping's shape: an event channel per side, the server's events taken by a thread of its
 *      own, its completions by another from the moment the QP exists; rdma_create_qp makes the
 *      CQs and their completion channels; private data both ways
 *      (the server's buffer address and rkey in the accept), an RDMA WRITE and a SEND; both
 *      sides disconnect.
 *   2. A rejection with private data (REJECTED, status 28), an accept with more private data
 *      than the REP carries (EINVAL, and the request rejected), no listener (status 8).
 *   3. rdma_server/rdma_client's shape: synchronous endpoints (rdma_getaddrinfo,
 *      rdma_create_ep, rdma_get_request), rdma_verbs.h's post and completion helpers.
 *   4. udaddy's shape: a UD service (RDMA_PS_UDP): ESTABLISHED brings the server's QP number,
 *      Q_Key and address; a datagram reaches it.
 *   5. QPs the program makes and moves itself: rdma_init_qp_attr, CONNECT_RESPONSE,
 *      rdma_establish (as UCX-style programs do).
 *   6. Many clients, one server loop: 8 synchronous clients on threads of their own, one server
 *      thread serving them all from poll() over its non-blocking CM channel and a shared CQ's
 *      completion channel.
 *   7. The channel fd: poll() says when an event is pending; O_NONBLOCK gives EAGAIN;
 *      rdma_migrate_id to another channel and to a private one.
 *   8. Errors: an address already bound, connecting before the route, rdma_get_request on an
 *      id with a channel.
 *   9. Time while a thread computes: no TIMEWAIT_EXIT after 200 ms of computing, for a thread
 *      waiting in rdma_get_cm_event or in poll() on the channel's fd; both come once the
 *      program only waits.
 *
 *   dropin_cm [--server IP] [--client IP]
 *             [--only errors|fd|rping|reject|endpoints|ud|own|many|migrate|compute]
 * The server listens on --server and the client binds to --client: by default 10.0.1.1 and
 * 10.0.0.1 (the simulator's sim1 and sim0) when there is a device named sim1, else 10.0.0.1 for
 * both (rxe0 in the rxe VM). Exit status 0 and "PASS" when every check passed. Under a fault
 * plan that loses CM messages (VERBSIM_FAULTS, e.g. cm_drop p=0.3 on all but REJ) the same
 * checks hold, the lost messages being sent again. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"

static const char *server_ip;
static const char *client_ip;
static int lossy; /* a fault plan may lose CM messages (VERBSIM_FAULTS, the drop-in only) */

static struct sockaddr_in addr_of(const char *ip, uint16_t port) {
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  CHECK(inet_pton(AF_INET, ip, &a.sin_addr) == 1, "bad address %s", ip);
  return a;
}

/* The next event on `ch`, which must be of type `want`; acked by the caller. */
static struct rdma_cm_event *expect_event(struct rdma_event_channel *ch,
                                          enum rdma_cm_event_type want) {
  struct rdma_cm_event *e = NULL;
  CHECK(rdma_get_cm_event(ch, &e) == 0, "rdma_get_cm_event: %s", strerror(errno));
  CHECK(e->event == want, "got %s (status %d), want %s", rdma_event_str(e->event), e->status,
        rdma_event_str(want));
  return e;
}

static void ack(struct rdma_cm_event *e) { CHECK(rdma_ack_cm_event(e) == 0, "rdma_ack_cm_event"); }

/* The client side up to a resolved route: bound to client_ip, resolving server_ip:port. */
static struct rdma_cm_id *resolved_client(struct rdma_event_channel *ch, uint16_t port,
                                          enum rdma_port_space ps) {
  struct rdma_cm_id *id;
  CHECK(rdma_create_id(ch, &id, NULL, ps) == 0, "rdma_create_id: %s", strerror(errno));
  struct sockaddr_in src = addr_of(client_ip, 0), dst = addr_of(server_ip, port);
  CHECK(rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000) == 0,
        "rdma_resolve_addr: %s", strerror(errno));
  ack(expect_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
  CHECK(id->verbs != NULL && id->pd != NULL, "ADDR_RESOLVED leaves the id without a device");
  CHECK(rdma_resolve_route(id, 2000) == 0, "rdma_resolve_route: %s", strerror(errno));
  ack(expect_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
  CHECK(rdma_get_dst_port(id) == htons(port), "dst port %u", ntohs(rdma_get_dst_port(id)));
  CHECK(rdma_get_src_port(id) != 0, "no local port after ROUTE_RESOLVED");
  CHECK(id->route.num_paths == 1 && id->route.path_rec != NULL, "%d paths", id->route.num_paths);
  /* The flow label's 20 bits: on rxe the word's top bits once came back set (librdmacm unpacks
   * the kernel's path record, whose reserved bits there it does not clear). */
  const uint32_t flow = (ntohs(rdma_get_src_port(id)) * 31u + port) & 0xfffff;
  CHECK((ntohl(id->route.path_rec->flow_label) & 0xfffff) == flow,
        "the path's flow label is %#x, want %#x", ntohl(id->route.path_rec->flow_label), flow);
  return id;
}

static struct rdma_cm_id *listener(struct rdma_event_channel *ch, uint16_t port,
                                   enum rdma_port_space ps) {
  struct rdma_cm_id *id;
  CHECK(rdma_create_id(ch, &id, NULL, ps) == 0, "rdma_create_id: %s", strerror(errno));
  struct sockaddr_in a = addr_of(server_ip, port);
  CHECK(rdma_bind_addr(id, (struct sockaddr *)&a) == 0, "rdma_bind_addr: %s", strerror(errno));
  CHECK(rdma_listen(id, 8) == 0, "rdma_listen: %s", strerror(errno));
  CHECK(rdma_get_src_port(id) == htons(port), "src port %u", ntohs(rdma_get_src_port(id)));
  return id;
}

static enum ibv_qp_state qp_state(struct ibv_qp *qp) {
  struct ibv_qp_attr attr;
  struct ibv_qp_init_attr init;
  CHECK(ibv_query_qp(qp, &attr, IBV_QP_STATE, &init) == 0, "ibv_query_qp: %s", strerror(errno));
  return attr.qp_state;
}

static void make_qp(struct rdma_cm_id *id, enum ibv_qp_type type) {
  struct ibv_qp_init_attr attr;
  memset(&attr, 0, sizeof attr);
  attr.cap.max_send_wr = attr.cap.max_recv_wr = 8;
  attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
  attr.qp_type = type;
  attr.sq_sig_all = 1;
  CHECK(rdma_create_qp(id, NULL, &attr) == 0, "rdma_create_qp: %s", strerror(errno));
  CHECK(id->qp && id->send_cq && id->recv_cq && id->recv_cq_channel,
        "rdma_create_qp made no CQs");
  /* librdmacm takes an RC QP to INIT (receives may be posted), a UD QP on to RTS. */
  enum ibv_qp_state want = type == IBV_QPT_UD ? IBV_QPS_RTS : IBV_QPS_INIT;
  CHECK(qp_state(id->qp) == want, "rdma_create_qp's QP is in state %d, want %d",
        qp_state(id->qp), want);
}

/* One completion from `cq`, waiting on its completion channel as rping does. */
static struct ibv_wc wait_completion(struct ibv_cq *cq, struct ibv_comp_channel *channel) {
  struct ibv_wc wc;
  for (;;) {
    int n = ibv_poll_cq(cq, 1, &wc);
    CHECK(n >= 0, "ibv_poll_cq: %d", n);
    if (n == 1) return wc;
    CHECK(ibv_req_notify_cq(cq, 0) == 0, "ibv_req_notify_cq");
    n = ibv_poll_cq(cq, 1, &wc);
    if (n == 1) return wc;
    struct ibv_cq *ev_cq;
    void *ev_ctx;
    CHECK(ibv_get_cq_event(channel, &ev_cq, &ev_ctx) == 0, "ibv_get_cq_event: %s",
          strerror(errno));
    CHECK(ev_cq == cq, "event for another CQ");
    ibv_ack_cq_events(ev_cq, 1);
  }
}

/* ---- 1. rping's shape ---------------------------------------------------------------- */

struct remote_buf {
  uint64_t addr;
  uint32_t rkey;
  uint32_t len;
};

static char server_buf[64];
static uint32_t client_qp_num;
static __be16 client_port;
static char server_recv[64];

struct server_args {
  struct rdma_event_channel *ch;
  struct rdma_cm_id *listen_id;
};

/* rping's cq_thread: waits on the completion channel from the moment the QP exists, while
 * the server thread goes on to accept. */
static void *completion_thread(void *p) {
  struct rdma_cm_id *id = p;
  struct ibv_wc wc = wait_completion(id->recv_cq, id->recv_cq_channel);
  CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 7 && wc.opcode == IBV_WC_RECV,
        "receive: %s", ibv_wc_status_str(wc.status));
  return NULL;
}

static void *rping_server(void *p) {
  struct server_args *args = p;
  struct rdma_cm_event *e = expect_event(args->ch, RDMA_CM_EVENT_CONNECT_REQUEST);
  struct rdma_cm_id *id = e->id;
  CHECK(e->listen_id == args->listen_id, "listen_id");
  /* The REQ's private data comes zero-padded to 56 bytes. */
  CHECK(e->param.conn.private_data_len == 56 &&
            memcmp(e->param.conn.private_data, "hello", 6) == 0,
        "the request's private data (%u bytes, want 56)", e->param.conn.private_data_len);
  CHECK(e->param.conn.qp_num == client_qp_num, "the request names QP %u, the client's is %u",
        e->param.conn.qp_num, client_qp_num);
  CHECK(e->param.conn.initiator_depth == 1 && e->param.conn.responder_resources == 1,
        "the request's RDMA READ depths %u/%u", e->param.conn.initiator_depth,
        e->param.conn.responder_resources);
  CHECK(rdma_get_src_port(id) == htons(7471) && rdma_get_dst_port(id) == client_port,
        "the request's id has ports %u -> %u", ntohs(rdma_get_src_port(id)),
        ntohs(rdma_get_dst_port(id)));
  CHECK(id->verbs != NULL && id->pd != NULL && id->channel == args->ch,
        "the request's id has no device or another channel");
  CHECK(id->context == args->listen_id->context, "the request's id has another context");
  ack(e);

  make_qp(id, IBV_QPT_RC);
  pthread_t cq_thread;
  CHECK(pthread_create(&cq_thread, NULL, completion_thread, id) == 0, "pthread_create");
  struct ibv_mr *mr = ibv_reg_mr(id->pd, server_buf, sizeof server_buf,
                                 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  struct ibv_mr *rmr = ibv_reg_mr(id->pd, server_recv, sizeof server_recv, IBV_ACCESS_LOCAL_WRITE);
  CHECK(mr && rmr, "ibv_reg_mr: %s", strerror(errno));
  struct ibv_sge sge = {(uintptr_t)server_recv, sizeof server_recv, rmr->lkey};
  struct ibv_recv_wr rwr = {.wr_id = 7, .sg_list = &sge, .num_sge = 1}, *bad_r;
  CHECK(ibv_post_recv(id->qp, &rwr, &bad_r) == 0, "ibv_post_recv");

  struct remote_buf rb = {(uintptr_t)server_buf, mr->rkey, sizeof server_buf};
  struct rdma_conn_param param;
  memset(&param, 0, sizeof param);
  param.private_data = &rb;
  param.private_data_len = sizeof rb;
  param.responder_resources = 1;
  param.initiator_depth = 1;
  param.rnr_retry_count = 7;
  CHECK(rdma_accept(id, &param) == 0, "rdma_accept: %s", strerror(errno));
  CHECK(qp_state(id->qp) == IBV_QPS_RTS, "the server's QP after rdma_accept: %d",
        qp_state(id->qp));
  /* ESTABLISHED when the client's RTU arrives. Under a fault plan that loses it, the client's
   * disconnect may come first: the IB CM then reports DISCONNECTED without ESTABLISHED. */
  struct rdma_cm_event *est = NULL;
  CHECK(rdma_get_cm_event(args->ch, &est) == 0, "rdma_get_cm_event: %s", strerror(errno));
  const int disconnected = est->event == RDMA_CM_EVENT_DISCONNECTED && lossy;
  CHECK(est->event == RDMA_CM_EVENT_ESTABLISHED || disconnected, "got %s, want ESTABLISHED",
        rdma_event_str(est->event));
  ack(est);

  CHECK(pthread_join(cq_thread, NULL) == 0, "pthread_join");
  CHECK(strcmp(server_recv, "sent") == 0, "received '%s'", server_recv);
  CHECK(strcmp(server_buf, "written") == 0, "the RDMA WRITE left '%s'", server_buf);

  if (!disconnected) ack(expect_event(args->ch, RDMA_CM_EVENT_DISCONNECTED));
  CHECK(qp_state(id->qp) == IBV_QPS_RTS, "the server's QP after DISCONNECTED: %d (the peer's "
        "disconnect leaves it)", qp_state(id->qp));
  CHECK(rdma_disconnect(id) == 0, "rdma_disconnect: %s", strerror(errno));
  CHECK(qp_state(id->qp) == IBV_QPS_ERR, "the server's QP after rdma_disconnect: %d",
        qp_state(id->qp));
  rdma_destroy_qp(id);
  CHECK(rdma_destroy_id(id) == 0, "rdma_destroy_id");
  ibv_dereg_mr(mr);
  ibv_dereg_mr(rmr);
  return NULL;
}

static void test_rping(void) {
  struct server_args args;
  args.ch = rdma_create_event_channel();
  CHECK(args.ch, "rdma_create_event_channel: %s", strerror(errno));
  args.listen_id = listener(args.ch, 7471, RDMA_PS_TCP);
  pthread_t server;
  CHECK(pthread_create(&server, NULL, rping_server, &args) == 0, "pthread_create");

  struct rdma_event_channel *ch = rdma_create_event_channel();
  struct rdma_cm_id *id = resolved_client(ch, 7471, RDMA_PS_TCP);
  make_qp(id, IBV_QPT_RC);
  client_qp_num = id->qp->qp_num;
  client_port = rdma_get_src_port(id);
  static char buf[64];
  struct ibv_mr *mr = ibv_reg_mr(id->pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
  CHECK(mr, "ibv_reg_mr: %s", strerror(errno));

  struct rdma_conn_param param;
  memset(&param, 0, sizeof param);
  param.private_data = "hello";
  param.private_data_len = 6;
  param.responder_resources = 1;
  param.initiator_depth = 1;
  param.retry_count = 7;
  param.rnr_retry_count = 7;
  CHECK(rdma_connect(id, &param) == 0, "rdma_connect: %s", strerror(errno));
  struct rdma_cm_event *e = expect_event(ch, RDMA_CM_EVENT_ESTABLISHED);
  struct remote_buf rb;
  CHECK(e->param.conn.private_data_len == 196, "the accept's private data: %u bytes, want 196",
        e->param.conn.private_data_len);
  CHECK(qp_state(id->qp) == IBV_QPS_RTS, "the client's QP at ESTABLISHED: %d", qp_state(id->qp));
  memcpy(&rb, e->param.conn.private_data, sizeof rb);
  ack(e);

  strcpy(buf, "written");
  struct ibv_sge sge = {(uintptr_t)buf, 8, mr->lkey};
  struct ibv_send_wr wr, *bad;
  memset(&wr, 0, sizeof wr);
  wr.wr_id = 1;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = rb.addr;
  wr.wr.rdma.rkey = rb.rkey;
  CHECK(ibv_post_send(id->qp, &wr, &bad) == 0, "ibv_post_send(WRITE)");
  struct ibv_wc wc = wait_completion(id->send_cq, id->send_cq_channel);
  CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_WRITE, "write: %s",
        ibv_wc_status_str(wc.status));

  static char msg[8];
  strcpy(msg, "sent");
  struct ibv_mr *mmr = ibv_reg_mr(id->pd, msg, sizeof msg, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_sge msge = {(uintptr_t)msg, 5, mmr->lkey};
  wr.wr_id = 2;
  wr.sg_list = &msge;
  wr.opcode = IBV_WR_SEND;
  CHECK(ibv_post_send(id->qp, &wr, &bad) == 0, "ibv_post_send(SEND)");
  wc = wait_completion(id->send_cq, id->send_cq_channel);
  CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND, "send: %s",
        ibv_wc_status_str(wc.status));

  CHECK(rdma_disconnect(id) == 0, "rdma_disconnect: %s", strerror(errno));
  ack(expect_event(ch, RDMA_CM_EVENT_DISCONNECTED));
  CHECK(pthread_join(server, NULL) == 0, "pthread_join");

  rdma_destroy_qp(id);
  CHECK(rdma_destroy_id(id) == 0, "rdma_destroy_id");
  ibv_dereg_mr(mr);
  ibv_dereg_mr(mmr);
  rdma_destroy_event_channel(ch);
  CHECK(rdma_destroy_id(args.listen_id) == 0, "rdma_destroy_id(listener)");
  rdma_destroy_event_channel(args.ch);
  printf("rping shape: WRITE and SEND over an rdma_cm connection, both sides disconnected\n");
}

/* ---- 2. rejections --------------------------------------------------------------------- */

static void test_reject(void) {
  struct rdma_event_channel *sch = rdma_create_event_channel();
  struct rdma_cm_id *l = listener(sch, 7472, RDMA_PS_TCP);
  struct rdma_event_channel *ch = rdma_create_event_channel();
  struct rdma_cm_id *id = resolved_client(ch, 7472, RDMA_PS_TCP);
  make_qp(id, IBV_QPT_RC);
  CHECK(rdma_connect(id, NULL) == 0, "rdma_connect: %s", strerror(errno));

  struct rdma_cm_event *e = expect_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
  struct rdma_cm_id *req = e->id;
  ack(e);
  CHECK(rdma_reject(req, "busy", 5) == 0, "rdma_reject: %s", strerror(errno));
  e = expect_event(ch, RDMA_CM_EVENT_REJECTED);
  CHECK(e->status == 28, "REJECTED status %d, want 28 (consumer defined)", e->status);
  CHECK(e->param.conn.private_data_len == 148 &&
            memcmp(e->param.conn.private_data, "busy", 5) == 0,
        "the rejection's private data (%u bytes, want 148)", e->param.conn.private_data_len);
  ack(e);
  struct ibv_qp_attr attr;
  struct ibv_qp_init_attr init;
  CHECK(ibv_query_qp(id->qp, &attr, IBV_QP_STATE, &init) == 0 && attr.qp_state == IBV_QPS_ERR,
        "a rejected connection's QP is in state %d, want ERR", attr.qp_state);
  rdma_destroy_qp(id);
  rdma_destroy_id(id);
  rdma_destroy_id(req);

  /* An accept with more private data than the REP carries fails, and rejects the request. */
  id = resolved_client(ch, 7472, RDMA_PS_TCP);
  make_qp(id, IBV_QPT_RC);
  CHECK(rdma_connect(id, NULL) == 0, "rdma_connect: %s", strerror(errno));
  e = expect_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
  req = e->id;
  ack(e);
  make_qp(req, IBV_QPT_RC);
  static char big[197];
  struct rdma_conn_param param;
  memset(&param, 0, sizeof param);
  param.private_data = big;
  param.private_data_len = sizeof big;
  errno = 0;
  CHECK(rdma_accept(req, &param) == -1 && errno == EINVAL,
        "rdma_accept with 197 bytes of private data: errno %d, want EINVAL", errno);
  CHECK(qp_state(req->qp) == IBV_QPS_ERR, "the server's QP after the failed accept: %d",
        qp_state(req->qp));
  e = expect_event(ch, RDMA_CM_EVENT_REJECTED);
  CHECK(e->status == 28, "REJECTED status %d after a failed accept, want 28", e->status);
  ack(e);
  rdma_destroy_qp(id);
  rdma_destroy_id(id);
  rdma_destroy_qp(req);
  rdma_destroy_id(req);

  /* Nobody listens on 7473. */
  id = resolved_client(ch, 7473, RDMA_PS_TCP);
  make_qp(id, IBV_QPT_RC);
  CHECK(rdma_connect(id, NULL) == 0, "rdma_connect: %s", strerror(errno));
  e = expect_event(ch, RDMA_CM_EVENT_REJECTED);
  CHECK(e->status == 8, "REJECTED status %d, want 8 (no listener)", e->status);
  ack(e);
  rdma_destroy_qp(id);
  rdma_destroy_id(id);
  rdma_destroy_id(l);
  rdma_destroy_event_channel(ch);
  rdma_destroy_event_channel(sch);
  printf("rejections: by the server with private data (28), by an accept with too much private "
         "data (28), without a listener (8)\n");
}

/* ---- 3. rdma_server / rdma_client ------------------------------------------------------ */

static struct rdma_cm_id *ep_listen_id;

/* rdma_client's shape: a synchronous endpoint to server_ip:`port` (from client_ip) sends `ping`
 * and expects `pong` back, then disconnects. */
static void ep_client(const char *port, const char *ping, const char *pong) {
  struct rdma_addrinfo hints, *res;
  memset(&hints, 0, sizeof hints);
  hints.ai_port_space = RDMA_PS_TCP;
  struct sockaddr_in src = addr_of(client_ip, 0);
  hints.ai_src_addr = (struct sockaddr *)&src;
  hints.ai_src_len = sizeof src;
  CHECK(rdma_getaddrinfo(server_ip, port, &hints, &res) == 0, "rdma_getaddrinfo: %s",
        strerror(errno));
  CHECK(res->ai_dst_addr && res->ai_src_addr, "active rdma_addrinfo");
  struct ibv_qp_init_attr attr;
  memset(&attr, 0, sizeof attr);
  attr.cap.max_send_wr = attr.cap.max_recv_wr = 1;
  attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
  attr.sq_sig_all = 1;
  struct rdma_cm_id *id;
  CHECK(rdma_create_ep(&id, res, NULL, &attr) == 0, "%s: rdma_create_ep: %s", ping,
        strerror(errno));
  rdma_freeaddrinfo(res);
  char recv_msg[16], send_msg[16];
  struct ibv_mr *rmr = rdma_reg_msgs(id, recv_msg, sizeof recv_msg);
  struct ibv_mr *smr = rdma_reg_msgs(id, send_msg, sizeof send_msg);
  CHECK(rmr && smr, "rdma_reg_msgs: %s", strerror(errno));
  CHECK(rdma_post_recv(id, NULL, recv_msg, sizeof recv_msg, rmr) == 0, "rdma_post_recv");
  CHECK(rdma_connect(id, NULL) == 0, "%s: rdma_connect: %s", ping, strerror(errno));
  snprintf(send_msg, sizeof send_msg, "%s", ping);
  CHECK(rdma_post_send(id, NULL, send_msg, strlen(send_msg) + 1, smr, IBV_SEND_SIGNALED) == 0,
        "rdma_post_send");
  struct ibv_wc wc;
  CHECK(rdma_get_send_comp(id, &wc) == 1 && wc.status == IBV_WC_SUCCESS, "%s: send: %s", ping,
        ibv_wc_status_str(wc.status));
  CHECK(rdma_get_recv_comp(id, &wc) == 1 && wc.status == IBV_WC_SUCCESS, "%s: recv: %s", ping,
        ibv_wc_status_str(wc.status));
  CHECK(strcmp(recv_msg, pong) == 0, "%s: got '%s', want '%s'", ping, recv_msg, pong);
  CHECK(rdma_disconnect(id) == 0, "%s: rdma_disconnect: %s", ping, strerror(errno));
  rdma_dereg_mr(rmr);
  rdma_dereg_mr(smr);
  rdma_destroy_ep(id);
}

static void *ep_server(void *unused) {
  (void)unused;
  struct rdma_cm_id *id;
  CHECK(rdma_get_request(ep_listen_id, &id) == 0, "rdma_get_request: %s", strerror(errno));
  CHECK(id->qp != NULL, "rdma_get_request made no QP");
  CHECK(id->event && id->event->event == RDMA_CM_EVENT_CONNECT_REQUEST, "id->event");
  static uint8_t recv_msg[16], send_msg[16];
  struct ibv_mr *rmr = rdma_reg_msgs(id, recv_msg, sizeof recv_msg);
  struct ibv_mr *smr = rdma_reg_msgs(id, send_msg, sizeof send_msg);
  CHECK(rmr && smr, "rdma_reg_msgs: %s", strerror(errno));
  CHECK(rdma_post_recv(id, NULL, recv_msg, sizeof recv_msg, rmr) == 0, "rdma_post_recv");
  CHECK(rdma_accept(id, NULL) == 0, "rdma_accept: %s", strerror(errno));
  struct ibv_wc wc;
  CHECK(rdma_get_recv_comp(id, &wc) == 1 && wc.status == IBV_WC_SUCCESS, "rdma_get_recv_comp");
  CHECK(strcmp((char *)recv_msg, "ping") == 0, "server got '%s'", recv_msg);
  strcpy((char *)send_msg, "pong");
  CHECK(rdma_post_send(id, NULL, send_msg, 5, smr, IBV_SEND_SIGNALED) == 0, "rdma_post_send");
  CHECK(rdma_get_send_comp(id, &wc) == 1 && wc.status == IBV_WC_SUCCESS, "rdma_get_send_comp");
  CHECK(rdma_disconnect(id) == 0, "server rdma_disconnect: %s", strerror(errno));
  rdma_dereg_mr(rmr);
  rdma_dereg_mr(smr);
  rdma_destroy_ep(id);
  return NULL;
}

static void test_endpoints(void) {
  struct rdma_addrinfo hints, *res;
  memset(&hints, 0, sizeof hints);
  hints.ai_flags = RAI_PASSIVE;
  hints.ai_port_space = RDMA_PS_TCP;
  CHECK(rdma_getaddrinfo(server_ip, "7474", &hints, &res) == 0, "rdma_getaddrinfo: %s",
        strerror(errno));
  CHECK(res->ai_src_addr && res->ai_qp_type == IBV_QPT_RC, "passive rdma_addrinfo");
  struct ibv_qp_init_attr attr;
  memset(&attr, 0, sizeof attr);
  attr.cap.max_send_wr = attr.cap.max_recv_wr = 1;
  attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
  attr.sq_sig_all = 1;
  CHECK(rdma_create_ep(&ep_listen_id, res, NULL, &attr) == 0, "rdma_create_ep(passive): %s",
        strerror(errno));
  rdma_freeaddrinfo(res);
  CHECK(rdma_listen(ep_listen_id, 0) == 0, "rdma_listen: %s", strerror(errno));
  pthread_t server;
  CHECK(pthread_create(&server, NULL, ep_server, NULL) == 0, "pthread_create");

  ep_client("7474", "ping", "pong");
  CHECK(pthread_join(server, NULL) == 0, "pthread_join");
  rdma_destroy_ep(ep_listen_id);
  printf("endpoints: rdma_create_ep, rdma_get_request, ping and pong, both disconnected\n");
}

/* ---- 4. udaddy ------------------------------------------------------------------------- */

static void test_ud(void) {
  struct rdma_event_channel *sch = rdma_create_event_channel();
  struct rdma_cm_id *l = listener(sch, 7475, RDMA_PS_UDP);
  struct rdma_event_channel *ch = rdma_create_event_channel();
  struct rdma_cm_id *id = resolved_client(ch, 7475, RDMA_PS_UDP);
  make_qp(id, IBV_QPT_UD);
  struct ibv_qp_attr qa;
  struct ibv_qp_init_attr qi;
  CHECK(ibv_query_qp(id->qp, &qa, IBV_QP_STATE | IBV_QP_QKEY, &qi) == 0, "ibv_query_qp");
  CHECK(qa.qp_state == IBV_QPS_RTS && qa.qkey == RDMA_UDP_QKEY,
        "rdma_create_qp's UD QP: state %d, qkey %#x; want RTS, RDMA_UDP_QKEY", qa.qp_state,
        qa.qkey);
  CHECK(rdma_connect(id, NULL) == 0, "rdma_connect: %s", strerror(errno));

  struct rdma_cm_event *e = expect_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
  struct rdma_cm_id *req = e->id;
  ack(e);
  make_qp(req, IBV_QPT_UD);
  static char rbuf[40 + 16];
  struct ibv_mr *rmr = ibv_reg_mr(req->pd, rbuf, sizeof rbuf, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_sge rsge = {(uintptr_t)rbuf, sizeof rbuf, rmr->lkey};
  struct ibv_recv_wr rwr = {.wr_id = 9, .sg_list = &rsge, .num_sge = 1}, *bad_r;
  CHECK(ibv_post_recv(req->qp, &rwr, &bad_r) == 0, "ibv_post_recv");
  CHECK(rdma_accept(req, NULL) == 0, "rdma_accept: %s", strerror(errno));

  e = expect_event(ch, RDMA_CM_EVENT_ESTABLISHED);
  CHECK(e->param.ud.qp_num == req->qp->qp_num, "ESTABLISHED names QP %u, the server's is %u",
        e->param.ud.qp_num, req->qp->qp_num);
  CHECK(e->param.ud.qkey == RDMA_UDP_QKEY, "qkey %#x", e->param.ud.qkey);
  struct ibv_ah *ah = ibv_create_ah(id->pd, &e->param.ud.ah_attr);
  CHECK(ah, "ibv_create_ah: %s", strerror(errno));
  uint32_t remote_qpn = e->param.ud.qp_num, remote_qkey = e->param.ud.qkey;
  ack(e);

  static char msg[16] = "datagram";
  struct ibv_mr *smr = ibv_reg_mr(id->pd, msg, sizeof msg, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_sge sge = {(uintptr_t)msg, 9, smr->lkey};
  struct ibv_send_wr wr, *bad;
  memset(&wr, 0, sizeof wr);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.ud.ah = ah;
  wr.wr.ud.remote_qpn = remote_qpn;
  wr.wr.ud.remote_qkey = remote_qkey;
  CHECK(ibv_post_send(id->qp, &wr, &bad) == 0, "ibv_post_send(UD)");
  struct ibv_wc wc = wait_completion(id->send_cq, id->send_cq_channel);
  CHECK(wc.status == IBV_WC_SUCCESS, "UD send: %s", ibv_wc_status_str(wc.status));
  wc = wait_completion(req->recv_cq, req->recv_cq_channel);
  CHECK(wc.status == IBV_WC_SUCCESS && wc.byte_len == 40 + 9, "UD receive: %s, %u bytes",
        ibv_wc_status_str(wc.status), wc.byte_len);
  CHECK(strcmp(rbuf + 40, "datagram") == 0, "the datagram reads '%s'", rbuf + 40);

  ibv_destroy_ah(ah);
  rdma_destroy_qp(id);
  rdma_destroy_qp(req);
  ibv_dereg_mr(rmr);
  ibv_dereg_mr(smr);
  rdma_destroy_id(id);
  rdma_destroy_id(req);
  rdma_destroy_id(l);
  rdma_destroy_event_channel(ch);
  rdma_destroy_event_channel(sch);
  printf("UD service: the server's QP, Q_Key and address from ESTABLISHED, a datagram sent\n");
}

/* ---- 5. QPs the program moves itself --------------------------------------------------- */

/* rdma_init_qp_attr's attributes for `state`, applied to `qp`. */
static void move_qp(struct rdma_cm_id *id, struct ibv_qp *qp, enum ibv_qp_state state) {
  struct ibv_qp_attr attr;
  int mask = 0;
  memset(&attr, 0, sizeof attr);
  attr.qp_state = state;
  CHECK(rdma_init_qp_attr(id, &attr, &mask) == 0, "rdma_init_qp_attr(%d): %s", state,
        strerror(errno));
  CHECK(ibv_modify_qp(qp, &attr, mask) == 0, "ibv_modify_qp to %d with rdma_init_qp_attr's", state);
}

static int pending(struct rdma_event_channel *ch, int ms) {
  struct pollfd p = {.fd = ch->fd, .events = POLLIN};
  return poll(&p, 1, ms);
}

/* Both sides make their QPs with ibv_create_qp and take them through INIT, RTR and RTS with
 * rdma_init_qp_attr; the client answers CONNECT_RESPONSE with rdma_establish. */
static void test_own_qp(void) {
  struct rdma_event_channel *sch = rdma_create_event_channel();
  struct rdma_cm_id *l = listener(sch, 7481, RDMA_PS_TCP);
  struct rdma_event_channel *ch = rdma_create_event_channel();
  struct rdma_cm_id *id = resolved_client(ch, 7481, RDMA_PS_TCP);
  struct ibv_cq *cq = ibv_create_cq(id->verbs, 16, NULL, NULL, 0);
  struct ibv_qp_init_attr init;
  memset(&init, 0, sizeof init);
  init.send_cq = init.recv_cq = cq;
  init.cap.max_send_wr = init.cap.max_recv_wr = 4;
  init.cap.max_send_sge = init.cap.max_recv_sge = 1;
  init.qp_type = IBV_QPT_RC;
  struct ibv_qp *cqp = ibv_create_qp(id->pd, &init);
  CHECK(cq && cqp, "ibv_create_qp: %s", strerror(errno));
  move_qp(id, cqp, IBV_QPS_INIT);
  struct rdma_conn_param param;
  memset(&param, 0, sizeof param);
  param.responder_resources = 1;
  param.initiator_depth = 1;
  param.retry_count = 7;
  param.rnr_retry_count = 7;
  param.qp_num = cqp->qp_num;
  CHECK(rdma_connect(id, &param) == 0, "rdma_connect with qp_num: %s", strerror(errno));

  struct rdma_cm_event *e = expect_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
  struct rdma_cm_id *req = e->id;
  CHECK(e->param.conn.qp_num == cqp->qp_num, "the request names QP %u", e->param.conn.qp_num);
  ack(e);
  struct ibv_cq *scq = ibv_create_cq(req->verbs, 16, NULL, NULL, 0); /* the server's device */
  init.send_cq = init.recv_cq = scq;
  struct ibv_qp *sqp = ibv_create_qp(req->pd, &init);
  CHECK(scq && sqp, "ibv_create_qp: %s", strerror(errno));
  move_qp(req, sqp, IBV_QPS_INIT);
  move_qp(req, sqp, IBV_QPS_RTR);
  move_qp(req, sqp, IBV_QPS_RTS);
  param.qp_num = sqp->qp_num;
  CHECK(rdma_accept(req, &param) == 0, "rdma_accept with qp_num: %s", strerror(errno));

  e = expect_event(ch, RDMA_CM_EVENT_CONNECT_RESPONSE);
  CHECK(e->param.conn.qp_num == sqp->qp_num && e->param.conn.private_data_len == 196,
        "CONNECT_RESPONSE names QP %u, %u bytes of private data", e->param.conn.qp_num,
        e->param.conn.private_data_len);
  ack(e);
  move_qp(id, cqp, IBV_QPS_RTR);
  move_qp(id, cqp, IBV_QPS_RTS);
  CHECK(pending(sch, 0) == 0, "the server has an event before rdma_establish");
  CHECK(rdma_establish(id) == 0, "rdma_establish: %s", strerror(errno));
  errno = 0;
  CHECK(rdma_establish(id) == -1 && errno == EINVAL, "a second rdma_establish: errno %d, want "
        "EINVAL", errno);
  ack(expect_event(sch, RDMA_CM_EVENT_ESTABLISHED));
  CHECK(pending(ch, 0) == 0, "the client has an event after rdma_establish");

  static char buf[64] = "own";
  struct ibv_mr *mr = ibv_reg_mr(id->pd, buf, 32, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *rmr = ibv_reg_mr(req->pd, buf + 32, 32, IBV_ACCESS_LOCAL_WRITE);
  CHECK(mr && rmr, "ibv_reg_mr: %s", strerror(errno));
  struct ibv_sge rsge = {(uintptr_t)buf + 32, 32, rmr->lkey}, ssge = {(uintptr_t)buf, 4, mr->lkey};
  struct ibv_recv_wr rwr = {.wr_id = 1, .sg_list = &rsge, .num_sge = 1}, *bad_r;
  CHECK(ibv_post_recv(sqp, &rwr, &bad_r) == 0, "ibv_post_recv");
  struct ibv_send_wr swr, *bad_s;
  memset(&swr, 0, sizeof swr);
  swr.wr_id = 2;
  swr.sg_list = &ssge;
  swr.num_sge = 1;
  swr.opcode = IBV_WR_SEND;
  swr.send_flags = IBV_SEND_SIGNALED;
  CHECK(ibv_post_send(cqp, &swr, &bad_s) == 0, "ibv_post_send");
  int got = 0;
  for (int spins = 0; got < 2 && spins < 1000000; ++spins) {
    struct ibv_wc wc;
    const int n = ibv_poll_cq(spins % 2 ? cq : scq, 1, &wc);
    CHECK(n >= 0 && (n == 0 || wc.status == IBV_WC_SUCCESS), "completion: %s",
          ibv_wc_status_str(wc.status));
    got += n;
  }
  CHECK(got == 2 && strcmp(buf + 32, "own") == 0, "%d completions, received '%s'", got, buf + 32);

  CHECK(rdma_disconnect(id) == 0, "rdma_disconnect: %s", strerror(errno));
  ack(expect_event(sch, RDMA_CM_EVENT_DISCONNECTED));
  CHECK(rdma_disconnect(req) == 0, "rdma_disconnect: %s", strerror(errno));
  ack(expect_event(ch, RDMA_CM_EVENT_DISCONNECTED));
  CHECK(qp_state(cqp) == IBV_QPS_RTS && qp_state(sqp) == IBV_QPS_RTS,
        "the program's QPs are its own: states %d and %d after the disconnects", qp_state(cqp),
        qp_state(sqp));
  rdma_destroy_id(id);
  rdma_destroy_id(req);
  ibv_destroy_qp(cqp);
  ibv_destroy_qp(sqp);
  ibv_dereg_mr(mr);
  ibv_dereg_mr(rmr);
  ibv_destroy_cq(cq);
  ibv_destroy_cq(scq);
  rdma_destroy_id(l);
  rdma_destroy_event_channel(ch);
  rdma_destroy_event_channel(sch);
  printf("own QPs: rdma_init_qp_attr, CONNECT_RESPONSE, rdma_establish, a SEND\n");
}

/* ---- 6. many clients, one event loop ---------------------------------------------------- */

#define CLIENTS 8

static void *many_client(void *p) {
  char ping[16], pong[16];
  snprintf(ping, sizeof ping, "ping %d", (int)(intptr_t)p);
  snprintf(pong, sizeof pong, "pong %d", (int)(intptr_t)p);
  ep_client("7480", ping, pong);
  return NULL;
}

/* One server thread serves CLIENTS synchronous clients, each a thread of its own, from one
 * poll() loop over its non-blocking CM channel and the completion channel of the CQ that all
 * its connections share. */
static void test_many(void) {
  struct rdma_event_channel *ch = rdma_create_event_channel();
  CHECK(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK) == 0, "fcntl");
  struct rdma_cm_id *l = listener(ch, 7480, RDMA_PS_TCP);
  struct ibv_comp_channel *cc = ibv_create_comp_channel(l->verbs);
  CHECK(cc && fcntl(cc->fd, F_SETFL, fcntl(cc->fd, F_GETFL) | O_NONBLOCK) == 0, "comp channel");
  struct ibv_cq *cq = ibv_create_cq(l->verbs, 4 * CLIENTS, NULL, cc, 0);
  CHECK(cq && ibv_req_notify_cq(cq, 0) == 0, "ibv_create_cq: %s", strerror(errno));
  static char bufs[CLIENTS][2][16]; /* per connection: received, sent */
  struct ibv_mr *mr = ibv_reg_mr(l->pd, bufs, sizeof bufs, IBV_ACCESS_LOCAL_WRITE);
  CHECK(mr, "ibv_reg_mr: %s", strerror(errno));
  struct rdma_cm_id *conns[CLIENTS] = {0};
  int accepted = 0, established = 0, answered = 0, disconnected = 0;

  pthread_t clients[CLIENTS];
  for (int i = 0; i < CLIENTS; ++i) {
    CHECK(pthread_create(&clients[i], NULL, many_client, (void *)(intptr_t)i) == 0, "pthread");
  }
  while (disconnected < CLIENTS) {
    struct pollfd fds[2] = {{.fd = ch->fd, .events = POLLIN}, {.fd = cc->fd, .events = POLLIN}};
    CHECK(poll(fds, 2, 10000) > 0, "the server's poll() timed out (%d accepted, %d answered, %d "
          "disconnected)", accepted, answered, disconnected);
    struct rdma_cm_event *e;
    while (rdma_get_cm_event(ch, &e) == 0) {
      struct rdma_cm_id *id = e->id;
      if (e->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
        CHECK(accepted < CLIENTS, "more requests than clients");
        const int slot = accepted++;
        conns[slot] = id;
        id->context = (void *)(intptr_t)slot;
        struct ibv_qp_init_attr attr;
        memset(&attr, 0, sizeof attr);
        attr.send_cq = attr.recv_cq = cq;
        attr.cap.max_send_wr = attr.cap.max_recv_wr = 1;
        attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
        attr.qp_type = IBV_QPT_RC;
        attr.sq_sig_all = 1;
        CHECK(rdma_create_qp(id, l->pd, &attr) == 0, "rdma_create_qp: %s", strerror(errno));
        struct ibv_sge sge = {(uintptr_t)bufs[slot][0], 16, mr->lkey};
        struct ibv_recv_wr wr = {.wr_id = (uint64_t)slot, .sg_list = &sge, .num_sge = 1}, *bad;
        CHECK(ibv_post_recv(id->qp, &wr, &bad) == 0, "ibv_post_recv");
        CHECK(rdma_accept(id, NULL) == 0, "rdma_accept: %s", strerror(errno));
      } else if (e->event == RDMA_CM_EVENT_ESTABLISHED) {
        ++established;
      } else if (e->event == RDMA_CM_EVENT_TIMEWAIT_EXIT) {
        /* an earlier connection's, 2 s after its disconnect */
      } else {
        CHECK(e->event == RDMA_CM_EVENT_DISCONNECTED, "got %s", rdma_event_str(e->event));
        CHECK(rdma_disconnect(id) == 0, "rdma_disconnect: %s", strerror(errno));
        ++disconnected;
      }
      ack(e);
    }
    CHECK(errno == EAGAIN, "rdma_get_cm_event: %s", strerror(errno));
    struct ibv_cq *ev_cq;
    void *ev_ctx;
    if (ibv_get_cq_event(cc, &ev_cq, &ev_ctx) == 0) {
      ibv_ack_cq_events(ev_cq, 1);
      CHECK(ibv_req_notify_cq(cq, 0) == 0, "ibv_req_notify_cq");
    }
    struct ibv_wc wc;
    int n;
    while ((n = ibv_poll_cq(cq, 1, &wc)) == 1) {
      CHECK(wc.status == IBV_WC_SUCCESS, "server completion: %s", ibv_wc_status_str(wc.status));
      if (wc.opcode != IBV_WC_RECV) continue;
      const int slot = (int)wc.wr_id;
      int client = -1;
      CHECK(sscanf(bufs[slot][0], "ping %d", &client) == 1, "server got '%s'", bufs[slot][0]);
      snprintf(bufs[slot][1], 16, "pong %d", client);
      struct ibv_sge sge = {(uintptr_t)bufs[slot][1], 16, mr->lkey};
      struct ibv_send_wr wr, *bad;
      memset(&wr, 0, sizeof wr);
      wr.wr_id = 100 + (uint64_t)slot;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      wr.opcode = IBV_WR_SEND;
      CHECK(ibv_post_send(conns[slot]->qp, &wr, &bad) == 0, "ibv_post_send");
      ++answered;
    }
    CHECK(n == 0, "ibv_poll_cq: %d", n);
  }
  for (int i = 0; i < CLIENTS; ++i) CHECK(pthread_join(clients[i], NULL) == 0, "pthread_join");
  CHECK(accepted == CLIENTS && answered == CLIENTS, "%d accepted, %d answered", accepted,
        answered);
  /* Under a fault plan that loses RTUs a disconnect may overtake ESTABLISHED (see rping). */
  CHECK(established == CLIENTS || lossy, "%d established", established);
  for (int i = 0; i < CLIENTS; ++i) {
    rdma_destroy_qp(conns[i]);
    rdma_destroy_id(conns[i]);
  }
  ibv_dereg_mr(mr);
  ibv_destroy_cq(cq);
  ibv_destroy_comp_channel(cc);
  rdma_destroy_id(l);
  rdma_destroy_event_channel(ch);
  printf("many: one server loop, %d synchronous clients on threads of their own\n", CLIENTS);
}

/* ---- 7. the channel fd ------------------------------------------------------------------ */

static void test_fd(void) {
  struct rdma_event_channel *ch = rdma_create_event_channel();
  struct rdma_cm_id *id;
  CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
  int flags = fcntl(ch->fd, F_GETFL);
  CHECK(fcntl(ch->fd, F_SETFL, flags | O_NONBLOCK) == 0, "fcntl");
  struct rdma_cm_event *e;
  errno = 0;
  CHECK(rdma_get_cm_event(ch, &e) == -1 && errno == EAGAIN,
        "rdma_get_cm_event on an empty non-blocking channel: errno %d, want EAGAIN", errno);
  struct sockaddr_in src = addr_of(client_ip, 0), dst = addr_of(server_ip, 7476);
  CHECK(rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000) == 0,
        "rdma_resolve_addr: %s", strerror(errno));
  struct pollfd p = {.fd = ch->fd, .events = POLLIN};
  CHECK(poll(&p, 1, 5000) == 1 && (p.revents & POLLIN), "the channel fd never became readable");
  CHECK(rdma_get_cm_event(ch, &e) == 0 && e->event == RDMA_CM_EVENT_ADDR_RESOLVED,
        "ADDR_RESOLVED after poll");
  ack(e);
  rdma_destroy_id(id);
  rdma_destroy_event_channel(ch);
  printf("channel fd: EAGAIN when empty and non-blocking, readable under poll()\n");
}

/* rdma_migrate_id: to another channel, with the event already pending; then to a private
 * one (NULL), after which the id is synchronous: rdma_resolve_route waits for its event. */
static void test_migrate(void) {
  struct rdma_event_channel *a = rdma_create_event_channel(), *b = rdma_create_event_channel();
  struct rdma_cm_id *id;
  CHECK(rdma_create_id(a, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
  struct sockaddr_in src = addr_of(client_ip, 0), dst = addr_of(server_ip, 7487);
  CHECK(rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000) == 0,
        "rdma_resolve_addr: %s", strerror(errno));
  struct pollfd p = {.fd = a->fd, .events = POLLIN};
  CHECK(poll(&p, 1, 5000) == 1, "ADDR_RESOLVED never came");
  CHECK(rdma_migrate_id(id, b) == 0, "rdma_migrate_id: %s", strerror(errno));
  CHECK(id->channel == b, "the id's channel");
  ack(expect_event(b, RDMA_CM_EVENT_ADDR_RESOLVED));
  CHECK(rdma_migrate_id(id, NULL) == 0, "rdma_migrate_id(NULL): %s", strerror(errno));
  CHECK(rdma_resolve_route(id, 2000) == 0, "rdma_resolve_route (synchronous): %s",
        strerror(errno));
  CHECK(id->event && id->event->event == RDMA_CM_EVENT_ROUTE_RESOLVED, "id->event");
  errno = 0;
  CHECK(rdma_migrate_id(id, NULL) == -1 && errno == EINVAL,
        "a synchronous id to a private channel again: errno %d, want EINVAL", errno);
  rdma_destroy_id(id);
  rdma_destroy_event_channel(a);
  rdma_destroy_event_channel(b);
  printf("migrate: an id and its pending event to another channel, then to a private one\n");
}

/* ---- 8. errors ------------------------------------------------------------------------- */

static void test_errors(void) {
  struct rdma_event_channel *ch = rdma_create_event_channel();
  struct rdma_cm_id *a, *b;
  CHECK(rdma_create_id(ch, &a, NULL, RDMA_PS_TCP) == 0 &&
            rdma_create_id(ch, &b, NULL, RDMA_PS_TCP) == 0,
        "rdma_create_id");
  struct sockaddr_in s = addr_of(server_ip, 7477);
  CHECK(rdma_bind_addr(a, (struct sockaddr *)&s) == 0, "rdma_bind_addr");
  errno = 0;
  CHECK(rdma_bind_addr(b, (struct sockaddr *)&s) == -1 && errno == EADDRINUSE,
        "a second bind of the same address: errno %d, want EADDRINUSE", errno);
  errno = 0;
  CHECK(rdma_connect(b, NULL) == -1 && errno == EINVAL,
        "rdma_connect before the route: errno %d, want EINVAL", errno);
  struct rdma_cm_id *got;
  errno = 0;
  CHECK(rdma_get_request(a, &got) == -1 && errno == EINVAL,
        "rdma_get_request on an id with a channel: errno %d, want EINVAL", errno);
  rdma_destroy_id(a);
  rdma_destroy_id(b);
  rdma_destroy_event_channel(ch);
  printf("errors: EADDRINUSE, EINVAL before the route, EINVAL from rdma_get_request\n");
}

/* ---- 9. virtual time while the program computes --------------------------------------- */

/* Spins for `ms` of wall time without calling the library: a thread that computes. */
static void compute_for(int ms) {
  struct timespec start, now;
  clock_gettime(CLOCK_MONOTONIC, &start);
  do {
    clock_gettime(CLOCK_MONOTONIC, &now);
  } while ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 < ms);
}

static volatile int timewait_seen; /* set by timewait_waiter */

/* Waits inside the library for the client's TIMEWAIT_EXIT. */
static void *timewait_waiter(void *ch) {
  ack(expect_event(ch, RDMA_CM_EVENT_TIMEWAIT_EXIT));
  __atomic_store_n(&timewait_seen, 1, __ATOMIC_SEQ_CST);
  return NULL;
}

/* TIMEWAIT_EXIT comes about 2 s after a disconnect. While a thread computes, time passes for
 * the connection at the pace of the wall clock, not faster, whether the others wait inside the
 * library (a thread in rdma_get_cm_event) or outside it (poll() on the channel's fd): 200 ms of
 * computing later, neither side has it. Once the program only waits, both come. */
static void test_compute(void) {
  struct rdma_event_channel *sch = rdma_create_event_channel();
  struct rdma_cm_id *l = listener(sch, 7488, RDMA_PS_TCP);
  struct rdma_event_channel *ch = rdma_create_event_channel();
  struct rdma_cm_id *id = resolved_client(ch, 7488, RDMA_PS_TCP);
  make_qp(id, IBV_QPT_RC);
  CHECK(rdma_connect(id, NULL) == 0, "rdma_connect: %s", strerror(errno));
  struct rdma_cm_event *e = expect_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
  struct rdma_cm_id *req = e->id;
  ack(e);
  make_qp(req, IBV_QPT_RC);
  CHECK(rdma_accept(req, NULL) == 0, "rdma_accept: %s", strerror(errno));
  ack(expect_event(ch, RDMA_CM_EVENT_ESTABLISHED));
  ack(expect_event(sch, RDMA_CM_EVENT_ESTABLISHED));
  CHECK(rdma_disconnect(id) == 0, "rdma_disconnect: %s", strerror(errno));
  ack(expect_event(sch, RDMA_CM_EVENT_DISCONNECTED));
  CHECK(rdma_disconnect(req) == 0, "rdma_disconnect: %s", strerror(errno));
  ack(expect_event(ch, RDMA_CM_EVENT_DISCONNECTED));

  pthread_t waiter;
  CHECK(pthread_create(&waiter, NULL, timewait_waiter, ch) == 0, "pthread_create");
  compute_for(200);
  /* Under a fault plan the two disconnects may have completed seconds of virtual time apart. */
  CHECK(lossy || !__atomic_load_n(&timewait_seen, __ATOMIC_SEQ_CST),
        "the client's TIMEWAIT_EXIT came during 200 ms of computing (its thread waited in "
        "rdma_get_cm_event): virtual time outran the wall clock");
  CHECK(lossy || pending(sch, 0) == 0,
        "the server's TIMEWAIT_EXIT came during 200 ms of computing: virtual time outran the "
        "wall clock");
  CHECK(pthread_join(waiter, NULL) == 0, "pthread_join");
  CHECK(pending(sch, 10000) == 1, "the server's TIMEWAIT_EXIT never came");
  ack(expect_event(sch, RDMA_CM_EVENT_TIMEWAIT_EXIT));
  rdma_destroy_qp(id);
  rdma_destroy_id(id);
  rdma_destroy_qp(req);
  rdma_destroy_id(req);
  rdma_destroy_id(l);
  rdma_destroy_event_channel(ch);
  rdma_destroy_event_channel(sch);
  printf("compute: no TIMEWAIT_EXIT after 200 ms of computing, both once the program waits\n");
}

int main(int argc, char **argv) {
  const char *only = NULL;
  int n = 0;
  struct ibv_device **list = ibv_get_device_list(&n);
  int simulated = 0;
  for (int i = 0; list && i < n; ++i) simulated |= strcmp(ibv_get_device_name(list[i]), "sim1") == 0;
  if (list) ibv_free_device_list(list);
  server_ip = simulated ? "10.0.1.1" : "10.0.0.1";
  client_ip = "10.0.0.1";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--server") == 0) server_ip = argv[i + 1];
    else if (strcmp(argv[i], "--client") == 0) client_ip = argv[i + 1];
    else if (strcmp(argv[i], "--only") == 0) only = argv[i + 1];
  }
  setvbuf(stdout, NULL, _IONBF, 0);
  lossy = getenv("VERBSIM_FAULTS") != NULL;
  static const struct {
    const char *name;
    void (*run)(void);
  } tests[] = {{"errors", test_errors}, {"fd", test_fd},         {"rping", test_rping},
               {"reject", test_reject}, {"endpoints", test_endpoints}, {"ud", test_ud},
               {"own", test_own_qp}, {"many", test_many}, {"migrate", test_migrate},
               {"compute", test_compute}};
  for (size_t i = 0; i < sizeof tests / sizeof tests[0]; ++i) {
    if (!only || strcmp(only, tests[i].name) == 0) tests[i].run();
  }
  printf("PASS\n");
  return 0;
}
