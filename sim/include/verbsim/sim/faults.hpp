// Fault plans: which verbs fail, which packets are lost, what breaks and when.
//
// Text form (VERBSIM_FAULTS, or FaultPlan::parse): rules separated by ';' or new lines, each a
// kind followed by key=value words; '#' starts a comment.
//
//   post_send nth=3 errno=ENOMEM          # the 3rd post_send call fails with ENOMEM
//   poll_cq every=10 errno=EAGAIN qp=17   # every 10th poll (filters: qp=, dev=)
//   post_send nth=1 errno=ENOMEM qp=server # qp=<name>: the QP given that name (World::name)
//   get_cq_event p=0.05 errno=EAGAIN      # 5% of calls, drawn from the world's RNG
//   drop p=0.01                           # lose 1% of packets (RC retries them)
//   drop psn=5 qp=17                      # lose the packet with PSN 5 sent by QP 17, once
//   drop p=0.05 packets=responses         # packets=requests|responses|acks|all (acks: ACKs
//                                         # and NAKs; responses: those and READ/atomic data)
//   delay p=0.1 by=20us | duplicate p=0.01 | reorder p=0.02 by=5us
//                                         # a late copy is lost if the program has posted over
//                                         # its send queue slot since (its WQE completed)
//   link_down dev=sim1 port=1 at=2ms for=5ms   # PORT_ERR, packets lost, then PORT_ACTIVE
//   qp_fatal qp=18 at=1ms | device_fatal dev=sim0 at=3ms | srq_limit dev=sim1 at=1ms
//   cq_overrun depth=4                    # every CQ holds at most 4 completions
//   rdma_connect nth=1 errno=ENOMEM       # the connection manager's verbs fail like the others
//   cm_drop msg=rep nth=1                 # lose the first REP of the connection manager
//                                         # (msg=req|rep|rtu|rej|dreq|drep, or any; dev= the
//                                         # sender's device, qp= either side's QP)
//
// Verbs: post_send post_recv post_srq_recv poll_cq req_notify_cq get_cq_event get_async_event
// alloc_pd reg_mr create_cq create_qp modify_qp create_srq create_ah resize_cq rereg_mr (an
// ibv_ prefix is accepted), and the connection manager's rdma_bind_addr rdma_listen
// rdma_resolve_addr rdma_resolve_route rdma_connect rdma_accept rdma_reject rdma_disconnect
// rdma_get_cm_event (VERBSIM_FAULT_VERBS below).
// Times take ns, us, ms or s. errno takes a name (ENOMEM) or a number.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace verbsim::sim {

// The verbs a rule can fail, one row each: Verb, kVerbCount and the names parse() and
// to_string() use all come from this table. A verb's value is its row: append new verbs,
// never insert or reorder (the values index the world's per-verb rule tables, and code built
// against an earlier table keeps its numbers).
#define VERBSIM_FAULT_VERBS(X) \
  X(post_send)                 \
  X(post_recv)                 \
  X(post_srq_recv)             \
  X(poll_cq)                   \
  X(req_notify_cq)             \
  X(get_cq_event)              \
  X(get_async_event)           \
  X(alloc_pd)                  \
  X(reg_mr)                    \
  X(create_cq)                 \
  X(create_qp)                 \
  X(modify_qp)                 \
  X(create_srq)                \
  X(create_ah)                 \
  /* the connection manager's (verbsim/cm.hpp) */ \
  X(rdma_bind_addr)            \
  X(rdma_listen)               \
  X(rdma_resolve_addr)         \
  X(rdma_resolve_route)        \
  X(rdma_connect)              \
  X(rdma_accept)               \
  X(rdma_reject)               \
  X(rdma_disconnect)           \
  X(rdma_get_cm_event)         \
  X(resize_cq)                 \
  X(rereg_mr)

#define VERBSIM_FAULT_VERB_ENUMERATOR(name) name,
enum class Verb : std::uint8_t { VERBSIM_FAULT_VERBS(VERBSIM_FAULT_VERB_ENUMERATOR) };
#undef VERBSIM_FAULT_VERB_ENUMERATOR

#define VERBSIM_FAULT_VERB_ONE(name) +1
inline constexpr int kVerbCount = 0 VERBSIM_FAULT_VERBS(VERBSIM_FAULT_VERB_ONE);
#undef VERBSIM_FAULT_VERB_ONE
static_assert(static_cast<int>(Verb::rdma_get_cm_event) == 22, "append verbs, never insert");

std::string_view to_string(Verb v) noexcept;  // "post_send"
// Whether `name` can name a QP in a rule (qp=<name>): a letter or '_', then letters, digits,
// '_', '-' or '.'.
bool valid_qp_name(std::string_view name) noexcept;

// When a rule fires among the calls (or packets) it matches. Exactly one of the three is set.
struct Trigger {
  std::uint64_t nth = 0;    // the nth match only (1-based)
  std::uint64_t every = 0;  // every nth match
  double probability = 0;   // each match with this probability
};

// Which calls or packets a rule matches; empty matches all.
struct Filter {
  std::optional<std::uint32_t> qpn;  // a QP number (verbs on it, packets it sends or receives)
  std::string device;                // "sim0"
  // The QP given this name with World::name (text: qp=<name>, a letter or '_' first, then
  // letters, digits, '_', '-' or '.'). Resolved when the QP is named: until then the rule
  // matches nothing. A verb rule then matches that QP only; packet and cm_drop rules match its
  // number, as qp=<number> does (QP numbers repeat across devices).
  std::string qp_name;
  static Filter named(std::string qp_name) { return {std::nullopt, {}, std::move(qp_name)}; }
};

struct VerbFault {
  Verb verb;
  Trigger when;
  int err;
  Filter where;
};

enum class PacketAction : std::uint8_t { drop, delay, duplicate, reorder };

// Which packets a packet rule looks at (packets=): requests (SEND, WRITE, READ and atomic
// requests), responses (ACKs, NAKs, READ responses, atomic ACKs), acks (the responses that
// carry no data: ACKs and NAKs), or all.
enum class PacketKinds : std::uint8_t { all, requests, responses, acks };

struct PacketFault {
  PacketAction action;
  Trigger when;
  std::optional<std::uint32_t> psn;  // only the packet carrying this PSN (request packets)
  std::uint64_t by_ns = 0;           // delay, or the largest extra delay of reorder
  Filter where;
  PacketKinds kinds = PacketKinds::all;
};

// Messages of the connection manager (verbsim/cm.hpp).
enum class CmMessage : std::uint8_t { any, req, rep, rtu, rej, dreq, drep };

// cm_drop: a connection manager message lost on the way (its sender sends it again after the
// CM's response timeout).
struct CmFault {
  CmMessage msg = CmMessage::any;
  Trigger when;
  Filter where;
};

enum class TimedAction : std::uint8_t { link_down, link_up, qp_fatal, device_fatal, srq_limit };

struct TimedFault {
  TimedAction action;
  std::uint64_t at_ns = 0;
  std::uint64_t for_ns = 0;  // link_down: back up after this long (0: stays down)
  std::string device;
  std::uint8_t port = 1;
  std::uint32_t qpn = 0;
};

// Blanks (space, tab, carriage return) off both ends of `s`.
inline std::string_view trim_blanks(std::string_view s) noexcept {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

// The rules of a plan's text, as FaultPlan::parse reads them: separated by ';' or a newline, a
// '#' starting a comment to the rule's end, blanks around each dropped, empty ones skipped.
// Header-only: verbsim-swarm splits plans with it too.
inline std::vector<std::string_view> rule_texts(std::string_view text) {
  std::vector<std::string_view> rules;
  while (!text.empty()) {
    const std::size_t end = text.find_first_of(";\n");
    std::string_view rule = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view{} : text.substr(end + 1);
    if (const auto hash = rule.find('#'); hash != std::string_view::npos) rule = rule.substr(0, hash);
    if (!(rule = trim_blanks(rule)).empty()) rules.push_back(rule);
  }
  return rules;
}

struct FaultPlan {
  std::vector<VerbFault> verbs;
  std::vector<PacketFault> packets;
  std::vector<TimedFault> timed;
  std::vector<CmFault> cm;
  std::uint32_t cq_depth = 0;  // non-zero: every CQ overruns past this many entries

  bool empty() const noexcept {
    return verbs.empty() && packets.empty() && timed.empty() && cm.empty() && cq_depth == 0;
  }
  bool has_verb(Verb v) const noexcept;

  // Throws std::invalid_argument naming the rule and word that is wrong.
  static FaultPlan parse(std::string_view text);
  // VERBSIM_FAULTS, or an empty plan.
  static FaultPlan from_env();
  // The text form; parse(to_string()) gives the same plan.
  std::string to_string() const;

  // Appends `other`'s rules to this plan's; its cq_overrun depth, if any, replaces this one's.
  FaultPlan& append(const FaultPlan& other);

  FaultPlan& fail(Verb verb, int err, Trigger when, Filter where = {});
  FaultPlan& packet(PacketAction action, Trigger when, Filter where = {});
  FaultPlan& at(TimedFault fault);
};

}  // namespace verbsim::sim
