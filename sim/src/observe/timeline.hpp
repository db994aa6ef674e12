// The timeline of a run (Config::timeline, VERBSIM_TIMELINE=<file>): Trace Event Format JSON,
// which Perfetto's UI and chrome://tracing open, in virtual time. Per device a process; per QP
// a send track and a receive track (a lane each for WRs outstanding at once, since slices on
// one track must nest), a packet track, and per CQ a track of completions. A slice per work
// request from its post to its completion (status in its args); packets as flow arrows from
// the sender's packet track to the receiver's; faults, async and CM events as instants.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "verbsim/sim/observe.hpp"

namespace verbsim::sim {

class TimelineWriter final : public Observer {
 public:
  // Writes `path` when the world ends; throws std::system_error if it cannot be created.
  explicit TimelineWriter(std::string path);
  void posted(const PostRecord& r) override;
  void packet(const PacketRecord& r) override;
  void completion(const CompletionRecord& r) override;
  void instant(const InstantRecord& r) override;
  void finished(std::uint64_t time_ns) override;

 private:
  struct Pending {
    std::uint64_t posted_ns;
    std::uint64_t wr_id;
    WrOpcode opcode;
    std::uint32_t length;
    bool send;
    bool signaled;
  };
  // A queue side: (device, QP number, send?). SRQ receives (QP 0) wait in their device's pool
  // until a QP takes them.
  using Side = std::tuple<int, std::uint32_t, bool>;
  struct Event {
    std::uint64_t ts_ns;
    std::uint64_t seq;
    std::string json;  // without "ts"
  };
  // The thread id of a track (see the header comment), named once.
  int track(int dev, std::uint32_t qpn, int kind, int lane);
  int lane_for(const Side& s, std::uint64_t at_ns);
  void slice(const Pending& p, int dev, std::uint32_t qpn, std::uint64_t end_ns,
             const std::string& status, std::uint32_t byte_len);
  void add(std::uint64_t ts_ns, std::string json);

  std::string path_;
  std::uint64_t seq_ = 0;
  std::uint64_t flow_ = 0;
  std::vector<Event> events_;
  std::map<std::tuple<int, std::uint32_t, int, int>, int> tracks_;  // -> tid
  std::map<Side, std::deque<Pending>> pending_;
  std::map<Side, std::vector<std::uint64_t>> lanes_;  // when each lane is free again
  std::set<int> named_processes_;  // devices whose process_name is written
};

}  // namespace verbsim::sim
