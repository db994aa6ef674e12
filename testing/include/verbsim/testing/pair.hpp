// Two connected RC queue pairs, on whichever backend a test runs: the start of most data-path
// tests. On the simulator the ends are devices sim0 and sim1 of one world; on hardware both ends
// default to one device (its two QPs talk through the device's loopback).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "verbsim/verbsim.hpp"

namespace verbsim::sim {
class World;
}

namespace verbsim::testing {

// Polls `cq` until `n` completions arrived. On the simulator (`world` set) polling moves the
// world and this stops once the world has nothing left to run; on hardware it stops after
// `timeout` of real time. Fewer than `n` completions means the rest never came. A failed poll
// fails the test.
std::vector<WorkCompletion> poll_completions(
    CompletionQueue& cq, std::size_t n, sim::World* world,
    std::chrono::milliseconds timeout = std::chrono::seconds(2));

// Two RC QPs in RTS connected to each other (PSN psn_a on a, psn_b on b), each with its own
// context, PD, one CQ for sends and receives, and a buffer registered for local and every
// remote access. Construction throws VerbError where a verb fails.
class ConnectedPair {
 public:
  struct Options {
    std::string device_a;  // empty: sim0 on the simulator, else the first device
    std::string device_b;  // empty: sim1 on the simulator, else device_a's
    QpCap cap{16, 16, 1, 1, 0};
    int cqe = 64;
    std::size_t buf_size = 64 * 1024;
    std::uint32_t psn_a = 100;
    std::uint32_t psn_b = 200;
    ConnectOptions connect{};  // both ends; sgid_index is each end's RoCE v2 GID
  };

  // One end. Members go in reverse order: the MR before its buffer, the QP before its CQ.
  struct End {
    std::unique_ptr<Context> ctx;
    std::unique_ptr<ProtectionDomain> pd;
    std::unique_ptr<CompletionQueue> cq;
    std::unique_ptr<QueuePair> qp;
    std::vector<std::byte> buf;
    std::unique_ptr<MemoryRegion> mr;
    std::uint8_t gid_index = 0;

    Sge sge(std::size_t offset, std::uint32_t length) const { return mr->sge(offset, length); }
    std::byte* data(std::size_t offset = 0) { return buf.data() + offset; }
  };

  // `backend` must outlive the pair; a sim::World is a Backend.
  explicit ConnectedPair(Backend& backend) : ConnectedPair(backend, Options{}) {}
  ConnectedPair(Backend& backend, const Options& options);

  // poll_completions() on `end`'s CQ, in this pair's world when it has one.
  std::vector<WorkCompletion> poll(End& end, std::size_t n,
                                   std::chrono::milliseconds timeout = std::chrono::seconds(2)) {
    return poll_completions(*end.cq, n, world_, timeout);
  }
  sim::World* world() const noexcept { return world_; }  // nullptr off the simulator

  End a;
  End b;

 private:
  sim::World* world_ = nullptr;
};

}  // namespace verbsim::testing
