// Registered memory that the program unmaps while it is registered.
//
// A NIC pins an MR's pages: a program that frees a buffer before it deregisters it does not
// crash, and what arrives for it lands in pages the program no longer sees. The simulator
// touches MR memory itself, while it delivers a message (SimQp::on_deliver) and while it
// captures a payload for observers. During those, and only those, a fault on an address that
// no mapping covers is answered by mapping a zero page there: writes into it land where the
// program does not look, reads from it see zeros, and the delivery goes on. The world then
// warns once per MR, naming it (World::Impl::report_unmapped). The page stays mapped until the
// process exits.
//
// The answer is a SIGSEGV handler, installed once per process with the first MR. Every other
// fault goes on to the handler that was installed before it (a sanitizer's, the program's), or
// kills the process as it would have. A program that installs its own SIGSEGV handler after
// its first MR replaces this one: then the simulator crashes on unmapped MR memory as before.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace verbsim::sim::user_memory {

// Installs the handler, once per process; thread-safe.
void install() noexcept;

namespace detail {
// Initial-exec TLS: read in the signal handler, where a first access to dynamic TLS could
// allocate.
[[gnu::tls_model("initial-exec")]] extern thread_local int t_depth;
[[gnu::tls_model("initial-exec")]] extern thread_local int t_faults;
}  // namespace detail

// While one is alive on a thread, faults of that thread on unmapped addresses are answered.
class Touching {
 public:
  // The fences keep the compiler from moving the accesses in between out (an atomic's
  // uint64_t cannot alias the int, by type): the signal handler must see the count.
  Touching() noexcept {
    ++detail::t_depth;
    std::atomic_signal_fence(std::memory_order_seq_cst);
  }
  ~Touching() {
    std::atomic_signal_fence(std::memory_order_seq_cst);
    --detail::t_depth;
  }
  Touching(const Touching&) = delete;
  Touching& operator=(const Touching&) = delete;
};

// Whether this thread has had faults answered since the last take_faults().
inline bool faulted() noexcept { return detail::t_faults != 0; }

// The addresses of this thread's answered faults (up to `max` of them, the first ones) into
// `out`, and their number; forgets them.
std::size_t take_faults(std::uintptr_t* out, std::size_t max) noexcept;

// The page size the handler maps.
std::size_t page_size() noexcept;

}  // namespace verbsim::sim::user_memory
