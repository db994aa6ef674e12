// CompletionChannel over ibv_comp_channel.
#include <infiniband/verbs.h>

#include <cerrno>

#include "objects.hpp"
#include "verbsim/ibverbs/backend.hpp"

namespace verbsim::ibverbs {

IbvChannel::IbvChannel(IbvContext& context) : context_(context) {
  errno = 0;
  channel_ = ::ibv_create_comp_channel(context.native());
  if (channel_ == nullptr) {
    throw_verb_error("ibv_create_comp_channel", creator_errno(), context.info().name);
  }
  if (const int err = set_nonblocking(channel_->fd); err != 0) {
    ::ibv_destroy_comp_channel(channel_);
    throw_verb_error("fcntl", err, "O_NONBLOCK on a completion channel fd");
  }
  context_.add_child();
}

IbvChannel::~IbvChannel() {
  if (const int err = release(); err != 0) {
    warn_leak("ibv_destroy_comp_channel", err, "completion channel");
  }
}

int IbvChannel::release() noexcept {
  if (channel_ == nullptr) return 0;
  if (const int ret = ::ibv_destroy_comp_channel(channel_); ret != 0) return returned_errno(ret);
  channel_ = nullptr;
  context_.remove_child();
  return 0;
}

void IbvChannel::destroy() {
  const int err = release();
  if (err == EBUSY) throw_verb_error("ibv_destroy_comp_channel", err, "CQs still use the channel");
  if (err != 0) throw_verb_error("ibv_destroy_comp_channel", err);
}

std::error_code IbvChannel::get_cq_event(CompletionQueue*& cq, Wait wait) {
  for (;;) {
    ibv_cq* raw = nullptr;
    void* user = nullptr;
    errno = 0;
    // The fd is non-blocking: -1 with EAGAIN when no event is pending.
    if (::ibv_get_cq_event(channel_, &raw, &user) == 0) {
      cq = static_cast<CompletionQueue*>(user);
      return {};
    }
    const int err = errno != 0 ? errno : EIO;
    if (err == EINTR) continue;
    if ((err != EAGAIN && err != EWOULDBLOCK) || wait == Wait::nonblocking) return errno_code(err);
    if (const int werr = wait_readable(channel_->fd); werr != 0) return errno_code(werr);
  }
}

ibv_comp_channel* native(verbsim::CompletionChannel& channel) noexcept {
  auto* c = dynamic_cast<IbvChannel*>(&channel);
  return c != nullptr ? c->native() : nullptr;
}

}  // namespace verbsim::ibverbs
