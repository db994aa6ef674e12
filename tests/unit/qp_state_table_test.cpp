// Exhaustive check of the QP state table against an independently written copy of the Linux
// kernel's qp_state_table (drivers/infiniband/core/verbs.c) for RC, UC and UD.
#include "transport/qp_state_table.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

namespace verbsim {

// Readable values in assertion failures ("AV|PATH_MTU", "RTR") instead of raw bytes.
void PrintTo(QpAttrMask m, std::ostream* os);
inline void PrintTo(QpState s, std::ostream* os) { *os << to_string(s); }
inline void PrintTo(QpType t, std::ostream* os) { *os << to_string(t); }

}  // namespace verbsim

namespace verbsim::sim {
namespace {

using M = QpAttrMask;
using S = QpState;
using T = QpType;

constexpr std::array kAllStates{S::reset, S::init, S::rtr, S::rts, S::sqd, S::sqe, S::err};
constexpr std::array kAllTypes{T::rc, T::uc, T::ud};
constexpr int kAttrBits = 21;

const char* const kBitNames[kAttrBits] = {
    "STATE", "CUR_STATE", "EN_SQD_ASYNC_NOTIFY", "ACCESS_FLAGS", "PKEY_INDEX", "PORT", "QKEY",
    "AV", "PATH_MTU", "TIMEOUT", "RETRY_CNT", "RNR_RETRY", "RQ_PSN", "MAX_QP_RD_ATOMIC",
    "ALT_PATH", "MIN_RNR_TIMER", "SQ_PSN", "MAX_DEST_RD_ATOMIC", "PATH_MIG_STATE", "CAP",
    "DEST_QPN"};

M bit(int b) { return static_cast<M>(1u << b); }

std::string name(S s) {
  static const char* const names[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
  return names[static_cast<int>(s)];
}
std::string name(T t) { return t == T::rc ? "RC" : t == T::uc ? "UC" : "UD"; }

// Every transition that exists, per QP type, with what it requires and allows (STATE aside).
// Anything not listed must be rejected.
struct Expected {
  T type;
  S cur;
  S next;
  M required;
  M optional;
};

// clang-format off
const Expected kExpected[] = {
    // ---- RC
    {T::rc, S::reset, S::reset, M::none, M::none},
    {T::rc, S::reset, S::init,  M::pkey_index | M::port | M::access_flags, M::none},
    {T::rc, S::init,  S::reset, M::none, M::none},
    {T::rc, S::init,  S::init,  M::none, M::pkey_index | M::port | M::access_flags},
    {T::rc, S::init,  S::rtr,
        M::av | M::path_mtu | M::dest_qpn | M::rq_psn | M::max_dest_rd_atomic | M::min_rnr_timer,
        M::alt_path | M::access_flags | M::pkey_index},
    {T::rc, S::init,  S::err,   M::none, M::none},
    {T::rc, S::rtr,   S::reset, M::none, M::none},
    {T::rc, S::rtr,   S::rts,
        M::sq_psn | M::timeout | M::retry_cnt | M::rnr_retry | M::max_qp_rd_atomic,
        M::cur_state | M::alt_path | M::access_flags | M::min_rnr_timer | M::path_mig_state},
    {T::rc, S::rtr,   S::err,   M::none, M::none},
    {T::rc, S::rts,   S::reset, M::none, M::none},
    {T::rc, S::rts,   S::rts,   M::none,
        M::cur_state | M::alt_path | M::access_flags | M::min_rnr_timer | M::path_mig_state},
    {T::rc, S::rts,   S::sqd,   M::none, M::en_sqd_async_notify},
    {T::rc, S::rts,   S::err,   M::none, M::none},
    {T::rc, S::sqd,   S::reset, M::none, M::none},
    {T::rc, S::sqd,   S::rts,   M::none,
        M::cur_state | M::alt_path | M::access_flags | M::min_rnr_timer | M::path_mig_state},
    {T::rc, S::sqd,   S::sqd,   M::none,
        M::port | M::av | M::timeout | M::retry_cnt | M::rnr_retry | M::max_qp_rd_atomic |
        M::max_dest_rd_atomic | M::alt_path | M::access_flags | M::pkey_index |
        M::min_rnr_timer | M::path_mig_state},
    {T::rc, S::sqd,   S::err,   M::none, M::none},
    {T::rc, S::sqe,   S::reset, M::none, M::none},
    {T::rc, S::sqe,   S::err,   M::none, M::none},
    {T::rc, S::err,   S::reset, M::none, M::none},
    {T::rc, S::err,   S::err,   M::none, M::none},

    // ---- UC
    {T::uc, S::reset, S::reset, M::none, M::none},
    {T::uc, S::reset, S::init,  M::pkey_index | M::port | M::access_flags, M::none},
    {T::uc, S::init,  S::reset, M::none, M::none},
    {T::uc, S::init,  S::init,  M::none, M::pkey_index | M::port | M::access_flags},
    {T::uc, S::init,  S::rtr,   M::av | M::path_mtu | M::dest_qpn | M::rq_psn,
        M::alt_path | M::access_flags | M::pkey_index},
    {T::uc, S::init,  S::err,   M::none, M::none},
    {T::uc, S::rtr,   S::reset, M::none, M::none},
    {T::uc, S::rtr,   S::rts,   M::sq_psn,
        M::cur_state | M::alt_path | M::access_flags | M::path_mig_state},
    {T::uc, S::rtr,   S::err,   M::none, M::none},
    {T::uc, S::rts,   S::reset, M::none, M::none},
    {T::uc, S::rts,   S::rts,   M::none,
        M::cur_state | M::alt_path | M::access_flags | M::path_mig_state},
    {T::uc, S::rts,   S::sqd,   M::none, M::en_sqd_async_notify},
    {T::uc, S::rts,   S::err,   M::none, M::none},
    {T::uc, S::sqd,   S::reset, M::none, M::none},
    {T::uc, S::sqd,   S::rts,   M::none,
        M::cur_state | M::alt_path | M::access_flags | M::path_mig_state},
    {T::uc, S::sqd,   S::sqd,   M::none,
        M::av | M::alt_path | M::access_flags | M::pkey_index | M::path_mig_state},
    {T::uc, S::sqd,   S::err,   M::none, M::none},
    {T::uc, S::sqe,   S::reset, M::none, M::none},
    {T::uc, S::sqe,   S::rts,   M::none, M::cur_state | M::access_flags},
    {T::uc, S::sqe,   S::err,   M::none, M::none},
    {T::uc, S::err,   S::reset, M::none, M::none},
    {T::uc, S::err,   S::err,   M::none, M::none},

    // ---- UD
    {T::ud, S::reset, S::reset, M::none, M::none},
    {T::ud, S::reset, S::init,  M::pkey_index | M::port | M::qkey, M::none},
    {T::ud, S::init,  S::reset, M::none, M::none},
    {T::ud, S::init,  S::init,  M::none, M::pkey_index | M::port | M::qkey},
    {T::ud, S::init,  S::rtr,   M::none, M::pkey_index | M::qkey},
    {T::ud, S::init,  S::err,   M::none, M::none},
    {T::ud, S::rtr,   S::reset, M::none, M::none},
    {T::ud, S::rtr,   S::rts,   M::sq_psn, M::cur_state | M::qkey},
    {T::ud, S::rtr,   S::err,   M::none, M::none},
    {T::ud, S::rts,   S::reset, M::none, M::none},
    {T::ud, S::rts,   S::rts,   M::none, M::cur_state | M::qkey},
    {T::ud, S::rts,   S::sqd,   M::none, M::en_sqd_async_notify},
    {T::ud, S::rts,   S::err,   M::none, M::none},
    {T::ud, S::sqd,   S::reset, M::none, M::none},
    {T::ud, S::sqd,   S::rts,   M::none, M::cur_state | M::qkey},
    {T::ud, S::sqd,   S::sqd,   M::none, M::pkey_index | M::qkey},
    {T::ud, S::sqd,   S::err,   M::none, M::none},
    {T::ud, S::sqe,   S::reset, M::none, M::none},
    {T::ud, S::sqe,   S::rts,   M::none, M::cur_state | M::qkey},
    {T::ud, S::sqe,   S::err,   M::none, M::none},
    {T::ud, S::err,   S::reset, M::none, M::none},
    {T::ud, S::err,   S::err,   M::none, M::none},
};
// clang-format on

std::optional<Expected> find_expected(T type, S cur, S next) {
  for (const Expected& e : kExpected)
    if (e.type == type && e.cur == cur && e.next == next) return e;
  return std::nullopt;
}

bool cur_state_allowed_in(S cur) {
  return cur == S::rtr || cur == S::rts || cur == S::sqd || cur == S::sqe;
}

const std::string kCurStateReason =
    "attribute CUR_STATE only allowed when the QP is in RTR, RTS, SQD or SQE";

// ---------------------------------------------------------------------------------------------
// One test per QP type x (cur, next): RC_INIT_to_RTR, UD_RESET_to_ERR, ...

using Transition = std::tuple<T, S, S>;

class TransitionTable : public ::testing::TestWithParam<Transition> {
 protected:
  T type() const { return std::get<0>(GetParam()); }
  S cur() const { return std::get<1>(GetParam()); }
  S next() const { return std::get<2>(GetParam()); }
  std::string arrow() const { return name(cur()) + "->" + name(next()); }

  TransitionCheck check(M mask) const { return check_transition(type(), cur(), next(), mask); }

  void expect_ok(M mask) const {
    const TransitionCheck r = check(mask);
    EXPECT_TRUE(r.ok) << "mask " << ::testing::PrintToString(mask) << ": " << r.reason;
    EXPECT_STREQ(r.reason, "");
  }
  void expect_fail(M mask, const std::string& reason) const {
    const TransitionCheck r = check(mask);
    EXPECT_FALSE(r.ok) << "mask " << ::testing::PrintToString(mask);
    ASSERT_NE(r.reason, nullptr);
    EXPECT_EQ(r.reason, reason) << "mask " << ::testing::PrintToString(mask);
  }
};

TEST_P(TransitionTable, AcceptsExactlyTheListedAttributes) {
  const std::optional<Expected> expected = find_expected(type(), cur(), next());
  const TransitionRule rule = transition_rule(type(), cur(), next());

  if (!expected) {
    EXPECT_FALSE(rule.valid);
    EXPECT_EQ(rule.required, M::none);
    EXPECT_EQ(rule.optional, M::none);
    const std::string reason = type() == T::rc && cur() == S::sqe && next() == S::rts
                                   ? "SQE->RTS is not a valid transition on RC (an RC QP never "
                                     "enters SQE)"
                                   : arrow() + " is not a valid transition";
    expect_fail(M::none, reason);
    expect_fail(M::state, reason);
    for (int b = 1; b < kAttrBits; ++b)
      expect_fail(bit(b) | M::state,
                  b == 1 && !cur_state_allowed_in(cur()) ? kCurStateReason : reason);
    return;
  }

  EXPECT_TRUE(rule.valid);
  EXPECT_EQ(rule.required, expected->required);
  EXPECT_EQ(rule.optional, expected->optional);

  // Exactly the required attributes, with or without the STATE bit.
  expect_ok(expected->required);
  expect_ok(expected->required | M::state);
  expect_ok(expected->required | expected->optional | M::state);

  const std::string missing_reason = arrow() + " on " + name(type()) + " requires ";
  for (int b = 1; b < kAttrBits; ++b) {
    SCOPED_TRACE(kBitNames[b]);
    const M m = bit(b);
    if (any(expected->required, m)) {
      const TransitionCheck r = check((expected->required & ~m) | M::state);
      EXPECT_FALSE(r.ok);
      EXPECT_EQ(std::string(r.reason).rfind(missing_reason, 0), 0u) << r.reason;
      EXPECT_NE(std::string(r.reason).find(kBitNames[b]), std::string::npos) << r.reason;
    } else if (any(expected->optional, m)) {
      expect_ok(expected->required | m | M::state);
    } else if (b == 1 && !cur_state_allowed_in(cur())) {
      expect_fail(expected->required | m | M::state, kCurStateReason);
    } else {
      expect_fail(expected->required | m | M::state,
                  std::string("attribute ") + kBitNames[b] + " not allowed in " + arrow());
    }
  }

  // A bit beyond the known attributes.
  expect_fail(expected->required | static_cast<M>(1u << 25), "unknown attribute bit in mask");
}

std::vector<Transition> all_transitions() {
  std::vector<Transition> v;
  for (T t : kAllTypes)
    for (S c : kAllStates)
      for (S n : kAllStates) v.emplace_back(t, c, n);
  return v;
}

std::string transition_name(const ::testing::TestParamInfo<Transition>& p) {
  const auto& [t, c, n] = p.param;
  return name(t) + "_" + name(c) + "_to_" + name(n);
}

INSTANTIATE_TEST_SUITE_P(AllTypesAndStates, TransitionTable,
                         ::testing::ValuesIn(all_transitions()), transition_name);

// ---------------------------------------------------------------------------------------------
// Rules worth stating on their own.

TEST(QpStateTable, ReasonsNameTheProblem) {
  EXPECT_STREQ(check_transition(T::rc, S::reset, S::rtr, M::state).reason,
               "RESET->RTR is not a valid transition");
  EXPECT_STREQ(check_transition(T::rc, S::init, S::rtr, M::state).reason,
               "INIT->RTR on RC requires AV, PATH_MTU, RQ_PSN, MIN_RNR_TIMER, "
               "MAX_DEST_RD_ATOMIC, DEST_QPN");
  EXPECT_STREQ(check_transition(T::ud, S::init, S::rtr, M::state | M::timeout).reason,
               "attribute TIMEOUT not allowed in INIT->RTR");
}

TEST(QpStateTable, CurStateOnlyFromRtrRtsSqdSqe) {
  for (T t : kAllTypes)
    for (S c : {S::reset, S::init, S::err})
      for (S n : kAllStates) {
        const TransitionCheck r = check_transition(t, c, n, M::state | M::cur_state);
        EXPECT_FALSE(r.ok) << name(t) << " " << name(c) << "->" << name(n);
        EXPECT_EQ(r.reason, kCurStateReason);
      }
  // Allowed where it is optional: every transition into RTS ...
  for (T t : kAllTypes) {
    EXPECT_TRUE(check_transition(t, S::rts, S::rts, M::cur_state).ok) << name(t);
    EXPECT_TRUE(check_transition(t, S::sqd, S::rts, M::state | M::cur_state).ok) << name(t);
  }
  EXPECT_TRUE(check_transition(T::rc, S::rtr, S::rts,
                               M::state | M::cur_state | M::sq_psn | M::timeout | M::retry_cnt |
                                   M::rnr_retry | M::max_qp_rd_atomic)
                  .ok);
  EXPECT_TRUE(check_transition(T::uc, S::sqe, S::rts, M::state | M::cur_state).ok);
  // ... but, as in the kernel, it still counts as an attribute elsewhere.
  EXPECT_FALSE(check_transition(T::rc, S::rts, S::err, M::state | M::cur_state).ok);
  EXPECT_FALSE(check_transition(T::ud, S::rts, S::sqd, M::state | M::cur_state).ok);
}

TEST(QpStateTable, ResetToErrorIsRejectedAsByTheKernel) {
  for (T t : kAllTypes) EXPECT_FALSE(check_transition(t, S::reset, S::err, M::state).ok);
}

TEST(QpStateTable, AnyStateButResetCanGoToError) {
  for (T t : kAllTypes)
    for (S c : kAllStates) {
      if (c == S::reset) continue;
      EXPECT_TRUE(check_transition(t, c, S::err, M::state).ok) << name(t) << " " << name(c);
      EXPECT_TRUE(check_transition(t, c, S::reset, M::state).ok) << name(t) << " " << name(c);
    }
}

TEST(QpStateTable, QpCapIsNeverAccepted) {
  for (const Expected& e : kExpected)
    EXPECT_FALSE(check_transition(e.type, e.cur, e.next, e.required | M::state | M::cap).ok);
}

TEST(QpStateTable, WithoutStateBitTheQpStaysPut) {
  EXPECT_TRUE(check_transition(T::rc, S::rts, S::rts, M::access_flags | M::min_rnr_timer).ok);
  EXPECT_TRUE(check_transition(T::ud, S::init, S::init, M::qkey).ok);
  EXPECT_FALSE(check_transition(T::rc, S::init, S::init, M::qkey).ok);
  EXPECT_TRUE(check_transition(T::rc, S::reset, S::reset, M::none).ok);
  EXPECT_TRUE(check_transition(T::uc, S::err, S::err, M::none).ok);
  EXPECT_FALSE(check_transition(T::ud, S::rtr, S::rtr, M::none).ok);
}

// The masks applications such as perftest and rping pass, in order.
TEST(QpStateTable, UsualBringUpSequences) {
  const M rc_init = M::state | M::pkey_index | M::port | M::access_flags;
  const M rc_rtr = M::state | M::av | M::path_mtu | M::dest_qpn | M::rq_psn |
                   M::max_dest_rd_atomic | M::min_rnr_timer;
  const M rc_rts = M::state | M::timeout | M::retry_cnt | M::rnr_retry | M::sq_psn |
                   M::max_qp_rd_atomic;
  EXPECT_TRUE(check_transition(T::rc, S::reset, S::init, rc_init).ok);
  EXPECT_TRUE(check_transition(T::rc, S::init, S::rtr, rc_rtr).ok);
  EXPECT_TRUE(check_transition(T::rc, S::rtr, S::rts, rc_rts).ok);

  EXPECT_TRUE(check_transition(T::ud, S::reset, S::init,
                               M::state | M::pkey_index | M::port | M::qkey)
                  .ok);
  EXPECT_TRUE(check_transition(T::ud, S::init, S::rtr, M::state).ok);
  EXPECT_TRUE(check_transition(T::ud, S::rtr, S::rts, M::state | M::sq_psn).ok);

  // A UD-style mask on an RC QP fails.
  EXPECT_FALSE(check_transition(T::rc, S::reset, S::init,
                                M::state | M::pkey_index | M::port | M::qkey)
                   .ok);
}

TEST(QpStateTable, OutOfRangeArguments) {
  const auto bad_state = static_cast<S>(7);
  const auto bad_type = static_cast<T>(0);
  EXPECT_STREQ(check_transition(T::rc, bad_state, S::err, M::state).reason,
               "current QP state out of range");
  EXPECT_STREQ(check_transition(T::rc, S::init, bad_state, M::state).reason,
               "requested QP state out of range");
  EXPECT_STREQ(check_transition(bad_type, S::reset, S::reset, M::none).reason,
               "unknown QP type");
  EXPECT_FALSE(check_transition(static_cast<T>(5), S::reset, S::reset, M::none).ok);
  EXPECT_FALSE(transition_rule(T::rc, bad_state, S::err).valid);
  EXPECT_FALSE(transition_rule(T::rc, S::err, static_cast<S>(255)).valid);
  EXPECT_FALSE(transition_rule(bad_type, S::reset, S::init).valid);
}

}  // namespace
}  // namespace verbsim::sim

namespace verbsim {

void PrintTo(QpAttrMask m, std::ostream* os) {
  const auto v = to_underlying(m);
  if (v == 0) {
    *os << "none";
    return;
  }
  bool first = true;
  for (int b = 0; b < 32; ++b) {
    if ((v >> b & 1u) == 0) continue;
    *os << (first ? "" : "|");
    if (b < sim::kAttrBits)
      *os << sim::kBitNames[b];
    else
      *os << "bit" << b;
    first = false;
  }
}

}  // namespace verbsim
