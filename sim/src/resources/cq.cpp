// Completion queues and shared receive queues.
#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <new>
#include <string>

#include "faults/faulty.hpp"
#include "transport/qp.hpp"
#include "fibers/wait.hpp"
#include "verbsim/error.hpp"

namespace verbsim::sim {

CqEntry& CqCore::full_slot() noexcept {
  if (error || !ignore_overrun) return spill;
  // The oldest completion not yet polled is overwritten (lost, with no CQ error); a send's
  // slots retire with the next send completion of its QP that is polled, as on hardware.
  ++dropped;
  ++world->acct().lost_to_overrun;
  CqEntry& oldest = ring[head];
  head = head + 1 == ring.size() ? 0 : head + 1;
  --count;
  return oldest;
}

bool CqCore::drop() {
  World::Impl& w = *world;
  ++dropped;
  ++w.acct().lost_to_overrun;
  if (error) return false;
  AsyncEvent ev;
  ev.type = AsyncEventType::cq_err;
  ev.cq = handle;
  if (w.traits().cq_overrun_is_error) {
    // Hardware: the CQ is in error from now on and every QP feeding it fails.
    error = true;
    ctx->raise(ev);
    const auto victims = qps;
    for (SimQp* qp : victims) qp->enter_error();
  } else {
    // rxe: the completion is dropped, one CQ_ERR per dropped completion, QPs carry on.
    ctx->raise(ev);
  }
  return false;
}

void CqCore::observe(const CqEntry& e) {
  if (world->counting()) world->count_completion(e);
  if (!world->observes_work_requests()) return;  // only counting, or only a capture
  CompletionRecord r;
  r.time_ns = world->now();
  r.dev = static_cast<std::uint16_t>(ctx->dev->index);
  r.cq = id;
  r.send = e.send;
  r.wc = e.wc;
  r.dropped = &e == &spill;
  world->observe_completion(r);
}

void CqCore::notify_if_armed(const CqEntry& e, bool solicited) {
  // An error completion counts as solicited, except a send's where rxe posts it unsolicited
  // (its flushed receives do count).
  const bool failed = e.wc.status != WcStatus::success &&
                      (!e.send || world->traits().send_error_is_solicited);
  if (arm == Arm::any || (arm == Arm::solicited && (solicited || failed))) notify();
}

SimCq::SimCq(std::shared_ptr<CqCore> core) : core_(std::move(core)) { core_->handle = this; }

SimCq::~SimCq() {
  if (destroyed_) return;
  if (core_->users > 0) {
    std::fprintf(stderr,
                 "verbsim: ibv_destroy_cq: CQ destroyed while %d QPs still use it (EBUSY); its "
                 "completions are lost\n",
                 core_->users);
  }
  release();
}

void SimCq::destroy() {
  if (core_->users > 0) {
    throw_verb_error("ibv_destroy_cq", EBUSY, std::to_string(core_->users) + " QPs still use the CQ");
  }
  if (core_->unacked_events > 0) {
    // libibverbs blocks forever here; say why instead.
    throw_verb_error("ibv_destroy_cq", EBUSY,
         std::to_string(core_->unacked_events) +
             " completion events were not acknowledged with ibv_ack_cq_events; real libibverbs "
             "would block forever in ibv_destroy_cq");
  }
  release();
}

// What destroy() and the destructor both do: the handle goes, and with it its events not yet
// taken (as the kernel drops them).
void SimCq::release() noexcept {
  core_->handle = nullptr;
  core_->world->forget_cq(core_.get());  // its completions can be taken no more
  if (core_->channel) {
    --core_->channel->users;
    core_->channel->forget_events_of(this);
  }
  core_->ctx->forget_events_of(static_cast<CompletionQueue*>(this));
  --core_->ctx->dev->live_cqs;
  destroyed_ = true;
}

namespace {
// An empty poll's error, out of line: returned inline, it would cost every poll an
// instruction or four to build its result.
[[gnu::cold, gnu::noinline]] PollResult failed_poll(int err) noexcept { return {0, err}; }
}  // namespace

PollResult SimCq::poll(std::span<WorkCompletion> out) noexcept {
  CqCore& c = *core_;
  World::Impl& w = *c.world;
  if (c.count == 0) {
    if (fibers_running(w)) {
      // Other fibers run first; the world moves once they all wait on it.
      if (const int err = spin_wait(w); err != 0 && c.count == 0) return failed_poll(err);
    } else if (const int err = w.poll_step(); err != 0 && c.count == 0) [[unlikely]] {
      return failed_poll(err);  // ETIMEDOUT: the world's budget ran out
    }
    if (c.count == 0) return {0, 0};
  }
  const bool retire = w.traits().retire_on_poll;
  const auto n = static_cast<std::uint32_t>(std::min<std::size_t>(out.size(), c.count));
  const auto size = static_cast<std::uint32_t>(c.ring.size());
  const CqEntry* const ring = c.ring.data();
  std::uint32_t head = c.head;
  for (std::uint32_t i = 0; i < n; ++i) {
    const CqEntry& e = ring[head];
    out[i] = e.wc;
    if (retire && e.send && e.qp != nullptr) e.qp->retire_through(e.sq_index);
    head = head + 1 == size ? 0 : head + 1;
  }
  c.head = head;
  c.count -= n;
  return {n, 0};
}

// A CQ without a channel is armed too, as rxe and mlx5 arm it: the arm is used up by the next
// completion and raises nothing (CqCore::notify).
std::error_code SimCq::req_notify(bool solicited_only) noexcept {
  if (fibers_running(*core_->world)) schedule_point(*core_->world);
  if (core_->arm != CqCore::Arm::any) {
    core_->arm = solicited_only ? CqCore::Arm::solicited : CqCore::Arm::any;
  }
  return {};
}

std::uint32_t cq_depth(const char* verb, int cqe, const World::Impl& w) {
  const ProfileTraits& t = w.traits();
  if (cqe < 1 || static_cast<std::uint32_t>(cqe) > t.limits.max_cqe) {
    throw_verb_error(verb, EINVAL, "cqe=" + std::to_string(cqe) + " outside 1.." + std::to_string(t.limits.max_cqe));
  }
  return t.round_cq(static_cast<std::uint32_t>(cqe));
}

std::uint32_t cq_ring_size(std::uint32_t depth, const World::Impl& w) noexcept {
  const std::uint32_t shrunk = w.config().faults.cq_depth;
  return shrunk != 0 ? std::min(depth, shrunk) : depth;
}

void SimCq::resize(int cqe) {
  CqCore& core = *core_;
  World::Impl& w = *core.world;
  const std::uint32_t depth = cq_depth("ibv_resize_cq", cqe, w);
  if (const int err = w.verb_fault(Verb::resize_cq, 0, core.ctx->dev)) {
    throw_verb_error("ibv_resize_cq", err, "injected by the fault plan");
  }
  // rxe compares the size asked for, not the rounded one, with what the CQ holds (measured).
  if (static_cast<std::uint32_t>(cqe) < core.count) {
    throw_verb_error("ibv_resize_cq", EINVAL,
         "the CQ holds " + std::to_string(core.count) + " completions, more than cqe=" +
             std::to_string(cqe));
  }
  std::vector<CqEntry> entries(cq_ring_size(depth, w));
  for (std::uint32_t i = 0; i < core.count; ++i) {
    entries[i] = core.ring[(core.head + i) % core.ring.size()];
  }
  core.ring = std::move(entries);
  core.head = 0;
  core.requested = cqe;
  core.reported = static_cast<int>(depth);
}

void SimCq::ack_events(unsigned n) noexcept {
  core_->unacked_events -= std::min(n, core_->unacked_events);
}

// ---------------------------------------------------------------------------------------------
// Shared receive queue

void SrqCore::consumed() {
  if (limit != 0 && rq.size() < limit) {
    limit = 0;
    AsyncEvent ev;
    ev.type = AsyncEventType::srq_limit_reached;
    ev.srq = handle;
    pd->ctx->raise(ev);
  }
}

SimSrq::~SimSrq() {
  if (destroyed_) return;
  if (core_->users > 0) {
    std::fprintf(stderr, "verbsim: ibv_destroy_srq: SRQ destroyed while %d QPs still use it\n",
                 core_->users);
  }
  release();
}

void SimSrq::destroy() {
  if (core_->users > 0) {
    throw_verb_error("ibv_destroy_srq", EBUSY, std::to_string(core_->users) + " QPs still use the SRQ");
  }
  release();
}

// What destroy() and the destructor both do: the handle and its events not yet taken go; the
// receives go too unless QPs still use the SRQ (a destructor may run while they do).
void SimSrq::release() noexcept {
  core_->handle = nullptr;
  core_->pd->ctx->forget_events_of(static_cast<SharedReceiveQueue*>(this));
  --core_->pd->users;
  if (core_->users == 0) {
    core_->pd->ctx->world->acct().discarded += core_->rq.size();
    core_->rq.clear();
    std::erase(core_->dev->srqs, core_.get());
  }
  destroyed_ = true;
}

PostResult SimSrq::post_recv(std::span<const RecvWr> wrs) noexcept {
  RecvQueue& rq = core_->rq;
  for (std::uint32_t i = 0; i < wrs.size(); ++i) {
    const RecvWr& wr = wrs[i];
    if (wr.sg_list.size() > rq.max_sge) return {i, EINVAL, "too many SGEs"};
    if (rq.size() >= rq.cap) return {i, ENOMEM, "shared receive queue full"};
    RecvWqe& w = rq.at(rq.tail);
    w.wr_id = wr.wr_id;
    w.num_sge = static_cast<std::uint32_t>(wr.sg_list.size());
    copy_sges(wr.sg_list, rq.sge_at(rq.tail));
    sges_to_host(*core_->pd->ctx->dev, rq.sge_at(rq.tail), wr.sg_list.size());
    ++rq.tail;
    ++core_->pd->ctx->world->acct().posted;
  }
  return {static_cast<std::uint32_t>(wrs.size()), 0, ""};
}

void SimSrq::modify(const SrqAttr& attr, SrqAttrMask mask) {
  if (any(mask, SrqAttrMask::max_wr)) {
    throw_verb_error("ibv_modify_srq", EINVAL, "resizing an SRQ is not supported by the simulator");
  }
  if (any(mask, SrqAttrMask::limit)) {
    if (attr.srq_limit > core_->rq.cap) {
      throw_verb_error("ibv_modify_srq", EINVAL, "srq_limit above the SRQ's depth");
    }
    core_->limit = attr.srq_limit;
  }
}

SrqAttr SimSrq::query() const { return {core_->rq.cap, core_->rq.max_sge, core_->limit}; }

namespace {
// The SRQ depth `verb` (ibv_create_srq, ibv_modify_srq) gives for `max_wr`, EINVAL outside
// 1..max_qp_wr.
std::uint32_t srq_depth(const char* verb, std::uint32_t max_wr, const ProfileTraits& t) {
  if (max_wr < 1 || max_wr > t.limits.max_qp_wr) {
    throw_verb_error(verb, EINVAL, "max_wr=" + std::to_string(max_wr) + " out of range");
  }
  return t.round_cq(max_wr);
}
}  // namespace

// rxe's rxe_srq_chk_attr and queue resize, measured: the depth is rounded as at creation and
// must hold the receives already posted; a max_wr below an armed limit is refused.
void SimSrq::resize(std::uint32_t max_wr) {
  const ProfileTraits& t = core_->pd->ctx->world->traits();
  if (!t.srq_resize) throw_verb_error("ibv_modify_srq", EINVAL, "this device cannot resize an SRQ (max_wr)");
  const std::uint32_t depth = srq_depth("ibv_modify_srq", max_wr, t);
  if (core_->limit != 0 && max_wr < core_->limit) {
    throw_verb_error("ibv_modify_srq", EINVAL, "max_wr below the armed srq_limit");
  }
  if (depth < core_->rq.size()) {
    throw_verb_error("ibv_modify_srq", EINVAL,
         "the SRQ holds " + std::to_string(core_->rq.size()) + " receives, more than " +
             std::to_string(depth));
  }
  core_->rq.resize(depth);
  core_->requested = max_wr;
}

void RecvQueue::resize(std::uint32_t capacity) {
  RecvQueue q;
  q.init(capacity, max_sge);
  for (std::uint32_t i = head; i != tail; ++i) {
    q.at(q.tail) = at(i);
    std::copy_n(sge_at(i), max_sge, q.sge_at(q.tail));
    ++q.tail;
  }
  *this = std::move(q);
}

void RecvQueue::init(std::uint32_t capacity, std::uint32_t sge) {
  cap = capacity;
  max_sge = std::max<std::uint32_t>(sge, 1);
  slots = std::bit_ceil(std::max<std::uint32_t>(capacity, 1));
  static_assert(sizeof(RecvWqe) % alignof(Sge) == 0 && alignof(RecvWqe) >= alignof(Sge));
  const std::size_t wqe_bytes = std::size_t{slots} * sizeof(RecvWqe);
  const std::size_t n_sges = std::size_t{slots} * max_sge;
  mem = std::make_unique<std::byte[]>(wqe_bytes + n_sges * sizeof(Sge));  // zeroed
  new (mem.get()) RecvWqe[slots]();
  sges = new (mem.get() + wqe_bytes) Sge[n_sges]();
  head = tail = 0;
}

std::unique_ptr<SharedReceiveQueue> SimPd::create_srq(const SrqInitAttr& attr) {
  const ProfileTraits& t = core_->ctx->world->traits();
  World::Impl& w = *core_->ctx->world;
  if (const int err = w.verb_fault(Verb::create_srq, 0, core_->ctx->dev)) {
    throw_verb_error("ibv_create_srq", err, "injected by the fault plan");
  }
  const std::uint32_t depth = srq_depth("ibv_create_srq", attr.max_wr, t);
  const DevCore& dev = *core_->ctx->dev;
  if (dev.srqs.size() >= static_cast<std::size_t>(dev.limits.max_srq)) {
    throw_verb_error("ibv_create_srq", t.pool_full_errno,
                     "the device holds " + std::to_string(dev.limits.max_srq) +
                         " SRQs already (its max)");
  }
  if (attr.max_sge < 1 || attr.max_sge > t.limits.max_sge) {
    throw_verb_error("ibv_create_srq", EINVAL, "max_sge=" + std::to_string(attr.max_sge) + " out of range");
  }
  auto srq = std::make_shared<SrqCore>();
  srq->pd = core_;
  srq->requested = attr.max_wr;
  srq->rq.init(depth, attr.max_sge);
  srq->limit = 0;  // ibv_create_srq ignores srq_limit; ibv_modify_srq arms it
  srq->dev = core_->ctx->dev;
  srq->dev->srqs.push_back(srq.get());
  ++core_->users;
  std::unique_ptr<SimSrq> handle;
  if (w.faults().targets(Verb::post_srq_recv)) {
    handle = std::make_unique<FaultySrq>(std::move(srq));
  } else {
    handle = std::make_unique<SimSrq>(std::move(srq));
  }
  handle->core()->handle = handle.get();
  return handle;
}

}  // namespace verbsim::sim
