// The defaults of verbs added to the core API after its first backends: a backend (or a user's
// own implementation of an interface) that does not override them refuses with EOPNOTSUPP.
#include "verbsim/completion_queue.hpp"
#include "verbsim/memory_region.hpp"

#include <cerrno>

#include "verbsim/error.hpp"

namespace verbsim {

void CompletionQueue::resize(int) { throw_verb_error("ibv_resize_cq", EOPNOTSUPP); }

void MemoryRegion::rereg(const MrChange&) { throw_verb_error("ibv_rereg_mr", EOPNOTSUPP); }

}  // namespace verbsim
