// Context, protection domain, memory region, address handle and completion channel.
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <string>

#include "faults/faulty.hpp"
#include "transport/qp.hpp"
#include "transport/user_memory.hpp"
#include "fibers/wait.hpp"
#include "verbsim/error.hpp"

namespace verbsim::sim {

int make_eventfd() { return ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC | EFD_SEMAPHORE); }

void signal_fd(int fd) {
  if (fd < 0) return;
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto n = ::write(fd, &one, sizeof one);
}

void drain_fd(int fd) {
  if (fd < 0) return;
  std::uint64_t v;
  [[maybe_unused]] const auto n = ::read(fd, &v, sizeof v);
}

namespace {

void warn_leak(const char* verb, const char* what, int users) {
  std::fprintf(stderr,
               "verbsim: %s: %s destroyed while %d resources still use it (EBUSY); it stays "
               "alive until they go\n",
               verb, what, users);
}

std::string str(std::uint64_t v) { return std::to_string(v); }

// Why the kernel would refuse to pin [addr, addr + length) for an MR (ib_umem_get), as an errno
// and a reason; 0 when it would pin it. Asks mincore(2) page range by page range, touching no
// page: ENOMEM from it means a page is not mapped. The kernel pins the pages the range touches
// from its first page on, so an empty range at a page boundary (NULL included) has no page and
// is EINVAL, while one inside a page pins that page (rxe, kernel 6.1: Memory.ZeroLengthRegion).
int pin_refusal(const void* addr, std::size_t length, std::string& why) {
  const auto start = reinterpret_cast<std::uintptr_t>(addr);
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  std::uintptr_t end = 0;
  if (__builtin_add_overflow(start, length, &end) || end > UINTPTR_MAX - page) {
    why = "the range wraps around the address space";
    return EINVAL;
  }
  const std::uintptr_t first = start & ~(page - 1);
  const std::uintptr_t last = (end + page - 1) & ~(page - 1);
  if (last == first) {
    why = "an empty range at a page boundary touches no page to pin";
    return EINVAL;
  }
  if ((last - first) / page > UINT32_MAX) {
    why = "more pages than the kernel pins for one MR";
    return EINVAL;
  }
  constexpr std::uintptr_t kChunk = 4096;  // pages per mincore call
  unsigned char vec[kChunk];
  for (std::uintptr_t p = first; p < last;) {
    const std::uintptr_t n = std::min<std::uintptr_t>((last - p) / page, kChunk);
    if (::mincore(reinterpret_cast<void*>(p), n * page, vec) != 0) {
      why = "the range is not all mapped (the pin fails)";
      return EFAULT;
    }
    p += n * page;
  }
  return 0;
}

}  // namespace

DevCore& device_of(Context& ctx) { return *dynamic_cast<SimContext&>(ctx).core()->dev; }

namespace {

// Refuses the object `verb` makes when the device holds `max` of its kind already.
void check_room(const char* verb, const char* what, int live, int max, int err) {
  if (live < max) return;
  throw_verb_error(verb, err, "the device holds " + std::to_string(max) + " " + what +
                                  " already (its max)");
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Context

void CtxCore::raise(const AsyncEvent& e) {
  world->digest().add(0xa5000000ull | static_cast<std::uint64_t>(e.type) << 16 | e.qp_num);
  if (world->observing()) {
    world->observe_instant(static_cast<std::uint16_t>(dev->index), e.qp_num,
                           "async: " + std::string(to_string(e.type)));
  }
  async.push_back(e);
  signal_fd(async_efd);
  notify_all(waiters);
}

void CtxCore::forget_events_of(const void* object) noexcept {
  const auto names = [object](const AsyncEvent& e) {
    return e.qp == object || e.cq == object || e.srq == object;
  };
  for (std::size_t n = std::erase_if(async, names); n > 0; --n) drain_fd(async_efd);
}

CtxCore::~CtxCore() {
  std::erase(dev->contexts, this);
  if (async_efd >= 0) ::close(async_efd);
}

std::uint64_t WorldClock::now_ns() const noexcept { return world_.now(); }

SimContext::SimContext(World::Impl& world, DevCore& dev)
    : core_(std::make_shared<CtxCore>()), clock_(world) {
  core_->world = &world;
  core_->dev = &dev;
  core_->info = {"sim", dev.name, dev.guid};
  core_->async_efd = make_eventfd();
  dev.contexts.push_back(core_.get());
}

SimContext::~SimContext() = default;

// The context's core goes with the last object made from it (the world warns of any left).
void SimContext::destroy() {}

DeviceAttr SimContext::query_device() const {
  const ProfileTraits& t = core_->world->traits();
  DeviceAttr a;
  a.fw_ver = "verbsim-0.1 (" + std::string(to_string(t.family)) + ")";
  a.node_guid = core_->dev->guid;
  a.sys_image_guid = core_->dev->guid;
  a.max_mr_size = ~0ull;
  a.page_size_cap = 0xfffff000;
  a.vendor_id = 0xffffff;  // none: a simulated device
  a.vendor_part_id = static_cast<std::uint32_t>(t.family);
  const ObjectLimits& lim = core_->dev->limits;
  a.max_qp = lim.max_qp;
  a.max_qp_wr = static_cast<int>(t.limits.max_qp_wr);
  a.max_sge = static_cast<int>(t.limits.max_sge);
  a.max_sge_rd = static_cast<int>(t.limits.max_sge);
  a.max_cq = lim.max_cq;
  a.max_cqe = static_cast<int>(t.limits.max_cqe);
  a.max_mr = lim.max_mr;
  a.max_pd = lim.max_pd;
  a.max_qp_rd_atom = 128;
  a.max_qp_init_rd_atom = 128;
  a.max_srq = lim.max_srq;
  a.max_srq_wr = static_cast<int>(t.limits.max_qp_wr);
  a.max_srq_sge = static_cast<int>(t.limits.max_sge);
  a.max_ah = lim.max_ah;
  a.max_pkeys = 1;
  a.phys_port_cnt = static_cast<std::uint8_t>(core_->dev->ports.size());
  a.atomics = true;
  a.max_mw = static_cast<int>(t.limits.max_mw);
  a.mw_type1 = true;
  a.mw_type2 = true;
  return a;
}

PortAttr SimContext::query_port(std::uint8_t port_num) const {
  if (port_num < 1 || port_num > core_->dev->ports.size()) {
    throw_verb_error("ibv_query_port", EINVAL, "port " + str(port_num) + " does not exist");
  }
  return core_->dev->ports[port_num - 1u].attr;
}

Gid SimContext::query_gid(std::uint8_t port_num, int index) const {
  if (port_num < 1 || port_num > core_->dev->ports.size()) {
    throw_verb_error("ibv_query_gid", EINVAL, "port " + str(port_num) + " does not exist");
  }
  const PortCore& port = core_->dev->ports[port_num - 1u];
  if (index < 0 || index >= port.attr.gid_tbl_len) {
    throw_verb_error("ibv_query_gid", EINVAL, "GID index " + std::to_string(index) + " out of range");
  }
  // An unused entry of the table reads as the zero GID, as libibverbs reports it.
  if (static_cast<std::size_t>(index) >= port.gids.size()) return Gid{};
  return port.gids[static_cast<std::size_t>(index)];
}

std::unique_ptr<ProtectionDomain> SimContext::alloc_pd() {
  if (const int err = core_->world->verb_fault(Verb::alloc_pd, 0, core_->dev)) {
    throw_verb_error("ibv_alloc_pd", err, "injected by the fault plan");
  }
  DevCore& dev = *core_->dev;
  check_room("ibv_alloc_pd", "PDs", dev.live_pds, dev.limits.max_pd,
             core_->world->traits().pool_full_errno);
  ++dev.live_pds;
  auto pd = std::make_shared<PdCore>();
  pd->ctx = core_;
  pd->id = core_->dev->next_pd_id++;
  return std::make_unique<SimPd>(std::move(pd));
}

std::unique_ptr<CompletionChannel> SimContext::create_comp_channel() {
  auto ch = std::make_shared<ChannelCore>();
  ch->ctx = core_;
  ch->efd = make_eventfd();
  if (core_->world->faults().targets(Verb::get_cq_event)) {
    return std::make_unique<FaultyChannel>(std::move(ch));
  }
  return std::make_unique<SimChannel>(std::move(ch));
}

std::unique_ptr<CompletionQueue> SimContext::create_cq(int cqe, CompletionChannel* channel,
                                                       int comp_vector, CqCreateFlags flags) {
  World::Impl& w = *core_->world;
  const std::uint32_t depth = cq_depth("ibv_create_cq", cqe, w);
  if (comp_vector != 0) throw_verb_error("ibv_create_cq", EINVAL, "comp_vector must be 0 (one vector)");
  if ((flags & ~CqCreateFlags::ignore_overrun) != CqCreateFlags::none) {
    throw_verb_error("ibv_create_cq_ex", EOPNOTSUPP, "unknown CQ create flags");
  }
  const bool ignore_overrun = any(flags, CqCreateFlags::ignore_overrun);
  if (ignore_overrun && !w.traits().cq_ignore_overrun) {
    throw_verb_error("ibv_create_cq_ex", EOPNOTSUPP,
                     "IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN (the " +
                         w.traits().name +
                         " profile's provider takes no CQ create flags)");
  }
  if (const int err = w.verb_fault(Verb::create_cq, 0, core_->dev)) {
    throw_verb_error("ibv_create_cq", err, "injected by the fault plan");
  }
  check_room("ibv_create_cq", "CQs", core_->dev->live_cqs, core_->dev->limits.max_cq,
             w.traits().pool_full_errno);
  auto cq = std::make_shared<CqCore>();
  cq->ctx = core_;
  cq->world = &w;
  cq->id = core_->dev->next_cq_id++;
  cq->requested = cqe;
  cq->reported = static_cast<int>(depth);
  cq->ignore_overrun = ignore_overrun;
  cq->ring.resize(cq_ring_size(depth, w));
  if (w.shared()) w.note_cq(cq.get());  // fabric/multiprocess.cpp: may this process wait passively?
  SimChannel* sim_channel = nullptr;
  if (channel != nullptr) {
    sim_channel = dynamic_cast<SimChannel*>(channel);
    if (sim_channel == nullptr || sim_channel->core()->ctx != core_) {
      throw_verb_error("ibv_create_cq", EINVAL, "the completion channel belongs to another device");
    }
    cq->channel = sim_channel->core();
    ++cq->channel->users;
  }
  ++core_->dev->live_cqs;
  const bool faulty = w.faults().targets(Verb::poll_cq) ||
                      w.faults().targets(Verb::req_notify_cq);
  std::unique_ptr<SimCq> handle = faulty ? std::make_unique<FaultyCq>(std::move(cq))
                                         : std::make_unique<SimCq>(std::move(cq));
  handle->channel_ = channel;
  return handle;
}

std::error_code SimContext::get_async_event(AsyncEvent& event, Wait wait) {
  if (const int err = core_->world->verb_fault(Verb::get_async_event, 0, core_->dev)) {
    return errno_code(err);
  }
  auto& q = core_->async;
  return wait_for(*core_->world, core_->waiters, wait, [&] {
    if (q.empty()) return false;
    event = q.front();
    q.pop_front();
    drain_fd(core_->async_efd);
    return true;
  });
}

// ---------------------------------------------------------------------------------------------
// Protection domain

SimPd::~SimPd() {
  if (destroyed_) return;
  if (core_->users > 0) warn_leak("ibv_dealloc_pd", "PD", core_->users);
  --core_->ctx->dev->live_pds;
}

void SimPd::destroy() {
  if (core_->users > 0) {
    throw_verb_error("ibv_dealloc_pd", EBUSY,
         std::to_string(core_->users) + " MRs, QPs, SRQs or AHs still use the PD");
  }
  if (!destroyed_) --core_->ctx->dev->live_pds;
  destroyed_ = true;
}

std::unique_ptr<MemoryRegion> SimPd::reg_mr_iova(void* addr, std::size_t length,
                                                 std::uint64_t iova, Access access) {
  if (const int err = core_->ctx->world->verb_fault(Verb::reg_mr, 0, core_->ctx->dev)) {
    throw_verb_error("ibv_reg_mr", err, "injected by the fault plan");
  }
  const auto start = reinterpret_cast<std::uintptr_t>(addr);
  if ((iova ^ start) % static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE)) != 0) {
    // ib_uverbs_reg_mr: the iova maps the buffer page by page.
    throw_verb_error("ibv_reg_mr", EINVAL, "the iova's offset in its page is not the buffer's");
  }
  if (any(access, Access::remote_write | Access::remote_atomic) &&
      !any(access, Access::local_write)) {
    throw_verb_error("ibv_reg_mr", EINVAL, "REMOTE_WRITE or REMOTE_ATOMIC requires LOCAL_WRITE");
  }
  const auto known = Access::local_write | Access::remote_write | Access::remote_read |
                     Access::remote_atomic | Access::mw_bind | Access::zero_based;
  if (any(access, ~known)) throw_verb_error("ibv_reg_mr", EINVAL, "unknown access flags");
  // No check of its own for NULL or length 0: the pin decides, as in the kernel.
  std::string why;
  if (const int err = pin_refusal(addr, length, why)) throw_verb_error("ibv_reg_mr", err, why);
  user_memory::install();  // the pages stay "pinned" if the program unmaps them
  DevCore& dev = *core_->ctx->dev;
  check_room("ibv_reg_mr", "MRs", dev.live_mrs, dev.limits.max_mr, ENOMEM);  // rxe_alloc: NULL
  if (!dev.mr_indices.fresh_left() && !dev.mr_indices.freed_left()) {
    throw_verb_error("ibv_reg_mr", ENOMEM, "MR keys exhausted");
  }
  MrCore mr;
  mr.pd = core_;
  mr.dev = &dev;
  mr.addr = static_cast<char*>(addr);
  mr.length = length;
  mr.access = access;
  mr.to_host = start - iova;
  if (dev.mr_indices.fresh_left()) {
    const std::uint32_t index = dev.mr_indices.take_fresh();
    const auto key_byte = static_cast<std::uint32_t>(core_->ctx->world->rng().next() & 0xff);
    mr.key = (index << 8) | key_byte;
  } else {
    // A freed index again, with the next low byte: the old MR's keys do not name this one.
    const std::uint32_t old = dev.mr_indices.take_freed();
    mr.key = (old & ~0xffu) | ((old + 1) & 0xffu);
  }
  return std::make_unique<SimMr>(std::move(mr));
}

std::unique_ptr<AddressHandle> SimPd::create_ah(const AhAttr& attr) {
  const DevCore& dev = *core_->ctx->dev;
  if (const int err = core_->ctx->world->verb_fault(Verb::create_ah, 0, &dev)) {
    throw_verb_error("ibv_create_ah", err, "injected by the fault plan");
  }
  if (attr.port_num < 1 || attr.port_num > dev.ports.size()) {
    throw_verb_error("ibv_create_ah", EINVAL, "port " + str(attr.port_num) + " does not exist");
  }
  if (!attr.is_global) {
    throw_verb_error("ibv_create_ah", EINVAL, "RoCE address handles need a GRH (is_global with a dgid)");
  }
  if (attr.grh.sgid_index >= dev.ports[attr.port_num - 1u].gids.size()) {
    throw_verb_error("ibv_create_ah", EINVAL, "sgid_index " + str(attr.grh.sgid_index) + " out of range");
  }
  check_room("ibv_create_ah", "AHs", dev.live_ahs, dev.limits.max_ah,
             core_->ctx->world->traits().pool_full_errno);
  ++core_->ctx->dev->live_ahs;
  ++core_->users;
  return std::make_unique<SimAh>(core_, attr, core_->ctx->world->route(attr.grh.dgid));
}

// ---------------------------------------------------------------------------------------------
// Memory region and address handle

SimMr::SimMr(MrCore core) : core_(std::move(core)) {
  ++core_.pd->users;
  ++core_.dev->live_mrs;
  if (core_.to_host != 0) ++core_.dev->live_iova_mrs;
  core_.dev->mrs.insert(core_.key >> 8, &core_);
}

SimMr::~SimMr() {
  if (!destroyed_) release();
}

// One key serves both (the index and a key byte); rxe hands out rkey 0 for an MR no remote
// peer may reach. A request that names 0 finds no MR (REM_ACCESS_ERR), as one naming the lkey
// of such an MR did.
std::uint32_t SimMr::rkey() const noexcept {
  constexpr Access remote = Access::remote_read | Access::remote_write | Access::remote_atomic;
  if (!any(core_.access, remote) && core_.pd->ctx->world->traits().local_mr_rkey_zero) return 0;
  return core_.key;
}

void SimMr::destroy() {
  if (destroyed_) return;
  if (core_.windows > 0) {
    // rxe_dereg_mr (IBA 10.6.7.2.6): not while memory windows are bound to it.
    throw_verb_error("ibv_dereg_mr", EINVAL,
         std::to_string(core_.windows) + " memory windows are bound to the MR");
  }
  release();
}

// ibv_rereg_mr in place: the keys stay, and every QP's cached MR lookup is invalidated.
void SimMr::rereg(const MrChange& change) {
  MrCore& core = core_;
  if (!core.pd->ctx->world->traits().rereg_mr) {
    throw_verb_error("ibv_rereg_mr", EOPNOTSUPP, "the rxe profile has no rereg_mr, as rxe");
  }
  if (const int err = core.pd->ctx->world->verb_fault(Verb::rereg_mr, 0, core.dev)) {
    throw_verb_error("ibv_rereg_mr", err, "injected by the fault plan");
  }
  // A window bound to it would keep the range it was bound to, which the MR may no longer
  // cover: refused as deregistration is.
  if (core.windows > 0) {
    throw_verb_error("ibv_rereg_mr", EINVAL,
         std::to_string(core.windows) + " memory windows are bound to the MR");
  }
  std::shared_ptr<PdCore> pd = core.pd;
  if (change.pd != nullptr) {
    auto* p = dynamic_cast<SimPd*>(change.pd);
    if (p == nullptr || p->core()->ctx->dev != core.dev) {
      throw_verb_error("ibv_rereg_mr", EINVAL, "the new PD belongs to another device");
    }
    pd = p->core();
  }
  if (change.addr != nullptr || change.length != 0) {
    if (change.addr == nullptr || change.length == 0) {
      // libibverbs' ibv_rereg_mr refuses these itself (IBV_REREG_MR_ERR_INPUT, EINVAL).
      throw_verb_error("ibv_rereg_mr", EINVAL, "a new translation needs an address and a length");
    }
    std::string why;
    if (const int err = pin_refusal(change.addr, change.length, why)) {
      throw_verb_error("ibv_rereg_mr", err, why);
    }
  }
  const Access access = change.access.value_or(core.access);
  if (any(access, Access::remote_write | Access::remote_atomic) &&
      !any(access, Access::local_write)) {
    throw_verb_error("ibv_rereg_mr", EINVAL, "REMOTE_WRITE or REMOTE_ATOMIC requires LOCAL_WRITE");
  }
  if (pd != core.pd) {
    --core.pd->users;
    ++pd->users;
    core.pd = std::move(pd);
  }
  if (change.addr != nullptr) {
    core.addr = static_cast<char*>(change.addr);
    core.length = change.length;
    if (core.to_host != 0) --core.dev->live_iova_mrs;
    core.to_host = 0;  // the providers pass the new address as the iova
  }
  core.access = access;
  mr_changed(*core.dev, core.key);
}

// The MR goes even with windows bound (its handle was dropped): they stop working, since
// their MR's key no longer resolves.
void SimMr::release() noexcept {
  core_.dev->mrs.erase(core_.key >> 8);
  --core_.dev->live_mrs;
  if (core_.to_host != 0) --core_.dev->live_iova_mrs;
  core_.dev->mr_indices.give_back(core_.key);
  mr_changed(*core_.dev, core_.key);
  --core_.pd->users;
  destroyed_ = true;
}

SimAh::~SimAh() {
  if (!destroyed_) destroy();
}

void SimAh::destroy() {
  if (destroyed_) return;
  --pd_->users;
  --pd_->ctx->dev->live_ahs;
  destroyed_ = true;
}

// ---------------------------------------------------------------------------------------------
// Completion channel

void ChannelCore::forget_events_of(const CompletionQueue* cq) noexcept {
  for (std::size_t n = std::erase(events, cq); n > 0; --n) drain_fd(efd);
}

ChannelCore::~ChannelCore() {
  if (efd >= 0) ::close(efd);
}

SimChannel::~SimChannel() {
  if (!destroyed_ && core_->users > 0) {
    warn_leak("ibv_destroy_comp_channel", "completion channel", core_->users);
  }
}

void SimChannel::destroy() {
  if (core_->users > 0) {
    throw_verb_error("ibv_destroy_comp_channel", EBUSY,
         std::to_string(core_->users) + " CQs are still attached to the channel");
  }
  destroyed_ = true;
}

std::error_code SimChannel::get_cq_event(CompletionQueue*& cq, Wait wait) {
  auto& q = core_->events;
  return wait_for(*core_->ctx->world, core_->waiters, wait, [&] {
    if (q.empty()) return false;
    cq = q.front();
    q.pop_front();
    drain_fd(core_->efd);
    // Counted once taken, as the kernel counts the events it reports: ibv_destroy_cq waits
    // for these to be acknowledged, not for events still queued (those go with the CQ).
    ++static_cast<SimCq*>(cq)->core()->unacked_events;
    return true;
  });
}

void CqCore::notify() {
  arm = Arm::none;  // used up, with a channel to tell or not
  if (!channel || handle == nullptr) return;
  channel->events.push_back(handle);
  signal_fd(channel->efd);
  notify_all(channel->waiters);
  ctx->world->digest().add(0xc0ffee00ull);
}

}  // namespace verbsim::sim
