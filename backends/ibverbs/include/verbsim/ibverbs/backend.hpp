// The ibverbs backend: verbsim's API over the host's RDMA devices through rdma-core's libibverbs.
//
// Usually reached through verbsim::open_backend("ibverbs"). This header does not include
// <infiniband/verbs.h>; include it yourself to use what native() returns.
#pragma once

#include <memory>

#include "verbsim/backend.hpp"

struct ibv_ah;
struct ibv_comp_channel;
struct ibv_context;
struct ibv_cq;
struct ibv_mr;
struct ibv_mw;
struct ibv_pd;
struct ibv_qp;
struct ibv_srq;
struct rdma_cm_id;
struct rdma_event_channel;

namespace verbsim {

class AddressHandle;
class CmEventChannel;
class CmId;
class CompletionChannel;
class CompletionQueue;
class Context;
class MemoryRegion;
class MemoryWindow;
class ProtectionDomain;
class QueuePair;
class SharedReceiveQueue;

namespace ibverbs {

// A backend over ibv_get_device_list(). Creating it touches no device; open() throws
// VerbError(ENODEV) when the host has none, with a hint on how to get one (Soft-RoCE).
std::unique_ptr<verbsim::Backend> make_backend();

// Escape hatch to the libibverbs object behind a verbsim resource, for verbs verbsim does not
// wrap. Returns nullptr when the object comes from another backend (or was destroyed). The
// object stays owned by the wrapper: do not destroy it through libibverbs.
//
// The wrapper keeps these fields for itself: qp_context, cq_context and srq_context point back
// at the wrapper (async and CQ events are mapped through them), and the file descriptors
// context->async_fd and channel->fd are in O_NONBLOCK mode.
ibv_context* native(verbsim::Context& context) noexcept;
ibv_pd* native(verbsim::ProtectionDomain& pd) noexcept;
ibv_mr* native(verbsim::MemoryRegion& mr) noexcept;
ibv_mw* native(verbsim::MemoryWindow& mw) noexcept;
ibv_cq* native(verbsim::CompletionQueue& cq) noexcept;
ibv_comp_channel* native(verbsim::CompletionChannel& channel) noexcept;
ibv_qp* native(verbsim::QueuePair& qp) noexcept;
ibv_srq* native(verbsim::SharedReceiveQueue& srq) noexcept;
ibv_ah* native(verbsim::AddressHandle& ah) noexcept;

// The connection manager's librdmacm objects (include <rdma/rdma_cma.h>). The channel's fd is
// in O_NONBLOCK mode; an id's context points back at its wrapper and its qp stays NULL (the QP
// given to connect or accept is the program's: rdma_cm does not know it). Events must be taken
// through CmEventChannel::get_event, which answers some of them (see verbsim/cm.hpp).
rdma_event_channel* native(verbsim::CmEventChannel& channel) noexcept;
rdma_cm_id* native(verbsim::CmId& id) noexcept;

}  // namespace ibverbs
}  // namespace verbsim
