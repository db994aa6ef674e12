#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "verbsim/resource.hpp"
#include "verbsim/types.hpp"

namespace verbsim {

class ProtectionDomain;

// What MemoryRegion::rereg changes (ibv_rereg_mr's flags); unset members stay as they are.
struct MrChange {
  ProtectionDomain* pd = nullptr;  // IBV_REREG_MR_CHANGE_PD: to this PD (same device)
  void* addr = nullptr;            // IBV_REREG_MR_CHANGE_TRANSLATION, with length: this range
  std::size_t length = 0;
  std::optional<Access> access;    // IBV_REREG_MR_CHANGE_ACCESS
};

// A registered memory region (ibv_reg_mr).
class MemoryRegion : public Resource {
 public:
  virtual void* addr() const noexcept = 0;
  // The address its first byte has for work requests through its keys (reg_mr_iova's iova;
  // addr() for ibv_reg_mr).
  virtual std::uint64_t iova() const noexcept = 0;
  virtual std::size_t length() const noexcept = 0;
  virtual std::uint32_t lkey() const noexcept = 0;
  virtual std::uint32_t rkey() const noexcept = 0;
  virtual Access access() const noexcept = 0;

  // ibv_rereg_mr: changes the region in place. Work requests posted from now on, and peers
  // using its keys, see the new PD, range and access; lkey() and rkey() tell the keys after it
  // (the simulator keeps them; a provider may not). Throws VerbError: EINVAL for an empty
  // range, a PD of another device, REMOTE_WRITE or REMOTE_ATOMIC without LOCAL_WRITE, or a
  // memory window bound to the region; EOPNOTSUPP where the device has no rereg (rxe, and the
  // simulator's rxe profile). The default throws EOPNOTSUPP.
  virtual void rereg(const MrChange& change);

  // An SGE covering `length` bytes at `offset` into this region.
  Sge sge(std::size_t offset, std::uint32_t length) const noexcept {
    return {address(offset), length, lkey()};
  }
  // The address of the byte at `offset` for work requests through its keys.
  std::uint64_t address(std::size_t offset = 0) const noexcept { return iova() + offset; }
};

}  // namespace verbsim
