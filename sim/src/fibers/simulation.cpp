// Boost.Fiber integration: a scheduling algorithm that picks among ready fibers with the
// world's RNG and, when every fiber is blocked, advances virtual time instead of sleeping.
#include "verbsim/sim/simulation.hpp"

#include <algorithm>

#include <boost/fiber/algo/algorithm.hpp>
#include <boost/fiber/algo/round_robin.hpp>
#include <boost/fiber/condition_variable.hpp>
#include <boost/fiber/context.hpp>
#include <boost/fiber/fiber.hpp>
#include <boost/fiber/mutex.hpp>
#include <boost/fiber/operations.hpp>
#include <boost/fiber/scheduler.hpp>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "fabric/world_impl.hpp"
#include "fibers/wait.hpp"

namespace verbsim::sim {

struct WaitQueue {
  explicit WaitQueue(World::Impl& w) : world(w) { world.fibers().wait_queues.push_back(this); }
  ~WaitQueue() { std::erase(world.fibers().wait_queues, this); }
  World::Impl& world;
  boost::fibers::mutex mutex;
  boost::fibers::condition_variable_any cv;
};

void WaitQueueDeleter::operator()(WaitQueue* q) const noexcept { delete q; }

void wait_on(World::Impl& world, WaitQueuePtr& queue) {
  if (!queue) queue.reset(new WaitQueue(world));
  std::unique_lock lock(queue->mutex);
  queue->cv.wait(lock);
}

void notify_all(WaitQueuePtr& queue) noexcept {
  if (queue) queue->cv.notify_all();
}

namespace {

// Ready fibers in a vector; the next one is drawn from the world's RNG.
class VirtualTimeAlgorithm final : public boost::fibers::algo::algorithm {
 public:
  explicit VirtualTimeAlgorithm(World::Impl& world) : world_(world) {}

  void awakened(boost::fibers::context* ctx) noexcept override { ready_.push_back(ctx); }

  boost::fibers::context* pick_next() noexcept override {
    if (ready_.empty()) return nullptr;
    const std::size_t i = ready_.size() == 1 ? 0 : static_cast<std::size_t>(world_.rng().below(ready_.size()));
    boost::fibers::context* ctx = ready_[i];
    ready_.erase(ready_.begin() + static_cast<std::ptrdiff_t>(i));
    return ctx;
  }

  bool has_ready_fibers() const noexcept override { return !ready_.empty(); }

  // A fiber other than the scheduler's own dispatcher is ready to run and has work to do: it
  // is not spinning on the world (spin_wait) since the world last moved.
  bool workers_ready() const noexcept {
    return std::ranges::any_of(ready_, [this](const boost::fibers::context* c) {
      return !c->is_context(boost::fibers::type::dispatcher_context) && !spinning(c);
    });
  }

  // A spinning fiber is ready (it yielded).
  bool spinners_ready() const noexcept {
    return std::ranges::any_of(ready_, [this](const boost::fibers::context* c) { return spinning(c); });
  }

  bool spinning(const boost::fibers::context* c) const noexcept {
    return std::ranges::find(spinning_, c) != spinning_.end();
  }

  void spin(boost::fibers::context* c) { spinning_.push_back(c); }
  void stop_spinning(boost::fibers::context* c) noexcept { std::erase(spinning_, c); }
  // The world moved: every spinning fiber gets to look again before it moves once more.
  void world_moved() noexcept { spinning_.clear(); }

  // Every fiber, the driver included, is blocked: run the world's next instant instead of
  // sleeping. (Simulation::run normally does this itself and never lets it come to this.)
  void suspend_until(const std::chrono::steady_clock::time_point&) noexcept override {
    if (world_.step()) return;
    if (!world_.fibers().deadlocked) {
      world_.fibers().deadlocked = true;
      for (WaitQueue* q : world_.fibers().wait_queues) q->cv.notify_all();
      return;
    }
    std::fprintf(stderr,
                 "verbsim: deadlock: every fiber is blocked and the simulated world (seed %llu) "
                 "has nothing left to run\n",
                 static_cast<unsigned long long>(world_.config().seed));
    std::abort();
  }

  void notify() noexcept override {}

 private:
  World::Impl& world_;
  std::vector<boost::fibers::context*> ready_;
  std::vector<boost::fibers::context*> spinning_;
};

}  // namespace

struct Simulation::Impl {
  struct Host {
    std::string name;
    boost::fibers::fiber fiber;
    bool done = false;
  };
  std::vector<std::unique_ptr<Host>> hosts;
  VirtualTimeAlgorithm* algo = nullptr;  // owned by the thread's fiber scheduler
  int live = 0;
  std::exception_ptr error;
  std::string error_host;
  std::string deadlock;            // the report, once every fiber was blocked
  std::uint64_t edeadlk_answers = 0;  // blocked waits answered EDEADLK since
};

namespace {
// Blocked waits answered EDEADLK after which the fibers are taken to ignore it.
constexpr std::uint64_t kIgnoredDeadlockAnswers = 10000;
}  // namespace

Simulation::Simulation(World& world) : world_(world), impl_(std::make_unique<Impl>()) {
  impl_->algo = new VirtualTimeAlgorithm(world_.impl());
  boost::fibers::context::active()->get_scheduler()->set_algo(
      boost::fibers::algo::algorithm::ptr_t(impl_->algo));
}

Simulation::~Simulation() {
  for (auto& h : impl_->hosts) {
    if (h->fiber.joinable()) h->fiber.detach();
  }
  world_.impl().fibers().running = nullptr;
  boost::fibers::use_scheduling_algorithm<boost::fibers::algo::round_robin>();
}

void Simulation::spawn(std::string name, std::function<void()> body) {
  auto host = std::make_unique<Impl::Host>();
  host->name = std::move(name);
  Impl::Host* h = host.get();
  Impl* impl = impl_.get();
  ++impl->live;
  h->fiber = boost::fibers::fiber(boost::fibers::launch::post, [h, impl, body = std::move(body)] {
    try {
      body();
    } catch (...) {
      if (!impl->error) {
        impl->error = std::current_exception();
        impl->error_host = h->name;
      }
    }
    h->done = true;
    --impl->live;
  });
  impl_->hosts.push_back(std::move(host));
}

RunOutcome Simulation::run() {
  World::Impl& w = world_.impl();
  w.fibers().running = impl_.get();
  w.fibers().deadlocked = false;
  impl_->deadlock.clear();
  impl_->edeadlk_answers = 0;
  std::string& deadlock = impl_->deadlock;
  int grace = 0;
  while (impl_->live > 0) {
    boost::this_fiber::yield();
    if (impl_->live == 0) break;
    // Back in the driver with no host ready to work: every host is blocked or spinning on the
    // world, so the world must move.
    if (!impl_->algo->workers_ready()) {
      if (w.budget_exceeded()) {
        // Past the budget: the fibers' waits throw BudgetExceeded and their polls return
        // ETIMEDOUT; give them the time to end, as after a deadlock.
        impl_->algo->world_moved();
        if (++grace > 10000) break;
        continue;
      }
      bool stepped = false;
      try {
        stepped = w.step();
      } catch (const BudgetExceeded&) {
        for (WaitQueue* q : w.fibers().wait_queues) q->cv.notify_all();
        continue;
      }
      if (stepped) {
        impl_->algo->world_moved();
        continue;
      }
      // Nothing to run, but some fibers are spinning on empty polls: not a deadlock (a poll
      // that found nothing returns, and its caller may go on to post), so let them carry on.
      if (impl_->algo->spinners_ready()) {
        impl_->algo->world_moved();
        continue;
      }
      if (!w.fibers().deadlocked) {
        w.fibers().deadlocked = true;
        std::string blocked;
        for (const auto& h : impl_->hosts) {
          if (!h->done) blocked += (blocked.empty() ? "" : ", ") + h->name;
        }
        deadlock = "deadlock: every fiber is blocked (" + blocked +
                   ") and the simulated world has nothing left to run; reproduce with "
                   "VERBSIM_SEED=" +
                   std::to_string(w.config().seed) +
                   " (add VERBSIM_PCAP=<file> VERBSIM_TIMELINE=<file> to see the run)\n" +
                   world_.report();
        for (WaitQueue* q : w.fibers().wait_queues) q->cv.notify_all();
      } else if (++grace > 10000) {
        break;  // hosts ignore EDEADLK: give up on them
      }
    }
  }
  for (auto& h : impl_->hosts) {
    if (h->done && h->fiber.joinable()) h->fiber.join();
  }
  w.fibers().running = nullptr;
  w.fibers().deadlocked = false;
  if (impl_->error) std::rethrow_exception(impl_->error);
  if (w.budget_exceeded()) throw BudgetExceeded(w.budget_report());
  if (impl_->live > 0) throw DeadlockError(deadlock);  // fibers ignored their EDEADLK
  return {!deadlock.empty(), deadlock};
}

void deadlock_answer(World::Impl& world) {
  auto* sim = static_cast<Simulation::Impl*>(world.fibers().running);
  if (++sim->edeadlk_answers <= kIgnoredDeadlockAnswers) return;
  std::string name = "?";
  for (const auto& h : sim->hosts) {
    if (h->fiber.get_id() == boost::this_fiber::get_id()) name = h->name;
  }
  throw DeadlockError(sim->deadlock + "fiber '" + name + "' went on waiting after " +
                      std::to_string(kIgnoredDeadlockAnswers) +
                      " answers of EDEADLK: a fiber must return (or throw) when a blocking "
                      "wait returns EDEADLK\n");
}

int spin_wait(World::Impl& world) noexcept {
  auto* sim = static_cast<Simulation::Impl*>(world.fibers().running);
  boost::fibers::context* self = boost::fibers::context::active();
  sim->algo->spin(self);
  boost::this_fiber::yield();
  sim->algo->stop_spinning(self);
  return world.budget_exceeded() ? ETIMEDOUT : 0;
}

void sleep_for(World& world, std::chrono::nanoseconds d) {
  World::Impl& w = world.impl();
  const std::uint64_t until = w.now() + static_cast<std::uint64_t>(std::max<std::int64_t>(d.count(), 0));
  if (!fibers_running(w)) {
    world.run_until(until);
    return;
  }
  WaitQueuePtr queue;
  Event e{};
  e.time = until;
  e.kind = EvKind::wake;
  e.value = reinterpret_cast<std::uintptr_t>(&queue);
  queue.reset(new WaitQueue(w));
  w.schedule(e);
  w.fibers().sleepers.push_back(&queue);
  while (w.now() < until && !w.fibers().deadlocked && !w.budget_exceeded()) wait_on(w, queue);
  std::erase(w.fibers().sleepers, &queue);
  if (w.budget_exceeded()) throw BudgetExceeded(w.budget_report());
  if (w.now() < until) deadlock_answer(w);  // cut short by a deadlock
}

}  // namespace verbsim::sim
