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
// A poll or non-blocking wait that found nothing, under a Simulation: lets every other ready
// fiber run, and the world moves on (one instant) only once every ready fiber is spinning
// like this one, so that no fiber's work is overtaken by virtual time.
void spin_wait(World::Impl& world) noexcept;

}  // namespace verbsim::sim
