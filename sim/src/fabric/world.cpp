#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "fabric/assert.hpp"
#include "fabric/numbers.hpp"
#include "fibers/wait.hpp"
#include "observe/pcap.hpp"
#include "observe/timeline.hpp"
#include "transport/qp.hpp"
#include "transport/user_memory.hpp"
#include "verbsim/error.hpp"
#include "verbsim/sim/observe.hpp"

namespace verbsim::sim {

namespace {

// The variable `name` as a number from `min` to `max` (read_u64), or `fallback` if unset.
std::uint64_t env_u64(const char* name, std::uint64_t fallback, std::uint64_t min = 0,
                      std::uint64_t max = UINT64_MAX) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  const std::optional<std::uint64_t> x = read_u64(v);
  if (!x || *x < min || *x > max) {
    throw std::invalid_argument(std::string(name) + "='" + v + "' is not a number from " +
                                std::to_string(min) + " to " + std::to_string(max));
  }
  return *x;
}

// VERBSIM_STATS=1: collect the counters, and print them when the world ends.
bool stats_from_env() noexcept {
  const char* s = std::getenv("VERBSIM_STATS");
  return s != nullptr && std::string_view(s) == "1";
}

}  // namespace

namespace {
Budget g_default_budget;  // set before worlds are made (set_default_budget)
}  // namespace

void set_default_budget(const Budget& b) noexcept { g_default_budget = b; }
const Budget& default_budget() noexcept { return g_default_budget; }

Budget Budget::parse(std::string_view text) {
  Budget b;
  while (!text.empty()) {
    const std::size_t sp = text.find_first_of(" \t,;");
    const std::string_view word = text.substr(0, sp);
    text = sp == std::string_view::npos ? std::string_view{} : text.substr(sp + 1);
    if (word.empty() || word == "none" || word == "off") continue;  // no limit
    const std::size_t eq = word.find('=');
    const std::string_view key = word.substr(0, eq);
    const std::string value(eq == std::string_view::npos ? "" : word.substr(eq + 1));
    auto bad = [&](const char* what) {
      throw std::invalid_argument("budget: '" + std::string(word) + "' " + what +
                                  " (time=<n>[ns|us|ms|s] events=<n> stall=<n>[ns|us|ms|s], or off)");
    };
    const std::size_t digits = std::min(value.find_first_not_of("0123456789"), value.size());
    if (digits == 0) bad("has no number");
    const std::optional<std::uint64_t> n = read_u64(std::string_view(value).substr(0, digits),
                                                    /*decimal_only=*/true);
    if (!n) bad("is past 18446744073709551615");
    const std::string_view unit = std::string_view(value).substr(digits);
    if (key == "events") {
      if (!unit.empty()) bad("is not a number");
      b.events = *n;
    } else if (key == "time" || key == "stall") {
      std::uint64_t scale = 0;
      if (unit.empty() || unit == "ns") scale = 1;
      if (unit == "us") scale = 1'000;
      if (unit == "ms") scale = 1'000'000;
      if (unit == "s") scale = 1'000'000'000;
      if (scale == 0) bad("has an unknown unit");
      const std::optional<std::uint64_t> ns = times(*n, scale);
      if (!ns) bad("is past 18446744073709551615 ns");
      (key == "time" ? b.virtual_ns : b.stall_ns) = *ns;
    } else {
      bad("is not time=, events= or stall=");
    }
  }
  return b;
}

std::string Budget::to_string() const {
  std::string out;
  if (virtual_ns != 0) out += "time=" + std::to_string(virtual_ns) + "ns";
  if (events != 0) out += std::string(out.empty() ? "" : " ") + "events=" + std::to_string(events);
  if (stall_ns != 0) out += std::string(out.empty() ? "" : " ") + "stall=" + std::to_string(stall_ns) + "ns";
  return out.empty() ? "none" : out;
}

Config Config::from_env() {
  Config c;
  c.seed = env_u64("VERBSIM_SEED", c.seed);
  if (const char* p = std::getenv("VERBSIM_PROFILE"); p != nullptr && *p != '\0') {
    const std::string_view name(p);
    if (name == "strict" || name == "rxe" || name == "mlx5") {
      c.profile = parse_profile(name);
    } else {
      c.profile_file = ProfileFile::load(p);  // a path; std::invalid_argument names it
      c.profile = c.profile_file->family();
    }
  }
  c.devices = static_cast<int>(
      env_u64("VERBSIM_SIM_DEVICES", static_cast<std::uint64_t>(c.devices), 1, 64));
  c.faults = FaultPlan::from_env();
  c.env_faults = false;  // read just above
  c.ports_per_device = static_cast<int>(
      env_u64("VERBSIM_SIM_PORTS", static_cast<std::uint64_t>(c.ports_per_device), 1, 16));
  return c;
}


namespace {

// The world's devices, named sim0, sim1, ...: each port has a link-local GID and an IPv4-mapped
// one (10.0.<device>.<port>), as a RoCE v2 port does.
std::vector<std::unique_ptr<DevCore>> make_devices(const Config& c, const ProfileTraits& t) {
  std::vector<std::unique_ptr<DevCore>> devs;
  for (int d = 0; d < c.devices; ++d) {
    auto dev = std::make_unique<DevCore>();
    dev->index = d;
    dev->name = "sim" + std::to_string(d);
    dev->guid = 0x0200'5eff'fe00'0000ull | (static_cast<std::uint64_t>(d) << 8) | 1;
    for (int p = 0; p < c.ports_per_device; ++p) {
      PortCore port;
      port.attr.state = PortState::active;
      port.attr.max_mtu = Mtu::mtu_4096;
      port.attr.active_mtu = Mtu::mtu_1024;
      port.attr.gid_tbl_len = t.limits.gid_tbl_len;
      port.attr.pkey_tbl_len = 1;
      port.attr.max_msg_sz = t.limits.max_msg_sz;
      port.attr.port_cap_flags = 0x00010000;  // IsDeviceManagementNotSupported, as RoCE ports say
      port.attr.active_width = 2;  // 4x
      port.attr.active_speed = 32; // EDR-class; 4x -> 100 Gb/s
      port.attr.link_layer = LinkLayer::ethernet;
      Gid link_local;
      link_local.raw[0] = 0xfe;
      link_local.raw[1] = 0x80;
      for (int i = 0; i < 8; ++i) {
        link_local.raw[8 + i] = static_cast<std::uint8_t>(dev->guid >> (56 - 8 * i));
      }
      link_local.raw[15] = static_cast<std::uint8_t>(link_local.raw[15] + p);
      port.gids.push_back(link_local);
      port.gids.push_back(Gid::from_ipv4(10, 0, static_cast<std::uint8_t>(d),
                                         static_cast<std::uint8_t>(p + 1)));
      dev->ports.push_back(std::move(port));
    }
    devs.push_back(std::move(dev));
  }
  return devs;
}

}  // namespace

std::string process_file(const std::string& path, bool shared) {
  if (path == "stderr" || path == "-") return path;
  const std::string pid = std::to_string(::getpid());
  std::string out;
  bool had = false;
  for (std::size_t i = 0; i < path.size(); ++i) {
    if (path[i] == '%' && i + 1 < path.size() && path[i + 1] == 'p') {
      out += pid;
      had = true;
      ++i;
    } else {
      out += path[i];
    }
  }
  if (had || !shared) return out;
  const std::size_t slash = out.rfind('/');
  const std::size_t dot = out.rfind('.');
  const bool has_ext = dot != std::string::npos && (slash == std::string::npos || dot > slash + 1);
  return has_ext ? out.substr(0, dot) + "." + pid + out.substr(dot) : out + "." + pid;
}

namespace {

// The profile a world runs: its file's, else the built-in one the config names.
std::unique_ptr<const ProfileTraits> traits_from(Config& c) {
  if (!c.profile_file) return nullptr;
  auto t = std::make_unique<const ProfileTraits>(ProfileTraits::from(*c.profile_file));
  c.profile = t->family;
  return t;
}

}  // namespace

World::Impl::Impl(Config c)
    : config_(std::move(c)),
      own_traits_(traits_from(config_)),
      traits_(own_traits_ ? own_traits_.get() : &ProfileTraits::of(config_.profile)),
      rng_(config_.seed),
      devs_(make_devices(config_, *traits_)),
      events_(devs_.size() * static_cast<std::size_t>(config_.ports_per_device)),
      faults_(config_.faults, devs_, rng_, digest_) {
  digest_.add(config_.seed);
  budgeted_ = config_.budget.enabled();
  poll_slow_ = budgeted_;
  const FaultPlan& plan = config_.faults;
  for (std::size_t i = 0; i < plan.timed.size(); ++i) {
    Event e{};
    e.time = plan.timed[i].at_ns;
    e.kind = EvKind::fault;
    e.index = static_cast<std::uint32_t>(i);
    schedule(e);
  }
  if (config_.stats) {
    auto stats = std::make_unique<StatsObserver>(/*print=*/stats_from_env());
    stats_ = stats.get();
    own_observer(std::move(stats));
  }
  if (!config_.timeline.empty()) {
    config_.timeline = sim::process_file(config_.timeline, !config_.fabric.empty());
    own_observer(std::make_unique<TimelineWriter>(config_.timeline));
  }
  if (!config_.pcap.empty()) {
    config_.pcap = sim::process_file(config_.pcap, !config_.fabric.empty());
    own_observer(std::make_unique<PcapWriter>(config_.pcap), Takes::no_work_requests);
  }
  if (!config_.fabric.empty()) join_fabric();
}

// Inline in step(): it runs once per event.
[[gnu::always_inline]] inline void World::Impl::dispatch(const Event& e) {
  digest_.add(e.time);
  digest_.add((static_cast<std::uint64_t>(e.kind) << 56) |
              (static_cast<std::uint64_t>(e.code) << 48) |
              (static_cast<std::uint64_t>(e.dev) << 32) | e.qpn);
  digest_.add((static_cast<std::uint64_t>(e.index) << 32) | e.epoch);
  if (e.kind >= EvKind::fault) [[unlikely]] {  // not for a QP: fault, wake or cm
    if (e.kind == EvKind::fault) {
      run_timed_fault(config_.faults.timed[e.index], e.code == 1);
    } else if (e.kind == EvKind::cm) {
      run_cm_event(e);
    } else if (e.kind == EvKind::parcel) {
      run_parcel(e);
    } else {  // sim::sleep_for of a fiber
      auto* queue = reinterpret_cast<WaitQueuePtr*>(static_cast<std::uintptr_t>(e.value));
      const auto& sleepers = fibers_.sleepers;
      if (std::find(sleepers.begin(), sleepers.end(), queue) != sleepers.end()) notify_all(*queue);
    }
    return;
  }
  if (faults_.links_changed() && e.kind <= EvKind::nak && !port_up(e.dev, 1)) return;  // down
  SimQp* qp = find_qp(e.dev, e.qpn);
  if (qp == nullptr) {  // the QP was destroyed meanwhile: the packet or timer is lost
    if (link_ != nullptr) hand_over(e);  // unless it is a QP of another process
    return;
  }
  if (e.kind == EvKind::deliver) [[likely]] {  // one per message: most events
    qp->on_deliver(e);
    // It touched MR memory the program had unmapped (transport/user_memory.hpp).
    if (user_memory::faulted()) [[unlikely]] report_unmapped();
    return;
  }
  switch (e.kind) {
    case EvKind::ack: qp->on_ack(e); break;
    case EvKind::nak: qp->on_nak(e); break;
    case EvKind::timeout: qp->on_timeout(e); break;
    case EvKind::rnr_retry: qp->on_rnr_retry(e); break;
    case EvKind::deliver:
    case EvKind::fault:
    case EvKind::wake:
    case EvKind::cm:
    case EvKind::parcel: break;
  }
}

inline bool World::Impl::timer_is_idle(const Event& e) {
  if (e.kind == EvKind::timeout) {
    SimQp* qp = find_qp(e.dev, e.qpn);
    return qp == nullptr || qp->drop_idle_timer(e);
  }
  return e.kind == EvKind::cm && cm_timer_is_stale(e);
}

// An empty poll's step: no Entry mark, which would cost every SEND about 15 instructions
// (two steps of the world each); the posts and every other way of running the world mark it.
bool World::Impl::plain_step() { return events_.step<false>(UINT64_MAX, now_, *this); }

bool World::Impl::plain_step_until(std::uint64_t limit) {
  const Entry entry(*this);
  return events_.step<true>(limit, now_, *this);
}

bool World::Impl::step() {
  if (link_ != nullptr) [[unlikely]] return shared_step(UINT64_MAX, /*passive=*/true, true);
  if (budgeted_) [[unlikely]] return budgeted_step(UINT64_MAX, /*may_throw=*/true);
  const Entry entry(*this);
  return plain_step();
}

bool World::Impl::step_until(std::uint64_t limit) {
  if (link_ != nullptr) [[unlikely]] return shared_step(limit, /*passive=*/false, true);
  if (budgeted_) [[unlikely]] return budgeted_step(limit, /*may_throw=*/true);
  const Entry entry(*this);
  return events_.step<true>(limit, now_, *this);
}

namespace {
// A thread's name for a report ("" if it has none or it cannot be read).
std::string thread_name(std::uintptr_t thread) {
  char name[32] = {};
  if (pthread_getname_np(static_cast<pthread_t>(thread), name, sizeof name) != 0) return "";
  return std::string(" ('") + name + "')";
}
}  // namespace

void World::Impl::entered_twice(std::uintptr_t inside, std::uintptr_t entering) noexcept {
  std::fprintf(stderr,
               "verbsim: two threads are in one simulated world (seed %llu) at once: thread "
               "%#lx%s is inside it and thread %#lx%s entered it. A sim::World is "
               "single-threaded, and threads that share one make its runs nondeterministic. Run "
               "the hosts as fibers of one thread under sim::Simulation "
               "(verbsim/sim/simulation.hpp), or make the threads take turns: one lock held "
               "around every call into the world and its objects, as the libibverbs drop-in "
               "does.\n",
               static_cast<unsigned long long>(config_.seed), static_cast<unsigned long>(inside),
               thread_name(inside).c_str(), static_cast<unsigned long>(entering),
               thread_name(entering).c_str());
  std::abort();
}

std::uint64_t World::Impl::budget_end() noexcept {
  const Budget& b = config_.budget;
  std::uint64_t end = b.virtual_ns != 0 ? b.virtual_ns : UINT64_MAX;
  if (b.stall_ns != 0) {
    const std::uint64_t marks = acct_.posted + acct_.completed + acct_.discarded + progress_marks_;
    if (marks != progress_seen_) {
      progress_seen_ = marks;
      progress_at_ = now_;
    }
    end = std::min(end, progress_at_ > UINT64_MAX - b.stall_ns ? UINT64_MAX : progress_at_ + b.stall_ns);
  }
  return end;
}

int World::Impl::limited_poll_step() noexcept {
  const std::uint64_t limit = poll_horizon_ == UINT64_MAX ? UINT64_MAX : now_ + poll_horizon_;
  if (link_ != nullptr) {
    shared_step(limit, /*passive=*/limit == UINT64_MAX, /*may_throw=*/false);
    return budget_report_.empty() ? 0 : ETIMEDOUT;
  }
  if (!budgeted_) {
    const Entry entry(*this);
    events_.step<true>(limit, now_, *this);
    return 0;
  }
  budgeted_step(limit, /*may_throw=*/false);
  return budget_report_.empty() ? 0 : ETIMEDOUT;
}

bool World::Impl::budgeted_step(std::uint64_t limit, bool may_throw) {
  const Entry entry(*this);
  const Budget& b = config_.budget;
  std::string why;
  if (budget_report_.empty()) {
    if (b.events != 0 && events_.events_run() >= b.events) {
      why = std::to_string(events_.events_run()) + " events ran, the budget's limit";
    } else if (const std::uint64_t end = budget_end(); limit <= end) {
      return events_.step<true>(limit, now_, *this);
    } else {
      if (events_.step<true>(end, now_, *this)) return true;
      while (events_.drop_idle_timer_on_top(*this)) {
      }
      const std::uint64_t next = events_.earliest();
      if (next == UINT64_MAX || next > limit) return false;  // nothing to run anyway
      why = "the next event, at " + std::to_string(next) + " ns of virtual time, is ";
      if (b.virtual_ns != 0 && end == b.virtual_ns) {
        why += "past the budget's limit of " + std::to_string(b.virtual_ns) + " ns";
      } else {
        why += "more than the budget's " + std::to_string(b.stall_ns) +
               " ns past the last progress (a work request posted, completed or discarded, a "
               "CM event or message), at " + std::to_string(progress_at_) + " ns";
      }
    }
    budget_report_ = "verbsim: run budget exceeded (" + b.to_string() + "): " + why +
                     "; the run is stopped. What every QP is waiting for:\n" +
                     owner_->waiting() + owner_->report();
    if (!may_throw) std::fputs(budget_report_.c_str(), stderr);
  }
  if (may_throw) throw BudgetExceeded(budget_report_);
  return false;
}

std::uint64_t World::Impl::next_busy_time() {
  while (events_.drop_idle_timer_on_top(*this)) {
  }
  return events_.earliest();
}

void World::Impl::run_until(std::uint64_t deadline) {
  if (link_ != nullptr) return shared_run_until(deadline, /*pace=*/false);
  for (;;) {
    // Stop before the first event later than the deadline (idle timers do not count).
    while (events_.drop_idle_timer_on_top(*this)) {
    }
    if (events_.earliest() > deadline) break;
    step();
  }
  if (deadline > now_) now_ = deadline;
}

bool World::Impl::port_up(std::uint32_t dev, std::uint8_t port) const noexcept {
  if (dev >= devs_.size()) return false;
  const DevCore& d = *devs_[dev];
  return d.ports[port_index(d, port)].attr.state == PortState::active;
}

std::uint64_t World::Impl::send_faulty_packet(const Event& packet, std::uint32_t psn) {
  const std::uint32_t from_dev = packet.kind == EvKind::deliver ? packet.src_dev : packet.dev;
  if (faults_.links_changed() &&
      (!port_up(packet.src_dev, 1) || !port_up(packet.dev, 1) || !port_up(from_dev, 1))) {
    if (observing_) packet_seen(packet, psn, PacketFate::link_down, packet.time, 0);
    return packet.time;
  }
  const std::uint32_t sender_qpn = packet.kind == EvKind::deliver ? packet.src_qpn : 0;
  const int sender = from_dev < devs_.size() ? static_cast<int>(from_dev) : RuleCheck::kNoDevice;
  const int fired = faults_.first_packet_rule(psn, sender_qpn, packet.qpn, sender);
  if (fired < 0) {
    events_.push_wire(packet);  // on time
    if (observing_) [[unlikely]] {
      packet_seen(packet, psn, PacketFate::delivered, packet.time, 0);
    }
    return packet.time;
  }
  // A packet on time joins its port's FIFO (times there never decrease); one a fault delays
  // goes through the heap. Both are ordered by (time, sequence), so the choice changes nothing
  // but speed.
  const PacketFaults fate =
      faults_.act_on_packet(static_cast<std::size_t>(fired), psn, sender_qpn, packet.qpn, sender);
  const std::uint64_t time = packet.time + fate.delay_ns;
  if (fate.drop) {
    if (observing_) packet_seen(packet, psn, PacketFate::dropped, time, 0);
    return time;
  }
  if (observing_) {
    const PacketFate what = fate.duplicate    ? PacketFate::duplicated
                            : fate.delay_ns != 0 ? PacketFate::delayed
                                                 : PacketFate::delivered;
    packet_seen(packet, psn, what, time, fate.duplicate ? time + fate.duplicate_ns : 0);
  }
  if (fate.delay_ns == 0) {
    events_.push_wire(packet);
    if (!fate.duplicate) return time;
  }
  Event late = packet;
  late.time = time;
  if (fate.delay_ns != 0) schedule(late);
  if (fate.duplicate) {
    late.time += fate.duplicate_ns;
    schedule(late);
  }
  return late.time;
}

World::Impl::GidPlace World::Impl::locate(const Gid& gid) const noexcept {
  for (const auto& dev : devs_) {
    for (std::size_t p = 0; p < dev->ports.size(); ++p) {
      const auto& gids = dev->ports[p].gids;
      for (std::size_t i = 0; i < gids.size(); ++i) {
        if (gids[i] == gid) {
          return {dev->index, static_cast<std::uint8_t>(p + 1), static_cast<std::uint8_t>(i)};
        }
      }
    }
  }
  return {};
}

// ---------------------------------------------------------------------------------------------

namespace {
// What the environment overrides in every world, however its config was made: the seed, the
// fault rules of VERBSIM_FAULTS (appended, unless the config opts out), and what the world
// writes about itself (which changes nothing in the run).
Config with_env_overrides(Config c) {
  c.seed = env_u64("VERBSIM_SEED", c.seed);
  if (c.env_faults) {
    c.faults.append(FaultPlan::from_env());
    c.env_faults = false;  // config() shows the plan the world runs
  }
  if (const char* p = std::getenv("VERBSIM_PCAP"); p != nullptr && *p != '\0') c.pcap = p;
  if (const char* t = std::getenv("VERBSIM_TIMELINE"); t != nullptr && *t != '\0') c.timeline = t;
  if (stats_from_env()) c.stats = true;
  if (const char* f = std::getenv("VERBSIM_FABRIC"); f != nullptr && *f != '\0') c.fabric = f;
  if (const char* b = std::getenv("VERBSIM_BUDGET"); b != nullptr && *b != '\0') {
    c.budget = Budget::parse(b);  // "off": none, not even the default
  } else if (!c.budget.enabled()) {
    c.budget = default_budget();
  }
  return c;
}
}  // namespace

void World::Impl::report_unmapped() {
  std::uintptr_t at[8];
  const std::size_t n = user_memory::take_faults(at, std::size(at));
  for (std::size_t i = 0; i < n; ++i) {
    const MrCore* found = nullptr;
    const DevCore* on = nullptr;
    for (const auto& d : devs_) {
      d->mrs.for_each([&](const MrCore& mr) {
        const auto base = reinterpret_cast<std::uintptr_t>(mr.addr);
        if (found == nullptr && at[i] >= base && at[i] - base < mr.length) {
          found = &mr;
          on = d.get();
        }
      });
    }
    if (found == nullptr) {
      std::fprintf(stderr,
                   "verbsim: internal error: the simulator touched unmapped memory at %#lx, "
                   "which no MR covers (seed %llu)\n",
                   static_cast<unsigned long>(at[i]),
                   static_cast<unsigned long long>(config_.seed));
      std::abort();
    }
    if (std::find(unmapped_warned_.begin(), unmapped_warned_.end(), found->key) !=
        unmapped_warned_.end()) {
      continue;
    }
    unmapped_warned_.push_back(found->key);
    std::fprintf(stderr,
                 "verbsim: MR lkey %#x (addr %p, length %zu) of %s: the program unmapped its "
                 "memory at %#lx while it was registered. A NIC pins registered pages; here a "
                 "zero page now stands in for it: what arrives there lands where the program "
                 "no longer looks, reads of it give zeros. Deregister memory before freeing "
                 "it.\n",
                 found->key, static_cast<const void*>(found->addr), found->length,
                 on->name.c_str(), static_cast<unsigned long>(at[i]));
  }
}

void notify_created(World& w);
void notify_destroyed(World& w);

World::World(Config config) {
  // Where VERBSIM_FAULTS' rules begin in the plan (verb, packet, cm rules): after the config's.
  std::array<std::size_t, 3> env_rules{};
  if (config.env_faults) {
    env_rules = {config.faults.verbs.size(), config.faults.packets.size(),
                 config.faults.cm.size()};
  }
  impl_ = std::make_unique<Impl>(with_env_overrides(std::move(config)));
  if (const char* f = std::getenv("VERBSIM_FAULT_FIRINGS"); f != nullptr && *f != '\0') {
    impl_->faults().report_firings(f, env_rules);
  }
  impl_->set_owner(this);
  notify_created(*this);
}

World::~World() {
  // A child of fork() that destroys its copy of its parent's world (it returns through its
  // destructors) leaves the parent's capture files and fabric membership to the parent.
  if (!impl_->inherited()) {
    if (const std::string unnamed = impl_->faults().unnamed_rules(); !unnamed.empty()) {
      std::fprintf(stderr, "verbsim: %s", unnamed.c_str());
    }
    impl_->finish_observers();
    impl_->leave_fabric();
  }
  notify_destroyed(*this);
  // A context's core lives while the context or any object made from it does.
  std::size_t alive = 0;
  for (const auto& d : impl_->devices()) alive += d->contexts.size();
  if (alive != 0) {
    std::fprintf(stderr,
                 "verbsim: sim::World (seed %llu) destroyed while %zu of its contexts, or objects "
                 "made from them, are alive: any later call on them, their destruction too, "
                 "uses the freed world. Destroy every object before its world (declare the "
                 "world first, so that it goes last).%s\n",
                 static_cast<unsigned long long>(impl_->config().seed), alive,
                 VERBSIM_ASSERTS_ON ? " Aborting (Debug and sanitizer builds)." : "");
    if (VERBSIM_ASSERTS_ON) std::abort();
  }
}

std::vector<DeviceInfo> World::devices() {
  std::vector<DeviceInfo> out;
  for (const auto& d : impl_->devices()) out.push_back({"sim", d->name, d->guid});
  return out;
}

std::unique_ptr<Context> World::open(std::string_view device) {
  for (const auto& d : impl_->devices()) {
    if (device.empty() || d->name == device) return std::make_unique<SimContext>(*impl_, *d);
  }
  std::string names;
  for (const auto& d : impl_->devices()) names += (names.empty() ? "" : ", ") + d->name;
  throw_verb_error("ibv_open_device", ENODEV,
                  "no simulated device '" + std::string(device) + "'; this world has " + names);
}

void World::name(const QueuePair& qp, const std::string& name) {
  const auto* sim_qp = dynamic_cast<const SimQp*>(&qp);
  if (sim_qp == nullptr || !sim_qp->of_world(*impl_)) {
    throw std::invalid_argument("World::name: QP " + std::to_string(qp.qp_num()) +
                                " is not a QP of this simulated world");
  }
  impl_->faults().name_qp(name, qp.qp_num(), sim_qp->device_index());
}

std::string World::unnamed_rules() const { return impl_->faults().unnamed_rules(); }

const Config& World::config() const noexcept { return impl_->config(); }
std::uint64_t World::seed() const noexcept { return impl_->config().seed; }
std::uint64_t World::now() const noexcept { return impl_->now(); }
bool World::step() { return impl_->step(); }
bool World::step_until(std::uint64_t deadline_ns) { return impl_->step_until(deadline_ns); }
void World::set_poll_horizon(std::uint64_t ns) noexcept { impl_->set_poll_horizon(ns); }

void World::run_until(std::uint64_t deadline_ns) { impl_->run_until(deadline_ns); }

std::uint64_t World::run_until_idle(std::uint64_t max_events) {
  std::uint64_t n = 0;
  while (n < max_events && impl_->step()) ++n;
  return n;
}

// A world of a shared fabric always has something pending: what the other processes send.
std::size_t World::pending_events() const noexcept {
  return impl_->pending() + (impl_->shared() ? 1 : 0);
}
std::uint64_t World::digest() const noexcept { return impl_->digest().value(); }

std::string World::digest_hex() const {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(digest()));
  return buf;
}

Accounting World::accounting() const noexcept {
  Accounting a = impl_->acct();
  for (const auto& d : impl_->devices()) {
    d->qps.for_each([&a](const SimQp& qp) { a.outstanding += qp.outstanding(); });
    for (const SrqCore* srq : d->srqs) a.outstanding += srq->rq.size();
  }
  return a;
}

void World::add_observer(Observer& observer) { impl_->add_observer(&observer); }

void World::finish_observers() { impl_->finish_observers(); }
void World::leave_fabric() { impl_->leave_fabric(); }
bool World::shared() const noexcept { return impl_->shared(); }
void World::pace_until(std::uint64_t deadline_ns) {
  if (!impl_->shared()) return run_until(deadline_ns);
  impl_->pace_until(deadline_ns);
}

void World::catch_up() {
  if (impl_->shared()) impl_->catch_up();
}
std::string World::process_file(const std::string& path) const {
  return sim::process_file(path, impl_->shared());
}

Observer& World::own_observer(std::unique_ptr<Observer> observer) {
  Observer& o = *observer;
  impl_->own_observer(std::move(observer));
  return o;
}

Stats World::stats() const {
  return impl_->stats_observer() != nullptr ? impl_->stats_observer()->stats() : Stats{};
}

std::string World::report() const {
  const Config& c = impl_->config();
  const std::string profile = c.profile_file ? "'" + impl_->traits().name + "' (a file, family " +
                                                   std::string(to_string(c.profile)) + ")"
                                             : std::string(to_string(c.profile));
  std::string out = "seed " + std::to_string(c.seed) + ", profile " + profile + ", fault plan '" +
                    c.faults.to_string() +
                    "', virtual time " + std::to_string(impl_->now()) + " ns\n";
  if (const FlightRecorder* r = impl_->recorder(); r != nullptr) return out + r->report();
  return out + "last fabric events (attach a sim::FlightRecorder for verbs and packets):\n" +
         recent_history();
}

std::string World::waiting() const {
  std::string out;
  for (const auto& d : impl_->devices()) {
    d->qps.for_each([&](const SimQp& qp) { out += "  " + d->name + " " + qp.waiting() + "\n"; });
  }
  return out.empty() ? "  (no QP)\n" : out;
}

std::string World::recent_history() const {
  static constexpr const char* kinds[] = {"deliver", "ack", "nak", "timeout", "rnr_retry", "fault", "wake", "cm"};
  std::string out;
  impl_->events().for_each_recent([&out](const Event& e) {
    char line[160];
    std::snprintf(line, sizeof line, "t=%llu ns %s dev=%u qp=%u from=%u:%u wqe=%u epoch=%u code=%u\n",
                  static_cast<unsigned long long>(e.time), kinds[static_cast<int>(e.kind)],
                  static_cast<unsigned>(e.dev), e.qpn, e.src_dev, e.src_qpn, e.index, e.epoch,
                  static_cast<unsigned>(e.code));
    out += line;
  });
  return out;
}


}  // namespace verbsim::sim
