// The final classes of the ibverbs backend, one per core resource, and helpers they share.
//
// Each wrapper creates its libibverbs object in its constructor (throwing VerbError naming the
// verb), stores the raw pointer, and releases it in destroy() or, failing that, leaks it from
// the destructor with a warning. A released wrapper holds nullptr (native() then returns it).
#pragma once

#include <infiniband/verbs.h>
#include <poll.h>

#include <atomic>
#include <memory>
#include <cerrno>
#include <cstdint>
#include <span>
#include <system_error>

#include "verbsim/address_handle.hpp"
#include "verbsim/cm.hpp"
#include "verbsim/completion_channel.hpp"
#include "verbsim/completion_queue.hpp"
#include "verbsim/context.hpp"
#include "verbsim/error.hpp"
#include "verbsim/memory_region.hpp"
#include "verbsim/memory_window.hpp"
#include "verbsim/protection_domain.hpp"
#include "verbsim/queue_pair.hpp"
#include "verbsim/shared_receive_queue.hpp"

namespace verbsim::ibverbs {

// ---------------------------------------------------------------------------------------------
// libibverbs' error conventions, folded into one positive errno.

// After a creator returned NULL: its errno, or ENOMEM when the provider left errno at 0.
inline int creator_errno() noexcept { return errno != 0 ? errno : ENOMEM; }

// From a verb that returns an errno (post, modify, destroy); a few providers return -errno.
constexpr int returned_errno(int ret) noexcept { return ret < 0 ? -ret : ret; }

// The destructor could not release a resource: prints one line to stderr and lets it leak.
void warn_leak(const char* verb, int err, const char* what) noexcept;

// Sets O_NONBLOCK on an event fd, so one thread's non-blocking read cannot race another's
// blocking one; blocking waits poll() first. Returns 0 or errno.
int set_nonblocking(int fd) noexcept;

// Blocks until `fd` is readable. Returns 0 or errno.
int wait_readable(int fd) noexcept;

// rxe (rdma-core's rxe provider over the kernel's rdma_rxe), known by its device name. Two of
// its quirks need working around: see IbvQp::unbind_needs_mr_ and IbvRxeCq.
bool is_rxe(ibv_context* ctx) noexcept;

class IbvChannel;

// The connection manager (cm.cpp): an rdma_event_channel and its rdma_cm_ids.
std::unique_ptr<CmEventChannel> make_cm_channel();

// ---------------------------------------------------------------------------------------------

class IbvContext final : public Context {
 public:
  // Adopts `ctx` only when construction succeeds (the caller closes it otherwise).
  IbvContext(ibv_context* ctx, DeviceInfo info);
  ~IbvContext() override;

  void destroy() override;
  const DeviceInfo& info() const noexcept override { return info_; }
  DeviceAttr query_device() const override;
  PortAttr query_port(std::uint8_t port_num) const override;
  Gid query_gid(std::uint8_t port_num, int index) const override;
  std::unique_ptr<ProtectionDomain> alloc_pd() override;
  std::unique_ptr<CompletionChannel> create_comp_channel() override;
  std::unique_ptr<CompletionQueue> create_cq(int cqe, CompletionChannel* channel, int comp_vector,
                                             CqCreateFlags flags) override;
  std::error_code get_async_event(AsyncEvent& event, Wait wait) override;
  int async_fd() const noexcept override { return ctx_ != nullptr ? ctx_->async_fd : -1; }
  const Clock& clock() const noexcept override { return clock_; }

  ibv_context* native() const noexcept { return ctx_; }

  // PDs, CQs and channels count as children: ibv_close_device() does not refuse to close under
  // them (it would free them behind their wrappers' backs), so destroy() does. A child that
  // leaks stays counted, and the context leaks with it.
  void add_child() noexcept { children_.fetch_add(1, std::memory_order_relaxed); }
  void remove_child() noexcept { children_.fetch_sub(1, std::memory_order_relaxed); }

 private:
  int release() noexcept;  // 0 or errno

  ibv_context* ctx_;
  DeviceInfo info_;
  std::atomic<int> children_{0};
  SteadyClock clock_;
};

class IbvPd final : public ProtectionDomain {
 public:
  explicit IbvPd(IbvContext& context);  // ibv_alloc_pd
  ~IbvPd() override;

  void destroy() override;
  std::unique_ptr<MemoryRegion> reg_mr_iova(void* addr, std::size_t length, std::uint64_t iova,
                                            Access access) override;
  std::unique_ptr<QueuePair> create_qp(const QpInitAttr& attr) override;
  std::unique_ptr<SharedReceiveQueue> create_srq(const SrqInitAttr& attr) override;
  std::unique_ptr<AddressHandle> create_ah(const AhAttr& attr) override;
  std::unique_ptr<MemoryWindow> alloc_mw(MwType type) override;

  ibv_pd* native() const noexcept { return pd_; }

 private:
  int release() noexcept;

  IbvContext& context_;
  ibv_pd* pd_ = nullptr;
};

class IbvMr final : public MemoryRegion {
 public:
  // ibv_reg_mr_iova2
  IbvMr(ibv_pd* pd, void* addr, std::size_t length, std::uint64_t iova, Access access);
  ~IbvMr() override;

  void destroy() override;
  void* addr() const noexcept override { return addr_; }
  std::uint64_t iova() const noexcept override { return iova_; }
  std::size_t length() const noexcept override { return length_; }
  std::uint32_t lkey() const noexcept override { return lkey_; }
  std::uint32_t rkey() const noexcept override { return rkey_; }
  Access access() const noexcept override { return access_; }
  void rereg(const MrChange& change) override;  // ibv_rereg_mr

  ibv_mr* native() const noexcept { return mr_; }

 private:
  int release() noexcept;

  ibv_mr* mr_ = nullptr;
  void* addr_;
  std::uint64_t iova_;
  std::size_t length_;
  std::uint32_t lkey_ = 0;
  std::uint32_t rkey_ = 0;
  Access access_;
};

class IbvMw final : public MemoryWindow {
 public:
  IbvMw(ibv_pd* pd, MwType type);  // ibv_alloc_mw
  ~IbvMw() override;

  void destroy() override;
  MwType type() const noexcept override { return type_; }
  // ibv_mw's rkey: ibv_bind_mw updates it for type 1, posted_bind() for type 2 (the key of
  // the last BIND_MW that IbvQp::post_send posted). After destroy(), the last key it had.
  std::uint32_t rkey() const noexcept override { return mw_ != nullptr ? mw_->rkey : rkey_; }

  // A BIND_MW work request giving this window `rkey` was posted. libibverbs leaves ibv_mw's
  // rkey alone on post_send, but rxe's next BIND_MW of the window passes that field to the
  // kernel, which refuses a key other than the window's current one (MW_BIND_ERR): so it is
  // kept current here, as ibv_bind_mw keeps a type 1 window's.
  void posted_bind(std::uint32_t rkey) noexcept {
    if (mw_ != nullptr) mw_->rkey = rkey;
  }

  ibv_mw* native() const noexcept { return mw_; }

 private:
  int release() noexcept;

  ibv_mw* mw_ = nullptr;
  MwType type_;
  std::uint32_t rkey_ = 0;
};

class IbvChannel final : public CompletionChannel {
 public:
  explicit IbvChannel(IbvContext& context);  // ibv_create_comp_channel
  ~IbvChannel() override;

  void destroy() override;
  std::error_code get_cq_event(CompletionQueue*& cq, Wait wait) override;
  int fd() const noexcept override { return channel_ != nullptr ? channel_->fd : -1; }

  ibv_comp_channel* native() const noexcept { return channel_; }

 private:
  int release() noexcept;

  IbvContext& context_;
  ibv_comp_channel* channel_ = nullptr;
};

// Not final: on rxe the CQ is an IbvRxeCq (below), chosen when it is created.
class IbvCq : public CompletionQueue {
 public:
  // ibv_create_cq (ibv_create_cq_ex when there are flags); cq_context points back at this
  // wrapper.
  IbvCq(IbvContext& context, int cqe, CompletionChannel* channel, int comp_vector,
        CqCreateFlags flags);
  ~IbvCq() override;

  void destroy() override;
  PollResult poll(std::span<WorkCompletion> out) noexcept override;
  std::error_code req_notify(bool solicited_only) noexcept override;
  void ack_events(unsigned n) noexcept override;
  void resize(int cqe) override;
  int cqe() const noexcept override { return cqe_; }
  int requested_cqe() const noexcept override { return requested_cqe_; }
  CompletionChannel* channel() const noexcept override { return channel_; }

  ibv_cq* native() const noexcept { return cq_; }

 private:
  int release() noexcept;

  IbvContext& context_;
  ibv_cq* cq_ = nullptr;
  CompletionChannel* channel_;
  int cqe_ = 0;
  int requested_cqe_;
};

// A CQ of rxe, whose provider copies the kernel's completions as they are, wc_flags in the
// kernel's numbering (invalidation in bit 2, libibverbs' IBV_WC_IP_CSUM_OK): its poll renumbers
// them (fix_up_from_ibv). A class of its own keeps that test off IbvCq::poll.
class IbvRxeCq final : public IbvCq {
 public:
  using IbvCq::IbvCq;
  PollResult poll(std::span<WorkCompletion> out) noexcept override;
};

class IbvQp final : public QueuePair {
 public:
  IbvQp(ibv_pd* pd, const QpInitAttr& attr);  // ibv_create_qp; qp_context points back here
  ~IbvQp() override;

  void destroy() override;
  std::uint32_t qp_num() const noexcept override { return qp_num_; }
  QpType type() const noexcept override { return type_; }
  const QpCap& cap() const noexcept override { return cap_; }
  const QpCap& requested_cap() const noexcept override { return requested_cap_; }
  PostResult post_send(std::span<const SendWr> wrs) noexcept override;
  PostResult post_recv(std::span<const RecvWr> wrs) noexcept override;
  PostResult bind_mw(MemoryWindow& mw, const MwBind& bind) noexcept override;  // ibv_bind_mw
  void modify(const QpAttr& attr, QpAttrMask mask) override;
  QpAttr query(QpAttrMask mask) const override;
  // Asks the device (ibv_query_qp), as the QP may have moved to ERR or SQE on its own.
  QpState state() const noexcept override;

  using QueuePair::post_recv;
  using QueuePair::post_send;

  ibv_qp* native() const noexcept { return qp_; }

 private:
  int release() noexcept;

  ibv_qp* qp_ = nullptr;
  // Batch size the posts take their fast path for: 1, or 0 (never) for sends on UD and for
  // receives with an SRQ, so that one comparison also rules those out.
  struct {
    std::size_t send;
    std::size_t recv;
  } fast_batch_;
  std::uint32_t qp_num_ = 0;
  QpType type_;
  bool has_srq_;
  // rdma-core's rxe provider (v44, and upstream still) reads bind_info.mr->lkey of every bind,
  // so an unbind without an MR would crash it: bind_mw() gives it a stand-in MR (see there).
  bool unbind_needs_mr_ = false;
  QpCap cap_;
  QpCap requested_cap_;
};

class IbvSrq final : public SharedReceiveQueue {
 public:
  IbvSrq(ibv_pd* pd, const SrqInitAttr& attr);  // ibv_create_srq; srq_context points back here
  ~IbvSrq() override;

  void destroy() override;
  PostResult post_recv(std::span<const RecvWr> wrs) noexcept override;
  void modify(const SrqAttr& attr, SrqAttrMask mask) override;
  SrqAttr query() const override;

  using SharedReceiveQueue::post_recv;

  ibv_srq* native() const noexcept { return srq_; }

 private:
  int release() noexcept;

  ibv_srq* srq_ = nullptr;
};

class IbvAh final : public AddressHandle {
 public:
  IbvAh(ibv_pd* pd, const AhAttr& attr);  // ibv_create_ah
  ~IbvAh() override;

  void destroy() override;
  const AhAttr& attr() const noexcept override { return attr_; }

  ibv_ah* native() const noexcept { return ah_; }

 private:
  int release() noexcept;

  ibv_ah* ah_ = nullptr;
  AhAttr attr_;
};

}  // namespace verbsim::ibverbs
