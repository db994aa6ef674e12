// Fiber-aware waiting for the simulator's blocking verbs. Only simulation.cpp sees Boost.Fiber.
#pragma once

#include "internal.hpp"

namespace verbsim::sim {

// A Simulation is running on this world (the caller is one of its fibers or its driver).
inline bool fibers_running(const World::Impl& world) noexcept { return world.fibers != nullptr; }
// Blocks the calling fiber until `queue` is notified (creating the queue on first use).
void wait_on(World::Impl& world, WaitQueuePtr& queue);
// Wakes every fiber waiting on `queue`.
void notify_all(WaitQueuePtr& queue) noexcept;
// Lets the other ready fibers run (a poll or non-blocking wait that found nothing).
void yield_fiber() noexcept;

}  // namespace verbsim::sim
