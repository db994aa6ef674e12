// The connection manager across the processes of a shared fabric (Config::fabric,
// fabric/multiprocess.cpp). A message for an id of another process is handed over when it
// arrives, as a parcel; there the id that sent it is a proxy node (CmNode::remote), so the
// state machine of messages.cpp runs unchanged on both sides. A REQ goes to the process whose
// id listens on its address (SharedFabric::cm_listener).
#include <cstring>
#include <ctime>
#include <unistd.h>

#include "cm/fabric.hpp"
#include "fabric/shared_fabric.hpp"

namespace verbsim::sim {

namespace {

// A CM message between processes: its event first (the time it arrives; where), then what the
// receiving side needs of the message and of the id that sent it; the private data follows.
struct CmParcel {
  Event event;  // kind: EvKind::cm; dev and wire: the device and port it arrives at
  std::uint64_t from_token;  // SharedFabric::token_of the sender's slot
  std::uint64_t to_token;    // the receiver's; 0: a REQ (found by its address)
  std::uint32_t from;  // the sender's node, or kNone (its device refuses a REQ)
  std::uint32_t to;    // the receiver's node, or kNone (a REQ)
  SockAddr from_local;
  std::int32_t from_dev;
  std::uint8_t from_port;
  bool from_ud;
  std::uint32_t from_qpn;
  Msg kind;
  std::int32_t reason;
  SockAddr dst;
  std::uint8_t responder_resources, initiator_depth, retry_count, rnr_retry_count;
  std::uint32_t qpn, psn;
  std::int32_t src_dev;
  std::uint8_t src_port;
  std::uint32_t data_bytes;
};
static_assert(offsetof(CmParcel, event) == 0);

}  // namespace

void CmFabric::hand_over(const Wire& m, int to_dev, std::uint8_t to_port, int slot) {
  SharedFabric* fabric = w.shared_fabric();
  if (fabric == nullptr) return;
  CmParcel p{};
  p.event.time = w.now();
  p.event.kind = EvKind::cm;
  p.event.dev = static_cast<std::uint16_t>(to_dev);
  p.event.wire = to_port;
  p.from_token = fabric->token();
  p.from = m.from;
  p.to = kNone;
  if (m.to != kNone) {
    const CmNode& to = node(m.to);
    slot = to.remote_slot;
    p.to_token = to.remote_token;
    p.to = to.remote_node;
  }
  if (slot < 0 || (p.to_token != 0 && fabric->token_of(slot) != p.to_token)) return;  // gone: lost
  if (m.from != kNone) {
    const CmNode& from = node(m.from);
    p.from_local = from.local;
    p.from_dev = from.dev;
    p.from_port = from.port;
    p.from_ud = from.ud;
    p.from_qpn = from.qpn;
  }
  p.kind = m.kind;
  p.reason = m.reason;
  p.dst = m.dst;
  p.responder_resources = m.param.responder_resources;
  p.initiator_depth = m.param.initiator_depth;
  p.retry_count = m.param.retry_count;
  p.rnr_retry_count = m.param.rnr_retry_count;
  p.qpn = m.qpn;
  p.psn = m.psn;
  p.src_dev = m.src_dev;
  p.src_port = m.src_port;
  p.data_bytes = static_cast<std::uint32_t>(m.data.size());
  fabric->send(slot, &p, sizeof p, m.data.data(), m.data.size());
}

void CmFabric::take_parcel(const std::uint8_t* bytes, std::size_t size) {
  CmParcel p;
  if (size < sizeof p) return;
  std::memcpy(&p, bytes, sizeof p);
  if (size < sizeof p + p.data_bytes) return;
  SharedFabric* fabric = w.shared_fabric();
  if (fabric == nullptr) return;
  if (p.to != kNone &&
      (p.to_token != fabric->token() || p.to >= nodes.size() || node(p.to).remote())) {
    return;  // for an id of an earlier process of this slot: lost
  }
  // What another process wrote is checked before it is used (docs/MULTIPROCESS.md): a kind of
  // message, devices of this fabric.
  const auto devices = static_cast<std::int32_t>(w.devices().size());
  if (p.kind > Msg::drep || p.event.dev >= devices || p.from_dev < -1 || p.from_dev >= devices ||
      p.src_dev < -1 || p.src_dev >= devices) {
    w.fabric_corrupt("a CM message's kind or device");
    return;
  }
  Wire m;
  m.kind = p.kind;
  m.to = p.to;
  m.reason = p.reason;
  m.dst = p.dst;
  m.data.assign(bytes + sizeof p, bytes + sizeof p + p.data_bytes);
  m.param.responder_resources = p.responder_resources;
  m.param.initiator_depth = p.initiator_depth;
  m.param.retry_count = p.retry_count;
  m.param.rnr_retry_count = p.rnr_retry_count;
  m.qpn = p.qpn;
  m.psn = p.psn;
  m.src_dev = p.src_dev;
  m.src_port = p.src_port;
  if (p.from != kNone) {
    // The sender's proxy here: one per id of another process, made by its first message.
    auto [it, made] = proxies.try_emplace(ProxyKey{p.from_token, p.from}, 0);
    if (made) {
      it->second = static_cast<std::uint32_t>(nodes.size());
      nodes.emplace_back();
      CmNode& proxy = nodes.back();
      proxy.alive = false;
      proxy.st = St::closed;
      proxy.remote_token = p.from_token;
      proxy.remote_node = p.from;
    }
    CmNode& proxy = node(it->second);
    proxy.remote_slot = -1;
    for (int s = 0; fabric != nullptr && s < SharedFabric::kSlots; ++s) {
      if (fabric->token_of(s) == p.from_token) proxy.remote_slot = s;
    }
    if (proxy.remote_slot < 0) return;  // its process is gone already
    proxy.local = p.from_local;
    proxy.dev = p.from_dev;
    proxy.port = p.from_port;
    proxy.ud = p.from_ud;
    proxy.qpn = p.from_qpn;
    m.from = it->second;
  }
  deliver_now(std::move(m), p.event.dev, p.event.wire);
}

void CmFabric::deliver_now(Wire m, std::uint16_t dev, std::uint16_t port) {
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
  e.time = w.now();
  e.kind = EvKind::cm;
  e.code = static_cast<std::uint8_t>(Code::message);
  e.dev = dev;
  e.wire = port;
  e.index = slot;
  on_message(e);
}

void CmFabric::peer_gone(int slot) {
  // A process that ends (killed too) has its ids destroyed by the kernel, whose CM sends a
  // DREQ for each connection: its peers here get DISCONNECTED, as rdma_cm reports a lost
  // connection. Those still setting one up time out as before.
  for (std::uint32_t n = 0; n < nodes.size(); ++n) {
    const CmNode& nd = nodes[n];
    if (!nd.alive || nd.remote() || nd.peer_node == kNone || nd.peer_node >= nodes.size()) continue;
    if (nodes[nd.peer_node].remote_slot != slot) continue;
    if (nd.st != St::established && nd.st != St::rep_sent) continue;
    Wire m;
    m.kind = Msg::dreq;
    m.from = nd.peer_node;
    m.to = n;
    m.src_dev = nd.dev;
    m.src_port = nd.port;
    deliver_now(std::move(m), static_cast<std::uint16_t>(std::max(nd.dev, 0)), nd.port);
  }
}

bool CmFabric::hold_for_next_listener(Wire& m, int dev, std::uint8_t port) {
  // Two processes race in wall time, which virtual time does not order: a server that closes
  // a listener and opens the next on the same port (perftest -R does) may see a client's REQ
  // in between, where on a host the next listen comes microseconds later. The kernel would
  // reject it; the wait stands for those microseconds.
  constexpr std::uint64_t kHoldNs = 250'000'000;
  constexpr std::uint64_t kAgainNs = 100'000;  // virtual time between looks
  SharedFabric* fabric = w.shared_fabric();
  if (fabric == nullptr || !fabric->released_cm_port(m.dst.ip, m.dst.port, node(m.from).ud)) {
    return false;
  }
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  const std::uint64_t wall = static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u +
                             static_cast<std::uint64_t>(ts.tv_nsec);
  if (m.held_since == 0) m.held_since = wall;
  if (wall - m.held_since > kHoldNs) return false;
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
  e.time = w.now() + kAgainNs;
  e.kind = EvKind::cm;
  e.code = static_cast<std::uint8_t>(Code::message);
  e.dev = static_cast<std::uint16_t>(dev);
  e.wire = port;
  e.index = slot;
  w.schedule(e);
  return true;
}

}  // namespace verbsim::sim
