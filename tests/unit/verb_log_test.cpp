// The verb log (core/include/verbsim/verb_log.hpp) over the simulator: the records of a run,
// errors, the summary's counts under both provider models, and that logging changes nothing.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "../support/sim_pair.hpp"
#include "verbsim/sim/world.hpp"
#include "verbsim/verb_log.hpp"
#include "verbsim/verbsim.hpp"

namespace verbsim::testing {
namespace {

struct Lines final : VerbLogSink {
  std::vector<std::string> lines;
  void write(std::string_view line) override { lines.emplace_back(line); }
};

// A world behind a verb log writing to `sink` (no wall= field: lines compare exactly).
struct LoggedWorld {
  explicit LoggedWorld(sim::Config config = {}, std::optional<ProviderModel> provider = {})
      : sink(std::make_shared<Lines>()), log(options(sink, provider)) {
    auto w = std::make_unique<sim::World>(config);
    world = w.get();
    backend = log.wrap(std::move(w));
  }
  static VerbLogOptions options(std::shared_ptr<Lines> sink, std::optional<ProviderModel> p) {
    VerbLogOptions o;
    o.sink = std::move(sink);
    o.provider = p;
    o.wall_time = false;
    o.summary_at_end = false;
    return o;
  }
  std::shared_ptr<Lines> sink;
  VerbLog log;
  sim::World* world = nullptr;
  std::unique_ptr<Backend> backend;
};

// "t=123ns control ibv_x ..." -> "control ibv_x ..."; and the time.
std::string without_time(const std::string& line) { return line.substr(line.find(' ') + 1); }
std::uint64_t time_of(const std::string& line) {
  EXPECT_EQ(line.rfind("t=", 0), 0u) << line;
  return std::stoull(line.substr(2));
}
std::string word(const std::string& line, int n) {
  std::istringstream in(line);
  std::string w;
  for (int i = 0; i <= n; ++i) in >> w;
  return w;
}
std::string hex(std::uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%x", v);
  return b;
}

Side side_of(Backend& backend, const char* dev, int cqe = 8) {
  Side s;
  s.ctx = backend.open(dev);
  s.pd = s.ctx->alloc_pd();
  s.cq = s.ctx->create_cq(cqe);
  QpInitAttr init;
  init.send_cq = s.cq.get();
  init.recv_cq = s.cq.get();
  init.cap = {4, 4, 1, 1, 0};
  s.qp = s.pd->create_qp(init);
  s.buf.assign(4096, 0);
  s.mr = s.pd->reg_mr(s.buf.data(), s.buf.size(), Access::local_write);
  return s;
}

// One SEND of 64 bytes from a to b, both polled; the (count, wc) of every poll made.
struct PollCall {
  std::string cq;
  std::uint32_t count;
  WorkCompletion wc;
};
std::vector<PollCall> send_recv(Side& a, Side& b, const char* cq_a = "1", const char* cq_b = "2") {
  const Sge rsge = b.sge(0, 64);
  const Sge ssge = a.sge(0, 64);
  EXPECT_TRUE(b.qp->post_recv(RecvWr{7, {&rsge, 1}}));
  SendWr wr;
  wr.wr_id = 9;
  wr.flags = SendFlags::signaled;
  wr.sg_list = {&ssge, 1};
  EXPECT_TRUE(a.qp->post_send(wr));
  std::vector<PollCall> calls;
  for (const auto& [s, name] : {std::pair{&a, cq_a}, std::pair{&b, cq_b}}) {
    for (int i = 0; i < 100; ++i) {
      WorkCompletion wc[4];
      const PollResult r = s->cq->poll(wc);
      calls.push_back({name, r.count, wc[0]});
      if (r.count != 0) break;
    }
  }
  return calls;
}

void connect_pair(Side& a, Side& b) {
  connect(*a.qp, 100, endpoint_of(b, 200));
  connect(*b.qp, 200, endpoint_of(a, 100));
}

TEST(VerbLog, SendRecvRunIsOneRecordPerCall) {
  LoggedWorld lw;
  Side a = side_of(*lw.backend, "sim0");
  Side b = side_of(*lw.backend, "sim1");
  connect_pair(a, b);
  const std::size_t mark = lw.sink->lines.size();
  const auto polls = send_recv(a, b);
  const auto& lines = lw.sink->lines;

  // Setup: the verbs in order, each with its class.
  const std::vector<std::string> setup = {
      "control ibv_open_device",   "control ibv_alloc_pd",    "control ibv_create_cq",
      "control ibv_create_qp",     "control ibv_reg_mr",      "control ibv_open_device",
      "control ibv_alloc_pd",      "control ibv_create_cq",   "control ibv_create_qp",
      "control ibv_reg_mr",        "control ibv_query_gid",   "control ibv_modify_qp",
      "control ibv_modify_qp",     "control ibv_modify_qp",   "control ibv_query_gid",
      "control ibv_modify_qp",     "control ibv_modify_qp",   "control ibv_modify_qp"};
  ASSERT_EQ(mark, setup.size());
  for (std::size_t i = 0; i < mark; ++i) {
    EXPECT_EQ(word(lines[i], 1) + " " + word(lines[i], 2), setup[i]) << lines[i];
    EXPECT_NE(lines[i].find(" -> 0"), std::string::npos) << lines[i];
  }
  const std::string qa = std::to_string(a.qp->qp_num());
  const std::string qb = std::to_string(b.qp->qp_num());
  EXPECT_EQ(without_time(lines[2]), "control ibv_create_cq dev=sim0 cqe=8 ch=- vector=0 -> 0 cq=1 cqe=" +
                                        std::to_string(a.cq->cqe()));
  EXPECT_EQ(without_time(lines[3]),
            "control ibv_create_qp pd=1 type=RC send_cq=1 recv_cq=1 srq=- send_wr=4 recv_wr=4 "
            "send_sge=1 recv_sge=1 inline=0 -> 0 qp=" + qa);
  EXPECT_EQ(without_time(lines[11]), "control ibv_modify_qp dev=sim0 qp=" + qa + " mask=0x39 RESET->INIT -> 0");
  EXPECT_EQ(without_time(lines[12]), "control ibv_modify_qp dev=sim0 qp=" + qa + " mask=0x129181 INIT->RTR dest_qp=" +
                                         qb + " -> 0");

  // The data path, exactly.
  std::vector<std::string> want = {
      "data ibv_post_recv dev=sim1 qp=" + qb + " n=1 [wr_id=7 len=64 lkey=" + hex(b.mr->lkey()) + "] -> 0",
      "data ibv_post_send dev=sim0 qp=" + qa + " n=1 [wr_id=9 SEND len=64 lkey=" + hex(a.mr->lkey()) +
          " signaled] -> 0"};
  for (const PollCall& p : polls) {
    std::string w = "data ibv_poll_cq cq=" + p.cq + " max=4 -> " + std::to_string(p.count);
    if (p.count == 1) {
      w += " [wr_id=" + std::to_string(p.wc.wr_id) + " " + std::string(to_string(p.wc.status)) + " " +
           std::string(to_string(p.wc.opcode)) + " len=" + std::to_string(p.wc.byte_len) +
           " qp=" + std::to_string(p.wc.qp_num) + "]";
    }
    want.push_back(w);
  }
  ASSERT_EQ(lines.size() - mark, want.size());
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_EQ(without_time(lines[mark + i]), want[i]);
  // What the polls returned is what the run must give.
  ASSERT_EQ(polls.back().count, 1u);
  EXPECT_EQ(polls.back().wc.wr_id, 7u);
  EXPECT_EQ(polls.back().wc.status, WcStatus::success);
  EXPECT_EQ(polls.back().wc.opcode, WcOpcode::recv);
  EXPECT_EQ(polls.back().wc.qp_num, b.qp->qp_num());
  EXPECT_NE(want[2 + polls.size() - 2].find("[wr_id=9 SUCCESS SEND len=64 qp=" + qa + "]"),
            std::string::npos);

  // Virtual time: never decreasing, and moved by the run.
  std::uint64_t last = 0;
  for (const std::string& l : lines) {
    const std::uint64_t t = time_of(l);
    EXPECT_GE(t, last) << l;
    last = t;
  }
  EXPECT_GT(last, 0u);
  EXPECT_EQ(time_of(lines.back()) <= lw.world->now(), true);
}

TEST(VerbLog, ErrorsAreLoggedWithTheirErrnoAndThrownUnchanged) {
  LoggedWorld lw;
  Side a = side_of(*lw.backend, "sim0");
  auto& lines = lw.sink->lines;

  // post_send on a RESET QP: EINVAL (strict profile), returned as the backend returned it.
  const Sge sge = a.sge(0, 8);
  SendWr wr;
  wr.wr_id = 5;
  wr.sg_list = {&sge, 1};
  const PostResult r = a.qp->post_send(wr);
  EXPECT_EQ(r.err, EINVAL);
  EXPECT_EQ(r.posted, 0u);
  const std::string want = "data ibv_post_send dev=sim0 qp=" + std::to_string(a.qp->qp_num()) +
                           " n=1 [wr_id=5 SEND len=8 lkey=" + hex(a.mr->lkey()) + "] -> EINVAL \"" +
                           r.reason + "\" posted=0";
  EXPECT_EQ(without_time(lines.back()), want);

  // A failing create: the backend's VerbError comes through as it was.
  try {
    (void)a.ctx->create_cq(0);
    FAIL() << "create_cq(0) succeeded";
  } catch (const VerbError& e) {
    EXPECT_EQ(e.verb(), "ibv_create_cq");
    EXPECT_EQ(e.code().value(), EINVAL);
    EXPECT_EQ(without_time(lines.back()),
              "control ibv_create_cq dev=sim0 cqe=0 ch=- vector=0 -> EINVAL \"" + std::string(e.what()) +
                  "\"");
  }

  // An invalid transition: RESET -> RTR.
  QpAttr attr;
  attr.qp_state = QpState::rtr;
  EXPECT_THROW(a.qp->modify(attr, QpAttrMask::state), VerbError);
  EXPECT_EQ(word(lines.back(), 2), "ibv_modify_qp");
  EXPECT_NE(lines.back().find(" RESET->RTR -> EINVAL \"ibv_modify_qp"), std::string::npos)
      << lines.back();
  EXPECT_EQ(a.qp->state(), QpState::reset);
}

// 15 calls: 10 control, 3 data, 2 event.
void known_sequence(Backend& backend) {
  auto ctx = backend.open("sim0");
  auto pd = ctx->alloc_pd();
  auto ch = ctx->create_comp_channel();
  auto cq = ctx->create_cq(4, ch.get());
  QpInitAttr init;
  init.send_cq = cq.get();
  init.recv_cq = cq.get();
  init.cap = {4, 4, 1, 1, 0};
  auto qp = pd->create_qp(init);
  SendWr wr;
  (void)qp->post_send(wr);  // RESET: EINVAL, or accepted to wait (mlx5 profile)
  WorkCompletion wc[2];
  EXPECT_EQ(cq->poll(wc).count, 0u);
  EXPECT_FALSE(cq->req_notify());
  CompletionQueue* got = nullptr;
  EXPECT_EQ(ch->get_cq_event(got, Wait::nonblocking), std::errc::resource_unavailable_try_again);
  cq->ack_events(0);
  destroy(qp);
  destroy(cq);
  destroy(ch);
  destroy(pd);
  destroy(ctx);
}

TEST(VerbLog, SummaryCountsAndKernelCrossingsPerModel) {
  struct Want {
    ProviderModel model;
    std::uint64_t uverbs, syscalls;
  };
  for (const Want w : {Want{ProviderModel::mlx5, 8, 11}, Want{ProviderModel::rxe, 10, 13}}) {
    SCOPED_TRACE(std::string(to_string(w.model)));
    LoggedWorld lw({}, w.model);
    known_sequence(*lw.backend);
    const VerbSummary s = lw.log.summary();
    EXPECT_EQ(s.model, w.model);
    EXPECT_EQ(s.total, 15u);
    EXPECT_EQ(s.count(VerbClass::control), 10u);
    EXPECT_EQ(s.count(VerbClass::data), 3u);
    EXPECT_EQ(s.count(VerbClass::event), 2u);
    EXPECT_EQ(s.count(Verb::post_send), 1u);
    EXPECT_EQ(s.count(Verb::get_cq_event), 1u);
    EXPECT_EQ(s.count(Verb::close_device), 1u);
    EXPECT_EQ(s.uverbs, w.uverbs);
    EXPECT_EQ(s.syscalls, w.syscalls);
    EXPECT_EQ(lw.sink->lines.size(), 15u);  // one record per call
    lw.log.print_summary();
    const std::string total = "summary total calls=15 kernel_crossings=" + std::to_string(w.syscalls) +
                              " uverbs=" + std::to_string(w.uverbs) + " other_syscalls=3 userspace=" +
                              std::to_string(15 - w.syscalls) + " model=" +
                              std::string(to_string(w.model));
    EXPECT_EQ(lw.sink->lines.back(), total);
    EXPECT_EQ(lw.sink->lines[15], "summary model=" + std::string(to_string(w.model)));
  }
}

TEST(VerbLog, EnvironmentChoosesTheModelFromTheProfile) {
  const std::string path = ::testing::TempDir() + "verb_log_test.log";
  for (const auto& [profile, model] : {std::pair{sim::Profile::rxe, "rxe"},
                                       std::pair{sim::Profile::strict, "mlx5"},
                                       std::pair{sim::Profile::mlx5, "mlx5"}}) {
    ::setenv("VERBSIM_VERB_LOG", path.c_str(), 1);
    sim::Config c;
    c.profile = profile;
    {
      auto backend = log_verbs_from_env(std::make_unique<sim::World>(c));
      EXPECT_EQ(dynamic_cast<sim::World*>(backend.get()), nullptr);  // wrapped
      known_sequence(*backend);
    }
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    const std::string want = "summary model=" + std::string(model) + " source=\"sim profile " +
                             std::string(sim::to_string(profile)) + "\"\n";
    EXPECT_NE(text.str().find(want), std::string::npos) << text.str();
    EXPECT_NE(text.str().find("\nsummary total calls=15 "), std::string::npos);
  }
  ::unsetenv("VERBSIM_VERB_LOG");
  auto plain = log_verbs_from_env(std::make_unique<sim::World>(sim::Config{}));
  EXPECT_NE(dynamic_cast<sim::World*>(plain.get()), nullptr);  // off: nothing wrapped
}

TEST(VerbLog, EventsAndUnloggedMapToTheRightObjects) {
  LoggedWorld lw;
  Side a = side_of(*lw.backend, "sim0");
  Side b = side_of(*lw.backend, "sim1");
  auto ch = b.ctx->create_comp_channel();
  auto cq = b.ctx->create_cq(8, ch.get());
  EXPECT_EQ(cq->channel(), ch.get());
  QpInitAttr init;
  init.send_cq = cq.get();
  init.recv_cq = cq.get();
  init.cap = {4, 4, 1, 1, 0};
  b.qp = b.pd->create_qp(init);
  EXPECT_NE(&unlogged(*b.qp), b.qp.get());
  EXPECT_EQ(&unlogged(unlogged(*b.qp)), &unlogged(*b.qp));
  connect_pair(a, b);
  ASSERT_FALSE(cq->req_notify());
  const Sge rsge = b.sge(0, 64);
  ASSERT_TRUE(b.qp->post_recv(RecvWr{1, {&rsge, 1}}));
  const Sge ssge = a.sge(0, 64);
  SendWr wr;
  wr.sg_list = {&ssge, 1};
  ASSERT_TRUE(a.qp->post_send(wr));
  CompletionQueue* got = nullptr;
  ASSERT_FALSE(ch->get_cq_event(got));
  EXPECT_EQ(got, cq.get());  // the wrapper, not the backend's CQ
  cq->ack_events(1);
  EXPECT_EQ(without_time(lw.sink->lines.back()), "event ibv_ack_cq_events cq=3 n=1 -> 0");
  EXPECT_EQ(without_time(lw.sink->lines[lw.sink->lines.size() - 2]),
            "event ibv_get_cq_event ch=1 blocking -> 0 cq=3");
  b.qp.reset();
  EXPECT_EQ(without_time(lw.sink->lines.back()).substr(0, 22), "control ibv_destroy_qp");
  EXPECT_NE(lw.sink->lines.back().find("-> 0 implicit"), std::string::npos);
}

// The same run with and without the log: same digest, same completions.
std::uint64_t digest_of(bool logged) {
  sim::Config c;
  c.seed = 42;
  std::unique_ptr<Backend> backend;
  sim::World* world = nullptr;
  std::optional<LoggedWorld> lw;
  if (logged) {
    lw.emplace(c);
    world = lw->world;
  } else {
    auto w = std::make_unique<sim::World>(c);
    world = w.get();
    backend = std::move(w);
  }
  Backend& be = logged ? *lw->backend : *backend;
  {
    Side a = side_of(be, "sim0");
    Side b = side_of(be, "sim1");
    connect_pair(a, b);
    for (int i = 0; i < 5; ++i) (void)send_recv(a, b);
    QpAttr attr;
    attr.qp_state = QpState::err;
    a.qp->modify(attr, QpAttrMask::state);
    (void)drain(*world, *a.cq);
  }
  return world->digest();
}

TEST(VerbLog, DoesNotChangeTheRun) { EXPECT_EQ(digest_of(true), digest_of(false)); }

TEST(VerbLog, TableNamesAndClasses) {
  EXPECT_EQ(verb_name(Verb::req_notify_cq), "ibv_req_notify_cq");
  EXPECT_EQ(verb_class(Verb::req_notify_cq), VerbClass::data);
  EXPECT_EQ(verb_class(Verb::ack_async_event), VerbClass::event);
  EXPECT_EQ(verb_class(Verb::cm_get_event), VerbClass::event);
  EXPECT_EQ(crossing(Verb::post_send, ProviderModel::rxe), Crossing::uverbs);
  EXPECT_EQ(crossing(Verb::post_recv, ProviderModel::rxe), Crossing::none);
  EXPECT_EQ(crossing(Verb::poll_cq, ProviderModel::rxe), Crossing::none);
  EXPECT_EQ(crossing(Verb::post_send, ProviderModel::mlx5), Crossing::none);
  EXPECT_EQ(crossing(Verb::get_cq_event, ProviderModel::mlx5), Crossing::syscall);
  EXPECT_EQ(provider_for_device("rxe0"), ProviderModel::rxe);
  EXPECT_EQ(provider_for_device("mlx5_0"), ProviderModel::mlx5);
}

}  // namespace
}  // namespace verbsim::testing
