// The simulated connection manager's messages (cm/fabric.hpp): REQ, REP, RTU, REJ, DREQ and
// DREP (and SIDR's REQ and REP) sent as EvKind::cm events, received, sent again at their
// timers, and the state machine they drive.
#include <algorithm>
#include <cerrno>
#include <string>

#include "cm/fabric.hpp"
#include "fabric/shared_fabric.hpp"
#include "fibers/wait.hpp"
#include "transport/qp.hpp"
#include "verbsim/connect.hpp"
#include "verbsim/error.hpp"

namespace verbsim::sim {

std::vector<std::uint8_t> padded(std::span<const std::uint8_t> data, std::size_t size) {
  std::vector<std::uint8_t> out(size, 0);
  std::copy(data.begin(), data.end(), out.begin());
  return out;
}

CmFabric::CmFabric(World::Impl& world) : w(world) {}

bool CmFabric::dropped(const Wire& m, int dev) {
  const std::uint32_t from_qpn = m.from != kNone ? node(m.from).qpn : 0;
  const std::uint32_t to_qpn = m.to != kNone ? node(m.to).qpn : 0;
  const auto kind = static_cast<CmMessage>(static_cast<int>(m.kind) + 1);
  return w.faults().cm_message(kind, from_qpn, to_qpn, dev);
}

void CmFabric::report(std::uint32_t n, CmChannelCore::Pending ev) {
  CmNode& nd = node(n);
  if (!nd.alive) return;
  ev.node = n;
  w.note_progress();
  if (w.observing()) {
    std::string what = "cm: " + std::string(to_string(ev.type));
    if (ev.status != 0) what += " status " + std::to_string(ev.status);
    w.observe_instant(static_cast<std::uint16_t>(nd.dev < 0 ? 0 : nd.dev), nd.has_qp ? nd.qpn : 0,
                      what);
  }
  w.digest().add(0xc3000000ull | static_cast<std::uint64_t>(ev.type) << 16 | (n & 0xffff));
  CmChannelCore& ch = *nd.ch;
  ch.events.push_back(std::move(ev));
  signal_fd(ch.efd);
  notify_all(ch.waiters);
}

void CmFabric::report(std::uint32_t n, CmEventType type, int status) {
  CmChannelCore::Pending ev;
  ev.type = type;
  ev.status = status;
  report(n, std::move(ev));
}

void CmFabric::send(Wire m, int to_dev, std::uint8_t to_port) {
  w.note_progress();
  int from_dev = to_dev;  // a REJ from the device itself
  PacketFate fate = PacketFate::delivered;
  if (m.from != kNone) {
    const CmNode& from = node(m.from);
    from_dev = from.dev;
    if (!w.port_up(static_cast<std::uint32_t>(from.dev), from.port)) {
      fate = PacketFate::link_down;
    }
  }
  if (fate == PacketFate::delivered && dropped(m, from_dev)) fate = PacketFate::dropped;
  if (w.observing()) observe(m, to_dev, to_port, fate);
  if (fate != PacketFate::delivered) return;  // lost
  std::uint32_t slot;
  if (free_wires.empty()) {
    slot = static_cast<std::uint32_t>(wires.size());
    wires.emplace_back();
  } else {
    slot = free_wires.back();
    free_wires.pop_back();
  }
  wires[slot] = std::move(m);
  Event e{};
  e.time = w.now() + w.config().link_latency_ns;
  e.kind = EvKind::cm;
  e.code = static_cast<std::uint8_t>(Code::message);
  e.dev = static_cast<std::uint16_t>(to_dev);
  e.wire = to_port;
  e.index = slot;
  w.schedule(e);
}

void CmFabric::observe(const Wire& m, int to_dev, std::uint8_t to_port, PacketFate fate) {
  CmRecord r;
  r.sent_ns = w.now();
  r.arrives_ns = w.now() + w.config().link_latency_ns;
  r.fate = fate;
  r.kind = static_cast<CmMessage>(static_cast<int>(m.kind) + 1);
  const auto gid_of = [&](int dev, std::uint8_t port) {
    return World::Impl::roce_gid(*w.devices()[static_cast<std::size_t>(dev)], port);
  };
  r.dst_dev = static_cast<std::uint16_t>(to_dev);
  r.dst_port = to_port;
  r.dst_gid = gid_of(to_dev, to_port);
  if (m.from != kNone) {
    const CmNode& from = node(m.from);
    r.sidr = from.ud;
    r.src_dev = static_cast<std::uint16_t>(from.dev);
    r.src_port = from.port;
    r.local_comm_id = m.from + 1;
    r.src_ip = from.local.ip;
    r.src_ip_port = from.local.port;
    r.dst_ip = from.peer.ip;
    r.dst_ip_port = from.peer.port;
  } else {  // the device of the address refuses a REQ: it answers from where the REQ went
    r.src_dev = static_cast<std::uint16_t>(m.src_dev);
    r.src_port = m.src_port;
    if (m.to != kNone) r.sidr = node(m.to).ud;
  }
  r.src_gid = gid_of(r.src_dev, r.src_port);
  if (m.to != kNone) r.remote_comm_id = m.to + 1;
  if (m.kind == Msg::req) {
    r.dst_ip = m.dst.ip;
    r.dst_ip_port = m.dst.port;
  }
  r.qpn = m.qpn;
  r.psn = m.psn;
  if (r.sidr && m.kind == Msg::rep) r.qkey = kCmUdpQkey;
  r.responder_resources = m.param.responder_resources;
  r.initiator_depth = m.param.initiator_depth;
  r.retry_count = m.param.retry_count;
  r.rnr_retry_count = m.param.rnr_retry_count;
  r.reason = m.reason;
  r.private_data = m.data;
  w.observe_cm(r);
}

void CmFabric::send_to_node(Wire m) {
  if (m.to == kNone) return;
  const CmNode& to = node(m.to);
  send(std::move(m), to.dev, to.port);
}

void CmFabric::send_expecting_answer(std::uint32_t n, Wire m, int to_dev, std::uint8_t to_port) {
  CmNode& nd = node(n);
  nd.unanswered = m;
  nd.retries_left = kRetries;
  send(std::move(m), to_dev, to_port);
  arm(n, Code::timer, kResponseTimeoutNs);
}

void CmFabric::arm(std::uint32_t n, Code code, std::uint64_t after_ns) {
  CmNode& nd = node(n);
  Event e{};
  e.time = w.now() + after_ns;
  e.kind = EvKind::cm;
  e.code = static_cast<std::uint8_t>(code);
  e.dev = static_cast<std::uint16_t>(std::max(nd.dev, 0));
  e.index = n;
  e.value = ++nd.timer_gen;
  w.schedule(e);
}

void CmFabric::enter_timewait(std::uint32_t n) { arm(n, Code::timewait, kTimewaitNs); }

QueuePair* CmFabric::qp_of(std::uint32_t n) const noexcept {
  const CmNode& nd = nodes[n];
  return nd.has_qp ? w.find_qp(static_cast<std::uint32_t>(nd.dev), nd.qpn) : nullptr;
}

void CmFabric::establish(std::uint32_t n, std::vector<std::uint8_t> rep_data) {
  CmNode& nd = node(n);
  ConnectOptions o = options(nd);
  o.max_dest_rd_atomic = nd.theirs.initiator_depth;
  o.max_rd_atomic = nd.theirs.responder_resources;
  o.retry_cnt = nd.mine.retry_count;
  o.rnr_retry = nd.theirs.rnr_retry_count;
  try {
    QueuePair* qp = qp_of(n);
    if (qp == nullptr) throw_verb_error("rdma_connect", EINVAL, "the QP is gone");
    modify_to_rtr(*qp, Endpoint{nd.peer.gid(), nd.peer_qpn, nd.psn}, o);
    modify_to_rts(*qp, nd.peer_psn, o);
  } catch (const VerbError& e) {
    nd.st = St::closed;
    send_rej(n, kCmRejectByConsumer);
    report(n, CmEventType::connect_error, -e.code().value());
    return;
  }
  nd.st = St::established;
  send_to_node(reply(n, Msg::rtu));
  CmChannelCore::Pending ev;
  ev.type = CmEventType::established;
  ev.data = std::move(rep_data);
  ev.peer_qpn = nd.peer_qpn;
  report(n, std::move(ev));
}

void CmFabric::to_error(std::uint32_t n) {
  if (QueuePair* qp = qp_of(n)) {
    QpAttr a;
    a.qp_state = QpState::err;
    try {
      qp->modify(a, QpAttrMask::state);
    } catch (const VerbError&) {
      // A QP that cannot go to ERR is already there or gone.
    }
  }
}

Wire CmFabric::reply(std::uint32_t n, Msg kind) {
  Wire m;
  m.kind = kind;
  m.from = n;
  m.to = node(n).peer_node;
  return m;
}

void CmFabric::send_rej(std::uint32_t n, int reason, std::span<const std::uint8_t> data) {
  Wire m = reply(n, Msg::rej);
  m.reason = reason;
  m.data = padded(data, node(n).ud ? kCmUdAcceptDataMax : kCmRejectDataMax);
  send_to_node(std::move(m));
}

void CmFabric::on_timer(const Event& e) {
  CmNode& nd = node(e.index);
  if (e.value != nd.timer_gen) return;  // answered, or re-armed since
  if (static_cast<Code>(e.code) == Code::timewait) {
    report(e.index, CmEventType::timewait_exit);
    return;
  }
  if (static_cast<Code>(e.code) == Code::addr_timeout) {
    if (nd.st == St::addr_query) {
      nd.st = St::idle;
      report(e.index, CmEventType::addr_error, -ETIMEDOUT);
    }
    return;
  }
  if (nd.retries_left > 0) {
    --nd.retries_left;
    Wire m = nd.unanswered;
    if (m.kind == Msg::req) {
      const auto [dev, port] = owner(nd.peer);
      send(std::move(m), dev, port);
    } else {
      send_to_node(std::move(m));
    }
    arm(e.index, Code::timer, kResponseTimeoutNs);
    return;
  }
  switch (nd.st) {
    case St::connecting:
      nd.st = St::closed;
      report(e.index, CmEventType::unreachable, -ETIMEDOUT);
      break;
    case St::rep_sent:
      nd.st = St::closed;
      report(e.index, CmEventType::connect_error, -ETIMEDOUT);
      break;
    case St::dreq_sent:
      nd.st = St::closed;
      report(e.index, CmEventType::disconnected, -ETIMEDOUT);
      enter_timewait(e.index);
      break;
    default: break;
  }
}

void CmFabric::on_message(const Event& e) {
  Wire m = std::move(wires[e.index]);
  free_wires.push_back(e.index);
  if (!w.port_up(e.dev, static_cast<std::uint8_t>(e.wire))) return;  // lost
  if (m.kind == Msg::req) {
    on_req(std::move(m), e.dev, static_cast<std::uint8_t>(e.wire));
    return;
  }
  const std::uint32_t n = m.to;
  CmNode& nd = node(n);
  if (nd.remote()) {  // for an id of another process of the fabric
    hand_over(m, e.dev, static_cast<std::uint8_t>(e.wire), -1);
    return;
  }
  switch (m.kind) {
    case Msg::rep:
      if (!nd.alive) {  // the client went away: the kernel's CM rejects a connection's reply
        nd.peer_node = m.from;
        if (!nd.ud) send_rej(n, kCmRejectByConsumer);
      } else if (nd.st == St::connecting && nd.ud) {
        answered(n);
        nd.st = St::closed;  // SIDR keeps no state
        CmChannelCore::Pending ev;
        ev.type = CmEventType::established;
        ev.data = std::move(m.data);
        ev.peer_qpn = m.qpn;
        report(n, std::move(ev));
      } else if (nd.st == St::connecting) {
        answered(n);
        nd.peer_node = m.from;
        nd.peer_qpn = m.qpn;
        nd.peer_psn = m.psn;
        nd.theirs = m.param;
        if (nd.own_qp) {  // the program moves its QP, then establish() sends the RTU
          nd.st = St::rep_rcvd;
          CmChannelCore::Pending ev;
          ev.type = CmEventType::connect_response;
          ev.data = std::move(m.data);
          ev.param = m.param;  // from this side's point of view, as rdma_cm reports them
          std::swap(ev.param.responder_resources, ev.param.initiator_depth);
          ev.peer_qpn = m.qpn;
          report(n, std::move(ev));
        } else {
          establish(n, std::move(m.data));
        }
      } else if (nd.st == St::established) {
        send_to_node(reply(n, Msg::rtu));  // our RTU was lost
      }
      break;
    case Msg::rtu:
      if (nd.st == St::rep_sent) {
        answered(n);
        nd.st = St::established;
        CmChannelCore::Pending ev;
        ev.type = CmEventType::established;
        ev.peer_qpn = nd.peer_qpn;
        report(n, std::move(ev));
      }
      break;
    case Msg::rej:  // (a UD service's reply is final: only its client takes a refusal)
      if (nd.st == St::connecting || (nd.st == St::rep_sent && !nd.ud)) {
        answered(n);
        nd.st = St::closed;
        CmChannelCore::Pending ev;
        ev.type = nd.ud ? CmEventType::unreachable : CmEventType::rejected;
        ev.status = m.reason;
        ev.data = std::move(m.data);
        report(n, std::move(ev));
      }
      break;
    case Msg::dreq:
      // Also while the server still waits for an RTU that was lost: the client's messages
      // may have used the connection meanwhile, and its DREQ ends it (as the IB CM does).
      if (nd.alive && (nd.st == St::established || nd.st == St::rep_sent)) {
        answered(n);
        nd.st = St::dreq_rcvd;
        report(n, CmEventType::disconnected, 0);
      } else if (nd.st != St::dreq_rcvd) {
        send_to_node(reply(n, Msg::drep));  // gone, closed or disconnecting too: answer it
      }
      break;
    case Msg::drep:
      if (nd.st == St::dreq_sent) {
        answered(n);
        nd.st = St::closed;
        report(n, CmEventType::disconnected, 0);
        enter_timewait(n);
      }
      break;
    case Msg::req: break;
  }
}

void CmFabric::on_req(Wire m, int dev, std::uint8_t port) {
  const bool ud = node(m.from).ud;
  // A REQ sent again: answer it as before, or wait for the program's answer.
  for (std::uint32_t i = 0; i < nodes.size(); ++i) {
    CmNode& c = nodes[i];
    if (c.listener == kNone || c.peer_node != m.from) continue;
    if (c.st == St::rep_sent) send_to_node(c.unanswered);
    return;
  }
  std::uint32_t l = kNone;
  for (std::uint32_t i = 0; i < nodes.size(); ++i) {
    const CmNode& c = nodes[i];
    if (c.alive && c.st == St::listening && c.ud == ud &&
        c.local.port == m.dst.port && (c.local.is_any() || c.local.ip == m.dst.ip)) {
      l = i;
      break;
    }
  }
  if (l == kNone && w.shared()) {  // perhaps a process of the fabric listens there
    const int slot = w.shared_fabric()->cm_listener(m.dst.ip, m.dst.port, ud);
    if (slot >= 0) {
      hand_over(m, dev, port, slot);
      return;
    }
  }
  if (l == kNone && hold_for_next_listener(m, dev, port)) return;
  if (l == kNone) {  // the device refuses it
    Wire rej;
    rej.kind = Msg::rej;
    rej.to = m.from;
    rej.reason = ud ? kCmSidrNoListener : kCmRejectNoListener;
    rej.src_dev = dev;
    rej.src_port = port;
    rej.data.assign(ud ? kCmUdAcceptDataMax : kCmRejectDataMax, 0);
    send_to_node(std::move(rej));
    return;
  }
  const std::uint32_t c = add_node(node(l).ch);
  CmNode& child = node(c);
  child.st = St::req_rcvd;
  child.ud = ud;
  child.dev = dev;
  child.port = port;
  child.local = m.dst;
  child.peer = node(m.from).local;
  child.peer_node = m.from;
  child.listener = l;
  child.peer_qpn = m.qpn;
  child.peer_psn = m.psn;
  child.theirs = m.param;
  CmChannelCore::Pending ev;
  ev.type = CmEventType::connect_request;
  ev.listener = l;
  ev.data = std::move(m.data);
  if (!child.ud) {       // a SIDR request carries neither parameters nor the client's QP
    ev.param = m.param;  // from the server's point of view, as rdma_cm reports them
    std::swap(ev.param.responder_resources, ev.param.initiator_depth);
    ev.peer_qpn = m.qpn;
  } else {
    ev.param.responder_resources = ev.param.initiator_depth = 0;
    ev.param.retry_count = ev.param.rnr_retry_count = 0;
  }
  report(c, std::move(ev));
}

void CmFabric::destroyed(std::uint32_t n) {
  CmNode& nd = node(n);
  if (nd.owns_port && w.shared()) w.shared_fabric()->release_cm_port(n);
  nd.alive = false;
  nd.has_qp = false;
  switch (nd.st) {
    case St::req_rcvd: send_rej(n, nd.ud ? kCmSidrRejected : kCmRejectByConsumer); break;
    case St::rep_sent:
      if (!nd.ud) send_rej(n, kCmRejectByConsumer);  // a SIDR reply is final
      break;
    case St::rep_rcvd: send_rej(n, kCmRejectByConsumer); break;
    case St::established: send_to_node(reply(n, Msg::dreq)); break;
    case St::dreq_rcvd: send_to_node(reply(n, Msg::drep)); break;
    default: break;
  }
  answered(n);
  nd.st = St::closed;
  // Its requests the program never took are rejected.
  if (nd.ch) {
    for (std::uint32_t i = 0; i < nodes.size(); ++i) {
      CmNode& c = nodes[i];
      if (c.listener == n && c.alive && c.st == St::req_rcvd) {
        c.alive = false;
        c.st = St::closed;
        send_rej(i, c.ud ? kCmSidrRejected : kCmRejectByConsumer);
      }
    }
  }
}

std::uint32_t CmFabric::flow_label(const CmNode& nd) {
  const bool server = nd.listener != kNone;
  return server ? cm_flow_label(nd.peer.port, nd.local.port)
                : cm_flow_label(nd.local.port, nd.peer.port);
}

ConnectOptions CmFabric::options(const CmNode& nd) const {
  ConnectOptions o;
  o.port_num = nd.port;
  o.sgid_index = w.locate(nd.local.gid()).gid_index;
  o.flow_label = flow_label(nd);
  o.path_mtu = Mtu::mtu_1024;
  o.timeout = nd.ack_timeout;
  o.min_rnr_timer = kMinRnrTimer;
  return o;
}

void World::Impl::run_cm_event(const Event& e) {
  if (static_cast<Code>(e.code) == Code::message) {
    cm_->on_message(e);
  } else {
    cm_->on_timer(e);
  }
}

bool World::Impl::cm_timer_is_stale(const Event& e) const noexcept {
  return static_cast<Code>(e.code) != Code::message && e.value != cm_->nodes[e.index].timer_gen;
}

}  // namespace verbsim::sim
