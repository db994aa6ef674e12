#pragma once

#include <cstddef>
#include <cstdint>

#include "verbsim/resource.hpp"
#include "verbsim/types.hpp"

namespace verbsim {

// A registered memory region (ibv_reg_mr).
class MemoryRegion : public Resource {
 public:
  virtual void* addr() const noexcept = 0;
  virtual std::size_t length() const noexcept = 0;
  virtual std::uint32_t lkey() const noexcept = 0;
  virtual std::uint32_t rkey() const noexcept = 0;
  virtual Access access() const noexcept = 0;

  // An SGE covering `length` bytes at `offset` into this region.
  Sge sge(std::size_t offset, std::uint32_t length) const noexcept {
    return {reinterpret_cast<std::uint64_t>(static_cast<char*>(addr()) + offset), length, lkey()};
  }
  std::uint64_t address(std::size_t offset = 0) const noexcept {
    return reinterpret_cast<std::uint64_t>(static_cast<char*>(addr()) + offset);
  }
};

}  // namespace verbsim
