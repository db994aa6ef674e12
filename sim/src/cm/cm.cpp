// The simulated connection manager (verbsim/cm.hpp): rdma_cm's id states over the IB CM
// messages of a RoCE connection (REQ, REP, RTU, REJ, DREQ, DREP), carried as world events.
//
// Addresses are the ports' RoCE v2 GIDs: port p of device d is 10.0.d.(p+1), and the fabric is
// one network, 10.0.0.0/16. An id not bound to a local address reaches a destination through
// the destination's own device, as a host reaches its own addresses. A message takes the link
// latency; one sent or arriving while either port is down, or lost to a cm_drop rule of the
// fault plan, is gone, and the side waiting for the answer sends it again after rdma_cm's
// response timeout, at most kRetries times, before reporting UNREACHABLE (a REQ),
// CONNECT_ERROR (a REP) or DISCONNECTED -ETIMEDOUT (a DREQ).
//
// The QP steps follow librdmacm with a QP of its own: connect() takes the QP to INIT; the
// client's RTR and RTS happen when the server's REP arrives (then the RTU goes out and
// ESTABLISHED is reported; librdmacm does it when get_event takes the REP); accept() takes the
// server's QP to RTS. REJECTED, UNREACHABLE and CONNECT_ERROR take the id's QP to ERR when
// get_event takes them, and disconnect() does before its DREQ.
//
// A UDP id (PortSpace::udp) resolves a UD service instead: its REQ and REP stand for the SIDR
// REQ and REP, both QPs go to RTS at connect and accept, the client's ESTABLISHED carries the
// server's QP number, Q_Key and address, a REJ stands for a SIDR REP that refuses (reported as
// UNREACHABLE), and nothing else follows.
#include "verbsim/cm.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <deque>
#include <string>

#include "transport/qp.hpp"
#include "verbsim/connect.hpp"
#include "verbsim/error.hpp"
#include "fibers/wait.hpp"

namespace verbsim::sim {

namespace {

constexpr std::uint64_t kResponseTimeoutNs =
    4'294'967'296;            // 4.096 us * 2^20, rdma_cm's CM timeout
constexpr int kRetries = 15;  // rdma_cm's max_cm_retries
constexpr std::uint32_t kNone = UINT32_MAX;
constexpr std::uint16_t kFirstEphemeralPort = 32768;
constexpr std::uint8_t kLocalAckTimeout = 19;  // the QPs rdma_cm connects over rxe (measured)
constexpr std::uint8_t kMinRnrTimer = 0;       // ditto (655 ms)

// In the order of sim::CmMessage (the fault plan's names), which starts with `any`.
enum class Msg : std::uint8_t { req, rep, rtu, rej, dreq, drep };
static_assert(static_cast<int>(CmMessage::drep) == static_cast<int>(Msg::drep) + 1);
enum class Code : std::uint8_t { message, timer, addr_timeout, timewait };
// How long a connection's id stays in timewait after its disconnect completed, then
// TIMEWAIT_EXIT: the IB CM's 1 << (timeout - 8) ms for the timeout 19 of RoCE's paths (2.26 s
// in the rxe VM).
constexpr std::uint64_t kTimewaitNs = 2'048'000'000;

enum class St : std::uint8_t {
  idle,
  bound,
  addr_query,  // resolve_addr of an address nobody has: ADDR_ERROR at its timeout
  addr_resolved,
  route_resolved,
  listening,
  connecting,  // REQ sent
  req_rcvd,    // server: CONNECT_REQUEST reported, not answered yet
  rep_sent,    // server: accepted, waiting for the RTU (UD: the reply, kept to send again)
  rep_rcvd,    // client of its own QP: CONNECT_RESPONSE reported, waiting for establish()
  established,
  dreq_sent,
  dreq_rcvd,
  closed,
};

// A message on the fabric.
struct Wire {
  Msg kind = Msg::req;
  std::uint32_t from = kNone;  // sending node
  std::uint32_t to = kNone;    // receiving node, kNone for a REQ (found by its address)
  int reason = 0;              // REJ
  SockAddr dst;                // REQ: the address connected to
  std::vector<std::uint8_t> data;
  ConnParam param;        // REQ, REP
  std::uint32_t qpn = 0;  // REQ, REP
  std::uint32_t psn = 0;
};

std::vector<std::uint8_t> padded(std::span<const std::uint8_t> data, std::size_t size) {
  std::vector<std::uint8_t> out(size, 0);
  std::copy(data.begin(), data.end(), out.begin());
  return out;
}

void check_data(const char* verb, std::span<const std::uint8_t> data, std::size_t max) {
  if (data.size() > max) {
    throw_verb_error(verb, EINVAL,
                     std::to_string(data.size()) + " bytes of private data (at most " +
                         std::to_string(max) + ")");
  }
}

}  // namespace

struct CmChannelCore {
  struct Pending {
    CmEventType type;
    int status = 0;
    std::uint32_t node = kNone;
    std::uint32_t listener = kNone;
    std::vector<std::uint8_t> data;
    ConnParam param;
    std::uint32_t peer_qpn = 0;
  };
  World::Impl* world = nullptr;
  std::deque<Pending> events;
  int efd = -1;
  WaitQueuePtr waiters;
  ~CmChannelCore() {
    if (efd >= 0) ::close(efd);
  }
};

// One rdma_cm_id. Nodes stay in the fabric until the world goes, so that a message to an id
// the program destroyed still finds it (and is answered as the kernel's CM answers it).
struct CmNode {
  St st = St::idle;
  bool alive = true;  // the program's id exists (or will: a request not yet taken)
  bool ud = false;    // of PortSpace::udp: SIDR, no connection state
  bool owns_port = false;
  std::shared_ptr<CmChannelCore> ch;
  CmId* handle = nullptr;  // the program's id, once handed out
  int dev = -1;
  std::uint8_t port = 0;
  SockAddr local;
  SockAddr peer;
  std::uint32_t peer_node = kNone;
  std::uint32_t listener = kNone;
  bool has_qp = false;             // connect or accept gave it QP `qpn` (looked up, never kept: the
                                   // program may destroy it first)
  bool own_qp = false;             // connect_own_qp / accept_own_qp: `qpn` is the program's to move
  bool psn_drawn = false;          // `psn` is chosen (a server of its own QP draws it when asked)
  std::uint32_t qpn = 0, psn = 0;  // this side's, as sent
  std::uint32_t peer_qpn = 0, peer_psn = 0;  // the other side's
  ConnParam mine;                            // private data not kept
  ConnParam theirs;
  // The message waiting for an answer, sent again at each timeout.
  Wire unanswered;
  int retries_left = 0;
  std::uint64_t timer_gen = 0;
};

struct CmFabric {
  World::Impl& w;
  std::vector<CmNode> nodes;
  std::vector<Wire> wires;  // in flight, by slot
  std::vector<std::uint32_t> free_wires;
  std::uint16_t next_port = kFirstEphemeralPort;

  explicit CmFabric(World::Impl& world) : w(world) {}

  // Does a cm_drop rule lose `m`, sent from device `dev`?
  bool dropped(const Wire& m, int dev) {
    const std::uint32_t from_qpn = m.from != kNone ? node(m.from).qpn : 0;
    const std::uint32_t to_qpn = m.to != kNone ? node(m.to).qpn : 0;
    const auto kind = static_cast<CmMessage>(static_cast<int>(m.kind) + 1);
    return w.faults().cm_message(kind, from_qpn, to_qpn, dev);
  }

  CmNode& node(std::uint32_t n) { return nodes[n]; }

  std::uint32_t add_node(std::shared_ptr<CmChannelCore> ch) {
    nodes.emplace_back();
    nodes.back().ch = std::move(ch);
    return static_cast<std::uint32_t>(nodes.size() - 1);
  }

  // The device and port whose GID is `a`'s address, or {-1, 0}.
  std::pair<int, std::uint8_t> owner(const SockAddr& a) const {
    const World::Impl::GidPlace at = w.locate(a.gid());
    return {at.dev, at.port};
  }
  // On the simulated network (10.0.0.0/16, or an IPv6 link-local address) but nobody's.
  static bool on_network(const SockAddr& a) {
    if (a.is_ipv4()) return a.ip[12] == 10 && a.ip[13] == 0;
    return a.ip[0] == 0xfe && (a.ip[1] & 0xc0) == 0x80;
  }
  // 0, or the errno of node `except` binding `ip` and `port` while another id of its port space
  // has the port: EADDRINUSE for the same address, EADDRNOTAVAIL when either is any address
  // (the kernel's cma_check_port).
  int port_conflict(std::uint16_t port, const SockAddr& ip, std::uint32_t except) const {
    for (std::uint32_t i = 0; i < nodes.size(); ++i) {
      const CmNode& n = nodes[i];
      if (i == except || !n.alive || !n.owns_port || n.local.port != port) continue;
      if (n.ud != nodes[except].ud) continue;  // another port space
      if (n.local.is_any() || ip.is_any()) return EADDRNOTAVAIL;
      if (n.local.ip == ip.ip) return EADDRINUSE;
    }
    return 0;
  }
  std::uint16_t ephemeral_port(const SockAddr& ip, std::uint32_t except) {
    for (int tries = 0; tries < 32768; ++tries) {
      const std::uint16_t p = next_port;
      next_port =
          next_port == 65535 ? kFirstEphemeralPort : static_cast<std::uint16_t>(next_port + 1);
      if (port_conflict(p, ip, except) == 0) return p;
    }
    throw_verb_error("rdma_bind_addr", EADDRINUSE, "no free port");
  }

  void report(std::uint32_t n, CmChannelCore::Pending ev) {
    CmNode& nd = node(n);
    if (!nd.alive) return;
    ev.node = n;
    w.digest().add(0xc3000000ull | static_cast<std::uint64_t>(ev.type) << 16 | (n & 0xffff));
    CmChannelCore& ch = *nd.ch;
    ch.events.push_back(std::move(ev));
    signal_fd(ch.efd);
    notify_all(ch.waiters);
  }
  void report(std::uint32_t n, CmEventType type, int status = 0) {
    CmChannelCore::Pending ev;
    ev.type = type;
    ev.status = status;
    report(n, std::move(ev));
  }

  // Sends `m` from node m.from (kNone: from the device, which refuses a REQ) to port `to_port`
  // of device `to_dev`.
  void send(Wire m, int to_dev, std::uint8_t to_port) {
    int from_dev = to_dev;  // a REJ from the device itself
    if (m.from != kNone) {
      const CmNode& from = node(m.from);
      from_dev = from.dev;
      if (!w.port_up(static_cast<std::uint32_t>(from.dev), from.port)) return;  // lost
    }
    if (dropped(m, from_dev)) return;
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
  // Sends `m` to its node m.to (none: a reply to a peer this side never heard from).
  void send_to_node(Wire m) {
    if (m.to == kNone) return;
    const CmNode& to = node(m.to);
    send(std::move(m), to.dev, to.port);
  }
  // Sends `m`, which expects an answer: again after each timeout until kRetries ran out.
  void send_expecting_answer(std::uint32_t n, Wire m, int to_dev, std::uint8_t to_port) {
    CmNode& nd = node(n);
    nd.unanswered = m;
    nd.retries_left = kRetries;
    send(std::move(m), to_dev, to_port);
    arm(n, Code::timer, kResponseTimeoutNs);
  }
  void arm(std::uint32_t n, Code code, std::uint64_t after_ns) {
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
  void answered(std::uint32_t n) { ++node(n).timer_gen; }
  // rdma_migrate_id: node `n`'s events (the pending ones, and a listener's requests not yet
  // taken) go to channel `to`.
  void migrate(std::uint32_t n, const std::shared_ptr<CmChannelCore>& to) {
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
  // The disconnect of node `n` is complete (DREP sent or taken, or the DREQ unanswered).
  void enter_timewait(std::uint32_t n) { arm(n, Code::timewait, kTimewaitNs); }

  // The QP connect or accept gave node `n`, if it still exists.
  QueuePair* qp_of(std::uint32_t n) const noexcept {
    const CmNode& nd = nodes[n];
    return nd.has_qp ? w.find_qp(static_cast<std::uint32_t>(nd.dev), nd.qpn) : nullptr;
  }

  // The client's side of the server's REP: RTR, RTS and the RTU, then ESTABLISHED (or, if the
  // QP refuses, a REJ and CONNECT_ERROR). librdmacm does this when get_event takes the REP;
  // the simulator does it when the REP arrives, microseconds earlier, so that virtual time
  // moved on by a program polling other things first cannot time the server out.
  void establish(std::uint32_t n, std::vector<std::uint8_t> rep_data) {
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

  // The id's QP to ERR, as librdmacm does on a failed connection and before a DREQ.
  void to_error(std::uint32_t n) {
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

  Wire reply(std::uint32_t n, Msg kind) {
    Wire m;
    m.kind = kind;
    m.from = n;
    m.to = node(n).peer_node;
    return m;
  }
  // A REJ (a SIDR REP with a failure status on a UDP id) with `data` padded to its size.
  void send_rej(std::uint32_t n, int reason, std::span<const std::uint8_t> data = {}) {
    Wire m = reply(n, Msg::rej);
    m.reason = reason;
    m.data = padded(data, node(n).ud ? kCmUdAcceptDataMax : kCmRejectDataMax);
    send_to_node(std::move(m));
  }

  void on_timer(const Event& e) {
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

  void on_message(const Event& e) {
    Wire m = std::move(wires[e.index]);
    free_wires.push_back(e.index);
    if (!w.port_up(e.dev, static_cast<std::uint8_t>(e.wire))) return;  // lost
    if (m.kind == Msg::req) {
      on_req(std::move(m), e.dev, static_cast<std::uint8_t>(e.wire));
      return;
    }
    const std::uint32_t n = m.to;
    CmNode& nd = node(n);
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

  void on_req(Wire m, int dev, std::uint8_t port) {
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
    if (l == kNone) {  // the device refuses it
      Wire rej;
      rej.kind = Msg::rej;
      rej.to = m.from;
      rej.reason = ud ? kCmSidrNoListener : kCmRejectNoListener;
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

  // The program's id goes: what the kernel's CM does for an id destroyed in each state.
  void destroyed(std::uint32_t n) {
    CmNode& nd = node(n);
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

  // The path's flow label (cm_flow_label); the server has the client's port from the request.
  static std::uint32_t flow_label(const CmNode& nd) {
    const bool server = nd.listener != kNone;
    return server ? cm_flow_label(nd.peer.port, nd.local.port)
                  : cm_flow_label(nd.local.port, nd.peer.port);
  }
  ConnectOptions options(const CmNode& nd) const {
    ConnectOptions o;
    o.port_num = nd.port;
    o.sgid_index = w.locate(nd.local.gid()).gid_index;
    o.flow_label = flow_label(nd);
    o.path_mtu = Mtu::mtu_1024;
    o.timeout = kLocalAckTimeout;
    o.min_rnr_timer = kMinRnrTimer;
    return o;
  }
  static Access access(const ConnParam& mine) {
    // ib_cm's INIT attributes: remote writes always; reads and atomics when this side serves
    // any (responder resources).
    Access a = Access::remote_write;
    if (mine.responder_resources > 0) a |= Access::remote_read | Access::remote_atomic;
    return a;
  }
  void check_qp(const char* verb, const CmNode& nd, QueuePair& qp) const {
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
  // The address vector from node `n`'s port to its peer's address (a UDP id's ESTABLISHED).
  AhAttr ah_to_peer(std::uint32_t n) const {
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
  // A UD QP of a UDP id to RTS with rdma_cm's Q_Key (librdmacm does it in rdma_create_qp).
  // A UD QP already in RTS (librdmacm's rdma_create_qp takes it there) is left as it is.
  void ud_ready(const CmNode& nd, QueuePair& qp) const {
    if (qp.state() == QpState::rts) return;
    ConnectOptions o = options(nd);
    o.qkey = kCmUdpQkey;
    verbsim::connect(qp, 0, Endpoint{}, o);
  }
  std::uint32_t initial_psn() { return static_cast<std::uint32_t>(w.rng().next() & 0xffffff); }
};

namespace {

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

void World::Impl::run_cm_event(const Event& e) {
  if (static_cast<Code>(e.code) == Code::message) {
    cm_->on_message(e);
  } else {
    cm_->on_timer(e);
  }
}

void SimCmId::migrate(CmEventChannel& to) {
  auto* ch = dynamic_cast<SimCmChannel*>(&to);
  if (ch == nullptr) throw_verb_error("rdma_migrate_id", EINVAL, "not the simulator's channel");
  f_->migrate(n_, ch->core());
}

bool World::Impl::cm_timer_is_stale(const Event& e) const noexcept {
  return static_cast<Code>(e.code) != Code::message && e.value != cm_->nodes[e.index].timer_gen;
}

std::unique_ptr<CmEventChannel> World::create_cm_channel() {
  if (!impl_->cm()) impl_->cm() = std::make_shared<CmFabric>(*impl_);
  return std::make_unique<SimCmChannel>(impl_->cm());
}

}  // namespace verbsim::sim
