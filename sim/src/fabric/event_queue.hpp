// The world's pending events and how they run: a binary heap for timers, faults and packets
// a fault delayed, one FIFO per egress port for packets on time, and the ring of the last
// events run. Private state; the world owns one and runs it through a handler.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fabric/event.hpp"

namespace verbsim::sim {

class EventQueue {
 public:
  static constexpr std::size_t kHistory = 64;  // events kept for failure reports

  explicit EventQueue(std::size_t wires)
      : wires_(wires), busy_wires_((wires + 63) / 64, 0), history_(kHistory) {}

  // Adds a timer, fault or delayed packet (ordered by time, then by when it was scheduled).
  void schedule(Event e) {
    e.seq = seq_++;
    std::uint32_t slot;
    if (free_slots_.empty()) {
      slot = static_cast<std::uint32_t>(slab_.size());
      slab_.push_back(e);
    } else {
      slot = free_slots_.back();
      free_slots_.pop_back();
      slab_[slot] = e;
    }
    heap_.push_back({e.time, (e.seq << 24) | slot});
    earliest_scheduled_ = std::min(earliest_scheduled_, e.time);
    std::push_heap(heap_.begin(), heap_.end(), Later{});
  }
  // Puts a packet on its wire (e.wire), behind those already there: times on a wire never
  // decrease, since its port serialises.
  void push_wire(const Event& e) {
    earliest_scheduled_ = std::min(earliest_scheduled_, e.time);
    busy_wires_[e.wire / 64] |= std::uint64_t{1} << (e.wire % 64);
    ++in_flight_;
    wires_[e.wire].push(e).seq = seq_++;  // the copy in the FIFO gets the sequence number
  }
  // The packet next to arrive by `wire`, or nullptr (ACK coalescing looks at it and marks it).
  Event* wire_front(std::uint16_t wire) noexcept {
    Fifo& f = wires_[wire];
    return f.empty() ? nullptr : &f.front();
  }
  std::size_t pending() const noexcept { return heap_.size() + in_flight_; }
  // Events run so far.
  std::uint64_t events_run() const noexcept { return history_next_; }
  // The time of the earliest pending event (UINT64_MAX: none), idle timers included.
  std::uint64_t earliest() const noexcept {
    std::uint64_t next = heap_.empty() ? UINT64_MAX : heap_.front().time;
    for (const Fifo& f : wires_) {
      if (!f.empty()) next = std::min(next, f.front().time);
    }
    return next;
  }

  // Runs the events of the earliest pending instant, if there is one and (kLimited) it is at
  // or before `limit`, moving `now` to it. Each event runs through `h.dispatch(e)`;
  // `h.timer_is_idle(e)` says of a timer on the heap's top that it would do nothing, and it is
  // dropped rather than run, so time never jumps to it. False if nothing ran.
  template <bool kLimited, class Handler>
  bool step(std::uint64_t limit, std::uint64_t& now, Handler& h);
  // Drops the heap's first event if `h.timer_is_idle` says it would do nothing.
  template <class Handler>
  bool drop_idle_timer_on_top(Handler& h);

  // The last events run, oldest first.
  template <class F>
  void for_each_recent(F&& f) const {
    const std::size_t n = std::min(history_next_, kHistory);
    for (std::size_t i = history_next_ - n; i < history_next_; ++i) f(history_[i % kHistory]);
  }

 private:
  // Heap entries: 16-byte keys (time, then sequence) over a slab of payloads, so sifting moves
  // keys, not whole events.
  struct HeapKey {
    std::uint64_t time;
    std::uint64_t seq_slot;  // sequence << 24 | slab slot: unique, ordered by sequence
  };
  struct Later {
    bool operator()(const HeapKey& a, const HeapKey& b) const noexcept {
      return a.time != b.time ? a.time > b.time : a.seq_slot > b.seq_slot;
    }
  };
  // Packets in flight through one egress port: what leaves it arrives in order, so it needs
  // no heap.
  struct Fifo {
    std::vector<Event> events;
    std::uint32_t head = 0;
    std::uint32_t tail = 0;  // == events.size(), kept to avoid dividing by sizeof(Event)
    bool empty() const noexcept { return head == tail; }
    const Event& front() const noexcept { return events[head]; }
    Event& front() noexcept { return events[head]; }
    Event& push(const Event& e) {
      ++tail;
      return events.emplace_back(e);
    }
    void pop_into(Event& e) noexcept {
      e = events[head++];
      if (head == tail) {
        events.clear();
        head = tail = 0;
      }
    }
  };
  static constexpr int kNoEvent = -2;
  static constexpr int kHeapEvent = -1;

  void pop_wire(std::size_t i, Event& e) noexcept {
    Fifo& f = wires_[i];
    f.pop_into(e);
    if (f.empty()) busy_wires_[i / 64] &= ~(std::uint64_t{1} << (i % 64));
    --in_flight_;
  }
  // Where the earliest pending event is: kHeapEvent, a wire's index, or kNoEvent; `time` is
  // its time, `runner_up` the earliest time among the other sources' first events.
  int next_event(std::uint64_t& time, std::uint64_t& runner_up) const noexcept;
  // next_event(), or the hinted wire when it certainly comes first; drops idle timers on the
  // way.
  template <class Handler>
  int next_source(std::uint64_t& time, std::uint64_t& runner_up, Handler& h) noexcept;

  std::uint64_t seq_ = 0;
  std::vector<HeapKey> heap_;
  std::vector<Event> slab_;
  std::vector<std::uint32_t> free_slots_;
  std::vector<Fifo> wires_;
  std::size_t in_flight_ = 0;  // events in all wires
  // Bit i % 64 of word i / 64: wire i holds packets. next_event looks at those wires only.
  std::vector<std::uint64_t> busy_wires_;
  // The earliest time of the events scheduled since step() last reset it.
  std::uint64_t earliest_scheduled_ = UINT64_MAX;
  // The wire the last event came from, while it holds more: no other source has an event
  // before min(hint_runner_up_, earliest_scheduled_). Or kNoEvent. See next_source().
  int hint_wire_ = kNoEvent;
  std::uint64_t hint_runner_up_ = 0;
  std::vector<Event> history_;  // ring of the last kHistory events run
  std::size_t history_next_ = 0;
};

inline int EventQueue::next_event(std::uint64_t& time, std::uint64_t& runner_up) const noexcept {
  int best = kNoEvent;
  std::uint64_t best_seq = 0;
  runner_up = UINT64_MAX;
  if (!heap_.empty()) {
    best = kHeapEvent;
    time = heap_.front().time;
    best_seq = heap_.front().seq_slot >> 24;
  }
  if (in_flight_ == 0) return best;
  for (std::size_t word = 0; word < busy_wires_.size(); ++word) {
    for (std::uint64_t bits = busy_wires_[word]; bits != 0; bits &= bits - 1) {
      const std::size_t i = word * 64 + static_cast<std::size_t>(std::countr_zero(bits));
      const Event& e = wires_[i].front();
      if (best == kNoEvent || e.time < time || (e.time == time && e.seq < best_seq)) {
        if (best != kNoEvent) runner_up = std::min(runner_up, time);
        best = static_cast<int>(i);
        time = e.time;
        best_seq = e.seq;
      } else {
        runner_up = std::min(runner_up, e.time);
      }
    }
  }
  return best;
}

template <class Handler>
bool EventQueue::drop_idle_timer_on_top(Handler& h) {
  if (heap_.empty()) return false;
  const auto slot = static_cast<std::uint32_t>(heap_.front().seq_slot & 0xffffff);
  if (!h.timer_is_idle(slab_[slot])) return false;
  std::pop_heap(heap_.begin(), heap_.end(), Later{});
  heap_.pop_back();
  free_slots_.push_back(slot);
  return true;
}

template <class Handler>
[[gnu::always_inline]] inline int EventQueue::next_source(std::uint64_t& time,
                                                         std::uint64_t& runner_up,
                                                         Handler& h) noexcept {
  // The wire the last event came from usually holds the next one too (a train of packets):
  // then no scan is needed, as long as nothing scheduled since can come first.
  if (hint_wire_ >= 0) {
    const std::uint64_t others = std::min(hint_runner_up_, earliest_scheduled_);
    const std::uint64_t t = wires_[static_cast<std::size_t>(hint_wire_)].front().time;
    if (t < others) {
      time = t;
      runner_up = others;
      return hint_wire_;
    }
  }
  earliest_scheduled_ = UINT64_MAX;
  int from = next_event(time, runner_up);
  // A timer that would do nothing is dropped rather than run: time must not jump to it (an
  // application that polls an idle CQ just before it posts more work would wait a whole ACK
  // timeout, which no NIC makes it do).
  while (from == kHeapEvent && drop_idle_timer_on_top(h)) from = next_event(time, runner_up);
  return from;
}

template <bool kLimited, class Handler>
bool EventQueue::step(std::uint64_t limit, std::uint64_t& now, Handler& h) {
  std::uint64_t t = 0;
  std::uint64_t runner_up = 0;  // no other source has an event before this
  int from = next_source(t, runner_up, h);
  if (from == kNoEvent) return false;
  if (kLimited && t > limit) {
    hint_wire_ = kNoEvent;  // next_source may have spent what its shortcut relies on
    return false;
  }
  if (t > now) now = t;
  for (;;) {
    // The event goes straight into the history ring and runs from there (no handler steps
    // the world, so the slot stays put while it runs).
    Event& e = history_[history_next_++ % kHistory];
    bool source_has_more;  // its heap or wire holds another event of this instant
    hint_wire_ = kNoEvent;
    if (from == kHeapEvent) {
      std::pop_heap(heap_.begin(), heap_.end(), Later{});
      const auto slot = static_cast<std::uint32_t>(heap_.back().seq_slot & 0xffffff);
      heap_.pop_back();
      e = slab_[slot];
      free_slots_.push_back(slot);
      source_has_more = !heap_.empty() && heap_.front().time <= now;
    } else {
      const auto w = static_cast<std::size_t>(from);
      pop_wire(w, e);
      source_has_more = !wires_[w].empty() && wires_[w].front().time <= now;
    }
    earliest_scheduled_ = UINT64_MAX;
    h.dispatch(e);
    // What the handler scheduled may come before the other sources' events.
    runner_up = std::min(runner_up, earliest_scheduled_);
    earliest_scheduled_ = UINT64_MAX;
    if (from >= 0 && !wires_[static_cast<std::size_t>(from)].empty()) {
      hint_wire_ = from;
      hint_runner_up_ = runner_up;
    }
    // Look again only if something else may belong to this instant: an event that was pending
    // elsewhere, the next one of the same source, or one the handler just scheduled.
    if (!source_has_more && runner_up > now) return true;
    from = next_source(t, runner_up, h);
    if (from == kNoEvent || t > now) return true;
  }
}

}  // namespace verbsim::sim
