#include "verbsim/testing/backend_test.hpp"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <thread>

namespace verbsim::testing {

std::string_view to_string(Target t) noexcept {
  switch (t) {
    case Target::sim_strict: return "SimStrict";
    case Target::sim_rxe: return "SimRxe";
    case Target::sim_mlx5: return "SimMlx5";
    case Target::ibverbs: return "Ibverbs";
    case Target::sim_file: return "SimFile";
  }
  return "?";
}

std::optional<sim::Profile> BackendTest::profile() const {
  switch (GetParam()) {
    case Target::sim_strict: return sim::Profile::strict;
    case Target::sim_rxe: return sim::Profile::rxe;
    case Target::sim_mlx5: return sim::Profile::mlx5;
    case Target::sim_file: return file_ ? std::optional(file_->family()) : std::nullopt;
    case Target::ibverbs: return std::nullopt;
  }
  return std::nullopt;
}

sim::Config BackendTest::sim_config(sim::Profile profile) const {
  sim::Config c = sim::Config::from_env();
  c.profile = profile;
  c.profile_file = file_;
  c.devices = std::max(c.devices, 2);
  return c;
}

void BackendTest::SetUp() {
  const char* env_backend = std::getenv("VERBSIM_BACKEND");
  if (target() == Target::sim_file) {
    const char* path = std::getenv("VERBSIM_PROFILE");
    const std::string_view p = path != nullptr ? path : "";
    if (p.empty() || p == "strict" || p == "rxe" || p == "mlx5") {
      GTEST_SKIP() << "VERBSIM_PROFILE names no profile file";
    }
    file_ = sim::ProfileFile::load(path);
  }
  if (const std::optional<sim::Profile> p = profile()) {
    if (env_backend != nullptr && std::string_view(env_backend) == "ibverbs") {
      GTEST_SKIP() << "VERBSIM_BACKEND=ibverbs: only the Ibverbs instantiation runs";
    }
    auto world = std::make_unique<sim::World>(sim_config(*p));
    world_ = world.get();
    backend_ = std::move(world);
    return;
  }
  std::vector<DeviceInfo> devices;
  try {
    backend_ = open_backend("ibverbs");
    devices = backend_->devices();
  } catch (const std::exception& e) {
    backend_.reset();
    GTEST_SKIP() << "no RDMA device: " << e.what();
  }
  if (devices.empty()) {
    backend_.reset();
    GTEST_SKIP() << "no RDMA device: libibverbs lists none";
  }
  if (const char* d = std::getenv("VERBSIM_DEVICE"); d != nullptr) device_ = d;
}

void BackendTest::TearDown() {
  world_ = nullptr;
  backend_.reset();
}

ConnectedPair BackendTest::make_pair(ConnectedPair::Options o) {
  if (o.device_a.empty()) o.device_a = device_;
  return ConnectedPair(*backend_, o);
}

void BackendTest::pass_time(std::chrono::nanoseconds d) {
  if (world_ != nullptr) {
    world_->run_until(world_->now() + static_cast<std::uint64_t>(d.count()));
  } else {
    std::this_thread::sleep_for(d);
  }
}

}  // namespace verbsim::testing
