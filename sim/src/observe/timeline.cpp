#include "observe/timeline.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <new>
#include <string_view>
#include <system_error>
#include <utility>

namespace verbsim::sim {

// Two streams of records, each a kind byte, a flags byte, then numbers as LEB128 (7 bits a
// byte), times as the difference from the record before in the same stream.
//
// The log: what the writer is told while the run goes (a post, a completion, a packet, an
// instant, a CM message), as it was told, and nothing else: the run pays for the encoding
// alone. When the world ends, replay() takes each in order, as the writer once took them as
// they came, and makes the timeline's records. A post, completion or packet that is the last
// of its kind and side but for the next work request (and a packet's next PSN) is its kind
// byte, its time and (a packet) the change of its time in flight; the first of a batch is
// whole. A batch of SENDs logs 2 or 3 bytes a record, not 8 to 17.
//
// The timeline's records: a record has one or two parts, each a group of JSON lines at its
// own time (a WR's slice at its post and its completion; a packet where it leaves and where it
// arrives). They are sorted by (time, seq), where seq is 4 x the record's offset, + 1 for its
// first part and + 3 for its second: the order they were made in. A track's metadata (time 0)
// has seq 4 x the offset of the record it was made for, + 0 if made before that record's first
// part, + 2 if between its parts.

namespace {


enum TrackKind : std::uint8_t { kSend = 0, kRecv = 1, kPackets = 2, kCq = 3, kCmTrack = 4 };

enum RecordKind : std::uint8_t {
  kWr,          // a WR's slice [, then its completion]
  kCompletion,  // a completion no WR slice ends at
  kPacket,      // where a packet leaves [, then where it arrives]
  kInstant,
  kCm,  // where a CM message leaves [, then where it arrives]
};

// What the log holds: a record as the writer was told it, its kind in the kind byte's bits
// 0-2. A post's or completion's kind byte says its side, a packet's whether it is a response;
// the log compares a record with the last of its side.
enum LogKind : std::uint8_t { kLogPost, kLogCompletion, kLogPacket, kLogInstant, kLogCm };
constexpr std::uint8_t kLogSend = 8;        // a post or completion of a send queue
constexpr std::uint8_t kLogResponse = 8;    // a packet that answers a request
constexpr std::uint8_t kLogRepeated = 16;   // the last of its side's fields, WR (PSN) one on

// How a WR slice ended.
enum class WrEnd : std::uint8_t { completed, lost, unsignaled, outstanding };

// kWr flags: WrEnd in bits 0-1, then these.
constexpr std::uint8_t kWrSend = 4;
constexpr std::uint8_t kWrCompletion = 8;  // two parts: the completion follows
// kCompletion flags.
constexpr std::uint8_t kCqSend = 1;
constexpr std::uint8_t kCqLost = 2;
// kPacket flags: PacketFate in bits 0-2, PacketKind in bits 3-5, then this.
constexpr std::uint8_t kPacketCopy = 64;  // a duplicate's second arrow: only the flow leaves
// kCm flags: PacketFate in bits 0-2, CmMessage in bits 3-5, then this.
constexpr std::uint8_t kCmSidr = 64;

// A packet's fate and kind, as its log record and its timeline record hold them.
std::uint8_t packet_flags(const PacketRecord& r) {
  return static_cast<std::uint8_t>(static_cast<unsigned>(r.fate) |
                                   static_cast<unsigned>(r.kind) << 3);
}

// A CM message's name as the IB CM calls it.
std::string_view cm_name(CmMessage kind, bool sidr) {
  static constexpr std::string_view kNames[] = {"?", "REQ", "REP", "RTU", "REJ", "DREQ", "DREP"};
  // A UDP id's REJ is a SIDR REP that refuses.
  if (sidr) return kind == CmMessage::req ? "SIDR_REQ" : "SIDR_REP";
  return kNames[static_cast<std::size_t>(kind) % std::size(kNames)];
}

class Encoder {
 public:
  explicit Encoder(std::uint8_t* p) : p_(p) {}
  void byte(std::uint8_t v) { *p_++ = v; }
  void u(std::uint64_t v) {
    while (v >= 0x80) {
      *p_++ = static_cast<std::uint8_t>(v | 0x80);
      v >>= 7;
    }
    *p_++ = static_cast<std::uint8_t>(v);
  }
  void z(std::int64_t v) {
    u((static_cast<std::uint64_t>(v) << 1) ^ static_cast<std::uint64_t>(v >> 63));
  }
  std::uint8_t* end() const { return p_; }

 private:
  std::uint8_t* p_;
};

class Decoder {
 public:
  explicit Decoder(const std::uint8_t* p) : p_(p) {}
  std::uint8_t byte() { return *p_++; }
  std::uint64_t u() {
    std::uint64_t v = 0;
    int shift = 0;
    while (*p_ & 0x80) {
      v |= static_cast<std::uint64_t>(*p_++ & 0x7f) << shift;
      shift += 7;
    }
    return v | static_cast<std::uint64_t>(*p_++) << shift;
  }
  std::uint32_t u32() { return static_cast<std::uint32_t>(u()); }
  std::uint16_t u16() { return static_cast<std::uint16_t>(u()); }
  std::int64_t z() {
    const std::uint64_t v = u();
    return static_cast<std::int64_t>(v >> 1) ^ -static_cast<std::int64_t>(v & 1);
  }
  const std::uint8_t* end() const { return p_; }

 private:
  const std::uint8_t* p_;
};

// Appends JSON to a buffer that goes to a file as it fills.
class JsonOut {
 public:
  explicit JsonOut(std::FILE* f) : f_(f), buf_(new char[kSize]) {}
  ~JsonOut() { flush(); }
  JsonOut(const JsonOut&) = delete;
  JsonOut& operator=(const JsonOut&) = delete;

  // Starts an event: room for a line of any kind but an instant's name, and the separator.
  void line() {
    if (pos_ + kLine > kSize) flush();
    put(first_ ? "\n" : ",\n");
    first_ = false;
  }
  void put(std::string_view s) {
    std::memcpy(buf_.get() + pos_, s.data(), s.size());
    pos_ += s.size();
  }
  void put(char c) { buf_[pos_++] = c; }
  void num(std::uint64_t v) {
    pos_ = static_cast<std::size_t>(std::to_chars(buf_.get() + pos_, buf_.get() + kSize, v).ptr -
                                    buf_.get());
  }
  // Trace Event timestamps are microseconds: ns as "us.nnn".
  void micros(std::uint64_t ns) {
    num(ns / 1000);
    const auto frac = static_cast<unsigned>(ns % 1000);
    char* p = buf_.get() + pos_;
    p[0] = '.';
    p[1] = static_cast<char>('0' + frac / 100);
    p[2] = static_cast<char>('0' + frac / 10 % 10);
    p[3] = static_cast<char>('0' + frac % 10);
    pos_ += 4;
  }
  // A string of any length, quoted: '"' and '\' escaped, control characters left out. Leaves
  // room for the rest of a line.
  void quoted(std::string_view s) {
    put('"');
    for (const char c : s) {
      if (pos_ + kLine > kSize) flush();
      if (c == '"' || c == '\\') put('\\');
      if (static_cast<unsigned char>(c) >= 0x20) put(c);
    }
    put('"');
  }
  void flush() {
    if (pos_ > 0) std::fwrite(buf_.get(), 1, pos_, f_);
    pos_ = 0;
  }

 private:
  static constexpr std::size_t kSize = 1 << 20;
  static constexpr std::size_t kLine = 512;
  std::FILE* f_;
  std::unique_ptr<char[]> buf_;
  std::size_t pos_ = 0;
  bool first_ = true;
};

void pid_tid(JsonOut& o, std::uint16_t dev, std::uint32_t tid) {
  o.put(",\"pid\":");
  o.num(dev + 1u);
  o.put(",\"tid\":");
  o.num(tid);
}

// Ends a line: its timestamp, then the event's closing brace.
void ts_end(JsonOut& o, std::uint64_t ts_ns) {
  o.put(",\"ts\":");
  o.micros(ts_ns);
  o.put('}');
}

// A record read back: the fields of every kind.
struct Decoded {
  RecordKind kind;
  std::uint8_t flags;
  std::int64_t ts_delta;
  std::uint64_t d_ns;  // from the first part to the second (a slice alone: its duration)
  bool two_parts;
  std::uint16_t dev, dev2;  // of the first part, of the second
  std::uint32_t tid, tid2;
  std::uint64_t wr_id, flow, text;
  std::uint32_t qpn, byte_len, psn, length, text_length;
  std::uint32_t local_comm_id, remote_comm_id;
  std::int64_t reason;
  WcStatus status;
  WrOpcode opcode;
  NakCode nak;
};

// Reads the record at `p` into `r`; returns where the next one starts.
const std::uint8_t* decode(const std::uint8_t* p, Decoded& r) {
  Decoder in(p);
  r.kind = static_cast<RecordKind>(in.byte());
  r.flags = in.byte();
  r.ts_delta = in.z();
  r.two_parts = false;
  // A packet's or CM message's arrival, when it has a flow: after the delay, on dev2's tid2.
  const auto read_far_end = [&] {
    r.two_parts = r.flow != 0;
    if (r.two_parts) {
      r.d_ns = in.u();
      r.dev2 = in.u16();
      r.tid2 = in.u32();
    }
  };
  switch (r.kind) {
    case kWr:
      r.two_parts = (r.flags & kWrCompletion) != 0;
      r.d_ns = in.u();
      r.dev = r.dev2 = in.u16();
      r.tid = in.u32();
      if (r.two_parts) r.tid2 = in.u32();
      r.wr_id = in.u();
      r.qpn = in.u32();
      r.byte_len = in.u32();
      r.status = static_cast<WcStatus>(in.u32());
      r.opcode = static_cast<WrOpcode>(in.byte());
      break;
    case kCompletion:
      r.dev = in.u16();
      r.tid = in.u32();
      r.wr_id = in.u();
      r.qpn = in.u32();
      r.status = static_cast<WcStatus>(in.u32());
      break;
    case kPacket:
      r.opcode = static_cast<WrOpcode>(in.byte());
      r.nak = static_cast<NakCode>(in.byte());
      r.dev = in.u16();
      r.tid = in.u32();
      r.wr_id = in.u();
      r.psn = in.u32();
      r.length = in.u32();
      r.flow = in.u();
      read_far_end();
      break;
    case kInstant:
      r.dev = in.u16();
      r.tid = in.u32();
      r.text = in.u();
      r.text_length = in.u32();
      break;
    case kCm:
      r.dev = in.u16();
      r.tid = in.u32();
      r.flow = in.u();
      r.local_comm_id = in.u32();
      r.remote_comm_id = in.u32();
      r.qpn = in.u32();
      r.reason = in.z();
      read_far_end();
      break;
  }
  return in.end();
}

void packet_line(JsonOut& o, const Decoded& r, bool leaving, std::uint64_t ts) {
  const auto fate = static_cast<PacketFate>(r.flags & 7);
  const auto kind = static_cast<PacketKind>(r.flags >> 3 & 7);
  const std::uint16_t dev = leaving ? r.dev : r.dev2;
  const std::uint32_t tid = leaving ? r.tid : r.tid2;
  o.line();
  o.put("{\"name\":\"");
  switch (kind) {
    case PacketKind::request: o.put(to_string(r.opcode)); break;
    case PacketKind::nak:
      o.put("NAK ");
      o.put(to_string(r.nak));
      break;
    case PacketKind::ack: o.put("ACK"); break;
    case PacketKind::read_response: o.put("READ response"); break;
    case PacketKind::atomic_response: o.put("atomic ACK"); break;
  }
  o.put(" psn ");
  o.num(r.psn);
  if (leaving && fate != PacketFate::delivered) {
    o.put(" (");
    o.put(to_string(fate));
    o.put(')');
  }
  o.put("\",\"cat\":\"packet\",\"ph\":\"X\",\"dur\":0.001");
  pid_tid(o, dev, tid);
  o.put(",\"args\":{\"fate\":\"");
  o.put(to_string(fate));
  o.put("\",\"length\":");
  o.num(r.length);
  o.put(",\"wr_id\":");
  o.num(r.wr_id);
  o.put('}');
  ts_end(o, ts);
}

// A flow's start or finish, named and filed as `what` ("packet", "cm").
void flow_line(JsonOut& o, std::string_view what, bool start, std::uint64_t id, std::uint16_t dev,
               std::uint32_t tid, std::uint64_t ts) {
  o.line();
  o.put("{\"name\":\"");
  o.put(what);
  o.put("\",\"cat\":\"");
  o.put(what);
  o.put(start ? "\",\"ph\":\"s\",\"id\":" : "\",\"ph\":\"f\",\"bp\":\"e\",\"id\":");
  o.num(id);
  pid_tid(o, dev, tid);
  ts_end(o, ts);
}

void cm_line(JsonOut& o, const Decoded& r, bool leaving, std::uint64_t ts) {
  const auto fate = static_cast<PacketFate>(r.flags & 7);
  const auto kind = static_cast<CmMessage>(r.flags >> 3 & 7);
  o.line();
  o.put("{\"name\":\"");
  o.put(cm_name(kind, (r.flags & kCmSidr) != 0));
  if (leaving && fate != PacketFate::delivered) {
    o.put(" (");
    o.put(to_string(fate));
    o.put(')');
  }
  o.put("\",\"cat\":\"cm\",\"ph\":\"X\",\"dur\":0.001");
  pid_tid(o, leaving ? r.dev : r.dev2, leaving ? r.tid : r.tid2);
  o.put(",\"args\":{\"fate\":\"");
  o.put(to_string(fate));
  o.put("\",\"local_comm_id\":");
  o.num(r.local_comm_id);
  o.put(",\"remote_comm_id\":");
  o.num(r.remote_comm_id);
  if (kind == CmMessage::req || kind == CmMessage::rep) {
    o.put(",\"qpn\":");
    o.num(r.qpn);
  }
  if (kind == CmMessage::rej) {
    o.put(",\"reason\":");
    if (r.reason < 0) o.put('-');
    o.num(r.reason < 0 ? 0 - static_cast<std::uint64_t>(r.reason)
                       : static_cast<std::uint64_t>(r.reason));
  }
  o.put('}');
  ts_end(o, ts);
}

void completion_line(JsonOut& o, std::uint16_t dev, std::uint32_t tid, WcStatus status, bool lost,
                     std::uint64_t wr_id, std::uint32_t qpn, bool send, std::uint64_t ts) {
  o.line();
  o.put("{\"name\":\"");
  o.put(to_string(status));
  if (lost) o.put(" (lost)");
  o.put("\",\"cat\":\"completion\",\"ph\":\"i\",\"s\":\"t\"");
  pid_tid(o, dev, tid);
  o.put(",\"args\":{\"wr_id\":");
  o.num(wr_id);
  o.put(",\"qp\":");
  o.num(qpn);
  o.put(send ? ",\"send\":true}" : ",\"send\":false}");
  ts_end(o, ts);
}

}  // namespace

void TimelineWriter::Chunk::Free::operator()(std::uint8_t* p) const noexcept {
  ::operator delete (p, std::align_val_t{TimelineWriter::kChunkBytes});
}

TimelineWriter::TimelineWriter(std::string path) : path_(std::move(path)) {
  // Fail now, not when the run is over.
  std::FILE* f = std::fopen(path_.c_str(), "w");
  if (f == nullptr) {
    throw std::system_error(errno, std::generic_category(), "VERBSIM_TIMELINE: " + path_);
  }
  std::fclose(f);
}

TimelineWriter::~TimelineWriter() = default;

void TimelineWriter::Records::add_chunk() {
  if (!chunks.empty()) close();
  // Aligned, and in huge pages where the kernel has them: fresh memory costs a page fault per
  // 2 MiB, not per 4 KiB.
  void* p = ::operator new (kChunkBytes, std::align_val_t{kChunkBytes});
  ::madvise(p, kChunkBytes, MADV_HUGEPAGE);
  chunks.push_back(
      {std::unique_ptr<std::uint8_t[], Chunk::Free>(static_cast<std::uint8_t*>(p)), 0});
  next = static_cast<std::uint8_t*>(p);
  full = next + (kChunkBytes - kMaxRecord);
}

TimelineWriter::Qp& TimelineWriter::add_qp(std::uint16_t dev, std::uint32_t qpn) {
  Qp& q = qps_.emplace_back(Qp{.dev = dev, .qpn = qpn, .send = {}, .recv = {}});
  qp_index_.set(dev, qpn, &q);
  return q;
}

std::uint32_t TimelineWriter::new_track(std::uint16_t dev, std::uint32_t num, std::uint8_t kind,
                                        std::uint16_t lane, bool inside) {
  if (named_devices_.size() <= dev) named_devices_.resize(dev + 1u, false);
  const bool first = !named_devices_[dev];
  named_devices_[dev] = true;
  tracks_.push_back({records_.next_offset() * 4 + (inside ? 2 : 0), dev, num, kind, lane, first});
  return static_cast<std::uint32_t>(tracks_.size());
}

std::uint32_t TimelineWriter::packets_track(Qp& q, bool inside) {
  if (q.packets_tid == 0) q.packets_tid = new_track(q.dev, q.qpn, kPackets, 0, inside);
  return q.packets_tid;
}

std::uint32_t TimelineWriter::add_cq_track(std::uint16_t dev, std::uint32_t cq, bool inside) {
  const std::uint32_t tid = new_track(dev, cq, kCq, 0, inside);
  cq_tids_.set(dev, cq, tid);
  return tid;
}

std::uint32_t TimelineWriter::cm_track(std::uint16_t dev, bool inside) {
  if (cm_tids_.size() <= dev) cm_tids_.resize(dev + 1u, 0);
  if (cm_tids_[dev] == 0) cm_tids_[dev] = new_track(dev, 0, kCmTrack, 0, inside);
  return cm_tids_[dev];
}

std::uint32_t TimelineWriter::lane_track(Qp& q, bool send, const Pending& p, std::uint64_t end_ns) {
  Queue& queue = send ? q.send : q.recv;
  // The lane is chosen when the slice is known whole: the lowest one free at its post. A search
  // for a post no later than the last search's starts where that one found lanes busy: WRs
  // posted together take lanes 0, 1, 2, ... a step each.
  std::size_t lane = p.posted_ns <= queue.busy_after_ns ? queue.busy_below : 0;
  while (lane < queue.lanes.size() && queue.lanes[lane].free_ns > p.posted_ns) ++lane;
  if (lane == queue.lanes.size()) [[unlikely]] {
    add_lane(q, send);
  }
  queue.lanes[lane].free_ns = end_ns;
  queue.busy_below = end_ns > p.posted_ns ? lane + 1 : lane;
  queue.busy_after_ns = p.posted_ns;
  return queue.lanes[lane].tid;
}

void TimelineWriter::add_lane(Qp& q, bool send) {
  Queue& queue = send ? q.send : q.recv;
  const auto lane = static_cast<std::uint16_t>(queue.lanes.size());
  queue.lanes.push_back({0, new_track(q.dev, q.qpn, send ? kSend : kRecv, lane, false)});
}

// ---- The replay: the timeline's records, made from the log --------------------------------------

void TimelineWriter::take(const PostRecord& r) {
  Qp& q = qp(r.dev, r.qpn);
  (r.send ? q.send : q.recv).pending.push_back({r.time_ns, r.wr_id, r.length, r.opcode});
}

void TimelineWriter::unsignaled_or_outstanding(Qp& q, bool send, const Pending& p,
                                               std::uint64_t end_ns, bool outstanding) {
  const std::uint32_t tid = lane_track(q, send, p, end_ns);
  Encoder out(room());
  out.byte(kWr);
  out.byte(static_cast<std::uint8_t>(outstanding ? WrEnd::outstanding : WrEnd::unsignaled) |
           (send ? kWrSend : 0));
  out.z(static_cast<std::int64_t>(p.posted_ns - last_ts_ns_));
  last_ts_ns_ = p.posted_ns;
  out.u(end_ns - p.posted_ns);
  out.u(q.dev);
  out.u(tid);
  out.u(p.wr_id);
  out.u(q.qpn);
  out.u(outstanding ? 0 : p.length);
  out.u(0);
  out.byte(static_cast<std::uint8_t>(p.opcode));
  keep(out.end(), 1);
}

void TimelineWriter::take(const CompletionRecord& r) {
  const std::uint16_t dev = r.dev;
  Qp& q = qp(dev, r.wc.qp_num);
  Queue& queue = r.send ? q.send : q.recv;
  std::size_t i = queue.head;
  while (i < queue.pending.size() && queue.pending[i].wr_id != r.wc.wr_id) ++i;
  Pending done{};
  bool found = false;
  if (i < queue.pending.size()) {
    // The unsignaled sends before it completed silently, at the latest by now.
    for (std::size_t j = queue.head; j < i; ++j) {
      unsignaled_or_outstanding(q, r.send, queue.pending[j], r.time_ns, false);
    }
    done = queue.pending[i];
    found = true;
    queue.head = i + 1;
    if (queue.head == queue.pending.size()) {
      queue.pending.clear();
      queue.head = 0;
    } else if (queue.head >= 32 && queue.head * 2 >= queue.pending.size()) {
      // A queue that never empties (receives topped up) keeps only what is pending.
      queue.pending.erase(queue.pending.begin(),
                          queue.pending.begin() + static_cast<std::ptrdiff_t>(queue.head));
      queue.head = 0;
    }
  } else if (!r.send) {
    // A receive from an SRQ: posted to the device's pool, taken by this QP.
    Queue& pool = qp(dev, 0).recv;
    std::size_t k = pool.head;
    while (k < pool.pending.size() && pool.pending[k].wr_id != r.wc.wr_id) ++k;
    if (k < pool.pending.size()) {
      done = pool.pending[k];
      found = true;
      pool.pending.erase(pool.pending.begin() + static_cast<std::ptrdiff_t>(k));
    }
  }
  if (!found) {
    const std::uint32_t cq_tid = cq_track(dev, r.cq, false);
    Encoder out(room());
    out.byte(kCompletion);
    out.byte((r.send ? kCqSend : 0) | (r.dropped ? kCqLost : 0));
    out.z(static_cast<std::int64_t>(r.time_ns - last_ts_ns_));
    last_ts_ns_ = r.time_ns;
    out.u(dev);
    out.u(cq_tid);
    out.u(r.wc.wr_id);
    out.u(r.wc.qp_num);
    out.u(static_cast<std::uint32_t>(r.wc.status));
    keep(out.end(), 1);
    return;
  }
  // Its slice, then the completion.
  const std::uint32_t tid = lane_track(q, r.send, done, r.time_ns);
  const std::uint32_t cq_tid = cq_track(dev, r.cq, true);
  Encoder out(room());
  out.byte(kWr);
  out.byte(static_cast<std::uint8_t>(r.dropped ? WrEnd::lost : WrEnd::completed) |
           (r.send ? kWrSend : 0) | kWrCompletion);
  out.z(static_cast<std::int64_t>(done.posted_ns - last_ts_ns_));
  last_ts_ns_ = done.posted_ns;
  out.u(r.time_ns - done.posted_ns);
  out.u(dev);
  out.u(tid);
  out.u(cq_tid);
  out.u(done.wr_id);
  out.u(r.wc.qp_num);
  out.u(r.wc.byte_len);
  out.u(static_cast<std::uint32_t>(r.wc.status));
  out.byte(static_cast<std::uint8_t>(done.opcode));
  keep(out.end(), 2);
}

void TimelineWriter::take(const PacketRecord& r) {
  const bool lost = r.fate == PacketFate::dropped || r.fate == PacketFate::link_down;
  const std::uint32_t from = packets_track(qp(r.src_dev, r.src_qpn), false);
  const std::uint32_t to = lost ? 0 : packets_track(qp(r.dst_dev, r.dst_qpn), true);
  const std::uint8_t flags = packet_flags(r);
  const auto one = [&](std::uint8_t copy, std::uint64_t arrives_ns) {
    Encoder out(room());
    out.byte(kPacket);
    out.byte(flags | copy);
    out.z(static_cast<std::int64_t>(r.sent_ns - last_ts_ns_));
    last_ts_ns_ = r.sent_ns;
    out.byte(static_cast<std::uint8_t>(r.opcode));
    out.byte(static_cast<std::uint8_t>(r.nak));
    out.u(r.src_dev);
    out.u(from);
    out.u(r.wr_id);
    out.u(r.psn);
    out.u(r.length);
    out.u(lost ? 0 : ++flow_);
    if (!lost) {
      out.u(arrives_ns - r.sent_ns);
      out.u(r.dst_dev);
      out.u(to);
    }
    keep(out.end(), lost ? 1 : 2);
  };
  one(0, r.arrives_ns);
  // A duplicate: a second arrow from where the packet left.
  if (r.fate == PacketFate::duplicated) one(kPacketCopy, r.duplicate_ns);
}

void TimelineWriter::take(const InstantRecord& r, std::size_t text_at) {
  const std::uint32_t tid = r.qpn != 0 ? packets_track(qp(r.dev, r.qpn), false) : 0;
  Encoder out(room());
  out.byte(kInstant);
  out.byte(0);
  out.z(static_cast<std::int64_t>(r.time_ns - last_ts_ns_));
  last_ts_ns_ = r.time_ns;
  out.u(r.dev);
  out.u(tid);
  out.u(text_at);
  out.u(r.what.size());
  keep(out.end(), 1);
}

void TimelineWriter::take(const CmRecord& r) {
  const bool lost = r.fate != PacketFate::delivered;
  const std::uint32_t from = cm_track(r.src_dev, false);
  const std::uint32_t to = lost ? 0 : cm_track(r.dst_dev, true);
  Encoder out(room());
  out.byte(kCm);
  out.byte(static_cast<std::uint8_t>(static_cast<unsigned>(r.fate) |
                                     static_cast<unsigned>(r.kind) << 3 | (r.sidr ? kCmSidr : 0)));
  out.z(static_cast<std::int64_t>(r.sent_ns - last_ts_ns_));
  last_ts_ns_ = r.sent_ns;
  out.u(r.src_dev);
  out.u(from);
  out.u(lost ? 0 : ++flow_);
  out.u(r.local_comm_id);
  out.u(r.remote_comm_id);
  out.u(r.qpn);
  out.z(r.reason);
  if (!lost) {
    out.u(r.arrives_ns - r.sent_ns);
    out.u(r.dst_dev);
    out.u(to);
  }
  keep(out.end(), lost ? 1 : 2);
}

// ---- The log: each record told, as told ---------------------------------------------------------

// A post, completion or packet repeated: its kind byte, its time and what else changes.
inline std::uint8_t* TimelineWriter::log_repeated(std::uint8_t kind, std::uint64_t ns) {
  Encoder out(log_.next);
  out.byte(kind | kLogRepeated);
  log_time(out, ns);
  return out.end();
}

void TimelineWriter::posted(const PostRecord& r) {
  Logged& last = logged_posts_[r.send ? 1 : 0];
  const std::uint64_t a = r.qpn | std::uint64_t{r.dev} << 32 |
                          std::uint64_t{static_cast<std::uint8_t>(r.opcode)} << 48;
  if (a != last.a || r.length != last.b || r.wr_id != last.wr_id + 1) [[unlikely]] {
    return log_whole(r, a);
  }
  last.wr_id = r.wr_id;
  log_.keep(log_repeated(kLogPost | (r.send ? kLogSend : 0), r.time_ns));  // last: a tail call
}

void TimelineWriter::log_whole(const PostRecord& r, std::uint64_t a) {
  Encoder out(log_.next);
  out.byte(kLogPost | (r.send ? kLogSend : 0));
  log_time(out, r.time_ns);
  out.u(r.dev);
  out.u(r.qpn);
  out.u(r.wr_id);
  out.u(r.length);
  out.byte(static_cast<std::uint8_t>(r.opcode));
  logged_posts_[r.send ? 1 : 0] = {.a = a, .b = r.length, .c = 0, .wr_id = r.wr_id};
  log_.keep(out.end());
}

void TimelineWriter::completion(const CompletionRecord& r) {
  Logged& last = logged_completions_[r.send ? 1 : 0];
  const std::uint64_t a = r.wc.qp_num | std::uint64_t{r.dev} << 32 |
                          std::uint64_t{r.dropped ? kCqLost : 0u} << 48;
  const std::uint64_t b = r.cq | std::uint64_t{r.wc.byte_len} << 32;
  const auto c = static_cast<std::uint32_t>(r.wc.status);
  if (a != last.a || b != last.b || c != last.c || r.wc.wr_id != last.wr_id + 1) [[unlikely]] {
    return log_whole(r, a, b);
  }
  last.wr_id = r.wc.wr_id;
  log_.keep(log_repeated(kLogCompletion | (r.send ? kLogSend : 0), r.time_ns));
}

void TimelineWriter::log_whole(const CompletionRecord& r, std::uint64_t a, std::uint64_t b) {
  Encoder out(log_.next);
  out.byte(kLogCompletion | (r.send ? kLogSend : 0));
  log_time(out, r.time_ns);
  out.byte(r.dropped ? kCqLost : 0);
  out.u(r.dev);
  out.u(r.cq);
  out.u(r.wc.qp_num);
  out.u(r.wc.wr_id);
  out.u(r.wc.byte_len);
  out.u(static_cast<std::uint32_t>(r.wc.status));
  logged_completions_[r.send ? 1 : 0] = {
      .a = a, .b = b, .c = static_cast<std::uint32_t>(r.wc.status), .wr_id = r.wc.wr_id};
  log_.keep(out.end());
}

void TimelineWriter::packet(const PacketRecord& r) {
  const bool response = r.kind != PacketKind::request;
  Logged& last = logged_packets_[response ? 1 : 0];
  const std::uint64_t a = r.src_qpn | std::uint64_t{r.src_dev} << 32 |
                          std::uint64_t{packet_flags(r)} << 48 |
                          std::uint64_t{static_cast<std::uint8_t>(r.opcode)} << 56;
  const std::uint64_t b = r.dst_qpn | std::uint64_t{r.dst_dev} << 32 |
                          std::uint64_t{static_cast<std::uint8_t>(r.nak)} << 48;
  // The PSN one on is c + 1 (bit 32 stays clear of the length: the replay's PSN wraps).
  const std::uint64_t c = r.psn | std::uint64_t{r.length} << 33;
  if (a != last.a || b != last.b || c != last.c + 1 || r.wr_id != last.wr_id + 1) [[unlikely]] {
    return log_whole(r, a, b, c);
  }
  const std::uint64_t flight_ns = r.arrives_ns - r.sent_ns;
  Encoder out(log_repeated(kLogPacket | (response ? kLogResponse : 0), r.sent_ns));
  out.z(static_cast<std::int64_t>(flight_ns - last.flight_ns));
  if (r.fate == PacketFate::duplicated) out.u(r.duplicate_ns - r.sent_ns);
  last.c = c;
  last.wr_id = r.wr_id;
  last.flight_ns = flight_ns;
  log_.keep(out.end());
}

void TimelineWriter::log_whole(const PacketRecord& r, std::uint64_t a, std::uint64_t b,
                               std::uint64_t c) {
  const bool response = r.kind != PacketKind::request;
  const std::uint64_t flight_ns = r.arrives_ns - r.sent_ns;
  Encoder out(log_.next);
  out.byte(kLogPacket | (response ? kLogResponse : 0));
  log_time(out, r.sent_ns);
  out.byte(packet_flags(r));
  out.byte(static_cast<std::uint8_t>(r.opcode));
  out.byte(static_cast<std::uint8_t>(r.nak));
  out.u(r.src_dev);
  out.u(r.src_qpn);
  out.u(r.dst_dev);
  out.u(r.dst_qpn);
  out.u(r.wr_id);
  out.u(r.psn);
  out.u(r.length);
  out.u(flight_ns);
  if (r.fate == PacketFate::duplicated) out.u(r.duplicate_ns - r.sent_ns);
  logged_packets_[response ? 1 : 0] = {
      .a = a, .b = b, .c = c, .wr_id = r.wr_id, .flight_ns = flight_ns};
  log_.keep(out.end());
}

void TimelineWriter::instant(const InstantRecord& r) {
  Encoder out(log_.next);
  out.byte(kLogInstant);
  out.byte(0);
  log_time(out, r.time_ns);
  out.u(r.dev);
  out.u(r.qpn);
  out.u(r.what.size());
  log_.keep(out.end());
  texts_.append(r.what);
}

void TimelineWriter::cm(const CmRecord& r) {
  Encoder out(log_.next);
  out.byte(kLogCm);
  out.byte(static_cast<std::uint8_t>(static_cast<unsigned>(r.fate) |
                                     static_cast<unsigned>(r.kind) << 3 | (r.sidr ? kCmSidr : 0)));
  log_time(out, r.sent_ns);
  out.u(r.src_dev);
  out.u(r.dst_dev);
  out.u(r.local_comm_id);
  out.u(r.remote_comm_id);
  out.u(r.qpn);
  out.z(r.reason);
  out.u(r.arrives_ns - r.sent_ns);
  log_.keep(out.end());
}

void TimelineWriter::replay() {
  log_.close();
  std::uint64_t ts = 0;
  std::size_t text_at = 0;
  // The last record of each side, as the log went; before the first, every field 0.
  std::array<PostRecord, 2> posts{};
  std::array<CompletionRecord, 2> completions{};
  std::array<PacketRecord, 2> packets{};
  for (std::size_t side = 0; side < 2; ++side) {
    posts[side].opcode = WrOpcode{};
    packets[side].opcode = WrOpcode{};
  }
  for (Chunk& chunk : log_.chunks) {
    const std::uint8_t* const end = chunk.bytes.get() + chunk.used;
    for (const std::uint8_t* p = chunk.bytes.get(); p < end;) {
      Decoder in(p);
      const std::uint8_t first = in.byte();
      const auto kind = static_cast<LogKind>(first & 7);
      const std::size_t side = (first & kLogSend) != 0 ? 1 : 0;
      const bool repeated = (first & kLogRepeated) != 0;
      // Instants and CM messages: a flags byte before the time.
      const std::uint8_t flags = kind >= kLogInstant ? in.byte() : 0;
      ts += static_cast<std::uint64_t>(in.z());
      switch (kind) {
        case kLogPost: {
          PostRecord& r = posts[side];
          r.time_ns = ts;
          r.send = side != 0;
          ++r.wr_id;
          if (!repeated) {
            r.dev = in.u16();
            r.qpn = in.u32();
            r.wr_id = in.u();
            r.length = in.u32();
            r.opcode = static_cast<WrOpcode>(in.byte());
          }
          take(r);
          break;
        }
        case kLogCompletion: {
          CompletionRecord& r = completions[side];
          r.time_ns = ts;
          r.send = side != 0;
          ++r.wc.wr_id;
          if (!repeated) {
            r.dropped = (in.byte() & kCqLost) != 0;
            r.dev = in.u16();
            r.cq = in.u32();
            r.wc.qp_num = in.u32();
            r.wc.wr_id = in.u();
            r.wc.byte_len = in.u32();
            r.wc.status = static_cast<WcStatus>(in.u32());
          }
          take(r);
          break;
        }
        case kLogPacket: {
          PacketRecord& r = packets[side];
          const std::uint64_t flight_ns = r.arrives_ns - r.sent_ns;
          r.sent_ns = ts;
          ++r.wr_id;
          ++r.psn;
          if (repeated) {
            r.arrives_ns = ts + flight_ns + static_cast<std::uint64_t>(in.z());
          } else {
            const std::uint8_t bits = in.byte();
            r.fate = static_cast<PacketFate>(bits & 7);
            r.kind = static_cast<PacketKind>(bits >> 3 & 7);
            r.opcode = static_cast<WrOpcode>(in.byte());
            r.nak = static_cast<NakCode>(in.byte());
            r.src_dev = in.u16();
            r.src_qpn = in.u32();
            r.dst_dev = in.u16();
            r.dst_qpn = in.u32();
            r.wr_id = in.u();
            r.psn = in.u32();
            r.length = in.u32();
            r.arrives_ns = ts + in.u();
          }
          r.duplicate_ns = r.fate == PacketFate::duplicated ? ts + in.u() : 0;
          take(r);
          break;
        }
        case kLogInstant: {
          InstantRecord r;
          r.time_ns = ts;
          r.dev = in.u16();
          r.qpn = in.u32();
          const std::size_t length = in.u();
          r.what = std::string_view(texts_).substr(text_at, length);
          take(r, text_at);
          text_at += length;
          break;
        }
        case kLogCm: {
          CmRecord r;
          r.sent_ns = ts;
          r.fate = static_cast<PacketFate>(flags & 7);
          r.kind = static_cast<CmMessage>(flags >> 3 & 7);
          r.sidr = (flags & kCmSidr) != 0;
          r.src_dev = in.u16();
          r.dst_dev = in.u16();
          r.local_comm_id = in.u32();
          r.remote_comm_id = in.u32();
          r.qpn = in.u32();
          r.reason = static_cast<int>(in.z());
          r.arrives_ns = ts + in.u();
          take(r);
          break;
        }
      }
      p = in.end();
    }
    chunk.bytes.reset();  // replayed: its memory goes back before the next is
  }
  log_.chunks.clear();
}

void TimelineWriter::finished(std::uint64_t time_ns) {
  replay();
  // WRs still outstanding end with the run, by device, QP and side (receives first).
  std::vector<std::pair<std::uint64_t, Qp*>> order;
  order.reserve(qps_.size());
  for (Qp& q : qps_) order.emplace_back(std::uint64_t{q.dev} << 32 | q.qpn, &q);
  std::sort(order.begin(), order.end());
  for (const auto& [key, q] : order) {
    for (const bool send : {false, true}) {
      Queue& queue = send ? q->send : q->recv;
      for (std::size_t i = queue.head; i < queue.pending.size(); ++i) {
        unsignaled_or_outstanding(*q, send, queue.pending[i], time_ns, true);
      }
      queue.pending.clear();
      queue.head = 0;
    }
  }
  std::FILE* f = std::fopen(path_.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "verbsim: cannot write the timeline %s\n", path_.c_str());
    return;
  }
  write(f);
  std::fclose(f);
}

void TimelineWriter::write(std::FILE* f) {
  records_.close();
  // Every part of every record, by (time, seq).
  std::vector<std::pair<std::uint64_t, std::uint64_t>> parts;
  parts.reserve(parts_);
  std::uint64_t ts = 0;
  const std::vector<Chunk>& chunks = records_.chunks;
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    const std::uint8_t* base = chunks[c].bytes.get();
    for (const std::uint8_t* p = base; p < base + chunks[c].used;) {
      Decoded r;
      const std::uint8_t* next = decode(p, r);
      ts += static_cast<std::uint64_t>(r.ts_delta);
      const std::uint64_t seq = (c * kChunkBytes + static_cast<std::size_t>(p - base)) * 4;
      parts.emplace_back(ts, seq + 1);
      if (r.two_parts) parts.emplace_back(ts + r.d_ns, seq + 3);
      p = next;
    }
  }
  std::sort(parts.begin(), parts.end());

  JsonOut o(f);
  o.put("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[");
  std::size_t next_track = 0;
  const auto tracks_before = [&](std::uint64_t seq) {
    static constexpr std::string_view kKinds[] = {" send", " recv", " packets"};
    for (; next_track < tracks_.size() && tracks_[next_track].seq < seq; ++next_track) {
      const Track& t = tracks_[next_track];
      const auto tid = static_cast<std::uint32_t>(next_track + 1);
      o.line();
      o.put("{\"name\":\"thread_name\",\"ph\":\"M\"");
      pid_tid(o, t.dev, tid);
      o.put(",\"args\":{\"name\":\"");
      if (t.kind == kCmTrack) {
        o.put("CM");
      } else {
        o.put(t.kind == kCq ? "CQ " : "QP ");
        o.num(t.num);
        if (t.kind != kCq) o.put(kKinds[t.kind]);
      }
      if (t.lane > 0) {
        o.put(" (");
        o.num(t.lane + 1u);
        o.put(')');
      }
      o.put("\"}");
      ts_end(o, 0);
      o.line();
      o.put("{\"name\":\"thread_sort_index\",\"ph\":\"M\"");
      pid_tid(o, t.dev, tid);
      o.put(",\"args\":{\"sort_index\":");
      // The CM track first, then by QP: send, receive and packets, then lanes; CQs after the
      // QPs.
      o.num(t.kind == kCmTrack ? 0
                               : (t.kind == kCq ? (1ull << 30) : 0) + t.num * 64ull +
                                     t.kind * 16ull + std::min<std::uint64_t>(t.lane, 15));
      o.put('}');
      ts_end(o, 0);
      if (t.first_of_device) {
        o.line();
        o.put("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":");
        o.num(t.dev + 1u);
        o.put(",\"args\":{\"name\":\"sim");
        o.num(t.dev);
        o.put("\"}");
        ts_end(o, 0);
      }
    }
  };
  for (const auto& [part_ns, seq] : parts) {
    // Metadata is at time 0: all of it before the first later event.
    tracks_before(part_ns == 0 ? seq : UINT64_MAX);
    const std::uint64_t offset = seq / 4;
    Decoded r;
    decode(chunks[offset / kChunkBytes].bytes.get() + offset % kChunkBytes, r);
    const bool second = seq % 4 == 3;
    switch (r.kind) {
      case kWr: {
        const bool send = (r.flags & kWrSend) != 0;
        const auto end = static_cast<WrEnd>(r.flags & 3);
        if (second) {
          completion_line(o, r.dev, r.tid2, r.status, end == WrEnd::lost, r.wr_id, r.qpn, send,
                          part_ns);
          break;
        }
        o.line();
        o.put("{\"name\":\"");
        o.put(send ? to_string(r.opcode) : "RECV");
        o.put("\",\"cat\":\"wr\",\"ph\":\"X\",\"dur\":");
        o.micros(r.d_ns);
        pid_tid(o, r.dev, r.tid);
        o.put(",\"args\":{\"wr_id\":");
        o.num(r.wr_id);
        o.put(",\"qp\":");
        o.num(r.qpn);
        o.put(",\"status\":\"");
        switch (end) {
          case WrEnd::completed: o.put(to_string(r.status)); break;
          case WrEnd::lost:
            o.put(to_string(r.status));
            o.put(" (lost)");
            break;
          case WrEnd::unsignaled: o.put("unsignaled"); break;
          case WrEnd::outstanding: o.put("outstanding"); break;
        }
        o.put("\",\"byte_len\":");
        o.num(r.byte_len);
        o.put('}');
        ts_end(o, part_ns);
        break;
      }
      case kCompletion:
        completion_line(o, r.dev, r.tid, r.status, (r.flags & kCqLost) != 0, r.wr_id, r.qpn,
                        (r.flags & kCqSend) != 0, part_ns);
        break;
      case kPacket:
        if (!second) {
          if ((r.flags & kPacketCopy) == 0) packet_line(o, r, true, part_ns);
          if (r.flow != 0) flow_line(o, "packet", true, r.flow, r.dev, r.tid, part_ns);
        } else {
          packet_line(o, r, false, part_ns);
          flow_line(o, "packet", false, r.flow, r.dev2, r.tid2, part_ns);
        }
        break;
      case kInstant:
        o.line();
        o.put("{\"name\":");
        o.quoted(std::string_view(texts_).substr(r.text, r.text_length));
        o.put(",\"cat\":\"event\",\"ph\":\"i\",\"s\":");
        o.put(r.tid != 0 ? "\"t\"" : "\"p\"");
        pid_tid(o, r.dev, r.tid);
        ts_end(o, part_ns);
        break;
      case kCm:
        cm_line(o, r, !second, part_ns);
        if (r.flow != 0) {
          flow_line(o, "cm", !second, r.flow, second ? r.dev2 : r.dev, second ? r.tid2 : r.tid,
                    part_ns);
        }
        break;
    }
  }
  tracks_before(UINT64_MAX);
  o.put("\n]}\n");
}

}  // namespace verbsim::sim
