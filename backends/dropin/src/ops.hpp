// What the drop-in's source files share beyond the objects: the function tables a context
// carries, and helpers one file defines for another.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "objects.hpp"

namespace verbsim::dropin {

// Every op a context carries, from one table sorted by op name (ops.cpp, as rdma-core's
// providers/rxe/rxe.c has rxe_ctx_ops): ibv_context::ops, which verbs.h's inline data-path and
// memory window verbs call, and the verbs_context extension verbs.h reaches through
// verbs_get_ctx_op. Ops it leaves null make verbs.h's inline wrappers fail with EOPNOTSUPP.
void set_context_ops(DContext& c) noexcept;

// The ops the table names from other files.

// ibv_poll_cq and ibv_req_notify_cq. cq.cpp.
int cq_poll_op(ibv_cq* cq, int n, ibv_wc* wc) noexcept;
int cq_notify_op(ibv_cq* cq, int solicited_only) noexcept;

// ibv_query_port, ibv_query_device_ex and ibv_query_rt_values_ex (verbs_context). device.cpp.
int ctx_query_port_op(ibv_context* ctx, std::uint8_t port, ibv_port_attr* attr,
                      std::size_t len) noexcept;
int ctx_query_device_ex_op(ibv_context* ctx, const ibv_query_device_ex_input* input,
                           ibv_device_attr_ex* attr, std::size_t len) noexcept;
int ctx_query_rt_values_op(ibv_context* ctx, ibv_values_ex* values) noexcept;

// ibv_post_send, ibv_post_recv and ibv_post_srq_recv. qp.cpp.
int qp_post_send_op(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) noexcept;
int qp_post_recv_op(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) noexcept;
int srq_post_recv_op(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad) noexcept;

// Memory windows: ibv_context_ops' alloc_mw, dealloc_mw and bind_mw, which verbs.h's inline
// ibv_alloc_mw, ibv_dealloc_mw and ibv_bind_mw call. mw.cpp.
ibv_mw* mw_alloc_op(ibv_pd* pd, ibv_mw_type type) noexcept;
int mw_dealloc_op(ibv_mw* mw) noexcept;
int mw_bind_op(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* bind) noexcept;

// Helpers one file defines for another.

// An ibv_mw_bind_info as the core's MwBindInfo (ibv_bind_mw, IBV_WR_BIND_MW, ibv_wr_bind_mw):
// 0, or EINVAL for access flags a window cannot have or an address range without an MR.
// mw.cpp.
int to_bind_info(const ibv_mw_bind_info& in, MwBindInfo& out) noexcept;
// A BIND_MW's window and range (IBV_WR_BIND_MW, ibv_wr_bind_mw): 0 or EINVAL.
int to_bind_mw(ibv_mw* mw, const ibv_mw_bind_info& info, BindMwWr& out) noexcept;

// A new ibv_context over `impl` (opened, or shared with the context it is imported from);
// owns cmd_fd. device.cpp.
ibv_context* make_context(DDevice* device, std::shared_ptr<Context> impl, int cmd_fd);

// The device `device` points at when it is one of the device list's (not a copy of one);
// else null with errno EINVAL (NULL) or ENODEV. Call with the lock held. device.cpp.
const DDevice* known_device(const ibv_device* device) noexcept;

// One GID table entry: 0, ENODATA for an empty entry, EINVAL outside the table. device.cpp.
int query_gid_impl(ibv_context* ctx, std::uint32_t port, std::uint32_t index, ibv_gid_entry& e);

// Creates the ibv_cq_ex for a core CQ (cq.cpp); create_cq and create_cq_ex both end here.
ibv_cq_ex* make_cq(ibv_context* context, const ibv_cq_init_attr_ex& attr);

// Creates the ibv_qp_ex for an ibv_qp_init_attr_ex (qp.cpp).
ibv_qp* make_qp(ibv_context* context, ibv_qp_init_attr_ex& attr);

}  // namespace verbsim::dropin
