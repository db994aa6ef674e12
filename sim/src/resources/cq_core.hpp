// A completion queue's ring, its overrun and channel arming, and the list of QPs using it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "fabric/assert.hpp"
#include "fabric/world_impl.hpp"
#include "resources/cores.hpp"
#include "verbsim/completion_queue.hpp"

namespace verbsim::sim {

class SimQp;

class QpList {
  struct Entry {
    std::uint32_t qpn;
    SimQp* qp;  // nullptr: removed
  };

 public:
  class iterator {
   public:
    iterator(const Entry* p, const Entry* end) noexcept : p_(p), end_(end) { skip(); }
    SimQp* operator*() const noexcept { return p_->qp; }
    iterator& operator++() noexcept {
      ++p_;
      skip();
      return *this;
    }
    bool operator==(const iterator& o) const noexcept { return p_ == o.p_; }

   private:
    void skip() noexcept {
      while (p_ != end_ && p_->qp == nullptr) ++p_;
    }
    const Entry* p_;
    const Entry* end_;
  };

  // `qpn` is above every QPN in the list.
  void add(std::uint32_t qpn, SimQp* qp) { entries_.push_back({qpn, qp}); }
  void remove(std::uint32_t qpn) noexcept {
    auto it = std::lower_bound(entries_.begin(), entries_.end(), qpn,
                               [](const Entry& e, std::uint32_t n) { return e.qpn < n; });
    if (it == entries_.end() || it->qpn != qpn || it->qp == nullptr) return;
    it->qp = nullptr;
    if (++holes_ * 2 > entries_.size()) {
      std::erase_if(entries_, [](const Entry& e) { return e.qp == nullptr; });
      holes_ = 0;
    }
  }
  iterator begin() const noexcept { return {entries_.data(), entries_.data() + entries_.size()}; }
  iterator end() const noexcept {
    const Entry* e = entries_.data() + entries_.size();
    return {e, e};
  }

 private:
  std::vector<Entry> entries_;
  std::size_t holes_ = 0;
};

struct CqEntry {
  WorkCompletion wc;
  SimQp* qp;               // the QP it belongs to; nullptr once that QP is gone
  std::uint32_t sq_index;  // send completions: the slot it retires
  bool send;
};

struct CqCore {
  std::shared_ptr<CtxCore> ctx;
  World::Impl* world = nullptr;  // ctx->world
  std::shared_ptr<ChannelCore> channel;
  CompletionQueue* handle = nullptr;
  std::vector<CqEntry> ring;  // capacity == cqe
  std::uint32_t head = 0;
  std::uint32_t count = 0;
  std::uint32_t id = 0;  // its number on the device (observers name CQs by it)
  int requested = 0;
  int reported = 0;  // cqe() as the provider reports it (the ring may be smaller under faults)
  int users = 0;  // QPs
  QpList qps;  // the QPs using this CQ (for overrun as a CQ error)
  enum class Arm : std::uint8_t { none, any, solicited } arm = Arm::none;
  bool error = false;        // strict profile after an overrun
  bool ignore_overrun = false;  // IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN: full overwrites the oldest
  unsigned unacked_events = 0;  // taken from the channel, not yet acknowledged
  std::uint64_t dropped = 0;  // completions lost to overrun or to a CQ in error

  CqEntry spill{};  // where a completion the CQ drops is written (see next_slot)

  // Adding a completion is two steps, so that it is written once, in place: fill every field
  // of next_slot(), then commit() it; `solicited` marks a receive of a solicited SEND.
  // next_slot() is the ring's next free entry, or `spill` when the CQ will drop it (overrun,
  // or a CQ in error); commit() returns false then. A full CQ that ignores overrun frees its
  // oldest entry first.
  CqEntry& next_slot() noexcept {
    const auto size = static_cast<std::uint32_t>(ring.size());
    if (error || count == size) [[unlikely]] return full_slot();
    const std::uint32_t i = head + count;
    return ring[i < size ? i : i - size];
  }
  bool commit(const CqEntry& e, bool solicited) {
    Digest& d = world->digest();
    d.add(e.wc.wr_id);
    d.add(static_cast<std::uint64_t>(e.wc.status) << 40 |
          static_cast<std::uint64_t>(e.wc.opcode) << 32 | e.wc.byte_len);
    d.add(e.wc.qp_num);
    if (world->observing()) [[unlikely]] observe(e);
    if (&e == &spill) [[unlikely]] return drop();
    ++count;  // e is ring[head + count]
    VERBSIM_ASSERT(count <= ring.size(), "a CQ holds at most its ring's entries");
    if (arm != Arm::none) [[unlikely]] notify_if_armed(e, solicited);
    return true;
  }
  CqEntry& full_slot() noexcept;  // next_slot() of a CQ in error or full
  bool drop();  // the completion in `spill` is lost: overrun, or a CQ in error
  void observe(const CqEntry& e);  // tells the world's observers of `e`
  void notify_if_armed(const CqEntry& e, bool solicited);
  void notify();
};


}  // namespace verbsim::sim
