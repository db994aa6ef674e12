#include "faults/injector.hpp"

#include <algorithm>

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
  any_qpn = !where.qpn.has_value();
  qpn = where.qpn.value_or(0);
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
    r.any_psn = !plan.packets[i].psn.has_value();
    r.psn = plan.packets[i].psn.value_or(0);
  }
  for (std::size_t i = 0; i < plan.cm.size(); ++i) {
    cm_rules_.emplace_back(plan.cm[i].when, plan.cm[i].where, static_cast<std::uint32_t>(i), devs);
  }
  checks_packets_ = !plan.packets.empty();
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
      return true;
    }
  }
  return false;
}

}  // namespace verbsim::sim
