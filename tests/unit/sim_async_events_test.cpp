// Asynchronous events, one test per event the simulator raises, each checked the two ways an
// application receives them: a fiber blocked in get_async_event(Wait::blocking) is woken with it
// (and the event names its QP, CQ, SRQ or port), and without fibers the context's async fd is
// readable while it is pending. Port and device events reach every context open on the device,
// as ib_uverbs delivers them to every open file; events of a QP, CQ or SRQ only its own
// context. (Which profile raises which event, and its cause, is tested in sim_errors_test,
// sim_qp_events_test, sim_faults_test and sim_cq_test.) Events are acknowledged when
// get_async_event returns them.
#include <gtest/gtest.h>
#include <poll.h>

#include <cerrno>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "../support/sim_checks.hpp"
#include "verbsim/sim/simulation.hpp"

namespace verbsim {
namespace {

using namespace std::chrono_literals;
using sim::Profile;
using testing::Node;

bool readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & POLLIN) != 0;
}

bool contains(const std::vector<AsyncEvent>& evs, AsyncEventType t) {
  for (const AsyncEvent& e : evs) {
    if (e.type == t) return true;
  }
  return false;
}

// Devices sim0 (a) and sim1 (b) with a QP each, and a second context on each device.
struct Scene {
  Scene(Profile profile, const std::string& faults, bool b_on_srq)
      : world(config(profile, faults)), a(world, "sim0"), b(world, "sim1"),
        a_twin(world.open("sim0")), b_twin(world.open("sim1")) {
    cq_a = a.ctx->create_cq(16);
    cq_b = b.ctx->create_cq(16);
    if (b_on_srq) {
      srq = b.pd->create_srq(SrqInitAttr{16, 1, 0});
      srq->modify(SrqAttr{0, 0, 4}, SrqAttrMask::limit);  // armed: an event below 4 receives
    }
    qp_a = a.make_qp(*cq_a, *cq_a, QpCap{8, 8, 1, 1, 0});
    qp_b = b.make_qp(*cq_b, *cq_b, QpCap{8, b_on_srq ? 0u : 8u, 1, 1, 0}, QpType::rc, false, srq.get());
    src = a.sge(0, 16);
  }
  ~Scene() {
    qp_a.reset();
    qp_b.reset();
  }
  static sim::Config config(Profile profile, const std::string& faults) {
    sim::Config c = testing::config_for(profile);
    c.faults = sim::FaultPlan::parse(faults);
    return c;
  }
  void connect_both(ConnectOptions ob = {}) {
    connect(*qp_a, 100, b.endpoint(*qp_b, 200));
    connect(*qp_b, 200, a.endpoint(*qp_a, 100), ob);
  }
  void post_recvs(int n) {
    const Sge rs = b.sge(0, 64);
    for (int i = 0; i < n; ++i) {
      const RecvWr wr = testing::recv_wr(static_cast<std::uint64_t>(i), rs);
      if (srq) {
        ASSERT_FALSE(srq->post_recv(wr).error());
      } else {
        ASSERT_FALSE(qp_b->post_recv(wr).error());
      }
    }
  }
  void post(const SendWr& wr) { ASSERT_FALSE(qp_a->post_send(wr).error()); }

  sim::World world;
  Node a, b;
  std::unique_ptr<Context> a_twin, b_twin;
  std::unique_ptr<CompletionQueue> cq_a, cq_b;
  std::unique_ptr<SharedReceiveQueue> srq;
  std::unique_ptr<QueuePair> qp_a, qp_b;
  Sge src;  // what a's work requests send (work requests point at their SGEs)
};

struct Want {
  AsyncEventType type;
  bool on_b = false;        // raised on sim1's contexts (else sim0's)
  bool device_wide = false;  // port and device events: every context of the device
  std::uint64_t not_before_ns = 0;
  std::function<void(const AsyncEvent&, Scene&)> check = [](const AsyncEvent&, Scene&) {};
};

// `make` builds the scene, `trigger` causes the event (in a fiber next to the waiter, or alone).
void expect_event(const std::function<std::unique_ptr<Scene>()>& make,
                  const std::function<void(Scene&)>& trigger, const Want& want) {
  const std::string what(to_string(want.type));
  {
    SCOPED_TRACE(what + ": a fiber blocked in get_async_event");
    auto s = make();
    Context& ctx = want.on_b ? *s->b.ctx : *s->a.ctx;
    AsyncEvent got;
    bool found = false;
    std::uint64_t at = 0;
    std::error_code err;
    sim::Simulation sim(s->world);
    sim.spawn("waiter", [&] {
      for (;;) {
        AsyncEvent ev;
        err = ctx.get_async_event(ev, Wait::blocking);
        if (err) return;
        if (ev.type == want.type) {
          got = ev;
          found = true;
          at = s->world.now();
          return;
        }
      }
    });
    sim.spawn("trigger", [&] { trigger(*s); });
    try {
      sim.run();
    } catch (const sim::DeadlockError& e) {
      if (!found) ADD_FAILURE() << e.what();
    }
    ASSERT_TRUE(found) << what << " never came: " << err.message();
    EXPECT_GE(at, want.not_before_ns);
    want.check(got, *s);
  }
  {
    SCOPED_TRACE(what + ": the async fd, without fibers");
    auto s = make();
    Context& ctx = want.on_b ? *s->b.ctx : *s->a.ctx;
    Context& twin = want.on_b ? *s->b_twin : *s->a_twin;
    trigger(*s);
    s->world.run_until_idle();
    EXPECT_TRUE(readable(ctx.async_fd()));
    EXPECT_TRUE(contains(testing::async_events(ctx), want.type));
    EXPECT_FALSE(readable(ctx.async_fd())) << "every event was taken (and acknowledged)";
    EXPECT_EQ(readable(twin.async_fd()), want.device_wide);
    EXPECT_EQ(contains(testing::async_events(twin), want.type), want.device_wide)
        << "the device's other context";
  }
}

SendWr write_wr(Scene& s, std::uint32_t rkey) {
  SendWr wr = testing::rdma_wr(1, WrOpcode::rdma_write, s.src, *s.b.mr, 0);
  wr.rkey = rkey;
  return wr;
}

TEST(AsyncEvents, CqErrOnOverrunNamesTheCq) {
  expect_event([] { return std::make_unique<Scene>(Profile::strict, "cq_overrun depth=2", false); },
               [](Scene& s) {
                 s.connect_both();
                 for (int i = 0; i < 4; ++i) s.post(write_wr(s, s.b.mr->rkey()));
               },
               {.type = AsyncEventType::cq_err,
                .check = [](const AsyncEvent& ev, Scene& s) { EXPECT_EQ(ev.cq, s.cq_a.get()); }});
}

// Destroying an object takes its pending events with it (the kernel does the same), so the
// program never sees a pointer to what it destroyed; the async fd stops polling readable.
TEST(AsyncEvents, DestroyingTheCqTakesItsPendingCqErr) {
  Scene s(Profile::strict, "cq_overrun depth=2", false);
  s.connect_both();
  for (int i = 0; i < 4; ++i) s.post(write_wr(s, s.b.mr->rkey()));
  s.world.run_until_idle();
  ASSERT_TRUE(readable(s.a.ctx->async_fd()));
  s.qp_a.reset();
  ASSERT_TRUE(readable(s.a.ctx->async_fd())) << "the CQ_ERR is not the QP's to take";
  s.cq_a.reset();
  EXPECT_FALSE(readable(s.a.ctx->async_fd()));
  EXPECT_TRUE(testing::async_events(*s.a.ctx).empty());
}

TEST(AsyncEvents, DestroyingAQpTakesOnlyItsOwnPendingEvents) {
  Scene s(Profile::strict, "", false);
  s.connect_both();
  s.post(write_wr(s, s.b.mr->rkey() ^ 0x100));  // b's QP: QP_ACCESS_ERR
  auto other = s.b.make_qp(*s.cq_b, *s.cq_b, QpCap{8, 8, 1, 1, 0});
  connect(*other, 300, s.a.endpoint(*s.qp_a, 100));
  QpAttr sqd;
  sqd.qp_state = QpState::sqd;
  sqd.en_sqd_async_notify = 1;
  other->modify(sqd, QpAttrMask::state | QpAttrMask::en_sqd_async_notify);  // SQ_DRAINED
  s.world.run_until_idle();
  s.qp_b.reset();
  const auto events = testing::async_events(*s.b.ctx);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].type, AsyncEventType::sq_drained);
  EXPECT_EQ(events[0].qp, other.get());
  EXPECT_FALSE(readable(s.b.ctx->async_fd()));
}

TEST(AsyncEvents, QpFatalFromTheFaultPlanNamesTheQp) {
  // The first QP of a device is number 0x11.
  expect_event([] { return std::make_unique<Scene>(Profile::strict, "qp_fatal qp=17 dev=sim0 at=20us", false); },
               [](Scene& s) { s.connect_both(); },
               {.type = AsyncEventType::qp_fatal,
                .not_before_ns = 20'000,
                .check = [](const AsyncEvent& ev, Scene& s) {
                  EXPECT_EQ(ev.qp, s.qp_a.get());
                  EXPECT_EQ(ev.qp_num, s.qp_a->qp_num());
                  EXPECT_EQ(s.qp_a->state(), QpState::err);
                }});
}

TEST(AsyncEvents, QpReqErrOnTheResponderOfAnInvalidRequest) {
  expect_event([] { return std::make_unique<Scene>(Profile::strict, "", false); },
               [](Scene& s) {
                 ConnectOptions no_reads;
                 no_reads.max_dest_rd_atomic = 0;
                 s.connect_both(no_reads);
                 s.post(testing::rdma_wr(1, WrOpcode::rdma_read, s.src, *s.b.mr, 0));
               },
               {.type = AsyncEventType::qp_req_err,
                .on_b = true,
                .check = [](const AsyncEvent& ev, Scene& s) { EXPECT_EQ(ev.qp, s.qp_b.get()); }});
}

TEST(AsyncEvents, QpAccessErrOnTheResponderOfABadRkey) {
  expect_event([] { return std::make_unique<Scene>(Profile::strict, "", false); },
               [](Scene& s) {
                 s.connect_both();
                 s.post(write_wr(s, s.b.mr->rkey() ^ 0x80));
               },
               {.type = AsyncEventType::qp_access_err,
                .on_b = true,
                .check = [](const AsyncEvent& ev, Scene& s) {
                  EXPECT_EQ(ev.qp, s.qp_b.get());
                  EXPECT_EQ(ev.qp_num, s.qp_b->qp_num());
                }});
}

TEST(AsyncEvents, CommEstWhenAQpInRtrReceives) {
  expect_event([] { return std::make_unique<Scene>(Profile::strict, "", false); },
               [](Scene& s) {
                 connect(*s.qp_a, 100, s.b.endpoint(*s.qp_b, 200));
                 modify_to_init(*s.qp_b);
                 modify_to_rtr(*s.qp_b, s.a.endpoint(*s.qp_a, 100));
                 s.post_recvs(1);
                 s.post(testing::send_wr(1, s.src));
               },
               {.type = AsyncEventType::comm_est,
                .on_b = true,
                .check = [](const AsyncEvent& ev, Scene& s) {
                  EXPECT_EQ(ev.qp, s.qp_b.get());
                  EXPECT_EQ(s.qp_b->state(), QpState::rtr);
                }});
}

TEST(AsyncEvents, SqDrainedOnceTheSendsInFlightComplete) {
  expect_event([] { return std::make_unique<Scene>(Profile::strict, "", false); },
               [](Scene& s) {
                 s.connect_both();
                 s.post_recvs(3);
                 for (int i = 0; i < 3; ++i) s.post(testing::send_wr(static_cast<std::uint64_t>(i), s.src));
                 QpAttr attr;
                 attr.qp_state = QpState::sqd;
                 attr.en_sqd_async_notify = 1;
                 s.qp_a->modify(attr, QpAttrMask::state | QpAttrMask::en_sqd_async_notify);
               },
               {.type = AsyncEventType::sq_drained,
                .check = [](const AsyncEvent& ev, Scene& s) { EXPECT_EQ(ev.qp, s.qp_a.get()); }});
}

TEST(AsyncEvents, SrqLimitReachedWhenReceivesFallBelowTheLimit) {
  expect_event([] { return std::make_unique<Scene>(Profile::strict, "", true); },
               [](Scene& s) {
                 s.connect_both();
                 s.post_recvs(6);  // limit 4: the third SEND leaves 3
                 for (int i = 0; i < 3; ++i) s.post(testing::send_wr(static_cast<std::uint64_t>(i), s.src));
               },
               {.type = AsyncEventType::srq_limit_reached,
                .on_b = true,
                .check = [](const AsyncEvent& ev, Scene& s) {
                  EXPECT_EQ(ev.srq, s.srq.get());
                  EXPECT_EQ(s.srq->query().srq_limit, 0u) << "the limit disarms itself";
                }});
}

TEST(AsyncEvents, SrqLimitFromTheFaultPlan) {
  expect_event([] { return std::make_unique<Scene>(Profile::strict, "srq_limit dev=sim1 at=15us", true); },
               [](Scene& s) { s.post_recvs(8); },
               {.type = AsyncEventType::srq_limit_reached,
                .on_b = true,
                .not_before_ns = 15'000,
                .check = [](const AsyncEvent& ev, Scene& s) { EXPECT_EQ(ev.srq, s.srq.get()); }});
}

TEST(AsyncEvents, LastWqeReachedWhenAQpOnAnSrqEntersErr) {
  expect_event([] { return std::make_unique<Scene>(Profile::strict, "", true); },
               [](Scene& s) {
                 s.connect_both();
                 QpAttr attr;
                 attr.qp_state = QpState::err;
                 s.qp_b->modify(attr, QpAttrMask::state);
               },
               {.type = AsyncEventType::qp_last_wqe_reached,
                .on_b = true,
                .check = [](const AsyncEvent& ev, Scene& s) { EXPECT_EQ(ev.qp, s.qp_b.get()); }});
}

TEST(AsyncEvents, PortErrWhenTheLinkGoesDown) {
  expect_event([] { return std::make_unique<Scene>(Profile::strict, "link_down dev=sim1 port=1 at=30us for=50us", false); },
               [](Scene&) {},
               {.type = AsyncEventType::port_err,
                .on_b = true,
                .device_wide = true,
                .not_before_ns = 30'000,
                .check = [](const AsyncEvent& ev, Scene&) { EXPECT_EQ(ev.port_num, 1); }});
}

TEST(AsyncEvents, PortActiveWhenTheLinkComesBack) {
  expect_event([] { return std::make_unique<Scene>(Profile::strict, "link_down dev=sim1 port=1 at=30us for=50us", false); },
               [](Scene&) {},
               {.type = AsyncEventType::port_active,
                .on_b = true,
                .device_wide = true,
                .not_before_ns = 80'000,
                .check = [](const AsyncEvent& ev, Scene& s) {
                  EXPECT_EQ(ev.port_num, 1);
                  EXPECT_EQ(s.b.ctx->query_port(1).state, PortState::active);
                }});
}

TEST(AsyncEvents, DeviceFatalReachesEveryContextOfTheDevice) {
  expect_event([] { return std::make_unique<Scene>(Profile::strict, "device_fatal dev=sim0 at=10us", false); },
               [](Scene& s) { s.connect_both(); },
               {.type = AsyncEventType::device_fatal,
                .device_wide = true,
                .not_before_ns = 10'000,
                .check = [](const AsyncEvent&, Scene& s) { EXPECT_EQ(s.qp_a->state(), QpState::err); }});
}

TEST(AsyncEvents, BlockingWaitWithNothingToComeIsEdeadlkAndNonblockingIsEagain) {
  Scene s(Profile::strict, "", false);
  AsyncEvent ev;
  EXPECT_EQ(s.a.ctx->get_async_event(ev, Wait::nonblocking).value(), EAGAIN);
  EXPECT_EQ(s.a.ctx->get_async_event(ev, Wait::blocking).value(), EDEADLK);
  EXPECT_FALSE(readable(s.a.ctx->async_fd()));
}

}  // namespace
}  // namespace verbsim
