#include "verbsim/sim/observe.hpp"

#include <cstdio>
#include <string>

namespace verbsim::sim {

namespace {

bool lost(PacketFate f) noexcept { return f == PacketFate::dropped || f == PacketFate::link_down; }

}  // namespace

void StatsObserver::packet(const PacketRecord& r) {
  const QpKey from{r.src_dev, r.src_qpn};
  const QpKey to{r.dst_dev, r.dst_qpn};
  QpCounters& s = qps_[from];
  PortCounters& out = ports_[{r.src_dev, r.src_port}];
  const std::uint64_t copies = r.fate == PacketFate::duplicated ? 2 : 1;
  ++s.packets_sent;
  s.bytes_sent += r.length;
  ++out.packets_sent;
  out.bytes_sent += r.length;
  if (lost(r.fate)) {
    ++s.lost_to_faults;
    ++out.packets_lost;
  } else if (r.fate != PacketFate::delivered) {
    ++s.altered_by_faults;
  }
  if (r.kind == PacketKind::request) {
    // A PSN not past the highest one sent is a retransmission (24-bit PSNs wrap).
    auto [it, first] = next_psn_.try_emplace(from, (r.psn + 1) & 0xffffff);
    if (!first) {
      if (((r.psn - it->second) & 0xffffff) >= 0x800000) {
        ++s.retransmissions;
      } else {
        it->second = (r.psn + 1) & 0xffffff;
      }
    }
  } else if (r.kind == PacketKind::nak) {
    ++s.naks_sent[static_cast<int>(r.nak)];
  } else {
    ++s.acks_sent;
  }
  if (lost(r.fate)) return;
  QpCounters& d = qps_[to];
  PortCounters& in = ports_[{r.dst_dev, r.dst_port}];
  d.packets_received += copies;
  d.bytes_received += copies * r.length;
  in.packets_received += copies;
  in.bytes_received += copies * r.length;
  if (r.kind == PacketKind::nak) {
    d.naks_received[static_cast<int>(r.nak)] += copies;
    if (r.nak == NakCode::rnr) d.rnr_waits += copies;
  } else if (r.kind != PacketKind::request) {
    d.acks_received += copies;
  }
}

void StatsObserver::completion(const CompletionRecord& r) {
  const auto status = static_cast<std::size_t>(r.wc.status);
  if (status < std::size(QpCounters{}.completions)) ++qps_[{r.dev, r.wc.qp_num}].completions[status];
}

void StatsObserver::instant(const InstantRecord& r) {
  if (r.what == "timeout") ++qps_[{r.dev, r.qpn}].timeouts;
}

Stats StatsObserver::stats() const {
  Stats s;
  s.collected = true;
  s.qps.assign(qps_.begin(), qps_.end());
  s.ports.assign(ports_.begin(), ports_.end());
  return s;
}

void StatsObserver::finished(std::uint64_t time_ns) {
  if (!print_) return;
  std::fprintf(stderr, "verbsim: counters at virtual time %llu ns\n%s",
               static_cast<unsigned long long>(time_ns), stats().to_string().c_str());
}

const QpCounters* Stats::qp(int dev, std::uint32_t qpn) const noexcept {
  for (const auto& [key, c] : qps) {
    if (key.first == dev && key.second == qpn) return &c;
  }
  return nullptr;
}

std::string Stats::to_string() const {
  std::string out;
  char line[512];
  for (const auto& [key, p] : ports) {
    std::snprintf(line, sizeof line,
                  "  sim%d port %d: sent %llu packets (%llu bytes), received %llu (%llu bytes), "
                  "lost %llu\n",
                  key.first, key.second, static_cast<unsigned long long>(p.packets_sent),
                  static_cast<unsigned long long>(p.bytes_sent),
                  static_cast<unsigned long long>(p.packets_received),
                  static_cast<unsigned long long>(p.bytes_received),
                  static_cast<unsigned long long>(p.packets_lost));
    out += line;
  }
  for (const auto& [key, q] : qps) {
    auto u = [](std::uint64_t v) { return static_cast<unsigned long long>(v); };
    std::uint64_t naks_sent = 0;
    std::uint64_t naks_received = 0;
    for (int i = 0; i < 5; ++i) {
      naks_sent += q.naks_sent[i];
      naks_received += q.naks_received[i];
    }
    std::snprintf(line, sizeof line,
                  "  sim%d qp %u: sent %llu (%llu bytes) received %llu (%llu bytes); acks %llu/%llu "
                  "naks %llu/%llu (sent/received); retransmissions %llu, rnr waits %llu, "
                  "timeouts %llu; faults lost %llu, altered %llu; completions",
                  key.first, key.second, u(q.packets_sent), u(q.bytes_sent), u(q.packets_received),
                  u(q.bytes_received), u(q.acks_sent), u(q.acks_received), u(naks_sent),
                  u(naks_received), u(q.retransmissions), u(q.rnr_waits), u(q.timeouts),
                  u(q.lost_to_faults), u(q.altered_by_faults));
    out += line;
    bool any = false;
    for (std::size_t st = 0; st < std::size(q.completions); ++st) {
      if (q.completions[st] == 0) continue;
      out += " " + std::string(verbsim::to_string(static_cast<WcStatus>(st))) + "=" +
             std::to_string(q.completions[st]);
      any = true;
    }
    out += any ? "\n" : " none\n";
  }
  return out;
}

}  // namespace verbsim::sim
