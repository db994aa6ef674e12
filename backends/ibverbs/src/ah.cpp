// AddressHandle over ibv_ah.
#include <infiniband/verbs.h>

#include <cerrno>
#include <string>

#include "objects.hpp"
#include "verbsim/abi/translate.hpp"
#include "verbsim/ibverbs/backend.hpp"

namespace verbsim::ibverbs {

IbvAh::IbvAh(ibv_pd* pd, const AhAttr& attr) : attr_(attr) {
  ibv_ah_attr a = abi::to_ibv(attr);
  errno = 0;
  ah_ = ::ibv_create_ah(pd, &a);
  if (ah_ == nullptr) {
    const int err = creator_errno();
    std::string detail = "port " + std::to_string(attr.port_num);
    if (attr.is_global) {
      detail += " dgid " + attr.grh.dgid.to_string() + " sgid_index " +
                std::to_string(attr.grh.sgid_index);
    } else {
      detail += " dlid " + std::to_string(attr.dlid) + " without GRH, which RoCE requires";
    }
    throw_verb_error("ibv_create_ah", err, detail);
  }
}

IbvAh::~IbvAh() {
  if (const int err = release(); err != 0) warn_leak("ibv_destroy_ah", err, "AH");
}

int IbvAh::release() noexcept {
  if (ah_ == nullptr) return 0;
  if (const int ret = ::ibv_destroy_ah(ah_); ret != 0) return returned_errno(ret);
  ah_ = nullptr;
  return 0;
}

void IbvAh::destroy() {
  if (const int err = release(); err != 0) throw_verb_error("ibv_destroy_ah", err);
}

ibv_ah* native(verbsim::AddressHandle& ah) noexcept {
  auto* a = dynamic_cast<IbvAh*>(&ah);
  return a != nullptr ? a->native() : nullptr;
}

}  // namespace verbsim::ibverbs
