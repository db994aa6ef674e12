// Simulator profiles as files: what a stack does where stacks differ (queue depth rounding,
// errnos, which quirks hold, device limits), as text a user can read, diff, edit, and capture
// from a real device with verbsim-probe (docs/FIDELITY.md, "Profile files").
//
//   # a comment
//   name = rxe0 probed 2026-12-04      # what the profile calls itself
//   family = rxe                       # strict | rxe | mlx5: the built-in profile it is most like
//   base = rxe                         # optional, first: start from a built-in profile
//   pow2_minus_one_depths = true       # every other key: see ProfileFile::keys()
//
// Without `base`, a file sets every key. Errnos are spelled as in <errno.h> (EINVAL), statuses
// as ibv_wc_status_str's enum names without IBV_WC_ (LOC_QP_OP_ERR), numbers in decimal or 0x
// hexadecimal.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace verbsim::sim {

enum class Profile : std::uint8_t;

class ProfileFile {
 public:
  // A built-in profile, every key set.
  static ProfileFile builtin(Profile p);
  // Parses a profile file's text; throws std::invalid_argument "<source>:<line>: <what>" for an
  // unknown or repeated key, a value of the wrong kind, or (without base) a missing key.
  static ProfileFile parse(std::string_view text, std::string_view source = "profile");
  // parse() of a file's contents; std::invalid_argument naming the path if it cannot be read,
  // is not a regular file (a device such as /dev/zero, a FIFO, a directory), or holds more than
  // kMaxBytes (the built-in profiles' files hold a few KiB).
  static ProfileFile load(const std::string& path);
  static constexpr std::size_t kMaxBytes = std::size_t{1} << 20;

  // Every key a profile sets, in file order: name, family, then the behaviours and limits.
  static std::span<const std::string_view> keys() noexcept;
  // What the key means (empty for an unknown key).
  static std::string_view doc(std::string_view key) noexcept;

  // The value of `key` as a file spells it; std::invalid_argument for an unknown key.
  const std::string& value(std::string_view key) const;
  // Sets `key`; std::invalid_argument (naming the key) for an unknown key or a bad value.
  void set(std::string_view key, std::string_view value);
  // A comment written after the key's value by text() (where the value came from).
  void note(std::string_view key, std::string text);

  Profile family() const;
  const std::string& name() const { return value("name"); }

  // The file: a header comment, then every key with its doc above it and its note after it.
  std::string text() const;

  // The keys whose values differ, in file order ("name" left out), with this profile's value and
  // the other's.
  struct Difference {
    std::string key, ours, theirs;
  };
  std::vector<Difference> differences(const ProfileFile& other) const;

 private:
  std::vector<std::string> values_;  // by keys()'s index
  std::vector<std::string> notes_;
};

}  // namespace verbsim::sim
