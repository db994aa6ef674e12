// A context's ops: the one table of them (set_context_ops), and the extended verbs no other file
// has. Ops left null make verbs.h's inline wrappers fail with EOPNOTSUPP themselves (XRC
// domains, flows, device memory, thread domains, work queues, counters, CQ moderation).
#include "objects.hpp"
#include "ops.hpp"
#include "state.hpp"
#include "verbsim/sim/extensions.hpp"

namespace verbsim::dropin {

namespace {

ibv_cq_ex* create_cq_ex(ibv_context* context, ibv_cq_init_attr_ex* attr) noexcept {
  return with_null<ibv_cq_ex>("ibv_create_cq_ex", [&]() -> ibv_cq_ex* {
    if (attr == nullptr) return fail_null<ibv_cq_ex>(EINVAL);
    return make_cq(context, *attr);
  });
}

ibv_qp* create_qp_ex(ibv_context* context, ibv_qp_init_attr_ex* attr) noexcept {
  return with_null<ibv_qp>("ibv_create_qp_ex", [&]() -> ibv_qp* {
    if (attr == nullptr) return fail_null<ibv_qp>(EINVAL);
    return make_qp(context, *attr);
  });
}

// A parent domain: a PD whose resources belong to the PD it wraps. The custom allocators it
// may carry are for a provider's queue buffers; the simulator keeps its queues itself and never
// calls them. The rxe profile has none, as rxe (EOPNOTSUPP, measured).
ibv_pd* alloc_parent_domain(ibv_context* context, ibv_parent_domain_init_attr* attr) noexcept {
  return with_null<ibv_pd>("ibv_alloc_parent_domain", [&]() -> ibv_pd* {
    if (const int err = check_context(context)) return fail_null<ibv_pd>(err);
    if (!sim::dropin_traits(*world()).parent_domain) return fail_null<ibv_pd>(EOPNOTSUPP);
    constexpr std::uint32_t kKnown =
        IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
    if (attr == nullptr || check(attr->pd, Kind::pd) != 0 || (attr->comp_mask & ~kKnown) != 0) {
      return fail_null<ibv_pd>(EINVAL);
    }
    if (attr->td != nullptr) return fail_null<ibv_pd>(EOPNOTSUPP);  // no thread domains
    DPd* base = DPd::from(attr->pd);
    if (base->parent != nullptr) return fail_null<ibv_pd>(EINVAL);
    auto pd = std::make_unique<DPd>();
    pd->parent = base;
    pd->context = context;
    pd->handle = add_handle(pd.get(), context, Kind::pd);
    if (attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT) pd->pd_context = attr->pd_context;
    return pd.release();
  });
}

}  // namespace

// Sorted by op name. `o.` is ibv_context::ops, `c.` the verbs_context extension.
void set_context_ops(DContext& c) noexcept {
  ibv_context_ops& o = c.context.ops;
  o = {};
  o.alloc_mw = mw_alloc_op;
  c.alloc_parent_domain = alloc_parent_domain;
  o.bind_mw = mw_bind_op;
  c.create_cq_ex = create_cq_ex;
  c.create_qp_ex = create_qp_ex;
  o.dealloc_mw = mw_dealloc_op;
  o.poll_cq = cq_poll_op;
  o.post_recv = qp_post_recv_op;
  o.post_send = qp_post_send_op;
  o.post_srq_recv = srq_post_recv_op;
  c.query_device_ex = ctx_query_device_ex_op;
  c.query_port = ctx_query_port_op;
  c.query_rt_values = ctx_query_rt_values_op;
  o.req_notify_cq = cq_notify_op;
}

}  // namespace verbsim::dropin
