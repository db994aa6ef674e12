// MemoryRegion over ibv_mr.
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdio>
#include <string>

#include "objects.hpp"
#include "verbsim/abi/translate.hpp"
#include "verbsim/ibverbs/backend.hpp"

namespace verbsim::ibverbs {

namespace {

std::string describe(const void* addr, std::size_t length, Access access) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "addr=%p length=%zu access=0x%x", addr, length,
                static_cast<unsigned>(to_underlying(access)));
  return buf;
}

}  // namespace

IbvMr::IbvMr(ibv_pd* pd, void* addr, std::size_t length, Access access)
    : addr_(addr), length_(length), access_(access) {
  // NULL and length 0 go to the provider: the kernel decides (ib_umem_get).
  errno = 0;
  mr_ = ::ibv_reg_mr(pd, addr, length, abi::to_ibv(access));
  if (mr_ == nullptr) {
    const int err = creator_errno();
    throw_verb_error("ibv_reg_mr", err, describe(addr, length, access));
  }
  lkey_ = mr_->lkey;
  rkey_ = mr_->rkey;
}

void IbvMr::rereg(const MrChange& change) {
  int flags = 0;
  ibv_pd* pd = nullptr;
  if (change.pd != nullptr) {
    auto* ours = dynamic_cast<IbvPd*>(change.pd);
    if (ours == nullptr) throw_verb_error("ibv_rereg_mr", EINVAL, "PD from another backend");
    pd = ours->native();
    flags |= IBV_REREG_MR_CHANGE_PD;
  }
  void* addr = addr_;
  std::size_t length = length_;
  if (change.addr != nullptr || change.length != 0) {
    if (change.addr == nullptr || change.length == 0) {
      throw_verb_error("ibv_rereg_mr", EINVAL, "empty range");
    }
    addr = change.addr;
    length = change.length;
    flags |= IBV_REREG_MR_CHANGE_TRANSLATION;
  }
  const Access access = change.access.value_or(access_);
  if (change.access) flags |= IBV_REREG_MR_CHANGE_ACCESS;
  errno = 0;
  // 0, or an ibv_rereg_mr_err_code with errno set.
  if (::ibv_rereg_mr(mr_, flags, pd, addr, length, change.access ? abi::to_ibv(access) : 0) != 0) {
    throw_verb_error("ibv_rereg_mr", errno != 0 ? errno : EINVAL, describe(addr, length, access));
  }
  addr_ = addr;
  length_ = length;
  access_ = access;
  lkey_ = mr_->lkey;
  rkey_ = mr_->rkey;
}

IbvMr::~IbvMr() {
  if (const int err = release(); err != 0) warn_leak("ibv_dereg_mr", err, "MR");
}

int IbvMr::release() noexcept {
  if (mr_ == nullptr) return 0;
  if (const int ret = ::ibv_dereg_mr(mr_); ret != 0) return returned_errno(ret);
  mr_ = nullptr;
  return 0;
}

void IbvMr::destroy() {
  const int err = release();
  // rxe refuses with EINVAL while a memory window is bound to the MR (hardware may say EBUSY).
  if (err == EINVAL || err == EBUSY) {
    throw_verb_error("ibv_dereg_mr", err, "memory windows may still be bound to the MR");
  }
  if (err != 0) throw_verb_error("ibv_dereg_mr", err);
}

ibv_mr* native(verbsim::MemoryRegion& mr) noexcept {
  auto* m = dynamic_cast<IbvMr*>(&mr);
  return m != nullptr ? m->native() : nullptr;
}

}  // namespace verbsim::ibverbs
