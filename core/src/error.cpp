#include "verbsim/error.hpp"

#include <cerrno>

namespace verbsim {
namespace {

class ConditionCategory final : public std::error_category {
 public:
  const char* name() const noexcept override { return "verbsim"; }

  std::string message(int c) const override {
    switch (static_cast<Condition>(c)) {
      case Condition::queue_full: return "work queue full";
      case Condition::would_block: return "no event pending";
      case Condition::invalid_state: return "invalid state or attributes";
      case Condition::in_use: return "resource in use";
    }
    return "unknown condition";
  }

  bool equivalent(const std::error_code& code, int c) const noexcept override {
    if (code.category() != std::generic_category() && code.category() != std::system_category()) {
      return false;
    }
    const int e = code.value();
    switch (static_cast<Condition>(c)) {
      case Condition::queue_full: return e == ENOMEM || e == ENOSPC || e == EAGAIN;
      case Condition::would_block: return e == EAGAIN || e == EWOULDBLOCK;
      case Condition::invalid_state: return e == EINVAL;
      case Condition::in_use: return e == EBUSY;
    }
    return false;
  }
};

std::string format(std::string_view verb, int err, std::string_view detail) {
  std::string what(verb);
  if (!detail.empty()) {
    what += " (";
    what += detail;
    what += ')';
  }
  (void)err;
  return what;
}

}  // namespace

const std::error_category& condition_category() noexcept {
  static const ConditionCategory category;
  return category;
}

VerbError::VerbError(std::string_view verb, int err, std::string_view detail)
    : std::system_error(errno_code(err), format(verb, err, detail)), verb_(verb) {}

void throw_verb_error(std::string_view verb, int err, std::string_view detail) {
  throw VerbError(verb, err, detail);
}

}  // namespace verbsim
