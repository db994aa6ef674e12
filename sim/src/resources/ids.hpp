// Devices and their ports, and the tables that find a device's objects by number.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "verbsim/context.hpp"
#include "verbsim/sim/port_counters.hpp"

namespace verbsim::sim {

class SimQp;
struct CtxCore;

struct PortCore {
  PortAttr attr;
  std::vector<Gid> gids;
  std::uint64_t busy_until = 0;  // egress serialisation
  PortHwCounters counters;
};

struct MrCore;
struct MwCore;
struct SrqCore;

// Memory keys are an index and a random low byte. MRs take the indices from 1 up to
// kFirstMwIndex - 1 (the device's max_mr), memory windows those from kFirstMwIndex on, so a key
// names one table only (as rxe splits its MR and MW indices).
inline constexpr std::uint32_t kFirstMwIndex = (1u << 20) + 1;
inline constexpr std::uint32_t kMaxMwIndex = 0xffffff;

// Objects of a device by number (QPN, MR index): a vector indexed by `id - base`, since the
// simulator hands out numbers in sequence. O(1) on the data path, no hashing.
template <class T>
class IdTable {
 public:
  explicit IdTable(std::uint32_t base) : base_(base) {}
  T* find(std::uint32_t id) const noexcept {
    const std::uint32_t i = id - base_;
    return i < size_ ? slots_[i] : nullptr;
  }
  void insert(std::uint32_t id, T* p) {
    const std::uint32_t i = id - base_;
    if (i >= size_) {
      slots_.resize(i + 1, nullptr);
      size_ = i + 1;
    }
    slots_[i] = p;
  }
  void erase(std::uint32_t id) noexcept {
    const std::uint32_t i = id - base_;
    if (i < size_) slots_[i] = nullptr;
  }
  // Live objects in id order.
  template <class F>
  void for_each(F&& f) const {
    for (T* p : slots_) {
      if (p != nullptr) f(*p);
    }
  }

 private:
  std::uint32_t base_;
  std::uint32_t size_ = 0;  // slots_.size(), kept so that find() needs one load to compare
  std::vector<T*> slots_;
};

// Numbers from `first` to `last` (QPNs, MR indices): handed out in sequence and, once all have
// been, the freed ones again, longest freed first (rxe's pools allocate cyclically), so a number
// just freed is not at once reused. What is given back may carry more than the number (a memory
// key: its index and the low byte it had).
class NumberPool {
 public:
  NumberPool(std::uint32_t first, std::uint32_t last) : next_(first), last_(last) {}
  bool fresh_left() const noexcept { return next_ <= last_; }
  std::uint32_t take_fresh() noexcept { return next_++; }
  bool freed_left() const noexcept { return !freed_.empty(); }
  std::uint32_t take_freed() noexcept {
    const std::uint32_t v = freed_.front();
    freed_.pop_front();
    return v;
  }
  void give_back(std::uint32_t value) { freed_.push_back(value); }
  // Tests: a number space small enough to run through.
  void set_last(std::uint32_t last) noexcept { last_ = last; }

 private:
  std::uint32_t next_;
  std::uint32_t last_;  // < UINT32_MAX
  std::deque<std::uint32_t> freed_;
};

// How many objects of each kind a device holds at most: what ibv_query_device reports, and
// enforced (per device, as the kernel's pools are).
struct ObjectLimits {
  int max_qp = 1 << 20;
  int max_cq = 1 << 20;
  int max_mr = 1 << 20;  // = the MR index space, 1 .. kFirstMwIndex - 1
  int max_pd = 1 << 20;
  int max_srq = 1 << 18;
  int max_ah = 1 << 20;
};

struct DevCore {
  int index = 0;
  std::string name;
  std::uint64_t guid = 0;
  std::vector<PortCore> ports;  // ports[0] is port 1
  IdTable<SimQp> qps{0x11};  // by QPN (rxe starts at 17 too)
  IdTable<MrCore> mrs{0};    // by key >> 8 (the MR's index); the low byte is a random key
  IdTable<MwCore> mws{kFirstMwIndex};  // memory windows, by key >> 8 likewise
  std::vector<CtxCore*> contexts;  // for device and port async events
  std::vector<SrqCore*> srqs;      // for the srq_limit fault
  NumberPool qpns{0x11, 0xffffff};
  NumberPool mr_indices{1, kFirstMwIndex - 1};  // gives back keys
  std::uint32_t next_mw_index = kFirstMwIndex;
  int live_mws = 0;
  // The MR or memory window whose key is `key` (index and random byte), or nullptr.
  MrCore* mr_of(std::uint32_t key) const noexcept;
  MwCore* window_of(std::uint32_t key) const noexcept;
  // Changes when an MR of the device is deregistered or re-registered: keys that QPs found
  // before (SimQp::find_mr) must be looked up again.
  std::uint64_t mr_generation = 1;
  std::uint32_t next_pd_id = 1;
  std::uint32_t next_cq_id = 1;  // CQs by number, for observers
  ObjectLimits limits;
  int live_qps = 0;
  int live_cqs = 0;
  int live_mrs = 0;
  int live_iova_mrs = 0;  // MRs addressed from an iova other than their buffer's address
  int live_pds = 0;
  int live_ahs = 0;
};

// The device of a simulator context, for tests that shrink its limits or number spaces.
DevCore& device_of(Context& ctx);


}  // namespace verbsim::sim
