// Error conventions of the verbs API.
//
// Control path (open, alloc, create, modify, destroy): failures throw VerbError, a
// std::system_error whose code is the errno a real provider returns (generic_category) and
// whose message names the verb, e.g. "ibv_modify_qp: Invalid argument (RESET->RTR)".
//
// Data path (post_send, post_recv, poll, req_notify): noexcept, failures are returned as that
// errno: req_notify returns a std::error_code, posts and polls a PostResult / PollResult whose
// error() gives one (types.hpp). Compare it against the portable conditions below rather than a
// single errno: "queue full" is ENOMEM on rxe and mlx5, EAGAIN or ENOSPC elsewhere.
#pragma once

#include <string>
#include <string_view>
#include <system_error>

namespace verbsim {

// Portable conditions an application branches on.
enum class Condition {
  queue_full = 1,  // ENOMEM, ENOSPC or EAGAIN from a post: retry after polling completions
  would_block,     // EAGAIN / EWOULDBLOCK from a non-blocking event wait
  invalid_state,   // EINVAL from a post on a QP in RESET/INIT, or a wrong transition
  in_use,          // EBUSY from destroying a resource that other resources still use
};

const std::error_category& condition_category() noexcept;

inline std::error_condition make_error_condition(Condition c) noexcept {
  return {static_cast<int>(c), condition_category()};
}

inline std::error_code errno_code(int err) noexcept { return {err, std::generic_category()}; }

// A failed control-path verb. `verb()` is the libibverbs name of the call ("ibv_create_qp").
class VerbError : public std::system_error {
 public:
  VerbError(std::string_view verb, int err, std::string_view detail = {});
  const std::string& verb() const noexcept { return verb_; }

 private:
  std::string verb_;
};

[[noreturn]] void throw_verb_error(std::string_view verb, int err, std::string_view detail = {});

}  // namespace verbsim

template <>
struct std::is_error_condition_enum<verbsim::Condition> : std::true_type {};
