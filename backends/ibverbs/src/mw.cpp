// MemoryWindow over ibv_mw.
#include <infiniband/verbs.h>

#include <cerrno>
#include <string>

#include "objects.hpp"
#include "verbsim/ibverbs/backend.hpp"

namespace verbsim::ibverbs {

IbvMw::IbvMw(ibv_pd* pd, MwType type) : type_(type) {
  errno = 0;
  mw_ = ::ibv_alloc_mw(pd, static_cast<ibv_mw_type>(type));
  if (mw_ == nullptr) {
    throw_verb_error("ibv_alloc_mw", creator_errno(),
                     "type=" + std::to_string(static_cast<int>(type)));
  }
}

IbvMw::~IbvMw() {
  if (const int err = release(); err != 0) warn_leak("ibv_dealloc_mw", err, "MW");
}

int IbvMw::release() noexcept {
  if (mw_ == nullptr) return 0;
  const std::uint32_t key = mw_->rkey;
  if (const int ret = ::ibv_dealloc_mw(mw_); ret != 0) return returned_errno(ret);
  mw_ = nullptr;
  rkey_ = key;  // rkey() keeps answering
  return 0;
}

void IbvMw::destroy() {
  const int err = release();
  if (err == EBUSY) throw_verb_error("ibv_dealloc_mw", err, "the window is still in use");
  if (err != 0) throw_verb_error("ibv_dealloc_mw", err);
}

ibv_mw* native(verbsim::MemoryWindow& mw) noexcept {
  auto* w = dynamic_cast<IbvMw*>(&mw);
  return w != nullptr ? w->native() : nullptr;
}

}  // namespace verbsim::ibverbs
