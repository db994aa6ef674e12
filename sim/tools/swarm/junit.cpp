#include "junit.hpp"

#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

namespace verbsim::swarm {
namespace {

// The next code point of `s` at `i` (advancing i), or -1 for a byte that starts no valid UTF-8
// sequence (i advances past it).
long next_code_point(const std::string& s, std::size_t& i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b = byte(i);
  int extra = 0;
  long cp = b;
  if (b < 0x80) {
    ++i;
    return cp;
  } else if ((b & 0xE0) == 0xC0) {
    extra = 1, cp = b & 0x1F;
  } else if ((b & 0xF0) == 0xE0) {
    extra = 2, cp = b & 0x0F;
  } else if ((b & 0xF8) == 0xF0) {
    extra = 3, cp = b & 0x07;
  } else {
    ++i;
    return -1;
  }
  if (i + extra >= s.size()) {
    ++i;
    return -1;
  }
  for (int k = 1; k <= extra; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) {
      ++i;
      return -1;
    }
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  static constexpr long kLeast[] = {0, 0x80, 0x800, 0x10000};
  if (cp < kLeast[extra] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
    ++i;
    return -1;
  }
  i += extra + 1;
  return cp;
}

// `s` as XML 1.0 character data or an attribute value: markup escaped, and what XML cannot hold
// (control characters such as a terminal's escapes, bytes that are not UTF-8) as '?'.
std::string escaped(const std::string& s, bool attribute) {
  std::string out;
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t start = i;
    const long cp = next_code_point(s, i);
    switch (cp) {
      case '&': out += "&amp;"; continue;
      case '<': out += "&lt;"; continue;
      case '>': out += "&gt;"; continue;
      case '"': out += attribute ? "&quot;" : "\""; continue;
      case '\n': out += attribute ? "&#10;" : "\n"; continue;
      case '\t': out += attribute ? "&#9;" : "\t"; continue;
      case '\r': out += "&#13;"; continue;
      default: break;
    }
    if (cp < 0x20 || cp == 0xFFFE || cp == 0xFFFF) {
      out += '?';
    } else {
      out.append(s, start, i - start);
    }
  }
  return out;
}

std::string utf8(long cp) {
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

std::string unescaped(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      out += s[i];
      continue;
    }
    const auto semi = s.find(';', i);
    if (semi == std::string_view::npos) throw std::runtime_error("an '&' without ';'");
    const std::string_view entity = s.substr(i + 1, semi - i - 1);
    if (entity == "amp") {
      out += '&';
    } else if (entity == "lt") {
      out += '<';
    } else if (entity == "gt") {
      out += '>';
    } else if (entity == "quot") {
      out += '"';
    } else if (entity == "apos") {
      out += '\'';
    } else if (entity.starts_with("#x")) {
      out += utf8(std::stol(std::string(entity.substr(2)), nullptr, 16));
    } else if (entity.starts_with("#")) {
      out += utf8(std::stol(std::string(entity.substr(1))));
    } else {
      throw std::runtime_error("unknown entity &" + std::string(entity) + ";");
    }
    i = semi;
  }
  return out;
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", s < 0 ? 0.0 : s);
  return buf;
}

// One start tag of the file being read: its name, attributes, and where its content starts.
struct Tag {
  std::string name;
  std::map<std::string, std::string> attributes;
  bool empty = false;  // <name ... />
  std::size_t end = 0;
};

// The next start tag at or after `from` (comments, declarations and end tags skipped), or a tag
// without a name at the end of the text.
Tag next_tag(const std::string& xml, std::size_t from) {
  Tag tag;
  std::size_t i = from;
  for (;;) {
    i = xml.find('<', i);
    if (i == std::string::npos) {
      tag.end = xml.size();
      return tag;
    }
    if (xml.compare(i, 2, "<?") == 0 || xml.compare(i, 2, "<!") == 0 ||
        xml.compare(i, 2, "</") == 0) {
      i = xml.find('>', i);
      if (i == std::string::npos) throw std::runtime_error("a tag that does not end");
      continue;
    }
    break;
  }
  std::size_t k = i + 1;
  while (k < xml.size() && xml[k] != ' ' && xml[k] != '>' && xml[k] != '/' && xml[k] != '\n') ++k;
  tag.name = xml.substr(i + 1, k - i - 1);
  for (;;) {
    while (k < xml.size() && (xml[k] == ' ' || xml[k] == '\n' || xml[k] == '\t')) ++k;
    if (k >= xml.size()) throw std::runtime_error("<" + tag.name + " does not end");
    if (xml[k] == '>') {
      tag.end = k + 1;
      return tag;
    }
    if (xml.compare(k, 2, "/>") == 0) {
      tag.empty = true;
      tag.end = k + 2;
      return tag;
    }
    const auto eq = xml.find('=', k);
    if (eq == std::string::npos || eq + 1 >= xml.size() || xml[eq + 1] != '"') {
      throw std::runtime_error("a malformed attribute in <" + tag.name + ">");
    }
    const auto close = xml.find('"', eq + 2);
    if (close == std::string::npos) throw std::runtime_error("an attribute that does not end");
    tag.attributes[xml.substr(k, eq - k)] =
        unescaped(std::string_view(xml).substr(eq + 2, close - eq - 2));
    k = close + 1;
  }
}

// A seed's failures as its <failure>'s message: a line each, "[Suite.Name] signature", or the
// signature alone for a failure of no test (all a file held before failures had tests).
std::string message_of(const std::vector<Failure>& failures) {
  std::string m;
  for (const Failure& f : failures) {
    if (!m.empty()) m += '\n';
    if (!f.test.empty()) m += "[" + f.test + "] ";
    m += f.signature;
  }
  return m;
}

std::vector<Failure> failures_of(std::string_view message) {
  std::vector<Failure> out;
  for (;;) {
    const auto nl = message.find('\n');
    std::string_view line = message.substr(0, nl);
    Failure f;
    const auto close = line.find("] ");
    if (line.starts_with('[') && close != std::string_view::npos &&
        line.substr(1, close - 1).find(' ') == std::string_view::npos) {
      f.test = std::string(line.substr(1, close - 1));
      line.remove_prefix(close + 2);
    }
    f.signature = std::string(line);
    out.push_back(std::move(f));
    if (nl == std::string_view::npos) break;
    message.remove_prefix(nl + 1);
  }
  return out;
}

constexpr std::string_view kReproduce = "reproduce with:\n";
constexpr std::string_view kLastOutput = "\n--- last output:\n";

}  // namespace

void write_junit(const std::string& path, const Campaign& c) {
  std::size_t failures = 0;
  for (const SeedResult& r : c.results) failures += r.failed ? 1 : 0;
  std::ostringstream x;
  const std::string tests = std::to_string(c.results.size());
  const std::string failed = std::to_string(failures);
  const std::string name = escaped(c.name, true);
  x << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    << "<testsuites name=\"verbsim-swarm\" tests=\"" << tests << "\" failures=\"" << failed
    << "\" errors=\"0\" time=\"" << seconds_text(c.seconds) << "\">\n"
    << "  <testsuite name=\"" << name << "\" package=\"verbsim-swarm\" id=\"" << c.shard.index - 1
    << "\" tests=\"" << tests << "\" failures=\"" << failed
    << "\" errors=\"0\" skipped=\"0\" time=\"" << seconds_text(c.seconds) << "\" timestamp=\""
    << c.timestamp << "\" hostname=\"" << escaped(c.hostname, true) << "\">\n"
    << "    <properties>\n"
    << "      <property name=\"command\" value=\"" << escaped(c.command, true) << "\"/>\n"
    << "      <property name=\"first\" value=\"" << c.range.first << "\"/>\n"
    << "      <property name=\"seeds\" value=\"" << c.range.count << "\"/>\n"
    << "      <property name=\"shard\" value=\"" << c.shard.index << '/' << c.shard.count
    << "\"/>\n"
    << "    </properties>\n";
  for (const SeedResult& r : c.results) {
    x << "    <testcase name=\"seed " << r.seed << "\" classname=\"" << name << "\" time=\""
      << seconds_text(r.seconds) << '"';
    if (!r.failed) {
      x << "/>\n";
      continue;
    }
    x << ">\n      <failure message=\"" << escaped(message_of(r.failures), true) << "\" type=\""
      << escaped(r.why, true) << "\">" << escaped(std::string(kReproduce) + r.reproducer, false)
      << escaped(std::string(kLastOutput) + r.output, false) << "</failure>\n    </testcase>\n";
  }
  x << "    <system-out/>\n    <system-err/>\n  </testsuite>\n</testsuites>\n";
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << x.str();
  out.close();
  if (!out) throw std::runtime_error("cannot write " + path);
}

Campaign read_junit(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string xml = buffer.str();
  Campaign c;
  try {
    bool suite = false;
    for (Tag tag = next_tag(xml, 0); !tag.name.empty(); tag = next_tag(xml, tag.end)) {
      if (tag.name == "testsuite") {
        if (suite) throw std::runtime_error("more than one <testsuite>");
        suite = true;
        c.name = tag.attributes["name"];
        c.timestamp = tag.attributes["timestamp"];
        c.hostname = tag.attributes["hostname"];
        c.seconds = std::stod(tag.attributes["time"]);
      } else if (tag.name == "property") {
        const std::string& key = tag.attributes["name"];
        const std::string& value = tag.attributes["value"];
        if (key == "command") {
          c.command = value;
        } else if (key == "first") {
          c.range.first = std::stoull(value);
        } else if (key == "seeds") {
          c.range.count = std::stoull(value);
        } else if (key == "shard" && std::sscanf(value.c_str(), "%" SCNu64 "/%" SCNu64,
                                                 &c.shard.index, &c.shard.count) != 2) {
          throw std::runtime_error("shard '" + value + "' is not K/N");
        }
      } else if (tag.name == "testcase") {
        SeedResult r;
        const std::string& name = tag.attributes["name"];
        if (!name.starts_with("seed ")) throw std::runtime_error("a testcase named '" + name + "'");
        r.seed = std::stoull(name.substr(5));
        r.seconds = std::stod(tag.attributes["time"]);
        c.results.push_back(std::move(r));
      } else if (tag.name == "failure") {
        if (c.results.empty()) throw std::runtime_error("a <failure> outside a <testcase>");
        SeedResult& r = c.results.back();
        r.failed = true;
        r.failures = failures_of(tag.attributes["message"]);
        r.why = tag.attributes["type"];
        const auto close = xml.find("</failure>", tag.end);
        if (close == std::string::npos) throw std::runtime_error("<failure> does not end");
        std::string text = unescaped(std::string_view(xml).substr(tag.end, close - tag.end));
        if (text.starts_with(kReproduce)) text.erase(0, kReproduce.size());
        const auto last = text.find(kLastOutput);
        r.reproducer = text.substr(0, last);
        if (last != std::string::npos) r.output = text.substr(last + kLastOutput.size());
      }
    }
    if (!suite) throw std::runtime_error("no <testsuite>");
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
  return c;
}

}  // namespace verbsim::swarm
