// open_backend(): the one place that knows every backend.
#include <stdexcept>
#include <string>

#include "verbsim/error.hpp"
#include "verbsim/sim/extensions.hpp"
#include "verbsim/sim/world.hpp"
#include "verbsim/verb_log.hpp"
#include "verbsim/verbsim.hpp"
#ifdef VERBSIM_HAVE_IBVERBS
#include "verbsim/ibverbs/backend.hpp"
#endif

namespace verbsim {

std::unique_ptr<Backend> open_backend(std::string_view backend) {
  const DeviceSpec spec = backend.empty() ? DeviceSpec::from_env() : DeviceSpec::parse(backend);
  // VERBSIM_VERB_LOG wraps the backend in a verb log (verb_log.hpp); unset, nothing is wrapped.
  if (spec.backend == "sim") {
    return log_verbs_from_env(std::make_unique<sim::World>(sim::Config::from_env()));
  }
#ifdef VERBSIM_HAVE_IBVERBS
  return log_verbs_from_env(ibverbs::make_backend());
#else
  throw VerbError("ibv_get_device_list", ENOSYS,
                  "verbsim was built without libibverbs; install libibverbs-dev and rebuild");
#endif
}

std::unique_ptr<Backend> log_verbs_from_env(std::unique_ptr<Backend> backend) {
  if (const auto* world = dynamic_cast<const sim::World*>(backend.get())) {
    const ProviderModel model = sim::verb_log_model(*world);
    std::string source = sim::verb_log_model_source(*world);
    return log_verbs_from_env(std::move(backend), model, std::move(source));
  }
  return log_verbs_from_env(std::move(backend), std::nullopt, {});  // model: the first device
}

}  // namespace verbsim
