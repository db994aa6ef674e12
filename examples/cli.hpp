// Command-line parsing shared by the examples and the benchmark tools: "--flag value" or
// "--flag=value", --help / -h prints the usage.
#pragma once

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>

namespace verbsim::cli {

// A whole number up to `max`; std::invalid_argument naming the flag otherwise.
inline std::uint64_t parse_number(std::string_view flag, std::string_view text,
                                  std::uint64_t max = UINT64_MAX) {
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc{} || end != text.data() + text.size() || v > max) {
    const std::string bound = max == UINT64_MAX ? "" : " up to " + std::to_string(max);
    throw std::invalid_argument(std::string(flag) + " needs a number" + bound + ", not '" +
                                std::string(text) + "'");
  }
  return v;
}

// Calls on_flag(flag, value) for every option; it returns false for a flag it does not know.
// --help or -h prints the `usage` parts and exits 0. Throws std::invalid_argument for a flag
// without a value or an unknown one.
template <class OnFlag>
void for_each_flag(int argc, char** argv, std::initializer_list<const char*> usage,
                   OnFlag&& on_flag) {
  for (int i = 1; i < argc; ++i) {
    std::string_view flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      for (const char* part : usage) std::fputs(part, stdout);
      std::exit(0);
    }
    std::string_view value;
    if (const auto eq = flag.find('='); eq != std::string_view::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      throw std::invalid_argument(std::string(flag) + " needs a value (see --help)");
    }
    if (!on_flag(flag, value)) {
      throw std::invalid_argument("unknown option " + std::string(flag) + " (see --help)");
    }
  }
}

}  // namespace verbsim::cli
