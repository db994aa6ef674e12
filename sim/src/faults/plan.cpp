#include "verbsim/sim/faults.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
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

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
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

class RuleParser {
 public:
  explicit RuleParser(std::string_view rule) : rule_(rule) {}

  [[noreturn]] void error(const std::string& what) const {
    throw std::invalid_argument("fault plan: " + what + " in rule '" + std::string(rule_) + "'");
  }

  std::uint64_t number(std::string_view key, std::string_view v) const {
    std::string s(v);
    char* end = nullptr;
    const unsigned long long x = std::strtoull(s.c_str(), &end, 0);
    if (s.empty() || *end != '\0') error(std::string(key) + "=" + s + " is not a number");
    return x;
  }

  double probability(std::string_view v) const {
    std::string s(v);
    char* end = nullptr;
    const double p = std::strtod(s.c_str(), &end);
    if (s.empty() || *end != '\0' || !(p >= 0.0 && p <= 1.0)) error("p=" + s + " is not in [0, 1]");
    return p;
  }

  std::uint64_t time(std::string_view key, std::string_view v) const {
    std::size_t i = 0;
    while (i < v.size() && v[i] >= '0' && v[i] <= '9') ++i;
    if (i == 0) error(std::string(key) + "=" + std::string(v) + " is not a time");
    const std::uint64_t n = number(key, v.substr(0, i));
    const std::string_view unit = v.substr(i);
    if (unit.empty() || unit == "ns") return n;
    if (unit == "us") return n * 1000;
    if (unit == "ms") return n * 1000000;
    if (unit == "s") return n * 1000000000;
    error(std::string(key) + "=" + std::string(v) + ": unknown unit (ns, us, ms or s)");
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
  while (!text.empty()) {
    const std::size_t end = text.find_first_of(";\n");
    std::string_view rule = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view{} : text.substr(end + 1);
    if (const auto hash = rule.find('#'); hash != std::string_view::npos) rule = rule.substr(0, hash);
    rule = trim(rule);
    if (rule.empty()) continue;

    RuleParser p(rule);
    std::vector<std::pair<std::string_view, std::string_view>> args;
    std::string_view kind;
    std::string_view rest = rule;
    while (!rest.empty()) {
      const std::size_t sp = rest.find_first_of(" \t");
      const std::string_view word = rest.substr(0, sp);
      rest = sp == std::string_view::npos ? std::string_view{} : trim(rest.substr(sp));
      if (kind.empty()) {
        kind = word;
        continue;
      }
      const std::size_t eq = word.find('=');
      if (eq == std::string_view::npos || eq == 0) p.error("'" + std::string(word) + "' is not key=value");
      args.emplace_back(word.substr(0, eq), word.substr(eq + 1));
    }
    if (kind.starts_with("ibv_")) kind.remove_prefix(4);

    Trigger when;
    Filter where;
    int set_triggers = 0;
    auto common = [&](std::string_view key, std::string_view value) {
      if (key == "nth") {
        when.nth = p.number(key, value);
        if (when.nth == 0) p.error("nth counts from 1");
      } else if (key == "every") {
        when.every = p.number(key, value);
        if (when.every == 0) p.error("every must be at least 1");
      } else if (key == "p") {
        when.probability = p.probability(value);
      } else if (key == "qp") {
        where.qpn = static_cast<std::uint32_t>(p.number(key, value));
        return true;
      } else if (key == "dev") {
        where.device = std::string(value);
        return true;
      } else {
        return false;
      }
      ++set_triggers;
      return true;
    };
    auto need_one_trigger = [&] {
      if (set_triggers != 1) p.error("give exactly one of nth=, every= or p=");
    };

    bool done = false;
    for (std::size_t v = 0; v < kVerbNames.size() && !done; ++v) {
      if (kind != kVerbNames[v]) continue;
      int err = 0;
      for (const auto& [key, value] : args) {
        if (key == "errno") {
          err = p.err(value);
        } else if (!common(key, value)) {
          p.error("unknown key '" + std::string(key) + "'");
        }
      }
      need_one_trigger();
      if (err == 0) p.error("errno= is required");
      plan.verbs.push_back({static_cast<Verb>(v), when, err, where});
      done = true;
    }
    for (std::size_t a = 0; a < kPacketNames.size() && !done; ++a) {
      if (kind != kPacketNames[a]) continue;
      PacketFault f{static_cast<PacketAction>(a), {}, std::nullopt, 0, {}};
      for (const auto& [key, value] : args) {
        if (key == "psn") {
          f.psn = static_cast<std::uint32_t>(p.number(key, value)) & 0xffffff;
        } else if (key == "by") {
          f.by_ns = p.time(key, value);
        } else if (!common(key, value)) {
          p.error("unknown key '" + std::string(key) + "'");
        }
      }
      if (f.psn && set_triggers == 0) {
        when.nth = 1;
        ++set_triggers;
      }
      need_one_trigger();
      if ((f.action == PacketAction::delay || f.action == PacketAction::reorder) && f.by_ns == 0) {
        f.by_ns = f.action == PacketAction::delay ? 10'000 : 5'000;
      }
      f.when = when;
      f.where = where;
      plan.packets.push_back(f);
      done = true;
    }
    for (std::size_t a = 0; a < kTimedNames.size() && !done; ++a) {
      if (kind != kTimedNames[a]) continue;
      TimedFault f;
      f.action = static_cast<TimedAction>(a);
      for (const auto& [key, value] : args) {
        if (key == "at") {
          f.at_ns = p.time(key, value);
        } else if (key == "for") {
          f.for_ns = p.time(key, value);
        } else if (key == "dev") {
          f.device = std::string(value);
        } else if (key == "port") {
          f.port = static_cast<std::uint8_t>(p.number(key, value));
        } else if (key == "qp") {
          f.qpn = static_cast<std::uint32_t>(p.number(key, value));
        } else {
          p.error("unknown key '" + std::string(key) + "'");
        }
      }
      if (f.action == TimedAction::qp_fatal && f.qpn == 0) p.error("qp= is required");
      if ((f.action == TimedAction::link_down || f.action == TimedAction::link_up ||
           f.action == TimedAction::device_fatal) &&
          f.device.empty()) {
        p.error("dev= is required");
      }
      plan.timed.push_back(f);
      done = true;
    }
    if (!done && kind == "cm_drop") {
      CmFault f;
      for (const auto& [key, value] : args) {
        if (key == "msg") {
          const auto* it = std::find(kCmMessageNames.begin(), kCmMessageNames.end(), value);
          if (it == kCmMessageNames.end()) {
            p.error("msg=" + std::string(value) + " is not req, rep, rtu, rej, dreq, drep or any");
          }
          f.msg = static_cast<CmMessage>(it - kCmMessageNames.begin());
        } else if (!common(key, value)) {
          p.error("unknown key '" + std::string(key) + "'");
        }
      }
      need_one_trigger();
      f.when = when;
      f.where = where;
      plan.cm.push_back(f);
      done = true;
    }
    if (!done && kind == "cq_overrun") {
      for (const auto& [key, value] : args) {
        if (key != "depth") p.error("unknown key '" + std::string(key) + "'");
        plan.cq_depth = static_cast<std::uint32_t>(p.number(key, value));
      }
      if (plan.cq_depth == 0) p.error("depth= is required and at least 1");
      done = true;
    }
    if (!done) p.error("unknown fault kind '" + std::string(kind) + "'");
  }
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
