// CompletionQueue over ibv_cq.
#include <infiniband/verbs.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <string>

#include "objects.hpp"
#include "verbsim/abi/translate.hpp"
#include "verbsim/ibverbs/backend.hpp"

namespace verbsim::ibverbs {

namespace {
constexpr int kMaxPoll = INT_MAX;  // ibv_poll_cq's num_entries is an int
}  // namespace

IbvCq::IbvCq(IbvContext& context, int cqe, CompletionChannel* channel, int comp_vector,
             CqCreateFlags flags)
    : context_(context), channel_(channel), requested_cqe_(cqe) {
  // Providers differ on cqe == 0 (some round it up); the core API documents EINVAL.
  if (cqe < 1) throw_verb_error("ibv_create_cq", EINVAL, "cqe=" + std::to_string(cqe));
  ibv_comp_channel* raw_channel = nullptr;
  if (channel != nullptr) {
    auto* ours = dynamic_cast<IbvChannel*>(channel);
    if (ours == nullptr) {
      throw_verb_error("ibv_create_cq", EINVAL, "completion channel from another backend");
    }
    raw_channel = ours->native();
  }
  errno = 0;
  const char* verb = "ibv_create_cq";
  if (flags == CqCreateFlags::none) {
    cq_ = ::ibv_create_cq(context.native(), cqe, static_cast<CompletionQueue*>(this), raw_channel,
                          comp_vector);
  } else {
    verb = "ibv_create_cq_ex";
    ibv_cq_init_attr_ex attr{};
    attr.cqe = static_cast<std::uint32_t>(cqe);
    attr.cq_context = static_cast<CompletionQueue*>(this);
    attr.channel = raw_channel;
    attr.comp_vector = static_cast<std::uint32_t>(comp_vector);
    attr.wc_flags = IBV_WC_STANDARD_FLAGS;
    attr.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
    attr.flags = static_cast<std::uint32_t>(to_underlying(flags));  // the same bits
    static_assert(static_cast<std::uint32_t>(CqCreateFlags::ignore_overrun) ==
                  IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN);
    if (ibv_cq_ex* ex = ::ibv_create_cq_ex(context.native(), &attr); ex != nullptr) {
      cq_ = ::ibv_cq_ex_to_cq(ex);
    }
  }
  if (cq_ == nullptr) {
    const int err = creator_errno();
    throw_verb_error(verb, err,
                     "cqe=" + std::to_string(cqe) + " comp_vector=" + std::to_string(comp_vector));
  }
  cqe_ = cq_->cqe;
  context_.add_child();
}

IbvCq::~IbvCq() {
  if (const int err = release(); err != 0) warn_leak("ibv_destroy_cq", err, "CQ");
}

int IbvCq::release() noexcept {
  if (cq_ == nullptr) return 0;
  // Waits for every event taken from the channel for this CQ to be acknowledged.
  if (const int ret = ::ibv_destroy_cq(cq_); ret != 0) return returned_errno(ret);
  cq_ = nullptr;
  context_.remove_child();
  return 0;
}

void IbvCq::destroy() {
  const int err = release();
  if (err == EBUSY) throw_verb_error("ibv_destroy_cq", err, "QPs still use the CQ");
  if (err != 0) throw_verb_error("ibv_destroy_cq", err);
}

namespace {

// IbvCq::poll and IbvRxeCq::poll: `KernelFlags` says whether wc_flags come in the kernel's
// numbering (see fix_up_from_ibv).
template <bool KernelFlags>
PollResult poll_cq(ibv_cq* cq, std::span<WorkCompletion> out) noexcept {
  // The provider writes straight into `out` (verbsim/abi/translate.hpp's layout contract); one
  // call, since fewer completions than asked for means the CQ is empty.
  const int want = static_cast<int>(std::min<std::size_t>(out.size(), kMaxPoll));
  const int got = ::ibv_poll_cq(cq, want, abi::as_ibv(out.data()));
  // A negative count carries no errno (mlx5 returns -2 for a bad CQE): report EIO.
  if (got < 0) [[unlikely]] return {0, EIO};
  for (int i = 0; i < got; ++i) abi::fix_up_from_ibv(out[static_cast<std::size_t>(i)], KernelFlags);
  return {static_cast<std::uint32_t>(got), 0};
}

}  // namespace

PollResult IbvCq::poll(std::span<WorkCompletion> out) noexcept {
  return poll_cq<false>(cq_, out);
}

PollResult IbvRxeCq::poll(std::span<WorkCompletion> out) noexcept {
  return poll_cq<true>(native(), out);
}

std::error_code IbvCq::req_notify(bool solicited_only) noexcept {
  // Without a channel the provider arms the CQ all the same (rxe, mlx5): no event can come.
  const int ret = ::ibv_req_notify_cq(cq_, solicited_only ? 1 : 0);
  return ret == 0 ? std::error_code{} : errno_code(returned_errno(ret));
}

void IbvCq::ack_events(unsigned n) noexcept { ::ibv_ack_cq_events(cq_, n); }

void IbvCq::resize(int cqe) {
  if (const int ret = ::ibv_resize_cq(cq_, cqe); ret != 0) {
    throw_verb_error("ibv_resize_cq", returned_errno(ret), "cqe=" + std::to_string(cqe));
  }
  cqe_ = cq_->cqe;
  requested_cqe_ = cqe;
}

ibv_cq* native(verbsim::CompletionQueue& cq) noexcept {
  auto* c = dynamic_cast<IbvCq*>(&cq);
  return c != nullptr ? c->native() : nullptr;
}

}  // namespace verbsim::ibverbs
