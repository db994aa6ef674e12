// The simulator's implementations of the core resource interfaces, except the QP
// (transport/qp.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "resources/cores.hpp"
#include "resources/cq_core.hpp"
#include "resources/recv_queue.hpp"
#include "verbsim/address_handle.hpp"
#include "verbsim/completion_channel.hpp"
#include "verbsim/completion_queue.hpp"
#include "verbsim/context.hpp"
#include "verbsim/memory_region.hpp"
#include "verbsim/memory_window.hpp"
#include "verbsim/protection_domain.hpp"
#include "verbsim/shared_receive_queue.hpp"

namespace verbsim::sim {

// The world's virtual clock.
class WorldClock final : public Clock {
 public:
  explicit WorldClock(const World::Impl& world) : world_(world) {}
  std::uint64_t now_ns() const noexcept override;

 private:
  const World::Impl& world_;
};

class SimContext final : public Context {
 public:
  SimContext(World::Impl& world, DevCore& dev);
  ~SimContext() override;
  void destroy() override;
  const DeviceInfo& info() const noexcept override { return core_->info; }
  DeviceAttr query_device() const override;
  PortAttr query_port(std::uint8_t port_num) const override;
  Gid query_gid(std::uint8_t port_num, int index) const override;
  std::unique_ptr<ProtectionDomain> alloc_pd() override;
  std::unique_ptr<CompletionChannel> create_comp_channel() override;
  std::unique_ptr<CompletionQueue> create_cq(int cqe, CompletionChannel* channel, int comp_vector,
                                             CqCreateFlags flags) override;
  std::error_code get_async_event(AsyncEvent& event, Wait wait) override;
  int async_fd() const noexcept override { return core_->async_efd; }
  const Clock& clock() const noexcept override { return clock_; }

  const std::shared_ptr<CtxCore>& core() const noexcept { return core_; }

 private:
  std::shared_ptr<CtxCore> core_;
  WorldClock clock_;
};

class SimPd final : public ProtectionDomain {
 public:
  explicit SimPd(std::shared_ptr<PdCore> core) : core_(std::move(core)) {}
  ~SimPd() override;
  void destroy() override;
  std::unique_ptr<MemoryRegion> reg_mr_iova(void* addr, std::size_t length, std::uint64_t iova,
                                            Access access) override;
  std::unique_ptr<QueuePair> create_qp(const QpInitAttr& attr) override;
  std::unique_ptr<SharedReceiveQueue> create_srq(const SrqInitAttr& attr) override;
  std::unique_ptr<AddressHandle> create_ah(const AhAttr& attr) override;
  std::unique_ptr<MemoryWindow> alloc_mw(MwType type) override;

  const std::shared_ptr<PdCore>& core() const noexcept { return core_; }

 private:
  std::shared_ptr<PdCore> core_;
  bool destroyed_ = false;
};

class SimMr final : public MemoryRegion {
 public:
  explicit SimMr(MrCore core);
  ~SimMr() override;
  void destroy() override;
  void* addr() const noexcept override { return core_.addr; }
  std::uint64_t iova() const noexcept override {
    return reinterpret_cast<std::uintptr_t>(core_.addr) - core_.to_host;
  }
  std::size_t length() const noexcept override { return core_.length; }
  std::uint32_t lkey() const noexcept override { return core_.key; }
  std::uint32_t rkey() const noexcept override;
  Access access() const noexcept override { return core_.access; }
  void rereg(const MrChange& change) override;
  MrCore& core() noexcept { return core_; }

 private:
  void release() noexcept;
  MrCore core_;
  bool destroyed_ = false;
};

// A memory window's handle. `rkey_` is the key the program was last given (QueuePair::bind_mw
// and BIND_MW advance it when posted); the window's own key changes when the bind runs.
class SimMw final : public MemoryWindow {
 public:
  explicit SimMw(MwCore core);
  ~SimMw() override;
  void destroy() override;
  MwType type() const noexcept override { return core_.type; }
  std::uint32_t rkey() const noexcept override { return rkey_; }
  void set_rkey(std::uint32_t key) noexcept { rkey_ = key; }
  MwCore& core() noexcept { return core_; }

 private:
  MwCore core_;
  std::uint32_t rkey_;
  bool destroyed_ = false;
};

class SimAh final : public AddressHandle {
 public:
  SimAh(std::shared_ptr<PdCore> pd, const AhAttr& attr, int dst_dev)
      : pd_(std::move(pd)), attr_(attr), dst_dev_(dst_dev) {}
  ~SimAh() override;
  void destroy() override;
  const AhAttr& attr() const noexcept override { return attr_; }
  int dst_dev() const noexcept { return dst_dev_; }
  const PdCore* pd() const noexcept { return pd_.get(); }

 private:
  std::shared_ptr<PdCore> pd_;
  AhAttr attr_;
  int dst_dev_;
  bool destroyed_ = false;
};

class SimChannel : public CompletionChannel {
 public:
  explicit SimChannel(std::shared_ptr<ChannelCore> core) : core_(std::move(core)) {}
  ~SimChannel() override;
  void destroy() override;
  std::error_code get_cq_event(CompletionQueue*& cq, Wait wait) override;
  int fd() const noexcept override { return core_->efd; }
  const std::shared_ptr<ChannelCore>& core() const noexcept { return core_; }

 protected:
  std::shared_ptr<ChannelCore> core_;
  bool destroyed_ = false;
};

class SimCq : public CompletionQueue {
 public:
  explicit SimCq(std::shared_ptr<CqCore> core);
  ~SimCq() override;
  void destroy() override;
  PollResult poll(std::span<WorkCompletion> out) noexcept override;
  std::error_code req_notify(bool solicited_only) noexcept override;
  void ack_events(unsigned n) noexcept override;
  void resize(int cqe) override;
  int cqe() const noexcept override { return core_->reported; }
  int requested_cqe() const noexcept override { return core_->requested; }
  CompletionChannel* channel() const noexcept override { return channel_; }
  const std::shared_ptr<CqCore>& core() const noexcept { return core_; }

  CompletionChannel* channel_ = nullptr;

 protected:
  void release() noexcept;
  std::shared_ptr<CqCore> core_;
  bool destroyed_ = false;
};

class SimSrq : public SharedReceiveQueue {
 public:
  explicit SimSrq(std::shared_ptr<SrqCore> core) : core_(std::move(core)) {}
  ~SimSrq() override;
  void destroy() override;
  PostResult post_recv(std::span<const RecvWr> wrs) noexcept override;
  void modify(const SrqAttr& attr, SrqAttrMask mask) override;
  SrqAttr query() const override;
  // ibv_modify_srq's IBV_SRQ_MAX_WR (sim::resize_srq); EINVAL where the profile has no resize.
  void resize(std::uint32_t max_wr);
  const std::shared_ptr<SrqCore>& core() const noexcept { return core_; }

 protected:
  void release() noexcept;
  std::shared_ptr<SrqCore> core_;
  bool destroyed_ = false;
};

// Invalidates the bound type 2 window of `key` (LOCAL_INV, SEND_WITH_INV); false when `key`
// names nothing that can be invalidated (mw.cpp).
bool invalidate_window(DevCore& dev, std::uint32_t key) noexcept;


// The CQ depth `verb` (ibv_create_cq, ibv_resize_cq) gives for `cqe`, EINVAL outside
// 1..max_cqe; and the entries its ring has room for, which the fault plan's cq_depth may cut.
std::uint32_t cq_depth(const char* verb, int cqe, const World::Impl& w);
std::uint32_t cq_ring_size(std::uint32_t depth, const World::Impl& w) noexcept;

}  // namespace verbsim::sim
