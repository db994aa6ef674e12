// Common base of the resource types (context, PD, MR, CQ, QP, ...).
#pragma once

#include <memory>

namespace verbsim {

// Resources are owned through std::unique_ptr and are neither copyable nor movable (their
// address is their identity: completions and async events point back at them).
//
// Destroying a resource that others still use (a PD with MRs or QPs, a CQ with QPs) is refused
// by the verbs with EBUSY. `destroy(ptr)` reports that as a VerbError and leaves `ptr` owning
// the resource; plain destruction (the unique_ptr going out of scope) cannot fail, so a backend
// then keeps what is still in use alive until its users go and prints a warning.
class Resource {
 public:
  Resource() = default;
  Resource(const Resource&) = delete;
  Resource& operator=(const Resource&) = delete;
  virtual ~Resource() = default;

  // Releases the resource now. Throws VerbError (EBUSY) if other resources still use it.
  virtual void destroy() = 0;
};

// Destroys `*r` through its verb and resets `r`; on error `r` still owns the resource.
template <class R>
void destroy(std::unique_ptr<R>& r) {
  if (r) {
    r->destroy();
    r.reset();
  }
}

}  // namespace verbsim
