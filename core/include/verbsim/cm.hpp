// The RDMA connection manager (librdmacm's rdma_cm): RC connections (and UD services, see
// PortSpace) set up by IP address and port instead of an out-of-band exchange of GIDs, QP
// numbers and PSNs.
//
//   active side                              passive side
//   id = ch->create_id()                     id = ch->create_id()
//   id->resolve_addr(server)  ADDR_RESOLVED  id->bind_addr(SockAddr::parse("0.0.0.0:7471"))
//   id->resolve_route()      ROUTE_RESOLVED  id->listen()
//   open id->device_name(), make a QP        CONNECT_REQUEST: event.new_id is the connection
//   id->connect(*qp, param)                  open event.new_id->device_name(), make a QP
//                                            new_id->accept(*qp, param)   (or reject())
//   ESTABLISHED (the server's private data)  ESTABLISHED
//   id->disconnect()                         DISCONNECTED; then disconnect() answers it
//   DISCONNECTED
//
// The QP is the program's own, created from a Context on the id's device, in RESET or INIT (to
// post receives before the connection exists): connect and accept take it through INIT (again),
// RTR and RTS with what the two sides negotiated, as librdmacm does with rdma_create_qp's QPs.
// Destroy the id before that QP (the simulator tolerates the other order; libibverbs does not).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "verbsim/completion_channel.hpp"
#include "verbsim/types.hpp"

namespace verbsim {

class CmEventChannel;
class QueuePair;

// An IPv4 or IPv6 address and a port: what rdma_cm takes as a sockaddr_in or sockaddr_in6.
// IPv4 addresses are held IPv4-mapped (::ffff:a.b.c.d), which is also their RoCE v2 GID.
struct SockAddr {
  std::array<std::uint8_t, 16> ip{};
  std::uint16_t port = 0;  // host byte order

  // "10.0.0.1:7471", "10.0.0.1" (port 0), "0.0.0.0:7471" (any), "[fe80::1]:7471", "::1".
  // Throws std::invalid_argument naming the text.
  static SockAddr parse(std::string_view text);
  static SockAddr ipv4(std::uint8_t a, std::uint8_t b, std::uint8_t c, std::uint8_t d,
                       std::uint16_t port = 0) noexcept;
  bool is_ipv4() const noexcept;
  bool is_any() const noexcept;  // 0.0.0.0 or ::
  // The RoCE v2 GID of the address.
  Gid gid() const noexcept;
  std::string to_string() const;  // as parse() takes it
  friend bool operator==(const SockAddr&, const SockAddr&) = default;
};

// Values equal librdmacm's enum rdma_cm_event_type. The simulator and the ibverbs backend
// report the ones marked *; a CONNECT_RESPONSE is answered inside get_event (the QP goes to
// RTS and the connection is established) and reported as ESTABLISHED.
enum class CmEventType : int {
  addr_resolved = 0,     // *
  addr_error = 1,        // * status: -ETIMEDOUT, -EHOSTUNREACH, ...
  route_resolved = 2,    // *
  route_error = 3,       // *
  connect_request = 4,   // * event.new_id is the connection's id
  connect_response = 5,  // * only for connect_own_qp(): establish() answers it
  connect_error = 6,     // *
  unreachable = 7,       // * status: -ETIMEDOUT (the peer never answered); UDP: kCmSidr*
  rejected = 8,          // * status: the IB CM reason, 8 (no listener), 28 (rejected by the peer)
  established = 9,       // *
  disconnected = 10,     // * status: 0, or -ETIMEDOUT when the peer never answered the DREQ
  device_removal = 11,
  multicast_join = 12,
  multicast_error = 13,
  addr_change = 14,
  timewait_exit = 15,  // * 2 s after this side's disconnect completed: the QP may be reused
};

// "RDMA_CM_EVENT_ESTABLISHED": librdmacm's rdma_event_str (null-terminated).
constexpr std::string_view to_string(CmEventType type) noexcept {
  constexpr std::string_view names[] = {
      "RDMA_CM_EVENT_ADDR_RESOLVED",   "RDMA_CM_EVENT_ADDR_ERROR",
      "RDMA_CM_EVENT_ROUTE_RESOLVED",  "RDMA_CM_EVENT_ROUTE_ERROR",
      "RDMA_CM_EVENT_CONNECT_REQUEST", "RDMA_CM_EVENT_CONNECT_RESPONSE",
      "RDMA_CM_EVENT_CONNECT_ERROR",   "RDMA_CM_EVENT_UNREACHABLE",
      "RDMA_CM_EVENT_REJECTED",        "RDMA_CM_EVENT_ESTABLISHED",
      "RDMA_CM_EVENT_DISCONNECTED",    "RDMA_CM_EVENT_DEVICE_REMOVAL",
      "RDMA_CM_EVENT_MULTICAST_JOIN",  "RDMA_CM_EVENT_MULTICAST_ERROR",
      "RDMA_CM_EVENT_ADDR_CHANGE",     "RDMA_CM_EVENT_TIMEWAIT_EXIT"};
  const auto i = static_cast<std::size_t>(type);
  return i < std::size(names) ? names[i] : "RDMA_CM_EVENT_UNKNOWN";
}

// CM rejection reasons seen in CmEventType::rejected's status (IB CM REJ reasons).
inline constexpr int kCmRejectNoListener = 8;   // IB_CM_REJ_INVALID_SERVICE_ID
inline constexpr int kCmRejectByConsumer = 28;  // IB_CM_REJ_CONSUMER_DEFINED

// Private data sizes of the IB CM messages a RoCE connection carries, as rdma_cm gives them to
// the program (the REQ's 92 bytes less rdma_cm's own 36-byte header). What a program sends is
// padded with zeros to these sizes; longer is EINVAL.
inline constexpr std::size_t kCmConnectDataMax = 56;  // connect(): the REQ
inline constexpr std::size_t kCmAcceptDataMax = 196;  // accept(): the REP
inline constexpr std::size_t kCmRejectDataMax = 148;  // reject(): the REJ

// Port spaces (rdma_port_space): RDMA_PS_TCP connects RC QPs; RDMA_PS_UDP resolves a UD
// service (SIDR): the client's connect() is answered with the server's QP number and Q_Key and
// an address vector to reach it (ESTABLISHED), and no connection state is kept. The two spaces
// have separate port numbers.
enum class PortSpace : std::uint16_t { tcp = 0x0106, udp = 0x0111 };

// The Q_Key rdma_cm gives UD QPs of RDMA_PS_UDP (RDMA_UDP_QKEY).
inline constexpr std::uint32_t kCmUdpQkey = 0x01234567;
// Private data of a UDP connect (the SIDR REQ) and of its accept or reject (the SIDR REP).
inline constexpr std::size_t kCmUdConnectDataMax = 180;
inline constexpr std::size_t kCmUdAcceptDataMax = 136;
// UNREACHABLE's status for a UDP connect the server refused: no listener, or rejected (or its
// request id destroyed unanswered). IB SIDR REP statuses.
inline constexpr int kCmSidrNoListener = 1;  // IB_SIDR_UNSUPPORTED
inline constexpr int kCmSidrRejected = 2;    // IB_SIDR_REJECT

// The flow label rdma_cm gives a RoCE v2 path between a client's port and a server's (the
// kernel's cma_get_roce_udp_flow_label, for an address without one of its own); both sides'
// address vectors carry it.
constexpr std::uint32_t cm_flow_label(std::uint16_t client_port,
                                      std::uint16_t server_port) noexcept {
  return (std::uint32_t{client_port} * 31 + server_port) & 0xfffff;
}

// rdma_conn_param without the QP fields (they come from the QP given to connect / accept).
struct ConnParam {
  std::vector<std::uint8_t> private_data;
  std::uint8_t responder_resources = 1;  // RDMA READs / atomics this side serves at once
  std::uint8_t initiator_depth = 1;      // RDMA READs / atomics this side has in flight
  std::uint8_t retry_count = 7;          // the peer's transport retries (connect only)
  std::uint8_t rnr_retry_count = 7;      // the peer's RNR retries, 7 = forever
};

class CmId;

// One event, owned by the program once get_event returned it (no rdma_ack_cm_event to call).
struct CmEvent {
  CmEventType type = CmEventType::addr_resolved;
  int status = 0;
  CmId* id = nullptr;         // the id the event is about; connect_request: new_id.get()
  CmId* listen_id = nullptr;  // connect_request: the listening id
  // connect_request only: the new connection's id, now the program's (accept or reject it;
  // destroying it without either rejects the connection).
  std::unique_ptr<CmId> new_id;
  // connect_request (56 bytes), established or connect_response on the active side (196),
  // rejected (148): the peer's private data, zero-padded to the message's size.
  std::vector<std::uint8_t> private_data;
  // connect_request: the request's parameters as rdma_cm gives them, from this side's point of
  // view: responder_resources is the peer's initiator depth and initiator_depth its responder
  // resources (so that they can be passed to accept() as they are); the retry counts are the
  // peer's, for this side's QP.
  ConnParam param;
  std::uint32_t peer_qp_num = 0;  // connect_request, established: the peer's QP (0 for a UDP
                                  // request)
  // established on a UDP id: the server's Q_Key and how to reach its QP (AddressHandle).
  std::uint32_t qkey = 0;
  AhAttr ah_attr;
};

// An rdma_cm_id. Control-path calls throw VerbError naming the rdma_* verb: EINVAL for a call
// the id's state does not allow or private data too long, EADDRINUSE for an address and port
// already bound (EADDRNOTAVAIL when either bind is to any address, as the kernel has it, and for
// a local address no device has), ENETUNREACH for an address no route leads to. Every id belongs to
// the CmEventChannel it was created on (or its listener's).
class CmId {
 public:
  CmId() = default;
  CmId(const CmId&) = delete;
  CmId& operator=(const CmId&) = delete;
  // rdma_destroy_id. Destroying a connection's id disconnects it (or rejects a request not
  // yet accepted); its queued events are dropped.
  virtual ~CmId() = default;

  // rdma_bind_addr: a local address (or any address) and port; port 0 picks a free one.
  virtual void bind_addr(const SockAddr& addr) = 0;
  // rdma_listen: connection requests to the bound address come as CONNECT_REQUEST events. (Over
  // IB and RoCE rdma_cm does not limit pending requests by the backlog; neither does the
  // simulator.)
  virtual void listen(int backlog = 16) = 0;
  // rdma_resolve_addr: finds the local device and port that reach `dst`: ADDR_RESOLVED or
  // ADDR_ERROR after at most `timeout_ms`.
  virtual void resolve_addr(const SockAddr& dst, int timeout_ms = 2000) = 0;
  // rdma_resolve_route: ROUTE_RESOLVED or ROUTE_ERROR.
  virtual void resolve_route(int timeout_ms = 2000) = 0;
  // rdma_connect, after ROUTE_RESOLVED: `qp` (RC, in RESET or INIT, on device_name()) goes to INIT
  // and the request is sent; on the server's answer it goes to RTR and RTS and ESTABLISHED is
  // reported (REJECTED, UNREACHABLE or CONNECT_ERROR take it to ERR instead). On a UDP id `qp`
  // is UD and goes to RTS at once (Q_Key kCmUdpQkey; a QP already in RTS is left as it is, as
  // librdmacm leaves rdma_create_qp's); the answer is ESTABLISHED with the
  // server's QP, Q_Key and address, or UNREACHABLE.
  virtual void connect(QueuePair& qp, const ConnParam& param = {}) = 0;
  // rdma_accept, on the id of a CONNECT_REQUEST: `qp` (RC, in RESET or INIT) goes to RTS and the
  // reply is sent; ESTABLISHED follows when the client confirms. On a UDP id `qp` is UD (it goes
  // to RTS, Q_Key kCmUdpQkey, unless it is there already) and nothing follows. Private data too
  // long for the reply is EINVAL and, as with librdmacm, ends the request: the client gets
  // REJECTED (28; UDP: UNREACHABLE, kCmSidrRejected) and an RC `qp` goes to ERR (unless it is
  // in RESET, which cannot).
  virtual void accept(QueuePair& qp, const ConnParam& param = {}) = 0;
  // rdma_reject, on the id of a CONNECT_REQUEST: the client gets REJECTED, status 28 (UDP:
  // UNREACHABLE, status kCmSidrRejected).
  virtual void reject(std::span<const std::uint8_t> private_data = {}) = 0;
  // rdma_disconnect: this side's QP goes to ERR (its outstanding WRs flush) and the peer gets
  // DISCONNECTED; when the peer disconnects in turn this side gets DISCONNECTED. On a UDP id
  // only the QP goes to ERR.
  virtual void disconnect() = 0;

  // Connections whose QP the program moves itself (librdmacm's rdma_connect and rdma_accept on
  // an id without rdma_create_qp's QP, rdma_init_qp_attr, rdma_establish). The request or the
  // reply names `qp_num`, and nothing here touches that QP (disconnect and rejections neither):
  // the program takes it to INIT, RTR and RTS with init_qp_attr(). Active side: the server's
  // reply comes as CONNECT_RESPONSE (its private data, QP number and parameters); take the QP
  // to RTR and RTS, then establish(): the server gets ESTABLISHED, this side no event. Passive
  // side: take the QP to RTS before accept_own_qp(); ESTABLISHED follows as with accept().
  // Backends without them throw EOPNOTSUPP.
  virtual void connect_own_qp(std::uint32_t qp_num, const ConnParam& param = {});
  virtual void accept_own_qp(std::uint32_t qp_num, const ConnParam& param = {});
  // rdma_init_qp_attr: fills `attr` with what takes this connection's QP to `state` (INIT,
  // RTR, RTS) and returns the mask to modify() it with. INIT as soon as the id has a device
  // (remote access rights once connect or a request says whether RDMA READs are served); RTR
  // and RTS once the peer is known (its request, or CONNECT_RESPONSE); EINVAL before.
  virtual QpAttrMask init_qp_attr(QpState state, QpAttr& attr) const;
  // rdma_establish, after CONNECT_RESPONSE, with the QP in RTS: the RTU that completes the
  // connection. EINVAL otherwise (on rxe a second call has also been seen to give ENOENT).
  virtual void establish();

  // rdma_set_option(RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT): the local ACK timeout
  // (4.096 us * 2^timeout) the connection's QP gets at RTS (and in init_qp_attr), instead of
  // the one the CM derives from the path (19 over rxe). EINVAL on a UDP id or above 31;
  // backends without it throw EOPNOTSUPP.
  virtual void set_ack_timeout(std::uint8_t timeout);

  // rdma_migrate_id: this id's events, those pending included (and a listener's requests not
  // yet taken), come to `to` from now on. EINVAL for another backend's channel.
  virtual void migrate(CmEventChannel& to);

  // The device and port the id is bound to (after bind_addr to a local address, resolve_addr
  // or a connection request); empty and 0 before.
  virtual std::string device_name() const = 0;
  virtual std::uint8_t port_num() const noexcept = 0;
  virtual SockAddr local_addr() const = 0;
  virtual SockAddr peer_addr() const = 0;
  // The QP given to connect or accept, or nullptr.
  virtual QueuePair* qp() const noexcept = 0;

  // The program's own pointer (rdma_cm_id's context).
  void* user_data = nullptr;
};

// rdma_event_channel: where the events of its ids arrive.
class CmEventChannel {
 public:
  CmEventChannel() = default;
  CmEventChannel(const CmEventChannel&) = delete;
  CmEventChannel& operator=(const CmEventChannel&) = delete;
  // rdma_destroy_event_channel. Requests not yet taken are rejected; ids still alive keep
  // what they need of the channel until they go (their later events are lost).
  virtual ~CmEventChannel() = default;

  // rdma_create_id: reliable connections (RC QPs), or UD services (UD QPs) with PortSpace::udp.
  virtual std::unique_ptr<CmId> create_id(PortSpace space = PortSpace::tcp) = 0;
  // rdma_get_cm_event (and rdma_ack_cm_event once copied). Errors: EAGAIN with
  // Wait::nonblocking and nothing pending; on the simulator, EDEADLK when blocking could never
  // end.
  [[nodiscard]] virtual std::error_code get_event(CmEvent& event, Wait wait = Wait::blocking) = 0;
  // Polls readable while an event is pending.
  virtual int fd() const noexcept = 0;
};

}  // namespace verbsim
