#include "faults/injector.hpp"

#include <algorithm>
#include <cerrno>
#include <stdexcept>
#include <system_error>
#include <string>
#include <utility>

namespace verbsim::sim {

RuleCheck::RuleCheck(const Trigger& when, const Filter& where, std::uint32_t i,
                     const std::vector<std::unique_ptr<DevCore>>& devs)
    : index(i) {
  if (when.nth != 0) {
    fire_at = when.nth;  // once
  } else if (when.every != 0) {
    fire_at = every = when.every;
  } else {
    probability = when.probability;
  }
  any_qpn = !where.qpn.has_value() && where.qp_name.empty();
  qpn = where.qp_name.empty() ? where.qpn.value_or(0) : kUnnamedQpn;
  if (!where.device.empty()) {
    dev = kNoDevice;
    for (const auto& d : devs) {
      if (d->name == where.device) dev = d->index;
    }
  }
}

FaultInjector::FaultInjector(const FaultPlan& plan,
                             const std::vector<std::unique_ptr<DevCore>>& devs, Rng& rng,
                             Digest& digest)
    : plan_(plan), rng_(rng), digest_(digest) {
  for (std::size_t i = 0; i < plan.verbs.size(); ++i) {
    const auto v = static_cast<std::size_t>(plan.verbs[i].verb);
    targets_[v] = true;
    verb_rules_[v].emplace_back(plan.verbs[i].when, plan.verbs[i].where,
                                static_cast<std::uint32_t>(i), devs);
  }
  for (std::size_t i = 0; i < plan.packets.size(); ++i) {
    RuleCheck& r = packet_rules_.emplace_back(plan.packets[i].when, plan.packets[i].where,
                                              static_cast<std::uint32_t>(i), devs);
    const PacketFault& f = plan.packets[i];
    if (f.psn) {
      r.psn_lo = *f.psn;
      r.psn_span = 0;
    } else if (f.kinds == PacketKinds::requests) {
      r.psn_span = 0xffffff;
    } else if (f.kinds == PacketKinds::responses) {
      r.psn_lo = kDataResponsePsn;
      r.psn_span = kNoPsn - kDataResponsePsn;
    } else if (f.kinds == PacketKinds::acks) {
      r.psn_lo = kNoPsn;
      r.psn_span = 0;
    }
  }
  for (std::size_t i = 0; i < plan.cm.size(); ++i) {
    cm_rules_.emplace_back(plan.cm[i].when, plan.cm[i].where, static_cast<std::uint32_t>(i), devs);
  }
  checks_packets_ = !plan.packets.empty();
}

void FaultInjector::name_qp(const std::string& name, std::uint32_t qpn, int dev) {
  if (!valid_qp_name(name)) {
    throw std::invalid_argument("World::name: '" + name +
                                "' cannot name a QP in a fault rule (a letter or '_', then "
                                "letters, digits, '_', '-' or '.')");
  }
  for (const auto& [n, q, d] : names_) {
    if (n == name && (q != qpn || d != dev)) {
      throw std::invalid_argument("World::name: '" + name + "' already names QP " +
                                  std::to_string(q) + " of device " + std::to_string(d));
    }
  }
  names_.emplace_back(name, qpn, dev);
  // Verb rules: that QP, on its device (a dev= filter that names another device stays).
  for (auto& rules : verb_rules_) {
    for (RuleCheck& r : rules) {
      if (plan_.verbs[r.index].where.qp_name != name) continue;
      r.qpn = qpn;
      if (r.dev == RuleCheck::kAnyDevice) r.dev = dev;
    }
  }
  // Packet and CM rules: its number, as qp=<number> (the check has the sender's device only).
  for (RuleCheck& r : packet_rules_) {
    if (plan_.packets[r.index].where.qp_name == name) r.qpn = qpn;
  }
  for (RuleCheck& r : cm_rules_) {
    if (plan_.cm[r.index].where.qp_name == name) r.qpn = qpn;
  }
}

std::string FaultInjector::unnamed_rules() const {
  std::string out;
  auto add = [&out](const RuleCheck& r, const Filter& where, FaultPlan one) {
    if (where.qp_name.empty() || r.qpn != RuleCheck::kUnnamedQpn) return;
    out += "fault rule '" + one.to_string() + "' names QP '" + where.qp_name +
           "', which no QP was given (World::name): it never fired\n";
  };
  for (const auto& rules : verb_rules_) {
    for (const RuleCheck& r : rules) {
      FaultPlan one;
      one.verbs.push_back(plan_.verbs[r.index]);
      add(r, plan_.verbs[r.index].where, std::move(one));
    }
  }
  for (const RuleCheck& r : packet_rules_) {
    FaultPlan one;
    one.packets.push_back(plan_.packets[r.index]);
    add(r, plan_.packets[r.index].where, std::move(one));
  }
  for (const RuleCheck& r : cm_rules_) {
    FaultPlan one;
    one.cm.push_back(plan_.cm[r.index]);
    add(r, plan_.cm[r.index].where, std::move(one));
  }
  return out;
}

void FaultInjector::report_firings(const std::string& path,
                                   const std::array<std::size_t, 3>& first) {
  firings_.reset(std::fopen(path.c_str(), "a"));
  if (firings_ == nullptr) {
    throw std::system_error(errno, std::generic_category(), "VERBSIM_FAULT_FIRINGS: " + path);
  }
  first_env_rule_ = first;
}

void FaultInjector::note_firing(FaultTag kind, const RuleCheck& r) {
  const std::size_t k = kind == FaultTag::verb ? 0 : kind == FaultTag::packet ? 1 : 2;
  if (r.index < first_env_rule_[k]) return;  // the program's own rule
  static constexpr const char* kKindNames[] = {"verb", "packet", "cm"};
  std::fprintf(firings_.get(), "%s %zu nth=%llu\n", kKindNames[k], r.index - first_env_rule_[k],
               static_cast<unsigned long long>(r.matches));
  std::fflush(firings_.get());  // the run may end in abort() or _exit()
}

PacketFaults FaultInjector::act_on_packet(std::size_t fired, std::uint32_t psn, std::uint32_t from,
                                        std::uint32_t to, int sender) {
  // Rule `fired` and every later one that fires on the packet act, in plan order (a reorder
  // draws its delay there).
  PacketFaults fate;
  for (std::size_t i = fired; i < packet_rules_.size(); ++i) {
    RuleCheck& r = packet_rules_[i];
    if (i != fired && !r.fires_on_packet(psn, from, to, sender, rng_)) continue;
    const PacketFault& f = plan_.packets[r.index];
    digest_.add(static_cast<std::uint64_t>(FaultTag::packet) | r.index);
    if (firings_ != nullptr) [[unlikely]] note_firing(FaultTag::packet, r);
    switch (f.action) {
      case PacketAction::drop: fate.drop = true; break;
      case PacketAction::delay: fate.delay_ns += f.by_ns; break;
      case PacketAction::reorder:
        fate.delay_ns += 1 + rng_.below(std::max<std::uint64_t>(f.by_ns, 1));
        break;
      case PacketAction::duplicate: fate.duplicate = true; break;
    }
  }
  if (fate.duplicate && !fate.drop) fate.duplicate_ns = 1 + rng_.below(1000);
  return fate;
}

bool FaultInjector::cm_message(CmMessage kind, std::uint32_t from_qpn, std::uint32_t to_qpn,
                               int dev) {
  for (RuleCheck& r : cm_rules_) {
    const CmMessage want = plan_.cm[r.index].msg;
    if ((want == CmMessage::any || want == kind) && r.matches_where(from_qpn, to_qpn, dev) &&
        r.fires(rng_)) {
      digest_.add(static_cast<std::uint64_t>(FaultTag::cm_message) | r.index);
      if (firings_ != nullptr) [[unlikely]] note_firing(FaultTag::cm_message, r);
      return true;
    }
  }
  return false;
}

}  // namespace verbsim::sim
