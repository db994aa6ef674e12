// Profiles as files (verbsim/sim/profile.hpp) and as the table a world reads (profile.hpp).
#include "fabric/profile.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace verbsim::sim {

namespace {

using namespace std::string_view_literals;

// Keys in file order: the two names, the behaviours, the limits.
#define VERBSIM_PROFILE_KEY(kind, key, doc) #key##sv,
#define VERBSIM_PROFILE_LIMIT_KEY(key, doc) #key##sv,
constexpr std::array kKeys{"name"sv, "family"sv,
                           VERBSIM_PROFILE_BEHAVIOURS(VERBSIM_PROFILE_KEY)
                               VERBSIM_PROFILE_LIMITS(VERBSIM_PROFILE_LIMIT_KEY)};
#undef VERBSIM_PROFILE_KEY
#undef VERBSIM_PROFILE_LIMIT_KEY

#define VERBSIM_PROFILE_DOC(kind, key, doc) doc##sv,
#define VERBSIM_PROFILE_LIMIT_DOC(key, doc) doc##sv,
constexpr std::array kDocs{
    "what the profile calls itself (device_attr.fw_ver says its family)"sv,
    "strict | rxe | mlx5: the built-in profile it is most like (which expectations the "
    "conformance suite holds it to)"sv,
    VERBSIM_PROFILE_BEHAVIOURS(VERBSIM_PROFILE_DOC) VERBSIM_PROFILE_LIMITS(VERBSIM_PROFILE_LIMIT_DOC)};
#undef VERBSIM_PROFILE_DOC
#undef VERBSIM_PROFILE_LIMIT_DOC
static_assert(kKeys.size() == kDocs.size());

std::size_t key_index(std::string_view key) noexcept {
  return static_cast<std::size_t>(std::find(kKeys.begin(), kKeys.end(), key) - kKeys.begin());
}

// The errnos a profile may name: what providers return where stacks differ.
constexpr std::array<std::pair<std::string_view, int>, 9> kErrnos{{
    {"EINVAL", EINVAL},
    {"ENOMEM", ENOMEM},
    {"ENOSPC", ENOSPC},
    {"EOPNOTSUPP", EOPNOTSUPP},
    {"EAGAIN", EAGAIN},
    {"EFAULT", EFAULT},
    {"EPERM", EPERM},
    {"ENOSYS", ENOSYS},
    {"EBUSY", EBUSY},
}};

[[noreturn]] void bad_value(std::string_view key, std::string_view value, std::string_view want) {
  throw std::invalid_argument(std::string(key) + ": '" + std::string(value) + "' is not " +
                              std::string(want));
}

// Each kind: parse a file's spelling into the member, and spell the member as a file does.
bool parse_value(profile_kind::Switch, std::string_view key, std::string_view v) {
  if (v == "true") return true;
  if (v == "false") return false;
  bad_value(key, v, "true or false");
}
std::string format_value(profile_kind::Switch, bool b) { return b ? "true" : "false"; }

int parse_value(profile_kind::Errno, std::string_view key, std::string_view v) {
  for (const auto& [name, value] : kErrnos) {
    if (name == v) return value;
  }
  bad_value(key, v, "an errno a profile may name (EINVAL, ENOMEM, ENOSPC, EOPNOTSUPP, ...)");
}
std::string format_value(profile_kind::Errno, int err) {
  for (const auto& [name, value] : kErrnos) {
    if (value == err) return std::string(name);
  }
  return std::to_string(err);
}

WcStatus parse_value(profile_kind::Status, std::string_view key, std::string_view v) {
  for (int s = 0; s <= static_cast<int>(WcStatus::general_err); ++s) {
    if (to_string(static_cast<WcStatus>(s)) == v) return static_cast<WcStatus>(s);
  }
  bad_value(key, v, "a completion status (LOC_PROT_ERR, LOC_QP_OP_ERR, ...)");
}
std::string format_value(profile_kind::Status, WcStatus s) { return std::string(to_string(s)); }

ProviderModel parse_value(profile_kind::Kernel, std::string_view key, std::string_view v) {
  if (v == "rxe") return ProviderModel::rxe;
  if (v == "mlx5") return ProviderModel::mlx5;
  bad_value(key, v, "rxe or mlx5");
}
std::string format_value(profile_kind::Kernel, ProviderModel m) {
  return std::string(to_string(m));
}

std::uint32_t parse_value(profile_kind::Count, std::string_view key, std::string_view v) {
  const bool hex = v.starts_with("0x") || v.starts_with("0X");
  const std::string_view digits = hex ? v.substr(2) : v;
  std::uint32_t n = 0;
  const auto [end, ec] =
      std::from_chars(digits.data(), digits.data() + digits.size(), n, hex ? 16 : 10);
  if (digits.empty() || ec != std::errc{} || end != digits.data() + digits.size()) {
    bad_value(key, v, "a number from 0 to 4294967295");
  }
  return n;
}
std::string format_value(profile_kind::Count, std::uint32_t n) { return std::to_string(n); }

Profile parse_family(std::string_view v) {
  if (v == "strict") return Profile::strict;
  if (v == "rxe") return Profile::rxe;
  if (v == "mlx5") return Profile::mlx5;
  bad_value("family", v, "strict, rxe or mlx5");
}

// The value of every key as a file spells it, from the table a world reads.
std::vector<std::string> values_of(const ProfileTraits& t) {
  std::vector<std::string> v{t.name, std::string(to_string(t.family))};
#define VERBSIM_PROFILE_FORMAT(kind, key, doc) v.push_back(format_value(profile_kind::kind{}, t.key));
#define VERBSIM_PROFILE_LIMIT_FORMAT(key, doc) \
  v.push_back(format_value(profile_kind::Count{}, t.limits.key));
  VERBSIM_PROFILE_BEHAVIOURS(VERBSIM_PROFILE_FORMAT)
  VERBSIM_PROFILE_LIMITS(VERBSIM_PROFILE_LIMIT_FORMAT)
#undef VERBSIM_PROFILE_FORMAT
#undef VERBSIM_PROFILE_LIMIT_FORMAT
  return v;
}

// Sets one key of `t` from a file's spelling; the key is known.
void assign(ProfileTraits& t, std::string_view key, std::string_view v) {
  if (key == "name") {
    t.name = std::string(v);
    return;
  }
  if (key == "family") {
    t.family = parse_family(v);
    return;
  }
#define VERBSIM_PROFILE_ASSIGN(kind, k, doc)                   \
  if (key == #k) {                                             \
    t.k = parse_value(profile_kind::kind{}, key, v);           \
    return;                                                    \
  }
#define VERBSIM_PROFILE_LIMIT_ASSIGN(k, doc)                   \
  if (key == #k) {                                             \
    t.limits.k = parse_value(profile_kind::Count{}, key, v);   \
    return;                                                    \
  }
  VERBSIM_PROFILE_BEHAVIOURS(VERBSIM_PROFILE_ASSIGN)
  VERBSIM_PROFILE_LIMITS(VERBSIM_PROFILE_LIMIT_ASSIGN)
#undef VERBSIM_PROFILE_ASSIGN
#undef VERBSIM_PROFILE_LIMIT_ASSIGN
}

std::string_view trim(std::string_view s) noexcept {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// A profile file's text as the table a world reads. `base_of(p)` is the built-in profile p, for
// a file that starts from one.
template <class BaseOf>
ProfileTraits parse_traits(std::string_view text, std::string_view source, BaseOf base_of) {
  ProfileTraits t{};
  std::vector<bool> seen(kKeys.size(), false);
  bool based = false;
  bool any_key = false;
  int line_no = 0;
  while (!text.empty()) {
    ++line_no;
    const std::size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    if (const std::size_t hash = line.find('#'); hash != std::string_view::npos) {
      line = line.substr(0, hash);
    }
    line = trim(line);
    if (line.empty()) continue;
    const auto where = [&] { return std::string(source) + ":" + std::to_string(line_no) + ": "; };
    const std::size_t eq = line.find('=');
    if (eq == std::string_view::npos) {
      throw std::invalid_argument(where() + "expected 'key = value', got '" + std::string(line) +
                                  "'");
    }
    const std::string_view key = trim(line.substr(0, eq));
    const std::string_view value = trim(line.substr(eq + 1));
    if (value.empty()) throw std::invalid_argument(where() + std::string(key) + ": no value");
    try {
      if (key == "base") {
        if (any_key || based) {
          throw std::invalid_argument("base: must come first, and once");
        }
        t = base_of(parse_family(value));
        based = true;
        continue;
      }
      const std::size_t i = key_index(key);
      if (i == kKeys.size()) {
        throw std::invalid_argument("unknown key '" + std::string(key) +
                                    "' (docs/FIDELITY.md, \"Profile files\", lists them)");
      }
      if (seen[i]) throw std::invalid_argument(std::string(key) + ": set twice");
      seen[i] = true;
      any_key = true;
      assign(t, key, value);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(where() + e.what());
    }
  }
  if (!based) {
    std::string missing;
    for (std::size_t i = 0; i < kKeys.size(); ++i) {
      if (!seen[i]) missing += (missing.empty() ? "" : ", ") + std::string(kKeys[i]);
    }
    if (!missing.empty()) {
      throw std::invalid_argument(std::string(source) + ": no base, and no value for " + missing);
    }
  }
  return t;
}

}  // namespace

const ProfileTraits& ProfileTraits::of(Profile p) noexcept {
  // Parsed once, in the enum's order: a built-in profile's base is an earlier one (mlx5 is
  // strict's). A built-in file that does not parse is the build's bug (sim_profile_test).
  static const std::array<ProfileTraits, 3> kBuiltins = [] {
    std::array<ProfileTraits, 3> all{};
    for (const Profile b : {Profile::strict, Profile::rxe, Profile::mlx5}) {
      try {
        all[static_cast<std::size_t>(b)] =
            parse_traits(builtin_profile_source(b), "built-in profile " + std::string(to_string(b)),
                         [&all](Profile base) { return all[static_cast<std::size_t>(base)]; });
      } catch (const std::exception& e) {
        std::fprintf(stderr, "verbsim: %s\n", e.what());
        std::abort();
      }
    }
    return all;
  }();
  return kBuiltins[static_cast<std::size_t>(p)];
}

ProfileTraits ProfileTraits::from(const ProfileFile& file) {
  ProfileTraits t{};
  for (const std::string_view key : ProfileFile::keys()) assign(t, key, file.value(key));
  return t;
}

ProfileFile ProfileFile::builtin(Profile p) {
  ProfileFile f;
  f.values_ = values_of(ProfileTraits::of(p));
  f.notes_.resize(f.values_.size());
  return f;
}

ProfileFile ProfileFile::parse(std::string_view text, std::string_view source) {
  ProfileFile f;
  f.values_ = values_of(parse_traits(text, source, [](Profile b) { return ProfileTraits::of(b); }));
  f.notes_.resize(f.values_.size());
  return f;
}

ProfileFile ProfileFile::load(const std::string& path) {
  const auto cannot_read = [&path](int err) {
    return std::invalid_argument("cannot read the profile file '" + path +
                                 "': " + std::strerror(err));
  };
  // O_NONBLOCK: a FIFO is refused below instead of waiting for a writer in open().
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw cannot_read(errno);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw cannot_read(errno);
  if (!S_ISREG(st.st_mode)) {
    throw std::invalid_argument("the profile file '" + path +
                                "' is not a regular file (a device, FIFO, socket or directory)");
  }
  // Read to the end, at most one byte past the limit (the size st_size says may change).
  std::string text(kMaxBytes + 1, '\0');
  std::size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw cannot_read(errno);
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  if (got > kMaxBytes) {
    throw std::invalid_argument("the profile file '" + path + "' is larger than " +
                                std::to_string(kMaxBytes) +
                                " bytes (1 MiB), the most a profile file may hold");
  }
  text.resize(got);
  return parse(text, path);
}

std::span<const std::string_view> ProfileFile::keys() noexcept { return kKeys; }

std::string_view ProfileFile::doc(std::string_view key) noexcept {
  const std::size_t i = key_index(key);
  return i < kDocs.size() ? kDocs[i] : std::string_view{};
}

const std::string& ProfileFile::value(std::string_view key) const {
  const std::size_t i = key_index(key);
  if (i == kKeys.size()) throw std::invalid_argument("unknown profile key '" + std::string(key) + "'");
  return values_[i];
}

void ProfileFile::set(std::string_view key, std::string_view value) {
  const std::size_t i = key_index(key);
  if (i == kKeys.size()) throw std::invalid_argument("unknown profile key '" + std::string(key) + "'");
  if (key == "name" && (value.empty() || value.find_first_of("#\n") != std::string_view::npos)) {
    bad_value(key, value, "a name without '#' or a newline");
  }
  ProfileTraits scratch{};
  assign(scratch, key, value);  // throws for a bad value
  values_[i] = key == "name" ? std::string(value) : values_of(scratch)[i];
}

void ProfileFile::note(std::string_view key, std::string text) {
  const std::size_t i = key_index(key);
  if (i == kKeys.size()) throw std::invalid_argument("unknown profile key '" + std::string(key) + "'");
  std::replace(text.begin(), text.end(), '\n', ' ');
  notes_[i] = std::move(text);
}

Profile ProfileFile::family() const { return parse_family(value("family")); }

std::string ProfileFile::text() const {
  std::string out =
      "# A verbsim simulator profile (docs/FIDELITY.md, \"Profile files\"): load it with\n"
      "# VERBSIM_PROFILE=<this file>. One `key = value` a line; `#` starts a comment.\n";
  for (std::size_t i = 0; i < kKeys.size(); ++i) {
    if (i == 2) out += "\n# Behaviours\n";
    if (kKeys[i] == "max_qp_wr") out += "\n# Device limits\n";
    out += "# " + std::string(kDocs[i]) + "\n";
    out += std::string(kKeys[i]) + " = " + values_[i];
    if (!notes_[i].empty()) out += "  # " + notes_[i];
    out += "\n";
  }
  return out;
}

std::vector<ProfileFile::Difference> ProfileFile::differences(const ProfileFile& other) const {
  std::vector<Difference> out;
  for (std::size_t i = 1; i < kKeys.size(); ++i) {
    if (values_[i] != other.values_[i]) {
      out.push_back({std::string(kKeys[i]), values_[i], other.values_[i]});
    }
  }
  return out;
}

std::uint32_t ProfileTraits::round_wq(std::uint32_t n) const noexcept {
  if (n == 0) return 0;
  return pow2_minus_one_depths ? std::bit_ceil(n + 1) - 1 : std::bit_ceil(n);
}

std::uint32_t ProfileTraits::round_cq(std::uint32_t n) const noexcept {
  if (n == 0) return 0;
  return std::bit_ceil(n + 1) - 1;
}

std::string_view to_string(Profile p) noexcept {
  switch (p) {
    case Profile::strict: return "strict";
    case Profile::rxe: return "rxe";
    case Profile::mlx5: return "mlx5";
  }
  return "unknown";
}

Profile parse_profile(std::string_view name) {
  if (name == "strict" || name.empty()) return Profile::strict;
  if (name == "rxe") return Profile::rxe;
  if (name == "mlx5") return Profile::mlx5;
  throw std::invalid_argument("unknown simulator profile '" + std::string(name) +
                              "' (expected strict, rxe, mlx5 or a profile file's path)");
}

}  // namespace verbsim::sim
