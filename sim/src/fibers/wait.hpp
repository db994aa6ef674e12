// Fiber-aware waiting for the simulator's blocking verbs. Only simulation.cpp sees Boost.Fiber.
#pragma once

#include <cerrno>

#include "fabric/world_impl.hpp"
#include "verbsim/error.hpp"

namespace verbsim::sim {

// A Simulation is running on this world (the caller is one of its fibers or its driver).
inline bool fibers_running(const World::Impl& world) noexcept { return world.fibers().running != nullptr; }
// Blocks the calling fiber until `queue` is notified (creating the queue on first use).
void wait_on(World::Impl& world, WaitQueuePtr& queue);
// Wakes every fiber waiting on `queue`.
void notify_all(WaitQueuePtr& queue) noexcept;
// A poll or non-blocking wait that found nothing, under a Simulation: lets every other ready
// fiber run, and the world moves on (one instant) only once every ready fiber is spinning
// like this one, so that no fiber's work is overtaken by virtual time. Returns 0, or
// ETIMEDOUT once the world's budget ran out.
int spin_wait(World::Impl& world) noexcept;
// Under a pct, replay or exhaustive schedule, a verb where a thread could lose the processor
// and matter (ibv_req_notify_cq: the window of lost wake-ups): sim::yield. Under the random
// schedule, and outside a Simulation, nothing.
void schedule_point(World::Impl& world) noexcept;

// A blocked wait (or sleep) of a fiber after the world deadlocked, which returns at once:
// after many, the fibers are taken to ignore EDEADLK and wait again, and it throws
// DeadlockError naming the fiber (Simulation::run() rethrows it).
void deadlock_answer(World::Impl& world);

// The eventfds behind the simulator's channel fds (context.cpp): non-blocking semaphores that
// poll readable while an event is pending.
int make_eventfd();
void signal_fd(int fd);
void drain_fd(int fd);

// The blocking and non-blocking wait of get_cq_event, get_async_event and CM get_event. `take`
// takes a pending event if there is one. Without fibers the wait runs the world itself; under
// a Simulation it blocks the calling fiber. EDEADLK when nothing can ever arrive.
template <class Take>
std::error_code wait_for(World::Impl& w, WaitQueuePtr& waiters, Wait wait, Take take) {
  for (;;) {
    if (take()) return {};
    if (fibers_running(w)) {
      if (w.budget_exceeded()) [[unlikely]] {
        if (wait == Wait::nonblocking) return errno_code(ETIMEDOUT);
        throw BudgetExceeded(w.budget_report());
      }
      if (w.fibers().deadlocked) {
        if (wait == Wait::nonblocking) return errno_code(EAGAIN);
        deadlock_answer(w);
        return errno_code(EDEADLK);
      }
      if (wait == Wait::blocking) {
        wait_on(w, waiters);
        continue;
      }
      // Whatever arrives while it spins stays pending (its fd readable) for the next call.
      spin_wait(w);
      return errno_code(EAGAIN);
    }
    if (wait == Wait::nonblocking) {
      const int err = w.poll_step();  // ETIMEDOUT: the world's budget ran out
      if (take()) return {};
      return errno_code(err != 0 ? err : EAGAIN);
    }
    if (!w.step()) return errno_code(EDEADLK);
  }
}

}  // namespace verbsim::sim
