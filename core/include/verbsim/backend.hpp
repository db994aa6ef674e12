// Choosing a backend and opening devices.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "verbsim/context.hpp"
#include "verbsim/types.hpp"

namespace verbsim {

class CmEventChannel;

// Where devices come from: the host's RDMA devices (ibverbs) or a simulated fabric (sim).
// Contexts opened from a backend must be destroyed before it.
class Backend {
 public:
  Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;
  virtual ~Backend() = default;

  virtual std::string_view name() const noexcept = 0;
  // ibv_get_device_list.
  virtual std::vector<DeviceInfo> devices() = 0;
  // ibv_open_device. An empty name opens the first device. Throws VerbError: ENODEV when no
  // such device exists (the message lists the devices there are, or says how to get one).
  virtual std::unique_ptr<Context> open(std::string_view device = {}) = 0;
  // rdma_create_event_channel: the connection manager of verbsim/cm.hpp. Throws VerbError
  // EOPNOTSUPP from a backend without one. Its ids must be destroyed before the backend.
  virtual std::unique_ptr<CmEventChannel> create_cm_channel();
};

// A device spec: "sim", "sim:sim1", "ibverbs", "ibverbs:rxe0".
struct DeviceSpec {
  std::string backend;
  std::string device;

  // Throws std::invalid_argument for an unknown backend name.
  static DeviceSpec parse(std::string_view spec);
  // VERBSIM_BACKEND (default "sim") and VERBSIM_DEVICE (default: the first device).
  static DeviceSpec from_env();
  std::string to_string() const;
};

}  // namespace verbsim
