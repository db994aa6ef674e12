#include "transport/user_memory.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <mutex>

namespace verbsim::sim::user_memory {

namespace detail {
[[gnu::tls_model("initial-exec")]] thread_local int t_depth = 0;
[[gnu::tls_model("initial-exec")]] thread_local int t_faults = 0;
}  // namespace detail

namespace {

constexpr int kRecorded = 8;
[[gnu::tls_model("initial-exec")]] thread_local std::uintptr_t t_addresses[kRecorded];

struct sigaction g_previous {};
std::uintptr_t g_page = 4096;

// The fault is not ours: what would have happened without this handler happens.
void pass_on(int sig, siginfo_t* info, void* context) noexcept {
  if ((g_previous.sa_flags & SA_SIGINFO) != 0 && g_previous.sa_sigaction != nullptr) {
    g_previous.sa_sigaction(sig, info, context);
    return;
  }
  if (g_previous.sa_handler == SIG_DFL || g_previous.sa_handler == SIG_IGN) {
    // The default action: the faulting instruction runs again on return, and kills.
    std::signal(sig, SIG_DFL);
    return;
  }
  g_previous.sa_handler(sig);
}

void on_fault(int sig, siginfo_t* info, void* context) noexcept {
  if (detail::t_depth > 0 && info->si_code == SEGV_MAPERR) {
    const int saved = errno;
    const auto at = reinterpret_cast<std::uintptr_t>(info->si_addr);
    void* page = reinterpret_cast<void*>(at & ~(g_page - 1));
    void* got = ::mmap(page, g_page, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (got != MAP_FAILED && got != page) ::munmap(got, g_page);  // a kernel before 4.17
    errno = saved;
    if (got == page) {
      if (detail::t_faults < kRecorded) t_addresses[detail::t_faults] = at;
      ++detail::t_faults;
      return;  // the access runs again, on the new page
    }
  }
  pass_on(sig, info, context);
}

}  // namespace

void install() noexcept {
  static std::once_flag once;
  std::call_once(once, [] {
    if (const long p = ::sysconf(_SC_PAGESIZE); p > 0) g_page = static_cast<std::uintptr_t>(p);
    struct sigaction sa {};
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGSEGV, &sa, &g_previous);
  });
}

std::size_t take_faults(std::uintptr_t* out, std::size_t max) noexcept {
  const auto n = static_cast<std::size_t>(std::min(detail::t_faults, kRecorded));
  const std::size_t k = std::min(n, max);
  std::copy(t_addresses, t_addresses + k, out);
  detail::t_faults = 0;
  return k;
}

std::size_t page_size() noexcept { return g_page; }

}  // namespace verbsim::sim::user_memory
