// Building libibverbs WR chains from verbsim's spans without allocating.
//
// SGEs are not copied: a verbsim Sge is an ibv_sge (verbsim/abi/translate.hpp's layout
// contract), so each ibv_*_wr points at the program's own SGE array. A batch is translated into
// a stack array, up to kChunkWrs WRs at a time; a chunk is one provider call, so a batch of 64
// WRs is a single ibv_post_*. Bigger batches take several calls, and when one fails the chunks
// before it stay posted, which is what PostResult::posted reports anyway.
//
// A batch of one WR, the usual post, takes a fast path instead: one ibv_*_wr on the stack, only
// the fields the provider reads, no chunk bookkeeping, and a frame small enough that the general
// path's array is not set up (tests/bench/ibv-overhead.sh measures it). Both paths give the same
// results, errors included.
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <system_error>

#include "objects.hpp"
#include "verbsim/abi/translate.hpp"
#include "verbsim/types.hpp"

namespace verbsim::ibverbs {

inline constexpr std::size_t kChunkWrs = 64;
// num_sge is an int: a longer SGE list is refused without asking the provider (which would
// refuse anything above its max_sge, at most a few dozen).
inline constexpr std::size_t kMaxSges = 1u << 30;

// Why a provider refused a WR, from its errno (PostResult::reason is a static string).
inline const char* post_reason(int err, bool send) noexcept {
  switch (err) {
    case ENOMEM:
      return send ? "send queue full, too many SGEs or inline data too long"
                  : "receive queue full or too many SGEs";
    case EINVAL: return "invalid work request or QP state";
    default: return "refused by the provider";
  }
}

// Index of `bad` in `chain[0, n)`, or 0 when the provider did not set it sensibly.
template <class Wr>
std::uint32_t bad_index(const Wr* chain, std::size_t n, const Wr* bad) noexcept {
  if (bad == nullptr || bad < chain || bad >= chain + n) return 0;
  return static_cast<std::uint32_t>(bad - chain);
}

// Posts `wrs` in chunks through `post(ibv_recv_wr* first, ibv_recv_wr** bad)`, which returns
// 0 or an errno (ibv_post_recv, ibv_post_srq_recv). Kept out of line: its array would otherwise
// be set up on post_recv()'s fast path too.
template <class Post>
[[gnu::noinline]] PostResult post_recv_chunks(std::span<const RecvWr> wrs, Post post) noexcept {
  std::array<ibv_recv_wr, kChunkWrs> chain;
  std::size_t base = 0;
  while (base < wrs.size()) {
    std::size_t n = 0;
    for (; base + n < wrs.size() && n < kChunkWrs; ++n) {
      const RecvWr& wr = wrs[base + n];
      if (wr.sg_list.size() > kMaxSges) break;
      ibv_recv_wr& out = chain[n];
      out.wr_id = wr.wr_id;
      out.next = nullptr;
      out.sg_list = abi::as_ibv(wr.sg_list);
      out.num_sge = static_cast<int>(wr.sg_list.size());
      if (n > 0) chain[n - 1].next = &out;
    }
    if (n > 0) {
      ibv_recv_wr* bad = nullptr;
      if (const int ret = post(chain.data(), &bad); ret != 0) {
        const int err = returned_errno(ret);
        return {static_cast<std::uint32_t>(base) + bad_index(chain.data(), n, bad), err,
                post_reason(err, false)};
      }
      base += n;
    }
    if (base < wrs.size() && wrs[base].sg_list.size() > kMaxSges) {
      return {static_cast<std::uint32_t>(base), EINVAL, "too many SGEs"};
    }
  }
  return {static_cast<std::uint32_t>(wrs.size()), 0, ""};
}

// Posts one receive WR through `post` as post_recv_chunks does, on the fast path.
template <class Post>
PostResult post_one_recv(const RecvWr& wr, Post post) noexcept {
  if (wr.sg_list.size() > kMaxSges) [[unlikely]] return post_recv_chunks(std::span(&wr, 1), post);
  ibv_recv_wr out;
  out.wr_id = wr.wr_id;
  out.next = nullptr;
  out.sg_list = abi::as_ibv(wr.sg_list);
  out.num_sge = static_cast<int>(wr.sg_list.size());
  ibv_recv_wr* bad = nullptr;
  if (const int ret = post(&out, &bad); ret != 0) [[unlikely]] {
    const int err = returned_errno(ret);
    return {0, err, post_reason(err, false)};
  }
  return {1, 0, ""};
}

}  // namespace verbsim::ibverbs
