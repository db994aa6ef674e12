// open_backend(): the one place that knows every backend.
#include <stdexcept>
#include <string>

#include "verbsim/error.hpp"
#include "verbsim/sim/world.hpp"
#include "verbsim/verbsim.hpp"
#ifdef VERBSIM_HAVE_IBVERBS
#include "verbsim/ibverbs/backend.hpp"
#endif

namespace verbsim {

std::unique_ptr<Backend> open_backend(std::string_view backend) {
  const DeviceSpec spec = backend.empty() ? DeviceSpec::from_env() : DeviceSpec::parse(backend);
  if (spec.backend == "sim") return std::make_unique<sim::World>(sim::Config::from_env());
#ifdef VERBSIM_HAVE_IBVERBS
  return ibverbs::make_backend();
#else
  throw VerbError("ibv_get_device_list", ENOSYS,
                  "verbsim was built without libibverbs; install libibverbs-dev and rebuild");
#endif
}

}  // namespace verbsim
