// Devices and contexts: the device list, opening and closing, device/port/GID/P_Key queries,
// async events, and the small helpers libibverbs exports (strings, rates, fork, sysfs).
#include <arpa/inet.h>
#include <endian.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "objects.hpp"
#include "ops.hpp"
#include "progress.hpp"
#include "state.hpp"
#include "symver.hpp"
#include "verbsim/abi/translate.hpp"
#include "verbsim/sim/extensions.hpp"

#undef ibv_query_port

using namespace verbsim;
using namespace verbsim::dropin;

namespace verbsim::dropin {

namespace {

constexpr int kGidTypeRoceV1 = 1;  // enum ibv_gid_type (IBV_GID_TYPE_ROCE_V1)
constexpr int kGidTypeRoceV2 = 2;  // IBV_GID_TYPE_ROCE_V2

// GID index 0 is the port's link-local GID, index 1 its RoCE v2 IPv4-mapped one (sim/README).
int gid_type_of(int index) noexcept { return index == 0 ? kGidTypeRoceV1 : kGidTypeRoceV2; }

void fill_port_attr(const PortAttr& p, ibv_port_attr& a) noexcept {
  a = {};
  a.state = static_cast<ibv_port_state>(p.state);
  a.max_mtu = static_cast<ibv_mtu>(p.max_mtu);
  a.active_mtu = static_cast<ibv_mtu>(p.active_mtu);
  a.gid_tbl_len = p.gid_tbl_len;
  a.port_cap_flags = p.port_cap_flags;
  a.max_msg_sz = p.max_msg_sz;
  a.pkey_tbl_len = p.pkey_tbl_len;
  a.lid = p.lid;
  a.sm_lid = p.sm_lid;
  a.lmc = p.lmc;
  a.max_vl_num = 1;
  a.active_width = p.active_width;
  a.active_speed = p.active_speed;
  a.phys_state = p.state == PortState::active ? 5 : 3;  // LinkUp : Disabled
  a.link_layer = static_cast<std::uint8_t>(p.link_layer);
  a.flags = IBV_QPF_GRH_REQUIRED;  // RoCE
}

// The port of a context, or EINVAL.
int query_port_impl(DContext& c, std::uint8_t port, ibv_port_attr& out) {
  fill_port_attr(c.impl->query_port(port), out);
  return 0;
}

int vctx_query_port(ibv_context* ctx, std::uint8_t port, ibv_port_attr* attr, size_t len) noexcept {
  return with_errno("ibv_query_port", [&] {
    if (const int err = check_context(ctx)) return err;
    if (attr == nullptr) return EINVAL;
    ibv_port_attr full{};
    if (const int err = query_port_impl(*DContext::from(ctx), port, full)) return err;
    std::memcpy(attr, &full, std::min(len, sizeof full));
    return 0;
  });
}

void fill_device_attr(DContext& c, ibv_device_attr& a) {
  const DeviceAttr d = c.impl->query_device();
  a = {};
  std::snprintf(a.fw_ver, sizeof a.fw_ver, "%s", d.fw_ver.c_str());
  a.node_guid = htobe64(d.node_guid);
  a.sys_image_guid = htobe64(d.sys_image_guid);
  a.max_mr_size = d.max_mr_size;
  a.page_size_cap = d.page_size_cap;
  a.vendor_id = d.vendor_id;
  a.vendor_part_id = d.vendor_part_id;
  a.hw_ver = d.hw_ver;
  a.max_qp = d.max_qp;
  a.max_qp_wr = d.max_qp_wr;
  a.device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_PORT_ACTIVE_EVENT |
                       IBV_DEVICE_SYS_IMAGE_GUID;
  if (d.mw_type1) a.device_cap_flags |= IBV_DEVICE_MEM_WINDOW;
  if (d.mw_type2) a.device_cap_flags |= IBV_DEVICE_MEM_WINDOW_TYPE_2B;
  if (sim::can_resize_srq(*world())) a.device_cap_flags |= IBV_DEVICE_SRQ_RESIZE;
  a.max_sge = d.max_sge;
  a.max_sge_rd = d.max_sge_rd;
  a.max_cq = d.max_cq;
  a.max_cqe = d.max_cqe;
  a.max_mr = d.max_mr;
  a.max_mw = d.max_mw;
  a.max_pd = d.max_pd;
  a.max_qp_rd_atom = d.max_qp_rd_atom;
  a.max_res_rd_atom = d.max_qp_rd_atom * d.max_qp;
  a.max_qp_init_rd_atom = d.max_qp_init_rd_atom;
  a.atomic_cap = d.atomics ? IBV_ATOMIC_HCA : IBV_ATOMIC_NONE;
  a.max_ah = d.max_ah;
  a.max_srq = d.max_srq;
  a.max_srq_wr = d.max_srq_wr;
  a.max_srq_sge = d.max_srq_sge;
  a.max_pkeys = d.max_pkeys;
  a.local_ca_ack_delay = 15;
  a.phys_port_cnt = d.phys_port_cnt;
}

int vctx_query_device_ex(ibv_context* ctx, const ibv_query_device_ex_input* input,
                         ibv_device_attr_ex* attr, size_t len) noexcept {
  if (input != nullptr && input->comp_mask != 0) return EINVAL;
  if (len < sizeof(ibv_device_attr)) return EINVAL;
  return with_errno("ibv_query_device_ex", [&] {
    if (const int err = check_context(ctx)) return err;
    if (attr == nullptr) return EINVAL;
    ibv_device_attr_ex full{};
    DContext& c = *DContext::from(ctx);
    fill_device_attr(c, full.orig_attr);
    full.phys_port_cnt_ex = full.orig_attr.phys_port_cnt;
    full.device_cap_flags_ex = full.orig_attr.device_cap_flags;
    std::memcpy(attr, &full, std::min(len, sizeof full));
    return 0;
  });
}

// The device's clock: the simulator's virtual time.
int vctx_query_rt_values(ibv_context* ctx, ibv_values_ex* values) noexcept {
  if (values == nullptr) return EINVAL;
  if (values->comp_mask & ~static_cast<std::uint32_t>(IBV_VALUES_MASK_RAW_CLOCK)) return EINVAL;
  return with_errno("ibv_query_rt_values_ex", [&] {
    if (const int err = check_context(ctx)) return err;
    if (values->comp_mask & IBV_VALUES_MASK_RAW_CLOCK) {
      const std::uint64_t ns = DContext::from(ctx)->impl->clock().now_ns();
      values->raw_clock.tv_sec = static_cast<time_t>(ns / 1'000'000'000u);
      values->raw_clock.tv_nsec = static_cast<long>(ns % 1'000'000'000u);
    }
    return 0;
  });
}

int query_gid_entry(DContext& c, std::uint32_t port, std::uint32_t index, ibv_gid_entry& e) {
  if (port < 1 || port > 255) return EINVAL;
  const PortAttr p = c.impl->query_port(static_cast<std::uint8_t>(port));
  if (index >= static_cast<std::uint32_t>(p.gid_tbl_len)) return EINVAL;
  const Gid g = c.impl->query_gid(static_cast<std::uint8_t>(port), static_cast<int>(index));
  if (g.is_zero()) return ENODATA;
  e = {};
  e.gid = abi::to_ibv(g);
  e.gid_index = index;
  e.port_num = port;
  e.gid_type = static_cast<std::uint32_t>(gid_type_of(static_cast<int>(index)));
  e.ndev_ifindex = 0;
  return 0;
}

}  // namespace

ibv_context* make_context(DDevice* device, std::shared_ptr<Context> impl, int cmd_fd) {
  auto c = std::make_unique<DContext>();
  c->device = device;
  c->impl = std::move(impl);
  c->sz = sizeof(verbs_context);
  set_context_ops(*c);
  ibv_context& ctx = c->context;
  ctx.device = &device->dev;
  c->cmd_fd = cmd_fd;
  ctx.cmd_fd = cmd_fd;
  ctx.async_fd = c->impl->async_fd();
  make_blocking(ctx.async_fd);
  ctx.num_comp_vectors = 1;
  ::pthread_mutex_init(&ctx.mutex, nullptr);
  ctx.abi_compat = __VERBS_ABI_IS_EXTENDED;
  global().contexts.push_back(c.get());
  start_progress();
  return &c.release()->context;
}

int ctx_query_port_op(ibv_context* ctx, std::uint8_t port, ibv_port_attr* attr,
                      std::size_t len) noexcept {
  return vctx_query_port(ctx, port, attr, len);
}
int ctx_query_device_ex_op(ibv_context* ctx, const ibv_query_device_ex_input* input,
                           ibv_device_attr_ex* attr, std::size_t len) noexcept {
  return vctx_query_device_ex(ctx, input, attr, len);
}
int ctx_query_rt_values_op(ibv_context* ctx, ibv_values_ex* values) noexcept {
  return vctx_query_rt_values(ctx, values);
}

int query_gid_impl(ibv_context* ctx, std::uint32_t port, std::uint32_t index, ibv_gid_entry& e) {
  return query_gid_entry(*DContext::from(ctx), port, index, e);
}

const DDevice* known_device(const ibv_device* device) noexcept {
  if (device == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  for (const DDevice* d : global().devices) {
    if (&d->dev == device) return d;
  }
  errno = ENODEV;
  return nullptr;
}

}  // namespace verbsim::dropin

// ---------------------------------------------------------------------------------------------
// The device list

extern "C" {

ibv_device** ibv_get_device_list_1_1(int* num_devices) {
  auto held = lock();
  if (held.refused() || world() == nullptr) {
    if (num_devices != nullptr) *num_devices = 0;
    errno = held.refused() ? EDEADLK : EINVAL;
    return nullptr;
  }
  const auto& devs = global().devices;
  auto** list = static_cast<ibv_device**>(std::calloc(devs.size() + 1, sizeof(ibv_device*)));
  if (list == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  for (std::size_t i = 0; i < devs.size(); ++i) list[i] = &devs[i]->dev;
  if (num_devices != nullptr) *num_devices = static_cast<int>(devs.size());
  return list;
}
VERBSIM_DEFAULT_1_1(ibv_get_device_list);
VERBSIM_SAME_TYPE(ibv_get_device_list);

void ibv_free_device_list_1_1(ibv_device** list) { std::free(list); }
VERBSIM_DEFAULT_1_1(ibv_free_device_list);
VERBSIM_SAME_TYPE(ibv_free_device_list);

// The device's name (what libibverbs returns: its own field, so a copy of a device has it
// too); NULL with errno EINVAL for NULL.
const char* ibv_get_device_name_1_1(ibv_device* device) {
  if (device == nullptr) return fail_null<const char>(EINVAL);
  return device->name;
}
VERBSIM_DEFAULT_1_1(ibv_get_device_name);
VERBSIM_SAME_TYPE(ibv_get_device_name);

// The node GUID; 0 with errno EINVAL for NULL, ENODEV for a pointer that is not one of the
// list's devices (a copy: libibverbs would read its provider's data past the struct).
__be64 ibv_get_device_guid_1_1(ibv_device* device) {
  auto held = lock_waiting();
  if (held.refused()) {
    errno = EDEADLK;
    return 0;
  }
  const DDevice* d = known_device(device);
  return d != nullptr ? htobe64(d->guid) : 0;
}
VERBSIM_DEFAULT_1_1(ibv_get_device_guid);
VERBSIM_SAME_TYPE(ibv_get_device_guid);

// The device's index; -1 with errno as ibv_get_device_guid.
int ibv_get_device_index(ibv_device* device) {
  auto held = lock_waiting();
  if (held.refused()) {
    errno = EDEADLK;
    return -1;
  }
  const DDevice* d = known_device(device);
  return d != nullptr ? d->index : -1;
}

// ---------------------------------------------------------------------------------------------
// Contexts

ibv_context* ibv_open_device_1_1(ibv_device* device) {
  return with_null<ibv_context>("ibv_open_device", [&]() -> ibv_context* {
    if (world() == nullptr) return nullptr;
    if (known_device(device) == nullptr) return nullptr;  // errno EINVAL or ENODEV
    // A file standing for /dev/infiniband/uverbsN; ibv_import_device() recognises its dups.
    const int cmd_fd = ::memfd_create(device->name, MFD_CLOEXEC);
    if (cmd_fd < 0) return nullptr;
    std::unique_ptr<Context> ctx = world()->open(device->name);
    if (global().verb_log) ctx = global().verb_log->wrap(std::move(ctx));  // VERBSIM_VERB_LOG
    return make_context(device_of(device), std::move(ctx), cmd_fd);
  });
}
VERBSIM_DEFAULT_1_1(ibv_open_device);
VERBSIM_SAME_TYPE(ibv_open_device);

int ibv_close_device_1_1(ibv_context* context) {
  return with_errno("ibv_close_device", [&] {
    if (const int err = check_context(context)) return err;
    drop_handles_of(context);  // what it still has is gone with it, as with the kernel's file
    DContext* c = DContext::from(context);
    if (c->impl.use_count() == 1) c->impl->destroy();  // the last of it and its imports
    if (c->cmd_fd >= 0) ::close(c->cmd_fd);
    std::erase(global().contexts, static_cast<void*>(c));
    ::pthread_mutex_destroy(&c->context.mutex);
    delete c;
    return 0;
  });
}
VERBSIM_DEFAULT_1_1(ibv_close_device);
VERBSIM_SAME_TYPE(ibv_close_device);

// Another context on the same device and the same underlying objects, from a dup of a
// context's cmd_fd (the fd becomes the new context's). NULL with errno EINVAL when the fd is no
// context's; EOPNOTSUPP on the rxe profile, as rxe (measured).
ibv_context* ibv_import_device(int cmd_fd) {
  return with_null<ibv_context>("ibv_import_device", [&]() -> ibv_context* {
    struct stat want{};
    if (::fstat(cmd_fd, &want) != 0) return nullptr;
    for (void* p : global().contexts) {
      auto* c = static_cast<DContext*>(p);
      struct stat have{};
      if (::fstat(c->cmd_fd, &have) == 0 && have.st_dev == want.st_dev && have.st_ino == want.st_ino) {
        if (!sim::dropin_traits(*world()).import_device) return fail_null<ibv_context>(EOPNOTSUPP);
        return make_context(c->device, c->impl, cmd_fd);
      }
    }
    return fail_null<ibv_context>(EINVAL);
  });
}

// ---------------------------------------------------------------------------------------------
// Queries

int ibv_query_device_1_1(ibv_context* context, ibv_device_attr* attr) {
  return with_errno("ibv_query_device", [&] {
    if (const int err = check_context(context)) return err;
    if (attr == nullptr) return EINVAL;
    fill_device_attr(*DContext::from(context), *attr);
    return 0;
  });
}
VERBSIM_DEFAULT_1_1(ibv_query_device);
VERBSIM_SAME_TYPE(ibv_query_device);

// The exported ibv_query_port takes the old, shorter struct; verbs.h's inline ibv_query_port
// calls the extended op above instead.
int ibv_query_port_1_1(ibv_context* context, std::uint8_t port, _compat_ibv_port_attr* attr) {
  // The old struct is ibv_port_attr without its last member (verbs.h only declares it).
  return vctx_query_port(context, port, reinterpret_cast<ibv_port_attr*>(attr),
                         offsetof(ibv_port_attr, port_cap_flags2));
}
VERBSIM_DEFAULT_1_1(ibv_query_port);
VERBSIM_SAME_TYPE(ibv_query_port);

// 0, or -1 (errno set) for a port or index outside the table; an empty entry reads as zeros.
int ibv_query_gid_1_1(ibv_context* context, std::uint8_t port, int index, ibv_gid* gid) {
  const int err = with_errno("ibv_query_gid", [&] {
    if (const int e = check_context(context)) return e;
    if (index < 0 || gid == nullptr) return EINVAL;
    ibv_gid_entry e{};
    const int r = query_gid_entry(*DContext::from(context), port, static_cast<std::uint32_t>(index), e);
    if (r == ENODATA) {
      std::memset(gid, 0, sizeof *gid);
      return 0;
    }
    if (r == 0) *gid = e.gid;
    return r;
  });
  if (err != 0) {
    errno = err;
    return -1;
  }
  return 0;
}
VERBSIM_DEFAULT_1_1(ibv_query_gid);
VERBSIM_SAME_TYPE(ibv_query_gid);

int _ibv_query_gid_ex(ibv_context* context, std::uint32_t port, std::uint32_t index,
                      ibv_gid_entry* entry, std::uint32_t flags, size_t entry_size) {
  if (flags != 0) return EINVAL;
  return with_errno("ibv_query_gid_ex", [&] {
    if (const int err = check_context(context)) return err;
    if (entry == nullptr) return EINVAL;
    ibv_gid_entry e{};
    const int r = query_gid_entry(*DContext::from(context), port, index, e);
    if (r == 0) std::memcpy(entry, &e, std::min(entry_size, sizeof e));
    return r;
  });
}

// The number of entries written, or -errno (-EINVAL when `max_entries` is too small).
ssize_t _ibv_query_gid_table(ibv_context* context, ibv_gid_entry* entries, size_t max_entries,
                             std::uint32_t flags, size_t entry_size) {
  if (flags != 0 || entry_size == 0) return -EINVAL;
  ssize_t count = 0;
  const int err = with_errno("ibv_query_gid_table", [&] {
    if (const int e = check_context(context)) return e;
    if (entries == nullptr && max_entries != 0) return EINVAL;
    DContext& c = *DContext::from(context);
    const DeviceAttr d = c.impl->query_device();
    for (int port = 1; port <= d.phys_port_cnt; ++port) {
      const PortAttr p = c.impl->query_port(static_cast<std::uint8_t>(port));
      for (int i = 0; i < p.gid_tbl_len; ++i) {
        ibv_gid_entry e{};
        const int r = query_gid_entry(c, static_cast<std::uint32_t>(port),
                                      static_cast<std::uint32_t>(i), e);
        if (r == ENODATA) continue;
        if (r != 0) return r;
        if (static_cast<size_t>(count) >= max_entries) return EINVAL;
        std::memcpy(reinterpret_cast<char*>(entries) + static_cast<size_t>(count) * entry_size, &e,
                    std::min(entry_size, sizeof e));
        ++count;
      }
    }
    return 0;
  });
  return err != 0 ? -err : count;
}

// ibv_query_gid_type (private to rdma-core, declared in its driver.h; ibv_devinfo and pyverbs
// call it). *type is enum ibv_gid_type_sysfs: 0 for IB / RoCE v1, 1 for RoCE v2.
int ibv_query_gid_type(ibv_context* context, std::uint8_t port, unsigned int index, int* type) {
  constexpr int IBV_GID_TYPE_SYSFS_IB_ROCE_V1 = 0;
  constexpr int IBV_GID_TYPE_SYSFS_ROCE_V2 = 1;
  const int err = with_errno("ibv_query_gid_type", [&] {
    if (const int r = check_context(context)) return r;
    if (type == nullptr) return EINVAL;
    ibv_gid_entry e{};
    const int r = query_gid_entry(*DContext::from(context), port, index, e);
    if (r == ENODATA) {
      *type = IBV_GID_TYPE_SYSFS_IB_ROCE_V1;
      return 0;
    }
    if (r == 0) {
      *type = e.gid_type == kGidTypeRoceV2 ? IBV_GID_TYPE_SYSFS_ROCE_V2 : IBV_GID_TYPE_SYSFS_IB_ROCE_V1;
    }
    return r;
  });
  if (err != 0) {
    errno = err;
    return -1;
  }
  return 0;
}

// The simulator's ports have one P_Key, the default 0xffff. 0, or -1 with errno.
int ibv_query_pkey_1_1(ibv_context* context, std::uint8_t port, int index, __be16* pkey) {
  const int err = with_errno("ibv_query_pkey", [&] {
    if (const int e = check_context(context)) return e;
    if (pkey == nullptr) return EINVAL;
    const PortAttr p = DContext::from(context)->impl->query_port(port);
    if (index < 0 || index >= p.pkey_tbl_len) return EINVAL;
    *pkey = htobe16(0xffff);
    return 0;
  });
  if (err != 0) {
    errno = err;
    return -1;
  }
  return 0;
}
VERBSIM_DEFAULT_1_1(ibv_query_pkey);
VERBSIM_SAME_TYPE(ibv_query_pkey);

int ibv_get_pkey_index(ibv_context* context, std::uint8_t port, __be16 pkey) {
  int found = -1;
  const int err = with_errno("ibv_get_pkey_index", [&] {
    if (const int e = check_context(context)) return e;
    const PortAttr p = DContext::from(context)->impl->query_port(port);
    for (int i = 0; i < p.pkey_tbl_len; ++i) {
      if (pkey == htobe16(0xffff)) {
        found = i;
        return 0;
      }
    }
    return ENOENT;
  });
  if (err != 0) {
    errno = err;
    return -1;
  }
  return found;
}

// ---------------------------------------------------------------------------------------------
// Async events

int ibv_get_async_event_1_1(ibv_context* context, ibv_async_event* event) {
  {
    auto held = lock();
    if (held.refused() || check_context(context) != 0 || event == nullptr) {
      errno = held.refused() ? EDEADLK : EINVAL;
      return -1;
    }
  }
  DContext* c = DContext::from(context);
  int err = 0;
  for (;;) {
    struct Attempt {
      DContext* c;
      int fd;
      AsyncEvent ev;
    } a{c, context->async_fd, {}};
    try {
      err = shared_wait("ibv_get_async_event", a.fd, is_nonblocking(a.fd), [](void* p) {
        auto* at = static_cast<Attempt*>(p);
        if (!readable(at->fd)) return EAGAIN;
        return at->c->impl->get_async_event(at->ev, Wait::nonblocking).value();
      }, &a);
    } catch (...) {
      err = errno_of_current_exception("ibv_get_async_event");
    }
    if (err != 0) break;
    auto held = lock();  // not refused: the first one was not
    *event = {};
    event->event_type = static_cast<ibv_event_type>(a.ev.type);
    if (a.ev.qp != nullptr) {
      auto* q = wrapper_of<DQp>(a.ev.qp);
      if (q == nullptr) continue;  // destroyed since: the event is stale
      event->element.qp = q->ibv();
    } else if (a.ev.cq != nullptr) {
      auto* q = wrapper_of<DCq>(a.ev.cq);
      if (q == nullptr) continue;
      event->element.cq = q->ibv();
    } else if (a.ev.srq != nullptr) {
      auto* s = wrapper_of<DSrq>(a.ev.srq);
      if (s == nullptr) continue;
      event->element.srq = s;
    } else {
      event->element.port_num = a.ev.port_num;
    }
    return 0;
  }
  errno = err;
  return -1;
}
VERBSIM_DEFAULT_1_1(ibv_get_async_event);
VERBSIM_SAME_TYPE(ibv_get_async_event);

// Counts the event on its object; an event naming no live object (a copy, a destroyed one) is
// ignored.
void ibv_ack_async_event_1_1(ibv_async_event* event) {
  auto held = lock();
  if (held.refused() || event == nullptr) return;
  switch (event->event_type) {
    case IBV_EVENT_CQ_ERR:
      if (check(event->element.cq, Kind::cq) == 0) ++event->element.cq->async_events_completed;
      break;
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED:
      if (check(event->element.qp, Kind::qp) == 0) ++event->element.qp->events_completed;
      break;
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED:
      if (check(event->element.srq, Kind::srq) == 0) ++event->element.srq->events_completed;
      break;
    default: break;
  }
}
VERBSIM_DEFAULT_1_1(ibv_ack_async_event);
VERBSIM_SAME_TYPE(ibv_ack_async_event);

// ---------------------------------------------------------------------------------------------
// Strings (the texts libibverbs prints)

const char* ibv_node_type_str(ibv_node_type node_type) {
  static const char* const names[] = {"unknown", "InfiniBand channel adapter", "InfiniBand switch",
                                      "InfiniBand router", "iWARP NIC", "usNIC", "usNIC UDP",
                                      "unspecified"};
  const int i = static_cast<int>(node_type);
  return i >= 0 && i < static_cast<int>(std::size(names)) ? names[i] : "unknown";
}

const char* ibv_port_state_str(ibv_port_state port_state) {
  static const char* const names[] = {"PORT_NOP", "PORT_DOWN", "PORT_INIT", "PORT_ARMED",
                                      "PORT_ACTIVE", "PORT_ACTIVE_DEFER"};
  const int i = static_cast<int>(port_state);
  return i >= 0 && i < static_cast<int>(std::size(names)) ? names[i] : "unknown";
}

const char* ibv_event_type_str(ibv_event_type event) {
  static const char* const names[] = {
      "CQ error",           "local work queue catastrophic error",
      "invalid request local work queue error", "local access violation work queue error",
      "communication established", "send queue drained",
      "path migrated",      "path migration request error",
      "local catastrophic error", "port active",
      "port error",         "LID change",
      "P_Key change",       "SM change",
      "SRQ catastrophic error", "SRQ limit reached",
      "last WQE reached",   "client reregistration",
      "GID table change",   "WQ fatal"};
  const int i = static_cast<int>(event);
  return i >= 0 && i < static_cast<int>(std::size(names)) ? names[i] : "unknown";
}

const char* ibv_wc_status_str(ibv_wc_status status) {
  static const char* const names[] = {"success",
                                      "local length error",
                                      "local QP operation error",
                                      "local EE context operation error",
                                      "local protection error",
                                      "Work Request Flushed Error",
                                      "memory management operation error",
                                      "bad response error",
                                      "local access error",
                                      "remote invalid request error",
                                      "remote access error",
                                      "remote operation error",
                                      "transport retry counter exceeded",
                                      "RNR retry counter exceeded",
                                      "local RDD violation error",
                                      "remote invalid RD request",
                                      "aborted error",
                                      "invalid EE context number",
                                      "invalid EE context state",
                                      "fatal error",
                                      "response timeout error",
                                      "general error",
                                      "TM error",
                                      "TM rendezvous pending"};
  const int i = static_cast<int>(status);
  return i >= 0 && i < static_cast<int>(std::size(names)) ? names[i] : "unknown";
}

// ---------------------------------------------------------------------------------------------
// Rates

int ibv_rate_to_mult(ibv_rate rate) {
  switch (rate) {
    case IBV_RATE_2_5_GBPS: return 1;
    case IBV_RATE_5_GBPS: return 2;
    case IBV_RATE_10_GBPS: return 4;
    case IBV_RATE_20_GBPS: return 8;
    case IBV_RATE_30_GBPS: return 12;
    case IBV_RATE_40_GBPS: return 16;
    case IBV_RATE_60_GBPS: return 24;
    case IBV_RATE_80_GBPS: return 32;
    case IBV_RATE_120_GBPS: return 48;
    case IBV_RATE_28_GBPS: return 11;
    case IBV_RATE_50_GBPS: return 20;
    case IBV_RATE_400_GBPS: return 160;
    case IBV_RATE_600_GBPS: return 240;
    case IBV_RATE_800_GBPS: return 320;
    case IBV_RATE_1200_GBPS: return 480;
    default: return -1;
  }
}

ibv_rate mult_to_ibv_rate(int mult) {
  for (int r = IBV_RATE_2_5_GBPS; r <= IBV_RATE_1200_GBPS; ++r) {
    if (ibv_rate_to_mult(static_cast<ibv_rate>(r)) == mult) return static_cast<ibv_rate>(r);
  }
  return IBV_RATE_MAX;
}

int ibv_rate_to_mbps(ibv_rate rate) {
  switch (rate) {
    case IBV_RATE_2_5_GBPS: return 2500;
    case IBV_RATE_5_GBPS: return 5000;
    case IBV_RATE_10_GBPS: return 10000;
    case IBV_RATE_20_GBPS: return 20000;
    case IBV_RATE_30_GBPS: return 30000;
    case IBV_RATE_40_GBPS: return 40000;
    case IBV_RATE_60_GBPS: return 60000;
    case IBV_RATE_80_GBPS: return 80000;
    case IBV_RATE_120_GBPS: return 120000;
    case IBV_RATE_14_GBPS: return 14062;
    case IBV_RATE_56_GBPS: return 56250;
    case IBV_RATE_112_GBPS: return 112500;
    case IBV_RATE_168_GBPS: return 168750;
    case IBV_RATE_25_GBPS: return 25781;
    case IBV_RATE_100_GBPS: return 103125;
    case IBV_RATE_200_GBPS: return 206250;
    case IBV_RATE_300_GBPS: return 309375;
    case IBV_RATE_28_GBPS: return 28125;
    case IBV_RATE_50_GBPS: return 53125;
    case IBV_RATE_400_GBPS: return 425000;
    case IBV_RATE_600_GBPS: return 637500;
    case IBV_RATE_800_GBPS: return 850000;
    case IBV_RATE_1200_GBPS: return 1275000;
    default: return -1;
  }
}

ibv_rate mbps_to_ibv_rate(int mbps) {
  for (int r = IBV_RATE_2_5_GBPS; r <= IBV_RATE_1200_GBPS; ++r) {
    if (ibv_rate_to_mbps(static_cast<ibv_rate>(r)) == mbps) return static_cast<ibv_rate>(r);
  }
  return IBV_RATE_MAX;
}

// ---------------------------------------------------------------------------------------------
// fork(): the simulator's memory is the process's own, nothing to protect.

int ibv_fork_init(void) { return 0; }
ibv_fork_status ibv_is_fork_initialized(void) { return IBV_FORK_UNNEEDED; }
int ibv_dontfork_range(void*, size_t) { return 0; }
int ibv_dofork_range(void*, size_t) { return 0; }

// ---------------------------------------------------------------------------------------------
// sysfs: the process's own tree, and the port counters answered live (sysfs.hpp).

int ibv_read_sysfs_file(const char* dir, const char* file, char* buf, size_t size) {
  return read_sysfs_file(dir, file, buf, size);
}

// The root of the process's sysfs tree (<root>/class/infiniband/<dev> is a device's
// ibdev_path), "/sys" when the world or its tree could not be made.
const char* ibv_get_sysfs_path(void) {
  auto held = lock_waiting();
  if (!held.refused()) world();  // makes the tree; a failure is printed there
  return sysfs_root();
}

}  // extern "C"
