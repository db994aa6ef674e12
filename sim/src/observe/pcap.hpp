// The packet capture (Config::pcap, VERBSIM_PCAP=<file>): every packet the fabric carries, as
// RoCE v2 puts it on the wire, in a pcapng file that Wireshark and tshark read. Each frame is
// Ethernet II / IPv4 / UDP (port 4791) / BTH / the extension headers its opcode needs / payload,
// padded to 4 bytes / ICRC (IBTA Annex A17). A message longer than the path MTU is cut into
// FIRST/MIDDLE/LAST packets with a PSN each, as a NIC would. What the fault plan did to a packet
// is an EPB comment ("verbsim: dropped by the fault plan"); a duplicated packet is written again,
// marked "verbsim: duplicate", when its copy arrives. Connection manager messages are UD SENDs
// to QP 1 carrying the CM's MADs (observe/cm_mad.hpp). docs/OBSERVABILITY.md, "Packet capture".
#pragma once

#include <array>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "observe/crc32.hpp"
#include "verbsim/sim/observe.hpp"

namespace verbsim::sim {

class PcapWriter final : public Observer {
 public:
  // Creates `path` and writes the section header; throws std::system_error naming the path if
  // it cannot be created. Messages are cut into packets by wire::kMtu, as the world numbers
  // them (PacketRecord::wire_psn).
  explicit PcapWriter(const std::string& path);
  ~PcapWriter() override;
  PcapWriter(const PcapWriter&) = delete;
  PcapWriter& operator=(const PcapWriter&) = delete;

  void packet(const PacketRecord& r) override;
  // A connection manager message: the MAD a RoCE v2 NIC sends, a UD SEND_ONLY to QP 1.
  void cm(const CmRecord& r) override;
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
  std::uint32_t interface_of(std::uint16_t dev, std::uint8_t port) {
    const std::size_t at = std::size_t{dev} << 8 | port;
    return at < interfaces_.size() && interfaces_[at] != 0 ? interfaces_[at] - 1
                                                           : add_interface(dev, port);
  }
  std::uint32_t add_interface(std::uint16_t dev, std::uint8_t port);
  // Blocks are written into out_: begin_block makes room for a block's body of at most
  // `body_max` bytes and returns where the body goes; end_block closes it where the body ends.
  std::uint8_t* begin_block(std::uint32_t type, std::size_t body_max);
  void end_block(std::uint8_t* body_end);
  // An Enhanced Packet Block: begin_epb returns where its frame (at most `frame_max` bytes)
  // goes; end_epb closes the block after `frame_len` bytes of frame.
  std::uint8_t* begin_epb(std::uint32_t interface, std::uint64_t ts_ns, std::size_t frame_max,
                          std::string_view comment);
  void end_epb(std::size_t frame_len, std::string_view comment);
  void flush();  // writes out_ to the file
  // Computes later the ICRC of the frame at `frame` in out_, written but for it (`len`: its
  // length with the ICRC): write_icrcs() computes those of kIcrcsWaiting frames side by side
  // (crc32_jobs), where each alone would wait on its own multiplications, and the frames'
  // bytes, read a few frames later, have left the store buffer. It runs when they are
  // waiting and before out_ goes to the file.
  void icrc_later(std::uint8_t* frame, std::size_t len);
  void write_icrcs();
  // Gives back the disk space reserved past the file's end (a run that dies keeps it until
  // the file is written again or removed); false if it cannot.
  bool give_back_reserve();
  void write_held_until(std::uint64_t ts_ns) {
    if (!held_.empty() && held_.front().ts_ns <= ts_ns) write_held(ts_ns);
  }
  void write_held(std::uint64_t ts_ns);

  std::string path_;
  std::FILE* file_;
  bool write_failed_ = false;
  std::uint64_t frames_ = 0;
  std::uint64_t seq_ = 0;
  std::vector<std::uint8_t> out_;  // blocks not yet in the file (1 MiB), the first used_ bytes
  static constexpr std::size_t kIcrcsWaiting = 16;
  std::array<Crc32Job, kIcrcsWaiting> icrcs_{};  // their bytes in out_, the ICRC's place after
  std::size_t icrcs_waiting_ = 0;
  std::size_t used_ = 0;
  // The file's length, and how far its disk space is reserved (flush); `reserving_`: a regular
  // file whose space can be.
  std::uint64_t written_ = 0;
  std::uint64_t reserved_ = 0;
  bool reserving_ = false;
  std::vector<std::uint32_t> interfaces_;  // by device << 8 | port: the interface's number + 1
  std::uint32_t interface_count_ = 0;
  std::vector<Held> held_;  // a min-heap by (ts_ns, seq)
  std::array<std::uint8_t, 256> mad_{};  // the CM message being written
  std::vector<std::uint32_t> gsi_psns_;  // by device: the next PSN of its QP 1
  // The QP of each CM end (by its comm id) that sent a REQ or REP: a DREQ names its peer's.
  std::unordered_map<std::uint32_t, std::uint32_t> cm_qpns_;
};

}  // namespace verbsim::sim
