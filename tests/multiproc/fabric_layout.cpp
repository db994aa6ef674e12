// Prints where each part of a shared fabric's file is (SharedFabric::layout), as JSON, for
// tests/multiproc/corrupt.py, which writes random bytes into every part of a live fabric.
#include <cstdio>

#include "fabric/shared_fabric.hpp"

int main() {
  const auto l = verbsim::sim::SharedFabric::layout();
  std::printf(
      "{\"file_bytes\": %zu, \"slots\": %zu, \"slot_bytes\": %zu, \"slot_count\": %d, "
      "\"next_qpn\": %zu, \"owner\": %zu, \"owner_bytes\": %zu, \"cm_ports\": %zu, "
      "\"cm_ports_bytes\": %zu, \"rings\": %zu, \"ring_bytes\": %zu, \"ring_data\": %zu}\n",
      l.file_bytes, l.slots, l.slot_bytes, verbsim::sim::SharedFabric::kSlots, l.next_qpn,
      l.owner, l.owner_bytes, l.cm_ports, l.cm_ports_bytes, l.rings, l.ring_bytes, l.ring_data);
}
