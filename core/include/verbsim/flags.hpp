// Bitwise operators for the scoped flag enums of the verbs API.
#pragma once

#include <type_traits>

namespace verbsim {

// Specialise to true for an enum whose values are bit flags.
template <class E>
struct is_flag_enum : std::false_type {};

template <class E>
concept FlagEnum = std::is_enum_v<E> && is_flag_enum<E>::value;

template <FlagEnum E>
constexpr E operator|(E a, E b) noexcept {
  using U = std::underlying_type_t<E>;
  return static_cast<E>(static_cast<U>(a) | static_cast<U>(b));
}
template <FlagEnum E>
constexpr E operator&(E a, E b) noexcept {
  using U = std::underlying_type_t<E>;
  return static_cast<E>(static_cast<U>(a) & static_cast<U>(b));
}
template <FlagEnum E>
constexpr E operator~(E a) noexcept {
  using U = std::underlying_type_t<E>;
  return static_cast<E>(~static_cast<U>(a));
}
template <FlagEnum E>
constexpr E& operator|=(E& a, E b) noexcept {
  return a = a | b;
}
template <FlagEnum E>
constexpr E& operator&=(E& a, E b) noexcept {
  return a = a & b;
}
// True when any bit of `bits` is set in `value`.
template <FlagEnum E>
constexpr bool any(E value, E bits) noexcept {
  return static_cast<std::underlying_type_t<E>>(value & bits) != 0;
}
// True when every bit of `bits` is set in `value`.
template <FlagEnum E>
constexpr bool all(E value, E bits) noexcept {
  return (value & bits) == bits;
}
template <FlagEnum E>
constexpr auto to_underlying(E e) noexcept {
  return static_cast<std::underlying_type_t<E>>(e);
}

}  // namespace verbsim
