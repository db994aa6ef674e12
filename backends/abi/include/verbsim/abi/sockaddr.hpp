// SockAddr (verbsim/cm.hpp) to and from the sockaddr_in / sockaddr_in6 rdma_cm takes: for the
// ibverbs backend's connection manager and the librdmacm drop-in. Header-only, so that the
// drop-in, which does not link the core, can use it.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>

#include "verbsim/cm.hpp"

namespace verbsim::abi {

inline sockaddr_storage to_sockaddr(const SockAddr& a) noexcept {
  sockaddr_storage out{};
  if (Gid{a.ip}.is_ipv4_mapped()) {  // not a.is_ipv4(): the drop-in does not link the core
    sockaddr_in in{};
    in.sin_family = AF_INET;
    in.sin_port = htons(a.port);
    std::memcpy(&in.sin_addr, a.ip.data() + 12, 4);
    std::memcpy(&out, &in, sizeof in);
  } else {
    sockaddr_in6 in6{};
    in6.sin6_family = AF_INET6;
    in6.sin6_port = htons(a.port);
    std::memcpy(&in6.sin6_addr, a.ip.data(), 16);
    std::memcpy(&out, &in6, sizeof in6);
  }
  return out;
}

// An all-zero SockAddr for a family other than AF_INET and AF_INET6 (none is set yet).
inline SockAddr from_sockaddr(const sockaddr* sa) noexcept {
  SockAddr out;
  if (sa == nullptr) return out;
  if (sa->sa_family == AF_INET) {
    sockaddr_in in{};
    std::memcpy(&in, sa, sizeof in);
    out.ip[10] = 0xff;
    out.ip[11] = 0xff;
    std::memcpy(out.ip.data() + 12, &in.sin_addr, 4);
    out.port = ntohs(in.sin_port);
  } else if (sa->sa_family == AF_INET6) {
    sockaddr_in6 in6{};
    std::memcpy(&in6, sa, sizeof in6);
    std::memcpy(out.ip.data(), &in6.sin6_addr, 16);
    out.port = ntohs(in6.sin6_port);
  }
  return out;
}

}  // namespace verbsim::abi
