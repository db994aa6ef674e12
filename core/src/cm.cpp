#include "verbsim/cm.hpp"

#include <arpa/inet.h>

#include <charconv>
#include <optional>
#include <stdexcept>

#include "verbsim/backend.hpp"
#include "verbsim/error.hpp"

namespace verbsim {

namespace {

[[noreturn]] void bad_address(std::string_view text, std::string_view why) {
  throw std::invalid_argument("SockAddr::parse: '" + std::string(text) + "': " + std::string(why));
}

}  // namespace

SockAddr SockAddr::parse(std::string_view text) {
  SockAddr out;
  std::string_view host = text;
  std::optional<std::string_view> port;
  if (!host.empty() && host.front() == '[') {  // [v6] or [v6]:port
    const auto close = host.find(']');
    if (close == std::string_view::npos) bad_address(text, "no closing ']'");
    if (close + 1 < host.size()) {
      if (host[close + 1] != ':') bad_address(text, "expected ':' after ']'");
      port = host.substr(close + 2);
    }
    host = host.substr(1, close - 1);
  } else if (const auto colon = host.find(':');
             colon != std::string_view::npos &&
             host.find(':', colon + 1) == std::string_view::npos) {
    port = host.substr(colon + 1);  // a single colon: IPv4 and a port
    host = host.substr(0, colon);
  }
  if (port) {
    unsigned value = 0;
    const char* end = port->data() + port->size();
    const auto [stop, ec] = std::from_chars(port->data(), end, value);
    if (port->empty() || ec != std::errc{} || stop != end || value > 65535) {
      bad_address(text, "the port is not a number from 0 to 65535");
    }
    out.port = static_cast<std::uint16_t>(value);
  }
  const std::string h(host);
  in_addr v4{};
  if (::inet_pton(AF_INET, h.c_str(), &v4) == 1) {
    out.ip[10] = 0xff;
    out.ip[11] = 0xff;
    const auto* b = reinterpret_cast<const std::uint8_t*>(&v4.s_addr);
    for (int i = 0; i < 4; ++i) out.ip[static_cast<std::size_t>(12 + i)] = b[i];
    return out;
  }
  in6_addr v6{};
  if (::inet_pton(AF_INET6, h.c_str(), &v6) == 1) {
    for (std::size_t i = 0; i < 16; ++i) out.ip[i] = v6.s6_addr[i];
    return out;
  }
  bad_address(text, "not an IPv4 or IPv6 address");
}

SockAddr SockAddr::ipv4(std::uint8_t a, std::uint8_t b, std::uint8_t c, std::uint8_t d,
                        std::uint16_t port) noexcept {
  SockAddr out;
  out.ip = Gid::from_ipv4(a, b, c, d).raw;
  out.port = port;
  return out;
}

bool SockAddr::is_ipv4() const noexcept { return gid().is_ipv4_mapped(); }

bool SockAddr::is_any() const noexcept {
  for (std::size_t i = 0; i < 16; ++i) {
    if (ip[i] != 0 && !(is_ipv4() && (i == 10 || i == 11))) return false;
  }
  return true;
}

Gid SockAddr::gid() const noexcept {
  Gid g;
  g.raw = ip;
  return g;
}

std::string SockAddr::to_string() const {
  char buf[INET6_ADDRSTRLEN] = {};
  std::string out;
  if (is_ipv4()) {
    ::inet_ntop(AF_INET, ip.data() + 12, buf, sizeof buf);
    out = buf;
  } else {
    ::inet_ntop(AF_INET6, ip.data(), buf, sizeof buf);
    out = std::string("[") + buf + "]";
  }
  return out + ":" + std::to_string(port);
}

void CmId::connect_own_qp(std::uint32_t, const ConnParam&) {
  throw_verb_error("rdma_connect", EOPNOTSUPP, "connections of the program's own QPs");
}
void CmId::accept_own_qp(std::uint32_t, const ConnParam&) {
  throw_verb_error("rdma_accept", EOPNOTSUPP, "connections of the program's own QPs");
}
QpAttrMask CmId::init_qp_attr(QpState, QpAttr&) const {
  throw_verb_error("rdma_init_qp_attr", EOPNOTSUPP, "connections of the program's own QPs");
}
void CmId::migrate(CmEventChannel&) {
  throw_verb_error("rdma_migrate_id", EOPNOTSUPP, "moving ids between channels");
}
void CmId::set_ack_timeout(std::uint8_t) {
  throw_verb_error("rdma_set_option", EOPNOTSUPP, "RDMA_OPTION_ID_ACK_TIMEOUT");
}
void CmId::establish() {
  throw_verb_error("rdma_establish", EOPNOTSUPP, "connections of the program's own QPs");
}

std::unique_ptr<CmEventChannel> Backend::create_cm_channel() {
  throw_verb_error("rdma_create_event_channel", EOPNOTSUPP,
                   "the " + std::string(name()) + " backend has no connection manager");
}

}  // namespace verbsim
