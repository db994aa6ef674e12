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
//
// The fabric and its nodes, shared by the two halves: messages.cpp sends, receives and
// sends again the messages and runs the state machine; ids.cpp is the program's side (ids,
// channels, addresses, the QP steps of connect and accept).
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "fabric/event.hpp"
#include "fabric/world_impl.hpp"
#include "faults/rule_check.hpp"
#include "verbsim/cm.hpp"
#include "verbsim/connect.hpp"

namespace verbsim::sim {

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
  std::uint64_t held_since = 0;  // a REQ held for the next listener (remote.cpp): wall ns
  ConnParam param;        // REQ, REP
  std::uint32_t qpn = 0;  // REQ, REP
  std::uint32_t psn = 0;
  int src_dev = 0;  // from == kNone: the device that answers (a REJ for nobody), and its port
  std::uint8_t src_port = 1;
};

// `data` padded with zeros to `size` bytes.
std::vector<std::uint8_t> padded(std::span<const std::uint8_t> data, std::size_t size);

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
  std::uint8_t ack_timeout = kLocalAckTimeout;  // CmId::set_ack_timeout
  ConnParam mine;                            // private data not kept
  ConnParam theirs;
  // The message waiting for an answer, sent again at each timeout.
  Wire unanswered;
  // A node of another process of a shared fabric (cm/remote.cpp) stands here for the id it
  // is there: messages to it are handed over. Never alive.
  int remote_slot = -1;
  std::uint64_t remote_token = 0;  // SharedFabric::token_of its process
  std::uint32_t remote_node = kNone;
  bool remote() const noexcept { return remote_slot >= 0; }
  int retries_left = 0;
  std::uint64_t timer_gen = 0;
};

struct CmFabric {
  World::Impl& w;
  std::vector<CmNode> nodes;
  std::vector<Wire> wires;  // in flight, by slot
  std::vector<std::uint32_t> free_wires;
  std::uint16_t next_port = kFirstEphemeralPort;
  // Proxies of ids of other processes, by their process's token and their node there.
  struct ProxyKey {
    std::uint64_t token;
    std::uint32_t node;
    bool operator==(const ProxyKey&) const = default;
  };
  struct ProxyHash {
    std::size_t operator()(const ProxyKey& k) const noexcept {
      return std::hash<std::uint64_t>{}(k.token * 0x9e3779b97f4a7c15ull ^ k.node);
    }
  };
  std::unordered_map<ProxyKey, std::uint32_t, ProxyHash> proxies;

  explicit CmFabric(World::Impl& world);

  // Other processes of a shared fabric (remote.cpp).

  // Hands `m` over to the process of its node m.to (a proxy), or, a REQ, to process `slot`
  // that listens on its address; it arrives now.
  void hand_over(const Wire& m, int to_dev, std::uint8_t to_port, int slot);
  // A message another process handed over (a parcel's bytes): it arrives now.
  void take_parcel(const std::uint8_t* bytes, std::size_t size);
  // Message `m` arrives now at `port` of `dev` (a parcel taken, or a DREQ of a gone process).
  void deliver_now(Wire m, std::uint16_t dev, std::uint16_t port);
  // The process of fabric slot `slot` is gone: its connections here are disconnected, as its
  // kernel's CM does when it destroys its ids.
  void peer_gone(int slot);
  // A REQ for a port this process's listener just gave up, on a shared fabric: held (true)
  // and seen again shortly, for up to 250 ms of wall time, in case the program is about to
  // listen on it again; false when it is to be rejected as usual.
  bool hold_for_next_listener(Wire& m, int dev, std::uint8_t port);

  // Messages and the state machine (messages.cpp).

  // Does a cm_drop rule lose `m`, sent from device `dev`? (FaultInjector::cm_message)
  bool dropped(const Wire& m, int dev);

  CmNode& node(std::uint32_t n) { return nodes[n]; }

  void report(std::uint32_t n, CmChannelCore::Pending ev);
  void report(std::uint32_t n, CmEventType type, int status = 0);

  // Sends `m` from node m.from (kNone: from the device, which refuses a REQ) to port `to_port`
  // of device `to_dev`.
  void send(Wire m, int to_dev, std::uint8_t to_port);
  // Sends `m` to its node m.to (none: a reply to a peer this side never heard from).
  void send_to_node(Wire m);
  // Tells observers about `m` (verbsim/sim/observe.hpp, CmRecord).
  void observe(const Wire& m, int to_dev, std::uint8_t to_port, PacketFate fate);
  // Sends `m`, which expects an answer: again after each timeout until kRetries ran out.
  void send_expecting_answer(std::uint32_t n, Wire m, int to_dev, std::uint8_t to_port);
  void arm(std::uint32_t n, Code code, std::uint64_t after_ns);
  void answered(std::uint32_t n) { ++node(n).timer_gen; }
  // The disconnect of node `n` is complete (DREP sent or taken, or the DREQ unanswered).
  void enter_timewait(std::uint32_t n);

  // The QP connect or accept gave node `n`, if it still exists.
  QueuePair* qp_of(std::uint32_t n) const noexcept;

  // The client's side of the server's REP: RTR, RTS and the RTU, then ESTABLISHED (or, if the
  // QP refuses, a REJ and CONNECT_ERROR). librdmacm does this when get_event takes the REP;
  // the simulator does it when the REP arrives, microseconds earlier, so that virtual time
  // moved on by a program polling other things first cannot time the server out.
  void establish(std::uint32_t n, std::vector<std::uint8_t> rep_data);

  // The id's QP to ERR, as librdmacm does on a failed connection and before a DREQ.
  void to_error(std::uint32_t n);

  Wire reply(std::uint32_t n, Msg kind);
  // A REJ (a SIDR REP with a failure status on a UDP id) with `data` padded to its size.
  void send_rej(std::uint32_t n, int reason, std::span<const std::uint8_t> data = {});

  void on_timer(const Event& e);
  void on_message(const Event& e);
  void on_req(Wire m, int dev, std::uint8_t port);

  // The program's id goes: what the kernel's CM does for an id destroyed in each state.
  void destroyed(std::uint32_t n);

  // The path's flow label (cm_flow_label); the server has the client's port from the request.
  static std::uint32_t flow_label(const CmNode& nd);
  ConnectOptions options(const CmNode& nd) const;

  // Ids, addresses and the QP steps of connect and accept (ids.cpp).

  std::uint32_t add_node(std::shared_ptr<CmChannelCore> ch);

  // The device and port whose GID is `a`'s address, or {-1, 0}.
  std::pair<int, std::uint8_t> owner(const SockAddr& a) const;
  // On the simulated network (10.0.0.0/16, or an IPv6 link-local address) but nobody's.
  static bool on_network(const SockAddr& a);
  // 0, or the errno of node `except` binding `ip` and `port` while another id of its port space
  // has the port: EADDRINUSE for the same address, EADDRNOTAVAIL when either is any address
  // (the kernel's cma_check_port).
  int port_conflict(std::uint16_t port, const SockAddr& ip, std::uint32_t except) const;
  std::uint16_t ephemeral_port(const SockAddr& ip, std::uint32_t except);

  // rdma_migrate_id: node `n`'s events (the pending ones, and a listener's requests not yet
  // taken) go to channel `to`.
  void migrate(std::uint32_t n, const std::shared_ptr<CmChannelCore>& to);

  static Access access(const ConnParam& mine);
  void check_qp(const char* verb, const CmNode& nd, QueuePair& qp) const;
  // The address vector from node `n`'s port to its peer's address (a UDP id's ESTABLISHED).
  AhAttr ah_to_peer(std::uint32_t n) const;
  // A UD QP of a UDP id to RTS with rdma_cm's Q_Key (librdmacm does it in rdma_create_qp).
  // A UD QP already in RTS (librdmacm's rdma_create_qp takes it there) is left as it is.
  void ud_ready(const CmNode& nd, QueuePair& qp) const;
  std::uint32_t initial_psn();
};

}  // namespace verbsim::sim
