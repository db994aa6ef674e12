// Boost.Fiber integration: a scheduling algorithm that picks among ready fibers with the
// world's RNG and, when every fiber is blocked, advances virtual time instead of sleeping.
#include "verbsim/sim/simulation.hpp"

#include <algorithm>
#include <charconv>
#include <unordered_map>

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

#include "fabric/rng.hpp"
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
  VirtualTimeAlgorithm(World::Impl& world, Schedule schedule)
      : schedule_(std::move(schedule)), world_(world) {}

  void awakened(boost::fibers::context* ctx) noexcept override { ready_.push_back(ctx); }

  boost::fibers::context* pick_next() noexcept override {
    if (ready_.empty()) return nullptr;
    std::size_t i = 0;
    if (schedule_.mode != Schedule::Mode::random) {
      i = pick_systematic();
    } else if (ready_.size() > 1) {
      i = static_cast<std::size_t>(world_.rng().below(ready_.size()));
    }
    boost::fibers::context* ctx = ready_[i];
    ready_.erase(ready_.begin() + static_cast<std::ptrdiff_t>(i));
    return ctx;
  }

  // A run under pct, replay or exhaustive begins: change points and priorities from the seed.
  void start(boost::fibers::context* driver) {
    driver_ = driver;
    trace_ = {};
    priority_.clear();
    change_points_.clear();
    pct_rng_ = Rng(world_.config().seed ^ 0x5043'5453'4348'4544ull);
    if (schedule_.mode != Schedule::Mode::pct) return;
    const auto k = static_cast<std::uint64_t>(std::max(schedule_.steps, 1));
    for (int j = 1; j < schedule_.depth; ++j) change_points_.push_back(1 + pct_rng_.below(k));
  }

  const Schedule& schedule() const noexcept { return schedule_; }
  const boost::fibers::context* driver() const noexcept { return driver_; }
  const ScheduleTrace& trace() const noexcept { return trace_; }

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
  // A fiber with work to do: not the driver or the dispatcher, not spinning on the world.
  bool worker(const boost::fibers::context* c) const noexcept {
    return c != driver_ && !c->is_context(boost::fibers::type::dispatcher_context) && !spinning(c);
  }

  // pct, replay, exhaustive: the index in ready_ of the next context. Only fibers with work are
  // chosen between; when there is none the driver runs (it moves the world), else the first. A
  // choice sim::yield made (keep_running) is taken as it was made.
  std::size_t pick_systematic() noexcept {
    if (forced_ != nullptr) {
      const auto f = std::ranges::find(ready_, forced_);
      forced_ = nullptr;
      if (f != ready_.end()) return static_cast<std::size_t>(f - ready_.begin());
    }
    candidates_.clear();
    contexts_.clear();
    for (std::size_t i = 0; i < ready_.size(); ++i) {
      if (worker(ready_[i])) {
        candidates_.push_back(i);
        contexts_.push_back(ready_[i]);
      }
    }
    if (candidates_.empty()) {
      const auto d = std::ranges::find(ready_, driver_);
      return d == ready_.end() ? 0 : static_cast<std::size_t>(d - ready_.begin());
    }
    ++trace_.steps;
    return candidates_[choose()];
  }

 public:
  // sim::yield under pct, replay or exhaustive: the calling fiber is one of the choices, first
  // in the list, then the others with work, then those spinning on an empty poll (chosen, one
  // returns from its poll empty-handed: a thread's poll can end just before another posts).
  // True: the caller goes on; false: the chosen fiber runs next and the caller yields.
  bool keep_running(boost::fibers::context* self) {
    contexts_.clear();
    contexts_.push_back(self);
    for (boost::fibers::context* c : ready_) {
      if (worker(c)) contexts_.push_back(c);
    }
    for (boost::fibers::context* c : ready_) {
      if (spinning(c)) contexts_.push_back(c);
    }
    if (contexts_.size() == 1) return true;
    ++trace_.steps;
    const std::size_t i = choose();
    if (i == 0) return true;
    forced_ = contexts_[i];
    return false;
  }

 private:
  // The index in contexts_ (not empty) of the fiber that runs next, recorded in the trace.
  std::size_t choose() noexcept {
    if (schedule_.mode == Schedule::Mode::pct) return pick_pct();
    if (contexts_.size() == 1) return 0;
    const std::size_t point = trace_.choices.size();
    std::uint32_t taken = 0;
    if (point < schedule_.choices.size() && schedule_.choices[point] < contexts_.size()) {
      taken = schedule_.choices[point];
    }
    if (schedule_.mode == Schedule::Mode::exhaustive &&
        point >= static_cast<std::size_t>(std::max(schedule_.bound, 0))) {
      trace_.beyond_bound = true;
    }
    trace_.choices.push_back({taken, static_cast<std::uint32_t>(contexts_.size())});
    return taken;
  }

  // The context of highest priority; at a change point it drops below every other first.
  std::size_t pick_pct() noexcept {
    const auto highest = [this] {
      std::size_t best = 0;
      for (std::size_t j = 0; j < contexts_.size(); ++j) {
        if (priority(contexts_[j]) > priority(contexts_[best])) best = j;
      }
      return best;
    };
    std::size_t best = highest();
    for (std::size_t j = 0; j < change_points_.size(); ++j) {
      if (change_points_[j] != trace_.steps) continue;
      // The j-th change point: priority d - 1 - j, under every initial priority (>= d).
      priority_[contexts_[best]] = static_cast<std::uint64_t>(change_points_.size() - j);
      best = highest();
    }
    if (contexts_.size() > 1) {
      trace_.choices.push_back(
          {static_cast<std::uint32_t>(best), static_cast<std::uint32_t>(contexts_.size())});
    }
    return best;
  }

  // A fiber's priority, drawn when it is first seen: distinct from the others (almost surely)
  // and above every change point's.
  std::uint64_t priority(boost::fibers::context* c) {
    auto [it, fresh] = priority_.try_emplace(c, 0);
    if (fresh) it->second = static_cast<std::uint64_t>(std::max(schedule_.depth, 1)) + (pct_rng_.next() >> 8);
    return it->second;
  }

  Schedule schedule_;
  World::Impl& world_;
  std::vector<boost::fibers::context*> ready_;
  std::vector<boost::fibers::context*> spinning_;
  boost::fibers::context* driver_ = nullptr;
  std::vector<std::size_t> candidates_;                 // indices in ready_ of contexts_
  std::vector<boost::fibers::context*> contexts_;      // the fibers a choice is between
  boost::fibers::context* forced_ = nullptr;           // chosen by keep_running, runs next
  ScheduleTrace trace_;
  Rng pct_rng_{0};
  std::vector<std::uint64_t> change_points_;
  std::unordered_map<boost::fibers::context*, std::uint64_t> priority_;
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

Simulation::Simulation(World& world) : Simulation(world, Schedule::from_env()) {}

Simulation::Simulation(World& world, Schedule schedule) : world_(world), impl_(std::make_unique<Impl>()) {
  impl_->algo = new VirtualTimeAlgorithm(world_.impl(), std::move(schedule));
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
  impl_->algo->start(boost::fibers::context::active());
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
                   ") and the simulated world has nothing left to run; reproduce with " +
                   reproducer() + " (add VERBSIM_PCAP=<file> VERBSIM_TIMELINE=<file> to see the run)\n" +
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
  if (impl_->error) {
    if (schedule().mode != Schedule::Mode::random) {
      std::fprintf(stderr, "verbsim: fiber '%s' failed; reproduce with %s\n", impl_->error_host.c_str(),
                   reproducer().c_str());
    }
    std::rethrow_exception(impl_->error);
  }
  if (w.budget_exceeded()) throw BudgetExceeded(w.budget_report());
  if (impl_->live > 0) throw DeadlockError(deadlock);  // fibers ignored their EDEADLK
  return {!deadlock.empty(), deadlock};
}

const Schedule& Simulation::schedule() const noexcept { return impl_->algo->schedule(); }

const ScheduleTrace& Simulation::trace() const noexcept { return impl_->algo->trace(); }

std::string Simulation::reproducer() const {
  std::string out = "VERBSIM_SEED=" + std::to_string(world_.impl().config().seed);
  const Schedule& s = schedule();
  if (s.mode == Schedule::Mode::random) return out;
  if (s.mode == Schedule::Mode::pct) return out + " VERBSIM_SCHEDULE=" + s.to_string();
  Schedule replay;
  replay.mode = Schedule::Mode::replay;
  for (const Choice& c : trace().choices) replay.choices.push_back(c.taken);
  while (!replay.choices.empty() && replay.choices.back() == 0) replay.choices.pop_back();  // the default
  return out + " VERBSIM_SCHEDULE=" + replay.to_string();
}

namespace {

int parse_int(std::string_view spec, std::string_view v) {
  int out = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc{} || end != v.data() + v.size() || out < 0) {
    throw std::invalid_argument("VERBSIM_SCHEDULE '" + std::string(spec) + "': '" + std::string(v) +
                                "' is not a number");
  }
  return out;
}

// Splits "a,b,c" and calls f on each non-empty part.
template <class F>
void each_part(std::string_view list, F f) {
  while (!list.empty()) {
    const std::size_t comma = list.find(',');
    const std::string_view part = list.substr(0, comma);
    if (!part.empty()) f(part);
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
}

}  // namespace

Schedule Schedule::parse(std::string_view spec) {
  const std::size_t colon = spec.find(':');
  const std::string_view name = spec.substr(0, colon);
  const std::string_view args = colon == std::string_view::npos ? std::string_view{} : spec.substr(colon + 1);
  Schedule s;
  if (name == "random") {
    s.mode = Mode::random;
  } else if (name == "pct" || name == "exhaustive") {
    s.mode = name == "pct" ? Mode::pct : Mode::exhaustive;
    each_part(args, [&](std::string_view kv) {
      const std::size_t eq = kv.find('=');
      const std::string_view key = kv.substr(0, eq);
      const int v = parse_int(spec, eq == std::string_view::npos ? std::string_view{} : kv.substr(eq + 1));
      if (s.mode == Mode::pct && key == "d") {
        s.depth = std::max(v, 1);
      } else if (s.mode == Mode::pct && key == "k") {
        s.steps = std::max(v, 1);
      } else if (s.mode == Mode::exhaustive && key == "bound") {
        s.bound = v;
      } else {
        throw std::invalid_argument("VERBSIM_SCHEDULE '" + std::string(spec) + "': unknown option '" +
                                    std::string(key) + "'");
      }
    });
  } else if (name == "replay") {
    s.mode = Mode::replay;
    each_part(args, [&](std::string_view c) { s.choices.push_back(static_cast<std::uint32_t>(parse_int(spec, c))); });
  } else {
    throw std::invalid_argument("VERBSIM_SCHEDULE '" + std::string(spec) +
                                "': expected random, pct:d=D,k=K, exhaustive:bound=N or replay:C,C,...");
  }
  return s;
}

Schedule Schedule::from_env() { return from_env(Schedule{}); }

Schedule Schedule::from_env(Schedule fallback) {
  const char* v = std::getenv("VERBSIM_SCHEDULE");
  if (v == nullptr || *v == '\0') return fallback;
  return parse(v);
}

std::string Schedule::to_string() const {
  switch (mode) {
    case Mode::random:
      return "random";
    case Mode::pct:
      return "pct:d=" + std::to_string(depth) + ",k=" + std::to_string(steps);
    case Mode::exhaustive:
      return "exhaustive:bound=" + std::to_string(bound);
    case Mode::replay: {
      std::string out = "replay:";
      for (std::size_t i = 0; i < choices.size(); ++i) out += (i ? "," : "") + std::to_string(choices[i]);
      return out;
    }
  }
  return "random";
}

ExploreResult explore(int bound, const std::function<ScheduleTrace(const Schedule&)>& scenario,
                      std::uint64_t max_runs) {
  ExploreResult r;
  Schedule s;
  s.mode = Schedule::Mode::exhaustive;
  s.bound = bound;
  bool truncated = false;
  while (r.runs < max_runs) {
    ++r.runs;
    ScheduleTrace t;
    try {
      t = scenario(s);
    } catch (const std::exception& e) {
      r.failed = true;
      r.failure = e.what();
    } catch (...) {
      r.failed = true;
      r.failure = "an exception that is not a std::exception";
    }
    if (r.failed) {
      // The run's trace is lost with its exception: the failing run's choices are the prefix it
      // replayed then the first fiber at every later choice point.
      r.failing.mode = Schedule::Mode::replay;
      r.failing.choices = s.choices;
      return r;
    }
    r.deepest = std::max(r.deepest, t.choices.size());
    truncated = truncated || t.beyond_bound;
    // Backtrack: the last choice point within the bound with an alternative not taken yet.
    std::size_t n = std::min(t.choices.size(), static_cast<std::size_t>(std::max(bound, 0)));
    while (n > 0 && t.choices[n - 1].taken + 1 >= t.choices[n - 1].of) --n;
    if (n == 0) {
      r.complete = !truncated;
      return r;
    }
    s.choices.clear();
    for (std::size_t i = 0; i + 1 < n; ++i) s.choices.push_back(t.choices[i].taken);
    s.choices.push_back(t.choices[n - 1].taken + 1);
  }
  return r;
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

void yield(World& world) {
  auto* running = static_cast<Simulation::Impl*>(world.impl().fibers().running);
  if (running != nullptr && running->algo->schedule().mode != Schedule::Mode::random &&
      running->algo->keep_running(boost::fibers::context::active())) {
    return;
  }
  boost::this_fiber::yield();
}

void schedule_point(World::Impl& world) noexcept {
  auto* running = static_cast<Simulation::Impl*>(world.fibers().running);
  if (running == nullptr || running->algo->schedule().mode == Schedule::Mode::random) return;
  if (boost::fibers::context::active() == running->algo->driver()) return;
  if (!running->algo->keep_running(boost::fibers::context::active())) boost::this_fiber::yield();
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
