// The counters of a run, kept by an observer (Config::stats, VERBSIM_STATS=1).
#pragma once

#include <cstdint>
#include <map>
#include <utility>

#include "verbsim/sim/observe.hpp"

namespace verbsim::sim {

class StatsObserver final : public Observer {
 public:
  // `print`: write the counters to stderr when the world ends.
  explicit StatsObserver(bool print) : print_(print) {}
  void packet(const PacketRecord& r) override;
  void completion(const CompletionRecord& r) override;
  void instant(const InstantRecord& r) override;
  void finished(std::uint64_t time_ns) override;
  Stats stats() const;

 private:
  using QpKey = std::pair<int, std::uint32_t>;
  bool print_;
  std::map<QpKey, QpCounters> qps_;
  std::map<std::pair<int, int>, PortCounters> ports_;
  std::map<QpKey, std::uint32_t> next_psn_;  // past the highest request PSN each QP sent
};

}  // namespace verbsim::sim
