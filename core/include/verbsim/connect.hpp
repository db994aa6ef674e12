// The usual RESET -> INIT -> RTR -> RTS sequence, for applications and tests that do not need
// to spell out every attribute.
#pragma once

#include <cstdint>

#include "verbsim/context.hpp"
#include "verbsim/queue_pair.hpp"
#include "verbsim/types.hpp"

namespace verbsim {

// What a peer tells the other side out of band (the "exchange" step of every verbs program).
struct Endpoint {
  Gid gid;
  std::uint32_t qpn = 0;
  std::uint32_t psn = 0;
};

struct ConnectOptions {
  std::uint8_t port_num = 1;
  std::uint8_t sgid_index = 1;  // RoCE v2 IPv4 GID on rxe and the simulator
  Access access = Access::local_write | Access::remote_write | Access::remote_read |
                  Access::remote_atomic;
  Mtu path_mtu = Mtu::mtu_1024;
  std::uint8_t timeout = 14;      // 67 ms local ACK timeout
  std::uint8_t retry_cnt = 7;
  std::uint8_t rnr_retry = 7;     // 7 = retry forever
  std::uint8_t min_rnr_timer = 12;  // 0.64 ms
  std::uint8_t max_rd_atomic = 1;
  std::uint8_t max_dest_rd_atomic = 1;
  std::uint32_t qkey = 0x11111111;  // UD
  std::uint32_t flow_label = 0;     // the address vector's GRH flow label (20 bits)
};

// Index of the port's first IPv4-mapped GID (RoCE v2; 1 on rxe and the simulator), or 0 when
// there is none (InfiniBand). Entries the device cannot report are skipped.
std::uint8_t roce_v2_gid_index(const Context& ctx, std::uint8_t port_num = 1);

// The attributes and mask each step below gives a QP of `type` (for rdma_init_qp_attr-style
// callers that hand them on).
QpAttrMask init_attr(QpType type, const ConnectOptions& opt, QpAttr& a);
QpAttrMask rtr_attr(QpType type, const Endpoint& remote, const ConnectOptions& opt, QpAttr& a);
QpAttrMask rts_attr(QpType type, std::uint32_t sq_psn, const ConnectOptions& opt, QpAttr& a);

// Each throws VerbError (ibv_modify_qp) like QueuePair::modify.
void modify_to_init(QueuePair& qp, const ConnectOptions& opt = {});
void modify_to_rtr(QueuePair& qp, const Endpoint& remote, const ConnectOptions& opt = {});
void modify_to_rts(QueuePair& qp, std::uint32_t sq_psn, const ConnectOptions& opt = {});

// RESET -> RTS for an RC or UC QP talking to `remote`; for UD `remote` is unused.
void connect(QueuePair& qp, std::uint32_t local_psn, const Endpoint& remote,
             const ConnectOptions& opt = {});

}  // namespace verbsim
