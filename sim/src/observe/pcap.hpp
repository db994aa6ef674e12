// The packet capture (Config::pcap, VERBSIM_PCAP=<file>): every packet the fabric carries, as
// RoCE v2 puts it on the wire, in a pcapng file that Wireshark and tshark read. Each frame is
// Ethernet II / IPv4 / UDP (port 4791) / BTH / the extension headers its opcode needs / payload,
// padded to 4 bytes / ICRC (IBTA Annex A17). A message longer than the path MTU is cut into
// FIRST/MIDDLE/LAST packets with a PSN each, as a NIC would. What the fault plan did to a packet
// is an EPB comment ("verbsim: dropped by the fault plan"); a duplicated packet is written again,
// marked "verbsim: duplicate", when its copy arrives. docs/OBSERVABILITY.md, "Packet capture".
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "verbsim/sim/observe.hpp"

namespace verbsim::sim {

class PcapWriter final : public Observer {
 public:
  // Creates `path` and writes the section header; throws std::system_error naming the path if
  // it cannot be created. `mtu`: the path MTU messages are cut by (the simulator's active MTU).
  explicit PcapWriter(const std::string& path, Mtu mtu = Mtu::mtu_1024);
  ~PcapWriter() override;
  PcapWriter(const PcapWriter&) = delete;
  PcapWriter& operator=(const PcapWriter&) = delete;

  void packet(const PacketRecord& r) override;
  // Writes the duplicates still held back and flushes the file.
  void finished(std::uint64_t time_ns) override;

  // Frames (Enhanced Packet Blocks) written so far, duplicates included.
  std::uint64_t frames() const noexcept { return frames_; }

 private:
  // A duplicate's copy, written when no packet sent before it is still to come.
  struct Held {
    std::uint64_t ts_ns;
    std::uint64_t seq;
    std::uint32_t interface;
    std::vector<std::uint8_t> frame;
  };
  std::uint32_t interface_of(std::uint16_t dev, std::uint8_t port);
  void write_held_until(std::uint64_t ts_ns);
  void write_epb(std::uint32_t interface, std::uint64_t ts_ns,
                 const std::vector<std::uint8_t>& frame, const std::string& comment);
  void write_block(const std::vector<std::uint8_t>& block);
  std::uint32_t msn_after(const PacketRecord& r);

  std::string path_;
  std::FILE* file_;
  std::uint32_t mtu_;
  bool write_failed_ = false;
  std::uint64_t frames_ = 0;
  std::uint64_t seq_ = 0;
  std::map<std::pair<std::uint16_t, std::uint8_t>, std::uint32_t> interfaces_;
  std::vector<Held> held_;  // a min-heap by (ts_ns, seq)
  // Per responder QP (device, QP number): the first PSN of the last new RC request it was
  // given, and its message sequence number (the MSN its ACKs carry).
  std::map<std::pair<std::uint16_t, std::uint32_t>, std::pair<std::uint32_t, std::uint32_t>> msn_;
};

}  // namespace verbsim::sim
