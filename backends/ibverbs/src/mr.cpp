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

std::string describe(const void* addr, std::size_t length, std::uint64_t iova, Access access) {
  std::string s = describe(addr, length, access);
  if (iova != reinterpret_cast<std::uintptr_t>(addr)) {
    char buf[32];
    std::snprintf(buf, sizeof buf, " iova=0x%llx", static_cast<unsigned long long>(iova));
    s += buf;
  }
  return s;
}

}  // namespace

IbvMr::IbvMr(ibv_pd* pd, void* addr, std::size_t length, std::uint64_t iova, Access access)
    : addr_(addr), iova_(iova), length_(length), access_(access) {
  // NULL and length 0 go to the provider: the kernel decides (ib_umem_get). ibv_reg_mr is this
  // call with iova = addr.
  errno = 0;
  mr_ = ::ibv_reg_mr_iova2(pd, addr, length, iova, abi::to_ibv(access));
  if (mr_ == nullptr) {
    const int err = creator_errno();
    throw_verb_error("ibv_reg_mr", err, describe(addr, length, iova, access));
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
  if ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) != 0) {
    addr_ = addr;
    iova_ = reinterpret_cast<std::uintptr_t>(addr);  // providers pass the new address as iova
  }
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
