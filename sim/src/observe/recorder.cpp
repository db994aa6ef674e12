// One-line descriptions of records, and the flight recorder of failure reports.
#include <algorithm>
#include <cstdio>
#include <string>

#include "verbsim/sim/observe.hpp"

namespace verbsim::sim {

namespace {

std::string at(std::uint64_t ns) { return "t=" + std::to_string(ns) + " ns "; }

std::string qp_name(int dev, std::uint32_t qpn) {
  return "sim" + std::to_string(dev) + " qp " + std::to_string(qpn);
}

}  // namespace

std::string describe(const PostRecord& r) {
  std::string s = at(r.time_ns) + "post " + qp_name(r.dev, r.qpn) + (r.send ? " send" : " recv") +
                  " wr_id=" + std::to_string(r.wr_id);
  if (r.send) s += " " + std::string(to_string(r.opcode)) + (r.signaled ? "" : " unsignaled");
  return s + " " + std::to_string(r.length) + " B";
}

std::string describe(const PacketRecord& r) {
  std::string s = at(r.sent_ns) + "packet " + qp_name(r.src_dev, r.src_qpn) + " -> " +
                  qp_name(r.dst_dev, r.dst_qpn) + " ";
  switch (r.kind) {
    case PacketKind::request: s += std::string(to_string(r.opcode)); break;
    case PacketKind::nak:
      s += "NAK " + std::string(to_string(r.nak));
      if (r.nak == NakCode::rnr) s += " timer " + std::to_string(r.rnr_timer);
      break;
    default: s += std::string(to_string(r.kind)); break;
  }
  s += " psn " + std::to_string(r.psn) + " " + std::to_string(r.length) + " B";
  if (r.fate != PacketFate::delivered) s += " [" + std::string(to_string(r.fate)) + "]";
  if (r.fate != PacketFate::dropped && r.fate != PacketFate::link_down) {
    s += " arrives t=" + std::to_string(r.arrives_ns);
  }
  return s;
}

std::string describe(const CompletionRecord& r) {
  return at(r.time_ns) + "completion " + qp_name(r.dev, r.wc.qp_num) +
         (r.send ? " send" : " recv") + " wr_id=" + std::to_string(r.wc.wr_id) + " " +
         std::string(to_string(r.wc.status)) + " " + std::to_string(r.wc.byte_len) + " B" +
         (r.dropped ? " [lost to the CQ]" : "") + " (cq " + std::to_string(r.cq) + ")";
}

std::string describe(const InstantRecord& r) {
  return at(r.time_ns) + std::string(r.what) +
         (r.qpn != 0 ? " (" + qp_name(r.dev, r.qpn) + ")" : " (sim" + std::to_string(r.dev) + ")");
}

std::string describe(const CmRecord& r) {
  static constexpr const char* kNames[] = {"?", "REQ", "REP", "RTU", "REJ", "DREQ", "DREP"};
  std::string name = kNames[static_cast<int>(r.kind)];
  if (r.sidr) {
    name = r.kind == CmMessage::req ? "SIDR_REQ" : "SIDR_REP";
  }
  std::string s = at(r.sent_ns) + "cm sim" + std::to_string(r.src_dev) + " port " +
                  std::to_string(r.src_port) + " -> sim" + std::to_string(r.dst_dev) + " port " +
                  std::to_string(r.dst_port) + " " + name + " comm id " +
                  std::to_string(r.local_comm_id) + "/" + std::to_string(r.remote_comm_id);
  if (r.kind == CmMessage::req || r.kind == CmMessage::rep) {
    s += " qpn " + std::to_string(r.qpn) + " psn " + std::to_string(r.psn);
  }
  if (r.kind == CmMessage::rej) s += " reason " + std::to_string(r.reason);
  if (r.fate != PacketFate::delivered) return s + " [" + std::string(to_string(r.fate)) + "]";
  return s + " arrives t=" + std::to_string(r.arrives_ns);
}

std::string FlightRecorder::describe_kept(const Instant& i) {
  InstantRecord shown = i.record;
  shown.what = i.what;
  return describe(shown);
}

void FlightRecorder::keep(Record r) {
  records_.push_back(std::move(r));
  if (records_.size() > capacity_) records_.pop_front();
}

void FlightRecorder::packet(const PacketRecord& r) {
  stats_.packet(r);
  const std::pair<int, std::uint32_t> ends[] = {{r.src_dev, r.src_qpn}, {r.dst_dev, r.dst_qpn}};
  for (const auto& q : ends) {
    if (std::find(qps_.begin(), qps_.end(), q) == qps_.end()) qps_.push_back(q);
  }
  PacketRecord kept = r;
  kept.payload = {};
  keep(kept);
}

void FlightRecorder::completion(const CompletionRecord& r) {
  stats_.completion(r);
  keep(r);
}

void FlightRecorder::instant(const InstantRecord& r) {
  stats_.instant(r);
  keep(Instant{r, std::string(r.what)});
}

void FlightRecorder::cm(const CmRecord& r) {
  CmRecord kept = r;
  kept.private_data = {};
  keep(kept);
}

std::string FlightRecorder::report() const {
  std::string out = "last " + std::to_string(records_.size()) + " records of the run:\n";
  for (const Record& r : records_) {
    out += "  " + std::visit([](const auto& rec) { return describe_kept(rec); }, r) + "\n";
  }
  const Stats s = stats_.stats();
  out += "counters of the QPs involved:\n";
  for (const auto& [key, c] : s.qps) {
    if (std::find(qps_.begin(), qps_.end(), key) == qps_.end()) continue;
    Stats one;
    one.qps.push_back({key, c});
    out += one.to_string();
  }
  return out;
}

}  // namespace verbsim::sim
