#pragma once
// What the names a user gives the simulator are made of (QP names in fault plans, device names,
// fabric names): ASCII letters, '_', digits, '-' and '.', nothing that could not survive being
// printed in a message, a file name or a rule.

namespace verbsim::sim {

constexpr bool name_letter(char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

constexpr bool name_char(char c) noexcept {
  return name_letter(c) || (c >= '0' && c <= '9') || c == '-' || c == '.';
}

}  // namespace verbsim::sim
