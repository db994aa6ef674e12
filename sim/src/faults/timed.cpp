// Timed faults (the plan's `at=` rules), run as events of the world: links and devices going
// down and up, QPs and devices failing, SRQ limits firing.
#include <cstddef>
#include <vector>

#include "resources/cores.hpp"
#include "transport/qp.hpp"

namespace verbsim::sim {

void World::Impl::run_timed_fault(const TimedFault& f, bool undo) {
  auto device = [&]() -> DevCore* {
    for (const auto& d : devs_) {
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
      if (down) ++d->ports[f.port - 1u].counters.link_downed;
      faults_.link_state_changed();  // packets are now checked against link states
      port_event(*d, f.port, down ? AsyncEventType::port_err : AsyncEventType::port_active);
      if (down && f.for_ns != 0 && !undo) {
        // Bring it back: reuse the rule as a link_up at now + for.
        for (std::size_t i = 0; i < config_.faults.timed.size(); ++i) {
          if (&config_.faults.timed[i] != &f) continue;
          Event e{};
          e.time = now_ + f.for_ns;
          e.kind = EvKind::fault;
          e.index = static_cast<std::uint32_t>(i);
          e.code = 1;  // "up" half of a link_down ... for=
          schedule(e);
        }
      }
      return;
    }
    case TimedAction::qp_fatal:
      for (const auto& d : devs_) {
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
      faults_.link_state_changed();
      return;
    }
    case TimedAction::srq_limit:
      for (const auto& d : devs_) {
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

}  // namespace verbsim::sim
