#include "verbsim/backend.hpp"

#include <cstdlib>
#include <stdexcept>

namespace verbsim {

DeviceSpec DeviceSpec::parse(std::string_view spec) {
  DeviceSpec out;
  const auto colon = spec.find(':');
  out.backend = std::string(spec.substr(0, colon));
  if (colon != std::string_view::npos) out.device = std::string(spec.substr(colon + 1));
  if (out.backend.empty()) out.backend = "sim";
  if (out.backend != "sim" && out.backend != "ibverbs") {
    throw std::invalid_argument("unknown verbsim backend '" + out.backend +
                                "' (expected \"sim\" or \"ibverbs\", optionally \":<device>\")");
  }
  return out;
}

DeviceSpec DeviceSpec::from_env() {
  const char* backend = std::getenv("VERBSIM_BACKEND");
  DeviceSpec out = parse(backend != nullptr ? backend : "sim");
  if (const char* device = std::getenv("VERBSIM_DEVICE"); device != nullptr && *device != '\0') {
    out.device = device;
  }
  return out;
}

std::string DeviceSpec::to_string() const {
  return device.empty() ? backend : backend + ":" + device;
}

}  // namespace verbsim
