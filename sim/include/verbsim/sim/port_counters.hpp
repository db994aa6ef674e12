// What a port of a simulated device counts, as a NIC's port does: the InfiniBand PMA counters
// a driver shows in sysfs (ports/N/counters/) and rxe's own (ports/N/hw_counters/). The
// libibverbs drop-in writes them there; docs/OBSERVABILITY.md says how each maps.
#pragma once

#include <cstdint>

namespace verbsim::sim {

struct PortHwCounters {
  // Traffic, counted only once World::count_port_traffic() was called (it puts every packet
  // and completion through the observers' branch). A message longer than the path MTU is
  // that many packets, as on the wire. Packets the fabric loses are sent, not received; a
  // duplicated one is received twice. Received packets count when they leave the far port.
  std::uint64_t xmit_packets = 0;
  std::uint64_t xmit_words = 0;  // data bytes sent, in 4-byte words (pad included, no headers)
  std::uint64_t rcv_packets = 0;
  std::uint64_t rcv_words = 0;
  std::uint64_t xmit_discards = 0;  // packets lost to a link that was down when they left
  std::uint64_t rdma_sends = 0;     // successful SEND completions generated (signaled ones)
  std::uint64_t rdma_recvs = 0;     // successful receive completions
  // Always counted (off the common path), as rxe counts them, by the QP's port.
  std::uint64_t duplicate_request = 0;       // requests received again (responder)
  std::uint64_t out_of_seq_request = 0;      // requests past a gap, each NAKed (responder)
  std::uint64_t send_rnr_err = 0;            // RNR NAKs sent (responder)
  std::uint64_t rcvd_rnr_err = 0;            // RNR NAKs received (requester)
  std::uint64_t rcvd_seq_err = 0;            // PSN sequence error NAKs received (requester)
  std::uint64_t completer_retry_err = 0;     // resends after a timeout or a sequence NAK
  std::uint64_t retry_exceeded_err = 0;      // WRs failed with RETRY_EXC_ERR
  std::uint64_t retry_rnr_exceeded_err = 0;  // WRs failed with RNR_RETRY_EXC_ERR
  std::uint64_t link_downed = 0;             // times the port went down (link_down faults)
};

}  // namespace verbsim::sim
