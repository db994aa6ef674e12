#pragma once

#include "verbsim/resource.hpp"
#include "verbsim/types.hpp"

namespace verbsim {

// Address handle for UD sends (ibv_create_ah).
class AddressHandle : public Resource {
 public:
  virtual const AhAttr& attr() const noexcept = 0;
};

}  // namespace verbsim
