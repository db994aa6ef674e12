// Where the profiles' transports differ in what the second round of fidelity work measured on
// rxe (docs/FIDELITY.md, "rxe facts found by the suite"). One table per profile, looked up by
// the world's profile; it sits beside ProfileTraits (fabric/profile.hpp) while that file is being
// reworked, and its fields move there with the next change to it.
#pragma once

#include "verbsim/sim/world.hpp"

namespace verbsim::sim {

struct TransportQuirks {
  // rxe: the local SGEs of an RDMA READ or atomic are checked when the response arrives (the
  // completer copies it into them), not before the request is sent: a bad rkey is found first
  // (REM_ACCESS_ERR, the responder to ERR), and an atomic with a bad local key has executed at
  // the responder when its requester fails with LOC_PROT_ERR. Elsewhere the requester checks
  // them first, as a NIC does when it posts the WQE.
  bool read_atomic_local_check_on_response;
  // rxe: an RC QP going to ERR flushes its receive queue before its send queue (rxe_qp_error
  // schedules the responder's task first, then the completer's); UC and UD flush the send queue
  // first (their completer runs at once). A shared CQ shows the order.
  bool rc_flushes_receives_first;
  // rxe: the IPv4 TTL of a UD message is the route's (64), not the AH's hop limit: the kernel's
  // AH, which rxe sends with, takes the hop limit its address resolution found
  // (ib_resolve_unicast_gid_dmac). Elsewhere the AH's hop limit is the TTL.
  bool ud_ttl_from_route;
  // rxe: a message to its own device never passes the IP stack's output (rxe_loopback), so the
  // IPv4 header in the receiver's GRH area has checksum 0.
  bool loopback_ipv4_checksum_zero;

  static const TransportQuirks& of(Profile p) noexcept {
    static constexpr TransportQuirks kStrict{
        .read_atomic_local_check_on_response = false,
        .rc_flushes_receives_first = false,
        .ud_ttl_from_route = false,
        .loopback_ipv4_checksum_zero = false,
    };
    static constexpr TransportQuirks kRxe{
        .read_atomic_local_check_on_response = true,   // measured: Precedence.*
        .rc_flushes_receives_first = true,             // measured: SharedCq.*Flush*
        .ud_ttl_from_route = true,                     // measured: UdGrh.HopLimitIsTheIpv4Ttl
        .loopback_ipv4_checksum_zero = true,           // measured: UdGrh.Ipv4HeaderFields
    };
    return p == Profile::rxe ? kRxe : kStrict;  // mlx5 as strict
  }
};

}  // namespace verbsim::sim
