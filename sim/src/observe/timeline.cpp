#include "observe/timeline.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <system_error>

namespace verbsim::sim {

namespace {

enum TrackKind { kSend = 0, kRecv = 1, kPackets = 2, kCq = 3 };

// Trace Event timestamps are microseconds: ns as "us.nnn".
std::string micros(std::uint64_t ns) {
  char b[32];
  std::snprintf(b, sizeof b, "%llu.%03llu", static_cast<unsigned long long>(ns / 1000),
                static_cast<unsigned long long>(ns % 1000));
  return b;
}

std::string u(std::uint64_t v) { return std::to_string(v); }

std::string quoted(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out + "\"";
}

std::string packet_name(const PacketRecord& r) {
  std::string name;
  switch (r.kind) {
    case PacketKind::request: name = std::string(to_string(r.opcode)); break;
    case PacketKind::nak: name = "NAK " + std::string(to_string(r.nak)); break;
    case PacketKind::ack: name = "ACK"; break;
    case PacketKind::read_response: name = "READ response"; break;
    case PacketKind::atomic_response: name = "atomic ACK"; break;
  }
  return name + " psn " + u(r.psn);
}

}  // namespace

TimelineWriter::TimelineWriter(std::string path) : path_(std::move(path)) {
  // Fail now, not when the run is over.
  std::FILE* f = std::fopen(path_.c_str(), "w");
  if (f == nullptr) {
    throw std::system_error(errno, std::generic_category(), "VERBSIM_TIMELINE: " + path_);
  }
  std::fclose(f);
}

void TimelineWriter::add(std::uint64_t ts_ns, std::string json) {
  events_.push_back({ts_ns, seq_++, std::move(json)});
}

int TimelineWriter::track(int dev, std::uint32_t qpn, int kind, int lane) {
  const auto key = std::make_tuple(dev, qpn, kind, lane);
  if (auto it = tracks_.find(key); it != tracks_.end()) return it->second;
  const int tid = static_cast<int>(tracks_.size()) + 1;
  tracks_.emplace(key, tid);
  static constexpr const char* kKinds[] = {"send", "recv", "packets", ""};
  std::string name = kind == kCq ? "CQ " + u(qpn) : "QP " + u(qpn) + " " + kKinds[kind];
  if (lane > 0) name += " (" + u(static_cast<std::uint64_t>(lane) + 1) + ")";
  const std::string where = "\"pid\":" + u(static_cast<std::uint64_t>(dev) + 1) +
                            ",\"tid\":" + u(static_cast<std::uint64_t>(tid));
  add(0, "{\"name\":\"thread_name\",\"ph\":\"M\"," + where + ",\"args\":{\"name\":" +
             quoted(name) + "}}");
  // Tracks sort by QP, then send, receive and packets, then lanes; CQs after the QPs.
  const std::uint64_t order = (kind == kCq ? (1ull << 30) : 0) + qpn * 64ull +
                              static_cast<std::uint64_t>(kind) * 16 +
                              static_cast<std::uint64_t>(std::min(lane, 15));
  add(0, "{\"name\":\"thread_sort_index\",\"ph\":\"M\"," + where +
             ",\"args\":{\"sort_index\":" + u(order) + "}}");
  if (named_processes_.insert(dev).second) {
    add(0, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" +
               u(static_cast<std::uint64_t>(dev) + 1) + ",\"args\":{\"name\":\"sim" +
               u(static_cast<std::uint64_t>(dev)) + "\"}}");
  }
  return tid;
}

int TimelineWriter::lane_for(const Side& s, std::uint64_t at_ns) {
  std::vector<std::uint64_t>& lanes = lanes_[s];
  for (std::size_t i = 0; i < lanes.size(); ++i) {
    if (lanes[i] <= at_ns) {
      lanes[i] = UINT64_MAX;  // busy until its WR completes
      return static_cast<int>(i);
    }
  }
  lanes.push_back(UINT64_MAX);
  return static_cast<int>(lanes.size() - 1);
}

void TimelineWriter::posted(const PostRecord& r) {
  pending_[{r.dev, r.qpn, r.send}].push_back(
      {r.time_ns, r.wr_id, r.opcode, r.length, r.send, r.signaled});
}

void TimelineWriter::slice(const Pending& p, int dev, std::uint32_t qpn, std::uint64_t end_ns,
                           const std::string& status, std::uint32_t byte_len) {
  const Side side{dev, qpn, p.send};
  // The lane is chosen when the slice is known whole: the lowest one free at its post.
  const int lane = lane_for(side, p.posted_ns);
  lanes_[side][static_cast<std::size_t>(lane)] = end_ns;
  const int tid = track(dev, qpn, p.send ? kSend : kRecv, lane);
  const std::string name = p.send ? std::string(to_string(p.opcode)) : "RECV";
  add(p.posted_ns, "{\"name\":" + quoted(name) + ",\"cat\":\"wr\",\"ph\":\"X\",\"dur\":" +
                       micros(end_ns - p.posted_ns) + ",\"pid\":" +
                       u(static_cast<std::uint64_t>(dev) + 1) + ",\"tid\":" +
                       u(static_cast<std::uint64_t>(tid)) + ",\"args\":{\"wr_id\":" + u(p.wr_id) +
                       ",\"qp\":" + u(qpn) + ",\"status\":" + quoted(status) +
                       ",\"byte_len\":" + u(byte_len) + "}}");
}

void TimelineWriter::completion(const CompletionRecord& r) {
  const int dev = r.dev;
  const std::uint32_t qpn = r.wc.qp_num;
  const std::string status = std::string(to_string(r.wc.status)) + (r.dropped ? " (lost)" : "");
  std::deque<Pending>& q = pending_[{dev, qpn, r.send}];
  auto it = std::find_if(q.begin(), q.end(), [&](const Pending& p) { return p.wr_id == r.wc.wr_id; });
  if (it != q.end()) {
    // The unsignaled sends before it completed silently, at the latest by now.
    for (auto p = q.begin(); p != it; ++p) slice(*p, dev, qpn, r.time_ns, "unsignaled", p->length);
    slice(*it, dev, qpn, r.time_ns, status, r.wc.byte_len);
    q.erase(q.begin(), it + 1);
  } else if (!r.send) {
    // A receive from an SRQ: posted to the device's pool, taken by this QP.
    std::deque<Pending>& pool = pending_[{dev, 0u, false}];
    auto p = std::find_if(pool.begin(), pool.end(),
                          [&](const Pending& w) { return w.wr_id == r.wc.wr_id; });
    if (p != pool.end()) {
      slice(*p, dev, qpn, r.time_ns, status, r.wc.byte_len);
      pool.erase(p);
    }
  }
  const int tid = track(dev, r.cq, kCq, 0);
  add(r.time_ns, "{\"name\":" + quoted(status) + ",\"cat\":\"completion\",\"ph\":\"i\",\"s\":\"t\"," +
                     "\"pid\":" + u(static_cast<std::uint64_t>(dev) + 1) + ",\"tid\":" +
                     u(static_cast<std::uint64_t>(tid)) + ",\"args\":{\"wr_id\":" +
                     u(r.wc.wr_id) + ",\"qp\":" + u(qpn) + ",\"send\":" +
                     (r.send ? "true" : "false") + "}}");
}

void TimelineWriter::packet(const PacketRecord& r) {
  const std::string name = packet_name(r);
  const std::string args = ",\"args\":{\"fate\":" + quoted(to_string(r.fate)) +
                           ",\"length\":" + u(r.length) + ",\"wr_id\":" + u(r.wr_id) + "}";
  auto end = [&](int dev, std::uint32_t qpn, std::uint64_t ts, const std::string& what) {
    const std::string where = "\"pid\":" + u(static_cast<std::uint64_t>(dev) + 1) +
                              ",\"tid\":" + u(static_cast<std::uint64_t>(track(dev, qpn, kPackets, 0)));
    add(ts, "{\"name\":" + quoted(what) + ",\"cat\":\"packet\",\"ph\":\"X\",\"dur\":0.001," +
                where + args + "}");
    return where;
  };
  const std::string from = end(r.src_dev, r.src_qpn, r.sent_ns,
                               r.fate == PacketFate::delivered
                                   ? name
                                   : name + " (" + std::string(to_string(r.fate)) + ")");
  if (r.fate == PacketFate::dropped || r.fate == PacketFate::link_down) return;
  auto flow = [&](std::uint64_t arrives) {
    const std::string id = u(++flow_);
    add(r.sent_ns, "{\"name\":\"packet\",\"cat\":\"packet\",\"ph\":\"s\",\"id\":" + id + "," + from + "}");
    const std::string to = end(r.dst_dev, r.dst_qpn, arrives, name);
    add(arrives, "{\"name\":\"packet\",\"cat\":\"packet\",\"ph\":\"f\",\"bp\":\"e\",\"id\":" + id +
                     "," + to + "}");
  };
  flow(r.arrives_ns);
  if (r.fate == PacketFate::duplicated) flow(r.duplicate_ns);
}

void TimelineWriter::instant(const InstantRecord& r) {
  const std::string where =
      r.qpn != 0 ? "\"s\":\"t\",\"pid\":" + u(static_cast<std::uint64_t>(r.dev) + 1) + ",\"tid\":" +
                       u(static_cast<std::uint64_t>(track(r.dev, r.qpn, kPackets, 0)))
                 : "\"s\":\"p\",\"pid\":" + u(static_cast<std::uint64_t>(r.dev) + 1) + ",\"tid\":0";
  add(r.time_ns, "{\"name\":" + quoted(r.what) + ",\"cat\":\"event\",\"ph\":\"i\"," + where + "}");
}

void TimelineWriter::finished(std::uint64_t time_ns) {
  // WRs still outstanding end with the run.
  for (auto& [side, q] : pending_) {
    for (const Pending& p : q) {
      slice(p, std::get<0>(side), std::get<1>(side), time_ns, "outstanding", 0);
    }
  }
  pending_.clear();
  std::stable_sort(events_.begin(), events_.end(), [](const Event& a, const Event& b) {
    return a.ts_ns != b.ts_ns ? a.ts_ns < b.ts_ns : a.seq < b.seq;
  });
  std::FILE* f = std::fopen(path_.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "verbsim: cannot write the timeline %s\n", path_.c_str());
    return;
  }
  std::fputs("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n", f);
  for (std::size_t i = 0; i < events_.size(); ++i) {
    std::string line = events_[i].json;
    // Every event but the metadata gets its timestamp.
    line.insert(line.size() - 1, ",\"ts\":" + micros(events_[i].ts_ns));
    std::fputs(line.c_str(), f);
    std::fputs(i + 1 < events_.size() ? ",\n" : "\n", f);
  }
  std::fputs("]}\n", f);
  std::fclose(f);
}

}  // namespace verbsim::sim
