// The connection manager (verbsim/cm.hpp): address and route resolution, connect / accept with
// private data, the QP states and attributes a connection leaves, rejection, disconnection and
// the errors of the control path. Client and server are two ids of one device, each with its
// own event channel (as two processes would have), talking over the device's own address.
#include <cerrno>
#include <cstring>
#include <thread>

#include "conformance.hpp"
#include "verbsim/connect.hpp"

namespace verbsim::conformance {
namespace {

std::vector<std::uint8_t> bytes(std::string_view s) { return {s.begin(), s.end()}; }

// The first `n` bytes of `data` as text, "" if it is shorter.
std::string prefix(const std::vector<std::uint8_t>& data, std::size_t n) {
  if (data.size() < n) return "";
  return {data.begin(), data.begin() + static_cast<std::ptrdiff_t>(n)};
}

class Cm : public Conformance {
 protected:
  void SetUp() override {
    Conformance::SetUp();
    if (IsSkipped()) return;
    try {
      client_ch_ = backend().create_cm_channel();
      server_ch_ = backend().create_cm_channel();
    } catch (const VerbError& e) {
      // The drop-in's simulator has no kernel rdma_cm for librdmacm to talk to.
      GTEST_SKIP() << "no connection manager: " << e.what();
    }
    cq_ = make_cq(64);
  }
  void TearDown() override {
    client_.reset();
    server_.reset();
    listener_.reset();
    client_ch_.reset();
    server_ch_.reset();
    client_qp_.reset();
    server_qp_.reset();
    cq_.reset();
    Conformance::TearDown();
  }

  // The device's own address, port `port`.
  SockAddr addr(std::uint16_t port) const {
    SockAddr a;
    a.ip = gid().raw;
    a.port = port;
    return a;
  }

  // The next event of `ch` ("TYPE/status"), or "none" when none comes (the simulator: nothing
  // left to happen; ibverbs: 5 s).
  std::string next(CmEventChannel& ch, CmEvent& ev) {
    std::error_code err;
    if (on_sim()) {
      err = ch.get_event(ev, Wait::blocking);
    } else {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while ((err = ch.get_event(ev, Wait::nonblocking)) ==
                 std::errc::resource_unavailable_try_again &&
             std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    if (err) return "none:" + errno_name(err);
    std::string s(to_string(ev.type));
    s.erase(0, std::strlen("RDMA_CM_EVENT_"));
    return s + "/" + std::to_string(ev.status);
  }
  std::string next(CmEventChannel& ch) {
    CmEvent ev;
    return next(ch, ev);
  }

  // A listener on `port`.
  void listen(std::uint16_t port) {
    listener_ = server_ch_->create_id();
    listener_->bind_addr(addr(port));
    listener_->listen();
  }
  // The client id with its address and route resolved towards `port`, and its QP (RESET).
  void resolve(std::uint16_t port) {
    client_ = client_ch_->create_id();
    client_->resolve_addr(addr(port));
    CHECK_OBS("addr", next(*client_ch_), "ADDR_RESOLVED/0");
    client_->resolve_route();
    CHECK_OBS("route", next(*client_ch_), "ROUTE_RESOLVED/0");
    CHECK_OBS("on_the_device", client_->device_name() == ctx().info().name, true);
    client_qp_ = make_qp(*cq_, *cq_);
  }
  // The server's side of a request: its id (taken from the event) and QP.
  CmEvent take_request() {
    CmEvent ev;
    CHECK_OBS("request", next(*server_ch_, ev), "CONNECT_REQUEST/0");
    server_ = std::move(ev.new_id);
    if (server_ != nullptr) server_qp_ = make_qp(*cq_, *cq_);
    return ev;
  }
  // listen, resolve, connect, accept; both sides ESTABLISHED.
  void establish(std::uint16_t port) {
    listen(port);
    resolve(port);
    client_->connect(*client_qp_);
    take_request();
    ASSERT_NE(server_, nullptr);
    server_->accept(*server_qp_);
    CHECK_OBS("client", next(*client_ch_), "ESTABLISHED/0");
    CHECK_OBS("server", next(*server_ch_), "ESTABLISHED/0");
  }

  std::unique_ptr<CmEventChannel> client_ch_;
  std::unique_ptr<CmEventChannel> server_ch_;
  std::unique_ptr<CompletionQueue> cq_;
  std::unique_ptr<CmId> listener_;
  std::unique_ptr<CmId> client_;
  std::unique_ptr<CmId> server_;
  std::unique_ptr<QueuePair> client_qp_;
  std::unique_ptr<QueuePair> server_qp_;
};

TEST_P(Cm, ConnectAndAcceptExchangePrivateDataAndEstablish) {
  listen(7471);
  resolve(7471);
  ConnParam c;
  c.private_data = bytes("hello");
  c.responder_resources = 2;
  c.initiator_depth = 3;
  c.retry_count = 5;
  c.rnr_retry_count = 6;
  client_->connect(*client_qp_, c);
  CHECK_OBS("client_qp_after_connect", client_qp_->state(), QpState::init);

  const CmEvent req = take_request();
  ASSERT_NE(server_, nullptr);
  CHECK_OBS("req_id_is_new", req.id == server_.get(), true);
  CHECK_OBS("req_listen_id", req.listen_id == listener_.get(), true);
  CHECK_OBS("req_data_len", req.private_data.size(), kCmConnectDataMax);
  CHECK_OBS("req_data", prefix(req.private_data, 5), "hello");
  // From the server's point of view, as rdma_cm gives them: its responder resources are the
  // client's initiator depth.
  CHECK_OBS("req_params",
            std::to_string(req.param.responder_resources) + "," +
                std::to_string(req.param.initiator_depth) + "," +
                std::to_string(req.param.retry_count) + "," +
                std::to_string(req.param.rnr_retry_count),
            "3,2,5,6");
  CHECK_OBS("req_peer_qp", req.peer_qp_num == client_qp_->qp_num(), true);
  CHECK_OBS("server_on_the_device", server_->device_name() == ctx().info().name, true);
  CHECK_OBS("server_local_port", server_->local_addr().port, 7471);

  ConnParam s;
  s.private_data = bytes("world");
  server_->accept(*server_qp_, s);
  CHECK_OBS("server_qp_after_accept", server_qp_->state(), QpState::rts);

  CmEvent est;
  CHECK_OBS("client_event", next(*client_ch_, est), "ESTABLISHED/0");
  CHECK_OBS("est_data_len", est.private_data.size(), kCmAcceptDataMax);
  CHECK_OBS("est_data", prefix(est.private_data, 5), "world");
  CHECK_OBS("est_peer_qp", est.peer_qp_num == server_qp_->qp_num(), true);
  CHECK_OBS("est_id", est.id == client_.get(), true);
  CHECK_OBS("client_qp", client_qp_->state(), QpState::rts);
  CHECK_OBS("client_id_qp", client_->qp() == client_qp_.get(), true);

  CmEvent sest;
  CHECK_OBS("server_event", next(*server_ch_, sest), "ESTABLISHED/0");
  CHECK_OBS("server_est_data_len", sest.private_data.size(), 0);
  CHECK_OBS("client_peer_port", client_->peer_addr().port, 7471);
}

TEST_P(Cm, AConnectionCarriesSendsAndReadsBothWays) {
  establish(7472);
  // A SEND from the client, and an RDMA READ by the server of the client's memory (the
  // client's QP serves reads: it offered responder resources).
  const Sge rsge = sge(4096, 64);
  CHECK_ERR("recv", server_qp_->post_recv(recv_wr(1, &rsge)).error(), 0);
  std::memset(mem(0), 0x5a, 64);
  const Sge ssge = sge(0, 64);
  CHECK_ERR("send", client_qp_->post_send(send_wr(2, &ssge)).error(), 0);
  CHECK_OBS("send_wcs", summary(poll_n(*cq_, 2)), "2*SUCCESS");
  CHECK_OBS("landed", std::memcmp(mem(0), mem(4096), 64) == 0, true);
  std::memset(mem(8192), 0x33, 64);
  const Sge lsge = sge(12288, 64);
  CHECK_ERR(
      "read",
      server_qp_->post_send(rdma_wr(3, WrOpcode::rdma_read, &lsge, mr().address(8192), mr().rkey()))
          .error(),
      0);
  CHECK_OBS("read_wc", describe(poll_n(*cq_, 1)), "SUCCESS/RDMA_READ/64");
  CHECK_OBS("read_landed", std::memcmp(mem(8192), mem(12288), 64) == 0, true);
}

TEST_P(Cm, TheQpsGetTheNegotiatedAttributes) {
  listen(7473);
  resolve(7473);
  ConnParam c;
  c.retry_count = 5;
  c.rnr_retry_count = 4;
  client_->connect(*client_qp_, c);
  take_request();
  ASSERT_NE(server_, nullptr);
  ConnParam s;
  s.rnr_retry_count = 3;
  server_->accept(*server_qp_, s);
  CHECK_OBS("client", next(*client_ch_), "ESTABLISHED/0");
  const QpAttr ca = client_qp_->query();
  const QpAttr sa = server_qp_->query();
  // Each side's retry counts are the ones the other side asked for; the client's transport
  // retries are its own.
  CHECK_OBS("client_retry_rnr", std::to_string(ca.retry_cnt) + "," + std::to_string(ca.rnr_retry),
            "5,3");
  CHECK_OBS("server_retry_rnr", std::to_string(sa.retry_cnt) + "," + std::to_string(sa.rnr_retry),
            "5,4");
  CHECK_OBS("mtu", static_cast<int>(ca.path_mtu), static_cast<int>(Mtu::mtu_1024));
  CHECK_OBS("timeout", static_cast<int>(ca.timeout), 19);
  CHECK_OBS("server_timeout", static_cast<int>(sa.timeout), 19);
  CHECK_OBS("dest_qp",
            ca.dest_qp_num == server_qp_->qp_num() && sa.dest_qp_num == client_qp_->qp_num(), true);
  CHECK_OBS("psns", ca.sq_psn == sa.rq_psn && sa.sq_psn == ca.rq_psn, true);
  CHECK_OBS("sgid_index", static_cast<int>(ca.ah_attr.grh.sgid_index), gid_index());
  // RoCE v2: rdma_cm gives the path the flow label (client port * 31 + server port) & 0xfffff,
  // and the server learns it from the request.
  const std::uint32_t flow = (client_->local_addr().port * 31u + 7473u) & 0xfffff;
  CHECK_OBS("flow_labels",
            std::to_string(ca.ah_attr.grh.flow_label == flow) + "," +
                std::to_string(sa.ah_attr.grh.flow_label == flow),
            "1,1");
}

TEST_P(Cm, DisconnectTakesThisSideToErrAndTellsThePeer) {
  establish(7474);
  const Sge rsge = sge(0, 64);
  CHECK_ERR("recv", client_qp_->post_recv(recv_wr(9, &rsge)).error(), 0);
  client_->disconnect();
  CHECK_OBS("client_qp", client_qp_->state(), QpState::err);
  CHECK_OBS("flushed", describe(poll_n(*cq_, 1)),
            err_wc(WcStatus::wr_flush_err, WcOpcode::recv, 0));
  CHECK_OBS("server_event", next(*server_ch_), "DISCONNECTED/0");
  CHECK_OBS("server_qp", server_qp_->state(), QpState::rts);
  server_->disconnect();
  CHECK_OBS("server_qp_after", server_qp_->state(), QpState::err);
  CHECK_OBS("client_event", next(*client_ch_), "DISCONNECTED/0");
  CHECK_ERR("again", verb_errno([&] { client_->disconnect(); }), 0);
}

TEST_P(Cm, ARequestToAPortNobodyListensOnIsRejected) {
  resolve(7999);
  client_->connect(*client_qp_);
  CmEvent ev;
  CHECK_OBS("event", next(*client_ch_, ev), "REJECTED/" + std::to_string(kCmRejectNoListener));
  CHECK_OBS("data_len", ev.private_data.size(), kCmRejectDataMax);
  CHECK_OBS("qp", client_qp_->state(), QpState::err);
}

TEST_P(Cm, RejectCarriesItsPrivateData) {
  listen(7475);
  resolve(7475);
  client_->connect(*client_qp_);
  take_request();
  ASSERT_NE(server_, nullptr);
  const auto nope = bytes("nope");
  server_->reject(nope);
  CmEvent ev;
  CHECK_OBS("event", next(*client_ch_, ev), "REJECTED/" + std::to_string(kCmRejectByConsumer));
  CHECK_OBS("data_len", ev.private_data.size(), kCmRejectDataMax);
  CHECK_OBS("data", prefix(ev.private_data, 4), "nope");
  CHECK_OBS("qp", client_qp_->state(), QpState::err);
}

TEST_P(Cm, DestroyingAnUnansweredRequestRejectsIt) {
  listen(7476);
  resolve(7476);
  client_->connect(*client_qp_);
  take_request();
  server_.reset();
  CHECK_OBS("event", next(*client_ch_), "REJECTED/" + std::to_string(kCmRejectByConsumer));
  CHECK_OBS("qp", client_qp_->state(), QpState::err);
}

TEST_P(Cm, TheChannelMayGoBeforeItsIds) {
  establish(7478);
  client_ch_.reset();
  server_ch_.reset();
  client_->disconnect();
  CHECK_OBS("client_qp", client_qp_->state(), QpState::err);
  pass_time(std::chrono::milliseconds(20));
  client_.reset();
  server_.reset();
  listener_.reset();
  CHECK_OBS("server_qp", server_qp_->state(), QpState::rts);
}

TEST_P(Cm, ControlPathErrors) {
  listen(7477);
  {
    auto again = server_ch_->create_id();
    CHECK_ERR("bind_port_in_use", verb_errno([&] { again->bind_addr(addr(7477)); }), EADDRINUSE);
    CHECK_ERR("bind_any_port_in_use",
              verb_errno([&] { again->bind_addr(SockAddr::parse("0.0.0.0:7477")); }),
              EADDRNOTAVAIL);
  }
  {
    auto far = client_ch_->create_id();
    CHECK_ERR("resolve_no_route",
              verb_errno([&] { far->resolve_addr(SockAddr::parse("192.168.77.1:7477")); }),
              ENETUNREACH);
  }
  client_ = client_ch_->create_id();
  client_->resolve_addr(addr(7477));
  CHECK_OBS("addr", next(*client_ch_), "ADDR_RESOLVED/0");
  client_qp_ = make_qp(*cq_, *cq_);
  CHECK_ERR("connect_before_route", verb_errno([&] { client_->connect(*client_qp_); }), EINVAL);
  CHECK_ERR("disconnect_unconnected", verb_errno([&] { client_->disconnect(); }), EINVAL);
  client_->resolve_route();
  CHECK_OBS("route", next(*client_ch_), "ROUTE_RESOLVED/0");
  ConnParam big;
  big.private_data.assign(kCmConnectDataMax + 1, 'x');
  CHECK_ERR("connect_57", verb_errno([&] { client_->connect(*client_qp_, big); }), EINVAL);
  big.private_data.assign(kCmConnectDataMax, 'x');
  CHECK_ERR("connect_56", verb_errno([&] { client_->connect(*client_qp_, big); }), 0);
  take_request();
  ASSERT_NE(server_, nullptr);
  const std::vector<std::uint8_t> long_rej(kCmRejectDataMax + 1, 'z');
  CHECK_ERR("reject_149", verb_errno([&] { server_->reject(long_rej); }), EINVAL);
  CHECK_ERR("reject", verb_errno([&] { server_->reject(); }), 0);
  CHECK_OBS("event", next(*client_ch_), "REJECTED/" + std::to_string(kCmRejectByConsumer));
}

// More private data than a REP carries: rdma_accept fails with EINVAL, and the kernel rejects the
// request (the client's REJECTED, 28) and librdmacm takes the server's QP to ERR.
TEST_P(Cm, AnAcceptWithTooMuchPrivateDataRejectsTheRequest) {
  listen(7479);
  client_ = client_ch_->create_id();
  client_->resolve_addr(addr(7479));
  CHECK_OBS("addr", next(*client_ch_), "ADDR_RESOLVED/0");
  client_->resolve_route();
  CHECK_OBS("route", next(*client_ch_), "ROUTE_RESOLVED/0");
  client_qp_ = make_qp(*cq_, *cq_);
  client_->connect(*client_qp_);
  take_request();
  ASSERT_NE(server_, nullptr);
  modify_to_init(*server_qp_);  // as rdma_create_qp leaves it (from RESET it could not go to ERR)
  ConnParam huge;
  huge.private_data.assign(kCmAcceptDataMax + 1, 'y');
  CHECK_ERR("accept_197", verb_errno([&] { server_->accept(*server_qp_, huge); }), EINVAL);
  CHECK_OBS("server_qp", server_qp_->state(), QpState::err);
  CHECK_OBS("event", next(*client_ch_), "REJECTED/" + std::to_string(kCmRejectByConsumer));
  CHECK_OBS("client_qp", client_qp_->state(), QpState::err);
  CHECK_ERR("accept_again", verb_errno([&] { server_->accept(*server_qp_); }), EINVAL);
}

// rdma_migrate_id: a migrated id's events, the one already pending included, come on its new
// channel; a migrated listener's requests too, and the connection's id belongs to the channel
// that took the request.
TEST_P(Cm, AMigratedIdGetsItsEventsOnItsNewChannel) {
  listen(7486);
  auto client_ch2 = backend().create_cm_channel();
  auto server_ch2 = backend().create_cm_channel();
  listener_->migrate(*server_ch2);
  client_ = client_ch_->create_id();
  client_->resolve_addr(addr(7486));
  CHECK_OBS("addr", next(*client_ch_), "ADDR_RESOLVED/0");
  client_->resolve_route();
  pass_time(std::chrono::milliseconds(50));  // ROUTE_RESOLVED is pending on the old channel
  client_->migrate(*client_ch2);
  CHECK_OBS("route", next(*client_ch2), "ROUTE_RESOLVED/0");
  client_qp_ = make_qp(*cq_, *cq_);
  client_->connect(*client_qp_);
  CmEvent req;
  CHECK_OBS("request", next(*server_ch2, req), "CONNECT_REQUEST/0");
  ASSERT_NE(req.new_id, nullptr);
  server_ = std::move(req.new_id);
  server_qp_ = make_qp(*cq_, *cq_);
  server_->accept(*server_qp_);
  CHECK_OBS("client", next(*client_ch2), "ESTABLISHED/0");
  CHECK_OBS("server", next(*server_ch2), "ESTABLISHED/0");
  CmEvent none;
  CHECK_OBS("old_channels_empty",
            !client_ch_->get_event(none, Wait::nonblocking) ||
                !server_ch_->get_event(none, Wait::nonblocking),
            false);
  server_.reset();
  client_.reset();
  listener_.reset();
}

// When a disconnect has completed, each side's id stays in timewait (2 s on RoCE, so that late
// packets of the connection die out) and then gets TIMEWAIT_EXIT.
TEST_P(Cm, ADisconnectEndsInTimewaitExitOnBothSides) {
  establish(7485);
  client_->disconnect();
  CHECK_OBS("server", next(*server_ch_), "DISCONNECTED/0");
  server_->disconnect();
  CHECK_OBS("client", next(*client_ch_), "DISCONNECTED/0");
  CHECK_OBS("client_timewait", next(*client_ch_), "TIMEWAIT_EXIT/0");
  CHECK_OBS("server_timewait", next(*server_ch_), "TIMEWAIT_EXIT/0");
}

// A connection of QPs the programs move themselves (librdmacm without rdma_create_qp):
// init_qp_attr gives each step's attributes, the reply comes as CONNECT_RESPONSE, establish()
// sends the RTU. Values as rdma_cm gives them on rxe; the PSNs are checked against each other.
TEST_P(Cm, AProgramsOwnQpConnectsThroughInitQpAttr) {
  listen(7480);
  resolve(7480);
  auto step = [](CmId& id, QueuePair& qp, QpState state, QpAttr& a) {
    const QpAttrMask m = id.init_qp_attr(state, a);
    qp.modify(a, m);
    return std::to_string(static_cast<std::uint32_t>(m));
  };
  QpAttr a;
  std::string mask;  // step()'s, taken before the observation reads `a`
  mask = step(*client_, *client_qp_, QpState::init, a);
  CHECK_OBS("client_init",
            mask + "," + std::to_string(a.port_num) + "," +
                std::to_string(static_cast<unsigned>(a.qp_access_flags)),
            "57,1,0");
  ConnParam c;
  c.private_data = bytes("hi");
  c.responder_resources = 2;
  c.initiator_depth = 3;
  c.retry_count = 5;
  c.rnr_retry_count = 6;
  client_->connect_own_qp(client_qp_->qp_num(), c);
  CHECK_OBS("client_qp_untouched", client_qp_->state(), QpState::init);
  CmEvent req;
  CHECK_OBS("request", next(*server_ch_, req), "CONNECT_REQUEST/0");
  ASSERT_NE(req.new_id, nullptr);
  server_ = std::move(req.new_id);
  server_qp_ = make_qp(*cq_, *cq_);
  CHECK_OBS("req_peer_qp", req.peer_qp_num == client_qp_->qp_num(), true);
  mask = step(*server_, *server_qp_, QpState::init, a);
  CHECK_OBS("server_init", mask + "," + std::to_string(static_cast<unsigned>(a.qp_access_flags)),
            "57,14");
  mask = step(*server_, *server_qp_, QpState::rtr, a);
  CHECK_OBS("server_rtr",
            mask + "," + std::to_string(static_cast<int>(a.path_mtu)) + "," +
                std::to_string(a.dest_qp_num == client_qp_->qp_num()) + "," +
                std::to_string(a.max_dest_rd_atomic) + "," + std::to_string(a.min_rnr_timer) + "," +
                std::to_string(a.ah_attr.is_global) + "," +
                std::to_string(a.ah_attr.grh.dgid == gid()) + "," +
                std::to_string(a.ah_attr.grh.hop_limit),
            "1216897,3,1,3,0,1,1,64");
  const std::uint32_t server_rq_psn = a.rq_psn;
  mask = step(*server_, *server_qp_, QpState::rts, a);
  CHECK_OBS("server_rts",
            mask + "," + std::to_string(a.timeout) + "," + std::to_string(a.retry_cnt) + "," +
                std::to_string(a.rnr_retry) + "," + std::to_string(a.max_rd_atomic),
            "77313,19,5,6,2");
  const std::uint32_t server_sq_psn = a.sq_psn;
  ConnParam sp;
  sp.private_data = bytes("ok");
  sp.responder_resources = 3;
  sp.initiator_depth = 2;
  server_->accept_own_qp(server_qp_->qp_num(), sp);

  CmEvent resp;
  CHECK_OBS("response", next(*client_ch_, resp), "CONNECT_RESPONSE/0");
  CHECK_OBS("resp_data",
            std::to_string(resp.private_data.size()) + "," + prefix(resp.private_data, 2),
            "196,ok");
  CHECK_OBS("resp_peer_qp", resp.peer_qp_num == server_qp_->qp_num(), true);
  CHECK_OBS("resp_depths",
            std::to_string(resp.param.responder_resources) + "," +
                std::to_string(resp.param.initiator_depth),
            "2,3");
  mask = step(*client_, *client_qp_, QpState::rtr, a);
  CHECK_OBS("client_rtr",
            mask + "," + std::to_string(a.dest_qp_num == server_qp_->qp_num()) + "," +
                std::to_string(a.rq_psn == server_sq_psn) + "," +
                std::to_string(a.max_dest_rd_atomic),
            "1216897,1,1,2");
  mask = step(*client_, *client_qp_, QpState::rts, a);
  CHECK_OBS("client_rts",
            mask + "," + std::to_string(a.sq_psn == server_rq_psn) + "," +
                std::to_string(a.timeout) + "," + std::to_string(a.retry_cnt) + "," +
                std::to_string(a.rnr_retry) + "," + std::to_string(a.max_rd_atomic),
            "77313,1,19,5,7,3");
  pass_time(std::chrono::milliseconds(50));
  CmEvent none;
  CHECK_OBS("server_event_before_establish", !server_ch_->get_event(none, Wait::nonblocking),
            false);
  client_->establish();
  CHECK_OBS("server_event", next(*server_ch_), "ESTABLISHED/0");
  pass_time(std::chrono::milliseconds(50));
  CHECK_OBS("client_event_after_establish", !client_ch_->get_event(none, Wait::nonblocking), false);

  const Sge rs = sge(4096, 64);
  CHECK_ERR("recv", server_qp_->post_recv(recv_wr(1, &rs)).error(), 0);
  const Sge ss = sge(0, 64);
  CHECK_ERR("send", client_qp_->post_send(send_wr(2, &ss)).error(), 0);
  CHECK_OBS("wcs", summary(poll_n(*cq_, 2)), "2*SUCCESS");

  client_->disconnect();
  CHECK_OBS("client_qp_after_disconnect", client_qp_->state(), QpState::rts);
  CHECK_OBS("server_disconnected", next(*server_ch_), "DISCONNECTED/0");
  server_->disconnect();
  CHECK_OBS("client_disconnected", next(*client_ch_), "DISCONNECTED/0");
  CHECK_OBS("server_qp_after_disconnect", server_qp_->state(), QpState::rts);
}

// Before connect there is no IB CM id yet, and rdma_cm answers init_qp_attr for RTR and RTS
// as for INIT (the state asked, INIT's mask; RTR's rq_psn, outside the mask, is the PSN this
// side will receive with: the server sends with it). Once the request is out and until the
// reply, RTR and RTS are EINVAL.
TEST_P(Cm, InitQpAttrBeforeTheReplyKnowsNoPeer) {
  listen(7482);
  resolve(7482);
  auto attrs = [&](QpState state, QpAttr& a) {
    const QpAttrMask m = client_->init_qp_attr(state, a);
    return std::to_string(static_cast<std::uint32_t>(m)) + "," + std::string(to_string(a.qp_state)) +
           "," + std::to_string(a.port_num) + "," + std::to_string(a.pkey_index) + "," +
           std::to_string(static_cast<unsigned>(a.qp_access_flags));
  };
  QpAttr rtr;
  CHECK_OBS("rtr_before_connect", attrs(QpState::rtr, rtr), "57,RTR,1,0,0");
  QpAttr rts;
  CHECK_OBS("rts_before_connect", attrs(QpState::rts, rts), "57,RTS,1,0,0");
  QpAttr init;
  client_qp_->modify(init, client_->init_qp_attr(QpState::init, init));
  client_->connect_own_qp(client_qp_->qp_num(), ConnParam{});
  QpAttr scratch;
  CHECK_ERR("rtr_after_connect",
            verb_errno([&] { client_->init_qp_attr(QpState::rtr, scratch); }), EINVAL);
  CHECK_ERR("rts_after_connect",
            verb_errno([&] { client_->init_qp_attr(QpState::rts, scratch); }), EINVAL);
  CmEvent req;
  CHECK_OBS("request", next(*server_ch_, req), "CONNECT_REQUEST/0");
  ASSERT_NE(req.new_id, nullptr);
  QpAttr server_rts;
  req.new_id->init_qp_attr(QpState::rts, server_rts);
  CHECK_OBS("server_sends_with_the_clients_rq_psn", server_rts.sq_psn == rtr.rq_psn, true);
  req.new_id->reject();
}

// UD services (PortSpace::udp, SIDR): the client learns the server's QP number, Q_Key and
// address; nothing is connected.
class CmUd : public Cm {
 protected:
  std::unique_ptr<QueuePair> ud_qp() { return make_qp(*cq_, *cq_, {16, 16, 1, 1, 0}, QpType::ud); }
  void listen_ud(std::uint16_t port) {
    listener_ = server_ch_->create_id(PortSpace::udp);
    listener_->bind_addr(addr(port));
    listener_->listen();
  }
  void resolve_ud(std::uint16_t port) {
    client_ = client_ch_->create_id(PortSpace::udp);
    client_->resolve_addr(addr(port));
    CHECK_OBS("addr", next(*client_ch_), "ADDR_RESOLVED/0");
    client_->resolve_route();
    CHECK_OBS("route", next(*client_ch_), "ROUTE_RESOLVED/0");
    client_qp_ = ud_qp();
  }
  // Whether `ch` has an event 50 ms from now.
  bool has_event(CmEventChannel& ch) {
    pass_time(std::chrono::milliseconds(50));
    CmEvent ev;
    return !ch.get_event(ev, Wait::nonblocking);
  }
};

TEST_P(CmUd, TheServerAnswersWithItsQpQkeyAndAddress) {
  listen_ud(7481);
  resolve_ud(7481);
  ConnParam c;
  c.private_data = bytes("hello");
  client_->connect(*client_qp_, c);
  const QpAttr ca = client_qp_->query();
  CHECK_OBS("client_qp", ca.qp_state, QpState::rts);
  CHECK_OBS("client_qkey_is_rdma_cm_s", ca.qkey == kCmUdpQkey, true);

  CmEvent req;
  CHECK_OBS("request", next(*server_ch_, req), "CONNECT_REQUEST/0");
  ASSERT_NE(req.new_id, nullptr);
  server_ = std::move(req.new_id);
  CHECK_OBS("req_data_len", req.private_data.size(), kCmUdConnectDataMax);
  CHECK_OBS("req_data", prefix(req.private_data, 5), "hello");
  CHECK_OBS("req_peer_qp", req.peer_qp_num, 0);
  server_qp_ = ud_qp();
  ConnParam sp;
  sp.private_data = bytes("world");
  server_->accept(*server_qp_, sp);
  CHECK_OBS("server_qp", server_qp_->state(), QpState::rts);

  CmEvent est;
  CHECK_OBS("client_event", next(*client_ch_, est), "ESTABLISHED/0");
  CHECK_OBS("est_data_len", est.private_data.size(), kCmUdAcceptDataMax);
  CHECK_OBS("est_data", prefix(est.private_data, 5), "world");
  CHECK_OBS("est_peer_qp", est.peer_qp_num == server_qp_->qp_num(), true);
  CHECK_OBS("est_qkey_is_rdma_cm_s", est.qkey == kCmUdpQkey, true);
  CHECK_OBS(
      "est_ah",
      std::to_string(est.ah_attr.is_global) + "," + std::to_string(est.ah_attr.grh.dgid == gid()) +
          "," + std::to_string(est.ah_attr.grh.sgid_index == gid_index()) + "," +
          std::to_string(est.ah_attr.grh.hop_limit) + "," + std::to_string(est.ah_attr.port_num),
      "1,1,1,64,1");
  CHECK_OBS("est_flow_label",
            est.ah_attr.grh.flow_label == ((client_->local_addr().port * 31u + 7481u) & 0xfffff),
            true);
  CHECK_OBS("server_event_after_accept", has_event(*server_ch_), false);

  // A datagram to the address the CM gave.
  auto ah = pd().create_ah(est.ah_attr);
  const Sge rs = sge(4096, 40 + 64);
  CHECK_ERR("recv", server_qp_->post_recv(recv_wr(1, &rs)).error(), 0);
  const Sge ss = sge(0, 64);
  SendWr wr = send_wr(2, &ss);
  wr.ah = ah.get();
  wr.remote_qpn = est.peer_qp_num;
  wr.remote_qkey = est.qkey;
  CHECK_ERR("send", client_qp_->post_send(wr).error(), 0);
  const std::vector<WorkCompletion> wcs = poll_n(*cq_, 2);
  CHECK_OBS("wcs", summary(wcs), "2*SUCCESS");
  bool from_client = false;
  for (const WorkCompletion& wc : wcs) {
    if (wc.opcode == WcOpcode::recv) from_client = wc.src_qp == client_qp_->qp_num();
  }
  CHECK_OBS("from_client", from_client, true);
  client_->disconnect();  // no connection: only the QP goes to ERR
  CHECK_OBS("client_qp_after_disconnect", client_qp_->state(), QpState::err);
  server_.reset();
  ah.reset();
}

// librdmacm's rdma_create_qp takes a UD QP to RTS (Q_Key kCmUdpQkey, send PSN 0) before
// rdma_connect or rdma_accept, which then leave it alone: so do connect and accept.
TEST_P(CmUd, AQpAlreadyInRtsIsLeftAsItIs) {
  listen_ud(7484);
  resolve_ud(7484);
  ConnectOptions o;
  o.qkey = kCmUdpQkey;
  verbsim::connect(*client_qp_, 0, Endpoint{}, o);
  client_->connect(*client_qp_);
  CHECK_OBS("client_qp", client_qp_->state(), QpState::rts);
  CmEvent req;
  CHECK_OBS("request", next(*server_ch_, req), "CONNECT_REQUEST/0");
  ASSERT_NE(req.new_id, nullptr);
  server_ = std::move(req.new_id);
  server_qp_ = ud_qp();
  verbsim::connect(*server_qp_, 0, Endpoint{}, o);
  server_->accept(*server_qp_);
  CHECK_OBS("server_qp", server_qp_->state(), QpState::rts);
  CmEvent est;
  CHECK_OBS("client_event", next(*client_ch_, est), "ESTABLISHED/0");
  CHECK_OBS("est_peer_qp", est.peer_qp_num == server_qp_->qp_num(), true);
  server_.reset();
}

TEST_P(CmUd, ARefusedRequestIsUnreachableAndLeavesTheQpAlone) {
  resolve_ud(7999);
  client_->connect(*client_qp_);
  CmEvent ev;
  CHECK_OBS("no_listener", next(*client_ch_, ev),
            "UNREACHABLE/" + std::to_string(kCmSidrNoListener));
  CHECK_OBS("no_listener_data_len", ev.private_data.size(), kCmUdAcceptDataMax);
  CHECK_OBS("qp", client_qp_->state(), QpState::rts);

  listen_ud(7482);
  auto again = [&] {
    client_ = client_ch_->create_id(PortSpace::udp);
    client_->resolve_addr(addr(7482));
    (void)next(*client_ch_);
    client_->resolve_route();
    (void)next(*client_ch_);
    client_qp_ = ud_qp();
    client_->connect(*client_qp_);
    CmEvent req;
    CHECK_OBS("request", next(*server_ch_, req), "CONNECT_REQUEST/0");
    return std::move(req.new_id);
  };
  auto request = again();
  ASSERT_NE(request, nullptr);
  const auto nope = bytes("nope");
  request->reject(nope);
  CHECK_OBS("rejected", next(*client_ch_, ev), "UNREACHABLE/" + std::to_string(kCmSidrRejected));
  CHECK_OBS("rejected_data", prefix(ev.private_data, 4), "nope");
  CHECK_OBS("rejected_qp", client_qp_->state(), QpState::rts);
  request.reset();

  request = again();
  ASSERT_NE(request, nullptr);
  request.reset();  // destroyed unanswered
  CHECK_OBS("dropped", next(*client_ch_), "UNREACHABLE/" + std::to_string(kCmSidrRejected));
}

TEST_P(CmUd, ErrorsAndPortSpaces) {
  listen_ud(7483);
  {
    auto tcp = server_ch_->create_id();
    CHECK_ERR("tcp_same_port", verb_errno([&] { tcp->bind_addr(addr(7483)); }), 0);
    auto udp = server_ch_->create_id(PortSpace::udp);
    CHECK_ERR("udp_same_port", verb_errno([&] { udp->bind_addr(addr(7483)); }), EADDRINUSE);
  }
  resolve_ud(7483);
  auto rc = make_qp(*cq_, *cq_);
  CHECK_ERR("rc_qp", verb_errno([&] { client_->connect(*rc); }), EINVAL);
  ConnParam big;
  big.private_data.assign(kCmUdConnectDataMax + 1, 'x');
  CHECK_ERR("connect_181", verb_errno([&] { client_->connect(*client_qp_, big); }), EINVAL);
  big.private_data.assign(kCmUdConnectDataMax, 'x');
  CHECK_ERR("connect_180", verb_errno([&] { client_->connect(*client_qp_, big); }), 0);
  CmEvent req;
  CHECK_OBS("request", next(*server_ch_, req), "CONNECT_REQUEST/0");
  ASSERT_NE(req.new_id, nullptr);
  server_ = std::move(req.new_id);
  server_qp_ = ud_qp();
  ConnParam huge;
  huge.private_data.assign(kCmUdAcceptDataMax + 1, 'y');
  CHECK_ERR("accept_137", verb_errno([&] { server_->accept(*server_qp_, huge); }), EINVAL);
  // The kernel refused the request with it (SIDR status 2), as a rejection.
  CHECK_OBS("client_event", next(*client_ch_), "UNREACHABLE/" + std::to_string(kCmSidrRejected));
  CHECK_ERR("accept_after", verb_errno([&] { server_->accept(*server_qp_); }), EINVAL);
  client_.reset();
  server_.reset();
}

VERBSIM_CONFORMANCE_SUITE(Cm);
VERBSIM_CONFORMANCE_SUITE(CmUd);

}  // namespace
}  // namespace verbsim::conformance
