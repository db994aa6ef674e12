// The verbs_context extension: the extended verbs verbs.h reaches through verbs_get_ctx_op.
// Ops left null make verbs.h's inline wrappers fail with EOPNOTSUPP themselves (XRC domains,
// flows, device memory, thread and parent domains, work queues, counters, CQ moderation).
#include "objects.hpp"
#include "ops.hpp"
#include "state.hpp"

namespace verbsim::dropin {

namespace {

ibv_cq_ex* create_cq_ex(ibv_context* context, ibv_cq_init_attr_ex* attr) noexcept {
  return with_null<ibv_cq_ex>("ibv_create_cq_ex", [&] { return make_cq(context, *attr); });
}

ibv_qp* create_qp_ex(ibv_context* context, ibv_qp_init_attr_ex* attr) noexcept {
  return with_null<ibv_qp>("ibv_create_qp_ex", [&] { return make_qp(context, *attr); });
}

}  // namespace

void fill_extended_ops(DContext& c) noexcept {
  c.create_cq_ex = create_cq_ex;
  c.create_qp_ex = create_qp_ex;
}

}  // namespace verbsim::dropin
