// The simulator's connection manager beyond what the conformance suite checks against rxe:
// two devices, lost messages and their retransmission, timeouts, determinism, fibers, and the
// channel's fd. Virtual time makes the CM's timeouts (seconds) free to wait for.
#include <gtest/gtest.h>
#include <poll.h>

#include <cerrno>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "../support/sim_pair.hpp"
#include "verbsim/sim/simulation.hpp"
#include "verbsim/sim/world.hpp"
#include "verbsim/verbsim.hpp"

namespace verbsim {
namespace {

constexpr std::uint64_t kResponseTimeoutNs = 4'294'967'296;  // rdma_cm's CM response timeout

std::string kind(const CmEvent& ev) {
  std::string s(to_string(ev.type));
  return s.substr(std::strlen("RDMA_CM_EVENT_")) + "/" + std::to_string(ev.status);
}

// One side of a connection: its device's resources and a QP in RESET (make_side of
// tests/support/sim_pair.hpp, not connected).
using testing::Side;
std::unique_ptr<Side> side(sim::World& world, const char* device) {
  return std::make_unique<Side>(testing::make_side(world, device, testing::PairOptions{}));
}

// A world of two devices: a server listening on sim0's address, port 7471, and a client on
// sim1. Members are destroyed in reverse order: ids, then channels, then the sides' QPs, then
// the world.
class CmSim : public ::testing::Test {
 protected:
  void make(std::string_view faults = {}, std::uint64_t seed = 1) {
    sim::Config config;
    config.devices = 2;
    config.seed = seed;
    if (!faults.empty()) config.faults = sim::FaultPlan::parse(faults);
    world = std::make_unique<sim::World>(config);
    server = side(*world, "sim0");
    client = side(*world, "sim1");
    server_ch = world->create_cm_channel();
    client_ch = world->create_cm_channel();
    listener = server_ch->create_id();
    listener->bind_addr(SockAddr::parse("10.0.0.1:7471"));
    listener->listen();
  }
  CmEvent next(CmEventChannel& ch) {
    CmEvent ev;
    const std::error_code err = ch.get_event(ev, Wait::blocking);
    EXPECT_FALSE(err) << err.message();
    return ev;
  }
  // The client bound to sim1's address, resolved towards the server and connected.
  void connect(const char* to = "10.0.0.1:7471") {
    client_id = client_ch->create_id();
    client_id->bind_addr(SockAddr::parse("10.0.1.1:0"));
    client_id->resolve_addr(SockAddr::parse(to));
    EXPECT_EQ(kind(next(*client_ch)), "ADDR_RESOLVED/0");
    client_id->resolve_route();
    EXPECT_EQ(kind(next(*client_ch)), "ROUTE_RESOLVED/0");
    client_id->connect(*client->qp);
  }
  // make(), connect() and accept(), and both sides' ESTABLISHED.
  void make_connected() {
    make();
    connect();
    accept();
    EXPECT_EQ(kind(next(*client_ch)), "ESTABLISHED/0");
    EXPECT_EQ(kind(next(*server_ch)), "ESTABLISHED/0");
  }
  void accept() {
    CmEvent req = next(*server_ch);
    ASSERT_EQ(kind(req), "CONNECT_REQUEST/0");
    server_id = std::move(req.new_id);
    server_id->accept(*server->qp);
  }

  std::unique_ptr<sim::World> world;
  std::unique_ptr<Side> server;
  std::unique_ptr<Side> client;
  std::unique_ptr<CmEventChannel> server_ch;
  std::unique_ptr<CmEventChannel> client_ch;
  std::unique_ptr<CmId> listener;
  std::unique_ptr<CmId> server_id;
  std::unique_ptr<CmId> client_id;
};

TEST_F(CmSim, TwoDevicesConnectThroughTheBoundAddress) {
  make();
  connect();
  EXPECT_EQ(client_id->device_name(), "sim1");
  EXPECT_EQ(client_id->local_addr().to_string().rfind("10.0.1.1:", 0), 0u);
  accept();
  EXPECT_EQ(server_id->device_name(), "sim0");
  EXPECT_EQ(server_id->peer_addr(), client_id->local_addr());
  EXPECT_EQ(kind(next(*client_ch)), "ESTABLISHED/0");
  EXPECT_EQ(kind(next(*server_ch)), "ESTABLISHED/0");
  // The server reads the client's buffer.
  std::memset(client->buf.data(), 0x42, 64);
  const Sge local = server->mr->sge(0, 64);
  SendWr wr;
  wr.wr_id = 1;
  wr.opcode = WrOpcode::rdma_read;
  wr.flags = SendFlags::signaled;
  wr.sg_list = {&local, 1};
  wr.remote_addr = client->mr->address(0);
  wr.rkey = client->mr->rkey();
  ASSERT_TRUE(server->qp->post_send({&wr, 1}));
  WorkCompletion wc[1];
  while (server->cq->poll(wc).count == 0) ASSERT_TRUE(world->step());
  EXPECT_EQ(wc[0].status, WcStatus::success);
  EXPECT_EQ(std::memcmp(server->buf.data(), client->buf.data(), 64), 0);
}

TEST_F(CmSim, ALostRequestIsSentAgainAfterTheResponseTimeout) {
  // sim0's port is down when the REQ arrives and back up before the client's timeout.
  make("link_down dev=sim0 port=1 at=0us for=1s");
  connect();
  accept();
  EXPECT_EQ(kind(next(*client_ch)), "ESTABLISHED/0");
  EXPECT_GE(world->now(), kResponseTimeoutNs);
  EXPECT_LT(world->now(), 2 * kResponseTimeoutNs);
}

TEST_F(CmSim, ARequestNeverAnsweredIsUnreachableAfterFifteenRetries) {
  make("link_down dev=sim0 port=1 at=0us");
  connect();
  const CmEvent ev = next(*client_ch);
  EXPECT_EQ(kind(ev), "UNREACHABLE/" + std::to_string(-ETIMEDOUT));
  EXPECT_EQ(ev.id, client_id.get());
  EXPECT_EQ(world->now(), 16 * kResponseTimeoutNs);
  EXPECT_EQ(client->qp->state(), QpState::err);
}

TEST_F(CmSim, ALostReplyIsSentAgainWhenTheRequestIs) {
  make("cm_drop msg=rep nth=1");
  connect();
  accept();
  EXPECT_EQ(kind(next(*client_ch)), "ESTABLISHED/0");
  EXPECT_EQ(kind(next(*server_ch)), "ESTABLISHED/0");
  // The client's REQ timer ran out first; the server answered the repeated REQ with its REP.
  EXPECT_GE(world->now(), kResponseTimeoutNs);
  EXPECT_LT(world->now(), 2 * kResponseTimeoutNs);
}

TEST_F(CmSim, ALostRtuLeavesTheServerWaitingUntilTheClientAnswersTheRepeatedReply) {
  make("cm_drop msg=rtu nth=1");
  connect();
  accept();
  EXPECT_EQ(kind(next(*client_ch)), "ESTABLISHED/0");
  EXPECT_EQ(kind(next(*server_ch)), "ESTABLISHED/0");
  EXPECT_GE(world->now(), kResponseTimeoutNs);
}

TEST_F(CmSim, ADisconnectEndsAServerStillWaitingForItsRtu) {
  make("cm_drop msg=rtu p=1");
  connect();
  accept();
  EXPECT_EQ(kind(next(*client_ch)), "ESTABLISHED/0");
  client_id->disconnect();
  // The server never saw an RTU; the DREQ ends its wait without ESTABLISHED.
  EXPECT_EQ(kind(next(*server_ch)), "DISCONNECTED/0");
  server_id->disconnect();
  EXPECT_EQ(kind(next(*client_ch)), "DISCONNECTED/0");
}

TEST_F(CmSim, EveryRequestLostIsUnreachable) {
  make("cm_drop msg=req p=1");
  connect();
  EXPECT_EQ(kind(next(*client_ch)), "UNREACHABLE/" + std::to_string(-ETIMEDOUT));
  EXPECT_EQ(client->qp->state(), QpState::err);
}

TEST_F(CmSim, AnUnansweredDisconnectTimesOut) {
  make_connected();
  client_id->disconnect();
  EXPECT_EQ(kind(next(*server_ch)), "DISCONNECTED/0");
  // The server never disconnects in turn.
  EXPECT_EQ(kind(next(*client_ch)), "DISCONNECTED/" + std::to_string(-ETIMEDOUT));
  EXPECT_EQ(server->qp->state(), QpState::rts);
}

// Each side's TIMEWAIT_EXIT comes 2048 ms after its disconnect completed (the IB CM's timewait
// of a RoCE path).
TEST_F(CmSim, TimewaitExitComesTwoSecondsAfterTheDisconnect) {
  make_connected();
  client_id->disconnect();
  EXPECT_EQ(kind(next(*server_ch)), "DISCONNECTED/0");
  server_id->disconnect();  // the DREP: the server's disconnect is complete
  const std::uint64_t server_done = world->now();
  EXPECT_EQ(kind(next(*client_ch)), "DISCONNECTED/0");
  const std::uint64_t client_done = world->now();
  EXPECT_EQ(kind(next(*server_ch)), "TIMEWAIT_EXIT/0");
  EXPECT_EQ(world->now() - server_done, 2'048'000'000u);
  EXPECT_EQ(kind(next(*client_ch)), "TIMEWAIT_EXIT/0");
  EXPECT_EQ(world->now() - client_done, 2'048'000'000u);
}

// A DREQ nobody answers: DISCONNECTED -ETIMEDOUT, then TIMEWAIT_EXIT; a destroyed id: none.
TEST_F(CmSim, TimewaitExitFollowsAnUnansweredDisconnectButNotADestroyedId) {
  make_connected();
  client_id->disconnect();
  EXPECT_EQ(kind(next(*server_ch)), "DISCONNECTED/0");
  EXPECT_EQ(kind(next(*client_ch)), "DISCONNECTED/" + std::to_string(-ETIMEDOUT));
  EXPECT_EQ(kind(next(*client_ch)), "TIMEWAIT_EXIT/0");
  server_id->disconnect();
  server_id.reset();
  world->run_until_idle();
  CmEvent ev;
  EXPECT_EQ(server_ch->get_event(ev, Wait::nonblocking), std::errc::resource_unavailable_try_again);
}

TEST_F(CmSim, DestroyingAConnectedIdDisconnectsThePeer) {
  make_connected();
  server_id.reset();
  EXPECT_EQ(kind(next(*client_ch)), "DISCONNECTED/0");
  client_id->disconnect();
  EXPECT_EQ(client->qp->state(), QpState::err);
}

TEST_F(CmSim, AnAddressNobodyHasFailsAtTheResolveTimeout) {
  make();
  auto id = client_ch->create_id();
  id->resolve_addr(SockAddr::parse("10.0.7.7:7471"), 500);
  const std::uint64_t start = world->now();
  EXPECT_EQ(kind(next(*client_ch)), "ADDR_ERROR/" + std::to_string(-ETIMEDOUT));
  EXPECT_EQ(world->now() - start, 500'000'000u);
  EXPECT_EQ(id->device_name(), "");
}

TEST_F(CmSim, BindingAnAddressNoPortHasIsEaddrnotavail) {
  make();
  auto id = client_ch->create_id();
  try {
    id->bind_addr(SockAddr::parse("10.0.9.1:1"));
    FAIL() << "bind_addr succeeded";
  } catch (const VerbError& e) {
    EXPECT_EQ(e.code().value(), EADDRNOTAVAIL);
    EXPECT_NE(std::string(e.what()).find("rdma_bind_addr"), std::string::npos) << e.what();
  }
}

TEST_F(CmSim, BlockingWithNothingToComeIsEdeadlk) {
  make();
  CmEvent ev;
  EXPECT_EQ(client_ch->get_event(ev, Wait::blocking).value(), EDEADLK);
  EXPECT_EQ(client_ch->get_event(ev, Wait::nonblocking).value(), EAGAIN);
}

TEST_F(CmSim, TheFdPollsReadableWhileAnEventIsPending) {
  make();
  auto id = client_ch->create_id();
  pollfd p{client_ch->fd(), POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 0), 0);
  id->resolve_addr(SockAddr::parse("10.0.0.1:7471"));
  EXPECT_EQ(::poll(&p, 1, 0), 1);
  CmEvent ev;
  EXPECT_FALSE(client_ch->get_event(ev, Wait::nonblocking));
  EXPECT_EQ(::poll(&p, 1, 0), 0);
}

TEST_F(CmSim, ARequestLeftInAClosedChannelIsRejected) {
  make();
  connect();
  world->run_until(world->now() + 10'000);  // the REQ arrives
  listener.reset();
  server_ch.reset();
  EXPECT_EQ(kind(next(*client_ch)), "REJECTED/28");
}

TEST_F(CmSim, AQpDestroyedBeforeItsIdIsLeftAlone) {
  make();
  connect();
  client->qp.reset();  // against cm.hpp's advice: the REJECTED below must not touch it
  CmEvent req = next(*server_ch);
  ASSERT_EQ(kind(req), "CONNECT_REQUEST/0");
  req.new_id->reject();
  EXPECT_EQ(kind(next(*client_ch)), "REJECTED/28");
  EXPECT_EQ(client_id->qp(), nullptr);
}

TEST_F(CmSim, AChannelMayGoBeforeItsIds) {
  make();
  connect();
  accept();
  EXPECT_EQ(kind(next(*client_ch)), "ESTABLISHED/0");
  client_ch.reset();
  server_ch.reset();
  // With no channel to report to, the ids still do their part of the protocol: the DREQ is
  // answered and both ends reach TIMEWAIT, only the events are dropped.
  client_id->disconnect();
  EXPECT_EQ(client->qp->state(), QpState::err);
  world->run_until(world->now() + 1'000'000);
  EXPECT_EQ(client->qp->state(), QpState::err);
  EXPECT_EQ(server->qp->state(), QpState::rts);  // left to the program, as librdmacm does
  world->run_until_idle();  // the time-wait timers end too
  client_id.reset();
  server_id.reset();
  listener.reset();
  EXPECT_TRUE(world->accounting().balanced());
}

TEST_F(CmSim, OneListenerServesManyClients) {
  make();
  constexpr int kClients = 40;
  std::vector<std::unique_ptr<CmId>> ids;
  std::vector<std::unique_ptr<QueuePair>> qps;
  auto rc_qp = [](Side& s) {
    QpInitAttr init;
    init.type = QpType::rc;
    init.send_cq = s.cq.get();
    init.recv_cq = s.cq.get();
    init.cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1};
    return s.pd->create_qp(init);
  };
  for (int i = 0; i < kClients; ++i) {
    ids.push_back(client_ch->create_id());
    ids.back()->bind_addr(SockAddr::parse("10.0.1.1:0"));
    ids.back()->resolve_addr(SockAddr::parse("10.0.0.1:7471"));
  }
  std::vector<std::unique_ptr<CmId>> accepted;
  std::vector<std::unique_ptr<QueuePair>> server_qps;
  int established = 0;
  int server_established = 0;
  CmEvent ev;
  while (established < kClients || server_established < kClients) {
    if (!client_ch->get_event(ev, Wait::nonblocking)) {
      if (ev.type == CmEventType::addr_resolved) {
        ev.id->resolve_route();
      } else if (ev.type == CmEventType::route_resolved) {
        qps.push_back(rc_qp(*client));
        ev.id->connect(*qps.back());
      } else {
        ASSERT_EQ(kind(ev), "ESTABLISHED/0");
        ++established;
      }
    }
    if (!server_ch->get_event(ev, Wait::nonblocking)) {
      if (ev.type == CmEventType::connect_request) {
        server_qps.push_back(rc_qp(*server));
        ev.new_id->accept(*server_qps.back());
        accepted.push_back(std::move(ev.new_id));
      } else {
        ASSERT_EQ(kind(ev), "ESTABLISHED/0");
        ++server_established;
      }
    }
  }
  // Every client has its own port and its own server-side QP.
  std::set<std::uint16_t> ports;
  for (const auto& id : ids) ports.insert(id->local_addr().port);
  EXPECT_EQ(ports.size(), static_cast<std::size_t>(kClients));
  // Each client QP is connected to the server QP accepted for it.
  std::set<std::uint32_t> server_qpns;
  for (std::size_t i = 0; i < accepted.size(); ++i) {
    EXPECT_EQ(accepted[i]->qp(), server_qps[i].get());
    EXPECT_EQ(server_qps[i]->state(), QpState::rts);
    server_qpns.insert(server_qps[i]->qp_num());
  }
  for (const auto& qp : qps) EXPECT_EQ(server_qpns.count(qp->query().dest_qp_num), 1u);
  ids.clear();
  accepted.clear();
}

TEST_F(CmSim, AUdServiceAnswersARepeatedRequestWithTheSameReply) {
  make("cm_drop msg=rep nth=1");
  auto udp_listener = server_ch->create_id(PortSpace::udp);
  udp_listener->bind_addr(SockAddr::parse("10.0.0.1:7471"));  // the TCP space's port too
  udp_listener->listen();
  QpInitAttr init;
  init.type = QpType::ud;
  init.send_cq = client->cq.get();
  init.recv_cq = client->cq.get();
  init.cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1};
  auto client_qp = client->pd->create_qp(init);
  init.send_cq = init.recv_cq = server->cq.get();
  auto server_qp = server->pd->create_qp(init);
  auto id = client_ch->create_id(PortSpace::udp);
  id->bind_addr(SockAddr::parse("10.0.1.1:0"));
  id->resolve_addr(SockAddr::parse("10.0.0.1:7471"));
  EXPECT_EQ(kind(next(*client_ch)), "ADDR_RESOLVED/0");
  id->resolve_route();
  EXPECT_EQ(kind(next(*client_ch)), "ROUTE_RESOLVED/0");
  id->connect(*client_qp);
  CmEvent req = next(*server_ch);
  ASSERT_EQ(kind(req), "CONNECT_REQUEST/0");
  req.new_id->accept(*server_qp);
  const CmEvent est = next(*client_ch);  // the first REP was lost: after the REQ's timeout
  EXPECT_EQ(kind(est), "ESTABLISHED/0");
  EXPECT_EQ(est.peer_qp_num, server_qp->qp_num());
  EXPECT_EQ(est.qkey, kCmUdpQkey);
  EXPECT_EQ(est.ah_attr.grh.dgid, Gid::from_ipv4(10, 0, 0, 1));
  EXPECT_GE(world->now(), kResponseTimeoutNs);
  EXPECT_EQ(server_qp->query().qkey, kCmUdpQkey);
  id.reset();
  req.new_id.reset();
  udp_listener.reset();
}

TEST_F(CmSim, InjectedCmVerbFailuresLeaveTheIdAsItWas) {
  make("rdma_get_cm_event nth=1 errno=EINTR; rdma_connect nth=1 errno=ENOMEM");
  client_id = client_ch->create_id();
  client_id->bind_addr(SockAddr::parse("10.0.1.1:0"));
  client_id->resolve_addr(SockAddr::parse("10.0.0.1:7471"));
  CmEvent ev;
  EXPECT_EQ(client_ch->get_event(ev, Wait::blocking).value(), EINTR);  // the event stays queued
  EXPECT_EQ(kind(next(*client_ch)), "ADDR_RESOLVED/0");
  client_id->resolve_route();
  EXPECT_EQ(kind(next(*client_ch)), "ROUTE_RESOLVED/0");
  try {
    client_id->connect(*client->qp);
    ADD_FAILURE() << "the injected rdma_connect failure did not happen";
  } catch (const VerbError& e) {
    EXPECT_EQ(e.code().value(), ENOMEM);
    EXPECT_NE(std::string(e.what()).find("rdma_connect"), std::string::npos) << e.what();
  }
  EXPECT_EQ(client->qp->state(), QpState::reset);
  client_id->connect(*client->qp);  // the id is still ready to connect
  accept();
  EXPECT_EQ(kind(next(*client_ch)), "ESTABLISHED/0");
}

TEST_F(CmSim, TheSameSeedGivesTheSameConnection) {
  auto run = [&](std::uint64_t seed) {
    make({}, seed);
    connect();
    accept();
    EXPECT_EQ(kind(next(*client_ch)), "ESTABLISHED/0");
    const std::string out = std::to_string(client->qp->query().sq_psn) + "/" +
                            std::to_string(server->qp->query().sq_psn) + "/" + world->digest_hex();
    client_id.reset();
    server_id.reset();
    listener.reset();
    client_ch.reset();
    server_ch.reset();
    client.reset();
    server.reset();
    world.reset();
    return out;
  };
  const std::string a = run(5);
  EXPECT_EQ(a, run(5));
  EXPECT_NE(a, run(6));
}

TEST_F(CmSim, FibersWaitForTheirEvents) {
  make();
  sim::Simulation s(*world);
  bool served = false;
  s.spawn("server", [&] {
    accept();
    EXPECT_EQ(kind(next(*server_ch)), "ESTABLISHED/0");
    EXPECT_EQ(kind(next(*server_ch)), "DISCONNECTED/0");
    server_id->disconnect();
    served = true;
  });
  s.spawn("client", [&] {
    connect();
    EXPECT_EQ(kind(next(*client_ch)), "ESTABLISHED/0");
    client_id->disconnect();
    EXPECT_EQ(kind(next(*client_ch)), "DISCONNECTED/0");
  });
  s.run();
  EXPECT_TRUE(served);
}

}  // namespace
}  // namespace verbsim
