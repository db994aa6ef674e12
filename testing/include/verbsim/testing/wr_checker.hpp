// A checker of posted work any test can attach to a world (or a device): the test tells it which
// WRs each queue took and hands it every completion it polls; the checker fails the test as soon
// as a completion breaks a rule, and at the end says whether every owed completion came.
// Checked for every completion:
// - it is for a WR a queue of its device took, and the first one for that WR;
// - its queue's completions come in the order the queue took its WRs (per QP and side, per SRQ);
// - not after a move to RESET or a destroy discarded its WR (unless the CQ keeps such entries);
// - its status is a real one; a successful one has the opcode of its WR, and a receive no more
//   bytes than its SGEs hold; an unsignaled send completes only with an error;
// and, where the test asks for them:
// - a successful READ brought the bytes it names, a successful WRITE left the bytes it took;
// - a successful receive of a SEND_WITH_IMM whose immediate is its wr_id holds what it sent;
// - the atomics of one QP chained on one word act on it exactly once each and in posting order;
// - a completion or SRQ limit event comes at most once per arming.
// It also counts completions by kind (a census, to compare two runs of the same steps).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "verbsim/verbsim.hpp"

namespace verbsim::testing {

// A QP of a run: QP numbers are per device, so the device is part of it.
using QpKey = std::pair<int, std::uint32_t>;  // (device index, QP number)
// An SRQ of a run: (device index, any number that tells the device's SRQs apart).
using SrqKey = std::pair<int, std::uint32_t>;

// What a successful completion of a send WR of opcode `op` reports.
inline WcOpcode wc_opcode_for(WrOpcode op) {
  switch (op) {
    case WrOpcode::send:
    case WrOpcode::send_with_imm:
    case WrOpcode::send_with_inv: return WcOpcode::send;
    case WrOpcode::rdma_write:
    case WrOpcode::rdma_write_with_imm: return WcOpcode::rdma_write;
    case WrOpcode::rdma_read: return WcOpcode::rdma_read;
    case WrOpcode::atomic_cmp_and_swp: return WcOpcode::comp_swap;
    case WrOpcode::atomic_fetch_and_add: return WcOpcode::fetch_add;
    case WrOpcode::local_inv: return WcOpcode::local_inv;
    case WrOpcode::bind_mw: return WcOpcode::bind_mw;
  }
  return WcOpcode::send;
}

class WrChecker {
 public:
  // For completed(): the completion may come from any device (a test that cannot tell which
  // device a CQ is on; its WRs must then differ in QP number or wr_id).
  static constexpr int kAnyDevice = -1;

  // A send WR (or a bind) `qp`'s send queue took. `owes`: it must complete once; otherwise it
  // may complete at most once, successfully only if `signaled`. A successful completion
  // reports `opcode`.
  void took_send(QpKey qp, std::uint64_t wr_id, WcOpcode opcode, bool signaled, bool owes) {
    Wr& wr = wrs_[take(Queue{qp.first, qp.second, Side::send}, wr_id, owes)];
    wr.signaled = signaled;
    wr.opcode = opcode;
    if (const auto a = atomics_.find({qp, wr_id}); a != atomics_.end()) ++chains_[qp].pending;
  }
  // After took_send() of a SEND_WITH_IMM whose immediate is its wr_id: the bytes it sends, which
  // a successful receive of it must hold (after the GRH on UD).
  void sends_payload(std::uint64_t wr_id, std::vector<std::byte> payload) {
    const std::size_t i = by_id_.at(wr_id).back();
    wrs_[i].payload = std::move(payload);
    named_[static_cast<std::uint32_t>(wr_id)] = i;
  }
  // A receive `qp`'s receive queue took, into `sges`.
  void took_recv(QpKey qp, std::uint64_t wr_id, std::span<const Sge> sges, bool owes = true) {
    took_recv(Queue{qp.first, qp.second, Side::recv}, wr_id, sges, owes);
  }
  // A receive `srq` took: it completes on whichever QP of the device on the SRQ takes it.
  void took_srq_recv(SrqKey srq, std::uint64_t wr_id, std::span<const Sge> sges,
                     bool owes = true) {
    took_recv(Queue{srq.first, srq.second, Side::srq}, wr_id, sges, owes);
  }

  // Before the post: a READ of `qp` into `local` (`want.size()` bytes) from `remote`. Once it
  // completes successfully, `local` and `remote` both hold `want`. withdraw() it if the post
  // does not take it.
  void expect_read(QpKey qp, std::uint64_t wr_id, std::vector<Sge> local,
                   const std::byte* remote, std::vector<std::byte> want) {
    const auto length = static_cast<std::uint32_t>(want.size());
    transfers_[{qp, wr_id}] = Transfer{true, std::move(local), remote, length, std::move(want)};
  }
  // Before the post: a WRITE of `qp` from `local` to `remote`. Once it completes successfully
  // (on RC, where the responder has written by then), `remote` holds the bytes `local` holds.
  void expect_write(QpKey qp, std::uint64_t wr_id, std::vector<Sge> local,
                    const std::byte* remote) {
    std::uint32_t length = 0;
    for (const Sge& s : local) length += s.length;
    transfers_[{qp, wr_id}] = Transfer{false, std::move(local), remote, length, {}};
  }

  // The checked atomics of one QP act on one word of the peer's, each exactly once and in
  // posting order, until one fails or the QP is reset: then the chain ends and the next one
  // starts on a fresh word. `qp`'s chain word, or nullptr while it has none.
  std::byte* chain_word(QpKey qp) const {
    const auto it = chains_.find(qp);
    return it == chains_.end() ? nullptr : it->second.word;
  }
  // What `qp`'s chain word holds once every atomic chained so far has run.
  std::uint64_t chain_value(QpKey qp) const {
    const auto it = chains_.find(qp);
    return it == chains_.end() ? 0 : it->second.value;
  }
  // Starts `qp`'s chain on `word` (8 aligned bytes of the peer's MR), setting it to `value`.
  void start_chain(QpKey qp, std::byte* word, std::uint64_t value) {
    chains_[qp] = Chain{word, value, 0};
    std::memcpy(word, &value, sizeof value);
  }
  // Before the post: `wr`, a signaled atomic of `qp` on its chain's word whose result lands at
  // `result`, joins the chain. A successful one returns what the ones before it left; whenever
  // none is pending, the word holds what they all computed. withdraw() it if the post does not
  // take it.
  void chain_atomic(QpKey qp, const SendWr& wr, const std::byte* result) {
    Chain& chain = chains_[qp];
    const std::uint64_t before = chain.value;
    if (wr.opcode == WrOpcode::atomic_fetch_and_add) {
      chain.value += wr.compare_add;
    } else if (before == wr.compare_add) {
      chain.value = wr.swap;
    }
    atomics_[{qp, wr.wr_id}] = CheckedAtomic{chain.word, before, result};
  }

  // A WR a post did not take after all: forgets what expect_read(), expect_write() or
  // chain_atomic() said of it (a chain goes on as if it had not been posted). Withdraw the WRs
  // of one post last to first.
  void withdraw(QpKey qp, std::uint64_t wr_id) {
    if (const auto a = atomics_.find({qp, wr_id}); a != atomics_.end()) {
      chains_[qp].value = a->second.before;
      atomics_.erase(a);
    }
    transfers_.erase({qp, wr_id});
  }

  // A move to RESET or a destroy of `qp`: its WRs that have not completed never will, except
  // that where CQs keep such a QP's completions (rxe; mlx5 cleans them out) one generated before
  // may still be polled. Its atomic chain ends. Returns the wr_ids it discarded.
  std::vector<std::uint64_t> discard(QpKey qp, bool cq_keeps_entries) {
    std::vector<std::uint64_t> ids;
    for (Wr& wr : wrs_) {
      if (wr.queue.side != Side::srq && wr.queue.qp() == qp && wr.seen == 0 && !wr.discarded) {
        wr.discarded = true;
        wr.may_still_complete = cq_keeps_entries;
        ids.push_back(wr.wr_id);
        transfers_.erase({qp, wr.wr_id});
        atomics_.erase({qp, wr.wr_id});
      }
    }
    chains_.erase(qp);
    return ids;
  }

  // A completion polled from a CQ of device `dev` (or kAnyDevice).
  void completed(int dev, const WorkCompletion& wc) {
    Wr* wr = find(dev, wc);
    if (wr == nullptr) return;
    check_completion(*wr, wc);
    if (wr->discarded) return;  // its buffers may have been reused
    if (wr->queue.side == Side::send) {
      check_send(*wr, wc);
    } else if (wc.status == WcStatus::success && wc.opcode == WcOpcode::recv &&
               any(wc.wc_flags, WcFlags::with_imm)) {
      check_payload(*wr, wc);
    }
  }
  void completed(int dev, std::span<const WorkCompletion> wcs) {
    for (const WorkCompletion& wc : wcs) completed(dev, wc);
  }

  // A CQ or SRQ limit armed (req_notify, an SRQ limit set), and an event taken for it: never
  // more events than armings.
  void armed_cq(const CompletionQueue& cq) { ++arms_[&cq].arms; }
  void cq_event(const CompletionQueue& cq) {
    EXPECT_LE(++arms_[&cq].events, arms_[&cq].arms) << "more events than armings";
  }
  void armed_srq_limit(const SharedReceiveQueue& srq) { ++arms_[&srq].arms; }
  void srq_limit_event(const SharedReceiveQueue& srq) {
    EXPECT_LE(++arms_[&srq].events, arms_[&srq].arms) << "more SRQ limit events than armings";
  }

  // Every owed completion came, except as many as full CQs dropped (`lost`: e.g. the world's
  // count of completions an overrun cost), and every chain with no atomic pending left its word
  // as its atomics computed.
  ::testing::AssertionResult balanced(std::uint64_t lost = 0) const {
    std::uint64_t missing = 0;
    std::string which;
    for (const Wr& wr : wrs_) {
      if (wr.owes && !wr.discarded && wr.seen == 0) {
        ++missing;
        if (missing > 10) continue;
        std::ostringstream one;
        one << " " << wr.wr_id << " (" << describe(wr.queue) << ", "
            << (wr.queue.side == Side::send ? to_string(wr.opcode) : "RECV") << ")";
        which += one.str();
      }
    }
    std::ostringstream out;
    if (missing > lost) {
      out << missing << " WRs that never completed (first ones:" << which << "), of which " << lost
          << " may be completions a CQ overrun dropped\n";
    }
    for (const auto& [qp, chain] : chains_) {
      if (chain.word == nullptr || chain.pending != 0) continue;
      if (word_value(chain.word) != chain.value) {
        out << "the atomics of qp " << qp.second << " left another value in their word\n";
      }
    }
    if (out.str().empty()) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << out.str();
  }

  std::size_t successes() const { return successes_; }
  // Transfers and receives whose bytes were compared, atomics whose returned value was.
  std::size_t payloads_checked() const { return payloads_checked_; }
  std::size_t atomics_checked() const { return atomics_checked_; }

  // How many completions of each kind were polled: the side, status, opcode and flags, and
  // which fields are non-zero. Compared between real rxe and the rxe profile
  // (tests/rxe/census-compare.sh), a kind that only one of them produces points at a
  // difference (two found so far: SimQp's WITH_IMM on send completions, the receive a failed
  // WRITE with immediate takes on rxe).
  const std::map<std::string, int>& census() const { return census_; }

 private:
  static constexpr std::uint32_t kUdGrhBytes = 40;  // a UD receive starts with the packet's GRH

  enum class Side { send, recv, srq };
  // Where a WR was posted: a QP's send or receive queue (num: the QP number), or an SRQ.
  struct Queue {
    int dev;
    std::uint32_t num;
    Side side;
    QpKey qp() const { return {dev, num}; }
    auto operator<=>(const Queue&) const = default;
  };
  struct Wr {
    Queue queue{};
    std::uint64_t wr_id = 0;
    std::uint64_t seq = 0;  // the order its queue took it in
    bool owes = true;       // a signaled send or a receive, as a rule
    bool signaled = true;
    WcOpcode opcode = WcOpcode::recv;  // sends: what a successful completion reports
    std::uint64_t room = 0;            // receives: bytes their SGEs hold
    std::vector<Sge> sges;             // receives: where the payload lands
    std::vector<std::byte> payload;    // a named SEND_WITH_IMM: what it sends
    int seen = 0;
    bool discarded = false;
    bool may_still_complete = false;
  };
  struct Last {
    std::uint64_t seq = 0;
    std::uint64_t wr_id = 0;
  };
  // A checked READ or WRITE.
  struct Transfer {
    bool read;
    std::vector<Sge> local;  // where a READ lands, where a WRITE takes its bytes from
    const std::byte* remote;
    std::uint32_t length;
    std::vector<std::byte> want;  // READ: what both ends hold once it succeeded
  };
  struct Chain {
    std::byte* word = nullptr;  // in the peer's buffer
    std::uint64_t value = 0;    // what the word holds once every atomic chained so far has run
    int pending = 0;            // taken and not completed yet
  };
  // A chained atomic: its chain's word and what it must return.
  struct CheckedAtomic {
    const std::byte* word;
    std::uint64_t before;    // the word's value when it runs
    const std::byte* result;  // where that value lands
  };
  struct Arms {
    int arms = 0;
    int events = 0;
  };

  static const std::byte* at(std::uint64_t addr) {
    return reinterpret_cast<const std::byte*>(addr);
  }
  static std::uint64_t word_value(const std::byte* p) {
    std::uint64_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  static std::string describe(const Queue& q) {
    const std::string dev = q.dev == kAnyDevice ? "" : " of device " + std::to_string(q.dev);
    if (q.side == Side::srq) return "srq " + std::to_string(q.num) + dev;
    return "qp " + std::to_string(q.num) + dev;
  }

  void took_recv(Queue queue, std::uint64_t wr_id, std::span<const Sge> sges, bool owes) {
    Wr& wr = wrs_[take(queue, wr_id, owes)];
    wr.sges.assign(sges.begin(), sges.end());
    for (const Sge& s : sges) wr.room += s.length;
  }

  std::size_t take(Queue queue, std::uint64_t wr_id, bool owes) {
    for (const std::size_t i : by_id_[wr_id]) {
      const Wr& other = wrs_[i];
      if (other.queue == queue && other.seen == 0 && !other.discarded) {
        ADD_FAILURE() << "wr_id " << wr_id << " taken twice on " << describe(queue)
                      << " (the checker needs unique ids per queue)";
      }
    }
    by_id_[wr_id].push_back(wrs_.size());
    Wr& wr = wrs_.emplace_back();
    wr.queue = queue;
    wr.wr_id = wr_id;
    wr.seq = ++seq_;
    wr.owes = owes;
    return wrs_.size() - 1;
  }

  // The WR `wc` completes: one of its QP's, else one of an SRQ of its device; the first one
  // taken of those that have not completed yet.
  Wr* find(int dev, const WorkCompletion& wc) {
    const auto it = by_id_.find(wc.wr_id);
    if (it == by_id_.end()) {
      ADD_FAILURE() << "a completion for wr_id " << wc.wr_id << ", which was never taken";
      return nullptr;
    }
    Wr* seen = nullptr;  // a WR that has completed already: a second completion
    for (const bool srq : {false, true}) {
      for (const std::size_t i : it->second) {
        Wr& wr = wrs_[i];
        if ((wr.queue.side == Side::srq) != srq) continue;
        if (dev != kAnyDevice && wr.queue.dev != dev) continue;
        if (!srq && wr.queue.num != wc.qp_num) continue;
        if (wr.seen == 0) return &wr;
        if (seen == nullptr) seen = &wr;
      }
    }
    if (seen != nullptr) return seen;
    ADD_FAILURE() << "a completion for wr_id " << wc.wr_id << " on qp " << wc.qp_num
                  << (dev == kAnyDevice ? "" : " of device " + std::to_string(dev))
                  << ", which was taken on " << describe(wrs_[it->second.front()].queue);
    return nullptr;
  }

  // The checks every completion gets.
  void check_completion(Wr& wr, const WorkCompletion& wc) {
    ++census_[census_key(wr.queue.side == Side::send, wc)];
    SCOPED_TRACE("wr_id " + std::to_string(wc.wr_id) + " " + std::string(to_string(wc.status)));
    EXPECT_TRUE(!wr.discarded || wr.may_still_complete)
        << "completed after a move to RESET discarded it";
    ++wr.seen;
    EXPECT_EQ(wr.seen, 1) << "a second completion";
    EXPECT_LE(static_cast<unsigned>(wc.status), static_cast<unsigned>(WcStatus::general_err));
    Last& last = last_[wr.queue];
    if (wr.seen == 1) {  // (a second completion has no place in the order)
      EXPECT_GT(wr.seq, last.seq) << "out of order on its queue (after wr_id " << last.wr_id
                                  << ")";
      last = {wr.seq, wc.wr_id};
    }
    if (wc.status != WcStatus::success) return;
    ++successes_;
    if (wr.queue.side == Side::send) {
      EXPECT_TRUE(wr.signaled) << "an unsignaled send completed successfully";
      EXPECT_EQ(wc.opcode, wr.opcode) << to_string(wc.opcode) << " instead of "
                                      << to_string(wr.opcode);
    } else if (wc.opcode == WcOpcode::recv) {
      EXPECT_LE(wc.byte_len, wr.room);
    } else {
      EXPECT_EQ(wc.opcode, WcOpcode::recv_rdma_with_imm) << to_string(wc.opcode);
    }
  }

  // A send's own checks: a chained atomic's value and chain, a transfer's bytes.
  void check_send(const Wr& wr, const WorkCompletion& wc) {
    const std::pair<QpKey, std::uint64_t> key{wr.queue.qp(), wr.wr_id};
    if (const auto a = atomics_.find(key); a != atomics_.end()) {
      check_atomic(wr.queue.qp(), wc, a->second);
      atomics_.erase(a);
      return;
    }
    const auto t = transfers_.find(key);
    if (t == transfers_.end()) return;
    if (wc.status == WcStatus::success) check_transfer(wc, t->second);
    transfers_.erase(t);
  }

  // A failed atomic ends its chain: whether it (or one after it) ran at the responder is
  // unknown.
  void check_atomic(QpKey qp, const WorkCompletion& wc, const CheckedAtomic& a) {
    const auto c = chains_.find(qp);
    if (c == chains_.end() || c->second.word != a.word) return;  // the chain ended before
    Chain& chain = c->second;
    if (wc.status != WcStatus::success) {
      chain = {};
      return;
    }
    EXPECT_EQ(wc.byte_len, 8u) << "atomic wr_id " << wc.wr_id;
    EXPECT_EQ(word_value(a.result), a.before)
        << "atomic wr_id " << wc.wr_id << " returned another value";
    ++atomics_checked_;
    if (--chain.pending == 0) {
      EXPECT_EQ(word_value(chain.word), chain.value)
          << "the atomics of qp " << qp.second << " left another value in their word";
    }
  }

  void check_transfer(const WorkCompletion& wc, const Transfer& t) {
    std::vector<std::byte> local;
    for (const Sge& s : t.local) local.insert(local.end(), at(s.addr), at(s.addr) + s.length);
    const std::vector<std::byte> remote(t.remote, t.remote + t.length);
    ASSERT_EQ(local.size(), t.length);
    if (t.read) {
      EXPECT_EQ(wc.byte_len, t.length) << "READ wr_id " << wc.wr_id;
      EXPECT_TRUE(local == t.want) << "READ wr_id " << wc.wr_id << " brought other bytes";
      EXPECT_TRUE(remote == t.want) << "the source region changed";
    } else {
      EXPECT_TRUE(remote == local) << "WRITE wr_id " << wc.wr_id << " left other bytes";
    }
    ++payloads_checked_;
  }

  // A successful receive of a named SEND_WITH_IMM holds the sender's payload (after the GRH on
  // UD).
  void check_payload(const Wr& recv, const WorkCompletion& wc) {
    const auto n = named_.find(wc.imm_data);
    if (n == named_.end()) return;  // no payload to compare
    const std::vector<std::byte>& want = wrs_[n->second].payload;
    // Only the bytes the message landed in: an SGE past them may point anywhere.
    std::vector<std::byte> got;
    for (const Sge& s : recv.sges) {
      const std::size_t k = std::min<std::size_t>(s.length, wc.byte_len - got.size());
      got.insert(got.end(), at(s.addr), at(s.addr) + k);
    }
    const bool ud = wc.byte_len == want.size() + kUdGrhBytes;
    ASSERT_EQ(wc.byte_len, want.size() + (ud ? kUdGrhBytes : 0))
        << "wr_id " << wc.wr_id << " received " << wc.byte_len << " bytes of wr_id "
        << wc.imm_data << "'s " << want.size();
    got.erase(got.begin(), got.begin() + (ud ? kUdGrhBytes : 0));
    got.resize(want.size());
    EXPECT_TRUE(got == want) << "wr_id " << wc.wr_id << " holds other bytes than wr_id "
                             << wc.imm_data << " sent";
    ++payloads_checked_;
  }

  static std::string census_key(bool send, const WorkCompletion& wc) {
    std::string key = send ? "send " : "recv ";
    key += std::string(to_string(wc.status)) + " " + std::string(to_string(wc.opcode));
    key += " flags=" + std::to_string(static_cast<unsigned>(wc.wc_flags));
    key += wc.byte_len != 0 ? " len" : "";
    key += wc.imm_data != 0 ? " imm" : "";
    key += wc.src_qp != 0 ? " src_qp" : "";
    key += wc.vendor_err != 0 ? " vendor_err" : "";
    return key;
  }

  std::vector<Wr> wrs_;  // in the order they were taken
  std::map<std::uint64_t, std::vector<std::size_t>> by_id_;  // wr_id -> indexes into wrs_
  std::map<std::uint32_t, std::size_t> named_;  // immediate -> its named SEND_WITH_IMM
  std::map<Queue, Last> last_;                  // the last completion of each queue
  std::uint64_t seq_ = 0;
  std::map<std::pair<QpKey, std::uint64_t>, Transfer> transfers_;
  std::map<QpKey, Chain> chains_;
  std::map<std::pair<QpKey, std::uint64_t>, CheckedAtomic> atomics_;
  std::map<const void*, Arms> arms_;
  std::map<std::string, int> census_;
  std::size_t successes_ = 0;
  std::size_t payloads_checked_ = 0;
  std::size_t atomics_checked_ = 0;
};

}  // namespace verbsim::testing
