// The ibv_* objects the drop-in hands out. Each derives from (or, for the device, starts with)
// the libibverbs struct a program reads fields of (qp->qp_num, mr->lkey, cq->cqe, ...), and owns
// the core resource it stands for. A pointer from the program converts back with from().
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "verbsim/address_handle.hpp"
#include "verbsim/completion_channel.hpp"
#include "verbsim/completion_queue.hpp"
#include "verbsim/context.hpp"
#include "verbsim/memory_region.hpp"
#include "verbsim/memory_window.hpp"
#include "verbsim/protection_domain.hpp"
#include "verbsim/queue_pair.hpp"
#include "verbsim/shared_receive_queue.hpp"

namespace verbsim::dropin {

// A simulated device. Laid out as libibverbs' struct verbs_device begins: the ibv_device, then
// the provider's ops pointer. Providers loaded beside us (libmlx5, libefa: pyverbs links them)
// tell their own devices apart by that pointer (mlx5dv_is_supported), so it is null here.
struct DDevice {
  ibv_device dev;
  const void* provider_ops;
  int index;
  std::uint64_t guid;  // host order
};
static_assert(offsetof(DDevice, provider_ops) == sizeof(ibv_device));

inline DDevice* device_of(ibv_device* d) noexcept { return reinterpret_cast<DDevice*>(d); }

// An open device: a verbs_context (whose last member is the ibv_context handed out, so the
// extended verbs in verbs.h find their ops in front of it).
struct DContext : verbs_context {
  DDevice* device = nullptr;
  std::shared_ptr<Context> impl;  // shared with contexts imported from this one
  int cmd_fd = -1;

  static DContext* from(ibv_context* c) noexcept {
    return static_cast<DContext*>(verbs_get_ctx(c));
  }
  ibv_context* ibv() noexcept { return &context; }
  const ibv_context* ibv() const noexcept { return &context; }
};

struct DPd : ibv_pd {
  std::shared_ptr<ProtectionDomain> impl;  // shared with its imports (ibv_import_pd)
  DPd* parent = nullptr;  // a parent domain's PD (ibv_alloc_parent_domain); impl is then empty
  void* pd_context = nullptr;
  bool imported = false;

  static DPd* from(ibv_pd* p) noexcept { return static_cast<DPd*>(p); }
  // The PD that owns resources: a parent domain's resources belong to its PD.
  ProtectionDomain& real() noexcept { return parent != nullptr ? *parent->impl : *impl; }
};

struct DMr : ibv_mr {
  std::shared_ptr<MemoryRegion> impl;  // shared with its imports (ibv_import_mr)
  unsigned access = 0;  // as registered (ibv_access_flags)
  bool imported = false;

  static DMr* from(ibv_mr* m) noexcept { return static_cast<DMr*>(m); }
};

// A memory window (ibv_alloc_mw). `rkey` is what the program reads: the key allocated, then the
// key of each ibv_bind_mw (type 1) as it is posted. A type 2 window's key is whatever the
// program put in its BIND_MW work request, which the program keeps (as with mlx5, a BIND_MW
// work request leaves ibv_mw::rkey alone).
struct DMw : ibv_mw {
  std::unique_ptr<MemoryWindow> impl;
  static DMw* from(ibv_mw* m) noexcept { return static_cast<DMw*>(m); }
};

struct DAh : ibv_ah {
  std::unique_ptr<AddressHandle> impl;
  static DAh* from(ibv_ah* a) noexcept { return static_cast<DAh*>(a); }
};

struct DChannel : ibv_comp_channel {
  std::unique_ptr<CompletionChannel> impl;
  static DChannel* from(ibv_comp_channel* c) noexcept { return static_cast<DChannel*>(c); }
};

// Every CQ is an ibv_cq_ex (its first members are an ibv_cq's), so ibv_cq_ex_to_cq works on any.
struct DCq : ibv_cq_ex {
  std::unique_ptr<CompletionQueue> impl;
  std::uint64_t wc_flags = 0;  // extended CQs: the fields the program may read
  WorkCompletion cur{};        // extended CQs: the completion start_poll/next_poll returned
  // Completion events ibv_get_cq_event returned (under `mutex`): ibv_destroy_cq waits until
  // comp_events_completed reaches it.
  unsigned events_taken = 0;

  static DCq* from(ibv_cq* c) noexcept { return static_cast<DCq*>(reinterpret_cast<ibv_cq_ex*>(c)); }
  static DCq* from(ibv_cq_ex* c) noexcept { return static_cast<DCq*>(c); }
  ibv_cq* ibv() noexcept { return ibv_cq_ex_to_cq(this); }
};

struct DSrq : ibv_srq {
  std::unique_ptr<SharedReceiveQueue> impl;
  static DSrq* from(ibv_srq* s) noexcept { return static_cast<DSrq*>(s); }
};

// Every QP is an ibv_qp_ex; ibv_qp_to_qp_ex returns it when the QP was created with
// IBV_QP_INIT_ATTR_SEND_OPS_FLAGS. The wr_* builder collects a batch between wr_start and
// wr_complete in reused vectors (no allocation per work request once they have grown).
struct DQp : ibv_qp_ex {
  std::unique_ptr<QueuePair> impl;
  bool extended = false;
  bool sq_sig_all = false;
  std::uint64_t send_ops = 0;  // IBV_QP_EX_WITH_* given at creation
  // The caps at creation: ibv_wr_set_sge_list and ibv_wr_set_inline_data* check against them.
  std::uint32_t max_send_sge = 0;
  std::size_t max_inline_data = 0;

  struct Pending {
    SendWr wr;
    std::size_t sge_begin = 0;   // into sges
    std::size_t sge_count = 0;
    std::size_t inline_begin = 0;  // into inline_bytes, when inline
    std::size_t inline_len = 0;
    bool is_inline = false;
    BindMwWr bind;  // wr_bind_mw: what wr.bind_mw points at once the batch is posted
  };
  std::vector<Pending> batch;
  std::vector<Sge> sges;
  std::vector<std::uint8_t> inline_bytes;
  std::vector<SendWr> flat;         // wr_complete: the batch as posted
  std::vector<Sge> inline_sges;     // wr_complete: one SGE over each WR's inline bytes
  int batch_error = 0;  // the first error a wr_* call found; wr_complete returns it
  bool in_batch = false;
  // ibv_post_send: what the BIND_MW work requests of the batch being posted point at (one per
  // WR of a batch; kept here rather than on the stack so a post does not initialise them).
  static constexpr std::size_t kPostBatch = 16;
  std::array<BindMwWr, kPostBatch> post_binds{};

  static DQp* from(ibv_qp* q) noexcept { return static_cast<DQp*>(reinterpret_cast<ibv_qp_ex*>(q)); }
  static DQp* from(ibv_qp_ex* q) noexcept { return static_cast<DQp*>(q); }
  ibv_qp* ibv() noexcept { return &qp_base; }
};

// Initialises the pthread members libibverbs' objects carry (programs never use them, but a
// destroy path of another library might).
void init_sync(pthread_mutex_t& m, pthread_cond_t& c) noexcept;
void destroy_sync(pthread_mutex_t& m, pthread_cond_t& c) noexcept;

}  // namespace verbsim::dropin
