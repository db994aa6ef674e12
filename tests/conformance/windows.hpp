// What the memory window cases share (conformance_mw.cpp, conformance_zero_based.cpp): a region
// of the fixture's buffer that windows bind to, binds of both types, one RDMA operation through
// a key, and the check of where its data landed.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "conformance.hpp"

namespace verbsim::conformance {

class WindowTest : public Conformance {
 protected:
  static constexpr std::size_t kSrc = 0;          // the requester's data
  // The MR windows bind to: kRegionLen bytes from kRegion on, page aligned (region_offset()).
  static constexpr std::size_t kRegion = 32768;
  static constexpr std::size_t kRegionLen = 16384;
  static constexpr std::size_t kWinOff = 4096;    // the window: kWinLen bytes at kWinOff into it
  static constexpr std::size_t kWinLen = 4096;
  static constexpr Access kRemote = Access::remote_write | Access::remote_read;

  bool supports(MwType t) {
    const DeviceAttr a = ctx().query_device();
    return t == MwType::type1 ? a.mw_type1 : a.mw_type2;
  }
  // The offset into the fixture's buffer of the region's first byte: the first page boundary
  // from kRegion on (an iova must have the buffer's offset in its page).
  std::size_t region_offset() {
    const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    const auto at = reinterpret_cast<std::uintptr_t>(mem(kRegion));
    return kRegion + (page - at % page) % page;
  }
  char* region_mem(std::size_t offset = 0) { return mem(region_offset() + offset); }
  // The region windows bind to (the fixture's buffer registered a second time).
  std::unique_ptr<MemoryRegion> region(Access access = Access::local_write | kRemote |
                                                       Access::mw_bind) {
    return pd().reg_mr(region_mem(), kRegionLen, access);
  }
  static MwBindInfo window(const MemoryRegion& r, Access access = kRemote) {
    return {&r, r.address(kWinOff), kWinLen, access};
  }
  // A BIND_MW of `bind` (which must outlive the post) giving the window `rkey`.
  static SendWr bind_wr(std::uint64_t id, const BindMwWr& bind, std::uint32_t rkey) {
    SendWr wr = send_wr(id, nullptr, WrOpcode::bind_mw);
    wr.bind_mw = &bind;
    wr.rkey = rkey;
    return wr;
  }
  static SendWr inv_wr(std::uint64_t id, WrOpcode op, std::uint32_t key, const Sge* s = nullptr) {
    SendWr wr = send_wr(id, s, op);
    wr.imm_data = key;  // LOCAL_INV and SEND_WITH_INV name the key here
    return wr;
  }
  // Binds the type 1 window on `qp`, expecting the post to succeed; returns the bind's
  // completion.
  std::string bind1(QueuePair& qp, CompletionQueue& cq, MemoryWindow& mw, const MwBindInfo& info) {
    const PostResult r = qp.bind_mw(mw, MwBind{7, SendFlags::signaled, info});
    CHECK_ERR("bind_post", r.error(), 0);
    return describe(poll_n(cq, 1));
  }
  // Binds the type 2 window on `qp` with the next key, expecting the post to succeed; returns
  // the bind's completion.
  std::string bind2(QueuePair& qp, CompletionQueue& cq, MemoryWindow& mw, const MwBindInfo& info) {
    const BindMwWr bind{&mw, info};
    const PostResult r = qp.post_send(bind_wr(7, bind, inc_rkey(mw.rkey())));
    CHECK_ERR("bind_post", r.error(), 0);
    return describe(poll_n(cq, 1));
  }
  // One signaled RDMA operation of `len` bytes from kSrc; returns its completion.
  std::string rdma(QueuePair& from, CompletionQueue& cq, WrOpcode op, std::uint64_t addr,
                   std::uint32_t rkey, std::uint32_t len = 64) {
    const Sge s = sge(kSrc, len);
    const PostResult r = from.post_send(rdma_wr(1, op, &s, addr, rkey));
    if (r.error()) return "post:" + errno_name(r.error());
    return describe(poll_n(cq, 1));
  }
  std::string write_fails() const {
    return err_wc(WcStatus::rem_access_err, WcOpcode::rdma_write, 64);
  }
  void fill_source() {
    for (std::size_t i = 0; i < 64; ++i) mem(kSrc)[i] = static_cast<char>(0xa0 + i);
  }
  // Did the 64 bytes of kSrc land at `offset` into the region?
  bool landed(std::size_t offset) {
    return std::memcmp(region_mem(offset), mem(kSrc), 64) == 0;
  }
};

// Skips the test when the device has no windows of type `t`.
#define REQUIRE_MW(t)                                                                 \
  do {                                                                                \
    if (!supports(t)) {                                                               \
      GTEST_SKIP() << "the device has no type " << (t == MwType::type1 ? 1 : 2)       \
                   << " memory windows";                                              \
    }                                                                                 \
  } while (0)

}  // namespace verbsim::conformance
