// A fixture that runs one test body on every backend: the simulator in each profile (strict,
// rxe, mlx5) and libibverbs, which skips with the reason where no RDMA device exists.
//
//   class Echo : public verbsim::testing::BackendTest {};
//   TEST_P(Echo, OneMessage) {
//     ConnectedPair p = make_pair();
//     ...
//   }
//   VERBSIM_BACKEND_SUITE(Echo);   // Echo tests named SimStrict/..., SimRxe/..., SimMlx5/...,
//                                  // Ibverbs/...
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "verbsim/sim/world.hpp"
#include "verbsim/testing/pair.hpp"
#include "verbsim/verbsim.hpp"

namespace verbsim::testing {

// Where a BackendTest runs. sim_file: the simulator in the profile file VERBSIM_PROFILE names
// (a profile captured from a device with verbsim-probe); it skips when that names none.
enum class Target : std::uint8_t { sim_strict, sim_rxe, sim_mlx5, ibverbs, sim_file };

// "SimStrict", "SimRxe", "SimMlx5", "Ibverbs", "SimFile": the instantiation names
// VERBSIM_BACKEND_SUITE and VERBSIM_PROFILE_FILE_SUITE use.
std::string_view to_string(Target t) noexcept;
// How GoogleTest prints a parameter ("where GetParam() = SimRxe").
inline void PrintTo(Target t, std::ostream* os) { *os << to_string(t); }

class BackendTest : public ::testing::TestWithParam<Target> {
 protected:
  // On the simulator: makes the world from sim_config(). On ibverbs: opens libibverbs, or skips
  // when it has no device. With VERBSIM_BACKEND=ibverbs set only the ibverbs instantiation runs
  // (the others skip), so one binary tests hardware alone. A derived SetUp calls this first and
  // returns when IsSkipped().
  void SetUp() override;
  // Destroys the backend; a world checks its work-request accounting then. A derived TearDown
  // destroys its own resources first, then calls this.
  void TearDown() override;

  // The world's configuration: Config::from_env() (VERBSIM_SEED, VERBSIM_FAULTS,
  // VERBSIM_SIM_DEVICES, ...) in the parameter's profile, with at least two devices (SimFile:
  // the file's profile, whose family `profile` is).
  virtual sim::Config sim_config(sim::Profile profile) const;

  Target target() const { return GetParam(); }
  bool on_sim() const noexcept { return world_ != nullptr; }
  // The simulator's profile; none on ibverbs.
  std::optional<sim::Profile> profile() const;
  // SimFile's profile file (what VERBSIM_PROFILE names); none elsewhere. A derived sim_config
  // that builds its own Config puts it in Config::profile_file.
  const std::optional<sim::ProfileFile>& profile_file() const noexcept { return file_; }
  Backend& backend() noexcept { return *backend_; }
  sim::World* world() noexcept { return world_; }  // nullptr on ibverbs
  // The device to open: VERBSIM_DEVICE on ibverbs (empty: the first), empty on the simulator.
  const std::string& device() const noexcept { return device_; }

  // A ConnectedPair on this backend (on ibverbs, both ends on device() unless `o` names others).
  ConnectedPair make_pair(ConnectedPair::Options o = {});
  // poll_completions() in this test's world.
  std::vector<WorkCompletion> poll_n(CompletionQueue& cq, std::size_t n,
                                     std::chrono::milliseconds timeout = std::chrono::seconds(2)) {
    return poll_completions(cq, n, world_, timeout);
  }
  // Lets `d` pass: virtual time on the simulator (the world runs), real time on hardware.
  void pass_time(std::chrono::nanoseconds d);

 private:
  std::unique_ptr<Backend> backend_;
  sim::World* world_ = nullptr;
  std::string device_;
  std::optional<sim::ProfileFile> file_;  // SimFile's profile
};

}  // namespace verbsim::testing

// Instantiates a suite derived from BackendTest for every target.
#define VERBSIM_BACKEND_SUITE(Suite)                                                               \
  INSTANTIATE_TEST_SUITE_P(SimStrict, Suite,                                                       \
                           ::testing::Values(::verbsim::testing::Target::sim_strict));             \
  INSTANTIATE_TEST_SUITE_P(SimRxe, Suite, ::testing::Values(::verbsim::testing::Target::sim_rxe)); \
  INSTANTIATE_TEST_SUITE_P(SimMlx5, Suite,                                                         \
                           ::testing::Values(::verbsim::testing::Target::sim_mlx5));               \
  INSTANTIATE_TEST_SUITE_P(Ibverbs, Suite, ::testing::Values(::verbsim::testing::Target::ibverbs))

// Also instantiates a suite for the profile file VERBSIM_PROFILE names ("SimFile/..."; each test
// skips where it names none), for a suite that checks a captured profile.
#define VERBSIM_PROFILE_FILE_SUITE(Suite) \
  INSTANTIATE_TEST_SUITE_P(SimFile, Suite, ::testing::Values(::verbsim::testing::Target::sim_file))
