// The verb log's decorator: one `final` wrapper per core interface, each forwarding every
// virtual to the backend's object and writing one record after the call (verb_log.hpp).
#include "verbsim/verb_log.hpp"

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <system_error>
#include <unordered_map>
#include <vector>

#include "verbsim/address_handle.hpp"
#include "verbsim/cm.hpp"
#include "verbsim/completion_channel.hpp"
#include "verbsim/completion_queue.hpp"
#include "verbsim/context.hpp"
#include "verbsim/error.hpp"
#include "verbsim/memory_region.hpp"
#include "verbsim/memory_window.hpp"
#include "verbsim/protection_domain.hpp"
#include "verbsim/queue_pair.hpp"
#include "verbsim/shared_receive_queue.hpp"

namespace verbsim {

// ---------------------------------------------------------------------------------------------
// The table

namespace {

struct VerbRow {
  std::string_view name;
  VerbClass cls;
  Crossing mlx5;
  Crossing rxe;
};

constexpr VerbRow kVerbs[] = {
#define VERBSIM_VERB_ROW(id, name, cls, mlx5, rxe) \
  {name, VerbClass::cls, Crossing::mlx5, Crossing::rxe},
    VERBSIM_VERB_TABLE(VERBSIM_VERB_ROW)
#undef VERBSIM_VERB_ROW
};
static_assert(std::size(kVerbs) == kVerbCount);

const VerbRow& row(Verb v) noexcept { return kVerbs[static_cast<std::size_t>(v)]; }

std::string_view errno_name(int err) noexcept {
  switch (err) {
    case EPERM: return "EPERM";
    case ENOENT: return "ENOENT";
    case EINTR: return "EINTR";
    case EIO: return "EIO";
    case EAGAIN: return "EAGAIN";
    case ENOMEM: return "ENOMEM";
    case EACCES: return "EACCES";
    case EFAULT: return "EFAULT";
    case EBUSY: return "EBUSY";
    case EEXIST: return "EEXIST";
    case ENODEV: return "ENODEV";
    case EINVAL: return "EINVAL";
    case ENOSPC: return "ENOSPC";
    case ERANGE: return "ERANGE";
    case EDEADLK: return "EDEADLK";
    case ENOSYS: return "ENOSYS";
    case ENODATA: return "ENODATA";
    case EPROTO: return "EPROTO";
    case EOPNOTSUPP: return "EOPNOTSUPP";
    case EADDRINUSE: return "EADDRINUSE";
    case EADDRNOTAVAIL: return "EADDRNOTAVAIL";
    case ENETUNREACH: return "ENETUNREACH";
    case ECONNREFUSED: return "ECONNREFUSED";
    case ECONNRESET: return "ECONNRESET";
    case ENOTCONN: return "ENOTCONN";
    case ETIMEDOUT: return "ETIMEDOUT";
    case EHOSTUNREACH: return "EHOSTUNREACH";
    case ECANCELED: return "ECANCELED";
    default: return {};
  }
}

std::string_view flag_word(SendFlags f) noexcept {
  switch (f) {
    case SendFlags::fence: return "fence";
    case SendFlags::signaled: return "signaled";
    case SendFlags::solicited: return "solicited";
    case SendFlags::inline_data: return "inline";
    default: return "?";
  }
}

std::uint64_t wall_ns() noexcept {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

}  // namespace

std::string_view verb_name(Verb v) noexcept { return row(v).name; }
VerbClass verb_class(Verb v) noexcept { return row(v).cls; }
Crossing crossing(Verb v, ProviderModel m) noexcept {
  return m == ProviderModel::rxe ? row(v).rxe : row(v).mlx5;
}
std::string_view to_string(VerbClass c) noexcept {
  constexpr std::string_view n[] = {"control", "data", "event"};
  return n[static_cast<std::size_t>(c)];
}
std::string_view to_string(Crossing c) noexcept {
  constexpr std::string_view n[] = {"none", "syscall", "uverbs"};
  return n[static_cast<std::size_t>(c)];
}
std::string_view to_string(ProviderModel m) noexcept {
  return m == ProviderModel::rxe ? "rxe" : "mlx5";
}
ProviderModel provider_for_device(std::string_view name) noexcept {
  return name.starts_with("rxe") ? ProviderModel::rxe : ProviderModel::mlx5;
}

std::string VerbSummary::to_string() const {
  std::string out;
  const auto num = [](std::uint64_t v) { return std::to_string(v); };
  out += "summary model=" + std::string(verbsim::to_string(model));
  if (!model_source.empty()) out += " source=\"" + model_source + "\"";
  out += '\n';
  for (std::size_t i = 0; i < kVerbCount; ++i) {
    if (calls[i] == 0) continue;
    const Verb v = static_cast<Verb>(i);
    out += "summary verb=" + std::string(verb_name(v)) + " class=" +
           std::string(verbsim::to_string(verb_class(v))) + " calls=" + num(calls[i]) +
           " kernel=" + std::string(verbsim::to_string(crossing(v, model))) + '\n';
  }
  for (std::size_t c = 0; c < 3; ++c) {
    out += "summary class=" + std::string(verbsim::to_string(static_cast<VerbClass>(c))) +
           " calls=" + num(per_class[c]) + '\n';
  }
  out += "summary total calls=" + num(total) + " kernel_crossings=" + num(syscalls) +
         " uverbs=" + num(uverbs) + " other_syscalls=" + num(syscalls - uverbs) +
         " userspace=" + num(total - syscalls) + " model=" + std::string(verbsim::to_string(model)) +
         '\n';
  return out;
}

// ---------------------------------------------------------------------------------------------
// Sinks

namespace {

class FileSink final : public VerbLogSink {
 public:
  FileSink(std::FILE* f, bool owned) : f_(f), owned_(owned) {}
  ~FileSink() override {
    if (owned_) {
      std::fclose(f_);
    } else {
      std::fflush(f_);
    }
  }
  void write(std::string_view line) override {
    std::fwrite(line.data(), 1, line.size(), f_);
    std::fputc('\n', f_);
  }
  void flush() override { std::fflush(f_); }

 private:
  std::FILE* f_;
  bool owned_;
};

}  // namespace

std::shared_ptr<VerbLogSink> open_verb_log_sink(const std::string& where) {
  if (where == "stderr") return std::make_shared<FileSink>(stderr, false);
  std::FILE* f = std::fopen(where.c_str(), "w");
  if (f == nullptr) {
    throw std::system_error(errno, std::generic_category(), "VERBSIM_VERB_LOG: " + where);
  }
  return std::make_shared<FileSink>(f, true);
}

// ---------------------------------------------------------------------------------------------
// The log's state and the record builder

// The kernel counts of a summary, from its per-verb counts under its model (which may be
// chosen after the first records: the first device opened).
VerbSummary finish(VerbSummary s) {
  s.uverbs = 0;
  s.syscalls = 0;
  for (std::size_t i = 0; i < kVerbCount; ++i) {
    const Crossing c = crossing(static_cast<Verb>(i), s.model);
    if (c == Crossing::uverbs) s.uverbs += s.calls[i];
    if (c != Crossing::none) s.syscalls += s.calls[i];
  }
  return s;
}

// A context's clock while the context lives: wrappers of its objects may outlive it.
struct ClockLink {
  const Clock* clock = nullptr;
};

struct VerbLog::State {
  explicit State(VerbLogOptions o) : options(std::move(o)), start_wall(wall_ns()) {
    line.reserve(1024);
    if (options.provider) {
      summary.model = *options.provider;
      summary.model_source = options.provider_source;
      model_known = true;
    }
  }
  ~State() {
    if (options.summary_at_end) print_summary();
  }

  void print_summary() {
    std::lock_guard lock(mu);
    std::string text = finish(summary).to_string();
    std::string_view rest = text;
    while (!rest.empty()) {
      const auto nl = rest.find('\n');
      options.sink->write(rest.substr(0, nl));
      rest.remove_prefix(nl + 1);
    }
    options.sink->flush();
  }

  void device_opened(std::string_view name) {
    std::lock_guard lock(mu);
    if (model_known) return;
    summary.model = provider_for_device(name);
    summary.model_source = "device " + std::string(name);
    model_known = true;
  }

  // Object numbers (QPs are named by their qp_num instead).
  std::uint32_t next_id(std::size_t kind) {
    std::lock_guard lock(mu);
    return ++ids[kind];
  }

  // Inner object -> its wrapper, for what backends hand back (events, CmId::qp()).
  void map(const void* inner, void* outer) {
    std::lock_guard lock(map_mu);
    outer_of[inner] = outer;
  }
  void unmap(const void* inner) {
    std::lock_guard lock(map_mu);
    outer_of.erase(inner);
  }
  void* find(const void* inner) {
    if (inner == nullptr) return nullptr;
    std::lock_guard lock(map_mu);
    const auto it = outer_of.find(inner);
    return it == outer_of.end() ? nullptr : it->second;
  }

  // The clock of backend-level and CM records: the first live context's.
  void add_clock(const std::shared_ptr<ClockLink>& c) {
    std::lock_guard lock(mu);
    clocks.push_back(c);
  }
  std::uint64_t any_clock_ns() {
    std::lock_guard lock(mu);
    for (const auto& weak : clocks) {
      if (auto c = weak.lock(); c && c->clock != nullptr) return c->clock->now_ns();
    }
    return kNoTime;
  }

  static constexpr std::uint64_t kNoTime = ~std::uint64_t{0};

  // The clock of records without a context of their own (backend, CM): the first live
  // context's, the world's virtual time on the simulator.
  struct AnyClock final : Clock {
    explicit AnyClock(State& s) : s_(s) {}
    std::uint64_t now_ns() const noexcept override { return s_.any_clock_ns(); }
    State& s_;
  };
  AnyClock any_clock{*this};
  ClockLink any_link{&any_clock};

  VerbLogOptions options;
  std::uint64_t start_wall;
  std::mutex mu;  // the line, the summary, ids, clocks
  std::string line;
  VerbSummary summary;
  bool model_known = false;
  std::array<std::uint32_t, 16> ids{};
  std::vector<std::weak_ptr<ClockLink>> clocks;
  std::mutex map_mu;
  std::unordered_map<const void*, void*> outer_of;
};

namespace {

using State = VerbLog::State;
using StatePtr = std::shared_ptr<State>;

enum Kind : std::size_t { k_pd, k_mr, k_mw, k_cq, k_ch, k_srq, k_ah, k_cmch, k_cmid };

// When a call started: taken before it, formatted after it.
struct Stamp {
  std::uint64_t t;
  std::uint64_t wall;
};

Stamp stamp(const ClockLink* link) noexcept {
  return {link != nullptr && link->clock != nullptr ? link->clock->now_ns() : State::kNoTime,
          wall_ns()};
}

// One record, built into the log's reusable line under its lock, written when it goes.
class Rec {
 public:
  Rec(State& s, Verb v, Stamp st) : s_(s), lock_(s.mu), line_(s.line) {
    line_.clear();
    if (st.t == State::kNoTime) {
      line_ += "t=-";
    } else {
      line_ += "t=";
      num(st.t);
      line_ += "ns";
    }
    if (s.options.wall_time) {
      const std::uint64_t w = st.wall - s.start_wall;
      line_ += " wall=";
      num(w / 1000);
      line_ += '.';
      char frac[4] = {char('0' + (w / 100) % 10), char('0' + (w / 10) % 10), char('0' + w % 10), 0};
      line_ += frac;
      line_ += "us";
    }
    line_ += ' ';
    line_ += to_string(verb_class(v));
    line_ += ' ';
    line_ += verb_name(v);
    auto& sum = s.summary;
    ++sum.calls[static_cast<std::size_t>(v)];
    ++sum.per_class[static_cast<std::size_t>(verb_class(v))];
    ++sum.total;
  }
  ~Rec() {
    s_.options.sink->write(line_);
  }
  Rec(const Rec&) = delete;
  Rec& operator=(const Rec&) = delete;

  Rec& word(std::string_view w) {
    line_ += ' ';
    line_ += w;
    return *this;
  }
  Rec& raw(std::string_view w) {
    line_ += w;
    return *this;
  }
  Rec& kv(std::string_view k, std::uint64_t v) {
    line_ += ' ';
    line_ += k;
    line_ += '=';
    num(v);
    return *this;
  }
  Rec& kv(std::string_view k, std::string_view v) {
    line_ += ' ';
    line_ += k;
    line_ += '=';
    line_ += v;
    return *this;
  }
  Rec& hex(std::string_view k, std::uint64_t v) {
    line_ += ' ';
    line_ += k;
    line_ += "=0x";
    char b[20];
    const auto r = std::to_chars(b, b + sizeof b, v, 16);
    line_.append(b, r.ptr);
    return *this;
  }
  // An object reference: "qp=17", or "cq=-" for none.
  Rec& obj(std::string_view k, std::uint64_t id) {
    return id == 0 ? kv(k, std::string_view("-")) : kv(k, id);
  }
  Rec& arrow() {
    line_ += " ->";
    return *this;
  }
  Rec& ok() { return arrow().word("0"); }
  Rec& err(int e, std::string_view text = {}) {
    arrow();
    if (const auto n = errno_name(e); !n.empty()) {
      word(n);
    } else {
      kv("errno", static_cast<std::uint64_t>(e));
    }
    if (!text.empty()) {
      line_ += " \"";
      line_ += text;
      line_ += '"';
    }
    return *this;
  }
  Rec& result(int e, std::string_view text = {}) { return e == 0 ? ok() : err(e, text); }
  void num(std::uint64_t v) {
    char b[24];
    const auto r = std::to_chars(b, b + sizeof b, v);
    line_.append(b, r.ptr);
  }

 private:
  State& s_;
  std::lock_guard<std::mutex> lock_;
  std::string& line_;
};

// Runs a control-path call; on an exception logs it with its errno and rethrows it unchanged.
template <class Call, class Args, class Done>
auto control(State& s, Verb v, const ClockLink* clk, Args&& args, Call&& call, Done&& done)
    -> decltype(call()) {
  const Stamp st = stamp(clk);
  try {
    if constexpr (std::is_void_v<decltype(call())>) {
      call();
      Rec r(s, v, st);
      args(r);
      done(r);
    } else {
      auto out = call();
      Rec r(s, v, st);
      args(r);
      done(r, out);
      return out;
    }
  } catch (const std::system_error& e) {
    Rec r(s, v, st);
    args(r);
    r.err(e.code().value(), e.what());
    throw;
  } catch (const std::exception& e) {
    Rec r(s, v, st);
    args(r);
    r.arrow().word("exception").raw(" \"").raw(e.what()).raw("\"");
    throw;
  }
}

constexpr auto no_args = [](Rec&) {};
constexpr auto done_ok = [](Rec& r) { r.ok(); };

// ---------------------------------------------------------------------------------------------
// Wrappers

class LoggedCtx;
class LoggedPd;
class LoggedMr;
class LoggedMw;
class LoggedCq;
class LoggedChannel;
class LoggedQp;
class LoggedSrq;
class LoggedAh;
class LoggedCmChannel;
class LoggedCmId;

// What every resource wrapper of a context holds.
struct Common {
  StatePtr log;
  std::shared_ptr<ClockLink> clk;
  std::string dev;
};

template <class I>
I* inner_of(I* x) noexcept {
  return x == nullptr ? nullptr : &unlogged(*x);
}
template <class I>
const I* inner_of(const I* x) noexcept {
  return x == nullptr ? nullptr : &unlogged(const_cast<I&>(*x));
}

std::uint32_t id_of(const CompletionQueue* cq) noexcept;
std::uint32_t id_of(const SharedReceiveQueue* srq) noexcept;
std::uint32_t id_of(const CompletionChannel* ch) noexcept;
std::uint32_t id_of(const AddressHandle* ah) noexcept;
std::uint32_t id_of(const MemoryRegion* mr) noexcept;
std::uint32_t id_of(const MemoryWindow* mw) noexcept;
std::uint32_t id_of(const ProtectionDomain* pd) noexcept;

// Destruction of a wrapper not destroyed through its verb: the backend's object goes too (its
// unique_ptr), which runs the verb implicitly; logged as the verb with "implicit".
template <class Self, class Inner>
void implicit_destroy(Self& self, std::unique_ptr<Inner>& inner, Verb v, bool destroyed,
                      const char* key, std::uint64_t id) {
  if (!inner) return;
  const Stamp st = stamp(self.c.clk.get());
  self.c.log->unmap(inner.get());
  inner.reset();
  if (destroyed) return;
  Rec r(*self.c.log, v, st);
  r.obj(key, id).ok().word("implicit");
}

template <class Self, class Inner>
void explicit_destroy(Self& self, Inner& inner, Verb v, const char* key, std::uint64_t id,
                      bool& destroyed) {
  control(*self.c.log, v, self.c.clk.get(), [&](Rec& r) { r.obj(key, id); },
          [&] { inner.destroy(); }, done_ok);
  destroyed = true;
}

class LoggedMr final : public MemoryRegion {
 public:
  LoggedMr(Common common, std::unique_ptr<MemoryRegion> in)
      : c(std::move(common)), in_(std::move(in)), id(c.log->next_id(k_mr)) {
    c.log->map(in_.get(), this);
  }
  ~LoggedMr() override { implicit_destroy(*this, in_, Verb::dereg_mr, destroyed_, "mr", id); }
  void destroy() override { explicit_destroy(*this, *in_, Verb::dereg_mr, "mr", id, destroyed_); }
  void* addr() const noexcept override { return in_->addr(); }
  std::uint64_t iova() const noexcept override { return in_->iova(); }
  std::size_t length() const noexcept override { return in_->length(); }
  std::uint32_t lkey() const noexcept override { return in_->lkey(); }
  std::uint32_t rkey() const noexcept override { return in_->rkey(); }
  Access access() const noexcept override { return in_->access(); }
  void rereg(const MrChange& change) override {
    MrChange ch = change;
    ch.pd = inner_of(change.pd);
    control(
        *c.log, Verb::rereg_mr, c.clk.get(),
        [&](Rec& r) {
          r.obj("mr", id);
          if (change.pd != nullptr) r.obj("pd", id_of(change.pd));
          if (change.addr != nullptr) r.hex("addr", reinterpret_cast<std::uintptr_t>(change.addr)).kv("len", change.length);
          if (change.access) r.hex("access", static_cast<std::uint32_t>(*change.access));
        },
        [&] { in_->rereg(ch); }, [&](Rec& r) { r.ok().hex("lkey", lkey()).hex("rkey", rkey()); });
  }
  MemoryRegion& inner() noexcept { return *in_; }

  Common c;

 private:
  std::unique_ptr<MemoryRegion> in_;
  bool destroyed_ = false;

 public:
  const std::uint32_t id;
};

class LoggedMw final : public MemoryWindow {
 public:
  LoggedMw(Common common, std::unique_ptr<MemoryWindow> in)
      : c(std::move(common)), in_(std::move(in)), id(c.log->next_id(k_mw)) {}
  ~LoggedMw() override { implicit_destroy(*this, in_, Verb::dealloc_mw, destroyed_, "mw", id); }
  void destroy() override { explicit_destroy(*this, *in_, Verb::dealloc_mw, "mw", id, destroyed_); }
  MwType type() const noexcept override { return in_->type(); }
  std::uint32_t rkey() const noexcept override { return in_->rkey(); }
  MemoryWindow& inner() noexcept { return *in_; }

  Common c;

 private:
  std::unique_ptr<MemoryWindow> in_;
  bool destroyed_ = false;

 public:
  const std::uint32_t id;
};

class LoggedAh final : public AddressHandle {
 public:
  LoggedAh(Common common, std::unique_ptr<AddressHandle> in)
      : c(std::move(common)), in_(std::move(in)), id(c.log->next_id(k_ah)) {}
  ~LoggedAh() override { implicit_destroy(*this, in_, Verb::destroy_ah, destroyed_, "ah", id); }
  void destroy() override { explicit_destroy(*this, *in_, Verb::destroy_ah, "ah", id, destroyed_); }
  const AhAttr& attr() const noexcept override { return in_->attr(); }
  AddressHandle& inner() noexcept { return *in_; }

  Common c;

 private:
  std::unique_ptr<AddressHandle> in_;
  bool destroyed_ = false;

 public:
  const std::uint32_t id;
};

class LoggedChannel final : public CompletionChannel {
 public:
  LoggedChannel(Common common, std::unique_ptr<CompletionChannel> in)
      : c(std::move(common)), in_(std::move(in)), id(c.log->next_id(k_ch)) {}
  ~LoggedChannel() override {
    implicit_destroy(*this, in_, Verb::destroy_comp_channel, destroyed_, "ch", id);
  }
  void destroy() override {
    explicit_destroy(*this, *in_, Verb::destroy_comp_channel, "ch", id, destroyed_);
  }
  std::error_code get_cq_event(CompletionQueue*& cq, Wait wait) override;
  int fd() const noexcept override { return in_->fd(); }
  CompletionChannel& inner() noexcept { return *in_; }

  Common c;

 private:
  std::unique_ptr<CompletionChannel> in_;
  bool destroyed_ = false;

 public:
  const std::uint32_t id;
};

class LoggedCq final : public CompletionQueue {
 public:
  LoggedCq(Common common, std::unique_ptr<CompletionQueue> in, CompletionChannel* channel)
      : c(std::move(common)), in_(std::move(in)), channel_(channel), id(c.log->next_id(k_cq)) {
    c.log->map(in_.get(), this);
  }
  ~LoggedCq() override { implicit_destroy(*this, in_, Verb::destroy_cq, destroyed_, "cq", id); }
  void destroy() override { explicit_destroy(*this, *in_, Verb::destroy_cq, "cq", id, destroyed_); }

  PollResult poll(std::span<WorkCompletion> out) noexcept override {
    const Stamp st = stamp(c.clk.get());
    const PollResult res = in_->poll(out);
    Rec r(*c.log, Verb::poll_cq, st);
    r.obj("cq", id).kv("max", out.size());
    if (res.err != 0) {
      r.err(res.err);
      if (res.count != 0) r.kv("count", res.count);
    } else {
      r.arrow().raw(" ").num(res.count);
    }
    for (std::uint32_t i = 0; i < res.count; ++i) {
      const WorkCompletion& wc = out[i];
      r.raw(" [wr_id=").num(wc.wr_id);
      r.word(to_string(wc.status)).word(to_string(wc.opcode)).kv("len", wc.byte_len).kv("qp", wc.qp_num);
      if (wc.vendor_err != 0) r.hex("vendor_err", wc.vendor_err);
      if ((wc.wc_flags & (WcFlags::with_imm | WcFlags::with_inv)) != WcFlags::none) {
        r.hex((wc.wc_flags & WcFlags::with_inv) != WcFlags::none ? "inv" : "imm", wc.imm_data);
      }
      r.raw("]");
    }
    return res;
  }
  std::error_code req_notify(bool solicited_only) noexcept override {
    const Stamp st = stamp(c.clk.get());
    const std::error_code e = in_->req_notify(solicited_only);
    Rec r(*c.log, Verb::req_notify_cq, st);
    r.obj("cq", id).kv("solicited_only", solicited_only ? 1 : 0).result(e.value());
    return e;
  }
  void ack_events(unsigned n) noexcept override {
    const Stamp st = stamp(c.clk.get());
    in_->ack_events(n);
    Rec r(*c.log, Verb::ack_cq_events, st);
    r.obj("cq", id).kv("n", n).ok();
  }
  void resize(int cqe) override {
    control(*c.log, Verb::resize_cq, c.clk.get(),
            [&](Rec& r) { r.obj("cq", id).kv("cqe", static_cast<std::uint64_t>(cqe)); },
            [&] { in_->resize(cqe); },
            [&](Rec& r) { r.ok().kv("cqe", static_cast<std::uint64_t>(in_->cqe())); });
  }
  int cqe() const noexcept override { return in_->cqe(); }
  int requested_cqe() const noexcept override { return in_->requested_cqe(); }
  CompletionChannel* channel() const noexcept override { return channel_; }
  CompletionQueue& inner() noexcept { return *in_; }

  Common c;

 private:
  std::unique_ptr<CompletionQueue> in_;
  CompletionChannel* channel_;
  bool destroyed_ = false;

 public:
  const std::uint32_t id;
};

std::error_code LoggedChannel::get_cq_event(CompletionQueue*& cq, Wait wait) {
  const Stamp st = stamp(c.clk.get());
  CompletionQueue* got = nullptr;
  const std::error_code e = in_->get_cq_event(got, wait);
  auto* outer = static_cast<CompletionQueue*>(c.log->find(got));
  if (!e) cq = outer != nullptr ? outer : got;
  Rec r(*c.log, Verb::get_cq_event, st);
  r.obj("ch", id).word(wait == Wait::blocking ? "blocking" : "nonblocking").result(e.value());
  if (!e) r.obj("cq", id_of(outer));
  return e;
}

// Appends what matters of a receive WR.
void format_recv(Rec& r, const RecvWr& wr) {
  std::uint64_t len = 0;
  for (const Sge& s : wr.sg_list) len += s.length;
  r.raw(" [wr_id=").num(wr.wr_id);
  r.kv("len", len);
  if (!wr.sg_list.empty()) r.hex("lkey", wr.sg_list[0].lkey);
  if (wr.sg_list.size() > 1) r.kv("sge", wr.sg_list.size());
  r.raw("]");
}

void format_post(Rec& r, const PostResult& res) {
  if (res.err == 0) {
    r.ok();
  } else {
    r.err(res.err, res.reason).kv("posted", res.posted);
  }
}

class LoggedSrq final : public SharedReceiveQueue {
 public:
  LoggedSrq(Common common, std::unique_ptr<SharedReceiveQueue> in)
      : c(std::move(common)), in_(std::move(in)), id(c.log->next_id(k_srq)) {
    c.log->map(in_.get(), this);
  }
  ~LoggedSrq() override { implicit_destroy(*this, in_, Verb::destroy_srq, destroyed_, "srq", id); }
  void destroy() override { explicit_destroy(*this, *in_, Verb::destroy_srq, "srq", id, destroyed_); }
  PostResult post_recv(std::span<const RecvWr> wrs) noexcept override {
    const Stamp st = stamp(c.clk.get());
    const PostResult res = in_->post_recv(wrs);
    Rec r(*c.log, Verb::post_srq_recv, st);
    r.obj("srq", id).kv("n", wrs.size());
    for (const RecvWr& wr : wrs) format_recv(r, wr);
    format_post(r, res);
    return res;
  }
  void modify(const SrqAttr& attr, SrqAttrMask mask) override {
    control(*c.log, Verb::modify_srq, c.clk.get(),
            [&](Rec& r) {
              r.obj("srq", id).hex("mask", static_cast<std::uint32_t>(mask));
              if ((mask & SrqAttrMask::max_wr) != SrqAttrMask::none) r.kv("max_wr", attr.max_wr);
              if ((mask & SrqAttrMask::limit) != SrqAttrMask::none) r.kv("limit", attr.srq_limit);
            },
            [&] { in_->modify(attr, mask); }, done_ok);
  }
  SrqAttr query() const override {
    return control(*c.log, Verb::query_srq, c.clk.get(), [&](Rec& r) { r.obj("srq", id); },
                   [&] { return in_->query(); },
                   [](Rec& r, const SrqAttr& a) { r.ok().kv("max_wr", a.max_wr).kv("limit", a.srq_limit); });
  }
  SharedReceiveQueue& inner() noexcept { return *in_; }

  Common c;

 private:
  std::unique_ptr<SharedReceiveQueue> in_;
  bool destroyed_ = false;

 public:
  const std::uint32_t id;
};

// Per-thread copies of a post's WRs whose pointers (address handle, bind) name wrappers: grown
// to the largest batch seen, never per WR.
thread_local std::vector<SendWr> t_wrs;
thread_local std::vector<BindMwWr> t_binds;

class LoggedQp final : public QueuePair {
 public:
  LoggedQp(Common common, std::unique_ptr<QueuePair> in, std::uint32_t send_cq, std::uint32_t recv_cq)
      : c(std::move(common)), in_(std::move(in)), qpn_(in_->qp_num()), send_cq_(send_cq), recv_cq_(recv_cq) {
    c.log->map(in_.get(), this);
  }
  ~LoggedQp() override { implicit_destroy(*this, in_, Verb::destroy_qp, destroyed_, "qp", qpn_); }
  void destroy() override { explicit_destroy(*this, *in_, Verb::destroy_qp, "qp", qpn_, destroyed_); }

  std::uint32_t qp_num() const noexcept override { return qpn_; }
  QpType type() const noexcept override { return in_->type(); }
  const QpCap& cap() const noexcept override { return in_->cap(); }
  const QpCap& requested_cap() const noexcept override { return in_->requested_cap(); }
  QpState state() const noexcept override { return in_->state(); }

  PostResult post_send(std::span<const SendWr> wrs) noexcept override {
    const Stamp st = stamp(c.clk.get());
    const PostResult res = in_->post_send(unwrap(wrs));
    Rec r(*c.log, Verb::post_send, st);
    r.kv("dev", std::string_view(c.dev)).obj("qp", qpn_).kv("n", wrs.size());
    for (const SendWr& wr : wrs) {
      std::uint64_t len = 0;
      for (const Sge& s : wr.sg_list) len += s.length;
      r.raw(" [wr_id=").num(wr.wr_id);
      r.word(to_string(wr.opcode)).kv("len", len);
      if (!wr.sg_list.empty()) r.hex("lkey", wr.sg_list[0].lkey);
      if (wr.sg_list.size() > 1) r.kv("sge", wr.sg_list.size());
      switch (wr.opcode) {
        case WrOpcode::rdma_write:
        case WrOpcode::rdma_write_with_imm:
        case WrOpcode::rdma_read:
        case WrOpcode::atomic_cmp_and_swp:
        case WrOpcode::atomic_fetch_and_add:
          r.hex("rkey", wr.rkey).hex("raddr", wr.remote_addr);
          break;
        case WrOpcode::bind_mw:
          r.hex("rkey", wr.rkey);
          if (wr.bind_mw != nullptr) r.obj("mw", id_of(wr.bind_mw->mw));
          break;
        default:
          break;
      }
      if (wr.opcode == WrOpcode::rdma_write_with_imm || wr.opcode == WrOpcode::send_with_imm) {
        r.hex("imm", wr.imm_data);
      }
      if (wr.opcode == WrOpcode::local_inv || wr.opcode == WrOpcode::send_with_inv) {
        r.hex("inv", wr.imm_data);
      }
      if (wr.ah != nullptr) r.obj("ah", id_of(wr.ah)).kv("qpn", wr.remote_qpn).hex("qkey", wr.remote_qkey);
      for (const SendFlags f : {SendFlags::signaled, SendFlags::solicited, SendFlags::inline_data,
                                SendFlags::fence}) {
        if ((wr.flags & f) != SendFlags::none) r.word(flag_word(f));
      }
      r.raw("]");
    }
    format_post(r, res);
    return res;
  }
  PostResult post_recv(std::span<const RecvWr> wrs) noexcept override {
    const Stamp st = stamp(c.clk.get());
    const PostResult res = in_->post_recv(wrs);
    Rec r(*c.log, Verb::post_recv, st);
    r.kv("dev", std::string_view(c.dev)).obj("qp", qpn_).kv("n", wrs.size());
    for (const RecvWr& wr : wrs) format_recv(r, wr);
    format_post(r, res);
    return res;
  }
  PostResult bind_mw(MemoryWindow& mw, const MwBind& bind) noexcept override {
    const Stamp st = stamp(c.clk.get());
    MwBind b = bind;
    b.info.mr = inner_of(bind.info.mr);
    const PostResult res = in_->bind_mw(unlogged(mw), b);
    Rec r(*c.log, Verb::bind_mw, st);
    r.kv("dev", std::string_view(c.dev)).obj("qp", qpn_).raw(" [wr_id=").num(bind.wr_id);
    r.obj("mw", id_of(&mw)).obj("mr", id_of(bind.info.mr)).hex("addr", bind.info.addr);
    r.kv("len", bind.info.length).hex("access", static_cast<std::uint32_t>(bind.info.access));
    if ((bind.flags & SendFlags::signaled) != SendFlags::none) r.word("signaled");
    r.raw("]");
    format_post(r, res);
    if (res.err == 0) r.hex("rkey", mw.rkey());
    return res;
  }
  void modify(const QpAttr& attr, QpAttrMask mask) override {
    const QpState from = in_->state();
    control(*c.log, Verb::modify_qp, c.clk.get(),
            [&](Rec& r) {
              r.kv("dev", std::string_view(c.dev)).obj("qp", qpn_).hex("mask", static_cast<std::uint32_t>(mask));
              if ((mask & QpAttrMask::state) != QpAttrMask::none) {
                r.word(to_string(from)).raw("->").raw(to_string(attr.qp_state));
              }
              if ((mask & QpAttrMask::dest_qpn) != QpAttrMask::none) r.kv("dest_qp", attr.dest_qp_num);
            },
            [&] { in_->modify(attr, mask); }, done_ok);
  }
  QpAttr query(QpAttrMask mask) const override {
    return control(*c.log, Verb::query_qp, c.clk.get(),
                   [&](Rec& r) { r.kv("dev", std::string_view(c.dev)).obj("qp", qpn_).hex("mask", static_cast<std::uint32_t>(mask)); },
                   [&] { return in_->query(mask); },
                   [](Rec& r, const QpAttr& a) { r.ok().kv("state", to_string(a.qp_state)); });
  }
  QueuePair& inner() noexcept { return *in_; }

  Common c;

 private:
  // The WRs as the backend must see them: its own AH, window and MR.
  std::span<const SendWr> unwrap(std::span<const SendWr> wrs) noexcept {
    bool needs = false;
    for (const SendWr& wr : wrs) needs |= wr.ah != nullptr || wr.bind_mw != nullptr;
    if (!needs) return wrs;
    t_wrs.assign(wrs.begin(), wrs.end());
    t_binds.resize(wrs.size());
    for (std::size_t i = 0; i < wrs.size(); ++i) {
      SendWr& w = t_wrs[i];
      w.ah = inner_of(w.ah);
      if (w.bind_mw != nullptr) {
        t_binds[i] = *w.bind_mw;
        t_binds[i].mw = inner_of(t_binds[i].mw);
        t_binds[i].info.mr = inner_of(t_binds[i].info.mr);
        w.bind_mw = &t_binds[i];
      }
    }
    return t_wrs;
  }

  std::unique_ptr<QueuePair> in_;
  std::uint32_t qpn_;
  bool destroyed_ = false;

 public:
  const std::uint32_t send_cq_;
  const std::uint32_t recv_cq_;
};

class LoggedPd final : public ProtectionDomain {
 public:
  LoggedPd(Common common, std::unique_ptr<ProtectionDomain> in)
      : c(std::move(common)), in_(std::move(in)), id(c.log->next_id(k_pd)) {
    c.log->map(in_.get(), this);
  }
  ~LoggedPd() override { implicit_destroy(*this, in_, Verb::dealloc_pd, destroyed_, "pd", id); }
  void destroy() override { explicit_destroy(*this, *in_, Verb::dealloc_pd, "pd", id, destroyed_); }

  std::unique_ptr<MemoryRegion> reg_mr_iova(void* addr, std::size_t length, std::uint64_t iova,
                                            Access access) override {
    return control(
        *c.log, Verb::reg_mr, c.clk.get(),
        [&](Rec& r) {
          r.obj("pd", id).hex("addr", reinterpret_cast<std::uintptr_t>(addr)).kv("len", length);
          if (iova != reinterpret_cast<std::uintptr_t>(addr)) r.hex("iova", iova);
          r.hex("access", static_cast<std::uint32_t>(access));
        },
        [&]() -> std::unique_ptr<MemoryRegion> {
          return std::make_unique<LoggedMr>(c, in_->reg_mr_iova(addr, length, iova, access));
        },
        [](Rec& r, const std::unique_ptr<MemoryRegion>& mr) {
          r.ok().obj("mr", static_cast<LoggedMr&>(*mr).id).hex("lkey", mr->lkey()).hex("rkey", mr->rkey());
        });
  }
  std::unique_ptr<QueuePair> create_qp(const QpInitAttr& attr) override {
    QpInitAttr in = attr;
    in.send_cq = inner_of(attr.send_cq);
    in.recv_cq = inner_of(attr.recv_cq);
    in.srq = inner_of(attr.srq);
    const std::uint32_t scq = id_of(attr.send_cq);
    const std::uint32_t rcq = id_of(attr.recv_cq);
    return control(
        *c.log, Verb::create_qp, c.clk.get(),
        [&](Rec& r) {
          r.obj("pd", id).kv("type", to_string(attr.type)).obj("send_cq", scq).obj("recv_cq", rcq);
          r.obj("srq", id_of(attr.srq)).kv("send_wr", attr.cap.max_send_wr);
          r.kv("recv_wr", attr.cap.max_recv_wr).kv("send_sge", attr.cap.max_send_sge);
          r.kv("recv_sge", attr.cap.max_recv_sge).kv("inline", attr.cap.max_inline_data);
          if (attr.sq_sig_all) r.word("sq_sig_all");
        },
        [&]() -> std::unique_ptr<QueuePair> {
          return std::make_unique<LoggedQp>(c, in_->create_qp(in), scq, rcq);
        },
        [](Rec& r, const std::unique_ptr<QueuePair>& qp) { r.ok().kv("qp", qp->qp_num()); });
  }
  std::unique_ptr<SharedReceiveQueue> create_srq(const SrqInitAttr& attr) override {
    return control(
        *c.log, Verb::create_srq, c.clk.get(),
        [&](Rec& r) { r.obj("pd", id).kv("max_wr", attr.max_wr).kv("max_sge", attr.max_sge); },
        [&]() -> std::unique_ptr<SharedReceiveQueue> {
          return std::make_unique<LoggedSrq>(c, in_->create_srq(attr));
        },
        [](Rec& r, const std::unique_ptr<SharedReceiveQueue>& s) {
          r.ok().obj("srq", static_cast<LoggedSrq&>(*s).id);
        });
  }
  std::unique_ptr<AddressHandle> create_ah(const AhAttr& attr) override {
    return control(
        *c.log, Verb::create_ah, c.clk.get(),
        [&](Rec& r) {
          r.obj("pd", id).kv("port", attr.port_num);
          if (attr.is_global) r.kv("dgid", attr.grh.dgid.to_string()).kv("sgid_index", attr.grh.sgid_index);
        },
        [&]() -> std::unique_ptr<AddressHandle> {
          return std::make_unique<LoggedAh>(c, in_->create_ah(attr));
        },
        [](Rec& r, const std::unique_ptr<AddressHandle>& a) {
          r.ok().obj("ah", static_cast<LoggedAh&>(*a).id);
        });
  }
  std::unique_ptr<MemoryWindow> alloc_mw(MwType type) override {
    return control(
        *c.log, Verb::alloc_mw, c.clk.get(),
        [&](Rec& r) { r.obj("pd", id).kv("type", static_cast<std::uint64_t>(type)); },
        [&]() -> std::unique_ptr<MemoryWindow> {
          return std::make_unique<LoggedMw>(c, in_->alloc_mw(type));
        },
        [](Rec& r, const std::unique_ptr<MemoryWindow>& m) {
          r.ok().obj("mw", static_cast<LoggedMw&>(*m).id).hex("rkey", m->rkey());
        });
  }
  ProtectionDomain& inner() noexcept { return *in_; }

  Common c;

 private:
  std::unique_ptr<ProtectionDomain> in_;
  bool destroyed_ = false;

 public:
  const std::uint32_t id;
};

class LoggedCtx final : public Context {
 public:
  LoggedCtx(StatePtr log, std::unique_ptr<Context> in) : in_(std::move(in)) {
    c.log = std::move(log);
    c.clk = std::make_shared<ClockLink>(ClockLink{&in_->clock()});
    c.dev = in_->info().name;
    c.log->add_clock(c.clk);
    c.log->device_opened(c.dev);
    c.log->map(in_.get(), this);
  }
  ~LoggedCtx() override {
    if (!in_) return;
    const Stamp st = stamp(c.clk.get());
    c.clk->clock = nullptr;
    c.log->unmap(in_.get());
    in_.reset();
    if (destroyed_) return;
    Rec r(*c.log, Verb::close_device, st);
    r.kv("dev", c.dev).ok().word("implicit");
  }
  void destroy() override {
    control(*c.log, Verb::close_device, c.clk.get(), [&](Rec& r) { r.kv("dev", c.dev); },
            [&] { in_->destroy(); }, done_ok);
    destroyed_ = true;
  }
  const DeviceInfo& info() const noexcept override { return in_->info(); }
  DeviceAttr query_device() const override {
    return control(*c.log, Verb::query_device, c.clk.get(), [&](Rec& r) { r.kv("dev", c.dev); },
                   [&] { return in_->query_device(); }, [](Rec& r, const DeviceAttr&) { r.ok(); });
  }
  PortAttr query_port(std::uint8_t port) const override {
    return control(*c.log, Verb::query_port, c.clk.get(),
                   [&](Rec& r) { r.kv("dev", c.dev).kv("port", port); },
                   [&] { return in_->query_port(port); },
                   [](Rec& r, const PortAttr& a) { r.ok().kv("state", static_cast<std::uint64_t>(a.state)); });
  }
  Gid query_gid(std::uint8_t port, int index) const override {
    return control(*c.log, Verb::query_gid, c.clk.get(),
                   [&](Rec& r) { r.kv("dev", c.dev).kv("port", port).kv("index", static_cast<std::uint64_t>(index)); },
                   [&] { return in_->query_gid(port, index); },
                   [](Rec& r, const Gid& g) { r.ok().kv("gid", g.to_string()); });
  }
  std::unique_ptr<ProtectionDomain> alloc_pd() override {
    return control(*c.log, Verb::alloc_pd, c.clk.get(), [&](Rec& r) { r.kv("dev", c.dev); },
                   [&]() -> std::unique_ptr<ProtectionDomain> {
                     return std::make_unique<LoggedPd>(c, in_->alloc_pd());
                   },
                   [](Rec& r, const std::unique_ptr<ProtectionDomain>& pd) {
                     r.ok().obj("pd", static_cast<LoggedPd&>(*pd).id);
                   });
  }
  std::unique_ptr<CompletionChannel> create_comp_channel() override {
    return control(*c.log, Verb::create_comp_channel, c.clk.get(), [&](Rec& r) { r.kv("dev", c.dev); },
                   [&]() -> std::unique_ptr<CompletionChannel> {
                     return std::make_unique<LoggedChannel>(c, in_->create_comp_channel());
                   },
                   [](Rec& r, const std::unique_ptr<CompletionChannel>& ch) {
                     r.ok().obj("ch", static_cast<LoggedChannel&>(*ch).id);
                   });
  }
  std::unique_ptr<CompletionQueue> create_cq(int cqe, CompletionChannel* channel, int comp_vector,
                                             CqCreateFlags flags) override {
    return control(
        *c.log, Verb::create_cq, c.clk.get(),
        [&](Rec& r) {
          r.kv("dev", c.dev).kv("cqe", static_cast<std::uint64_t>(cqe)).obj("ch", id_of(channel));
          r.kv("vector", static_cast<std::uint64_t>(comp_vector));
          if (any(flags, CqCreateFlags::ignore_overrun)) r.kv("flags", "ignore_overrun");
        },
        [&]() -> std::unique_ptr<CompletionQueue> {
          return std::make_unique<LoggedCq>(
              c, in_->create_cq(cqe, inner_of(channel), comp_vector, flags), channel);
        },
        [](Rec& r, const std::unique_ptr<CompletionQueue>& cq) {
          r.ok().obj("cq", static_cast<LoggedCq&>(*cq).id).kv("cqe", static_cast<std::uint64_t>(cq->cqe()));
        });
  }
  std::error_code get_async_event(AsyncEvent& event, Wait wait) override {
    const Stamp st = stamp(c.clk.get());
    const std::error_code e = in_->get_async_event(event, wait);
    Rec r(*c.log, Verb::get_async_event, st);
    r.kv("dev", c.dev).word(wait == Wait::blocking ? "blocking" : "nonblocking").result(e.value());
    if (!e) {
      if (auto* q = static_cast<QueuePair*>(c.log->find(event.qp))) event.qp = q;
      if (auto* q = static_cast<CompletionQueue*>(c.log->find(event.cq))) event.cq = q;
      if (auto* q = static_cast<SharedReceiveQueue*>(c.log->find(event.srq))) event.srq = q;
      r.word(to_string(event.type));
      if (event.qp != nullptr) r.kv("qp", event.qp_num);
      if (event.cq != nullptr) r.obj("cq", id_of(event.cq));
      if (event.srq != nullptr) r.obj("srq", id_of(event.srq));
      if (event.port_num != 0) r.kv("port", event.port_num);
    }
    return e;
  }
  int async_fd() const noexcept override { return in_->async_fd(); }
  const Clock& clock() const noexcept override { return in_->clock(); }
  Context& inner() noexcept { return *in_; }

  Common c;

 private:
  std::unique_ptr<Context> in_;
  bool destroyed_ = false;
};

template <class W, class I>
std::uint32_t id_of_impl(const I* x) noexcept {
  if (x == nullptr) return 0;
  const auto* w = dynamic_cast<const W*>(x);
  return w == nullptr ? 0 : w->id;
}
std::uint32_t id_of(const CompletionQueue* x) noexcept { return id_of_impl<LoggedCq>(x); }
std::uint32_t id_of(const SharedReceiveQueue* x) noexcept { return id_of_impl<LoggedSrq>(x); }
std::uint32_t id_of(const CompletionChannel* x) noexcept { return id_of_impl<LoggedChannel>(x); }
std::uint32_t id_of(const AddressHandle* x) noexcept { return id_of_impl<LoggedAh>(x); }
std::uint32_t id_of(const MemoryRegion* x) noexcept { return id_of_impl<LoggedMr>(x); }
std::uint32_t id_of(const MemoryWindow* x) noexcept { return id_of_impl<LoggedMw>(x); }
std::uint32_t id_of(const ProtectionDomain* x) noexcept { return id_of_impl<LoggedPd>(x); }

// ---------------------------------------------------------------------------------------------
// Connection manager

class LoggedCmId final : public CmId {
 public:
  LoggedCmId(StatePtr log, std::unique_ptr<CmId> in)
      : log_(std::move(log)), in_(std::move(in)), id(log_->next_id(k_cmid)) {
    log_->map(in_.get(), this);
  }
  ~LoggedCmId() override {
    const Stamp st = stamp(&log_->any_link);
    log_->unmap(in_.get());
    in_.reset();
    Rec r(*log_, Verb::cm_destroy_id, st);
    r.kv("cm_id", id).ok();
  }
  void bind_addr(const SockAddr& a) override {
    call(Verb::cm_bind_addr, [&](Rec& r) { r.kv("addr", a.to_string()); }, [&] { in_->bind_addr(a); });
  }
  void listen(int backlog) override {
    call(Verb::cm_listen, [&](Rec& r) { r.kv("backlog", static_cast<std::uint64_t>(backlog)); },
         [&] { in_->listen(backlog); });
  }
  void resolve_addr(const SockAddr& dst, int timeout_ms) override {
    call(Verb::cm_resolve_addr, [&](Rec& r) { r.kv("dst", dst.to_string()); },
         [&] { in_->resolve_addr(dst, timeout_ms); });
  }
  void resolve_route(int timeout_ms) override {
    call(Verb::cm_resolve_route, no_args, [&] { in_->resolve_route(timeout_ms); });
  }
  void connect(QueuePair& qp, const ConnParam& p) override {
    qp_ = &qp;
    call(Verb::cm_connect, [&](Rec& r) { r.kv("qp", qp.qp_num()); },
         [&] { in_->connect(unlogged(qp), p); });
  }
  void accept(QueuePair& qp, const ConnParam& p) override {
    qp_ = &qp;
    call(Verb::cm_accept, [&](Rec& r) { r.kv("qp", qp.qp_num()); },
         [&] { in_->accept(unlogged(qp), p); });
  }
  void reject(std::span<const std::uint8_t> data) override {
    call(Verb::cm_reject, [&](Rec& r) { r.kv("private_data", data.size()); }, [&] { in_->reject(data); });
  }
  void disconnect() override { call(Verb::cm_disconnect, no_args, [&] { in_->disconnect(); }); }
  void connect_own_qp(std::uint32_t qpn, const ConnParam& p) override {
    call(Verb::cm_connect, [&](Rec& r) { r.kv("qp", qpn).word("own_qp"); },
         [&] { in_->connect_own_qp(qpn, p); });
  }
  void accept_own_qp(std::uint32_t qpn, const ConnParam& p) override {
    call(Verb::cm_accept, [&](Rec& r) { r.kv("qp", qpn).word("own_qp"); },
         [&] { in_->accept_own_qp(qpn, p); });
  }
  QpAttrMask init_qp_attr(QpState state, QpAttr& attr) const override {
    return control(*log_, Verb::cm_init_qp_attr, &log_->any_link,
                   [&](Rec& r) { r.kv("cm_id", id).kv("state", to_string(state)); },
                   [&] { return in_->init_qp_attr(state, attr); },
                   [](Rec& r, QpAttrMask m) { r.ok().hex("mask", static_cast<std::uint32_t>(m)); });
  }
  void establish() override { call(Verb::cm_establish, no_args, [&] { in_->establish(); }); }
  void migrate(CmEventChannel& to) override;
  std::string device_name() const override { return in_->device_name(); }
  std::uint8_t port_num() const noexcept override { return in_->port_num(); }
  SockAddr local_addr() const override { return in_->local_addr(); }
  SockAddr peer_addr() const override { return in_->peer_addr(); }
  QueuePair* qp() const noexcept override {
    QueuePair* q = in_->qp();
    if (q == nullptr) return nullptr;
    if (qp_ != nullptr && &unlogged(*qp_) == q) return qp_;
    auto* outer = static_cast<QueuePair*>(log_->find(q));
    return outer != nullptr ? outer : q;
  }
  CmId& inner() noexcept { return *in_; }

 private:
  template <class Args, class Call>
  void call(Verb v, Args&& args, Call&& fn) {
    control(*log_, v, &log_->any_link, [&](Rec& r) { r.kv("cm_id", id); args(r); }, fn, done_ok);
  }

  StatePtr log_;
  std::unique_ptr<CmId> in_;
  QueuePair* qp_ = nullptr;

 public:
  const std::uint32_t id;
};

class LoggedCmChannel final : public CmEventChannel {
 public:
  LoggedCmChannel(StatePtr log, std::unique_ptr<CmEventChannel> in)
      : log_(std::move(log)), in_(std::move(in)), id(log_->next_id(k_cmch)) {}
  ~LoggedCmChannel() override {
    const Stamp st = stamp(&log_->any_link);
    in_.reset();
    Rec r(*log_, Verb::cm_destroy_event_channel, st);
    r.kv("cm_ch", id).ok();
  }
  std::unique_ptr<CmId> create_id(PortSpace space) override {
    const Stamp st = stamp(&log_->any_link);
    const auto args = [&](Rec& r) {
      r.kv("cm_ch", id).kv("ps", space == PortSpace::tcp ? "TCP" : "UDP");
    };
    try {
      auto out = std::make_unique<LoggedCmId>(log_, in_->create_id(space));
      Rec r(*log_, Verb::cm_create_id, st);
      args(r);
      r.ok().kv("cm_id", out->id);
      return out;
    } catch (const std::system_error& e) {
      Rec r(*log_, Verb::cm_create_id, st);
      args(r);
      r.err(e.code().value(), e.what());
      throw;
    }
  }
  std::error_code get_event(CmEvent& event, Wait wait) override {
    const Stamp st = stamp(&log_->any_link);
    const std::error_code e = in_->get_event(event, wait);
    if (!e) {
      if (event.new_id) event.new_id = std::make_unique<LoggedCmId>(log_, std::move(event.new_id));
      if (auto* o = static_cast<CmId*>(log_->find(event.id))) event.id = o;
      if (auto* o = static_cast<CmId*>(log_->find(event.listen_id))) event.listen_id = o;
    }
    Rec r(*log_, Verb::cm_get_event, st);
    r.kv("cm_ch", id).word(wait == Wait::blocking ? "blocking" : "nonblocking").result(e.value());
    if (!e) {
      r.word(to_string(event.type));
      if (auto* w = dynamic_cast<LoggedCmId*>(event.id)) r.kv("cm_id", w->id);
      if (auto* w = dynamic_cast<LoggedCmId*>(event.listen_id)) r.kv("listen_id", w->id);
      r.kv("status", static_cast<std::uint64_t>(static_cast<std::uint32_t>(event.status)));
    }
    return e;
  }
  int fd() const noexcept override { return in_->fd(); }
  CmEventChannel& inner() noexcept { return *in_; }

 private:
  StatePtr log_;
  std::unique_ptr<CmEventChannel> in_;

 public:
  const std::uint32_t id;
};

void LoggedCmId::migrate(CmEventChannel& to) {
  auto* ch = dynamic_cast<LoggedCmChannel*>(&to);
  call(Verb::cm_migrate_id, [&](Rec& r) { r.obj("cm_ch", ch != nullptr ? ch->id : 0); },
       [&] { in_->migrate(unlogged(to)); });
}

// ---------------------------------------------------------------------------------------------
// Backend

class LoggedBackend final : public Backend {
 public:
  LoggedBackend(StatePtr log, std::unique_ptr<Backend> in) : log_(std::move(log)), in_(std::move(in)) {}
  std::string_view name() const noexcept override { return in_->name(); }
  std::vector<DeviceInfo> devices() override {
    const Stamp st = stamp(&log_->any_link);
    try {
      auto out = in_->devices();
      Rec r(*log_, Verb::get_device_list, st);
      r.arrow().raw(" ").num(out.size());
      return out;
    } catch (const std::system_error& e) {
      Rec r(*log_, Verb::get_device_list, st);
      r.err(e.code().value(), e.what());
      throw;
    }
  }
  std::unique_ptr<Context> open(std::string_view device) override {
    Stamp st = stamp(&log_->any_link);
    const auto args = [&](Rec& r) { r.kv("dev", device.empty() ? std::string_view("-") : device); };
    try {
      auto ctx = std::make_unique<LoggedCtx>(log_, in_->open(device));
      if (st.t == State::kNoTime) st.t = ctx->clock().now_ns();  // the first context's clock
      Rec r(*log_, Verb::open_device, st);
      args(r);
      r.ok().kv("dev", ctx->info().name);
      return ctx;
    } catch (const std::system_error& e) {
      Rec r(*log_, Verb::open_device, st);
      args(r);
      r.err(e.code().value(), e.what());
      throw;
    }
  }
  std::unique_ptr<CmEventChannel> create_cm_channel() override {
    const Stamp st = stamp(&log_->any_link);
    try {
      auto ch = std::make_unique<LoggedCmChannel>(log_, in_->create_cm_channel());
      Rec r(*log_, Verb::cm_create_event_channel, st);
      r.ok().kv("cm_ch", ch->id);
      return ch;
    } catch (const std::system_error& e) {
      Rec r(*log_, Verb::cm_create_event_channel, st);
      r.err(e.code().value(), e.what());
      throw;
    }
  }
  Backend& inner() noexcept { return *in_; }

 private:
  StatePtr log_;
  std::unique_ptr<Backend> in_;
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Public entry points

VerbLog::VerbLog(VerbLogOptions options) {
  if (!options.sink) throw std::invalid_argument("VerbLog: no sink");
  state_ = std::make_shared<State>(std::move(options));
}

std::unique_ptr<Backend> VerbLog::wrap(std::unique_ptr<Backend> backend) const {
  return std::make_unique<LoggedBackend>(state_, std::move(backend));
}

std::unique_ptr<Context> VerbLog::wrap(std::unique_ptr<Context> context) const {
  return std::make_unique<LoggedCtx>(state_, std::move(context));
}

VerbSummary VerbLog::summary() const {
  std::lock_guard lock(state_->mu);
  return finish(state_->summary);
}

void VerbLog::print_summary() const { state_->print_summary(); }

std::unique_ptr<Backend> log_verbs(std::unique_ptr<Backend> backend, VerbLogOptions options) {
  return VerbLog(std::move(options)).wrap(std::move(backend));
}

std::unique_ptr<Backend> log_verbs_from_env(std::unique_ptr<Backend> backend,
                                            std::optional<ProviderModel> provider,
                                            std::string provider_source) {
  const char* where = std::getenv("VERBSIM_VERB_LOG");
  if (where == nullptr || *where == '\0') return backend;
  VerbLogOptions o;
  o.sink = open_verb_log_sink(where);
  o.provider = provider;
  o.provider_source = std::move(provider_source);
  return log_verbs(std::move(backend), std::move(o));
}

#define VERBSIM_UNLOGGED(Iface, Wrapper)                  \
  Iface& unlogged(Iface& x) noexcept {                    \
    auto* w = dynamic_cast<Wrapper*>(&x);                 \
    return w == nullptr ? x : w->inner();                 \
  }
VERBSIM_UNLOGGED(Context, LoggedCtx)
VERBSIM_UNLOGGED(ProtectionDomain, LoggedPd)
VERBSIM_UNLOGGED(MemoryRegion, LoggedMr)
VERBSIM_UNLOGGED(MemoryWindow, LoggedMw)
VERBSIM_UNLOGGED(CompletionQueue, LoggedCq)
VERBSIM_UNLOGGED(CompletionChannel, LoggedChannel)
VERBSIM_UNLOGGED(QueuePair, LoggedQp)
VERBSIM_UNLOGGED(SharedReceiveQueue, LoggedSrq)
VERBSIM_UNLOGGED(AddressHandle, LoggedAh)
VERBSIM_UNLOGGED(CmEventChannel, LoggedCmChannel)
VERBSIM_UNLOGGED(CmId, LoggedCmId)
VERBSIM_UNLOGGED(Backend, LoggedBackend)
#undef VERBSIM_UNLOGGED

}  // namespace verbsim
