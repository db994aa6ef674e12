#include "verbsim/connect.hpp"

#include "verbsim/error.hpp"

namespace verbsim {

std::uint8_t roce_v2_gid_index(const Context& ctx, std::uint8_t port_num) {
  const int entries = ctx.query_port(port_num).gid_tbl_len;
  for (int i = 0; i < entries && i <= 255; ++i) {
    try {
      if (ctx.query_gid(port_num, i).is_ipv4_mapped()) return static_cast<std::uint8_t>(i);
    } catch (const VerbError&) {
      // An entry the device cannot report (empty on rxe): not ours.
    }
  }
  return 0;
}

QpAttrMask init_attr(QpType type, const ConnectOptions& opt, QpAttr& a) {
  a.qp_state = QpState::init;
  a.pkey_index = 0;
  a.port_num = opt.port_num;
  auto mask = QpAttrMask::state | QpAttrMask::pkey_index | QpAttrMask::port;
  if (type == QpType::ud) {
    a.qkey = opt.qkey;
    return mask | QpAttrMask::qkey;
  }
  a.qp_access_flags = opt.access;
  return mask | QpAttrMask::access_flags;
}

QpAttrMask rtr_attr(QpType type, const Endpoint& remote, const ConnectOptions& opt, QpAttr& a) {
  a.qp_state = QpState::rtr;
  auto mask = QpAttrMask::state;
  if (type == QpType::ud) return mask;
  a.path_mtu = opt.path_mtu;
  a.dest_qp_num = remote.qpn;
  a.rq_psn = remote.psn;
  a.ah_attr.is_global = true;
  a.ah_attr.grh.dgid = remote.gid;
  a.ah_attr.grh.sgid_index = opt.sgid_index;
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.grh.flow_label = opt.flow_label;
  a.ah_attr.port_num = opt.port_num;
  mask |= QpAttrMask::av | QpAttrMask::path_mtu | QpAttrMask::dest_qpn | QpAttrMask::rq_psn;
  if (type == QpType::rc) {
    a.max_dest_rd_atomic = opt.max_dest_rd_atomic;
    a.min_rnr_timer = opt.min_rnr_timer;
    mask |= QpAttrMask::max_dest_rd_atomic | QpAttrMask::min_rnr_timer;
  }
  return mask;
}

QpAttrMask rts_attr(QpType type, std::uint32_t sq_psn, const ConnectOptions& opt, QpAttr& a) {
  a.qp_state = QpState::rts;
  a.sq_psn = sq_psn;
  auto mask = QpAttrMask::state | QpAttrMask::sq_psn;
  if (type != QpType::rc) return mask;
  a.timeout = opt.timeout;
  a.retry_cnt = opt.retry_cnt;
  a.rnr_retry = opt.rnr_retry;
  a.max_rd_atomic = opt.max_rd_atomic;
  return mask | QpAttrMask::timeout | QpAttrMask::retry_cnt | QpAttrMask::rnr_retry |
         QpAttrMask::max_qp_rd_atomic;
}

void modify_to_init(QueuePair& qp, const ConnectOptions& opt) {
  QpAttr a;
  qp.modify(a, init_attr(qp.type(), opt, a));
}

void modify_to_rtr(QueuePair& qp, const Endpoint& remote, const ConnectOptions& opt) {
  QpAttr a;
  qp.modify(a, rtr_attr(qp.type(), remote, opt, a));
}

void modify_to_rts(QueuePair& qp, std::uint32_t sq_psn, const ConnectOptions& opt) {
  QpAttr a;
  qp.modify(a, rts_attr(qp.type(), sq_psn, opt, a));
}

void connect(QueuePair& qp, std::uint32_t local_psn, const Endpoint& remote,
             const ConnectOptions& opt) {
  modify_to_init(qp, opt);
  modify_to_rtr(qp, remote, opt);
  modify_to_rts(qp, local_psn, opt);
}

}  // namespace verbsim
