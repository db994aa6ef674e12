#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "verbsim/resource.hpp"
#include "verbsim/types.hpp"

namespace verbsim {

class AddressHandle;
class MemoryRegion;
class MemoryWindow;
class QueuePair;
class SharedReceiveQueue;

// A protection domain (ibv_alloc_pd). Every creator throws VerbError naming the verb.
class ProtectionDomain : public Resource {
 public:
  // ibv_reg_mr_iova2: registers [addr, addr + length), addressed through the MR's keys from
  // `iova`: a work request's address a (a local SGE's or, through the rkey, a remote one) names
  // the byte at addr + (a - iova). EINVAL for an iova whose offset in its page differs from
  // addr's, remote write/atomic access without local write, a range that wraps or spans more
  // pages than the kernel pins, or one that touches no page: length 0 at a page boundary (NULL
  // included); EFAULT for a range not all mapped (NULL with a length: page 0; simulator:
  // checked with mincore, as the pin would fail); ENOMEM past the device's MR limit. Length 0
  // inside a page registers that page's pin and gives an MR of length 0 with keys of its own,
  // good for 0-byte transfers only (rxe, kernel 6.1). Access::zero_based is accepted and leaves
  // the MR addressed from `iova` (rxe: an MR addressed from 0 is one registered with iova 0),
  // and no window binds to such an MR (WcStatus::mw_bind_err).
  virtual std::unique_ptr<MemoryRegion> reg_mr_iova(void* addr, std::size_t length,
                                                    std::uint64_t iova, Access access) = 0;
  // ibv_reg_mr: reg_mr_iova with the buffer's own address as the iova (libibverbs' ibv_reg_mr
  // is that too).
  std::unique_ptr<MemoryRegion> reg_mr(void* addr, std::size_t length, Access access) {
    return reg_mr_iova(addr, length, reinterpret_cast<std::uintptr_t>(addr), access);
  }
  // ibv_create_qp. EINVAL for missing CQs or caps beyond the device limits.
  virtual std::unique_ptr<QueuePair> create_qp(const QpInitAttr& attr) = 0;
  // ibv_create_srq.
  virtual std::unique_ptr<SharedReceiveQueue> create_srq(const SrqInitAttr& attr) = 0;
  // ibv_create_ah.
  virtual std::unique_ptr<AddressHandle> create_ah(const AhAttr& attr) = 0;
  // ibv_alloc_mw. EOPNOTSUPP when the device has no windows of that type, EINVAL for a type
  // that is neither 1 nor 2, ENOMEM past the device's max_mw.
  virtual std::unique_ptr<MemoryWindow> alloc_mw(MwType type) = 0;
};

}  // namespace verbsim
