// What the drop-in's source files share beyond the objects: the function tables a context
// carries, and helpers one file defines for another.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "objects.hpp"

namespace verbsim::dropin {

// ibv_context::ops: the data path (post_send, post_recv, poll_cq, req_notify_cq,
// post_srq_recv) and the memory window verbs (alloc_mw, dealloc_mw, bind_mw) that verbs.h's
// inline functions call. qp.cpp.
const ibv_context_ops& data_path_ops() noexcept;

// ibv_poll_cq and ibv_req_notify_cq, for data_path_ops. cq.cpp.
int cq_poll_op(ibv_cq* cq, int n, ibv_wc* wc) noexcept;
int cq_notify_op(ibv_cq* cq, int solicited_only) noexcept;

// Memory windows: ibv_context_ops' alloc_mw, dealloc_mw and bind_mw, which verbs.h's inline
// ibv_alloc_mw, ibv_dealloc_mw and ibv_bind_mw call. mw.cpp.
ibv_mw* mw_alloc_op(ibv_pd* pd, ibv_mw_type type) noexcept;
int mw_dealloc_op(ibv_mw* mw) noexcept;
int mw_bind_op(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* bind) noexcept;

// An ibv_mw_bind_info as the core's MwBindInfo (ibv_bind_mw, IBV_WR_BIND_MW, ibv_wr_bind_mw):
// 0, EINVAL for access flags a window cannot have or an address range without an MR,
// EOPNOTSUPP for a zero-based window. mw.cpp.
int to_bind_info(const ibv_mw_bind_info& in, MwBindInfo& out) noexcept;
// A BIND_MW's window and range (IBV_WR_BIND_MW, ibv_wr_bind_mw): 0 or EINVAL / EOPNOTSUPP.
int to_bind_mw(ibv_mw* mw, const ibv_mw_bind_info& info, BindMwWr& out) noexcept;

// The verbs_context extension: create_cq_ex, create_qp_ex, create_srq_ex, ... ops.cpp.
void fill_extended_ops(DContext& c) noexcept;

// A new ibv_context over `impl` (opened, or shared with the context it is imported from);
// owns cmd_fd. device.cpp.
ibv_context* make_context(DDevice* device, std::shared_ptr<Context> impl, int cmd_fd);

// One GID table entry: 0, ENODATA for an empty entry, EINVAL outside the table. device.cpp.
int query_gid_impl(ibv_context* ctx, std::uint32_t port, std::uint32_t index, ibv_gid_entry& e);

// Creates the ibv_cq_ex for a core CQ (cq.cpp); create_cq and create_cq_ex both end here.
ibv_cq_ex* make_cq(ibv_context* context, const ibv_cq_init_attr_ex& attr);

// Creates the ibv_qp_ex for an ibv_qp_init_attr_ex (qp.cpp).
ibv_qp* make_qp(ibv_context* context, ibv_qp_init_attr_ex& attr);

// After a post: runs the simulated world a little (at most 1 ms of virtual time, whatever is
// due by then), so a program sees what a post does on rxe, which executes the work request
// inside ibv_post_send: completions of local traffic are there before the next verb call.
// Deterministic (same thread, same order). Call with the lock held. state.cpp.
void settle() noexcept;

}  // namespace verbsim::dropin
