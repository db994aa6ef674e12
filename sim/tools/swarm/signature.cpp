#include "signature.hpp"

#include <cctype>
#include <vector>

namespace verbsim::swarm {
namespace {

bool word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; }
bool digit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }
bool hex_digit(char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; }

std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back(line);
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  return lines;
}

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front())) != 0) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())) != 0) s.remove_suffix(1);
  return s;
}

// "../tests/unit/x_test.cpp:379: Failure" -> "x_test.cpp:379", or empty.
std::string gtest_failure_place(std::string_view line) {
  constexpr std::string_view kTail = ": Failure";
  if (line.size() <= kTail.size() || line.substr(line.size() - kTail.size()) != kTail) return {};
  std::string_view place = line.substr(0, line.size() - kTail.size());
  const auto colon = place.rfind(':');
  if (colon == std::string_view::npos || colon + 1 == place.size()) return {};
  for (char c : place.substr(colon + 1)) {
    if (!digit(c)) return {};
  }
  const auto slash = place.rfind('/');
  if (slash != std::string_view::npos) place.remove_prefix(slash + 1);
  return std::string(place);
}

// The failing check and the index of its line, or an empty string.
std::string failing_check(const std::vector<std::string_view>& lines, std::size_t& at) {
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const std::string_view line = lines[i];
    if (std::string place = gtest_failure_place(line); !place.empty()) {
      // The message: up to three lines, until a blank line or GoogleTest's next "[ ... ]".
      std::string message;
      for (std::size_t j = i + 1; j < lines.size() && j <= i + 3; ++j) {
        const std::string_view m = trimmed(lines[j]);
        if (m.empty() || lines[j].front() == '[') break;
        message += (message.empty() ? "" : "; ") + std::string(m);
      }
      at = i;
      return place + ": " + normalised(message);
    }
    for (std::string_view marker :
         {"verbsim: invariant broken at ", "ERROR: AddressSanitizer: ", "ERROR: LeakSanitizer: ",
          "WARNING: ThreadSanitizer: ", ": runtime error: "}) {
      const auto found = line.find(marker);
      if (found == std::string_view::npos) continue;
      at = i;
      // From the marker on ("==pid==" goes); UBSan's line starts with the place: its base
      // name stays in front.
      if (marker == ": runtime error: ") {
        std::string_view place = line.substr(0, found);
        const auto slash = place.rfind('/');
        if (slash != std::string_view::npos) place.remove_prefix(slash + 1);
        return std::string(place) + normalised(line.substr(found));
      }
      return normalised(line.substr(found));
    }
  }
  return {};
}

// The flight recorder's last record after line `from` ("  t=2010 ns completion ..."), without
// its time, or an empty string.
std::string last_record(const std::vector<std::string_view>& lines, std::size_t from) {
  std::size_t i = from;
  while (i < lines.size() && !(lines[i].starts_with("last ") &&
                               lines[i].find(" records of the run:") != std::string_view::npos)) {
    ++i;
  }
  std::string_view last;
  for (++i; i < lines.size() && lines[i].starts_with("  "); ++i) last = trimmed(lines[i]);
  if (last.starts_with("t=")) {
    const auto ns = last.find(" ns ");
    if (ns != std::string_view::npos) last.remove_prefix(ns + 4);
  }
  return normalised(last);
}

// signature() of the lines of an output.
std::string signature_of(const std::vector<std::string_view>& lines, std::string_view why) {
  std::size_t at = 0;
  std::string sig = failing_check(lines, at);
  if (sig.empty()) {
    // No check: how it ended and the last line it printed (GoogleTest's framing aside).
    sig = std::string(why);
    for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
      const std::string_view line = trimmed(*it);
      if (line.empty() || line.front() == '[' || line.ends_with("FAILED TEST") ||
          line.ends_with("FAILED TESTS")) {
        continue;
      }
      sig += ": " + normalised(line);
      break;
    }
  }
  if (std::string last = last_record(lines, at); !last.empty()) sig += " | last: " + last;
  return sig;
}

}  // namespace

std::string normalised(std::string_view text) {
  std::string out;
  std::size_t i = 0;
  while (i < text.size()) {
    if (!word_char(text[i])) {
      out += text[i++];
      continue;
    }
    std::size_t end = i;
    while (end < text.size() && word_char(text[end])) ++end;
    std::string_view word = text.substr(i, end - i);
    std::string_view hex = word;
    if (hex.size() > 2 && hex[0] == '0' && (hex[1] == 'x' || hex[1] == 'X')) hex.remove_prefix(2);
    bool any_digit = false;
    bool all_hex = true;
    for (char c : hex) {
      any_digit = any_digit || digit(c);
      all_hex = all_hex && hex_digit(c);
    }
    if (any_digit && all_hex) {
      out += '#';
    } else {
      for (std::size_t j = 0; j < word.size(); ++j) {
        if (!digit(word[j])) {
          out += word[j];
        } else if (j == 0 || !digit(word[j - 1])) {
          out += '#';
        }
      }
    }
    i = end;
  }
  return out;
}

std::string signature(std::string_view output, std::string_view why) {
  return signature_of(lines_of(output), why);
}

std::string site(std::string_view sig) {
  // "x_test.cpp:42: ..." (a GoogleTest check): the file's base name and the line.
  const auto colon = sig.find(':');
  if (colon != std::string_view::npos && colon > 0) {
    std::size_t end = colon + 1;
    while (end < sig.size() && digit(sig[end])) ++end;
    const std::string_view file = sig.substr(0, colon);
    if (end > colon + 1 && sig.substr(end, 2) == ": " &&
        file.find_first_of(" \t") == std::string_view::npos) {
      return std::string(sig.substr(0, end));
    }
  }
  return std::string(sig.substr(0, sig.find(" | last: ")));
}

std::string Failure::group() const {
  return test.empty() ? signature : test + " at " + site(signature);
}

std::vector<Failure> failures(std::string_view output, std::string_view why) {
  constexpr std::string_view kRun = "[ RUN      ] ";
  constexpr std::string_view kFailed = "[  FAILED  ] ";
  constexpr std::string_view kPassed[] = {"[       OK ] ", "[  SKIPPED ] "};
  const std::vector<std::string_view> lines = lines_of(output);
  std::vector<Failure> out;
  bool gtest = false;
  std::string test;       // the test running, or empty
  std::size_t begin = 0;  // its first line
  // "Suite.Name (3 ms)", "Suite.Name, where GetParam() = 4 (0 ms)" -> "Suite.Name".
  const auto name_of = [](std::string_view rest) {
    return std::string(rest.substr(0, rest.find_first_of(" ,")));
  };
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const std::string_view line = lines[i];
    if (line.starts_with(kRun)) {
      gtest = true;
      test = name_of(line.substr(kRun.size()));
      begin = i + 1;
    } else if (!test.empty() && line.starts_with(kFailed) &&
               name_of(line.substr(kFailed.size())) == test) {
      const std::vector<std::string_view> block(lines.begin() + static_cast<std::ptrdiff_t>(begin),
                                                lines.begin() + static_cast<std::ptrdiff_t>(i));
      out.push_back({test, signature_of(block, why)});
      test.clear();
    } else if (!test.empty() && (line.starts_with(kPassed[0]) || line.starts_with(kPassed[1]))) {
      test.clear();
    }
  }
  if (!test.empty()) {  // the run ended inside this test
    const std::vector<std::string_view> block(lines.begin() + static_cast<std::ptrdiff_t>(begin),
                                              lines.end());
    out.push_back({test, signature_of(block, why)});
  }
  if (!gtest || out.empty()) out.push_back({{}, signature_of(lines, why)});
  return out;
}

}  // namespace verbsim::swarm
