// The timeline of a run (Config::timeline, VERBSIM_TIMELINE=<file>): Trace Event Format JSON,
// which Perfetto's UI and chrome://tracing open, in virtual time. Per device a process; per QP
// a send track and a receive track (a lane each for WRs outstanding at once, since slices on
// one track must nest), a packet track, and per CQ a track of completions; per device a CM
// track. A slice per work request from its post to its completion (status in its args);
// packets and CM messages as flow arrows from the sender's track to the receiver's; faults,
// async and CM events as instants.
//
// While the run goes, the writer only logs what it is told, as compact binary records
// (timeline.cpp: small numbers in a byte or two each). When the world ends it replays the log:
// matches completions to the WRs posted, picks lanes and makes tracks (each QP's state in flat
// tables), and keeps the timeline's own records, which it sorts and formats as JSON.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "verbsim/sim/observe.hpp"

namespace verbsim::sim {

class TimelineWriter final : public Observer {
 public:
  // Writes `path` when the world ends; throws std::system_error if it cannot be created.
  explicit TimelineWriter(std::string path);
  ~TimelineWriter() override;
  void posted(const PostRecord& r) override;
  void packet(const PacketRecord& r) override;
  void completion(const CompletionRecord& r) override;
  void instant(const InstantRecord& r) override;
  void cm(const CmRecord& r) override;
  void finished(std::uint64_t time_ns) override;

 private:
  // A work request posted and not completed yet.
  struct Pending {
    std::uint64_t posted_ns;
    std::uint64_t wr_id;
    std::uint32_t length;
    WrOpcode opcode;
  };
  // A lane of a queue: when it is free again, and its track.
  struct Lane {
    std::uint64_t free_ns;
    std::uint32_t tid;
  };
  // One queue of a QP: its WRs in post order (from `head` on) and its lanes. The lanes below
  // `busy_below` are busy after `busy_after_ns` (what the last search for a free lane found).
  struct Queue {
    std::vector<Pending> pending;
    std::size_t head = 0;
    std::vector<Lane> lanes;
    std::size_t busy_below = 0;
    std::uint64_t busy_after_ns = 0;
  };
  // A QP number on a device (QP 0: the device's SRQ receives, until a QP takes them).
  struct Qp {
    std::uint16_t dev;
    std::uint32_t qpn;
    Queue send;
    Queue recv;
    std::uint32_t packets_tid = 0;
  };
  // A track: its thread id is its index + 1. Its metadata goes where it was made: `seq` orders
  // it among the records (see timeline.cpp).
  struct Track {
    std::uint64_t seq;
    std::uint16_t dev;
    std::uint32_t num;  // QP or CQ number
    std::uint8_t kind;
    std::uint16_t lane;
    bool first_of_device;  // the device's process is named with it
  };
  // 2 MiB of records; a record never spans two.
  static constexpr std::size_t kChunkBytes = std::size_t{2} << 20;
  static constexpr std::size_t kMaxRecord = 192;
  struct Chunk {
    struct Free {
      void operator()(std::uint8_t* p) const noexcept;
    };
    std::unique_ptr<std::uint8_t[], Free> bytes;
    std::size_t used = 0;
  };
  // Records one after the other, in chunks. There is always room at `next` for the largest
  // record: keep() makes a chunk when the one it wrote into has less left.
  struct Records {
    Records() { add_chunk(); }  // memory the kernel gives when it is first written
    std::vector<Chunk> chunks;  // `used` of the last is up to date after close()
    std::uint8_t* next = nullptr;
    std::uint8_t* full = nullptr;  // `next` past it: the chunk has not room for the largest
    // Keeps the record written from `next` to `end`.
    void keep(std::uint8_t* end) {
      next = end;
      if (next > full) [[unlikely]] add_chunk();
    }
    // The offset of the next record.
    std::uint64_t next_offset() const noexcept {
      return (chunks.size() - 1) * kChunkBytes +
             static_cast<std::size_t>(next - chunks.back().bytes.get());
    }
    void close() noexcept {
      chunks.back().used = static_cast<std::size_t>(next - chunks.back().bytes.get());
    }
    void add_chunk();
  };

  // The last post, completion or packet of a side that the log holds (a post or completion of
  // a send or a receive queue; a request or a response), as the next is compared with it
  // (timeline.cpp, "The log"): its fields packed in words `a` to `c`, its work request, a
  // packet's time in flight.
  struct Logged {
    std::uint64_t a = 0;
    std::uint64_t b = 0;
    std::uint64_t c = 0;
    std::uint64_t wr_id = 0;
    std::uint64_t flight_ns = 0;
  };

  Qp& qp(std::uint16_t dev, std::uint32_t qpn) {
    Qp* q = qp_index_.get(dev, qpn);
    return q != nullptr ? *q : add_qp(dev, qpn);
  }
  Qp& add_qp(std::uint16_t dev, std::uint32_t qpn);
  std::uint32_t cq_track(std::uint16_t dev, std::uint32_t cq, bool inside) {
    const std::uint32_t tid = cq_tids_.get(dev, cq);
    return tid != 0 ? tid : add_cq_track(dev, cq, inside);
  }
  std::uint32_t add_cq_track(std::uint16_t dev, std::uint32_t cq, bool inside);
  std::uint32_t packets_track(Qp& q, bool inside);
  std::uint32_t cm_track(std::uint16_t dev, bool inside);
  // `inside`: made between the two parts of the next record (a packet's destination track).
  std::uint32_t new_track(std::uint16_t dev, std::uint32_t num, std::uint8_t kind,
                          std::uint16_t lane, bool inside);
  std::uint32_t lane_track(Qp& q, bool send, const Pending& p, std::uint64_t end_ns);
  void add_lane(Qp& q, bool send);
  // Where the next of the timeline's records goes, and keeping it (it has 1 or 2 parts).
  std::uint8_t* room() { return records_.next; }
  void keep(std::uint8_t* end, int parts) {
    records_.keep(end);
    parts_ += static_cast<std::size_t>(parts);
  }
  // Encodes the time of a logged record.
  template <class Out>
  void log_time(Out& out, std::uint64_t ns) noexcept {
    out.z(static_cast<std::int64_t>(ns - log_ts_ns_));
    log_ts_ns_ = ns;
  }
  // Logs a record whole, with its packed fields (see Logged).
  [[gnu::noinline]] void log_whole(const PostRecord& r, std::uint64_t a);
  [[gnu::noinline]] void log_whole(const CompletionRecord& r, std::uint64_t a, std::uint64_t b);
  [[gnu::noinline]] void log_whole(const PacketRecord& r, std::uint64_t a, std::uint64_t b,
                                   std::uint64_t c);
  std::uint8_t* log_repeated(std::uint8_t kind, std::uint64_t ns);
  // The replay of the log (finished()): each record told, taken as it was told.
  void replay();
  void take(const PostRecord& r);
  void take(const CompletionRecord& r);
  void take(const PacketRecord& r);
  void take(const InstantRecord& r, std::size_t text_at);  // its text: texts_ from text_at
  void take(const CmRecord& r);
  void unsignaled_or_outstanding(Qp& q, bool send, const Pending& p, std::uint64_t end_ns,
                                 bool outstanding);
  void write(std::FILE* f);

  std::string path_;
  Records log_;                  // what the writer was told, in order
  std::uint64_t log_ts_ns_ = 0;  // of the last record logged (records store the difference)
  std::array<Logged, 2> logged_posts_{};  // by side: receive, send
  std::array<Logged, 2> logged_completions_{};
  std::array<Logged, 2> logged_packets_{};  // request, response
  std::uint64_t flow_ = 0;
  Records records_;               // the timeline's records, in the order they were made
  std::uint64_t last_ts_ns_ = 0;  // of the last of them
  std::size_t parts_ = 0;         // of all of them: what write() sorts
  std::string texts_;             // instants' names, which records point into
  std::vector<Track> tracks_;
  std::deque<Qp> qps_;  // a deque: a Qp& stays valid while others are added
  // (device, number) -> a V; V{} for none. Numbers below kDirect (QPs and CQs are numbered
  // from 1 up on each device) index a table per device, larger ones a hash map.
  template <class V>
  class Index {
   public:
    V get(std::uint16_t dev, std::uint32_t num) const {
      if (dev < direct_.size() && num < direct_[dev].size()) return direct_[dev][num];
      if (num < kDirect) return V{};
      const auto it = map_.find(std::uint64_t{dev} << 32 | num);
      return it != map_.end() ? it->second : V{};
    }
    void set(std::uint16_t dev, std::uint32_t num, V value) {
      if (num >= kDirect) {
        map_[std::uint64_t{dev} << 32 | num] = value;
        return;
      }
      if (direct_.size() <= dev) direct_.resize(dev + std::size_t{1});
      if (direct_[dev].size() <= num) direct_[dev].resize(std::max<std::size_t>(num + 1, 64));
      direct_[dev][num] = value;
    }

   private:
    static constexpr std::uint32_t kDirect = 1 << 16;
    std::vector<std::vector<V>> direct_;
    std::unordered_map<std::uint64_t, V> map_;
  };
  Index<Qp*> qp_index_;                 // -> qps_
  Index<std::uint32_t> cq_tids_;        // -> the CQ's track (0: none yet)
  std::vector<std::uint32_t> cm_tids_;  // by device; 0: no CM track yet
  std::vector<bool> named_devices_;
};

}  // namespace verbsim::sim
