#include "verbsim/sim/faults.hpp"

#include "fabric/names.hpp"
#include "fabric/numbers.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>

namespace verbsim::sim {

namespace {

#define VERBSIM_FAULT_VERB_NAME(name) #name,
constexpr std::array<std::string_view, kVerbCount> kVerbNames{
    VERBSIM_FAULT_VERBS(VERBSIM_FAULT_VERB_NAME)};
#undef VERBSIM_FAULT_VERB_NAME

constexpr std::array<std::pair<std::string_view, int>, 24> kErrnos{{
    {"EPERM", EPERM},       {"ENOENT", ENOENT},   {"EINTR", EINTR},       {"EIO", EIO},
    {"EAGAIN", EAGAIN},     {"ENOMEM", ENOMEM},   {"EACCES", EACCES},     {"EFAULT", EFAULT},
    {"EBUSY", EBUSY},       {"EEXIST", EEXIST},   {"ENODEV", ENODEV},     {"EINVAL", EINVAL},
    {"ENOSPC", ENOSPC},     {"ENOSYS", ENOSYS},   {"EOPNOTSUPP", EOPNOTSUPP},
    {"ETIMEDOUT", ETIMEDOUT}, {"ECONNRESET", ECONNRESET}, {"EDEADLK", EDEADLK},
    {"ENETDOWN", ENETDOWN}, {"ENETUNREACH", ENETUNREACH}, {"EHOSTUNREACH", EHOSTUNREACH},
    {"EADDRINUSE", EADDRINUSE}, {"EADDRNOTAVAIL", EADDRNOTAVAIL}, {"ECONNREFUSED", ECONNREFUSED},
}};

constexpr std::array<std::string_view, 4> kPacketNames{"drop", "delay", "duplicate", "reorder"};
constexpr std::array<std::string_view, 7> kCmMessageNames{"any", "req", "rep", "rtu",
                                                          "rej", "dreq", "drep"};
constexpr std::array<std::string_view, 5> kTimedNames{"link_down", "link_up", "qp_fatal",
                                                       "device_fatal", "srq_limit"};

std::string errno_name(int err) {
  for (const auto& [name, value] : kErrnos) {
    if (value == err) return std::string(name);
  }
  return std::to_string(err);
}

std::string format_time(std::uint64_t ns) {
  if (ns != 0 && ns % 1'000'000'000 == 0) return std::to_string(ns / 1'000'000'000) + "s";
  if (ns != 0 && ns % 1'000'000 == 0) return std::to_string(ns / 1'000'000) + "ms";
  if (ns != 0 && ns % 1'000 == 0) return std::to_string(ns / 1'000) + "us";
  return std::to_string(ns) + "ns";
}

std::string format_prob(double p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", p);
  return buf;
}

}  // namespace

bool valid_qp_name(std::string_view name) noexcept {
  if (name.empty() || !name_letter(name[0])) return false;
  return std::all_of(name.begin(), name.end(), name_char);
}

namespace {

constexpr std::uint64_t kLongestTime = std::uint64_t{1} << 62;

class RuleParser {
 public:
  explicit RuleParser(std::string_view rule) : rule_(rule) {}

  [[noreturn]] void error(const std::string& what) const {
    throw std::invalid_argument("fault plan: " + what + " in rule '" + std::string(rule_) + "'");
  }

  // A number from 0 to `max` (what the key sets holds no more), as C spells it: decimal,
  // 0x hexadecimal or 0 octal.
  std::uint64_t number(std::string_view key, std::string_view v,
                       std::uint64_t max = UINT64_MAX) const {
    const std::optional<std::uint64_t> n = read_u64(v);
    if (!n || *n > max) {
      error(std::string(key) + "=" + std::string(v) + " is not a number from 0 to " +
            std::to_string(max));
    }
    return *n;
  }

  double probability(std::string_view v) const {
    double p = 0;
    const char* end = v.data() + v.size();
    const auto [stop, ec] = std::from_chars(v.data(), end, p);
    // out of range: too small to be told from 0 (1e-400), which it is not
    if (v.empty() || ec != std::errc{} || stop != end || !(p >= 0.0 && p <= 1.0)) {
      error("p=" + std::string(v) + " is not in [0, 1]");
    }
    return p;
  }

  // A time in ns, us, ms or s, its digits decimal (strtoull took "010us" as octal, 8 us), at
  // most 2^62 ns: added to any clock the simulator reaches (or to another time of a rule) it
  // cannot wrap past 2^64.
  std::uint64_t time(std::string_view key, std::string_view v) const {
    std::size_t i = 0;
    while (i < v.size() && v[i] >= '0' && v[i] <= '9') ++i;
    if (i == 0) error(std::string(key) + "=" + std::string(v) + " is not a time");
    const std::optional<std::uint64_t> n = read_u64(v.substr(0, i), /*decimal_only=*/true);
    const std::string_view unit = v.substr(i);
    std::uint64_t scale = 0;
    if (unit.empty() || unit == "ns") scale = 1;
    if (unit == "us") scale = 1'000;
    if (unit == "ms") scale = 1'000'000;
    if (unit == "s") scale = 1'000'000'000;
    if (scale == 0) {
      error(std::string(key) + "=" + std::string(v) + ": unknown unit (ns, us, ms or s)");
    }
    const std::optional<std::uint64_t> ns = n ? times(*n, scale) : std::nullopt;
    if (!ns || *ns > kLongestTime) {
      error(std::string(key) + "=" + std::string(v) +
            " is past the longest time a rule may name (2^62 ns, about 146 years)");
    }
    return *ns;
  }

  int err(std::string_view v) const {
    for (const auto& [name, value] : kErrnos) {
      if (name == v) return value;
    }
    const std::uint64_t n = number("errno", v);
    if (n == 0 || n > 4095) error("errno=" + std::string(v) + " out of range");
    return static_cast<int>(n);
  }

 private:
  std::string_view rule_;
};

// ---------------------------------------------------------------------------------------------
// The rule language as tables: a kind of rule is a row of kKinds, a key a row of its key table.

// A rule while its words are read: what any kind's keys may set.
struct Draft {
  Trigger when;
  int triggers = 0;  // how many of nth=, every= and p= were given
  Filter where;
  int err = 0;
  PacketFault packet{};
  TimedFault timed;
  CmFault cm;
  std::optional<std::uint32_t> depth;

  void need_one_trigger(const RuleParser& p) const {
    if (triggers != 1) p.error("give exactly one of nth=, every= or p=");
  }
};

// One key=value word of a rule; conversions throw naming the rule.
struct Arg {
  const RuleParser& rule;
  std::string_view key;
  std::string_view value;

  std::uint64_t number(std::uint64_t max = UINT64_MAX) const {
    return rule.number(key, value, max);
  }
  std::uint32_t u32() const { return static_cast<std::uint32_t>(number(UINT32_MAX)); }
  std::uint64_t time() const { return rule.time(key, value); }
};

struct Key {
  std::string_view name;
  void (*set)(const Arg&, Draft&);
};

// When a rule fires (exactly one of nth=, every=, p=) and what it matches (qp=, dev=).
constexpr Key kNthKey{"nth", [](const Arg& a, Draft& d) {
                        d.when.nth = a.number();
                        if (d.when.nth == 0) a.rule.error("nth counts from 1");
                        ++d.triggers;
                      }};
constexpr Key kEveryKey{"every", [](const Arg& a, Draft& d) {
                          d.when.every = a.number();
                          if (d.when.every == 0) a.rule.error("every must be at least 1");
                          ++d.triggers;
                        }};
constexpr Key kPKey{"p", [](const Arg& a, Draft& d) {
                      d.when.probability = a.rule.probability(a.value);
                      ++d.triggers;
                    }};
// qp=<number>, or qp=<name> (World::name).
constexpr Key kQpKey{"qp", [](const Arg& a, Draft& d) {
                       if (!a.value.empty() && a.value[0] >= '0' && a.value[0] <= '9') {
                         d.where.qpn = a.u32();
                         d.where.qp_name.clear();
                         return;
                       }
                       if (!valid_qp_name(a.value)) {
                         a.rule.error("qp=" + std::string(a.value) +
                                      " is neither a QP number nor a name (a letter or '_', "
                                      "then letters, digits, '_', '-' or '.')");
                       }
                       d.where.qp_name = a.value;
                       d.where.qpn.reset();
                     }};
// A device's name as a kernel gives it (rxe0, mlx5_0, sim1): up to 64 letters, digits, '_',
// '-' or '.'. Anything else (a blank, a control character) could not survive printing.
std::string_view device_name(const Arg& a) {
  const bool ok = !a.value.empty() && a.value.size() <= 64 &&
                  std::all_of(a.value.begin(), a.value.end(), name_char);
  if (!ok) {
    a.rule.error("dev=" + std::string(a.value) +
                 " is not a device name (up to 64 letters, digits, '_', '-' or '.')");
  }
  return a.value;
}

constexpr Key kDevKey{"dev", [](const Arg& a, Draft& d) { d.where.device = device_name(a); }};

constexpr std::array kVerbKeys{
    Key{"errno", [](const Arg& a, Draft& d) { d.err = a.rule.err(a.value); }},
    kNthKey, kEveryKey, kPKey, kQpKey, kDevKey,
};

constexpr std::array kPacketKeys{
    Key{"psn",
        [](const Arg& a, Draft& d) {
          d.packet.psn = static_cast<std::uint32_t>(a.number(0xffffff));  // 24 bits
        }},
    Key{"by", [](const Arg& a, Draft& d) { d.packet.by_ns = a.time(); }},
    Key{"packets",
        [](const Arg& a, Draft& d) {
          if (a.value == "requests") {
            d.packet.kinds = PacketKinds::requests;
          } else if (a.value == "responses") {
            d.packet.kinds = PacketKinds::responses;
          } else if (a.value == "acks") {
            d.packet.kinds = PacketKinds::acks;
          } else if (a.value == "all") {
            d.packet.kinds = PacketKinds::all;
          } else {
            a.rule.error("packets=" + std::string(a.value) +
                         " is not requests, responses, acks or all");
          }
        }},
    kNthKey, kEveryKey, kPKey, kQpKey, kDevKey,
};

// Timed rules have no trigger, and their qp= and dev= name what breaks rather than filter.
constexpr std::array kTimedKeys{
    Key{"at", [](const Arg& a, Draft& d) { d.timed.at_ns = a.time(); }},
    Key{"for", [](const Arg& a, Draft& d) { d.timed.for_ns = a.time(); }},
    Key{"dev", [](const Arg& a, Draft& d) { d.timed.device = device_name(a); }},
    Key{"port",
        [](const Arg& a, Draft& d) { d.timed.port = static_cast<std::uint8_t>(a.number(255)); }},
    Key{"qp", [](const Arg& a, Draft& d) { d.timed.qpn = a.u32(); }},
};

constexpr std::array kCmKeys{
    Key{"msg",
        [](const Arg& a, Draft& d) {
          const auto* it = std::find(kCmMessageNames.begin(), kCmMessageNames.end(), a.value);
          if (it == kCmMessageNames.end()) {
            a.rule.error("msg=" + std::string(a.value) +
                         " is not req, rep, rtu, rej, dreq, drep or any");
          }
          d.cm.msg = static_cast<CmMessage>(it - kCmMessageNames.begin());
        }},
    kNthKey, kEveryKey, kPKey, kQpKey, kDevKey,
};

constexpr std::array kCqOverrunKeys{
    Key{"depth", [](const Arg& a, Draft& d) { d.depth = a.u32(); }},
};

// A family of rule kinds: `names` in the order of their enum's values, the keys they take,
// and `finish`, which checks what the keys left unset and adds the rule `names[index]` to
// the plan.
struct Kind {
  std::span<const std::string_view> names;
  std::span<const Key> keys;
  void (*finish)(const RuleParser&, std::size_t index, Draft&, FaultPlan&);
};

constexpr std::array<std::string_view, 1> kCmDropName{"cm_drop"};
constexpr std::array<std::string_view, 1> kCqOverrunName{"cq_overrun"};

constexpr std::array kKinds{
    Kind{kVerbNames, kVerbKeys,
         [](const RuleParser& p, std::size_t index, Draft& d, FaultPlan& plan) {
           d.need_one_trigger(p);
           if (d.err == 0) p.error("errno= is required");
           plan.verbs.push_back({static_cast<Verb>(index), d.when, d.err, d.where});
         }},
    Kind{kPacketNames, kPacketKeys,
         [](const RuleParser& p, std::size_t index, Draft& d, FaultPlan& plan) {
           PacketFault& f = d.packet;
           f.action = static_cast<PacketAction>(index);
           if (f.psn && (f.kinds == PacketKinds::responses || f.kinds == PacketKinds::acks)) {
             p.error("psn= names a request packet, and packets=responses or acks takes none");
           }
           if (f.psn && d.triggers == 0) {  // psn= alone: that packet, once
             d.when.nth = 1;
             ++d.triggers;
           }
           d.need_one_trigger(p);
           if (f.by_ns == 0 && f.action == PacketAction::delay) f.by_ns = 10'000;
           if (f.by_ns == 0 && f.action == PacketAction::reorder) f.by_ns = 5'000;
           f.when = d.when;
           f.where = d.where;
           plan.packets.push_back(f);
         }},
    Kind{kTimedNames, kTimedKeys,
         [](const RuleParser& p, std::size_t index, Draft& d, FaultPlan& plan) {
           TimedFault& f = d.timed;
           f.action = static_cast<TimedAction>(index);
           if (f.action == TimedAction::qp_fatal && f.qpn == 0) p.error("qp= is required");
           if ((f.action == TimedAction::link_down || f.action == TimedAction::link_up ||
                f.action == TimedAction::device_fatal) &&
               f.device.empty()) {
             p.error("dev= is required");
           }
           plan.timed.push_back(f);
         }},
    Kind{kCmDropName, kCmKeys,
         [](const RuleParser& p, std::size_t, Draft& d, FaultPlan& plan) {
           d.need_one_trigger(p);
           d.cm.when = d.when;
           d.cm.where = d.where;
           plan.cm.push_back(d.cm);
         }},
    // One depth for the whole plan: a later rule changes it, one without depth= keeps it.
    Kind{kCqOverrunName, kCqOverrunKeys,
         [](const RuleParser& p, std::size_t, Draft& d, FaultPlan& plan) {
           if (d.depth) plan.cq_depth = *d.depth;
           if (plan.cq_depth == 0) p.error("depth= is required and at least 1");
         }},
};

// One rule's words: its kind (without an ibv_ prefix) and its key=value pairs, in order.
struct Words {
  std::string_view kind;
  std::vector<std::pair<std::string_view, std::string_view>> args;
};

Words split_words(const RuleParser& p, std::string_view rule) {
  Words w;
  std::string_view rest = rule;
  while (!rest.empty()) {
    const std::size_t sp = rest.find_first_of(" \t");
    const std::string_view word = rest.substr(0, sp);
    rest = sp == std::string_view::npos ? std::string_view{} : trim_blanks(rest.substr(sp));
    if (w.kind.empty()) {
      w.kind = word;
      continue;
    }
    const std::size_t eq = word.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      p.error("'" + std::string(word) + "' is not key=value");
    }
    w.args.emplace_back(word.substr(0, eq), word.substr(eq + 1));
  }
  if (w.kind.starts_with("ibv_")) w.kind.remove_prefix(4);
  return w;
}

void parse_rule(std::string_view rule, FaultPlan& plan) {
  const RuleParser p(rule);
  const Words words = split_words(p, rule);
  for (const Kind& kind : kKinds) {
    const auto name = std::find(kind.names.begin(), kind.names.end(), words.kind);
    if (name == kind.names.end()) continue;
    Draft d;
    for (const auto& arg : words.args) {
      const std::string_view key = arg.first;  // not a structured binding: clang 14 captures none
      const std::string_view value = arg.second;
      const auto k = std::find_if(kind.keys.begin(), kind.keys.end(),
                                  [&](const Key& row) { return row.name == key; });
      if (k == kind.keys.end()) p.error("unknown key '" + std::string(key) + "'");
      k->set(Arg{p, key, value}, d);
    }
    kind.finish(p, static_cast<std::size_t>(name - kind.names.begin()), d, plan);
    return;
  }
  p.error("unknown fault kind '" + std::string(words.kind) + "'");
}


}  // namespace

std::string_view to_string(Verb v) noexcept {
  const auto i = static_cast<std::size_t>(v);
  return i < kVerbNames.size() ? kVerbNames[i] : "unknown";
}

bool FaultPlan::has_verb(Verb v) const noexcept {
  for (const auto& f : verbs) {
    if (f.verb == v) return true;
  }
  return false;
}

FaultPlan& FaultPlan::append(const FaultPlan& other) {
  verbs.insert(verbs.end(), other.verbs.begin(), other.verbs.end());
  packets.insert(packets.end(), other.packets.begin(), other.packets.end());
  timed.insert(timed.end(), other.timed.begin(), other.timed.end());
  cm.insert(cm.end(), other.cm.begin(), other.cm.end());
  if (other.cq_depth != 0) cq_depth = other.cq_depth;
  return *this;
}

FaultPlan& FaultPlan::fail(Verb verb, int err, Trigger when, Filter where) {
  verbs.push_back({verb, when, err, std::move(where)});
  return *this;
}

FaultPlan& FaultPlan::packet(PacketAction action, Trigger when, Filter where) {
  packets.push_back({action, when, std::nullopt, 0, std::move(where)});
  return *this;
}

FaultPlan& FaultPlan::at(TimedFault fault) {
  timed.push_back(std::move(fault));
  return *this;
}

FaultPlan FaultPlan::from_env() {
  const char* text = std::getenv("VERBSIM_FAULTS");
  return text == nullptr ? FaultPlan{} : parse(text);
}

FaultPlan FaultPlan::parse(std::string_view text) {
  FaultPlan plan;
  for (const std::string_view rule : rule_texts(text)) parse_rule(rule, plan);
  return plan;
}

std::string FaultPlan::to_string() const {
  std::string out;
  auto add_trigger = [&](const Trigger& t) {
    if (t.nth != 0) out += " nth=" + std::to_string(t.nth);
    if (t.every != 0) out += " every=" + std::to_string(t.every);
    if (t.nth == 0 && t.every == 0) out += " p=" + format_prob(t.probability);
  };
  auto add_filter = [&](const Filter& f) {
    if (f.qpn) out += " qp=" + std::to_string(*f.qpn);
    if (!f.qp_name.empty()) out += " qp=" + f.qp_name;
    if (!f.device.empty()) out += " dev=" + f.device;
  };
  for (const auto& f : verbs) {
    if (!out.empty()) out += "; ";
    out += std::string(sim::to_string(f.verb));
    add_trigger(f.when);
    out += " errno=" + errno_name(f.err);
    add_filter(f.where);
  }
  for (const auto& f : packets) {
    if (!out.empty()) out += "; ";
    out += std::string(kPacketNames[static_cast<std::size_t>(f.action)]);
    add_trigger(f.when);
    if (f.psn) out += " psn=" + std::to_string(*f.psn);
    if (f.kinds == PacketKinds::requests) out += " packets=requests";
    if (f.kinds == PacketKinds::responses) out += " packets=responses";
    if (f.kinds == PacketKinds::acks) out += " packets=acks";
    if (f.action == PacketAction::delay || f.action == PacketAction::reorder) {
      out += " by=" + format_time(f.by_ns);
    }
    add_filter(f.where);
  }
  for (const auto& f : timed) {
    if (!out.empty()) out += "; ";
    out += std::string(kTimedNames[static_cast<std::size_t>(f.action)]);
    out += " at=" + format_time(f.at_ns);
    if (f.for_ns != 0) out += " for=" + format_time(f.for_ns);
    if (!f.device.empty()) out += " dev=" + f.device;
    if (f.action == TimedAction::link_down || f.action == TimedAction::link_up) {
      out += " port=" + std::to_string(f.port);
    }
    if (f.qpn != 0) out += " qp=" + std::to_string(f.qpn);
  }
  for (const auto& f : cm) {
    if (!out.empty()) out += "; ";
    out += "cm_drop msg=" + std::string(kCmMessageNames[static_cast<std::size_t>(f.msg)]);
    add_trigger(f.when);
    add_filter(f.where);
  }
  if (cq_depth != 0) {
    if (!out.empty()) out += "; ";
    out += "cq_overrun depth=" + std::to_string(cq_depth);
  }
  return out;
}

}  // namespace verbsim::sim
