#include "transport/qp_state_table.hpp"

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "verbsim/error.hpp"

namespace verbsim::sim {
namespace {

using M = QpAttrMask;
using S = QpState;

constexpr std::size_t kStates = 7;
constexpr std::size_t kTypes = 3;
constexpr std::size_t kAttrBits = 21;  // QpAttrMask::state .. QpAttrMask::dest_qpn

constexpr std::array<std::string_view, kStates> kStateNames{"RESET", "INIT", "RTR", "RTS",
                                                            "SQD",   "SQE",  "ERR"};
constexpr std::array<std::string_view, kTypes> kTypeNames{"RC", "UC", "UD"};
// Indexed by bit number; the IBV_QP_* names without the prefix.
constexpr std::array<std::string_view, kAttrBits> kAttrNames{
    "STATE", "CUR_STATE", "EN_SQD_ASYNC_NOTIFY", "ACCESS_FLAGS", "PKEY_INDEX", "PORT", "QKEY",
    "AV", "PATH_MTU", "TIMEOUT", "RETRY_CNT", "RNR_RETRY", "RQ_PSN", "MAX_QP_RD_ATOMIC",
    "ALT_PATH", "MIN_RNR_TIMER", "SQ_PSN", "MAX_DEST_RD_ATOMIC", "PATH_MIG_STATE", "CAP",
    "DEST_QPN"};
constexpr auto kKnownBits = static_cast<std::uint32_t>((1ull << kAttrBits) - 1);

constexpr std::size_t idx(S s) { return static_cast<std::size_t>(s); }

// rc/uc/ud columns of kTypeNames; kTypes when out of range.
constexpr std::size_t type_index(QpType t) {
  switch (t) {
    case QpType::rc: return 0;
    case QpType::uc: return 1;
    case QpType::ud: return 2;
  }
  return kTypes;
}

// ---------------------------------------------------------------------------------------------
// The table. A transition missing from kEntries is invalid for every type.

constexpr TransitionRule kAbsent{false, M::none, M::none};
constexpr TransitionRule kBare{true, M::none, M::none};
constexpr TransitionRule need(M required, M optional = M::none) {
  return {true, required, optional};
}
constexpr TransitionRule may(M optional) { return {true, M::none, optional}; }

struct Entry {
  S cur;
  S next;
  TransitionRule rc, uc, ud;
};

// Attribute sets shared by several rows.
constexpr M kInitAttrsConnected = M::pkey_index | M::port | M::access_flags;
constexpr M kInitAttrsUd = M::pkey_index | M::port | M::qkey;
constexpr M kRtrOptConnected = M::alt_path | M::access_flags | M::pkey_index;
// What an RTS QP may change, also when it returns to RTS from SQD.
constexpr M kRtsOptRc =
    M::cur_state | M::access_flags | M::alt_path | M::path_mig_state | M::min_rnr_timer;
constexpr M kRtsOptUc = M::cur_state | M::access_flags | M::alt_path | M::path_mig_state;
constexpr M kRtsOptUd = M::cur_state | M::qkey;

constexpr std::array kEntries{
    Entry{S::reset, S::reset, kBare, kBare, kBare},
    Entry{S::reset, S::init, need(kInitAttrsConnected), need(kInitAttrsConnected),
          need(kInitAttrsUd)},

    Entry{S::init, S::reset, kBare, kBare, kBare},
    Entry{S::init, S::err, kBare, kBare, kBare},
    Entry{S::init, S::init, may(kInitAttrsConnected), may(kInitAttrsConnected),
          may(kInitAttrsUd)},
    Entry{S::init, S::rtr,
          need(M::av | M::path_mtu | M::dest_qpn | M::rq_psn | M::max_dest_rd_atomic |
                   M::min_rnr_timer,
               kRtrOptConnected),
          need(M::av | M::path_mtu | M::dest_qpn | M::rq_psn, kRtrOptConnected),
          may(M::pkey_index | M::qkey)},

    Entry{S::rtr, S::reset, kBare, kBare, kBare},
    Entry{S::rtr, S::err, kBare, kBare, kBare},
    Entry{S::rtr, S::rts,
          need(M::sq_psn | M::timeout | M::retry_cnt | M::rnr_retry | M::max_qp_rd_atomic,
               kRtsOptRc),
          need(M::sq_psn, kRtsOptUc), need(M::sq_psn, kRtsOptUd)},

    Entry{S::rts, S::reset, kBare, kBare, kBare},
    Entry{S::rts, S::err, kBare, kBare, kBare},
    Entry{S::rts, S::rts, may(kRtsOptRc), may(kRtsOptUc), may(kRtsOptUd)},
    Entry{S::rts, S::sqd, may(M::en_sqd_async_notify), may(M::en_sqd_async_notify),
          may(M::en_sqd_async_notify)},

    Entry{S::sqd, S::reset, kBare, kBare, kBare},
    Entry{S::sqd, S::err, kBare, kBare, kBare},
    Entry{S::sqd, S::rts, may(kRtsOptRc), may(kRtsOptUc), may(kRtsOptUd)},
    // A drained SQ may have its path and responder/requester parameters changed.
    Entry{S::sqd, S::sqd,
          may(M::port | M::av | M::timeout | M::retry_cnt | M::rnr_retry | M::max_qp_rd_atomic |
              M::max_dest_rd_atomic | M::alt_path | M::access_flags | M::pkey_index |
              M::min_rnr_timer | M::path_mig_state),
          may(M::av | M::alt_path | M::access_flags | M::pkey_index | M::path_mig_state),
          may(M::pkey_index | M::qkey)},

    Entry{S::sqe, S::reset, kBare, kBare, kBare},
    Entry{S::sqe, S::err, kBare, kBare, kBare},
    Entry{S::sqe, S::rts, kAbsent, may(M::cur_state | M::access_flags),
          may(M::cur_state | M::qkey)},

    Entry{S::err, S::reset, kBare, kBare, kBare},
    Entry{S::err, S::err, kBare, kBare, kBare},
};

using Grid = std::array<std::array<std::array<TransitionRule, kStates>, kStates>, kTypes>;

constexpr Grid build_grid() {
  Grid g{};
  for (auto& per_type : g)
    for (auto& row : per_type) row.fill(kAbsent);
  for (const Entry& e : kEntries) {
    g[0][idx(e.cur)][idx(e.next)] = e.rc;
    g[1][idx(e.cur)][idx(e.next)] = e.uc;
    g[2][idx(e.cur)][idx(e.next)] = e.ud;
  }
  return g;
}

constexpr Grid kGrid = build_grid();

// ---------------------------------------------------------------------------------------------
// Error messages, built at compile time from the table so they can be returned as static
// strings and never disagree with it.

template <std::size_t N>
struct Text {
  std::array<char, N> buf{};
  std::size_t len = 0;

  constexpr Text& operator<<(std::string_view s) {
    if (len + s.size() >= N) std::abort();  // not constant: a too-small N fails to compile
    for (char c : s) buf[len++] = c;
    return *this;
  }
  constexpr const char* c_str() const { return buf.data(); }
};

constexpr void append_transition(auto& t, std::size_t cur, std::size_t next) {
  t << kStateNames[cur] << "->" << kStateNames[next];
}

// "X->Y is not a valid transition", per (cur, next).
using InvalidMsgs = std::array<std::array<Text<48>, kStates>, kStates>;
constexpr InvalidMsgs build_invalid_msgs() {
  InvalidMsgs m{};
  for (std::size_t c = 0; c < kStates; ++c)
    for (std::size_t n = 0; n < kStates; ++n) {
      append_transition(m[c][n], c, n);
      m[c][n] << " is not a valid transition";
    }
  return m;
}
constexpr InvalidMsgs kInvalidMsgs = build_invalid_msgs();

// The tables below have a row only for the (cur, next) pairs valid for some type, a third of
// the full grid.
constexpr std::size_t kNoSlot = kStates * kStates;
using SlotMap = std::array<std::array<std::size_t, kStates>, kStates>;
constexpr SlotMap build_slots() {
  SlotMap s{};
  std::size_t next_slot = 0;
  for (std::size_t c = 0; c < kStates; ++c)
    for (std::size_t n = 0; n < kStates; ++n) {
      const bool used = kGrid[0][c][n].valid || kGrid[1][c][n].valid || kGrid[2][c][n].valid;
      s[c][n] = used ? next_slot++ : kNoSlot;
    }
  return s;
}
constexpr SlotMap kSlots = build_slots();
constexpr std::size_t kSlotCount = [] {
  std::size_t count = 0;
  for (const auto& row : kSlots)
    for (std::size_t s : row) count += s != kNoSlot;
  return count;
}();

// "INIT->RTR on RC requires AV, PATH_MTU, ...", per (type, slot); empty where nothing is
// required.
using RequiredMsgs = std::array<std::array<Text<128>, kSlotCount>, kTypes>;
constexpr RequiredMsgs build_required_msgs() {
  RequiredMsgs m{};
  for (std::size_t t = 0; t < kTypes; ++t)
    for (std::size_t c = 0; c < kStates; ++c)
      for (std::size_t n = 0; n < kStates; ++n) {
        const auto req = to_underlying(kGrid[t][c][n].required);
        if (req == 0) continue;
        auto& msg = m[t][kSlots[c][n]];
        append_transition(msg, c, n);
        msg << " on " << kTypeNames[t] << " requires ";
        bool first = true;
        for (std::size_t b = 0; b < kAttrBits; ++b) {
          if ((req >> b & 1u) == 0) continue;
          if (!first) msg << ", ";
          msg << kAttrNames[b];
          first = false;
        }
      }
  return m;
}
constexpr RequiredMsgs kRequiredMsgs = build_required_msgs();

// "attribute TIMEOUT not allowed in INIT->RTR", per (slot, bit).
using NotAllowedMsgs = std::array<std::array<Text<64>, kAttrBits>, kSlotCount>;
constexpr NotAllowedMsgs build_not_allowed_msgs() {
  NotAllowedMsgs m{};
  for (std::size_t c = 0; c < kStates; ++c)
    for (std::size_t n = 0; n < kStates; ++n) {
      if (kSlots[c][n] == kNoSlot) continue;
      for (std::size_t b = 0; b < kAttrBits; ++b) {
        auto& msg = m[kSlots[c][n]][b];
        msg << "attribute " << kAttrNames[b] << " not allowed in ";
        append_transition(msg, c, n);
      }
    }
  return m;
}
constexpr NotAllowedMsgs kNotAllowedMsgs = build_not_allowed_msgs();

constexpr TransitionCheck throw_verb_error(const char* reason) { return {false, reason}; }

}  // namespace

TransitionRule transition_rule(QpType type, QpState cur, QpState next) noexcept {
  const std::size_t t = type_index(type);
  if (t == kTypes || idx(cur) >= kStates || idx(next) >= kStates) return kAbsent;
  return kGrid[t][idx(cur)][idx(next)];
}

TransitionCheck check_transition(QpType type, QpState cur, QpState next,
                                 QpAttrMask mask) noexcept {
  const std::size_t t = type_index(type);
  if (t == kTypes) return throw_verb_error("unknown QP type");
  if (idx(cur) >= kStates) return throw_verb_error("current QP state out of range");
  if (idx(next) >= kStates) return throw_verb_error("requested QP state out of range");
  const std::size_t c = idx(cur);
  const std::size_t n = idx(next);

  // Checks in ib_modify_qp_is_ok's order. CUR_STATE is optional only in transitions out of
  // these states, so this first check just gives the clearer message.
  if (any(mask, M::cur_state) && cur != S::rtr && cur != S::rts && cur != S::sqd &&
      cur != S::sqe)
    return throw_verb_error("attribute CUR_STATE only allowed when the QP is in RTR, RTS, SQD or SQE");

  const TransitionRule& rule = kGrid[t][c][n];
  if (!rule.valid) {
    if (type == QpType::rc && cur == S::sqe && next == S::rts)
      return throw_verb_error("SQE->RTS is not a valid transition on RC (an RC QP never enters SQE)");
    return throw_verb_error(kInvalidMsgs[c][n].c_str());
  }
  if (!all(mask, rule.required)) return throw_verb_error(kRequiredMsgs[t][kSlots[c][n]].c_str());

  const auto extra = to_underlying(mask & ~(rule.required | rule.optional | M::state));
  if (extra == 0) return {true, ""};
  if ((extra & ~kKnownBits) != 0) return throw_verb_error("unknown attribute bit in mask");
  return throw_verb_error(kNotAllowedMsgs[kSlots[c][n]][std::countr_zero(extra)].c_str());
}

}  // namespace verbsim::sim
