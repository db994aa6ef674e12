// The fault plan at run time: verb faults (in the Faulty* classes, chosen at creation), packet
// faults on the wire, and timed faults (links, QPs, devices, SRQs).
#include <algorithm>
#include <cerrno>

#include "faults/faulty.hpp"
#include "transport/qp.hpp"
#include "verbsim/error.hpp"

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

bool World::Impl::port_up(std::uint32_t dev, std::uint8_t port) const noexcept {
  if (dev >= devs.size()) return false;
  const DevCore& d = *devs[dev];
  return d.ports[port_index(d, port)].attr.state == PortState::active;
}

std::uint64_t World::Impl::send_faulty_packet(const Event& packet, std::uint32_t psn) {
  const std::uint32_t from_dev = packet.kind == EvKind::deliver ? packet.src_dev : packet.dev;
  if (faults.links_changed &&
      (!port_up(packet.src_dev, 1) || !port_up(packet.dev, 1) || !port_up(from_dev, 1))) {
    return packet.time;
  }
  const std::uint32_t sender_qpn = packet.kind == EvKind::deliver ? packet.src_qpn : 0;
  const int sender = from_dev < devs.size() ? static_cast<int>(from_dev) : RuleCheck::kNoDevice;
  for (std::size_t i = 0; i < faults.packet_rules.size(); ++i) {
    RuleCheck& r = faults.packet_rules[i];
    if (r.fires_on_packet(psn, sender_qpn, packet.qpn, sender, rng)) {
      return apply_packet_faults(packet, psn, i, sender_qpn, sender);
    }
  }
  push_wire(packet);  // on time
  return packet.time;
}

std::uint64_t World::Impl::apply_packet_faults(const Event& packet, std::uint32_t psn,
                                               std::size_t fired, std::uint32_t sender_qpn,
                                               int sender) {
  // A packet on time joins its port's FIFO (times there never decrease); one a fault delays
  // goes through the heap. Both are ordered by (time, sequence), so the choice changes nothing
  // but speed.
  const std::uint64_t wire_time = packet.time;
  std::uint64_t time = wire_time;
  bool drop = false;
  bool duplicate = false;
  for (std::size_t i = fired; i < faults.packet_rules.size(); ++i) {
    RuleCheck& r = faults.packet_rules[i];
    if (i != fired && !r.fires_on_packet(psn, sender_qpn, packet.qpn, sender, rng)) continue;
    const PacketFault& f = config.faults.packets[r.index];
    digest.add(0xfb000000ull | r.index);
    switch (f.action) {
      case PacketAction::drop: drop = true; break;
      case PacketAction::delay: time += f.by_ns; break;
      case PacketAction::reorder: time += 1 + rng.below(std::max<std::uint64_t>(f.by_ns, 1)); break;
      case PacketAction::duplicate: duplicate = true; break;
    }
  }
  if (drop) return time;
  if (time == wire_time) {
    push_wire(packet);
    if (!duplicate) return time;
  }
  Event late = packet;
  late.time = time;
  if (time != wire_time) schedule(late);
  if (duplicate) {
    late.time += 1 + rng.below(1000);
    schedule(late);
  }
  return late.time;
}

void World::Impl::run_timed_fault(const TimedFault& f, bool undo) {
  auto device = [&]() -> DevCore* {
    for (auto& d : devs) {
      if (d->name == f.device) return d.get();
    }
    return nullptr;
  };
  auto port_event = [&](DevCore& d, std::uint8_t port, AsyncEventType type) {
    AsyncEvent ev;
    ev.type = type;
    ev.port_num = port;
    for (CtxCore* c : d.contexts) c->raise(ev);
  };
  switch (f.action) {
    case TimedAction::link_down:
    case TimedAction::link_up: {
      DevCore* d = device();
      if (d == nullptr || f.port < 1 || f.port > d->ports.size()) return;
      const bool down = f.action == TimedAction::link_down && !undo;
      d->ports[f.port - 1u].attr.state = down ? PortState::down : PortState::active;
      faults.packets = true;  // packets are now checked against link states
      faults.links_changed = true;
      port_event(*d, f.port, down ? AsyncEventType::port_err : AsyncEventType::port_active);
      if (down && f.for_ns != 0 && !undo) {
        // Bring it back: reuse the rule as a link_up at now + for.
        for (std::size_t i = 0; i < config.faults.timed.size(); ++i) {
          if (&config.faults.timed[i] != &f) continue;
          Event e{};
          e.time = now + f.for_ns;
          e.kind = EvKind::fault;
          e.index = static_cast<std::uint32_t>(i);
          e.code = 1;  // "up" half of a link_down ... for=
          schedule(e);
        }
      }
      return;
    }
    case TimedAction::qp_fatal:
      for (auto& d : devs) {
        if (!f.device.empty() && d->name != f.device) continue;
        if (SimQp* qp = find_qp(static_cast<std::uint32_t>(d->index), f.qpn)) {
          qp->enter_error(SimQp::ErrorCause::device);
        }
      }
      return;
    case TimedAction::device_fatal: {
      DevCore* d = device();
      if (d == nullptr) return;
      AsyncEvent ev;
      ev.type = AsyncEventType::device_fatal;
      for (CtxCore* c : d->contexts) c->raise(ev);
      std::vector<SimQp*> qps;
      d->qps.for_each([&qps](SimQp& qp) { qps.push_back(&qp); });
      for (SimQp* qp : qps) qp->enter_error(SimQp::ErrorCause::device);
      for (auto& port : d->ports) port.attr.state = PortState::down;
      faults.packets = true;
      faults.links_changed = true;
      return;
    }
    case TimedAction::srq_limit:
      for (auto& d : devs) {
        if (!f.device.empty() && d->name != f.device) continue;
        for (SrqCore* srq : d->srqs) {
          if (srq->limit == 0) continue;
          srq->limit = 0;
          AsyncEvent ev;
          ev.type = AsyncEventType::srq_limit_reached;
          ev.srq = srq->handle;
          srq->pd->ctx->raise(ev);
        }
      }
      return;
  }
}

// ---------------------------------------------------------------------------------------------
// Data-path verb faults

PostResult FaultyQp::post_send(std::span<const SendWr> wrs) noexcept {
  if (int err = world().verb_fault(Verb::post_send, qpn_, dev_)) {
    return {0, err, "injected by the fault plan"};
  }
  return SimQp::post_send(wrs);
}

PostResult FaultyQp::post_recv(std::span<const RecvWr> wrs) noexcept {
  if (int err = world().verb_fault(Verb::post_recv, qpn_, dev_)) {
    return {0, err, "injected by the fault plan"};
  }
  return SimQp::post_recv(wrs);
}

PollResult FaultyCq::poll(std::span<WorkCompletion> out) noexcept {
  if (int err = core_->ctx->world->verb_fault(Verb::poll_cq, 0, core_->ctx->dev)) {
    return {0, err};
  }
  return SimCq::poll(out);
}

std::error_code FaultyCq::req_notify(bool solicited_only) noexcept {
  if (int err = core_->ctx->world->verb_fault(Verb::req_notify_cq, 0, core_->ctx->dev)) {
    return errno_code(err);
  }
  return SimCq::req_notify(solicited_only);
}

std::error_code FaultyChannel::get_cq_event(CompletionQueue*& cq, Wait wait) {
  if (int err = core_->ctx->world->verb_fault(Verb::get_cq_event, 0, core_->ctx->dev)) {
    return errno_code(err);
  }
  return SimChannel::get_cq_event(cq, wait);
}

PostResult FaultySrq::post_recv(std::span<const RecvWr> wrs) noexcept {
  if (int err = core_->pd->ctx->world->verb_fault(Verb::post_srq_recv, 0, core_->dev)) {
    return {0, err, "injected by the fault plan"};
  }
  return SimSrq::post_recv(wrs);
}

}  // namespace verbsim::sim
