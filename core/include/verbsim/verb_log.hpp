// Verb log: one text record per verb call, on any backend, by a decorator over the core
// interfaces (LevelDB's EnvWrapper): log_verbs() wraps a Backend, and every object reached
// through it (contexts, PDs, CQs, QPs, ...) is a logged wrapper that forwards each call to the
// backend's object and writes one line afterwards. Nothing is wrapped unless asked for
// (open_backend() does it when VERBSIM_VERB_LOG is set), so a program that does not log pays
// nothing. The format and the summary are documented in README.md ("Verb log").
//
// Wrappers hand the backend its own objects (a QpInitAttr's CQs, a SendWr's address handle, a
// bind's MR and window) and map what it returns back to wrappers (get_cq_event's CQ, an async
// event's QP, a CM event's id), so the logged graph behaves like the unlogged one. Code that
// needs the backend's object itself (ibverbs::native(), the simulator's extensions) takes
// unlogged(x) first.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "verbsim/backend.hpp"

namespace verbsim {

class AddressHandle;
class CmEventChannel;
class CmId;
class CompletionChannel;
class CompletionQueue;
class MemoryRegion;
class MemoryWindow;
class ProtectionDomain;
class QueuePair;
class SharedReceiveQueue;

// Where a verb goes on a real stack: nowhere (userspace only), into the kernel through another
// syscall (read() of an event fd, sysfs, close(), a write to rdma_cm's device), or through a
// uverbs command (a write/ioctl on the uverbs device; a syscall too).
enum class Crossing : std::uint8_t { none, syscall, uverbs };
enum class VerbClass : std::uint8_t { control, data, event };
// The provider whose kernel crossings the summary estimates.
enum class ProviderModel : std::uint8_t { mlx5, rxe };

// Every verb the log knows: X(id, libibverbs/librdmacm name, class, crossing on mlx5, on rxe).
// mlx5: control verbs are uverbs commands, the data path rings doorbells from userspace, event
// waits read() the channel's fd. rxe: as mlx5, except that librxe's post_send (and ibv_bind_mw,
// a post) ends with a post_send uverbs command to kick the kernel's requester, and
// req_notify_cq is ibv_cmd_req_notify_cq. Acks and polls never leave userspace.
// ack_async_event is listed for C callers (the drop-in); Context::get_async_event acks itself.
#define VERBSIM_VERB_TABLE(X)                                                      \
  X(get_device_list, "ibv_get_device_list", control, syscall, syscall)             \
  X(open_device, "ibv_open_device", control, uverbs, uverbs)                       \
  X(close_device, "ibv_close_device", control, syscall, syscall)                   \
  X(query_device, "ibv_query_device", control, uverbs, uverbs)                     \
  X(query_port, "ibv_query_port", control, uverbs, uverbs)                         \
  X(query_gid, "ibv_query_gid", control, uverbs, uverbs)                           \
  X(alloc_pd, "ibv_alloc_pd", control, uverbs, uverbs)                             \
  X(dealloc_pd, "ibv_dealloc_pd", control, uverbs, uverbs)                         \
  X(reg_mr, "ibv_reg_mr", control, uverbs, uverbs)                                 \
  X(rereg_mr, "ibv_rereg_mr", control, uverbs, uverbs)                             \
  X(dereg_mr, "ibv_dereg_mr", control, uverbs, uverbs)                             \
  X(alloc_mw, "ibv_alloc_mw", control, uverbs, uverbs)                             \
  X(dealloc_mw, "ibv_dealloc_mw", control, uverbs, uverbs)                         \
  X(create_comp_channel, "ibv_create_comp_channel", control, uverbs, uverbs)       \
  X(destroy_comp_channel, "ibv_destroy_comp_channel", control, syscall, syscall)   \
  X(create_cq, "ibv_create_cq", control, uverbs, uverbs)                           \
  X(resize_cq, "ibv_resize_cq", control, uverbs, uverbs)                           \
  X(destroy_cq, "ibv_destroy_cq", control, uverbs, uverbs)                         \
  X(create_qp, "ibv_create_qp", control, uverbs, uverbs)                           \
  X(modify_qp, "ibv_modify_qp", control, uverbs, uverbs)                           \
  X(query_qp, "ibv_query_qp", control, uverbs, uverbs)                             \
  X(destroy_qp, "ibv_destroy_qp", control, uverbs, uverbs)                         \
  X(create_srq, "ibv_create_srq", control, uverbs, uverbs)                         \
  X(modify_srq, "ibv_modify_srq", control, uverbs, uverbs)                         \
  X(query_srq, "ibv_query_srq", control, uverbs, uverbs)                           \
  X(destroy_srq, "ibv_destroy_srq", control, uverbs, uverbs)                       \
  X(create_ah, "ibv_create_ah", control, uverbs, uverbs)                           \
  X(destroy_ah, "ibv_destroy_ah", control, uverbs, uverbs)                         \
  X(post_send, "ibv_post_send", data, none, uverbs)                                \
  X(post_recv, "ibv_post_recv", data, none, none)                                  \
  X(post_srq_recv, "ibv_post_srq_recv", data, none, none)                          \
  X(bind_mw, "ibv_bind_mw", data, none, uverbs)                                    \
  X(poll_cq, "ibv_poll_cq", data, none, none)                                      \
  X(req_notify_cq, "ibv_req_notify_cq", data, none, uverbs)                        \
  X(get_cq_event, "ibv_get_cq_event", event, syscall, syscall)                     \
  X(ack_cq_events, "ibv_ack_cq_events", event, none, none)                         \
  X(get_async_event, "ibv_get_async_event", event, syscall, syscall)               \
  X(ack_async_event, "ibv_ack_async_event", event, none, none)                     \
  X(cm_create_event_channel, "rdma_create_event_channel", control, syscall, syscall) \
  X(cm_destroy_event_channel, "rdma_destroy_event_channel", control, syscall, syscall) \
  X(cm_create_id, "rdma_create_id", control, syscall, syscall)                     \
  X(cm_destroy_id, "rdma_destroy_id", control, syscall, syscall)                   \
  X(cm_bind_addr, "rdma_bind_addr", control, syscall, syscall)                     \
  X(cm_listen, "rdma_listen", control, syscall, syscall)                           \
  X(cm_resolve_addr, "rdma_resolve_addr", control, syscall, syscall)               \
  X(cm_resolve_route, "rdma_resolve_route", control, syscall, syscall)             \
  X(cm_connect, "rdma_connect", control, syscall, syscall)                         \
  X(cm_accept, "rdma_accept", control, syscall, syscall)                           \
  X(cm_reject, "rdma_reject", control, syscall, syscall)                           \
  X(cm_disconnect, "rdma_disconnect", control, syscall, syscall)                   \
  X(cm_init_qp_attr, "rdma_init_qp_attr", control, syscall, syscall)               \
  X(cm_establish, "rdma_establish", control, syscall, syscall)                     \
  X(cm_migrate_id, "rdma_migrate_id", control, syscall, syscall)                   \
  X(cm_get_event, "rdma_get_cm_event", event, syscall, syscall)

enum class Verb : std::uint8_t {
#define VERBSIM_VERB_ENUM(id, name, cls, mlx5, rxe) id,
  VERBSIM_VERB_TABLE(VERBSIM_VERB_ENUM)
#undef VERBSIM_VERB_ENUM
};
inline constexpr std::size_t kVerbCount = 0
#define VERBSIM_VERB_COUNT(id, name, cls, mlx5, rxe) +1
    VERBSIM_VERB_TABLE(VERBSIM_VERB_COUNT)
#undef VERBSIM_VERB_COUNT
    ;

std::string_view verb_name(Verb v) noexcept;  // "ibv_post_send"
VerbClass verb_class(Verb v) noexcept;
Crossing crossing(Verb v, ProviderModel model) noexcept;
std::string_view to_string(VerbClass c) noexcept;     // "control", "data", "event"
std::string_view to_string(Crossing c) noexcept;      // "none", "syscall", "uverbs"
std::string_view to_string(ProviderModel m) noexcept;  // "mlx5", "rxe"
// rxe* -> rxe, anything else -> mlx5 (hardware-like).
ProviderModel provider_for_device(std::string_view device_name) noexcept;

// Receives each record and summary line, without its newline. Called with the log's lock held,
// one line at a time.
class VerbLogSink {
 public:
  virtual ~VerbLogSink() = default;
  virtual void write(std::string_view line) = 0;
  virtual void flush() {}
};

// "stderr", or a file path (truncated). Throws std::system_error when the file cannot be opened.
std::shared_ptr<VerbLogSink> open_verb_log_sink(const std::string& where);

struct VerbLogOptions {
  std::shared_ptr<VerbLogSink> sink;  // required
  // The model of the summary's kernel crossings; unset: from the name of the first device
  // opened (provider_for_device). `provider_source` says in the summary where it came from.
  std::optional<ProviderModel> provider;
  std::string provider_source;
  bool wall_time = true;           // the wall= field (tests comparing lines turn it off)
  bool summary_at_end = true;      // print the summary when the log goes
};

// Counts of the calls logged so far and the kernel crossings they would make on `model`.
struct VerbSummary {
  std::array<std::uint64_t, kVerbCount> calls{};
  std::array<std::uint64_t, 3> per_class{};  // indexed by VerbClass
  std::uint64_t total = 0;
  std::uint64_t uverbs = 0;    // uverbs commands
  std::uint64_t syscalls = 0;  // kernel crossings in all: uverbs commands and other syscalls
  ProviderModel model = ProviderModel::mlx5;
  std::string model_source;

  std::uint64_t count(Verb v) const noexcept { return calls[static_cast<std::size_t>(v)]; }
  std::uint64_t count(VerbClass c) const noexcept { return per_class[static_cast<std::size_t>(c)]; }
  // The summary lines as the log prints them, each ending in '\n'.
  std::string to_string() const;
};

// A verb log: its sink, counters and the numbers it gives objects. Every wrapper shares it, so
// it lives until the last of them and the handles of the program are gone; then, with
// summary_at_end, it prints the summary. Thread-safe.
class VerbLog {
 public:
  explicit VerbLog(VerbLogOptions options);
  // Wraps `backend` (and so everything opened from it). The log lives as long as the result.
  std::unique_ptr<Backend> wrap(std::unique_ptr<Backend> backend) const;
  // Wraps a context opened elsewhere (the drop-in opens its contexts from a sim::World).
  std::unique_ptr<Context> wrap(std::unique_ptr<Context> context) const;
  VerbSummary summary() const;
  // Writes summary().to_string() to the sink and flushes it.
  void print_summary() const;

  struct State;  // verb_log.cpp

 private:
  std::shared_ptr<State> state_;
};

// VerbLog(options).wrap(backend).
std::unique_ptr<Backend> log_verbs(std::unique_ptr<Backend> backend, VerbLogOptions options);

// With VERBSIM_VERB_LOG set ("stderr" or a file path), `backend` wrapped in a log to it with
// the given model (summary at the end); unset or empty, `backend` itself. Throws
// std::system_error when the file cannot be opened.
std::unique_ptr<Backend> log_verbs_from_env(std::unique_ptr<Backend> backend,
                                            std::optional<ProviderModel> provider,
                                            std::string provider_source);
// The same with the model the backend implies: a sim::World's profile (rxe -> rxe, strict and
// mlx5 -> mlx5), otherwise the first device's name. What open_backend() does; defined in the
// verbsim library (backends/registry.cpp), the one place that knows every backend.
std::unique_ptr<Backend> log_verbs_from_env(std::unique_ptr<Backend> backend);

// The backend's object behind a logged wrapper, or the argument itself when it is not one. For
// ibverbs::native(), the simulator's extensions and other code that casts to a backend's type.
Context& unlogged(Context& x) noexcept;
ProtectionDomain& unlogged(ProtectionDomain& x) noexcept;
MemoryRegion& unlogged(MemoryRegion& x) noexcept;
MemoryWindow& unlogged(MemoryWindow& x) noexcept;
CompletionQueue& unlogged(CompletionQueue& x) noexcept;
CompletionChannel& unlogged(CompletionChannel& x) noexcept;
QueuePair& unlogged(QueuePair& x) noexcept;
SharedReceiveQueue& unlogged(SharedReceiveQueue& x) noexcept;
AddressHandle& unlogged(AddressHandle& x) noexcept;
CmEventChannel& unlogged(CmEventChannel& x) noexcept;
CmId& unlogged(CmId& x) noexcept;
Backend& unlogged(Backend& x) noexcept;

}  // namespace verbsim
