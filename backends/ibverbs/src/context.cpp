// Context over ibv_context: queries, creators and asynchronous events.
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "objects.hpp"
#include "verbsim/abi/translate.hpp"
#include "verbsim/ibverbs/backend.hpp"

namespace verbsim::ibverbs {

IbvContext::IbvContext(ibv_context* ctx, DeviceInfo info) : ctx_(ctx), info_(std::move(info)) {
  if (const int err = set_nonblocking(ctx_->async_fd); err != 0) {
    throw VerbError("fcntl", err, "O_NONBLOCK on the async event fd of " + info_.name);
  }
}

IbvContext::~IbvContext() {
  if (const int err = release(); err != 0) warn_leak("ibv_close_device", err, "context");
}

int IbvContext::release() noexcept {
  if (ctx_ == nullptr) return 0;
  if (children_.load(std::memory_order_relaxed) > 0) return EBUSY;
  errno = 0;
  if (::ibv_close_device(ctx_) != 0) return errno != 0 ? errno : EIO;
  ctx_ = nullptr;
  return 0;
}

void IbvContext::destroy() {
  const int err = release();
  if (err == EBUSY) {
    throw_verb_error("ibv_close_device", err,
                     std::to_string(children_.load()) +
                         " PD(s), CQ(s) or completion channel(s) of " + info_.name +
                         " still exist");
  }
  if (err != 0) throw_verb_error("ibv_close_device", err, info_.name);
}

DeviceAttr IbvContext::query_device() const {
  ibv_device_attr a{};
  if (const int ret = ::ibv_query_device(ctx_, &a); ret != 0) {
    throw_verb_error("ibv_query_device", returned_errno(ret), info_.name);
  }
  DeviceAttr out;
  out.fw_ver.assign(a.fw_ver, ::strnlen(a.fw_ver, sizeof a.fw_ver));
  out.node_guid = abi::guid_from_ibv(a.node_guid);
  out.sys_image_guid = abi::guid_from_ibv(a.sys_image_guid);
  out.max_mr_size = a.max_mr_size;
  out.page_size_cap = a.page_size_cap;
  out.vendor_id = a.vendor_id;
  out.vendor_part_id = a.vendor_part_id;
  out.hw_ver = a.hw_ver;
  out.max_qp = a.max_qp;
  out.max_qp_wr = a.max_qp_wr;
  out.max_sge = a.max_sge;
  out.max_sge_rd = a.max_sge_rd;
  out.max_cq = a.max_cq;
  out.max_cqe = a.max_cqe;
  out.max_mr = a.max_mr;
  out.max_pd = a.max_pd;
  out.max_qp_rd_atom = a.max_qp_rd_atom;
  out.max_qp_init_rd_atom = a.max_qp_init_rd_atom;
  out.max_srq = a.max_srq;
  out.max_srq_wr = a.max_srq_wr;
  out.max_srq_sge = a.max_srq_sge;
  out.max_ah = a.max_ah;
  out.max_pkeys = a.max_pkeys;
  out.phys_port_cnt = a.phys_port_cnt;
  out.atomics = a.atomic_cap != IBV_ATOMIC_NONE;
  out.max_mw = a.max_mw;
  out.mw_type1 = (a.device_cap_flags & IBV_DEVICE_MEM_WINDOW) != 0;
  out.mw_type2 = (a.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B) != 0;
  return out;
}

PortAttr IbvContext::query_port(std::uint8_t port_num) const {
  ibv_port_attr a{};
  if (const int ret = ::ibv_query_port(ctx_, port_num, &a); ret != 0) {
    throw_verb_error("ibv_query_port", returned_errno(ret), "port " + std::to_string(port_num));
  }
  PortAttr out;
  out.state = abi::from_ibv(a.state);
  out.max_mtu = abi::from_ibv(a.max_mtu);
  out.active_mtu = abi::from_ibv(a.active_mtu);
  out.gid_tbl_len = a.gid_tbl_len;
  out.port_cap_flags = a.port_cap_flags;
  out.max_msg_sz = a.max_msg_sz;
  out.lid = a.lid;
  out.sm_lid = a.sm_lid;
  out.pkey_tbl_len = a.pkey_tbl_len;
  out.lmc = a.lmc;
  out.active_width = a.active_width;
  out.active_speed = a.active_speed;
  out.link_layer = static_cast<LinkLayer>(a.link_layer);
  return out;
}

Gid IbvContext::query_gid(std::uint8_t port_num, int index) const {
  ibv_gid gid{};
  errno = 0;
  // Returns -1 and (usually) sets errno.
  if (::ibv_query_gid(ctx_, port_num, index, &gid) != 0) {
    const int err = errno != 0 ? errno : EINVAL;
    throw_verb_error("ibv_query_gid", err,
                     "port " + std::to_string(port_num) + " index " + std::to_string(index));
  }
  return abi::from_ibv(gid);
}

std::unique_ptr<ProtectionDomain> IbvContext::alloc_pd() { return std::make_unique<IbvPd>(*this); }

std::unique_ptr<CompletionChannel> IbvContext::create_comp_channel() {
  return std::make_unique<IbvChannel>(*this);
}

std::unique_ptr<CompletionQueue> IbvContext::create_cq(int cqe, CompletionChannel* channel,
                                                       int comp_vector, CqCreateFlags flags) {
  if (is_rxe(ctx_)) return std::make_unique<IbvRxeCq>(*this, cqe, channel, comp_vector, flags);
  return std::make_unique<IbvCq>(*this, cqe, channel, comp_vector, flags);
}

namespace {

// The wrapper behind an event's element, through the context fields set at creation.
AsyncEvent translate(const ibv_async_event& ev) noexcept {
  AsyncEvent out;
  out.type = abi::from_ibv(ev.event_type);
  switch (ev.event_type) {
    case IBV_EVENT_CQ_ERR: out.cq = static_cast<CompletionQueue*>(ev.element.cq->cq_context); break;
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED:
      out.qp = static_cast<QueuePair*>(ev.element.qp->qp_context);
      out.qp_num = ev.element.qp->qp_num;
      break;
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED:
      out.srq = static_cast<SharedReceiveQueue*>(ev.element.srq->srq_context);
      break;
    case IBV_EVENT_PORT_ACTIVE:
    case IBV_EVENT_PORT_ERR:
    case IBV_EVENT_LID_CHANGE:
    case IBV_EVENT_PKEY_CHANGE:
    case IBV_EVENT_SM_CHANGE:
    case IBV_EVENT_CLIENT_REREGISTER:
    case IBV_EVENT_GID_CHANGE: out.port_num = static_cast<std::uint8_t>(ev.element.port_num); break;
    case IBV_EVENT_DEVICE_FATAL:
    case IBV_EVENT_WQ_FATAL:  // verbsim has no WQs
    default: break;
  }
  return out;
}

}  // namespace

std::error_code IbvContext::get_async_event(AsyncEvent& event, Wait wait) {
  for (;;) {
    ibv_async_event ev{};
    errno = 0;
    if (::ibv_get_async_event(ctx_, &ev) == 0) {
      event = translate(ev);
      ::ibv_ack_async_event(&ev);
      return {};
    }
    const int err = errno != 0 ? errno : EIO;
    if (err == EINTR) continue;
    if ((err != EAGAIN && err != EWOULDBLOCK) || wait == Wait::nonblocking) return errno_code(err);
    if (const int werr = wait_readable(ctx_->async_fd); werr != 0) return errno_code(werr);
  }
}

bool is_rxe(ibv_context* ctx) noexcept {
  const char* name = ctx != nullptr ? ::ibv_get_device_name(ctx->device) : nullptr;
  return name != nullptr && std::strncmp(name, "rxe", 3) == 0;
}

ibv_context* native(verbsim::Context& context) noexcept {
  auto* c = dynamic_cast<IbvContext*>(&context);
  return c != nullptr ? c->native() : nullptr;
}

}  // namespace verbsim::ibverbs
