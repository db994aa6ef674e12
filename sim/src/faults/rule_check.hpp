// The fault plan's rules as the data path checks them.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "fabric/event.hpp"
#include "fabric/rng.hpp"
#include "resources/ids.hpp"
#include "verbsim/sim/faults.hpp"

namespace verbsim::sim {

// A rule of the fault plan as the data path checks it: its filter resolved to numbers when
// the world is made, and its count of matches.
struct RuleCheck {
  static constexpr int kAnyDevice = -1;
  static constexpr int kNoDevice = -2;  // names a device the world does not have
  // The number of a rule's named QP until the QP is named (never a QP number: they have 24
  // bits), so that the check stays one comparison.
  static constexpr std::uint32_t kUnnamedQpn = 0xffffffff;
  RuleCheck(const Trigger& when, const Filter& where, std::uint32_t index,
            const std::vector<std::unique_ptr<DevCore>>& devs);

  std::uint64_t matches = 0;
  std::uint64_t fire_at = 0;  // the match that fires next (nth=, every=); 0: none
  std::uint64_t every = 0;    // every=: how far the next one is
  double probability = 0;     // p=
  std::uint32_t index = 0;    // in the plan's verb or packet rules
  std::uint32_t qpn = 0;
  // Packet rules: the PSNs they match, psn_lo .. psn_lo + psn_span (an ACK or NAK carries
  // kNoPsn, a READ or atomic response kDataResponsePsn; everything: 0 and UINT32_MAX; psn=:
  // that PSN; packets=requests: every 24-bit PSN).
  std::uint32_t psn_lo = 0;
  std::uint32_t psn_span = UINT32_MAX;
  bool any_qpn = true;
  int dev = kAnyDevice;

  // Counts a match; does the rule fire on it? (The plan's Trigger, with the modulo of every=
  // replaced by a countdown.)
  bool fires(Rng& rng) noexcept {
    if (++matches == fire_at) {
      fire_at += every;
      return true;
    }
    return probability > 0 && rng.unit() < probability;
  }
  // Does a call on QP `q` of device `device` (or a packet from `q` to `other_q`) match? A
  // negative `device` is none.
  bool matches_where(std::uint32_t q, std::uint32_t other_q, int device) const noexcept {
    return (any_qpn || qpn == q || qpn == other_q) &&
           (dev == kAnyDevice || (device >= 0 && dev == device));
  }
  // Does a packet carrying `p` (or kNoPsn) match the psn= and packets= filters?
  bool matches_psn(std::uint32_t p) const noexcept {
    return p - psn_lo <= psn_span;
  }
  // A packet rule: does it match a packet carrying `p` from QP `from` (of device `device`) to
  // QP `to`, and fire on it?
  bool fires_on_packet(std::uint32_t p, std::uint32_t from, std::uint32_t to, int device,
                       Rng& rng) noexcept {
    return matches_psn(p) && matches_where(from, to, device) && fires(rng);
  }
};

}  // namespace verbsim::sim
