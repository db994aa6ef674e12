// Building libibverbs WR chains from verbsim's spans without allocating.
//
// A batch is translated into stack arrays, one chunk at a time: up to kChunkWrs WRs whose SGEs
// together fit in kChunkSges. A chunk is one provider call, so a batch of 64 WRs with up to 4
// SGEs each is a single ibv_post_*; bigger batches take several calls, and when one fails the
// chunks before it stay posted, which is what PostResult::posted reports anyway.
//
// A batch of one WR with up to kFastSges SGEs, the usual post, takes a fast path instead: one
// ibv_*_wr on the stack, only the fields the provider reads, no chunk bookkeeping, and a frame
// small enough that the general path's arrays are not set up (tests/bench/ibv-overhead.sh
// measures it). Both paths give the same results, errors included.
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <system_error>

#include "objects.hpp"
#include "translate.hpp"
#include "verbsim/types.hpp"

namespace verbsim::ibverbs {

inline constexpr std::size_t kChunkWrs = 64;
// More than any device's max_sge (rxe: 32), so one WR always fits in a chunk of its own;
// a WR with more is refused without asking the provider.
inline constexpr std::size_t kChunkSges = 256;
inline constexpr std::size_t kFastSges = 4;

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
// 0 or an errno (ibv_post_recv, ibv_post_srq_recv). Kept out of line: its arrays would otherwise
// be set up on post_recv()'s fast path too.
template <class Post>
[[gnu::noinline]] PostResult post_recv_chunks(std::span<const RecvWr> wrs, Post post) noexcept {
  std::array<ibv_recv_wr, kChunkWrs> chain;
  std::array<ibv_sge, kChunkSges> sges;
  std::size_t base = 0;
  while (base < wrs.size()) {
    std::size_t n = 0;
    std::size_t used = 0;
    for (; base + n < wrs.size() && n < kChunkWrs; ++n) {
      const RecvWr& wr = wrs[base + n];
      if (wr.sg_list.size() > kChunkSges - used) break;  // starts the next chunk
      for (std::size_t i = 0; i < wr.sg_list.size(); ++i) sges[used + i] = to_ibv(wr.sg_list[i]);
      ibv_recv_wr& out = chain[n];
      out.wr_id = wr.wr_id;
      out.next = nullptr;
      out.sg_list = sges.data() + used;
      out.num_sge = static_cast<int>(wr.sg_list.size());
      if (n > 0) chain[n - 1].next = &out;
      used += wr.sg_list.size();
    }
    // A WR with more SGEs than a whole chunk holds.
    if (n == 0) return {errno_code(EINVAL), static_cast<std::uint32_t>(base), "too many SGEs"};
    ibv_recv_wr* bad = nullptr;
    if (const int ret = post(chain.data(), &bad); ret != 0) {
      const int err = returned_errno(ret);
      return {errno_code(err), static_cast<std::uint32_t>(base) + bad_index(chain.data(), n, bad),
              post_reason(err, false)};
    }
    base += n;
  }
  return {{}, static_cast<std::uint32_t>(wrs.size()), ""};
}

// Posts `wrs` through `post` as post_recv_chunks does; `ok` is returned on success (a copy is
// cheaper than std::error_code{}, which calls std::system_category() out of line).
template <class Post>
PostResult post_recv(std::span<const RecvWr> wrs, const std::error_code& ok, Post post) noexcept {
  if (wrs.size() != 1 || wrs.front().sg_list.size() > kFastSges) [[unlikely]] {
    return post_recv_chunks(wrs, post);
  }
  const RecvWr& wr = wrs.front();
  std::array<ibv_sge, kFastSges> sges;
  for (std::size_t i = 0; i < wr.sg_list.size(); ++i) sges[i] = to_ibv(wr.sg_list[i]);
  ibv_recv_wr out;
  out.wr_id = wr.wr_id;
  out.next = nullptr;
  out.sg_list = sges.data();
  out.num_sge = static_cast<int>(wr.sg_list.size());
  ibv_recv_wr* bad = nullptr;
  if (const int ret = post(&out, &bad); ret != 0) [[unlikely]] {
    const int err = returned_errno(ret);
    return {errno_code(err), 0, post_reason(err, false)};
  }
  return {ok, 1, ""};
}

}  // namespace verbsim::ibverbs
