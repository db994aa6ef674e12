// The whole public API, and the entry point that picks a backend at run time.
#pragma once

#include <memory>
#include <string_view>

#include "verbsim/address_handle.hpp"
#include "verbsim/backend.hpp"
#include "verbsim/cm.hpp"
#include "verbsim/completion_channel.hpp"
#include "verbsim/completion_queue.hpp"
#include "verbsim/connect.hpp"
#include "verbsim/context.hpp"
#include "verbsim/error.hpp"
#include "verbsim/memory_region.hpp"
#include "verbsim/memory_window.hpp"
#include "verbsim/polling.hpp"
#include "verbsim/protection_domain.hpp"
#include "verbsim/queue_pair.hpp"
#include "verbsim/shared_receive_queue.hpp"
#include "verbsim/types.hpp"
#include "verbsim/verb_log.hpp"

namespace verbsim {

// Opens the backend named by `backend` ("sim" or "ibverbs"; empty: $VERBSIM_BACKEND, default
// "sim"). The simulator is configured from the environment (see sim::Config::from_env). Throws
// std::invalid_argument for an unknown name, VerbError when the backend cannot start.
std::unique_ptr<Backend> open_backend(std::string_view backend = {});

}  // namespace verbsim
