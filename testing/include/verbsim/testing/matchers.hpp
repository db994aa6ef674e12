// GoogleMock matchers for completions and post results, whose failure messages print the
// completion (status and opcode by name, wr_id, byte_len, QP number):
//
//   EXPECT_THAT(wc, IsSuccess());
//   EXPECT_THAT(wcs, ElementsAre(AllOf(HasWrId(1), HasOpcode(WcOpcode::send)), IsSuccess()));
//   EXPECT_THAT(wcs, CompletesInPostingOrder());
//   EXPECT_THAT(qp.post_send(wrs), IsQueueFull());
//
// Header-only; link GTest::gmock (verbsim::testing does).
#pragma once

#include <gmock/gmock.h>

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <type_traits>
#include <utility>

#include "verbsim/verbsim.hpp"

namespace verbsim {

// How GoogleTest prints a completion and a post result once this header is included:
// "{wr_id 5, RETRY_EXC_ERR, SEND, 0 B, qp 17}" (with the immediate, source QP and vendor error
// where set), and "{posted 2, errno 12 (Cannot allocate memory): send queue full}". Include it
// in every file of a test binary that prints these types, so that all print them alike.
inline void PrintTo(const WorkCompletion& wc, std::ostream* os) {
  *os << "{wr_id " << wc.wr_id << ", " << to_string(wc.status) << ", " << to_string(wc.opcode)
      << ", " << wc.byte_len << " B, qp " << wc.qp_num;
  if (any(wc.wc_flags, WcFlags::with_imm)) *os << ", imm " << wc.imm_data;
  if (wc.src_qp != 0) *os << ", src_qp " << wc.src_qp;
  if (wc.vendor_err != 0) *os << ", vendor_err " << wc.vendor_err;
  *os << "}";
}
inline void PrintTo(const PostResult& r, std::ostream* os) {
  *os << "{posted " << r.posted;
  if (r.err != 0) {
    *os << ", errno " << r.err << " (" << r.error().message() << ")";
    if (r.reason != nullptr && *r.reason != '\0') *os << ": " << r.reason;
  }
  *os << "}";
}

}  // namespace verbsim

namespace verbsim::testing {

namespace detail {

// One field of a completion compared with `want`; `what` names it in the messages.
template <class T, class Get>
class WcFieldMatcher final : public ::testing::MatcherInterface<const WorkCompletion&> {
 public:
  WcFieldMatcher(const char* what, T want, Get get) : what_(what), want_(want), get_(get) {}

  bool MatchAndExplain(const WorkCompletion& wc,
                       ::testing::MatchResultListener* listener) const override {
    const T got = get_(wc);
    if (got == want_) return true;
    *listener << "which has " << what_ << " " << show(got);
    return false;
  }
  void DescribeTo(std::ostream* os) const override {
    *os << "is a completion with " << what_ << " " << show(want_);
  }
  void DescribeNegationTo(std::ostream* os) const override {
    *os << "is a completion whose " << what_ << " is not " << show(want_);
  }

 private:
  template <class U>
  static auto show(U v) {
    if constexpr (std::is_enum_v<U>) {
      return to_string(v);
    } else {
      return v;
    }
  }

  const char* what_;
  T want_;
  Get get_;
};

template <class T, class Get>
::testing::Matcher<const WorkCompletion&> wc_field(const char* what, T want, Get get) {
  return ::testing::MakeMatcher(new WcFieldMatcher<T, Get>(what, want, get));
}

// Each queue's completions in increasing wr_id order: a CQ may mix QPs, and the send and
// receive queues of one QP complete independently, so each (QP, side) is checked alone.
class PostingOrderMatcher final {
 public:
  template <class Range>
  bool MatchAndExplain(const Range& wcs, ::testing::MatchResultListener* listener) const {
    std::map<std::pair<std::uint32_t, bool>, const WorkCompletion*> last;
    std::size_t i = 0;
    for (const WorkCompletion& wc : wcs) {
      const bool recv = static_cast<unsigned>(wc.opcode) >= static_cast<unsigned>(WcOpcode::recv);
      const auto [it, first] = last.try_emplace({wc.qp_num, recv}, &wc);
      if (!first) {
        if (wc.wr_id <= it->second->wr_id) {
          *listener << "whose completion " << i << " " << ::testing::PrintToString(wc)
                    << " comes after " << ::testing::PrintToString(*it->second) << " on the "
                    << (recv ? "receive" : "send") << " queue of qp " << wc.qp_num;
          return false;
        }
        it->second = &wc;
      }
      ++i;
    }
    return true;
  }
  void DescribeTo(std::ostream* os) const {
    *os << "completes each queue's work requests in posting order (increasing wr_id)";
  }
  void DescribeNegationTo(std::ostream* os) const {
    *os << "completes some queue's work requests out of posting order";
  }
};

class PostResultMatcher final : public ::testing::MatcherInterface<const PostResult&> {
 public:
  enum class Kind : std::uint8_t { queue_full, all, count };
  PostResultMatcher(Kind kind, std::uint32_t n) : kind_(kind), n_(n) {}

  bool MatchAndExplain(const PostResult& r,
                       ::testing::MatchResultListener* listener) const override {
    bool ok = false;
    switch (kind_) {
      case Kind::queue_full: ok = r.error() == Condition::queue_full; break;
      case Kind::all: ok = r.err == 0; break;
      case Kind::count: ok = r.posted == n_; break;
    }
    if (ok) return true;
    *listener << "which posted " << r.posted;
    if (r.err == 0) {
      *listener << " and succeeded";
    } else {
      *listener << ", then failed with errno " << r.err << " (" << r.error().message() << ")";
      if (r.reason != nullptr && *r.reason != '\0') *listener << ": " << r.reason;
    }
    return false;
  }
  void DescribeTo(std::ostream* os) const override {
    switch (kind_) {
      case Kind::queue_full: *os << "failed with \"queue full\" (ENOMEM, ENOSPC or EAGAIN)"; break;
      case Kind::all: *os << "posted every work request"; break;
      case Kind::count: *os << "posted " << n_ << " work request(s)"; break;
    }
  }

 private:
  Kind kind_;
  std::uint32_t n_;
};

}  // namespace detail

// The completion's status is SUCCESS.
inline ::testing::Matcher<const WorkCompletion&> IsSuccess() {
  return detail::wc_field("status", WcStatus::success,
                          [](const WorkCompletion& wc) { return wc.status; });
}
inline ::testing::Matcher<const WorkCompletion&> HasStatus(WcStatus status) {
  return detail::wc_field("status", status, [](const WorkCompletion& wc) { return wc.status; });
}
inline ::testing::Matcher<const WorkCompletion&> HasOpcode(WcOpcode opcode) {
  return detail::wc_field("opcode", opcode, [](const WorkCompletion& wc) { return wc.opcode; });
}
inline ::testing::Matcher<const WorkCompletion&> HasByteLen(std::uint32_t n) {
  return detail::wc_field("byte_len", n, [](const WorkCompletion& wc) { return wc.byte_len; });
}
inline ::testing::Matcher<const WorkCompletion&> HasWrId(std::uint64_t id) {
  return detail::wc_field("wr_id", id, [](const WorkCompletion& wc) { return wc.wr_id; });
}

// For a range of completions (a std::vector, a span): each QP's send completions, and its
// receive completions, come in increasing wr_id order - the posting order when wr_ids are
// posted increasing. Unsignaled sends and other queues' completions may sit in between.
inline ::testing::PolymorphicMatcher<detail::PostingOrderMatcher> CompletesInPostingOrder() {
  return ::testing::MakePolymorphicMatcher(detail::PostingOrderMatcher{});
}

// The post failed with the portable "queue full" condition (Condition::queue_full: ENOMEM,
// ENOSPC or EAGAIN, whichever the provider returns); retry after polling completions.
inline ::testing::Matcher<const PostResult&> IsQueueFull() {
  return ::testing::MakeMatcher(
      new detail::PostResultMatcher(detail::PostResultMatcher::Kind::queue_full, 0));
}
// The post accepted the whole batch (no error).
inline ::testing::Matcher<const PostResult&> PostedAll() {
  return ::testing::MakeMatcher(
      new detail::PostResultMatcher(detail::PostResultMatcher::Kind::all, 0));
}
// The post accepted exactly `n` work requests (with or without an error after them).
inline ::testing::Matcher<const PostResult&> Posted(std::uint32_t n) {
  return ::testing::MakeMatcher(
      new detail::PostResultMatcher(detail::PostResultMatcher::Kind::count, n));
}

}  // namespace verbsim::testing
