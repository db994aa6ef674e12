// The librdmacm drop-in: rdma_cma.h's connection manager over the simulator's (verbsim/cm.hpp),
// for C programs that connect through rdma_cm. It is a library of its own (librdmacm.so.1),
// built with the libibverbs drop-in and linked to it: the ids' devices, PDs, CQs and QPs are
// that library's objects (id->verbs, id->pd, id->qp), and every call holds its lock while it
// touches the world (state.hpp, exported to this library under VERBSIM_DROPIN_PRIVATE). A call
// that waits for an event releases it meanwhile (shared_wait): the two ends of a connection
// are often two threads of one program.
//
// Channels. Each rdma_event_channel owns a CmEventChannel of the simulator, and the ids on it
// get their events there: channel->fd is that channel's fd, readable while an event is pending.
// rdma_migrate_id moves an id (CmId::migrate); so does a synchronous listener (rdma_create_ep,
// rdma_get_request) with each connection it takes, to a private channel, as librdmacm does.
//
// Synchronous ids (created without a channel) wait inside the verb for its event, as librdmacm's
// ucma_complete does: rdma_resolve_addr for ADDR_RESOLVED, rdma_connect and rdma_accept for
// ESTABLISHED, ... and keep it in id->event until the next call.
#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <unordered_set>
#include <vector>

#include "objects.hpp"
#include "state.hpp"
#include "verbsim/abi/sockaddr.hpp"
#include "verbsim/abi/translate.hpp"
#include "verbsim/cm.hpp"

namespace verbsim::dropin {
namespace {

// One open context and PD per device, opened when an id first lands on it and kept for the
// life of the process, as librdmacm keeps its cma_devices: id->verbs and id->pd point at them.
struct CmDevice {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  int max_initiator_depth = 0;      // max_qp_init_rd_atom
  int max_responder_resources = 0;  // max_qp_rd_atom
};

struct DCmChannel : rdma_event_channel {
  std::unique_ptr<CmEventChannel> impl;  // the simulator's channel
  ~DCmChannel();
};

struct DCmId : rdma_cm_id {
  std::unique_ptr<CmId> impl;
  bool sync = false;  // created without a channel: `channel` is its own
  // What CONNECT_REQUEST asked for (rdma_accept's defaults).
  int req_initiator_depth = 0;
  int req_responder_resources = 0;
  // rdma_create_ep on a passive endpoint: the QP rdma_get_request creates for each connection.
  std::unique_ptr<ibv_qp_init_attr> qp_init_attr;
  ibv_sa_path_rec path{};
  CmDevice* dev = nullptr;

  static DCmId* from(rdma_cm_id* id) noexcept { return static_cast<DCmId*>(id); }
};

struct DCmEvent : rdma_cm_event {
  std::vector<std::uint8_t> data;  // the private data param points at
};

struct CmGlobal {
  std::map<std::string, CmDevice> devices;
  // The channels that exist, under the lock: a thread waiting in rdma_get_cm_event while
  // another destroys the channel must not read it afterwards (rping's CM thread does, at exit).
  std::unordered_set<const DCmChannel*> channels;
};

// Never freed, like the world (state.hpp). A child of fork() gets one of its own, as it gets
// a libibverbs state of its own (state.cpp): the parent's devices, channels and ids are not
// the child's.
CmGlobal*& cm_current() {
  static CmGlobal* g = [] {
    ::pthread_atfork(nullptr, nullptr, [] {
      if (auto* own = new (std::nothrow) CmGlobal) cm_current() = own;
    });
    return new CmGlobal;
  }();
  return g;
}

CmGlobal& cm_global() { return *cm_current(); }

// rdma_* verbs return 0, or -1 with errno.
int result(int err) noexcept {
  if (err == 0) return 0;
  errno = err;
  return -1;
}

// Runs `body` (returning 0 or an errno) under the drop-in's lock; exceptions become their
// errno. Returns rdma_cm's 0 or -1 with errno.
template <class F>
int call(const char* verb, F&& body) noexcept {
  return result(with_errno(verb, std::forward<F>(body)));
}

int refuse(const char* verb, int err, const char* why) {
  trace(verb, why);
  return err;
}

CmDevice& device_named(const std::string& name) {
  auto& devices = cm_global().devices;
  if (auto it = devices.find(name); it != devices.end()) return it->second;
  const NestedVerbs nested;  // under the lock of the verb that lands an id on the device
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr)
    throw std::system_error(errno, std::generic_category(), "ibv_get_device_list");
  ibv_context* ctx = nullptr;
  for (int i = 0; i < n && ctx == nullptr; ++i) {
    if (name == ibv_get_device_name(list[i])) ctx = ibv_open_device(list[i]);
  }
  ibv_free_device_list(list);
  if (ctx == nullptr) throw std::system_error(ENODEV, std::generic_category(), name);
  CmDevice d;
  d.ctx = ctx;
  d.pd = ibv_alloc_pd(ctx);
  if (d.pd == nullptr) throw std::system_error(errno, std::generic_category(), "ibv_alloc_pd");
  ibv_device_attr attr{};
  if (ibv_query_device(ctx, &attr) == 0) {
    d.max_initiator_depth = attr.max_qp_init_rd_atom;
    d.max_responder_resources = attr.max_qp_rd_atom;
  }
  return devices.emplace(name, d).first->second;
}

// AF_INET and AF_INET6; anything else (AF_IB) is EAFNOSUPPORT.
SockAddr get(const char* verb, const sockaddr* s) {
  if (s == nullptr || (s->sa_family != AF_INET && s->sa_family != AF_INET6)) {
    throw std::system_error(s == nullptr ? EINVAL : EAFNOSUPPORT, std::generic_category(),
                            std::string(verb) + ": not an AF_INET or AF_INET6 address");
  }
  return abi::from_sockaddr(s);
}

bool is_unset(const SockAddr& a) noexcept { return a == SockAddr{}; }

// What the id's fields say: the device once the id has one (librdmacm's id->verbs and id->pd),
// its port and addresses.
void refresh(DCmId* id) {
  if (id->verbs == nullptr) {
    if (const std::string name = id->impl->device_name(); !name.empty()) {
      id->dev = &device_named(name);
      id->verbs = id->dev->ctx;
      if (id->pd == nullptr) id->pd = id->dev->pd;
    }
  }
  id->port_num = id->impl->port_num();
  const SockAddr local = id->impl->local_addr();
  const SockAddr peer = id->impl->peer_addr();
  if (!is_unset(local)) {
    id->route.addr.src_storage = abi::to_sockaddr(local);
    id->route.addr.addr.ibaddr.sgid = abi::to_ibv(Gid{local.ip});
  }
  if (!is_unset(peer)) {
    id->route.addr.dst_storage = abi::to_sockaddr(peer);
    id->route.addr.addr.ibaddr.dgid = abi::to_ibv(Gid{peer.ip});
  }
  id->route.addr.addr.ibaddr.pkey = htons(0xffff);
}

// The path ROUTE_RESOLVED gives (RoCE: the two GIDs, the default P_Key, MTU 1024, and the flow
// label the kernel derives from the two ports).
void set_route(DCmId* id) {
  ibv_sa_path_rec& p = id->path;
  p = {};
  p.flow_label = htonl(cm_flow_label(id->impl->local_addr().port, id->impl->peer_addr().port));
  p.sgid = id->route.addr.addr.ibaddr.sgid;
  p.dgid = id->route.addr.addr.ibaddr.dgid;
  p.pkey = htons(0xffff);
  p.mtu_selector = 2;  // exactly
  p.mtu = IBV_MTU_1024;
  p.reversible = 1;
  p.numb_path = 1;
  p.hop_limit = 64;
  id->route.path_rec = &p;
  id->route.num_paths = 1;
}

std::unordered_set<const DCmChannel*>& live_channels() { return cm_global().channels; }

DCmChannel::~DCmChannel() { live_channels().erase(this); }

DCmChannel* new_channel() {
  sim::World* w = world();
  if (w == nullptr) throw std::system_error(EINVAL, std::generic_category(), "no simulated world");
  auto ch = std::make_unique<DCmChannel>();
  ch->impl = static_cast<Backend&>(*w).create_cm_channel();
  ch->fd = ch->impl->fd();
  make_blocking(ch->fd);
  live_channels().insert(ch.get());
  return ch.release();
}

DCmId* new_id(std::unique_ptr<CmId> impl, DCmChannel* channel, void* context, rdma_port_space ps,
              bool sync) {
  auto id = std::make_unique<DCmId>();
  id->impl = std::move(impl);
  id->impl->user_data = id.get();
  id->channel = channel;
  id->context = context;
  id->ps = ps;
  id->qp_type = ps == RDMA_PS_UDP ? IBV_QPT_UD : IBV_QPT_RC;
  id->sync = sync;
  return id.release();
}

// The core event as librdmacm hands it out; a CONNECT_REQUEST's new id becomes the program's
// (its listener's channel, context and port space; its own channel under a synchronous
// listener).
DCmEvent* convert(CmEvent&& ev) {
  auto out = std::make_unique<DCmEvent>();
  out->event = static_cast<rdma_cm_event_type>(ev.type);
  out->status = ev.status;
  DCmId* id = nullptr;
  if (ev.type == CmEventType::connect_request) {
    auto* listener = static_cast<DCmId*>(ev.listen_id->user_data);
    DCmChannel* channel = static_cast<DCmChannel*>(listener->channel);
    if (listener->sync) {  // the connection gets a channel of its own
      std::unique_ptr<DCmChannel> own(new_channel());
      ev.new_id->migrate(*own->impl);
      channel = own.release();
    }
    id = new_id(std::move(ev.new_id), channel, listener->context, listener->ps, listener->sync);
    id->req_initiator_depth = ev.param.initiator_depth;
    id->req_responder_resources = ev.param.responder_resources;
    out->listen_id = listener;
  } else {
    id = static_cast<DCmId*>(ev.id->user_data);
  }
  out->id = id;
  refresh(id);
  if (ev.type == CmEventType::route_resolved) set_route(id);
  out->data = std::move(ev.private_data);
  const void* data = out->data.empty() ? nullptr : out->data.data();
  const auto len = static_cast<std::uint8_t>(out->data.size());
  if (id->qp_type == IBV_QPT_UD) {
    out->param.ud.private_data = data;
    out->param.ud.private_data_len = len;
    out->param.ud.qp_num = ev.peer_qp_num;
    out->param.ud.qkey = ev.qkey;
    if (ev.type == CmEventType::established) out->param.ud.ah_attr = abi::to_ibv(ev.ah_attr);
  } else {
    out->param.conn.private_data = data;
    out->param.conn.private_data_len = len;
    out->param.conn.responder_resources = ev.param.responder_resources;
    out->param.conn.initiator_depth = ev.param.initiator_depth;
    out->param.conn.retry_count = ev.param.retry_count;
    out->param.conn.rnr_retry_count = ev.param.rnr_retry_count;
    out->param.conn.qp_num = ev.peer_qp_num;
  }
  return out.release();
}

// The next event of `ch` if one is there (EAGAIN if none), under the lock. The simulator's
// channel is asked only when its fd says it holds an event, so that a fault plan's rule on
// rdma_get_cm_event counts the program's calls.
std::error_code take_event(DCmChannel* ch, DCmEvent*& out) {
  if (!live_channels().contains(ch)) return std::error_code(EBADF, std::generic_category());
  if (!readable(ch->fd)) return std::error_code(EAGAIN, std::generic_category());
  CmEvent ev;
  if (const std::error_code ec = ch->impl->get_event(ev, Wait::nonblocking)) return ec;
  out = convert(std::move(ev));
  return {};
}

int get_event(const char* verb, DCmChannel* ch, DCmEvent*& out) {
  struct Arg {
    DCmChannel* ch;
    DCmEvent*& out;
  } arg{ch, out};
  const bool nonblocking = is_nonblocking(ch->fd);
  const int err = shared_wait(
      verb, ch->fd, nonblocking,
      [](void* p) {
        auto* a = static_cast<Arg*>(p);
        return take_event(a->ch, a->out).value();
      },
      &arg);
  if (err == EBADF && !nonblocking) {
    // The channel was destroyed while this thread waited on it: as a thread blocked in read()
    // on a descriptor another thread closes, it waits for good (the process ends it).
    for (;;) ::pause();
  }
  return err;
}

void free_event(rdma_cm_event* e) noexcept { delete static_cast<DCmEvent*>(e); }

// A synchronous id's event kept since its last verb, acknowledged (librdmacm acks it when the
// next verb starts, and when the id goes).
void drop_event(rdma_cm_id* id) noexcept {
  free_event(id->event);
  id->event = nullptr;
}

// librdmacm's ucma_complete: a synchronous id waits for its next event and keeps it in
// id->event; an error event is the verb's errno (ECONNREFUSED for REJECTED). Called without the
// lock, so that the program's other threads run while it waits (shared_wait).
int complete(const char* verb, DCmId* id) noexcept {
  try {
    if (!id->sync) return 0;
    {
      auto held = lock();
      if (held.refused()) return EDEADLK;
      drop_event(id);
    }
    DCmEvent* e = nullptr;
    if (const int err = get_event(verb, static_cast<DCmChannel*>(id->channel), e)) return err;
    id->event = e;
    if (e->status == 0) return 0;
    if (e->event == RDMA_CM_EVENT_REJECTED) return ECONNREFUSED;
    return e->status < 0 ? -e->status : e->status;
  } catch (...) {
    return errno_of_current_exception(verb);
  }
}

// A verb that a synchronous id completes: `body` under the lock, then the wait without it.
template <class F>
int call_then_complete(const char* verb, rdma_cm_id* id, F&& body) noexcept {
  if (const int err = with_errno(verb, std::forward<F>(body))) return result(err);
  return result(complete(verb, DCmId::from(id)));
}

// Without rdma_create_qp's QP a program names its own in the parameters and moves it itself
// (rdma_init_qp_attr); without either it is EINVAL, as librdmacm's ucma_valid_param has it.
void check_qp_or_param(const char* verb, const rdma_cm_id* id, const rdma_conn_param* param) {
  if (id->qp == nullptr && param == nullptr) {
    throw std::system_error(EINVAL, std::generic_category(), std::string(verb) + ": no QP");
  }
}

int clamp_depth(int asked, int from_request, int device_max) {
  if (asked != RDMA_MAX_INIT_DEPTH) return asked;
  return from_request >= 0 ? std::min(from_request, device_max) : device_max;
}

// rdma_conn_param as the core takes it; RDMA_MAX_RESP_RES / RDMA_MAX_INIT_DEPTH (and no
// parameters) mean the device's maximum, or on accept the smaller of it and what the request
// asked for; more than the device allows is EINVAL (librdmacm's ucma_valid_param).
ConnParam core_param(const char* verb, DCmId* id, const rdma_conn_param* p, bool accepting) {
  ConnParam c;
  const int max_init = id->dev != nullptr ? id->dev->max_initiator_depth : 1;
  const int max_resp = id->dev != nullptr ? id->dev->max_responder_resources : 1;
  const int init = p != nullptr ? p->initiator_depth : int{RDMA_MAX_INIT_DEPTH};
  const int resp = p != nullptr ? p->responder_resources : int{RDMA_MAX_RESP_RES};
  if (id->ps == RDMA_PS_TCP && ((init != RDMA_MAX_INIT_DEPTH && init > max_init) ||
                                (resp != RDMA_MAX_RESP_RES && resp > max_resp))) {
    throw std::system_error(EINVAL, std::generic_category(),
                            std::string(verb) + ": more RDMA READs in flight than the device has");
  }
  c.initiator_depth = static_cast<std::uint8_t>(
      clamp_depth(init, accepting ? id->req_initiator_depth : -1, max_init));
  c.responder_resources = static_cast<std::uint8_t>(
      clamp_depth(resp, accepting ? id->req_responder_resources : -1, max_resp));
  if (p != nullptr) {
    c.retry_count = p->retry_count;
    c.rnr_retry_count = p->rnr_retry_count;
    if (p->private_data != nullptr && p->private_data_len > 0) {
      const auto* b = static_cast<const std::uint8_t*>(p->private_data);
      c.private_data.assign(b, b + p->private_data_len);
    }
  }
  return c;
}

void destroy_cqs(rdma_cm_id* id) noexcept {
  const NestedVerbs nested;  // under the lock of rdma_create_qp, rdma_destroy_qp, ...
  if (id->recv_cq != nullptr) {
    ibv_destroy_cq(id->recv_cq);
    if (id->send_cq != nullptr && id->send_cq != id->recv_cq) ibv_destroy_cq(id->send_cq);
  }
  id->recv_cq = id->send_cq = nullptr;
  if (id->recv_cq_channel != nullptr) {
    ibv_destroy_comp_channel(id->recv_cq_channel);
    if (id->send_cq_channel != nullptr && id->send_cq_channel != id->recv_cq_channel) {
      ibv_destroy_comp_channel(id->send_cq_channel);
    }
  }
  id->recv_cq_channel = id->send_cq_channel = nullptr;
}

// librdmacm's ucma_create_cqs: a CQ and a completion channel each for the sends and the
// receives the program gave no CQ for.
int create_cqs(rdma_cm_id* id, std::uint32_t send_size, std::uint32_t recv_size) {
  const NestedVerbs nested;  // under rdma_create_qp's lock
  auto make = [&](std::uint32_t size, ibv_comp_channel*& ch, ibv_cq*& cq) {
    if (size == 0) return true;
    ch = ibv_create_comp_channel(id->verbs);
    if (ch == nullptr) return false;
    cq = ibv_create_cq(id->verbs, static_cast<int>(size), id, ch, 0);
    return cq != nullptr;
  };
  if (make(recv_size, id->recv_cq_channel, id->recv_cq) &&
      make(send_size, id->send_cq_channel, id->send_cq)) {
    return 0;
  }
  const int err = errno;
  destroy_cqs(id);
  return err;
}

// What librdmacm's rdma_create_qp does once the QP exists: INIT with rdma_init_qp_attr's
// attributes (the id's port; an RC QP's remote access once a request or connect has said which),
// and a UD QP on to RTS at once (Q_Key RDMA_UDP_QKEY, send PSN 0).
int init_qp(DCmId* id, ibv_qp* qp) {
  const NestedVerbs nested;  // under rdma_create_qp's lock
  for (const QpState state : {QpState::init, QpState::rtr, QpState::rts}) {
    if (state != QpState::init && id->qp_type != IBV_QPT_UD) break;
    QpAttr core;
    const QpAttrMask mask = id->impl->init_qp_attr(state, core);
    ibv_qp_attr a = abi::to_ibv(core);
    if (int err = ibv_modify_qp(qp, &a, static_cast<int>(mask))) return err;
  }
  return 0;
}

int create_qp(rdma_cm_id* id, ibv_qp_init_attr_ex* attr) {
  if (id->qp != nullptr) return refuse("rdma_create_qp", EINVAL, "the id has a QP already");
  if (id->verbs == nullptr) return refuse("rdma_create_qp", EINVAL, "the id has no device yet");
  if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || attr->pd == nullptr) {
    attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
    attr->pd = id->pd;
  } else if (attr->pd->context != id->verbs) {
    return refuse("rdma_create_qp", EINVAL, "the PD is not on the id's device");
  }
  if ((id->recv_cq != nullptr && attr->recv_cq != nullptr && id->recv_cq != attr->recv_cq) ||
      (id->send_cq != nullptr && attr->send_cq != nullptr && id->send_cq != attr->send_cq)) {
    return refuse("rdma_create_qp", EINVAL, "CQs other than the id's");
  }
  if (attr->qp_type != id->qp_type) {
    return refuse("rdma_create_qp", EINVAL, "the QP type is not the id's (RC for TCP, UD for UDP)");
  }
  if (int err = create_cqs(id, attr->send_cq || id->send_cq ? 0 : attr->cap.max_send_wr,
                           attr->recv_cq || id->recv_cq ? 0 : attr->cap.max_recv_wr)) {
    return err;
  }
  if (attr->send_cq == nullptr) attr->send_cq = id->send_cq;
  if (attr->recv_cq == nullptr) attr->recv_cq = id->recv_cq;
  if (id->srq != nullptr && attr->srq == nullptr) attr->srq = id->srq;
  const NestedVerbs nested;  // under rdma_create_qp's (or rdma_get_request's) lock
  ibv_qp* qp = ibv_create_qp_ex(id->verbs, attr);
  if (qp == nullptr) {
    const int err = errno;
    destroy_cqs(id);
    return err;
  }
  if (int err = init_qp(DCmId::from(id), qp)) {
    ibv_destroy_qp(qp);
    destroy_cqs(id);
    return err;
  }
  id->pd = qp->pd;
  id->qp = qp;
  return 0;
}

void destroy_id(DCmId* id) {
  drop_event(id);
  id->impl.reset();  // its events not yet taken go with it
  if (id->sync) delete static_cast<DCmChannel*>(id->channel);
  delete id;
}

}  // namespace
}  // namespace verbsim::dropin

using namespace verbsim;
using namespace verbsim::dropin;

extern "C" {

rdma_event_channel* rdma_create_event_channel(void) {
  return with_null<rdma_event_channel>(
      "rdma_create_event_channel", [] { return static_cast<rdma_event_channel*>(new_channel()); });
}

void rdma_destroy_event_channel(rdma_event_channel* channel) {
  if (channel == nullptr) return;
  with_errno("rdma_destroy_event_channel", [&] {
    delete static_cast<DCmChannel*>(channel);  // its requests not yet taken are rejected
    return 0;
  });
}

int rdma_create_id(rdma_event_channel* channel, rdma_cm_id** id, void* context,
                   rdma_port_space ps) {
  if (id == nullptr) return result(EINVAL);
  return call("rdma_create_id", [&] {
    if (ps != RDMA_PS_TCP && ps != RDMA_PS_UDP) {
      return refuse("rdma_create_id", EOPNOTSUPP, "port spaces other than TCP and UDP");
    }
    const bool sync = channel == nullptr;
    auto* ch = sync ? new_channel() : static_cast<DCmChannel*>(channel);
    try {
      auto impl = ch->impl->create_id(ps == RDMA_PS_UDP ? PortSpace::udp : PortSpace::tcp);
      *id = new_id(std::move(impl), ch, context, ps, sync);
    } catch (...) {
      if (sync) delete ch;
      throw;
    }
    return 0;
  });
}

int rdma_destroy_id(rdma_cm_id* id) {
  if (id == nullptr) return result(EINVAL);
  return call("rdma_destroy_id", [&] {
    destroy_id(DCmId::from(id));
    return 0;
  });
}

int rdma_bind_addr(rdma_cm_id* id, sockaddr* addr) {
  return call("rdma_bind_addr", [&] {
    auto* d = DCmId::from(id);
    d->impl->bind_addr(get("rdma_bind_addr", addr));
    refresh(d);
    return 0;
  });
}

int rdma_resolve_addr(rdma_cm_id* id, sockaddr* src_addr, sockaddr* dst_addr, int timeout_ms) {
  return call_then_complete("rdma_resolve_addr", id, [&] {
    auto* d = DCmId::from(id);
    const SockAddr dst = get("rdma_resolve_addr", dst_addr);
    if (src_addr != nullptr) {
      d->impl->bind_addr(get("rdma_resolve_addr", src_addr));
      refresh(d);
    }
    d->impl->resolve_addr(dst, timeout_ms);
    d->route.addr.dst_storage = abi::to_sockaddr(dst);
    return 0;
  });
}

int rdma_resolve_route(rdma_cm_id* id, int timeout_ms) {
  return call_then_complete("rdma_resolve_route", id, [&] {
    auto* d = DCmId::from(id);
    d->impl->resolve_route(timeout_ms);
    return 0;
  });
}

int rdma_create_qp_ex(rdma_cm_id* id, ibv_qp_init_attr_ex* attr) {
  if (id == nullptr || attr == nullptr) return result(EINVAL);
  return call("rdma_create_qp", [&] { return create_qp(id, attr); });
}

int rdma_create_qp(rdma_cm_id* id, ibv_pd* pd, ibv_qp_init_attr* qp_init_attr) {
  if (id == nullptr || qp_init_attr == nullptr) return result(EINVAL);
  ibv_qp_init_attr_ex ex{};
  std::memcpy(&ex, qp_init_attr, sizeof *qp_init_attr);
  ex.comp_mask = IBV_QP_INIT_ATTR_PD;
  ex.pd = pd != nullptr ? pd : id->pd;
  const int ret = rdma_create_qp_ex(id, &ex);
  std::memcpy(qp_init_attr, &ex, sizeof *qp_init_attr);
  return ret;
}

void rdma_destroy_qp(rdma_cm_id* id) {
  with_errno("rdma_destroy_qp", [&] {
    const NestedVerbs nested;
    if (id->qp != nullptr) ibv_destroy_qp(id->qp);
    id->qp = nullptr;
    destroy_cqs(id);
    return 0;
  });
}

int rdma_create_srq_ex(rdma_cm_id* id, ibv_srq_init_attr_ex* attr) {
  return call("rdma_create_srq", [&] {
    if (id->srq != nullptr) return refuse("rdma_create_srq", EINVAL, "the id has an SRQ already");
    if (attr->srq_type != IBV_SRQT_BASIC && (attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE)) {
      return refuse("rdma_create_srq", EOPNOTSUPP, "only basic SRQs");
    }
    ibv_pd* pd =
        (attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) && attr->pd != nullptr ? attr->pd : id->pd;
    if (pd == nullptr) return refuse("rdma_create_srq", EINVAL, "the id has no device yet");
    ibv_srq_init_attr basic{};
    basic.srq_context = attr->srq_context;
    basic.attr = attr->attr;
    const NestedVerbs nested;
    ibv_srq* srq = ibv_create_srq(pd, &basic);
    if (srq == nullptr) return errno;
    attr->attr = basic.attr;
    id->srq = srq;
    return 0;
  });
}

int rdma_create_srq(rdma_cm_id* id, ibv_pd* pd, ibv_srq_init_attr* attr) {
  ibv_srq_init_attr_ex ex{};
  ex.srq_context = attr->srq_context;
  ex.attr = attr->attr;
  ex.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
  ex.srq_type = IBV_SRQT_BASIC;
  ex.pd = pd != nullptr ? pd : id->pd;
  const int ret = rdma_create_srq_ex(id, &ex);
  attr->attr = ex.attr;
  return ret;
}

void rdma_destroy_srq(rdma_cm_id* id) {
  with_errno("rdma_destroy_srq", [&] {
    const NestedVerbs nested;
    if (id->srq != nullptr) ibv_destroy_srq(id->srq);
    id->srq = nullptr;
    return 0;
  });
}

int rdma_connect(rdma_cm_id* id, rdma_conn_param* conn_param) {
  return call_then_complete("rdma_connect", id, [&] {
    auto* d = DCmId::from(id);
    check_qp_or_param("rdma_connect", id, conn_param);
    const ConnParam param = core_param("rdma_connect", d, conn_param, false);
    if (id->qp != nullptr) {
      d->impl->connect(*DQp::from(id->qp)->impl, param);
    } else {
      d->impl->connect_own_qp(conn_param->qp_num, param);
    }
    return 0;
  });
}

// A backlog of 0 or less, or past the maximum, is the kernel's maximum (ucma_listen:
// net.rdma_ucm.max_backlog, 1024 by default).
int rdma_listen(rdma_cm_id* id, int backlog) {
  constexpr int kMaxBacklog = 1024;
  if (backlog <= 0 || backlog > kMaxBacklog) backlog = kMaxBacklog;
  return call("rdma_listen", [&] {
    auto* d = DCmId::from(id);
    d->impl->listen(backlog);
    refresh(d);
    return 0;
  });
}

int rdma_get_request(rdma_cm_id* listen, rdma_cm_id** id) {
  auto* l = DCmId::from(listen);
  if (!l->sync) return result(refuse("rdma_get_request", EINVAL, "the listening id has a channel"));
  DCmEvent* e = nullptr;
  try {
    {
      auto held = lock();
      if (held.refused()) return result(EDEADLK);
      drop_event(l);
    }
    if (const int err = get_event("rdma_get_request", static_cast<DCmChannel*>(l->channel), e)) {
      return result(err);
    }
  } catch (...) {
    return result(errno_of_current_exception("rdma_get_request"));
  }
  return call("rdma_get_request", [&] {
    int err = 0;
    if (e->event == RDMA_CM_EVENT_REJECTED) {
      err = ECONNREFUSED;
    } else if (e->status != 0) {
      err = -e->status;
    } else if (e->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
      err = EINVAL;
    } else if (l->qp_init_attr) {
      ibv_qp_init_attr_ex ex{};
      std::memcpy(&ex, l->qp_init_attr.get(), sizeof(ibv_qp_init_attr));
      ex.comp_mask = IBV_QP_INIT_ATTR_PD;
      ex.pd = l->pd != nullptr ? l->pd : e->id->pd;
      err = create_qp(e->id, &ex);
    }
    if (err != 0) {
      l->event = e;
      return err;
    }
    *id = e->id;
    e->id->event = e;
    return 0;
  });
}

int rdma_accept(rdma_cm_id* id, rdma_conn_param* conn_param) {
  auto* d = DCmId::from(id);
  const int err = with_errno("rdma_accept", [&] {
    check_qp_or_param("rdma_accept", id, conn_param);
    const ConnParam param = core_param("rdma_accept", d, conn_param, true);
    if (id->qp != nullptr) {
      d->impl->accept(*DQp::from(id->qp)->impl, param);
    } else {
      d->impl->accept_own_qp(conn_param->qp_num, param);
    }
    if (d->qp_type == IBV_QPT_UD && d->sync) drop_event(d);
    return 0;
  });
  if (err != 0) return result(err);
  if (d->qp_type == IBV_QPT_UD) return 0;  // nothing follows a SIDR reply
  return result(complete("rdma_accept", d));
}

int rdma_reject(rdma_cm_id* id, const void* private_data, uint8_t private_data_len) {
  return call("rdma_reject", [&] {
    const auto* b = static_cast<const std::uint8_t*>(private_data);
    DCmId::from(id)->impl->reject(
        std::span<const std::uint8_t>(b, private_data != nullptr ? private_data_len : 0));
    return 0;
  });
}

// The consumer-defined rejection: the simulator has no vendor options to tell apart.
int rdma_reject_ece(rdma_cm_id* id, const void* private_data, uint8_t private_data_len) {
  return rdma_reject(id, private_data, private_data_len);
}

int rdma_disconnect(rdma_cm_id* id) {
  return call_then_complete("rdma_disconnect", id, [&] {
    auto* d = DCmId::from(id);
    if (d->verbs == nullptr) return refuse("rdma_disconnect", EINVAL, "the id has no device");
    d->impl->disconnect();
    return 0;
  });
}

// librdmacm tells the kernel of communication established seen on the QP; here the CM knows.
int rdma_notify(rdma_cm_id*, ibv_event_type) { return 0; }

// For QPs the program made itself: after CONNECT_RESPONSE, the RTU.
int rdma_establish(rdma_cm_id* id) {
  if (id == nullptr) return result(EINVAL);
  return call("rdma_establish", [&] {
    if (id->qp != nullptr) return refuse("rdma_establish", EINVAL, "the id has rdma_create_qp's QP");
    DCmId::from(id)->impl->establish();
    return 0;
  });
}

int rdma_init_qp_attr(rdma_cm_id* id, ibv_qp_attr* qp_attr, int* qp_attr_mask) {
  if (id == nullptr || qp_attr == nullptr || qp_attr_mask == nullptr) return result(EINVAL);
  return call("rdma_init_qp_attr", [&] {
    QpAttr core;
    const QpAttrMask mask =
        DCmId::from(id)->impl->init_qp_attr(static_cast<QpState>(qp_attr->qp_state), core);
    *qp_attr = abi::to_ibv(core);
    *qp_attr_mask = static_cast<int>(mask);
    return 0;
  });
}

int rdma_get_cm_event(rdma_event_channel* channel, rdma_cm_event** event) {
  if (channel == nullptr || event == nullptr) return result(EINVAL);
  try {
    DCmEvent* e = nullptr;
    if (const int err = get_event("rdma_get_cm_event", static_cast<DCmChannel*>(channel), e)) {
      return result(err);
    }
    *event = e;
    return 0;
  } catch (...) {
    return result(errno_of_current_exception("rdma_get_cm_event"));
  }
}

int rdma_ack_cm_event(rdma_cm_event* event) {
  if (event == nullptr) return result(EINVAL);
  auto held = lock();
  if (held.refused()) return result(EDEADLK);
  free_event(event);
  return 0;
}

__be16 rdma_get_src_port(rdma_cm_id* id) {
  const sockaddr* s = &id->route.addr.src_addr;
  if (s->sa_family == AF_INET) return id->route.addr.src_sin.sin_port;
  if (s->sa_family == AF_INET6) return id->route.addr.src_sin6.sin6_port;
  return 0;
}

__be16 rdma_get_dst_port(rdma_cm_id* id) {
  const sockaddr* s = &id->route.addr.dst_addr;
  if (s->sa_family == AF_INET) return id->route.addr.dst_sin.sin_port;
  if (s->sa_family == AF_INET6) return id->route.addr.dst_sin6.sin6_port;
  return 0;
}

ibv_context** rdma_get_devices(int* num_devices) {
  return with_null<ibv_context*>("rdma_get_devices", [&]() -> ibv_context** {
    const NestedVerbs nested;
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (list == nullptr) return nullptr;
    std::vector<std::string> names;
    for (int i = 0; i < n; ++i) names.emplace_back(ibv_get_device_name(list[i]));
    ibv_free_device_list(list);
    auto** out = static_cast<ibv_context**>(std::calloc(names.size() + 1, sizeof(ibv_context*)));
    if (out == nullptr) throw std::bad_alloc();
    for (std::size_t i = 0; i < names.size(); ++i) out[i] = device_named(names[i]).ctx;
    if (num_devices != nullptr) *num_devices = static_cast<int>(names.size());
    return out;
  });
}

void rdma_free_devices(ibv_context** list) { std::free(list); }

const char* rdma_event_str(rdma_cm_event_type event) {
  if (event < 0 || event > RDMA_CM_EVENT_TIMEWAIT_EXIT) return "UNKNOWN EVENT";  // librdmacm's
  return to_string(static_cast<CmEventType>(event)).data();  // the names are null-terminated
}

// The ACK timeout is the connection QP's (a u8, as the kernel's ucma_set_option_id takes it);
// the other options change nothing the simulator models (type of service, address reuse, IPv6
// only, path records): accepted and ignored, as long as they are rdma_cm's.
int rdma_set_option(rdma_cm_id* id, int level, int optname, void* optval, size_t optlen) {
  if (id == nullptr || optval == nullptr || optlen == 0) return result(EINVAL);
  if (level != RDMA_OPTION_ID && level != RDMA_OPTION_IB) return result(ENOSYS);
  if (level == RDMA_OPTION_ID && optname == RDMA_OPTION_ID_ACK_TIMEOUT) {
    if (optlen != sizeof(std::uint8_t)) return result(EINVAL);
    return call("rdma_set_option", [&] {
      DCmId::from(id)->impl->set_ack_timeout(*static_cast<const std::uint8_t*>(optval));
      return 0;
    });
  }
  return 0;
}

// To `channel`, or (NULL) to a private channel: the id becomes synchronous.
int rdma_migrate_id(rdma_cm_id* id, rdma_event_channel* channel) {
  if (id == nullptr) return result(EINVAL);
  return call("rdma_migrate_id", [&] {
    auto* d = DCmId::from(id);
    if (d->sync && channel == nullptr) {
      return refuse("rdma_migrate_id", EINVAL, "the id is synchronous already");
    }
    std::unique_ptr<DCmChannel> own(channel == nullptr ? new_channel() : nullptr);
    auto* to = own ? own.get() : static_cast<DCmChannel*>(channel);
    d->impl->migrate(*to->impl);
    if (d->sync) {
      drop_event(d);
      delete static_cast<DCmChannel*>(d->channel);
    }
    d->channel = to;
    d->sync = own != nullptr;
    own.release();
    return 0;
  });
}

int rdma_create_ep(rdma_cm_id** id, rdma_addrinfo* res, ibv_pd* pd,
                   ibv_qp_init_attr* qp_init_attr) {
  if (id == nullptr || res == nullptr) return result(EINVAL);
  rdma_cm_id* cm_id = nullptr;
  if (rdma_create_id(nullptr, &cm_id, nullptr, static_cast<rdma_port_space>(res->ai_port_space)) !=
      0) {
    return -1;
  }
  int ret = 0;
  if (res->ai_flags & RAI_PASSIVE) {
    ret = rdma_bind_addr(cm_id, res->ai_src_addr);
    if (ret == 0) {
      if (pd != nullptr) cm_id->pd = pd;
      if (qp_init_attr != nullptr) {
        auto* d = DCmId::from(cm_id);
        d->qp_init_attr = std::make_unique<ibv_qp_init_attr>(*qp_init_attr);
        d->qp_init_attr->qp_type = static_cast<ibv_qp_type>(res->ai_qp_type);
      }
    }
  } else {
    ret = rdma_resolve_addr(cm_id, res->ai_src_addr, res->ai_dst_addr, 2000);
    if (ret == 0) ret = rdma_resolve_route(cm_id, 2000);
    if (ret == 0 && qp_init_attr != nullptr) {
      qp_init_attr->qp_type = static_cast<ibv_qp_type>(res->ai_qp_type);
      ret = rdma_create_qp(cm_id, pd, qp_init_attr);
    }
  }
  if (ret != 0) {
    const int err = errno;
    rdma_destroy_ep(cm_id);
    errno = err;
    return -1;
  }
  *id = cm_id;
  return 0;
}

void rdma_destroy_ep(rdma_cm_id* id) {
  if (id->qp != nullptr) rdma_destroy_qp(id);
  if (id->srq != nullptr) rdma_destroy_srq(id);
  rdma_destroy_id(id);
}

// Names resolved by the C library's getaddrinfo; IB service lookups (RAI_SA) and AF_IB are
// not supported.
int rdma_getaddrinfo(const char* node, const char* service, const rdma_addrinfo* hints,
                     rdma_addrinfo** res) {
  if (res == nullptr || (node == nullptr && service == nullptr && hints == nullptr)) {
    return result(EINVAL);
  }
  static const rdma_addrinfo no_hints{};
  const rdma_addrinfo& h = hints != nullptr ? *hints : no_hints;
  if (h.ai_family == AF_IB) return result(EOPNOTSUPP);
  auto* rai = static_cast<rdma_addrinfo*>(std::calloc(1, sizeof(rdma_addrinfo)));
  if (rai == nullptr) return result(ENOMEM);
  auto copy = [](sockaddr*& dst, socklen_t& dst_len, const void* src, socklen_t len) {
    dst = static_cast<sockaddr*>(std::malloc(len));
    if (dst == nullptr) return false;
    std::memcpy(dst, src, len);
    dst_len = len;
    return true;
  };
  int err = 0;
  rai->ai_flags = h.ai_flags;
  rai->ai_family = h.ai_family;
  rai->ai_qp_type = h.ai_qp_type != 0 ? h.ai_qp_type : IBV_QPT_RC;
  rai->ai_port_space = h.ai_port_space != 0            ? h.ai_port_space
                       : rai->ai_qp_type == IBV_QPT_UD ? RDMA_PS_UDP
                                                       : RDMA_PS_TCP;
  if (node != nullptr || service != nullptr) {
    addrinfo ai_hints{};
    ai_hints.ai_flags = ((h.ai_flags & RAI_PASSIVE) ? AI_PASSIVE : 0) |
                        ((h.ai_flags & RAI_NUMERICHOST) ? AI_NUMERICHOST : 0);
    ai_hints.ai_family = h.ai_family;
    ai_hints.ai_socktype = rai->ai_qp_type == IBV_QPT_UD ? SOCK_DGRAM : SOCK_STREAM;
    addrinfo* ai = nullptr;
    const int gai = ::getaddrinfo(node, service, &ai_hints, &ai);
    if (gai != 0) {
      err = gai == EAI_SYSTEM ? errno : gai == EAI_MEMORY ? ENOMEM : EADDRNOTAVAIL;
    } else {
      rai->ai_family = ai->ai_family;
      const bool ok = (h.ai_flags & RAI_PASSIVE)
                          ? copy(rai->ai_src_addr, rai->ai_src_len, ai->ai_addr, ai->ai_addrlen)
                          : copy(rai->ai_dst_addr, rai->ai_dst_len, ai->ai_addr, ai->ai_addrlen);
      ::freeaddrinfo(ai);
      if (!ok) err = ENOMEM;
    }
  } else if (h.ai_dst_len != 0 &&
             !copy(rai->ai_dst_addr, rai->ai_dst_len, h.ai_dst_addr, h.ai_dst_len)) {
    err = ENOMEM;
  }
  if (err == 0 && rai->ai_src_len == 0 && h.ai_src_len != 0 &&
      !copy(rai->ai_src_addr, rai->ai_src_len, h.ai_src_addr, h.ai_src_len)) {
    err = ENOMEM;
  }
  if (err != 0) {
    rdma_freeaddrinfo(rai);
    return result(err);
  }
  *res = rai;
  return 0;
}

void rdma_freeaddrinfo(rdma_addrinfo* res) {
  while (res != nullptr) {
    rdma_addrinfo* next = res->ai_next;
    std::free(res->ai_src_addr);
    std::free(res->ai_dst_addr);
    std::free(res->ai_src_canonname);
    std::free(res->ai_dst_canonname);
    std::free(res->ai_route);
    std::free(res->ai_connect);
    std::free(res);
    res = next;
  }
}

// Multicast and ECE are not simulated.
int rdma_join_multicast(rdma_cm_id*, sockaddr*, void*) { return result(EOPNOTSUPP); }
int rdma_join_multicast_ex(rdma_cm_id*, rdma_cm_join_mc_attr_ex*, void*) {
  return result(EOPNOTSUPP);
}
int rdma_leave_multicast(rdma_cm_id*, sockaddr*) { return result(EOPNOTSUPP); }
int rdma_set_local_ece(rdma_cm_id*, ibv_ece*) { return result(EOPNOTSUPP); }
int rdma_get_remote_ece(rdma_cm_id*, ibv_ece*) { return result(EOPNOTSUPP); }

}  // extern "C"
