#include "verbsim/completion_queue.hpp"

#include <cerrno>

#include "verbsim/error.hpp"

namespace verbsim {

void CompletionQueue::resize(int) { throw_verb_error("ibv_resize_cq", EOPNOTSUPP); }

}  // namespace verbsim
