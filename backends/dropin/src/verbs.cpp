// Protection domains, memory regions, address handles, completion channels and shared receive
// queues.
#include <arpa/inet.h>
#include <endian.h>

#include <cstring>

#include "objects.hpp"
#include "ops.hpp"
#include "state.hpp"
#include "symver.hpp"
#include "verbsim/abi/translate.hpp"
#include "verbsim/sim/extensions.hpp"

#undef ibv_reg_mr
#undef ibv_reg_mr_iova

using namespace verbsim;
using namespace verbsim::dropin;

namespace {

// The flags the core's Access has, with the same values (IBV_ACCESS_MW_BIND: memory windows
// may be bound to the MR; IBV_ACCESS_ZERO_BASED: none may, and it is addressed from its iova
// all the same, as on rxe).
constexpr unsigned kCoreAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
                                 IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED;
static_assert(IBV_ACCESS_MW_BIND == static_cast<unsigned>(Access::mw_bind));
static_assert(IBV_ACCESS_ZERO_BASED == static_cast<unsigned>(Access::zero_based));
// Accepted and without effect on the simulator: huge pages are the program's business, relaxed
// ordering (an optional flag: providers that do not know it ignore it) changes nothing in a
// simulation that delivers in order anyway.
constexpr unsigned kHarmlessAccess = IBV_ACCESS_HUGETLB;

// The core access flags for a registration, or an errno for flags the simulator lacks.
int mr_access(unsigned access, Access& out) noexcept {
  access &= ~static_cast<unsigned>(IBV_ACCESS_OPTIONAL_RANGE);
  if ((access & IBV_ACCESS_ON_DEMAND) != 0) return EOPNOTSUPP;
  if ((access & ~(kCoreAccess | kHarmlessAccess)) != 0) return EINVAL;
  out = static_cast<Access>(access & kCoreAccess);
  return 0;
}

ibv_mr* reg_mr(ibv_pd* pd, void* addr, size_t length, std::uint64_t iova, unsigned access) {
  return with_null<ibv_mr>("ibv_reg_mr", [&]() -> ibv_mr* {
    if (const int err = as_write_cmd(check(pd, Kind::pd))) return fail_null<ibv_mr>(err);
    // A range past the end of the address space is EINVAL before anything else looks at it
    // (the kernel's ib_umem_get).
    const auto start = reinterpret_cast<std::uintptr_t>(addr);
    if (length > UINTPTR_MAX - start) return fail_null<ibv_mr>(EINVAL);
    Access a{};
    if (const int err = mr_access(access, a)) return fail_null<ibv_mr>(err);
    DPd* p = DPd::from(pd);
    auto mr = std::make_unique<DMr>();
    mr->impl = p->real().reg_mr_iova(addr, length, iova, a);
    mr->context = pd->context;
    mr->pd = pd;
    mr->addr = addr;
    mr->length = length;
    mr->lkey = mr->impl->lkey();
    mr->rkey = mr->impl->rkey();
    mr->access = access;
    mr->handle = add_handle(mr.get(), pd->context, Kind::mr);
    global().mrs[mr->handle] = mr.get();
    return mr.release();
  });
}

}  // namespace

extern "C" {

// ---------------------------------------------------------------------------------------------
// Protection domains

ibv_pd* ibv_alloc_pd_1_1(ibv_context* context) {
  return with_null<ibv_pd>("ibv_alloc_pd", [&]() -> ibv_pd* {
    if (const int err = check_context(context)) return fail_null<ibv_pd>(err);
    auto pd = std::make_unique<DPd>();
    pd->impl = DContext::from(context)->impl->alloc_pd();
    pd->context = context;
    pd->handle = add_handle(pd.get(), context, Kind::pd);
    global().pds[pd->handle] = pd.get();
    return pd.release();
  });
}
VERBSIM_DEFAULT_1_1(ibv_alloc_pd);
VERBSIM_SAME_TYPE(ibv_alloc_pd);

// 0, or EBUSY while MRs, QPs, SRQs or AHs still use the PD; ENOENT (EINVAL) for a PD that is
// not the one under its handle in its context (another kind's handle).
int ibv_dealloc_pd_1_1(ibv_pd* pd) {
  return with_errno("ibv_dealloc_pd", [&] {
    if (const int err = check(pd, Kind::pd)) return err;
    DPd* p = DPd::from(pd);
    if (p->parent == nullptr) p->impl->destroy();
    if (p->imported) {
      drop_imported(p);
    } else {
      global().pds.erase(p->handle);
      drop_handle(p->handle);
    }
    delete p;
    return 0;
  });
}
VERBSIM_DEFAULT_1_1(ibv_dealloc_pd);
VERBSIM_SAME_TYPE(ibv_dealloc_pd);

// ---------------------------------------------------------------------------------------------
// Memory regions

ibv_mr* ibv_reg_mr_1_1(ibv_pd* pd, void* addr, size_t length, int access) {
  return reg_mr(pd, addr, length, reinterpret_cast<std::uintptr_t>(addr),
                static_cast<unsigned>(access));
}
VERBSIM_DEFAULT_1_1(ibv_reg_mr);
VERBSIM_SAME_TYPE(ibv_reg_mr);

ibv_mr* ibv_reg_mr_iova(ibv_pd* pd, void* addr, size_t length, std::uint64_t iova, int access) {
  return reg_mr(pd, addr, length, iova, static_cast<unsigned>(access));
}

ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, std::uint64_t iova,
                         unsigned int access) {
  return reg_mr(pd, addr, length, iova, access);
}

// dma-buf memory belongs to another device: not modelled.
ibv_mr* ibv_reg_dmabuf_mr(ibv_pd*, std::uint64_t, size_t, std::uint64_t, int, int) {
  return fail_null<ibv_mr>(EOPNOTSUPP);
}

int ibv_dereg_mr_1_1(ibv_mr* mr) {
  return with_errno("ibv_dereg_mr", [&] {
    if (const int err = check(mr, Kind::mr)) return err;
    DMr* m = DMr::from(mr);
    m->impl->destroy();
    if (m->imported) {
      drop_imported(m);
    } else {
      global().mrs.erase(m->handle);
      drop_handle(m->handle);
    }
    delete m;
    return 0;
  });
}
VERBSIM_DEFAULT_1_1(ibv_dereg_mr);
VERBSIM_SAME_TYPE(ibv_dereg_mr);

// 0, or one of enum ibv_rereg_mr_err_code with errno set (IBV_REREG_MR_ERR_INPUT for bad
// arguments, IBV_REREG_MR_ERR_CMD when the device refuses).
int ibv_rereg_mr_1_1(ibv_mr* mr, int flags, ibv_pd* pd, void* addr, size_t length, int access) {
  if ((flags & ~IBV_REREG_MR_FLAGS_SUPPORTED) != 0 ||
      ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) != 0 && (addr == nullptr || length == 0)) ||
      (access != 0 && (flags & IBV_REREG_MR_CHANGE_ACCESS) == 0)) {
    errno = EINVAL;
    return IBV_REREG_MR_ERR_INPUT;
  }
  const int err = with_errno("ibv_rereg_mr", [&] {
    // The MR as uverbs' rereg_mr looks it up (uobj_get_write: ENOENT), the new PD as a write
    // command does (EINVAL).
    if (const int e = check(mr, Kind::mr)) return e;
    if ((flags & IBV_REREG_MR_CHANGE_PD) != 0) {
      if (const int e = as_write_cmd(check(pd, Kind::pd))) return e;
    }
    DMr* m = DMr::from(mr);
    MrChange r;
    if (flags & IBV_REREG_MR_CHANGE_PD) r.pd = &DPd::from(pd)->real();
    if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
      r.addr = addr;
      r.length = length;
    }
    if (flags & IBV_REREG_MR_CHANGE_ACCESS) {
      Access a{};
      if (const int e = mr_access(static_cast<unsigned>(access), a)) return e;
      r.access = a;
    }
    m->impl->rereg(r);
    if (flags & IBV_REREG_MR_CHANGE_PD) m->pd = pd;
    if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
      m->addr = addr;
      m->length = length;
    }
    if (flags & IBV_REREG_MR_CHANGE_ACCESS) m->access = static_cast<unsigned>(access);
    m->lkey = m->impl->lkey();
    m->rkey = m->impl->rkey();
    return 0;
  });
  if (err != 0) {
    errno = err;
    return IBV_REREG_MR_ERR_CMD;
  }
  return 0;
}
VERBSIM_DEFAULT_1_1(ibv_rereg_mr);
VERBSIM_SAME_TYPE(ibv_rereg_mr);

// Imports: another ibv_pd / ibv_mr for an object of a context this one was imported from
// (ibv_import_device), found by its handle. Unimporting frees the wrapper only; the object
// stays with its owner. NULL with errno EINVAL for a handle no related context has.
ibv_pd* ibv_import_pd(ibv_context* context, std::uint32_t handle) {
  return with_null<ibv_pd>("ibv_import_pd", [&]() -> ibv_pd* {
    if (const int err = check_context(context)) return fail_null<ibv_pd>(err);
    const auto it = global().pds.find(handle);
    if (it == global().pds.end()) return fail_null<ibv_pd>(EINVAL);
    DPd* orig = static_cast<DPd*>(it->second);
    if (DContext::from(orig->context)->impl != DContext::from(context)->impl) {
      return fail_null<ibv_pd>(EINVAL);
    }
    auto pd = std::make_unique<DPd>();
    pd->impl = orig->impl;
    pd->context = context;
    pd->handle = handle;
    pd->imported = true;
    add_imported(handle, pd.get(), context, Kind::pd);
    return pd.release();
  });
}

void ibv_unimport_pd(ibv_pd* pd) {
  auto held = lock();
  if (held.refused() || check(pd, Kind::pd) != 0) return;
  DPd* p = DPd::from(pd);
  if (!p->imported) return;
  drop_imported(p);
  delete p;
}

ibv_mr* ibv_import_mr(ibv_pd* pd, std::uint32_t handle) {
  return with_null<ibv_mr>("ibv_import_mr", [&]() -> ibv_mr* {
    if (const int err = as_write_cmd(check(pd, Kind::pd))) return fail_null<ibv_mr>(err);
    const auto it = global().mrs.find(handle);
    if (it == global().mrs.end()) return fail_null<ibv_mr>(EINVAL);
    DMr* orig = static_cast<DMr*>(it->second);
    if (&DPd::from(orig->pd)->real() != &DPd::from(pd)->real()) return fail_null<ibv_mr>(EINVAL);
    auto mr = std::make_unique<DMr>();
    mr->impl = orig->impl;
    mr->context = pd->context;
    mr->pd = pd;
    mr->addr = nullptr;  // as libibverbs imports it: the kernel does not say where it is
    mr->length = orig->length;
    mr->lkey = orig->lkey;
    mr->rkey = orig->rkey;
    mr->handle = handle;
    mr->access = orig->access;
    mr->imported = true;
    add_imported(handle, mr.get(), pd->context, Kind::mr);
    return mr.release();
  });
}

void ibv_unimport_mr(ibv_mr* mr) {
  auto held = lock();
  if (held.refused() || check(mr, Kind::mr) != 0) return;
  DMr* m = DMr::from(mr);
  if (!m->imported) return;
  drop_imported(m);
  delete m;
}

// Device memory is not modelled.
ibv_dm* ibv_import_dm(ibv_context*, std::uint32_t) { return fail_null<ibv_dm>(EOPNOTSUPP); }
void ibv_unimport_dm(ibv_dm*) {}

// ---------------------------------------------------------------------------------------------
// Address handles

ibv_ah* ibv_create_ah_1_1(ibv_pd* pd, ibv_ah_attr* attr) {
  return with_null<ibv_ah>("ibv_create_ah", [&]() -> ibv_ah* {
    if (const int err = as_write_cmd(check(pd, Kind::pd))) return fail_null<ibv_ah>(err);
    if (attr == nullptr) return fail_null<ibv_ah>(EINVAL);
    auto ah = std::make_unique<DAh>();
    ah->impl = DPd::from(pd)->real().create_ah(abi::from_ibv(*attr));
    ah->context = pd->context;
    ah->pd = pd;
    ah->handle = add_handle(ah.get(), pd->context, Kind::ah);
    return ah.release();
  });
}
VERBSIM_DEFAULT_1_1(ibv_create_ah);
VERBSIM_SAME_TYPE(ibv_create_ah);

int ibv_destroy_ah_1_1(ibv_ah* ah) {
  return with_errno("ibv_destroy_ah", [&] {
    if (const int err = check(ah, Kind::ah)) return err;
    DAh* a = DAh::from(ah);
    a->impl->destroy();
    drop_handle(a->handle);
    delete a;
    return 0;
  });
}
VERBSIM_DEFAULT_1_1(ibv_destroy_ah);
VERBSIM_SAME_TYPE(ibv_destroy_ah);

// The address vector that answers a UD receive: its GRH (the first 40 bytes of the receive
// buffer) names the sender's GID, as an IPv6 header or, for RoCE v2 over IPv4, as an IPv4 header
// in its last 20 bytes. 0, or -1 with errno (EINVAL without a GRH; ENOENT when the receiving GID
// is not in the port's table).
int ibv_init_ah_from_wc(ibv_context* context, std::uint8_t port, ibv_wc* wc, ibv_grh* grh,
                        ibv_ah_attr* ah_attr) {
  if (wc == nullptr || ah_attr == nullptr || (wc->wc_flags & IBV_WC_GRH) == 0 || grh == nullptr) {
    errno = EINVAL;
    return -1;
  }
  ibv_gid sgid{};
  ibv_gid dgid{};
  const auto* raw = reinterpret_cast<const std::uint8_t*>(grh);
  std::uint32_t flow_label = 0;
  std::uint8_t hop_limit = 0;
  std::uint8_t tclass = 0;
  if ((raw[0] >> 4) == 6) {
    sgid = grh->sgid;
    dgid = grh->dgid;
    const std::uint32_t vtf = be32toh(grh->version_tclass_flow);
    flow_label = vtf & 0xfffff;
    tclass = static_cast<std::uint8_t>(vtf >> 20);
    hop_limit = grh->hop_limit;
  } else if ((raw[20] >> 4) == 4) {
    const std::uint8_t* ip = raw + 20;
    sgid.raw[10] = sgid.raw[11] = dgid.raw[10] = dgid.raw[11] = 0xff;
    std::memcpy(sgid.raw + 12, ip + 12, 4);
    std::memcpy(dgid.raw + 12, ip + 16, 4);
    tclass = ip[1];
    hop_limit = ip[8];
  } else {
    errno = EPROTONOSUPPORT;
    return -1;
  }
  int index = -1;
  const int err = with_errno("ibv_init_ah_from_wc", [&] {
    if (const int e = check_context(context)) return e;
    for (std::uint32_t i = 0; i < 256; ++i) {
      ibv_gid_entry e{};
      const int r = query_gid_impl(context, port, i, e);
      if (r == EINVAL) break;
      if (r == 0 && std::memcmp(e.gid.raw, dgid.raw, sizeof dgid.raw) == 0) {
        index = static_cast<int>(i);
        return 0;
      }
    }
    return ENOENT;
  });
  if (err != 0) {
    errno = err;
    return -1;
  }
  *ah_attr = {};
  ah_attr->grh.dgid = sgid;
  ah_attr->grh.sgid_index = static_cast<std::uint8_t>(index);
  ah_attr->grh.flow_label = flow_label;
  ah_attr->grh.hop_limit = hop_limit != 0 ? hop_limit : 0xff;
  ah_attr->grh.traffic_class = tclass;
  ah_attr->is_global = 1;
  ah_attr->dlid = wc->slid;
  ah_attr->sl = wc->sl;
  ah_attr->src_path_bits = wc->dlid_path_bits;
  ah_attr->port_num = port;
  return 0;
}

ibv_ah* ibv_create_ah_from_wc(ibv_pd* pd, ibv_wc* wc, ibv_grh* grh, std::uint8_t port) {
  if (pd == nullptr) return fail_null<ibv_ah>(EINVAL);
  ibv_ah_attr attr{};
  if (ibv_init_ah_from_wc(pd->context, port, wc, grh, &attr) != 0) return nullptr;
  return ibv_create_ah_1_1(pd, &attr);
}

// Multicast is not modelled by the simulator.
int ibv_attach_mcast_1_1(ibv_qp*, const ibv_gid*, std::uint16_t) { return EOPNOTSUPP; }
VERBSIM_DEFAULT_1_1(ibv_attach_mcast);
VERBSIM_SAME_TYPE(ibv_attach_mcast);
int ibv_detach_mcast_1_1(ibv_qp*, const ibv_gid*, std::uint16_t) { return EOPNOTSUPP; }
VERBSIM_DEFAULT_1_1(ibv_detach_mcast);
VERBSIM_SAME_TYPE(ibv_detach_mcast);

// ---------------------------------------------------------------------------------------------
// Completion channels

ibv_comp_channel* ibv_create_comp_channel(ibv_context* context) {
  return with_null<ibv_comp_channel>("ibv_create_comp_channel", [&]() -> ibv_comp_channel* {
    if (const int err = check_context(context)) return fail_null<ibv_comp_channel>(err);
    auto ch = std::make_unique<DChannel>();
    ch->impl = DContext::from(context)->impl->create_comp_channel();
    ch->context = context;
    ch->fd = ch->impl->fd();
    ch->refcnt = 0;
    make_blocking(ch->fd);
    global().channels.push_back(ch.get());
    return ch.release();
  });
}

// 0, or EBUSY while CQs use the channel; EINVAL for a pointer that is no live channel.
int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
  return with_errno("ibv_destroy_comp_channel", [&] {
    if (const int err = check_channel(channel, EINVAL)) return err;
    DChannel* c = DChannel::from(channel);
    if (c->refcnt > 0) return EBUSY;
    c->impl->destroy();
    std::erase(global().channels, static_cast<const void*>(c));
    delete c;
    return 0;
  });
}

// ---------------------------------------------------------------------------------------------
// Shared receive queues

ibv_srq* ibv_create_srq_1_1(ibv_pd* pd, ibv_srq_init_attr* init) {
  return with_null<ibv_srq>("ibv_create_srq", [&]() -> ibv_srq* {
    if (const int err = as_write_cmd(check(pd, Kind::pd))) return fail_null<ibv_srq>(err);
    if (init == nullptr) return fail_null<ibv_srq>(EINVAL);
    auto srq = std::make_unique<DSrq>();
    SrqInitAttr a;
    a.max_wr = init->attr.max_wr;
    a.max_sge = init->attr.max_sge;
    a.srq_limit = init->attr.srq_limit;
    srq->impl = DPd::from(pd)->real().create_srq(a);
    if (!sim::dropin_traits(*world()).create_reports_requested) {
      const SrqAttr got = srq->impl->query();
      init->attr.max_wr = got.max_wr;
      init->attr.max_sge = got.max_sge;
    }
    srq->context = pd->context;
    srq->srq_context = init->srq_context;
    srq->pd = pd;
    init_sync(srq->mutex, srq->cond);
    srq->handle = add_handle(srq.get(), pd->context, Kind::srq);
    remember(srq->impl.get(), srq.get());
    return srq.release();
  });
}
VERBSIM_DEFAULT_1_1(ibv_create_srq);
VERBSIM_SAME_TYPE(ibv_create_srq);

// 0, or an errno. IBV_SRQ_MAX_WR resizes the SRQ where the device can (the rxe profile, as
// rxe: sim::resize_srq); the core API itself refuses it.
int ibv_modify_srq_1_1(ibv_srq* srq, ibv_srq_attr* attr, int mask) {
  return with_errno("ibv_modify_srq", [&] {
    if (const int err = as_write_cmd(check(srq, Kind::srq))) return err;
    if (attr == nullptr) return EINVAL;
    SharedReceiveQueue& impl = *DSrq::from(srq)->impl;
    if ((mask & IBV_SRQ_MAX_WR) != 0) sim::resize_srq(impl, attr->max_wr);
    SrqAttr a;
    a.max_sge = attr->max_sge;
    a.srq_limit = attr->srq_limit;
    impl.modify(a, static_cast<SrqAttrMask>(mask & ~IBV_SRQ_MAX_WR));
    return 0;
  });
}
VERBSIM_DEFAULT_1_1(ibv_modify_srq);
VERBSIM_SAME_TYPE(ibv_modify_srq);

int ibv_query_srq_1_1(ibv_srq* srq, ibv_srq_attr* attr) {
  return with_errno("ibv_query_srq", [&] {
    if (const int err = as_write_cmd(check(srq, Kind::srq))) return err;
    if (attr == nullptr) return EINVAL;
    const SrqAttr a = DSrq::from(srq)->impl->query();
    attr->max_wr = a.max_wr;
    attr->max_sge = a.max_sge;
    attr->srq_limit = a.srq_limit;
    return 0;
  });
}
VERBSIM_DEFAULT_1_1(ibv_query_srq);
VERBSIM_SAME_TYPE(ibv_query_srq);

// 0, or EBUSY while QPs use the SRQ.
int ibv_destroy_srq_1_1(ibv_srq* srq) {
  return with_errno("ibv_destroy_srq", [&] {
    if (const int err = check(srq, Kind::srq)) return err;
    DSrq* s = DSrq::from(srq);
    s->impl->destroy();
    drop_handle(s->handle);
    forget(s->impl.get());
    destroy_sync(s->mutex, s->cond);
    delete s;
    return 0;
  });
}
VERBSIM_DEFAULT_1_1(ibv_destroy_srq);
VERBSIM_SAME_TYPE(ibv_destroy_srq);

}  // extern "C"
