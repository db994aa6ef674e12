// The connection manager over librdmacm: CmEventChannel over rdma_event_channel, CmId over an
// rdma_cm_id of RDMA_PS_TCP.
//
// The ids are created without rdma_create_qp (id->qp stays NULL): the QP is the program's own
// verbsim QueuePair, and this file does what librdmacm does for an id's QP: INIT before the request
// is sent, RTR and RTS from rdma_init_qp_attr when the reply comes (librdmacm reports a
// CONNECT_RESPONSE for an id without a QP: it is answered here with rdma_establish and reported
// as ESTABLISHED), ERR on REJECTED, UNREACHABLE, CONNECT_ERROR and before rdma_disconnect.
// connect_own_qp and accept_own_qp leave all that to the program (init_qp_attr, establish).
#include "verbsim/cm.hpp"

#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <string>

#include "objects.hpp"
#include "verbsim/abi/sockaddr.hpp"
#include "verbsim/abi/translate.hpp"
#include "verbsim/ibverbs/backend.hpp"

namespace verbsim::ibverbs {

namespace {

// errno after a librdmacm call returned -1 (or NULL); EIO if it left errno at 0.
int cm_errno() noexcept { return errno != 0 ? errno : EIO; }

// The ibv_qp_attr_mask bits a modify may carry. rdma_init_qp_attr can hand back bits 21 to 24,
// which the kernel uses internally for RoCE and ibv_modify_qp refuses on IB (librdmacm masks them
// off there); on RoCE the kernel resolves the address itself, so they are dropped always.
constexpr int kModifyMask = (IBV_QP_DEST_QPN << 1) - 1;

// "RTS": the core's name of a QP state.
std::string state_name(ibv_qp_state s) { return std::string(to_string(abi::from_ibv(s))); }

// A failed step of a QP transition: 0, or the errno and a description of what failed.
struct StepError {
  int err = 0;
  std::string what;
};

// Moves `qp` to `state` with the attributes rdma_cm has for `id` (rdma_init_qp_attr). `rd_atomic`
// >= 0 overrides max_dest_rd_atomic (RTR) or max_rd_atomic (RTS), as rdma_accept does with its
// conn_param.
StepError modify_by_cm(rdma_cm_id* id, ibv_qp* qp, ibv_qp_state state, int rd_atomic = -1) {
  ibv_qp_attr attr{};
  int mask = 0;
  attr.qp_state = state;
  errno = 0;
  if (::rdma_init_qp_attr(id, &attr, &mask) != 0) {
    return {cm_errno(), std::string("rdma_init_qp_attr(") + state_name(state) + ")"};
  }
  mask &= kModifyMask;
  if (rd_atomic >= 0 && state == IBV_QPS_RTR)
    attr.max_dest_rd_atomic = static_cast<uint8_t>(rd_atomic);
  if (rd_atomic >= 0 && state == IBV_QPS_RTS) attr.max_rd_atomic = static_cast<uint8_t>(rd_atomic);
  if (const int ret = ::ibv_modify_qp(qp, &attr, mask); ret != 0) {
    char qpn[16];
    std::snprintf(qpn, sizeof qpn, "0x%x", qp->qp_num);
    return {returned_errno(ret), "ibv_modify_qp(qp " + std::string(qpn) + " " +
                                     state_name(qp->state) + "->" + state_name(state) + ")"};
  }
  return {};
}

// INIT, RTR, RTS. On the active side the QP is in INIT already, from before the request was
// sent, when rdma_cm gave it no remote access; INIT again gives it what the connection grants
// (librdmacm's ucma_modify_qp_rtr does the same).
StepError to_rts(rdma_cm_id* id, ibv_qp* qp, int responder_resources, int initiator_depth) {
  if (auto r = modify_by_cm(id, qp, IBV_QPS_INIT); r.err != 0) return r;
  if (auto r = modify_by_cm(id, qp, IBV_QPS_RTR, responder_resources); r.err != 0) return r;
  return modify_by_cm(id, qp, IBV_QPS_RTS, initiator_depth);
}

// A UD QP of a UDP id to RTS: INIT with rdma_cm's attributes (its Q_Key), then RTR and RTS with
// send PSN 0, as librdmacm's rdma_create_qp does. A QP already in RTS is left as it is.
StepError ud_to_rts(rdma_cm_id* id, ibv_qp* qp) {
  ibv_qp_attr now{};
  ibv_qp_init_attr init{};
  if (::ibv_query_qp(qp, &now, IBV_QP_STATE, &init) == 0 && now.qp_state == IBV_QPS_RTS) return {};
  if (auto r = modify_by_cm(id, qp, IBV_QPS_INIT); r.err != 0) return r;
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTR;
  if (const int ret = ::ibv_modify_qp(qp, &attr, IBV_QP_STATE); ret != 0) {
    return {returned_errno(ret), "ibv_modify_qp(UD INIT->RTR)"};
  }
  attr.qp_state = IBV_QPS_RTS;
  attr.sq_psn = 0;
  if (const int ret = ::ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN); ret != 0) {
    return {returned_errno(ret), "ibv_modify_qp(UD RTR->RTS)"};
  }
  return {};
}

int set_state(ibv_qp* qp, ibv_qp_state state) noexcept {
  ibv_qp_attr attr{};
  attr.qp_state = state;
  return returned_errno(::ibv_modify_qp(qp, &attr, IBV_QP_STATE));
}

rdma_conn_param to_rdma(const ConnParam& p, std::uint32_t qp_num) noexcept {
  rdma_conn_param out{};
  out.private_data = p.private_data.empty() ? nullptr : p.private_data.data();
  out.private_data_len = static_cast<uint8_t>(p.private_data.size());
  out.responder_resources = p.responder_resources;
  out.initiator_depth = p.initiator_depth;
  out.retry_count = p.retry_count;
  out.rnr_retry_count = p.rnr_retry_count;
  out.qp_num = qp_num;
  return out;
}

rdma_conn_param to_rdma(const ConnParam& p, const ibv_qp* qp) noexcept {
  rdma_conn_param out = to_rdma(p, qp->qp_num);
  out.srq = qp->srq != nullptr ? 1 : 0;
  return out;
}

// EINVAL naming `verb` for more private data than its message carries (librdmacm's own
// check; verbsim makes it before anything is sent).
void check_private_data(const char* verb, std::size_t size, std::size_t max) {
  if (size > max) {
    throw_verb_error(
        verb, EINVAL,
        std::to_string(size) + " bytes of private data, at most " + std::to_string(max));
  }
}

// A QP step of connect or accept failed: the QP back to RESET, as before the call, and the error.
[[noreturn]] void undo_step(const char* verb, ibv_qp* qp, const StepError& r) {
  set_state(qp, IBV_QPS_RESET);
  throw_verb_error(verb, r.err, r.what);
}

// An rdma_event_channel, destroyed when its handle and the last of its ids are gone: librdmacm
// needs the channel while it destroys an id, and a program may drop the handle first.
struct ChannelHolder {
  rdma_event_channel* channel = nullptr;
  ~ChannelHolder() {
    if (channel != nullptr) ::rdma_destroy_event_channel(channel);
  }
};

}  // namespace

class IbvCmId final : public CmId {
 public:
  // Adopts `id` (destroyed with this wrapper), of the channel `channel`; points its context here.
  IbvCmId(rdma_cm_id* id, std::shared_ptr<ChannelHolder> channel) noexcept
      : id_(id), channel_(std::move(channel)) {
    id_->context = this;
  }
  ~IbvCmId() override {
    if (::rdma_destroy_id(id_) != 0) warn_leak("rdma_destroy_id", cm_errno(), "rdma_cm id");
  }

  void bind_addr(const SockAddr& addr) override {
    sockaddr_storage sa = abi::to_sockaddr(addr);
    errno = 0;
    if (::rdma_bind_addr(id_, reinterpret_cast<sockaddr*>(&sa)) != 0) {
      throw_verb_error("rdma_bind_addr", cm_errno(), addr.to_string());
    }
  }

  void listen(int backlog) override {
    errno = 0;
    if (::rdma_listen(id_, backlog) != 0) throw_verb_error("rdma_listen", cm_errno());
  }

  void resolve_addr(const SockAddr& dst, int timeout_ms) override {
    sockaddr_storage sa = abi::to_sockaddr(dst);
    errno = 0;
    if (::rdma_resolve_addr(id_, nullptr, reinterpret_cast<sockaddr*>(&sa), timeout_ms) != 0) {
      throw_verb_error("rdma_resolve_addr", cm_errno(), dst.to_string());
    }
  }

  void resolve_route(int timeout_ms) override {
    errno = 0;
    if (::rdma_resolve_route(id_, timeout_ms) != 0)
      throw_verb_error("rdma_resolve_route", cm_errno());
  }

  void connect(QueuePair& qp, const ConnParam& param) override {
    static constexpr const char* verb = "rdma_connect";
    check_private_data(verb, param.private_data.size(),
                       ud() ? kCmUdConnectDataMax : kCmConnectDataMax);
    ibv_qp* q = usable_qp(verb, qp, "the address is not resolved");
    if (auto r = ud() ? ud_to_rts(id_, q) : modify_by_cm(id_, q, IBV_QPS_INIT); r.err != 0) {
      undo_step(verb, q, r);
    }
    rdma_conn_param p = to_rdma(param, q);
    errno = 0;
    if (::rdma_connect(id_, &p) != 0) {
      const int err = cm_errno();
      set_state(q, IBV_QPS_RESET);  // as before the call
      throw_verb_error(verb, err,
                       err == EINVAL ? "the route is not resolved, or a parameter "
                                       "exceeds the device's limits"
                                     : "");
    }
    qp_ = &qp;
    native_qp_ = q;
  }

  void accept(QueuePair& qp, const ConnParam& param) override {
    static constexpr const char* verb = "rdma_accept";
    ibv_qp* q = usable_qp(verb, qp, "not the id of a connection request");
    if (const std::size_t max = ud() ? kCmUdAcceptDataMax : kCmAcceptDataMax;
        param.private_data.size() > max) {
      // What the kernel's rdma_accept does when the reply cannot carry it (and a length past
      // rdma_conn_param's 255 could not even be given): the request rejected, an RC QP to ERR
      // (unless in RESET, which cannot go there).
      if (!ud()) set_state(q, IBV_QPS_ERR);
      ::rdma_reject(id_, nullptr, 0);
      check_private_data(verb, param.private_data.size(), max);
    }
    if (auto r = ud() ? ud_to_rts(id_, q)
                      : to_rts(id_, q, param.responder_resources, param.initiator_depth);
        r.err != 0) {
      undo_step(verb, q, r);
    }
    rdma_conn_param p = to_rdma(param, q);
    errno = 0;
    if (::rdma_accept(id_, &p) != 0) {
      const int err = cm_errno();
      set_state(q, IBV_QPS_RESET);
      throw_verb_error(verb, err);
    }
    qp_ = &qp;
    native_qp_ = q;
  }

  void reject(std::span<const std::uint8_t> private_data) override {
    check_private_data("rdma_reject", private_data.size(),
                       ud() ? kCmUdAcceptDataMax : kCmRejectDataMax);
    errno = 0;
    if (::rdma_reject(id_, private_data.empty() ? nullptr : private_data.data(),
                      static_cast<uint8_t>(private_data.size())) != 0) {
      throw_verb_error("rdma_reject", cm_errno());
    }
  }

  // The program's own QP: librdmacm with conn_param.qp_num and no QP on the id.
  void connect_own_qp(std::uint32_t qp_num, const ConnParam& param) override {
    static constexpr const char* verb = "rdma_connect";
    check_private_data(verb, param.private_data.size(),
                       ud() ? kCmUdConnectDataMax : kCmConnectDataMax);
    if (qp_ != nullptr) throw_verb_error(verb, EINVAL, "the id already has a QP");
    rdma_conn_param p = to_rdma(param, qp_num);
    errno = 0;
    if (::rdma_connect(id_, &p) != 0) throw_verb_error(verb, cm_errno());
    own_qp_ = true;
  }

  void accept_own_qp(std::uint32_t qp_num, const ConnParam& param) override {
    static constexpr const char* verb = "rdma_accept";
    if (qp_ != nullptr) throw_verb_error(verb, EINVAL, "the id already has a QP");
    if (const std::size_t max = ud() ? kCmUdAcceptDataMax : kCmAcceptDataMax;
        param.private_data.size() > max) {
      ::rdma_reject(id_, nullptr, 0);  // as the kernel's rdma_accept does (see accept)
      check_private_data(verb, param.private_data.size(), max);
    }
    rdma_conn_param p = to_rdma(param, qp_num);
    errno = 0;
    if (::rdma_accept(id_, &p) != 0) throw_verb_error(verb, cm_errno());
    own_qp_ = true;
  }

  QpAttrMask init_qp_attr(QpState state, QpAttr& attr) const override {
    ibv_qp_attr a{};
    a.qp_state = static_cast<ibv_qp_state>(state);
    int mask = 0;
    errno = 0;
    if (::rdma_init_qp_attr(id_, &a, &mask) != 0) {
      throw_verb_error("rdma_init_qp_attr", cm_errno());
    }
    attr = abi::from_ibv(a);
    return static_cast<QpAttrMask>(mask & kModifyMask);
  }

  void set_ack_timeout(std::uint8_t timeout) override {
    errno = 0;
    if (::rdma_set_option(id_, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &timeout,
                          sizeof timeout) != 0) {
      throw_verb_error("rdma_set_option", cm_errno(), "RDMA_OPTION_ID_ACK_TIMEOUT");
    }
  }

  void establish() override {
    errno = 0;
    if (::rdma_establish(id_) != 0) throw_verb_error("rdma_establish", cm_errno());
  }

  void migrate(CmEventChannel& to) override;

  void disconnect() override {
    if (native_qp_ != nullptr) {
      if (const int err = set_state(native_qp_, IBV_QPS_ERR); err != 0) {
        throw_verb_error("rdma_disconnect", err, "ibv_modify_qp(ERR)");
      }
    }
    errno = 0;
    if (::rdma_disconnect(id_) != 0) throw_verb_error("rdma_disconnect", cm_errno());
  }

  std::string device_name() const override {
    if (id_->verbs == nullptr) return {};
    const char* name = ::ibv_get_device_name(id_->verbs->device);
    return name != nullptr ? name : "";
  }
  std::uint8_t port_num() const noexcept override { return id_->port_num; }
  SockAddr local_addr() const override { return abi::from_sockaddr(::rdma_get_local_addr(id_)); }
  SockAddr peer_addr() const override { return abi::from_sockaddr(::rdma_get_peer_addr(id_)); }
  QueuePair* qp() const noexcept override { return qp_; }

  rdma_cm_id* native() const noexcept { return id_; }
  bool ud() const noexcept { return id_->ps == RDMA_PS_UDP; }

  // Turns one librdmacm event about this id into `out`, answering what librdmacm leaves to the
  // owner of a QP. Returns false for an event the program does not see.
  bool translate(const rdma_cm_event& ev, CmEvent& out);

 private:
  // The native QP of `qp` if this id can take it: EINVAL for a QP of another backend, not RC, on
  // another device than the id's, or when the id already has one.
  ibv_qp* usable_qp(const char* verb, QueuePair& qp, const char* no_device) const {
    ibv_qp* q = ibverbs::native(qp);
    if (q == nullptr) throw_verb_error(verb, EINVAL, "the QP is not an ibverbs backend QP");
    if (q->qp_type != (ud() ? IBV_QPT_UD : IBV_QPT_RC)) {
      throw_verb_error(verb, EINVAL, ud() ? "the QP is not UD (a UDP id)" : "the QP is not RC");
    }
    if (qp_ != nullptr) throw_verb_error(verb, EINVAL, "the id already has a QP");
    const std::string id_dev = device_name();
    if (id_dev.empty()) throw_verb_error(verb, EINVAL, no_device);
    const char* qp_dev = ::ibv_get_device_name(q->context->device);
    if (qp_dev == nullptr || id_dev != qp_dev) {
      throw_verb_error(verb, EINVAL,
                       "the QP is on " + std::string(qp_dev != nullptr ? qp_dev : "?") +
                           ", the id on " + id_dev);
    }
    return q;
  }

  // The reply to our request came: RTR, RTS, then the RTU (rdma_establish). On failure the QP goes
  // to ERR and the connection is rejected. Returns 0 or errno.
  int finish_connect() noexcept {
    if (native_qp_ == nullptr) return EINVAL;
    if (auto r = to_rts(id_, native_qp_, -1, -1); r.err != 0) {
      set_state(native_qp_, IBV_QPS_ERR);
      ::rdma_reject(id_, nullptr, 0);
      return r.err;
    }
    errno = 0;
    if (::rdma_establish(id_) != 0) {
      const int err = cm_errno();
      set_state(native_qp_, IBV_QPS_ERR);
      return err;
    }
    return 0;
  }

  // The peer's QP and parameters of a request or reply, as rdma_cm gives them: from this
  // side's point of view (cm.hpp).
  void take_peer_param(const rdma_conn_param& conn, CmEvent& e) {
    peer_qp_num_ = conn.qp_num;
    e.peer_qp_num = conn.qp_num;
    e.param.responder_resources = conn.responder_resources;
    e.param.initiator_depth = conn.initiator_depth;
    e.param.retry_count = conn.retry_count;
    e.param.rnr_retry_count = conn.rnr_retry_count;
  }

  rdma_cm_id* id_;
  std::shared_ptr<ChannelHolder> channel_;  // outlives id_
  QueuePair* qp_ = nullptr;
  ibv_qp* native_qp_ = nullptr;
  bool own_qp_ = false;            // connect_own_qp / accept_own_qp: the program moves its QP
  std::uint32_t peer_qp_num_ = 0;  // from the CONNECT_REQUEST or the reply
};

bool IbvCmId::translate(const rdma_cm_event& ev, CmEvent& out) {
  const rdma_conn_param& conn = ev.param.conn;
  CmEvent e;
  e.type = static_cast<CmEventType>(ev.event);
  e.status = ev.status;
  e.id = this;
  if (conn.private_data != nullptr && conn.private_data_len > 0) {
    const auto* data = static_cast<const std::uint8_t*>(conn.private_data);
    e.private_data.assign(data, data + conn.private_data_len);
  }
  switch (ev.event) {
    case RDMA_CM_EVENT_CONNECT_REQUEST:
      if (ud()) {  // param.ud: neither parameters nor the client's QP
        e.param.responder_resources = e.param.initiator_depth = 0;
        e.param.retry_count = e.param.rnr_retry_count = 0;
        break;
      }
      take_peer_param(conn, e);
      break;
    case RDMA_CM_EVENT_CONNECT_RESPONSE:
      if (own_qp_) {  // the program takes its QP to RTS, then calls establish()
        take_peer_param(conn, e);
        break;
      }
      peer_qp_num_ = conn.qp_num;
      if (const int err = finish_connect(); err != 0) {
        e.type = CmEventType::connect_error;
        e.status = -err;
      } else {
        e.type = CmEventType::established;
        e.peer_qp_num = peer_qp_num_;
      }
      break;
    case RDMA_CM_EVENT_ESTABLISHED:
      if (ud()) {  // the SIDR reply: the server's QP, Q_Key and address
        e.peer_qp_num = ev.param.ud.qp_num;
        e.qkey = ev.param.ud.qkey;
        e.ah_attr = abi::from_ibv(ev.param.ud.ah_attr);
      } else {
        e.peer_qp_num = peer_qp_num_;
      }
      break;
    case RDMA_CM_EVENT_REJECTED:
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_CONNECT_ERROR:
      // A connection's QP goes to ERR; a UD QP stays as it is (measured on rxe).
      if (native_qp_ != nullptr && !ud()) set_state(native_qp_, IBV_QPS_ERR);
      break;
    default: break;
  }
  out = std::move(e);
  return true;
}

namespace {

class IbvCmChannel final : public CmEventChannel {
 public:
  IbvCmChannel() : holder_(std::make_shared<ChannelHolder>()) {
    errno = 0;
    channel_ = ::rdma_create_event_channel();
    if (channel_ == nullptr) {
      const int err = cm_errno();
      throw_verb_error("rdma_create_event_channel", err,
                       err == ENODEV || err == ENOENT ? "no /dev/infiniband/rdma_cm: is the "
                                                        "rdma_ucm kernel module loaded?"
                                                      : "");
    }
    holder_->channel = channel_;
    if (const int err = set_nonblocking(channel_->fd); err != 0) {
      throw_verb_error("fcntl", err, "O_NONBLOCK on an rdma_cm event channel fd");
    }
  }

  std::unique_ptr<CmId> create_id(PortSpace space) override {
    rdma_cm_id* id = nullptr;
    errno = 0;
    const rdma_port_space ps = space == PortSpace::udp ? RDMA_PS_UDP : RDMA_PS_TCP;
    if (::rdma_create_id(channel_, &id, nullptr, ps) != 0) {
      throw_verb_error("rdma_create_id", cm_errno());
    }
    return std::make_unique<IbvCmId>(id, holder_);
  }

  std::error_code get_event(CmEvent& event, Wait wait) override {
    for (;;) {
      rdma_cm_event* ev = nullptr;
      errno = 0;
      // The fd is non-blocking: -1 with EAGAIN when no event is pending.
      if (::rdma_get_cm_event(channel_, &ev) != 0) {
        const int err = cm_errno();
        if (err == EINTR) continue;
        if ((err != EAGAIN && err != EWOULDBLOCK) || wait == Wait::nonblocking) {
          return errno_code(err);
        }
        if (const int werr = wait_readable(channel_->fd); werr != 0) return errno_code(werr);
        continue;
      }
      if (take(*ev, event)) return {};
    }
  }

  int fd() const noexcept override { return channel_->fd; }

  rdma_event_channel* native() const noexcept { return channel_; }
  const std::shared_ptr<ChannelHolder>& holder() const noexcept { return holder_; }

 private:
  // Copies `ev` into `out` and acks it. Returns false for an event not reported.
  bool take(rdma_cm_event& ev, CmEvent& out) {
    // Declared before the ack so that it is destroyed after it: rdma_destroy_id waits for the acks
    // of the id's events.
    std::unique_ptr<IbvCmId> fresh;
    struct Ack {
      rdma_cm_event* ev;
      ~Ack() {
        if (ev != nullptr) ::rdma_ack_cm_event(ev);
      }
    } ack{&ev};
    if (ev.event != RDMA_CM_EVENT_CONNECT_REQUEST) {
      return static_cast<IbvCmId*>(ev.id->context)->translate(ev, out);
    }
    // A new id, created by librdmacm with the listener's context: it becomes the program's
    // (destroying it without accept or reject rejects the connection).
    fresh.reset(new (std::nothrow) IbvCmId(ev.id, holder_));
    if (!fresh) {
      ::rdma_ack_cm_event(&ev);
      ack.ev = nullptr;
      ::rdma_destroy_id(ev.id);
      throw std::bad_alloc();
    }
    fresh->translate(ev, out);
    out.listen_id = static_cast<IbvCmId*>(ev.listen_id->context);
    out.new_id = std::move(fresh);
    return true;
  }

  std::shared_ptr<ChannelHolder> holder_;
  rdma_event_channel* channel_ = nullptr;  // holder_'s
};

}  // namespace

void IbvCmId::migrate(CmEventChannel& to) {
  auto* ch = dynamic_cast<IbvCmChannel*>(&to);
  if (ch == nullptr) throw_verb_error("rdma_migrate_id", EINVAL, "not an ibverbs channel");
  errno = 0;
  if (::rdma_migrate_id(id_, ch->native()) != 0) throw_verb_error("rdma_migrate_id", cm_errno());
  channel_ = ch->holder();  // librdmacm needs the new channel to destroy the id
}

std::unique_ptr<CmEventChannel> make_cm_channel() { return std::make_unique<IbvCmChannel>(); }

rdma_event_channel* native(verbsim::CmEventChannel& channel) noexcept {
  auto* c = dynamic_cast<IbvCmChannel*>(&channel);
  return c != nullptr ? c->native() : nullptr;
}

rdma_cm_id* native(verbsim::CmId& id) noexcept {
  auto* i = dynamic_cast<IbvCmId*>(&id);
  return i != nullptr ? i->native() : nullptr;
}

}  // namespace verbsim::ibverbs
