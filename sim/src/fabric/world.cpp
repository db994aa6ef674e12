#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "transport/qp.hpp"
#include "fibers/wait.hpp"
#include "verbsim/error.hpp"

namespace verbsim::sim {

namespace {

std::uint64_t env_u64(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const unsigned long long x = std::strtoull(v, &end, 0);
  if (end == v || *end != '\0') {
    throw std::invalid_argument(std::string(name) + "='" + v + "' is not a number");
  }
  return x;
}

}  // namespace


Config Config::from_env() {
  Config c;
  c.seed = env_u64("VERBSIM_SEED", c.seed);
  if (const char* p = std::getenv("VERBSIM_PROFILE")) c.profile = parse_profile(p);
  c.devices = static_cast<int>(env_u64("VERBSIM_SIM_DEVICES", static_cast<std::uint64_t>(c.devices)));
  c.faults = FaultPlan::from_env();
  if (c.devices < 1 || c.devices > 64) throw std::invalid_argument("VERBSIM_SIM_DEVICES must be 1..64");
  c.ports_per_device = static_cast<int>(
      env_u64("VERBSIM_SIM_PORTS", static_cast<std::uint64_t>(c.ports_per_device)));
  if (c.ports_per_device < 1 || c.ports_per_device > 16) {
    throw std::invalid_argument("VERBSIM_SIM_PORTS must be 1..16");
  }
  return c;
}


World::Impl::Impl(Config c) : config(std::move(c)), traits(&ProfileTraits::of(config.profile)), rng(config.seed) {
  digest.add(config.seed);
  history.resize(kHistory);
  for (int d = 0; d < config.devices; ++d) {
    auto dev = std::make_unique<DevCore>();
    dev->index = d;
    dev->name = "sim" + std::to_string(d);
    dev->guid = 0x0200'5eff'fe00'0000ull | (static_cast<std::uint64_t>(d) << 8) | 1;
    for (int p = 0; p < config.ports_per_device; ++p) {
      PortCore port;
      port.attr.state = PortState::active;
      port.attr.max_mtu = Mtu::mtu_4096;
      port.attr.active_mtu = Mtu::mtu_1024;
      port.attr.gid_tbl_len = traits->limits.gid_tbl_len;
      port.attr.pkey_tbl_len = 1;
      port.attr.max_msg_sz = traits->limits.max_msg_sz;
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
  wires.resize(devs.size() * static_cast<std::size_t>(config.ports_per_device));
  busy_wires.assign((wires.size() + 63) / 64, 0);
  const FaultPlan& plan = config.faults;
  for (std::size_t i = 0; i < plan.verbs.size(); ++i) {
    const auto v = static_cast<std::size_t>(plan.verbs[i].verb);
    faults.verbs[v] = true;
    faults.verb_rules[v].emplace_back(plan.verbs[i].when, plan.verbs[i].where,
                                      static_cast<std::uint32_t>(i), devs);
  }
  for (std::size_t i = 0; i < plan.packets.size(); ++i) {
    RuleCheck& r = faults.packet_rules.emplace_back(plan.packets[i].when, plan.packets[i].where,
                                                     static_cast<std::uint32_t>(i), devs);
    r.any_psn = !plan.packets[i].psn.has_value();
    r.psn = plan.packets[i].psn.value_or(0);
  }
  faults.packets = !plan.packets.empty();
  for (std::size_t i = 0; i < plan.timed.size(); ++i) {
    Event e{};
    e.time = plan.timed[i].at_ns;
    e.kind = EvKind::fault;
    e.index = static_cast<std::uint32_t>(i);
    schedule(e);
  }
}

namespace {
struct Later {
  bool operator()(const World::Impl::HeapKey& a, const World::Impl::HeapKey& b) const noexcept {
    return a.time != b.time ? a.time > b.time : a.seq_slot > b.seq_slot;
  }
};
}  // namespace

void World::Impl::schedule(Event e) {
  e.seq = seq++;
  std::uint32_t slot;
  if (free_slots.empty()) {
    slot = static_cast<std::uint32_t>(slab.size());
    slab.push_back(e);
  } else {
    slot = free_slots.back();
    free_slots.pop_back();
    slab[slot] = e;
  }
  heap.push_back({e.time, (e.seq << 24) | slot});
  earliest_scheduled = std::min(earliest_scheduled, e.time);
  std::push_heap(heap.begin(), heap.end(), Later{});
}

inline int World::Impl::next_event(std::uint64_t& time, std::uint64_t& runner_up) const noexcept {
  int best = kNoEvent;
  std::uint64_t best_seq = 0;
  runner_up = UINT64_MAX;
  if (!heap.empty()) {
    best = kHeapEvent;
    time = heap.front().time;
    best_seq = heap.front().seq_slot >> 24;
  }
  if (in_flight == 0) return best;
  for (std::size_t word = 0; word < busy_wires.size(); ++word) {
    for (std::uint64_t bits = busy_wires[word]; bits != 0; bits &= bits - 1) {
      const std::size_t i = word * 64 + static_cast<std::size_t>(std::countr_zero(bits));
      const Event& e = wires[i].front();
      if (best == kNoEvent || e.time < time || (e.time == time && e.seq < best_seq)) {
        if (best != kNoEvent) runner_up = std::min(runner_up, time);
        best = static_cast<int>(i);
        time = e.time;
        best_seq = e.seq;
      } else {
        runner_up = std::min(runner_up, e.time);
      }
    }
  }
  return best;
}

inline void World::Impl::dispatch(const Event& e) {
  digest.add(e.time);
  digest.add((static_cast<std::uint64_t>(e.kind) << 56) | (static_cast<std::uint64_t>(e.code) << 48) |
             (static_cast<std::uint64_t>(e.dev) << 32) | e.qpn);
  digest.add((static_cast<std::uint64_t>(e.index) << 32) | e.epoch);
  if (e.kind >= EvKind::fault) [[unlikely]] {  // not for a QP: fault, wake or cm
    if (e.kind == EvKind::fault) {
      run_timed_fault(config.faults.timed[e.index], e.code == 1);
    } else if (e.kind == EvKind::cm) {
      run_cm_event(e);
    } else {  // sim::sleep_for of a fiber
      auto* queue = reinterpret_cast<WaitQueuePtr*>(static_cast<std::uintptr_t>(e.value));
      if (std::find(sleepers.begin(), sleepers.end(), queue) != sleepers.end()) notify_all(*queue);
    }
    return;
  }
  if (faults.links_changed && e.kind <= EvKind::nak && !port_up(e.dev, 1)) return;  // link down
  SimQp* qp = find_qp(e.dev, e.qpn);
  if (qp == nullptr) return;  // the QP was destroyed meanwhile: the packet or timer is lost
  if (e.kind == EvKind::deliver) [[likely]] {  // one per message: most events
    qp->on_deliver(e);
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
    case EvKind::cm: break;
  }
}

bool World::Impl::drop_idle_timer_on_top() {
  if (heap.empty()) return false;
  const auto slot = static_cast<std::uint32_t>(heap.front().seq_slot & 0xffffff);
  const Event& e = slab[slot];
  if (e.kind == EvKind::timeout) {
    if (SimQp* qp = find_qp(e.dev, e.qpn); qp != nullptr && !qp->drop_idle_timer(e)) return false;
  } else if (e.kind != EvKind::cm || !cm_timer_is_stale(e)) {
    return false;
  }
  std::pop_heap(heap.begin(), heap.end(), Later{});
  heap.pop_back();
  free_slots.push_back(slot);
  return true;
}

inline int World::Impl::next_source(std::uint64_t& time, std::uint64_t& runner_up) noexcept {
  // The wire the last event came from usually holds the next one too (a train of packets):
  // then no scan is needed, as long as nothing scheduled since can come first.
  if (hint_wire >= 0) {
    const std::uint64_t others = std::min(hint_runner_up, earliest_scheduled);
    const std::uint64_t t = wires[static_cast<std::size_t>(hint_wire)].front().time;
    if (t < others) {
      time = t;
      runner_up = others;
      return hint_wire;
    }
  }
  earliest_scheduled = UINT64_MAX;
  int from = next_event(time, runner_up);
  // A timer that would do nothing is dropped rather than run: time must not jump to it (an
  // application that polls an idle CQ just before it posts more work would wait a whole ACK
  // timeout, which no NIC makes it do).
  while (from == kHeapEvent && drop_idle_timer_on_top()) from = next_event(time, runner_up);
  return from;
}

bool World::Impl::step() { return step_impl<false>(UINT64_MAX); }
bool World::Impl::step_until(std::uint64_t limit) { return step_impl<true>(limit); }

template <bool kLimited>
bool World::Impl::step_impl(std::uint64_t limit) {
  std::uint64_t t = 0;
  std::uint64_t runner_up = 0;  // no other source has an event before this
  int from = next_source(t, runner_up);
  if (from == kNoEvent) return false;
  if (kLimited && t > limit) {
    hint_wire = kNoEvent;  // next_source may have spent what its shortcut relies on
    return false;
  }
  if (t > now) now = t;
  for (;;) {
    // The event goes straight into the history ring and runs from there (no handler steps
    // the world, so the slot stays put while it runs).
    Event& e = history[history_next++ % kHistory];
    bool source_has_more;  // its heap or wire holds another event of this instant
    hint_wire = kNoEvent;
    if (from == kHeapEvent) {
      std::pop_heap(heap.begin(), heap.end(), Later{});
      const auto slot = static_cast<std::uint32_t>(heap.back().seq_slot & 0xffffff);
      heap.pop_back();
      e = slab[slot];
      free_slots.push_back(slot);
      source_has_more = !heap.empty() && heap.front().time <= now;
    } else {
      const auto w = static_cast<std::size_t>(from);
      pop_wire(w, e);
      source_has_more = !wires[w].empty() && wires[w].front().time <= now;
    }
    earliest_scheduled = UINT64_MAX;
    dispatch(e);
    // What the handler scheduled may come before the other sources' events.
    runner_up = std::min(runner_up, earliest_scheduled);
    earliest_scheduled = UINT64_MAX;
    if (from >= 0 && !wires[static_cast<std::size_t>(from)].empty()) {
      hint_wire = from;
      hint_runner_up = runner_up;
    }
    // Look again only if something else may belong to this instant: an event that was pending
    // elsewhere, the next one of the same source, or one the handler just scheduled.
    if (!source_has_more && runner_up > now) return true;
    from = next_source(t, runner_up);
    if (from == kNoEvent || t > now) return true;
  }
}

World::Impl::GidPlace World::Impl::locate(const Gid& gid) const noexcept {
  for (const auto& dev : devs) {
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
Config with_env_seed(Config c) {
  c.seed = env_u64("VERBSIM_SEED", c.seed);
  return c;
}
}  // namespace

void notify_created(World& w);
void notify_destroyed(World& w);

World::World(Config config) : impl_(std::make_unique<Impl>(with_env_seed(std::move(config)))) {
  notify_created(*this);
}

World::~World() {
  notify_destroyed(*this);
  if (impl_->open_contexts != 0) {
    std::fprintf(stderr, "verbsim: sim::World destroyed with %d contexts still open\n",
                 impl_->open_contexts);
  }
}

std::vector<DeviceInfo> World::devices() {
  std::vector<DeviceInfo> out;
  for (const auto& d : impl_->devs) out.push_back({"sim", d->name, d->guid});
  return out;
}

std::unique_ptr<Context> World::open(std::string_view device) {
  for (const auto& d : impl_->devs) {
    if (device.empty() || d->name == device) return std::make_unique<SimContext>(*impl_, *d);
  }
  std::string names;
  for (const auto& d : impl_->devs) names += (names.empty() ? "" : ", ") + d->name;
  throw VerbError("ibv_open_device", ENODEV,
                  "no simulated device '" + std::string(device) + "'; this world has " + names);
}

const Config& World::config() const noexcept { return impl_->config; }
std::uint64_t World::seed() const noexcept { return impl_->config.seed; }
std::uint64_t World::now() const noexcept { return impl_->now; }
bool World::step() { return impl_->step(); }
bool World::step_until(std::uint64_t deadline_ns) { return impl_->step_until(deadline_ns); }
void World::set_poll_horizon(std::uint64_t ns) noexcept { impl_->poll_horizon = ns; }

void World::run_until(std::uint64_t deadline_ns) {
  for (;;) {
    // Stop before the first event later than the deadline (idle timers do not count).
    while (impl_->drop_idle_timer_on_top()) {
    }
    std::uint64_t next = UINT64_MAX;
    if (!impl_->heap.empty()) next = impl_->heap.front().time;
    for (const auto& f : impl_->wires) {
      if (!f.empty()) next = std::min(next, f.front().time);
    }
    if (next > deadline_ns) break;
    impl_->step();
  }
  if (deadline_ns > impl_->now) impl_->now = deadline_ns;
}

std::uint64_t World::run_until_idle(std::uint64_t max_events) {
  std::uint64_t n = 0;
  while (n < max_events && impl_->step()) ++n;
  return n;
}

std::size_t World::pending_events() const noexcept { return impl_->pending(); }
std::uint64_t World::digest() const noexcept { return impl_->digest.value(); }

std::string World::digest_hex() const {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(digest()));
  return buf;
}

Accounting World::accounting() const noexcept {
  Accounting a = impl_->acct;
  for (const auto& d : impl_->devs) {
    d->qps.for_each([&a](const SimQp& qp) { a.outstanding += qp.outstanding(); });
    for (const SrqCore* srq : d->srqs) a.outstanding += srq->rq.size();
  }
  return a;
}

std::string World::recent_history() const {
  static constexpr const char* kinds[] = {"deliver", "ack", "nak", "timeout", "rnr_retry", "fault", "wake", "cm"};
  std::string out;
  const std::size_t n = std::min(impl_->history_next, Impl::kHistory);
  for (std::size_t i = impl_->history_next - n; i < impl_->history_next; ++i) {
    const Event& e = impl_->history[i % Impl::kHistory];
    char line[160];
    std::snprintf(line, sizeof line, "t=%llu ns %s dev=%u qp=%u from=%u:%u wqe=%u epoch=%u code=%u\n",
                  static_cast<unsigned long long>(e.time), kinds[static_cast<int>(e.kind)],
                  static_cast<unsigned>(e.dev), e.qpn, e.src_dev, e.src_qpn, e.index, e.epoch,
                  static_cast<unsigned>(e.code));
    out += line;
  }
  return out;
}

void fail(const char* verb, int err, std::string_view detail) { throw VerbError(verb, err, detail); }

}  // namespace verbsim::sim
