// The simulated connection manager's ids and channels (verbsim/cm.hpp, cm/fabric.hpp): SimCmId
// and SimCmChannel, World::create_cm_channel, binding, address and route resolution, listen,
// connect and accept with the QP steps they take.
#include <algorithm>
#include <cerrno>
#include <string>
#include <tuple>

#include "cm/fabric.hpp"
#include "fabric/shared_fabric.hpp"
#include "fibers/wait.hpp"
#include "transport/qp.hpp"
#include "verbsim/cm.hpp"
#include "verbsim/connect.hpp"
#include "verbsim/error.hpp"

namespace verbsim::sim {

std::uint32_t CmFabric::add_node(std::shared_ptr<CmChannelCore> ch) {
  nodes.emplace_back();
  nodes.back().ch = std::move(ch);
  return static_cast<std::uint32_t>(nodes.size() - 1);
}

std::pair<int, std::uint8_t> CmFabric::owner(const SockAddr& a) const {
  const World::Impl::GidPlace at = w.locate(a.gid());
  return {at.dev, at.port};
}

bool CmFabric::on_network(const SockAddr& a) {
  if (a.is_ipv4()) return a.ip[12] == 10 && a.ip[13] == 0;
  return a.ip[0] == 0xfe && (a.ip[1] & 0xc0) == 0x80;
}

int CmFabric::port_conflict(std::uint16_t port, const SockAddr& ip, std::uint32_t except) const {
  for (std::uint32_t i = 0; i < nodes.size(); ++i) {
    const CmNode& n = nodes[i];
    if (i == except || !n.alive || !n.owns_port || n.local.port != port) continue;
    if (n.ud != nodes[except].ud) continue;  // another port space
    if (n.local.is_any() || ip.is_any()) return EADDRNOTAVAIL;
    if (n.local.ip == ip.ip) return EADDRINUSE;
  }
  return 0;
}

std::uint16_t CmFabric::ephemeral_port(const SockAddr& ip, std::uint32_t except) {
  for (int tries = 0; tries < 32768; ++tries) {
    const std::uint16_t p = next_port;
    next_port =
        next_port == 65535 ? kFirstEphemeralPort : static_cast<std::uint16_t>(next_port + 1);
    if (port_conflict(p, ip, except) != 0) continue;
    // Another process of a shared fabric may have it (a full table: unchecked).
    SharedFabric* fabric = w.shared_fabric();
    const int err =
        fabric != nullptr ? fabric->claim_cm_port(except, ip.ip, ip.is_any(), p, nodes[except].ud)
                          : 0;
    if (err == 0 || err == ENOSPC) return p;
  }
  throw_verb_error("rdma_bind_addr", EADDRINUSE, "no free port");
}

void CmFabric::migrate(std::uint32_t n, const std::shared_ptr<CmChannelCore>& to) {
  CmNode& nd = node(n);
  if (nd.ch == to) return;
  CmChannelCore& from = *nd.ch;
  for (auto it = from.events.begin(); it != from.events.end();) {
    if (it->node == n || (it->type == CmEventType::connect_request && it->listener == n)) {
      to->events.push_back(std::move(*it));
      it = from.events.erase(it);
      drain_fd(from.efd);
      signal_fd(to->efd);
    } else {
      ++it;
    }
  }
  nd.ch = to;
  notify_all(to->waiters);
}

Access CmFabric::access(const ConnParam& mine) {
  // ib_cm's INIT attributes: remote writes always; reads and atomics when this side serves
  // any (responder resources).
  Access a = Access::remote_write;
  if (mine.responder_resources > 0) a |= Access::remote_read | Access::remote_atomic;
  return a;
}

void CmFabric::check_qp(const char* verb, const CmNode& nd, QueuePair& qp) const {
  auto* sq = dynamic_cast<SimQp*>(&qp);
  if (sq == nullptr) throw_verb_error(verb, EINVAL, "the QP is not the simulator's");
  if (sq->dev().index != nd.dev) {
    throw_verb_error(verb, EINVAL,
                     "the QP is on " + sq->dev().name + ", the id on " +
                         w.devices()[static_cast<std::size_t>(nd.dev)]->name);
  }
  if (qp.type() != (nd.ud ? QpType::ud : QpType::rc)) {
    throw_verb_error(verb, EINVAL, nd.ud ? "the QP is not UD (a UDP id)" : "the QP is not RC");
  }
}

AhAttr CmFabric::ah_to_peer(std::uint32_t n) const {
  const CmNode& nd = nodes[n];
  AhAttr a;
  a.is_global = true;
  a.grh.dgid = nd.peer.gid();
  a.grh.sgid_index = options(nd).sgid_index;
  a.grh.hop_limit = 64;
  a.grh.flow_label = flow_label(nd);
  a.port_num = nd.port;
  return a;
}

void CmFabric::ud_ready(const CmNode& nd, QueuePair& qp) const {
  if (qp.state() == QpState::rts) return;
  ConnectOptions o = options(nd);
  o.qkey = kCmUdpQkey;
  verbsim::connect(qp, 0, Endpoint{}, o);
}

std::uint32_t CmFabric::initial_psn() {
  return static_cast<std::uint32_t>(w.rng().next() & 0xffffff);
}

namespace {

void check_data(const char* verb, std::span<const std::uint8_t> data, std::size_t max) {
  if (data.size() > max) {
    throw_verb_error(verb, EINVAL,
                     std::to_string(data.size()) + " bytes of private data (at most " +
                         std::to_string(max) + ")");
  }
}

const char* state_name(St s) {
  static constexpr const char* names[] = {
      "idle",           "bound",     "resolving address", "address resolved",
      "route resolved", "listening", "connecting",        "connection request",
      "accepted",       "answered",  "connected",         "disconnecting",
      "disconnecting",  "closed"};
  return names[static_cast<int>(s)];
}

[[noreturn]] void bad_state(const char* verb, St s) {
  throw_verb_error(verb, EINVAL, std::string("the id is ") + state_name(s));
}

class SimCmId final : public CmId {
 public:
  SimCmId(std::shared_ptr<CmFabric> fabric, std::uint32_t n) : f_(std::move(fabric)), n_(n) {
    node().handle = this;
  }
  ~SimCmId() override {
    node().handle = nullptr;
    f_->destroyed(n_);
  }

  void bind_addr(const SockAddr& addr) override {
    injected(Verb::rdma_bind_addr, "rdma_bind_addr");
    CmNode& nd = node();
    if (nd.st != St::idle) bad_state("rdma_bind_addr", nd.st);
    int dev = -1;
    std::uint8_t port = 0;
    if (!addr.is_any()) {
      std::tie(dev, port) = f_->owner(addr);
      if (dev < 0)
        throw_verb_error("rdma_bind_addr", EADDRNOTAVAIL, addr.to_string() + " is no port's");
    }
    SockAddr local = addr;
    if (local.port == 0) {
      local.port = f_->ephemeral_port(local, n_);
    } else if (const int err = f_->port_conflict(local.port, local, n_); err != 0) {
      throw_verb_error("rdma_bind_addr", err, addr.to_string() + ": the port is taken");
    } else if (SharedFabric* fabric = f_->w.shared_fabric()) {
      const int taken = fabric->claim_cm_port(n_, local.ip, local.is_any(), local.port, nd.ud);
      if (taken != 0) {
        throw_verb_error("rdma_bind_addr", taken,
                         addr.to_string() + ": " +
                             (taken == ENOSPC ? "the fabric's table of ports is full"
                                              : "another process of the fabric has the port"));
      }
    }
    nd.local = local;
    nd.owns_port = true;
    nd.dev = dev;
    nd.port = port;
    nd.st = St::bound;
  }

  void listen(int backlog) override {
    injected(Verb::rdma_listen, "rdma_listen");
    CmNode& nd = node();
    if (nd.st == St::idle) bind_addr(SockAddr::ipv4(0, 0, 0, 0));
    if (nd.st != St::bound) bad_state("rdma_listen", nd.st);
    if (backlog < 0) throw_verb_error("rdma_listen", EINVAL, "backlog " + std::to_string(backlog));
    nd.st = St::listening;
    if (SharedFabric* fabric = f_->w.shared_fabric()) fabric->set_cm_listening(n_);
  }

  void resolve_addr(const SockAddr& dst, int timeout_ms) override {
    injected(Verb::rdma_resolve_addr, "rdma_resolve_addr");
    CmNode& nd = node();
    if (nd.st != St::idle && nd.st != St::bound) bad_state("rdma_resolve_addr", nd.st);
    const auto [dev, port] = f_->owner(dst);
    if (dev < 0 && !CmFabric::on_network(dst)) {
      throw_verb_error("rdma_resolve_addr", ENETUNREACH, "no route to " + dst.to_string());
    }
    if (nd.st == St::idle) {
      nd.owns_port = true;
      nd.local.port = f_->ephemeral_port(nd.local, n_);
    }
    nd.peer = dst;
    if (dev < 0) {  // on the network, but nobody answers the neighbour query
      nd.st = St::addr_query;
      f_->arm(n_, Code::addr_timeout,
              static_cast<std::uint64_t>(std::max(timeout_ms, 0)) * 1'000'000);
      return;
    }
    if (nd.dev < 0) {  // not bound to an address: through the destination's own device
      nd.dev = dev;
      nd.port = port;
      const std::uint16_t p = nd.local.port;
      nd.local = dst;
      nd.local.port = p;
    }
    nd.st = St::addr_resolved;
    f_->report(n_, CmEventType::addr_resolved);
  }

  void resolve_route(int /*timeout_ms*/) override {
    injected(Verb::rdma_resolve_route, "rdma_resolve_route");
    CmNode& nd = node();
    if (nd.st != St::addr_resolved) bad_state("rdma_resolve_route", nd.st);
    nd.st = St::route_resolved;
    f_->report(n_, CmEventType::route_resolved);
  }

  void connect(QueuePair& qp, const ConnParam& param) override {
    check_connect(param);
    CmNode& nd = node();
    f_->check_qp("rdma_connect", nd, qp);
    if (nd.ud) {
      f_->ud_ready(nd, qp);
    } else {
      ConnectOptions o = f_->options(nd);
      o.access = CmFabric::access(param);
      modify_to_init(qp, o);
      draw_psn(nd);
    }
    nd.has_qp = true;
    send_request(qp.qp_num(), param);
  }

  void accept(QueuePair& qp, const ConnParam& param) override {
    check_accept();
    CmNode& nd = node();
    f_->check_qp("rdma_accept", nd, qp);
    if (param.private_data.size() > reply_max()) {
      // The reply cannot carry it: as the kernel's rdma_accept, the request is rejected and a
      // connection's QP goes to ERR (measured on rxe; from RESET it cannot, and stays there).
      reject_request();
      if (!nd.ud && qp.state() != QpState::reset) {
        QpAttr a;
        a.qp_state = QpState::err;
        qp.modify(a, QpAttrMask::state);
      }
      check_data("rdma_accept", param.private_data, reply_max());
    }
    if (nd.ud) {  // the SIDR reply: the QP's number and Q_Key, nothing to wait for
      f_->ud_ready(nd, qp);
    } else {
      ConnectOptions o = f_->options(nd);
      o.access = CmFabric::access(param);
      o.max_dest_rd_atomic = param.responder_resources;
      o.max_rd_atomic = param.initiator_depth;
      o.retry_cnt = nd.theirs.retry_count;
      o.rnr_retry = nd.theirs.rnr_retry_count;
      draw_psn(nd);
      verbsim::connect(qp, nd.peer_psn, Endpoint{nd.peer.gid(), nd.peer_qpn, nd.psn}, o);
    }
    nd.has_qp = true;
    send_reply(qp.qp_num(), param);
  }

  void connect_own_qp(std::uint32_t qp_num, const ConnParam& param) override {
    check_connect(param);
    CmNode& nd = node();
    nd.own_qp = true;
    if (!nd.ud) draw_psn(nd);
    send_request(qp_num, param);
  }

  void accept_own_qp(std::uint32_t qp_num, const ConnParam& param) override {
    check_accept();
    CmNode& nd = node();
    nd.own_qp = true;
    if (param.private_data.size() > reply_max()) {  // the kernel's rdma_accept rejects it
      reject_request();
      check_data("rdma_accept", param.private_data, reply_max());
    }
    if (!nd.ud) draw_psn(nd);
    send_reply(qp_num, param);
  }

  // What rdma_cm gives (measured on rxe): INIT with the port and, once connect or a request
  // says whether this side serves RDMA READs, remote rights; RTR and RTS with the values
  // connect() and accept() use: the peer's QP and RDMA READ depths, the PSNs (draw_psn), the
  // retry count of the request, the RNR retry count the peer asked for. A UD QP: the Q_Key,
  // then state and PSN 0. A client that has not connected yet has no IB CM id: RTR and RTS get
  // INIT's attributes with the state asked, and RTR's rq_psn (outside the mask) is the PSN it
  // will receive with, as the kernel's rdma_init_qp_attr does.
  QpAttrMask init_qp_attr(QpState state, QpAttr& attr) const override {
    CmNode& nd = f_->node(n_);
    if (nd.dev < 0) throw_verb_error("rdma_init_qp_attr", EINVAL, "the id has no device yet");
    const bool server = nd.listener != kNone;
    ConnectOptions o = f_->options(nd);
    attr = QpAttr{};
    const bool before_connect = !server && (nd.st == St::bound || nd.st == St::addr_query ||
                                            nd.st == St::addr_resolved ||
                                            nd.st == St::route_resolved);
    if (nd.ud) {
      o.qkey = kCmUdpQkey;
      if (state == QpState::init) return init_attr(QpType::ud, o, attr);
      if (state == QpState::rtr) return rtr_attr(QpType::ud, Endpoint{}, o, attr);
      if (state == QpState::rts) return rts_attr(QpType::ud, 0, o, attr);
    } else if (state == QpState::init || (before_connect && (state == QpState::rtr ||
                                                             state == QpState::rts))) {
      o.access = server                   ? CmFabric::access(swapped(nd.theirs))
                 : nd.own_qp || nd.has_qp ? CmFabric::access(nd.mine)
                                          : Access::none;
      const QpAttrMask mask = init_attr(QpType::rc, o, attr);
      attr.qp_state = state;
      if (state == QpState::rtr) {
        draw_psn(nd);
        attr.rq_psn = nd.psn;
      }
      return mask;
    } else if (state == QpState::rtr || state == QpState::rts) {
      if (!server && nd.st != St::rep_rcvd && nd.st != St::established) {
        throw_verb_error("rdma_init_qp_attr", EINVAL,
                         std::string("the peer is not known yet: the id is ") + state_name(nd.st));
      }
      o.max_dest_rd_atomic = nd.theirs.initiator_depth;
      o.max_rd_atomic = nd.theirs.responder_resources;
      o.retry_cnt = server ? nd.theirs.retry_count : nd.mine.retry_count;
      o.rnr_retry = nd.theirs.rnr_retry_count;
      draw_psn(nd);
      if (state == QpState::rtr) {
        return rtr_attr(QpType::rc, Endpoint{nd.peer.gid(), nd.peer_qpn, nd.psn}, o, attr);
      }
      return rts_attr(QpType::rc, nd.peer_psn, o, attr);
    }
    throw_verb_error("rdma_init_qp_attr", EINVAL, "only INIT, RTR and RTS");
  }

  void migrate(CmEventChannel& to) override;

  void set_ack_timeout(std::uint8_t timeout) override {
    CmNode& nd = node();
    if (nd.ud) throw_verb_error("rdma_set_option", EINVAL, "an ACK timeout on a UDP id");
    if (timeout > 31) {
      throw_verb_error("rdma_set_option", EINVAL, "ACK timeout " + std::to_string(timeout));
    }
    nd.ack_timeout = timeout;
  }

  void establish() override {
    CmNode& nd = node();
    if (nd.st != St::rep_rcvd) bad_state("rdma_establish", nd.st);
    nd.st = St::established;
    f_->send_to_node(f_->reply(n_, Msg::rtu));
  }

  void reject(std::span<const std::uint8_t> data) override {
    injected(Verb::rdma_reject, "rdma_reject");
    CmNode& nd = node();
    if (nd.st != St::req_rcvd) bad_state("rdma_reject", nd.st);
    check_data("rdma_reject", data, nd.ud ? kCmUdAcceptDataMax : kCmRejectDataMax);
    nd.st = St::closed;
    f_->send_rej(n_, nd.ud ? kCmSidrRejected : kCmRejectByConsumer, data);
  }

  void disconnect() override {
    injected(Verb::rdma_disconnect, "rdma_disconnect");
    CmNode& nd = node();
    if (nd.ud) {  // no connection: the QP goes to ERR, as librdmacm does
      f_->to_error(n_);
      return;
    }
    switch (nd.st) {
      case St::established:
        f_->to_error(n_);
        nd.st = St::dreq_sent;
        f_->send_expecting_answer(n_, f_->reply(n_, Msg::dreq), f_->node(nd.peer_node).dev,
                                  f_->node(nd.peer_node).port);
        return;
      case St::dreq_rcvd:
        f_->to_error(n_);
        nd.st = St::closed;
        f_->send_to_node(f_->reply(n_, Msg::drep));
        f_->enter_timewait(n_);
        return;
      case St::dreq_sent:
      case St::closed:
        if (nd.peer_node == kNone) bad_state("rdma_disconnect", nd.st);
        f_->to_error(n_);  // already disconnected: nothing more to send
        return;
      default: bad_state("rdma_disconnect", nd.st);
    }
  }

  std::string device_name() const override {
    const CmNode& nd = f_->node(n_);
    return nd.dev < 0 ? std::string() : f_->w.devices()[static_cast<std::size_t>(nd.dev)]->name;
  }
  std::uint8_t port_num() const noexcept override { return f_->node(n_).port; }
  SockAddr local_addr() const override { return f_->node(n_).local; }
  SockAddr peer_addr() const override { return f_->node(n_).peer; }
  QueuePair* qp() const noexcept override { return f_->qp_of(n_); }

 private:
  CmNode& node() { return f_->node(n_); }
  // A failure the fault plan injects into `verb`: thrown as the verb's own would be, the id
  // left as it was.
  void injected(Verb v, const char* verb) {
    f_->w.program_acts();  // what it sends leaves at the others' present (shared fabric)
    const CmNode& nd = node();
    const DevCore* dev = nd.dev >= 0 ? f_->w.devices()[static_cast<std::size_t>(nd.dev)].get() : nullptr;
    if (const int err = f_->w.verb_fault(v, nd.qpn, dev)) {
      throw_verb_error(verb, err, "injected by the fault plan");
    }
  }

  // What rdma_connect checks first: the fault plan, the id's state, the private data's size.
  void check_connect(const ConnParam& param) {
    injected(Verb::rdma_connect, "rdma_connect");
    const CmNode& nd = node();
    if (nd.st != St::route_resolved) bad_state("rdma_connect", nd.st);
    check_data("rdma_connect", param.private_data, nd.ud ? kCmUdConnectDataMax : kCmConnectDataMax);
  }
  // The REQ (a UD service's SIDR REQ) naming QP `qpn`, sent again until answered.
  void send_request(std::uint32_t qpn, const ConnParam& param) {
    CmNode& nd = node();
    nd.st = St::connecting;
    const auto [dev, port] = f_->owner(nd.peer);
    f_->send_expecting_answer(
        n_, offer(Msg::req, qpn, param, nd.ud ? kCmUdConnectDataMax : kCmConnectDataMax), dev,
        port);
  }

  // What rdma_accept checks first: the fault plan and the id's state.
  void check_accept() {
    injected(Verb::rdma_accept, "rdma_accept");
    if (node().st != St::req_rcvd) bad_state("rdma_accept", node().st);
  }
  std::size_t reply_max() { return node().ud ? kCmUdAcceptDataMax : kCmAcceptDataMax; }
  // The request refused (an accept whose private data the reply cannot carry).
  void reject_request() {
    CmNode& nd = node();
    nd.st = St::closed;
    f_->send_rej(n_, nd.ud ? kCmSidrRejected : kCmRejectByConsumer);
  }
  // The REP naming QP `qpn`, sent again until the RTU; a UD service's SIDR REP is final, and
  // kept to answer a repeated request again.
  void send_reply(std::uint32_t qpn, const ConnParam& param) {
    CmNode& nd = node();
    nd.st = St::rep_sent;
    if (nd.ud) {
      nd.unanswered = offer(Msg::rep, qpn, param, reply_max());
      f_->send_to_node(nd.unanswered);
      return;
    }
    const CmNode& client = f_->node(nd.peer_node);
    f_->send_expecting_answer(n_, offer(Msg::rep, qpn, param, reply_max()), client.dev,
                              client.port);
  }

  // Keeps `qpn` and `param` (less its private data) as this side's, and makes the REQ or REP
  // that carries them, with the private data padded to the message's `size`.
  Wire offer(Msg kind, std::uint32_t qpn, const ConnParam& param, std::size_t size) {
    CmNode& nd = node();
    nd.mine = param;
    nd.mine.private_data.clear();
    nd.qpn = qpn;
    Wire m = f_->reply(n_, kind);  // a REQ's peer is found by its address: m.dst
    m.dst = nd.peer;
    m.data = padded(param.private_data, size);
    m.param = nd.mine;
    m.qpn = nd.qpn;
    m.psn = nd.psn;
    return m;
  }

  // This side's PSN, drawn once (a server of its own QP when init_qp_attr or accept asks). As
  // in rdma_cm, each side receives with its own PSN and sends with the one its peer's request
  // or reply carried (measured on rxe: the server's RTS sq_psn is the PSN the client's RTR had
  // before it connected).
  void draw_psn(CmNode& nd) const {
    if (!nd.psn_drawn) nd.psn = f_->initial_psn();
    nd.psn_drawn = true;
  }
  static ConnParam swapped(ConnParam p) {
    std::swap(p.responder_resources, p.initiator_depth);
    return p;
  }

  std::shared_ptr<CmFabric> f_;
  std::uint32_t n_;
};

class SimCmChannel final : public CmEventChannel {
 public:
  SimCmChannel(std::shared_ptr<CmFabric> fabric) : f_(std::move(fabric)) {
    core_ = std::make_shared<CmChannelCore>();
    core_->world = &f_->w;
    core_->efd = make_eventfd();
  }
  ~SimCmChannel() override {
    // Requests never taken are rejected, as closing the channel's fd does.
    for (const auto& ev : core_->events) {
      if (ev.type == CmEventType::connect_request) f_->destroyed(ev.node);
    }
    core_->events.clear();
  }

  std::unique_ptr<CmId> create_id(PortSpace space) override {
    const std::uint32_t n = f_->add_node(core_);
    f_->node(n).ud = space == PortSpace::udp;
    return std::make_unique<SimCmId>(f_, n);
  }

  std::error_code get_event(CmEvent& out, Wait wait) override {
    if (const int err = f_->w.verb_fault(Verb::rdma_get_cm_event, 0, nullptr)) {
      return errno_code(err);  // injected by the fault plan; the events stay queued
    }
    auto& q = core_->events;
    return wait_for(f_->w, core_->waiters, wait, [&] {
      while (!q.empty()) {
        CmChannelCore::Pending ev = std::move(q.front());
        q.pop_front();
        drain_fd(core_->efd);
        CmNode& nd = f_->node(ev.node);
        if (!nd.alive) continue;  // the id went meanwhile
        take(ev, out);
        return true;
      }
      return false;
    });
  }

  int fd() const noexcept override { return core_->efd; }
  const std::shared_ptr<CmChannelCore>& core() const noexcept { return core_; }

 private:
  void take(CmChannelCore::Pending& ev, CmEvent& out) {
    out = CmEvent{};
    out.type = ev.type;
    out.status = ev.status;
    out.private_data = std::move(ev.data);
    out.param = ev.param;
    out.peer_qp_num = ev.peer_qpn;
    if (ev.type == CmEventType::established && f_->node(ev.node).ud) {  // the server's address
      out.qkey = kCmUdpQkey;
      out.ah_attr = f_->ah_to_peer(ev.node);
    }
    if (ev.type == CmEventType::connect_request) {
      f_->node(ev.node).ch = core_;  // the new id belongs to the channel that took it
      auto id = std::make_unique<SimCmId>(f_, ev.node);
      out.id = id.get();
      out.new_id = std::move(id);
      out.listen_id = handle_of(ev.listener);
      return;
    }
    out.id = handle_of(ev.node);
    switch (ev.type) {
      case CmEventType::rejected:
      case CmEventType::unreachable:
      case CmEventType::connect_error:
        // A connection's QP goes to ERR; a UD QP stays as it is (measured on rxe).
        if (!f_->node(ev.node).ud) f_->to_error(ev.node);
        break;
      default: break;
    }
  }
  CmId* handle_of(std::uint32_t n) const { return f_->node(n).handle; }

  std::shared_ptr<CmFabric> f_;
  std::shared_ptr<CmChannelCore> core_;
};

}  // namespace

void SimCmId::migrate(CmEventChannel& to) {
  auto* ch = dynamic_cast<SimCmChannel*>(&to);
  if (ch == nullptr) throw_verb_error("rdma_migrate_id", EINVAL, "not the simulator's channel");
  f_->migrate(n_, ch->core());
}

std::unique_ptr<CmEventChannel> World::create_cm_channel() {
  if (!impl_->cm()) impl_->cm() = std::make_shared<CmFabric>(*impl_);
  return std::make_unique<SimCmChannel>(impl_->cm());
}

}  // namespace verbsim::sim
