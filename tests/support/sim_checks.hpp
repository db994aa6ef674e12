// Test support for simulator scenarios: profile-parameterised suites, free-form nodes (a device
// with a PD and a registered buffer) for setups SimPair does not cover, VerbError checks, async
// event collection and a Ledger that posts and polls through a WrChecker (wr_checker.hpp).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sim_pair.hpp"
#include "verbsim/testing/wr_checker.hpp"
#include "verbsim/sim/world.hpp"
#include "verbsim/verbsim.hpp"

namespace verbsim::testing {

// Test-name suffix for a profile parameter ("strict", "rxe", "mlx5").
inline std::string profile_name(const ::testing::TestParamInfo<sim::Profile>& info) {
  return std::string(sim::to_string(info.param));
}

inline sim::Config config_for(sim::Profile p, std::uint64_t seed = 1) {
  sim::Config c;
  c.profile = p;
  c.seed = seed;
  return c;
}

inline // Checks `wcs` are, in order, the given (wr_id, status) pairs, all on `qp`.
void expect_completions(const std::vector<WorkCompletion>& wcs, const QueuePair& qp,
                        std::vector<std::pair<std::uint64_t, WcStatus>> want) {
  ASSERT_EQ(wcs.size(), want.size());
  for (std::size_t i = 0; i < wcs.size(); ++i) {
    SCOPED_TRACE("completion " + std::to_string(i));
    EXPECT_EQ(wcs[i].wr_id, want[i].first);
    EXPECT_EQ(wcs[i].status, want[i].second)
        << to_string(wcs[i].status) << " instead of " << to_string(want[i].second);
    EXPECT_EQ(wcs[i].qp_num, qp.qp_num());
  }
}

// A suite whose tests run once per simulator profile they are instantiated with.
class ProfileTest : public ::testing::TestWithParam<sim::Profile> {
 protected:
  sim::Config config() const { return config_for(GetParam()); }
  bool is(sim::Profile p) const { return GetParam() == p; }
};

// One device of a world with a PD and a registered buffer; CQs and QPs are made by the test.
struct Node {
  Node(sim::World& world, const char* dev, std::size_t buf_size = 64 * 1024)
      : ctx(world.open(dev)), pd(ctx->alloc_pd()), buf(buf_size, 0) {
    mr = pd->reg_mr(
        buf.data(), buf.size(),
        Access::local_write | Access::remote_write | Access::remote_read | Access::remote_atomic);
  }

  std::unique_ptr<QueuePair> make_qp(CompletionQueue& scq, CompletionQueue& rcq, QpCap cap,
                                     QpType type = QpType::rc, bool sig_all = false,
                                     SharedReceiveQueue* srq = nullptr) const {
    QpInitAttr init;
    init.type = type;
    init.send_cq = &scq;
    init.recv_cq = &rcq;
    init.srq = srq;
    init.cap = cap;
    init.sq_sig_all = sig_all;
    return pd->create_qp(init);
  }
  Endpoint endpoint(const QueuePair& qp, std::uint32_t psn) const {
    return {ctx->query_gid(1, 1), qp.qp_num(), psn};
  }
  Sge sge(std::size_t offset, std::uint32_t length) const { return mr->sge(offset, length); }

  std::unique_ptr<Context> ctx;
  std::unique_ptr<ProtectionDomain> pd;
  std::vector<char> buf;
  std::unique_ptr<MemoryRegion> mr;
};

// RESET -> RTS for both QPs of a connection (PSNs 100 for `x`, 200 for `y`).
inline void connect_qps(const Node& nx, QueuePair& x, const Node& ny, QueuePair& y,
                        const ConnectOptions& ox = {}, const ConnectOptions& oy = {}) {
  connect(x, 100, ny.endpoint(y, 200), ox);
  connect(y, 200, nx.endpoint(x, 100), oy);
}

// modify() with the STATE attribute alone (to ERR, RESET, SQD or back to RTS).
inline void move_to(QueuePair& qp, QpState state) {
  QpAttr a;
  a.qp_state = state;
  qp.modify(a, QpAttrMask::state);
}


// Succeeds when `f()` throws a VerbError from `verb` with errno `err`, whose message names the
// verb. Stores the message in `*what` if given.
template <class F>
::testing::AssertionResult throws_verb_error(F&& f, std::string_view verb, int err,
                                             std::string* what = nullptr) {
  try {
    f();
  } catch (const VerbError& e) {
    if (what != nullptr) *what = e.what();
    if (e.code().category() != std::generic_category() || e.code().value() != err) {
      return ::testing::AssertionFailure()
             << "errno " << e.code().value() << " (" << e.code().message() << "), expected " << err
             << "; what(): " << e.what();
    }
    if (e.verb() != verb || std::string_view(e.what()).find(verb) == std::string_view::npos) {
      return ::testing::AssertionFailure()
             << "verb '" << e.verb() << "', what(): " << e.what() << "; expected " << verb;
    }
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-VerbError: " << e.what();
  }
  return ::testing::AssertionFailure() << "no exception; expected " << verb << " to fail";
}

// Takes every async event pending on `ctx`. Like any non-blocking wait on the simulator this may
// run one step of the world when none is pending; call it once the world is idle for exact
// counts.
inline std::vector<AsyncEvent> async_events(Context& ctx) {
  std::vector<AsyncEvent> out;
  AsyncEvent ev;
  while (!ctx.get_async_event(ev, Wait::nonblocking)) out.push_back(ev);
  return out;
}

inline constexpr std::uint64_t kMaxPolls = 1'000'000;

// Polls `cq` until `n` completions arrived or the world is idle and the CQ empty; fails the
// test after kMaxPolls empty polls.
inline std::vector<WorkCompletion> bounded_poll(sim::World& world, CompletionQueue& cq,
                                                std::size_t n) {
  std::vector<WorkCompletion> out;
  WorkCompletion wc[16];
  for (std::uint64_t polls = 0; out.size() < n; ++polls) {
    if (polls == kMaxPolls) {
      ADD_FAILURE() << "the world never went idle (" << world.pending_events()
                    << " events pending)";
      break;
    }
    const PollResult r = cq.poll(wc);
    EXPECT_FALSE(r.error());
    out.insert(out.end(), wc, wc + r.count);
    if (r.count == 0 && world.pending_events() == 0) break;
  }
  return out;
}

// Runs the world until nothing is pending; fails the test if that takes kMaxPolls events.
inline void run_idle(sim::World& world) {
  world.run_until_idle(kMaxPolls);
  EXPECT_EQ(world.pending_events(), 0u) << "the world never went idle";
}

// Posts and polls through a WrChecker, for tests with no device indexes at hand: every
// signaled send and every receive the device accepted ends in exactly one completion, in its
// queue's order, with its WR's opcode; an unsignaled send completes at most once and only with
// an error. wr_ids must differ per QP number (both QPs of a SimPair may have the same one).
// Post and poll through the ledger, then EXPECT_TRUE(ledger.balanced()) at the end.
class Ledger {
 public:
  PostResult post_send(QueuePair& qp, std::span<const SendWr> wrs, bool sig_all = false) {
    const PostResult r = qp.post_send(wrs);
    for (std::uint32_t i = 0; i < r.posted; ++i) add_send(qp, wrs[i], sig_all);
    return r;
  }
  PostResult post_send(QueuePair& qp, const SendWr& wr, bool sig_all = false) {
    return post_send(qp, std::span(&wr, 1), sig_all);
  }
  PostResult post_recv(QueuePair& qp, std::span<const RecvWr> wrs) {
    const PostResult r = qp.post_recv(wrs);
    for (std::uint32_t i = 0; i < r.posted; ++i) add_recv(qp, wrs[i]);
    return r;
  }
  PostResult post_recv(QueuePair& qp, const RecvWr& wr) { return post_recv(qp, std::span(&wr, 1)); }
  PostResult post_bind(QueuePair& qp, MemoryWindow& mw, const MwBind& bind) {
    const PostResult r = qp.bind_mw(mw, bind);
    if (r) {
      const bool signaled = any(bind.flags, SendFlags::signaled);
      if (unique(qp.qp_num(), bind.wr_id)) {
        checker_.took_send(key(qp), bind.wr_id, WcOpcode::bind_mw, signaled, signaled);
      }
    }
    return r;
  }
  PostResult post_recv(SharedReceiveQueue& srq, std::span<const RecvWr> wrs) {
    const PostResult r = srq.post_recv(wrs);
    for (std::uint32_t i = 0; i < r.posted; ++i) {
      if (!unique(kSrqOwner, wrs[i].wr_id)) continue;
      checker_.took_srq_recv(key(srq), wrs[i].wr_id, wrs[i].sg_list);
    }
    return r;
  }

  // For WRs that run although their post reported an error (the rxe quirk).
  void add_send(const QueuePair& qp, const SendWr& wr, bool sig_all = false) {
    const bool signaled = sig_all || any(wr.flags, SendFlags::signaled);
    if (!unique(qp.qp_num(), wr.wr_id)) return;
    checker_.took_send(key(qp), wr.wr_id, wc_opcode_for(wr.opcode), signaled, signaled);
  }
  void add_recv(const QueuePair& qp, const RecvWr& wr) {
    if (unique(qp.qp_num(), wr.wr_id)) checker_.took_recv(key(qp), wr.wr_id, wr.sg_list);
  }

  void record(std::span<const WorkCompletion> wcs) {
    checker_.completed(WrChecker::kAnyDevice, wcs);
  }
  // Like testing::poll_n and testing::drain, but a world that never goes idle (an RNR loop
  // with rnr_retry=7) fails the test instead of hanging it.
  std::vector<WorkCompletion> poll_n(sim::World& world, CompletionQueue& cq, std::size_t n) {
    auto wcs = bounded_poll(world, cq, n);
    record(wcs);
    return wcs;
  }
  std::vector<WorkCompletion> drain(sim::World& world, CompletionQueue& cq) {
    auto wcs = bounded_poll(world, cq, SIZE_MAX);
    record(wcs);
    return wcs;
  }

  // Every owed completion came (the checker reported any other problem when it saw it).
  ::testing::AssertionResult balanced() const { return checker_.balanced(); }
  WrChecker& checker() { return checker_; }

 private:
  static constexpr std::uint64_t kSrqOwner = ~0ull;

  // The checker tells QPs apart by (device, QP number); the ledger knows neither device, so each
  // QP and SRQ object it sees stands for a device of its own.
  QpKey key(const QueuePair& qp) { return {ordinal(&qp), qp.qp_num()}; }
  SrqKey key(const SharedReceiveQueue& srq) { return {ordinal(&srq), 0}; }
  int ordinal(const void* object) {
    return ordinals_.emplace(object, static_cast<int>(ordinals_.size())).first->second;
  }
  // A completion names its QP by number alone: (QP number or kSrqOwner, wr_id) must be unique.
  bool unique(std::uint64_t owner, std::uint64_t wr_id) {
    if (posted_.emplace(owner, wr_id).second) return true;
    ADD_FAILURE() << "wr_id " << wr_id << " posted twice on one queue (ledger needs unique ids)";
    return false;
  }

  WrChecker checker_;
  std::map<const void*, int> ordinals_;
  std::set<std::pair<std::uint64_t, std::uint64_t>> posted_;
};

}  // namespace verbsim::testing
