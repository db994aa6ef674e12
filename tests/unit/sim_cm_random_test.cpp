// Random connection manager sequences on the simulator, under lost CM messages: clients connect
// (RC connections, and UD services through the UDP port space) to listeners, to ports nobody
// listens on and to addresses nobody has; servers accept, reject or drop requests; either side
// disconnects or destroys its id at any moment; a third of the connections are of QPs the
// programs move themselves (connect_own_qp, init_qp_attr, CONNECT_RESPONSE, establish).
// Whatever happens: every connect() ends in exactly one of ESTABLISHED (CONNECT_RESPONSE for an
// own QP), REJECTED, UNREACHABLE or CONNECT_ERROR (unless its id went first), the QP's state
// agrees with it (an own QP's is the program's alone), a disconnect() of a connection ends in
// exactly one DISCONNECTED and then one TIMEWAIT_EXIT, no event names an id that is gone, and
// the world runs dry.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "fabric/rng.hpp"
#include "verbsim/sim/world.hpp"
#include "verbsim/verbsim.hpp"

namespace verbsim {
namespace {

struct Conn {
  std::unique_ptr<CmId> id;
  std::unique_ptr<QueuePair> qp;
  bool client = false;
  bool ud = false;             // PortSpace::udp: SIDR, no connection
  bool own = false;            // the program moves its QP (connect_own_qp / accept_own_qp)
  bool connecting = false;     // connect() called, no outcome yet
  bool connected = false;      // ESTABLISHED
  bool disconnecting = false;  // disconnect() called, DISCONNECTED not yet taken
  int outcomes = 0;            // of connect()
  int disconnects = 0;         // DISCONNECTED taken
  int timewaits = 0;           // TIMEWAIT_EXIT taken
};

class RandomCm : public ::testing::TestWithParam<std::uint64_t> {};

TEST_P(RandomCm, EveryConnectEndsOnceAndNothingCrashes) {
  const std::uint64_t seed = GetParam();
  sim::Rng rng(seed * 7919);
  sim::Config config;
  config.devices = 2;
  config.seed = seed;
  config.faults = sim::FaultPlan::parse("cm_drop p=" + std::to_string(rng.unit() * 0.3));
  sim::World world(config);
  auto ctx0 = world.open("sim0");
  auto ctx1 = world.open("sim1");
  auto pd0 = ctx0->alloc_pd();
  auto pd1 = ctx1->alloc_pd();
  auto cq0 = ctx0->create_cq(512);
  auto cq1 = ctx1->create_cq(512);
  auto make_qp = [&](bool on_sim0, bool ud) {
    QpInitAttr init;
    init.type = ud ? QpType::ud : QpType::rc;
    init.send_cq = on_sim0 ? cq0.get() : cq1.get();
    init.recv_cq = init.send_cq;
    init.cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1};
    return (on_sim0 ? pd0 : pd1)->create_qp(init);
  };

  // An own QP through the states init_qp_attr gives.
  auto move = [](CmId& id, QueuePair& qp, std::initializer_list<QpState> states) {
    for (QpState s : states) {
      QpAttr a;
      const QpAttrMask m = id.init_qp_attr(s, a);
      qp.modify(a, m);
    }
  };

  auto server_ch = world.create_cm_channel();
  auto client_ch = world.create_cm_channel();
  auto listener = server_ch->create_id();
  listener->bind_addr(SockAddr::parse("10.0.0.1:7471"));
  listener->listen();
  auto ud_listener = server_ch->create_id(PortSpace::udp);
  ud_listener->bind_addr(SockAddr::parse("10.0.0.1:7471"));
  ud_listener->listen();
  const char* targets[] = {"10.0.0.1:7471", "10.0.0.1:7471", "10.0.0.1:7999", "10.0.9.9:7471"};

  // Every id alive, in creation order (the order random choices see: never addresses).
  std::vector<std::unique_ptr<Conn>> conns;
  auto find = [&](const CmId* id) -> Conn* {
    for (auto& c : conns) {
      if (c->id.get() == id) return c.get();
    }
    return nullptr;
  };
  auto destroy = [&](const CmId* id) {
    auto it = std::find_if(conns.begin(), conns.end(), [&](auto& c) { return c->id.get() == id; });
    (*it)->id.reset();  // before its QP
    conns.erase(it);
  };
  auto pick = [&](auto&& want) -> Conn* {
    std::vector<Conn*> c;
    for (auto& conn : conns) {
      if (want(*conn)) c.push_back(conn.get());
    }
    return c.empty() ? nullptr : c[rng.below(c.size())];
  };
  // Takes one event of `ch` and reacts to it; false if there was none.
  // What the run amounted to (clients' outcomes), so that a change that makes every connect
  // fail early cannot pass as "nothing crashed".
  int rc_connected = 0, ud_resolved = 0, refused = 0;
  auto take = [&](CmEventChannel& ch) {
    CmEvent ev;
    if (ch.get_event(ev, Wait::nonblocking)) return false;
    if (ev.type == CmEventType::connect_request) {
      auto conn = std::make_unique<Conn>();
      conn->id = std::move(ev.new_id);
      conn->ud = ev.listen_id == ud_listener.get();
      CmId* id = conn->id.get();
      conns.push_back(std::move(conn));
      switch (rng.below(4)) {
        case 0: id->reject(); break;
        case 1: destroy(id); break;
        default: {
          Conn& c = *conns.back();
          c.qp = make_qp(true, c.ud);
          c.own = rng.below(3) == 0;
          if (c.own) {
            move(*id, *c.qp, {QpState::init, QpState::rtr, QpState::rts});
            id->accept_own_qp(c.qp->qp_num());
          } else {
            id->accept(*c.qp);
          }
          c.connecting = !c.ud;  // a UD service's reply is final
        }
      }
      return true;
    }
    Conn* found = find(ev.id);
    if (found == nullptr) {
      ADD_FAILURE() << to_string(ev.type) << " for an id that is gone";
      return false;
    }
    Conn& c = *found;
    switch (ev.type) {
      case CmEventType::addr_resolved: ev.id->resolve_route(); break;
      case CmEventType::addr_error: break;
      case CmEventType::route_resolved:
        c.qp = make_qp(false, c.ud);
        c.own = rng.below(3) == 0;
        if (c.own) {
          if (c.ud) {
            move(*ev.id, *c.qp, {QpState::init, QpState::rtr, QpState::rts});
          } else {
            move(*ev.id, *c.qp, {QpState::init});
          }
          ev.id->connect_own_qp(c.qp->qp_num());
        } else {
          ev.id->connect(*c.qp);
        }
        c.connecting = true;
        break;
      case CmEventType::connect_response:  // an own QP's client: RTR, RTS, then the RTU
        EXPECT_TRUE(c.own && c.client && c.connecting) << "CONNECT_RESPONSE without connect_own_qp";
        move(*ev.id, *c.qp, {QpState::rtr, QpState::rts});
        ev.id->establish();
        ++rc_connected;
        c.connecting = false;
        c.connected = true;
        ++c.outcomes;
        break;
      case CmEventType::established:
        EXPECT_TRUE(c.connecting) << "ESTABLISHED without a connect or accept";
        if (c.client) ++(c.ud ? ud_resolved : rc_connected);
        c.connecting = false;
        c.connected = !c.ud;
        ++c.outcomes;
        EXPECT_EQ(c.qp->state(), QpState::rts);
        if (c.ud) {
          EXPECT_NE(ev.peer_qp_num, 0u);
        }
        break;
      case CmEventType::rejected:
      case CmEventType::unreachable:
      case CmEventType::connect_error:
        EXPECT_TRUE(c.connecting) << to_string(ev.type) << " without a connect or accept";
        if (c.client) ++refused;
        c.connecting = false;
        ++c.outcomes;
        if (c.own) {  // left where the program put it
          EXPECT_EQ(c.qp->state(), c.ud || !c.client ? QpState::rts : QpState::init);
        } else {
          EXPECT_EQ(c.qp->state(), c.ud ? QpState::rts : QpState::err);
        }
        break;
      case CmEventType::disconnected:
        ++c.disconnects;
        c.connecting = false;  // a server still waiting for its RTU
        c.connected = false;
        if (!c.disconnecting) ev.id->disconnect();  // the peer's: answer it
        c.disconnecting = false;
        break;
      case CmEventType::timewait_exit:  // the disconnect completed, 2 s ago
        EXPECT_EQ(c.disconnects, 1) << "TIMEWAIT_EXIT without a disconnect";
        ++c.timewaits;
        break;
      default: ADD_FAILURE() << "unexpected " << to_string(ev.type);
    }
    return true;
  };

  for (int step = 0; step < 400 && !HasFailure(); ++step) {
    switch (rng.below(6)) {
      case 0: {  // a new client
        auto conn = std::make_unique<Conn>();
        conn->client = true;
        conn->ud = rng.below(3) == 0;
        conn->id = client_ch->create_id(conn->ud ? PortSpace::udp : PortSpace::tcp);
        conn->id->bind_addr(SockAddr::parse("10.0.1.1:0"));
        conn->id->resolve_addr(SockAddr::parse(targets[rng.below(4)]), 100);
        conns.push_back(std::move(conn));
        break;
      }
      case 1:
        if (Conn* c = pick([](const Conn& x) { return x.connected && !x.disconnecting; })) {
          c->id->disconnect();
          c->disconnecting = true;
          EXPECT_EQ(c->qp->state(), c->own ? QpState::rts : QpState::err);
        }
        break;
      case 2:
        if (rng.below(4) == 0) {
          if (Conn* c = pick([](const Conn&) { return true; })) destroy(c->id.get());
        }
        break;
      default: take(*client_ch); take(*server_ch);
    }
  }
  // Let everything finish: until the world is dry and, after that, neither channel has an event
  // (a step taken by one channel's wait may leave an event for the other).
  for (int idle = 0; idle < 2 && !HasFailure();) {
    const bool took = take(*client_ch) | take(*server_ch);
    idle = took || world.step() ? 0 : idle + 1;
  }
  for (auto& c : conns) {
    const CmId* id = c->id.get();
    if (c->client && c->qp) {
      EXPECT_EQ(c->outcomes, 1) << "a connect without exactly one outcome: connecting "
                                << c->connecting << ", QP " << to_string(c->qp->state())
                                << ", port " << id->local_addr().port << " -> "
                                << id->peer_addr().to_string();
    }
    EXPECT_LE(c->disconnects, 1);
    EXPECT_EQ(c->timewaits, c->disconnects) << "a disconnect without its TIMEWAIT_EXIT";
    EXPECT_FALSE(c->disconnecting) << "a disconnect() that never ended";
  }
  std::printf("seed %llu: %d RC connections, %d UD services resolved, %d refused\n",
              static_cast<unsigned long long>(seed), rc_connected, ud_resolved, refused);
  // Over seeds 1..40 the fewest were 3, 1 and 22 (a third of the targets refuse).
  EXPECT_GE(rc_connected, 2);
  EXPECT_GE(ud_resolved, 1);
  EXPECT_GE(refused, 5);
  conns.clear();
  ud_listener.reset();
}

INSTANTIATE_TEST_SUITE_P(Seeds, RandomCm, ::testing::Range<std::uint64_t>(1, 41));

}  // namespace
}  // namespace verbsim
