// ProtectionDomain over ibv_pd: the creator of MRs, MWs, QPs, SRQs and AHs.
#include <infiniband/verbs.h>

#include <cerrno>

#include "objects.hpp"
#include "verbsim/ibverbs/backend.hpp"

namespace verbsim::ibverbs {

IbvPd::IbvPd(IbvContext& context) : context_(context) {
  errno = 0;
  pd_ = ::ibv_alloc_pd(context.native());
  if (pd_ == nullptr) throw_verb_error("ibv_alloc_pd", creator_errno(), context.info().name);
  context_.add_child();
}

IbvPd::~IbvPd() {
  if (const int err = release(); err != 0) warn_leak("ibv_dealloc_pd", err, "PD");
}

int IbvPd::release() noexcept {
  if (pd_ == nullptr) return 0;
  if (const int ret = ::ibv_dealloc_pd(pd_); ret != 0) return returned_errno(ret);
  pd_ = nullptr;
  context_.remove_child();
  return 0;
}

void IbvPd::destroy() {
  const int err = release();
  if (err == EBUSY)
    throw_verb_error("ibv_dealloc_pd", err, "MRs, MWs, QPs, SRQs or AHs still use the PD");
  if (err != 0) throw_verb_error("ibv_dealloc_pd", err);
}

std::unique_ptr<MemoryRegion> IbvPd::reg_mr_iova(void* addr, std::size_t length,
                                                 std::uint64_t iova, Access access) {
  return std::make_unique<IbvMr>(pd_, addr, length, iova, access);
}

std::unique_ptr<QueuePair> IbvPd::create_qp(const QpInitAttr& attr) {
  return std::make_unique<IbvQp>(pd_, attr);
}

std::unique_ptr<SharedReceiveQueue> IbvPd::create_srq(const SrqInitAttr& attr) {
  return std::make_unique<IbvSrq>(pd_, attr);
}

std::unique_ptr<AddressHandle> IbvPd::create_ah(const AhAttr& attr) {
  return std::make_unique<IbvAh>(pd_, attr);
}

std::unique_ptr<MemoryWindow> IbvPd::alloc_mw(MwType type) {
  return std::make_unique<IbvMw>(pd_, type);
}

ibv_pd* native(verbsim::ProtectionDomain& pd) noexcept {
  auto* p = dynamic_cast<IbvPd*>(&pd);
  return p != nullptr ? p->native() : nullptr;
}

}  // namespace verbsim::ibverbs
