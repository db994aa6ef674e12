// The fault plan at run time: one module, built from the world's FaultPlan when the world is
// made, that the data path asks whether a fault fires: on a verb call, on a packet, on a CM
// message. (Timed faults are events the world runs: faults/timed.cpp.) Every rule that fires
// is recorded in the run's digest under a tag naming its kind.
#pragma once

#include <array>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "fabric/rng.hpp"
#include "faults/rule_check.hpp"
#include "resources/ids.hpp"
#include "verbsim/sim/faults.hpp"

namespace verbsim::sim {

// What the digest records of a rule that fired: its kind's tag | the rule's index in the plan.
enum class FaultTag : std::uint64_t {
  verb = 0xfa000000,
  packet = 0xfb000000,
  cm_message = 0xcd000000,
};

// What the packet rules that fired do to a packet.
struct PacketFaults {
  bool drop = false;
  bool duplicate = false;
  std::uint64_t delay_ns = 0;      // delay and reorder rules, added up
  std::uint64_t duplicate_ns = 0;  // how long after the (delayed) packet its copy arrives
};

class FaultInjector {
 public:
  // `plan` (the world's), `rng` and `digest` outlive the injector; `devs` resolves dev= names.
  FaultInjector(const FaultPlan& plan, const std::vector<std::unique_ptr<DevCore>>& devs,
                Rng& rng, Digest& digest);

  // Does a rule name `verb`? (Resources whose data-path verbs are named are made as Faulty*
  // classes, so the plain ones never ask.)
  bool targets(Verb verb) const noexcept { return targets_[static_cast<std::size_t>(verb)]; }
  // The errno a call of `verb` on QP `qpn` (0: none) of `dev` (nullptr: none) fails with, or 0.
  int verb(Verb verb, std::uint32_t qpn, const DevCore* dev) noexcept {
    if (!targets(verb)) return 0;
    const int device = dev != nullptr ? dev->index : RuleCheck::kNoDevice;
    for (RuleCheck& r : verb_rules_[static_cast<std::size_t>(verb)]) {
      if (!r.matches_where(qpn, qpn, device) || !r.fires(rng_)) continue;
      digest_.add(static_cast<std::uint64_t>(FaultTag::verb) | r.index);
      if (firings_ != nullptr) [[unlikely]] note_firing(FaultTag::verb, r);
      const int err = plan_.verbs[r.index].err;
      if (on_verb_fault_ != nullptr) on_verb_fault_(listener_, verb, qpn, dev, err);
      return err;
    }
    return 0;
  }

  // Must packets be asked about (a packet rule exists, a link is or was down, or an observer
  // sees packets)?
  bool checks_packets() const noexcept { return checks_packets_; }
  // A link or device went down at some point: packets are checked against link states.
  bool links_changed() const noexcept { return links_changed_; }
  void link_state_changed() noexcept { checks_packets_ = links_changed_ = true; }
  // An observer wants every packet (they take the path that asks first_packet_rule()) and
  // every verb fault that fires (`on_verb_fault(listener, ...)`).
  using VerbFaultListener = void (*)(void* listener, Verb verb, std::uint32_t qpn,
                                     const DevCore* dev, int err);
  void observe(VerbFaultListener on_verb_fault, void* listener) noexcept {
    checks_packets_ = true;
    on_verb_fault_ = on_verb_fault;
    listener_ = listener;
  }
  // The first packet rule that fires on a packet carrying PSN `psn` (or kNoPsn) from QP `from`
  // of device `sender` (kNoDevice: none) to QP `to`, or -1 (the common case, inline: every
  // packet asks while a packet rule exists). Then act_on_packet says what the rules do.
  int first_packet_rule(std::uint32_t psn, std::uint32_t from, std::uint32_t to, int sender) {
    for (std::size_t i = 0; i < packet_rules_.size(); ++i) {
      if (packet_rules_[i].fires_on_packet(psn, from, to, sender, rng_)) return static_cast<int>(i);
    }
    return -1;
  }
  // What rule `fired` and the later rules that fire on the packet do to it.
  PacketFaults act_on_packet(std::size_t fired, std::uint32_t psn, std::uint32_t from,
                             std::uint32_t to, int sender);

  // Does a cm_drop rule lose a message of `kind` from QP `from_qpn` to `to_qpn` (0: none),
  // sent from device `dev`?
  bool cm_message(CmMessage kind, std::uint32_t from_qpn, std::uint32_t to_qpn, int dev);

  // World::name: the rules naming `name` (qp=<name>) match QP `qpn` of device `dev` from now
  // on (until then they match nothing). Throws std::invalid_argument for a name a rule cannot
  // hold or one that already names another QP. Control path: the data path's checks stay
  // comparisons of numbers.
  void name_qp(const std::string& name, std::uint32_t qpn, int dev);
  // The rules that name a QP no QP was given, one line each ("" if none).
  std::string unnamed_rules() const;

  // VERBSIM_FAULT_FIRINGS: from now on, each time a rule of VERBSIM_FAULTS fires, append a line
  // `verb|packet|cm <i> nth=<n>` to the file `path`: the i-th rule of that kind in
  // VERBSIM_FAULTS fired on its n-th match. `first` is the index of VERBSIM_FAULTS' first rule of
  // each kind in the plan (verb, packet, cm): the rules before it are the program's own. Rules
  // that fire cost a branch more; the data path's checks are unchanged. Throws
  // std::system_error if the file cannot be opened.
  void report_firings(const std::string& path, const std::array<std::size_t, 3>& first);

 private:
  void note_firing(FaultTag kind, const RuleCheck& r);
  struct CloseFile {
    void operator()(std::FILE* f) const noexcept { std::fclose(f); }
  };

  const FaultPlan& plan_;
  Rng& rng_;
  Digest& digest_;
  std::vector<RuleCheck> verb_rules_[kVerbCount];  // per verb, in plan order
  bool targets_[kVerbCount] = {};
  std::vector<RuleCheck> packet_rules_;  // in plan order
  std::vector<RuleCheck> cm_rules_;      // in plan order
  bool checks_packets_ = false;
  bool links_changed_ = false;
  VerbFaultListener on_verb_fault_ = nullptr;
  void* listener_ = nullptr;
  std::vector<std::tuple<std::string, std::uint32_t, int>> names_;  // World::name's
  std::unique_ptr<std::FILE, CloseFile> firings_;  // report_firings's file, or none
  std::array<std::size_t, 3> first_env_rule_{};   // report_firings's `first`
};

}  // namespace verbsim::sim
