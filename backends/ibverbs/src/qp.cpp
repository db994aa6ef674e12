// QueuePair over ibv_qp: posting without allocation, modify/query through QpAttr.
#include <infiniband/verbs.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <string>

#include "objects.hpp"
#include "post.hpp"
#include "verbsim/abi/translate.hpp"
#include "verbsim/ibverbs/backend.hpp"

namespace verbsim::ibverbs {

namespace {

std::string describe(const QpInitAttr& a) {
  char buf[160];
  std::snprintf(buf, sizeof buf,
                "type=%s max_send_wr=%u max_recv_wr=%u max_send_sge=%u max_recv_sge=%u "
                "max_inline_data=%u%s",
                std::string(to_string(a.type)).c_str(), a.cap.max_send_wr, a.cap.max_recv_wr,
                a.cap.max_send_sge, a.cap.max_recv_sge, a.cap.max_inline_data,
                a.srq != nullptr ? " srq" : "");
  return buf;
}

// "qp 0x11 RESET->RTR mask=state|av|path_mtu", for a failed modify.
std::string describe_modify(std::uint32_t qp_num, QpState from, const QpAttr& attr,
                            QpAttrMask mask) {
  // clang-format off
  static constexpr std::array<const char*, 21> names{
      "state",         "cur_state",        "en_sqd_async_notify", "access_flags",
      "pkey_index",    "port",             "qkey",                "av",
      "path_mtu",      "timeout",          "retry_cnt",           "rnr_retry",
      "rq_psn",        "max_qp_rd_atomic", "alt_path",            "min_rnr_timer",
      "sq_psn",        "max_dest_rd_atomic", "path_mig_state",    "cap",
      "dest_qpn"};
  // clang-format on
  char head[48];
  std::snprintf(head, sizeof head, "qp 0x%x ", qp_num);
  std::string out = head;
  out += to_string(from);
  if (any(mask, QpAttrMask::state)) {
    out += "->";
    out += to_string(attr.qp_state);
  }
  out += " mask=";
  const auto bits = to_underlying(mask);
  bool first = true;
  for (std::size_t i = 0; i < 32; ++i) {
    if ((bits & (1u << i)) == 0) continue;
    if (!first) out += '|';
    first = false;
    if (i < names.size()) {
      out += names[i];
    } else {
      out += "bit" + std::to_string(i);
    }
  }
  if (first) out += "none";
  return out;
}

}  // namespace

IbvQp::IbvQp(ibv_pd* pd, const QpInitAttr& attr)
    : fast_batch_{attr.type == QpType::ud ? 0u : 1u, attr.srq != nullptr ? 0u : 1u},
      type_(attr.type),
      has_srq_(attr.srq != nullptr),
      requested_cap_(attr.cap) {
  if (attr.send_cq == nullptr || attr.recv_cq == nullptr) {
    throw_verb_error("ibv_create_qp", EINVAL, "send_cq and recv_cq are required");
  }
  auto* send_cq = dynamic_cast<IbvCq*>(attr.send_cq);
  auto* recv_cq = dynamic_cast<IbvCq*>(attr.recv_cq);
  if (send_cq == nullptr || recv_cq == nullptr) {
    throw_verb_error("ibv_create_qp", EINVAL, "CQ from another backend");
  }
  IbvSrq* srq = nullptr;
  if (attr.srq != nullptr) {
    srq = dynamic_cast<IbvSrq*>(attr.srq);
    if (srq == nullptr) throw_verb_error("ibv_create_qp", EINVAL, "SRQ from another backend");
  }

  ibv_qp_init_attr init{};
  init.qp_context = static_cast<QueuePair*>(this);
  init.send_cq = send_cq->native();
  init.recv_cq = recv_cq->native();
  init.srq = srq != nullptr ? srq->native() : nullptr;
  init.cap = abi::to_ibv(attr.cap);
  if (srq != nullptr) {
    // Ignored by ibv_create_qp with an SRQ; zero so no provider validates them.
    init.cap.max_recv_wr = 0;
    init.cap.max_recv_sge = 0;
  }
  init.qp_type = abi::to_ibv(attr.type);
  init.sq_sig_all = attr.sq_sig_all ? 1 : 0;
  errno = 0;
  qp_ = ::ibv_create_qp(pd, &init);
  if (qp_ == nullptr) {
    const int err = creator_errno();
    throw_verb_error("ibv_create_qp", err, describe(attr));
  }
  qp_num_ = qp_->qp_num;
  cap_ = abi::from_ibv(init.cap);  // ibv_create_qp wrote back what it gave
  unbind_needs_mr_ = is_rxe(qp_->context);
}

IbvQp::~IbvQp() {
  if (const int err = release(); err != 0) warn_leak("ibv_destroy_qp", err, "QP");
}

int IbvQp::release() noexcept {
  if (qp_ == nullptr) return 0;
  if (const int ret = ::ibv_destroy_qp(qp_); ret != 0) return returned_errno(ret);
  qp_ = nullptr;
  return 0;
}

void IbvQp::destroy() {
  if (const int err = release(); err != 0) throw_verb_error("ibv_destroy_qp", err);
}

namespace {

// Why `mw` cannot be handed to the provider, or nullptr.
const char* unusable(const IbvMw* mw) noexcept {
  if (mw == nullptr) return "memory window from another backend";
  if (mw->native() == nullptr) return "memory window was deallocated";
  return nullptr;
}

// Fills `out` from `in` (an MR is optional: a type 1 unbind names none). Returns nullptr, or
// why it cannot be handed to the provider.
const char* fill_bind_info(ibv_mw_bind_info& out, const MwBindInfo& in) noexcept {
  out.mr = nullptr;
  if (in.mr != nullptr) {
    const auto* mr = dynamic_cast<const IbvMr*>(in.mr);
    if (mr == nullptr) return "MR from another backend";
    if (mr->native() == nullptr) return "MR was deregistered";
    out.mr = mr->native();
  }
  out.addr = in.addr;
  out.length = in.length;
  out.mw_access_flags = abi::to_ibv(in.access);
  return nullptr;
}

// Fills `out.bind_mw` from a BIND_MW work request. Returns nullptr, or why the WR is refused
// before the provider sees it (providers dereference the window and the MR without looking).
const char* fill_bind_mw(ibv_send_wr& out, const SendWr& wr) noexcept {
  if (wr.bind_mw == nullptr || wr.bind_mw->mw == nullptr || wr.bind_mw->info.mr == nullptr) {
    return "BIND_MW without window or MR";
  }
  const auto* mw = dynamic_cast<const IbvMw*>(wr.bind_mw->mw);
  if (const char* why = unusable(mw)) return why;
  if (const char* why = fill_bind_info(out.bind_mw.bind_info, wr.bind_mw->info)) return why;
  out.bind_mw.mw = mw->native();
  out.bind_mw.rkey = wr.rkey;
  return nullptr;
}

// Windows remember the key of each BIND_MW the provider accepted (IbvMw::posted_bind).
void note_binds(std::span<const SendWr> posted) noexcept {
  for (const SendWr& wr : posted) {
    if (wr.opcode == WrOpcode::bind_mw) static_cast<IbvMw*>(wr.bind_mw->mw)->posted_bind(wr.rkey);
  }
}

// IbvQp::post_send for any batch, in chunks (see post.hpp). Kept out of line: its array would
// otherwise be set up on the fast path too.
[[gnu::noinline]] PostResult post_send_chunks(ibv_qp* qp, bool ud,
                                              std::span<const SendWr> wrs) noexcept {
  std::array<ibv_send_wr, kChunkWrs> chain;
  std::size_t base = 0;
  while (base < wrs.size()) {
    std::size_t n = 0;
    // Set when WR base + n is refused before the provider sees it; the WRs before it go first.
    int refused = 0;
    const char* why = "";
    bool binds = false;  // the chunk holds a BIND_MW
    for (; base + n < wrs.size() && n < kChunkWrs; ++n) {
      const SendWr& wr = wrs[base + n];
      if (wr.sg_list.size() > kMaxSges) {
        refused = ENOMEM;
        why = "too many SGEs";
        break;
      }
      ibv_send_wr& out = chain[n];
      out = ibv_send_wr{};
      if (ud) {
        // Checked here: providers dereference the AH without looking.
        if (wr.ah == nullptr) {
          refused = EINVAL;
          why = "UD send without address handle";
          break;
        }
        const auto* ah = dynamic_cast<const IbvAh*>(wr.ah);
        if (ah == nullptr) {
          refused = EINVAL;
          why = "address handle from another backend";
          break;
        }
        out.wr.ud.ah = ah->native();
        out.wr.ud.remote_qpn = wr.remote_qpn;
        out.wr.ud.remote_qkey = wr.remote_qkey;
      } else if (wr.opcode == WrOpcode::atomic_cmp_and_swp ||
                 wr.opcode == WrOpcode::atomic_fetch_and_add) {
        out.wr.atomic.remote_addr = wr.remote_addr;
        out.wr.atomic.compare_add = wr.compare_add;
        out.wr.atomic.swap = wr.swap;
        out.wr.atomic.rkey = wr.rkey;
      } else {
        out.wr.rdma.remote_addr = wr.remote_addr;
        out.wr.rdma.rkey = wr.rkey;
      }
      if (wr.opcode == WrOpcode::local_inv || wr.opcode == WrOpcode::send_with_inv) {
        out.invalidate_rkey = wr.imm_data;  // the key, host order (imm_data's place)
      } else {
        out.imm_data = htonl(wr.imm_data);
      }
      if (wr.opcode == WrOpcode::bind_mw) {
        if (const char* bad_bind = fill_bind_mw(out, wr); bad_bind != nullptr) {
          refused = EINVAL;
          why = bad_bind;
          break;
        }
        binds = true;
      }
      out.wr_id = wr.wr_id;
      out.sg_list = abi::as_ibv(wr.sg_list);
      out.num_sge = static_cast<int>(wr.sg_list.size());
      out.opcode = abi::to_ibv(wr.opcode);
      out.send_flags = abi::to_ibv(wr.flags);
      if (n > 0) chain[n - 1].next = &out;
    }
    if (n > 0) {
      ibv_send_wr* bad = nullptr;
      if (const int ret = ::ibv_post_send(qp, chain.data(), &bad); ret != 0) {
        const int err = returned_errno(ret);
        const std::uint32_t taken = bad_index(chain.data(), n, bad);
        if (binds) note_binds(wrs.subspan(base, taken));
        return {static_cast<std::uint32_t>(base) + taken, err, post_reason(err, true)};
      }
      if (binds) note_binds(wrs.subspan(base, n));
      base += n;
    }
    if (refused != 0) return {static_cast<std::uint32_t>(base), refused, why};
  }
  return {static_cast<std::uint32_t>(wrs.size()), 0, ""};
}

}  // namespace

PostResult IbvQp::post_send(std::span<const SendWr> wrs) noexcept {
  // Fast path: one WR without atomics on an RC or UC QP (fast_batch_.send is 0 on UD, whose
  // address handles need translating). It fills the fields providers read for these opcodes and no
  // others (the rest of an ibv_send_wr is for atomics, UD, XRC, memory windows and TSO);
  // post_send_chunks zeroes whole WRs. The opcode test also sends LOCAL_INV, BIND_MW and
  // SEND_WITH_INV (all above RDMA_READ) to post_send_chunks.
  if (wrs.size() != fast_batch_.send) [[unlikely]] {
    return post_send_chunks(qp_, type_ == QpType::ud, wrs);
  }
  const SendWr& wr = wrs.front();
  const auto opcode = static_cast<unsigned>(wr.opcode);
  static_assert(IBV_WR_LOCAL_INV > IBV_WR_RDMA_READ && IBV_WR_BIND_MW > IBV_WR_RDMA_READ &&
                IBV_WR_SEND_WITH_INV > IBV_WR_RDMA_READ);
  if (opcode > IBV_WR_RDMA_READ || wr.sg_list.size() > kMaxSges) [[unlikely]] {
    return post_send_chunks(qp_, false, wrs);
  }
  ibv_send_wr out;
  out.wr_id = wr.wr_id;
  out.next = nullptr;
  out.sg_list = abi::as_ibv(wr.sg_list);
  out.num_sge = static_cast<int>(wr.sg_list.size());
  out.opcode = static_cast<ibv_wr_opcode>(opcode);
  out.send_flags = abi::to_ibv(wr.flags);
  out.imm_data = htonl(wr.imm_data);
  out.wr.rdma.remote_addr = wr.remote_addr;
  out.wr.rdma.rkey = wr.rkey;
  ibv_send_wr* bad = nullptr;
  if (const int ret = ::ibv_post_send(qp_, &out, &bad); ret != 0) [[unlikely]] {
    const int err = returned_errno(ret);
    return {0, err, post_reason(err, true)};
  }
  return {1, 0, ""};
}

PostResult IbvQp::post_recv(std::span<const RecvWr> wrs) noexcept {
  const auto post = [this](ibv_recv_wr* first, ibv_recv_wr** bad) noexcept {
    return ::ibv_post_recv(qp_, first, bad);
  };
  // fast_batch_.recv is 0 with an SRQ, so one test sends both cases here.
  if (wrs.size() != fast_batch_.recv) [[unlikely]] {
    // Checked here: not every provider refuses it.
    if (has_srq_ && !wrs.empty()) return {0, EINVAL, "QP receives from an SRQ"};
    return post_recv_chunks(wrs, post);
  }
  return post_one_recv(wrs.front(), post);
}

PostResult IbvQp::bind_mw(MemoryWindow& mw, const MwBind& bind) noexcept {
  auto* w = dynamic_cast<IbvMw*>(&mw);
  if (const char* why = unusable(w)) return {0, EINVAL, why};
  ibv_mw_bind b{};
  b.wr_id = bind.wr_id;
  b.send_flags = abi::to_ibv(bind.flags);
  if (const char* why = fill_bind_info(b.bind_info, bind.info)) return {0, EINVAL, why};
  // An unbind (length 0) names no MR. The rxe kernel looks no MR up for it, but the rxe provider
  // dereferences bind_info.mr regardless: hand it an MR of the window's PD with lkey 0.
  ibv_mr stand_in{};
  if (b.bind_info.mr == nullptr && bind.info.addr == 0 && bind.info.length == 0 &&
      unbind_needs_mr_) {
    stand_in.context = qp_->context;
    stand_in.pd = w->native()->pd;
    b.bind_info.mr = &stand_in;
  }
  if (const int ret = ::ibv_bind_mw(qp_, w->native(), &b); ret != 0) {
    const int err = returned_errno(ret);
    switch (err) {
      case EINVAL: return {0, err, "not a type 1 window, or a bind the QP or MR cannot take"};
      case EPERM: return {0, err, "MR of another protection domain"};
      default: return {0, err, post_reason(err, true)};
    }
  }
  return {1, 0, ""};
}

void IbvQp::modify(const QpAttr& attr, QpAttrMask mask) {
  ibv_qp_attr a = abi::to_ibv(attr);
  if (const int ret = ::ibv_modify_qp(qp_, &a, abi::to_ibv(mask)); ret != 0) {
    // qp_->state is libibverbs' record of the last state set through ibv_modify_qp.
    throw_verb_error("ibv_modify_qp", returned_errno(ret),
                     describe_modify(qp_num_, abi::from_ibv(qp_->state), attr, mask));
  }
}

QpAttr IbvQp::query(QpAttrMask mask) const {
  ibv_qp_attr a{};
  ibv_qp_init_attr init{};
  const int ibv_mask = abi::to_ibv(mask | QpAttrMask::state);
  if (const int ret = ::ibv_query_qp(qp_, &a, ibv_mask, &init); ret != 0) {
    char detail[32];
    std::snprintf(detail, sizeof detail, "qp 0x%x", qp_num_);
    throw_verb_error("ibv_query_qp", returned_errno(ret), detail);
  }
  return abi::from_ibv(a);
}

QpState IbvQp::state() const noexcept {
  ibv_qp_attr a{};
  ibv_qp_init_attr init{};
  if (::ibv_query_qp(qp_, &a, IBV_QP_STATE, &init) != 0) return abi::from_ibv(qp_->state);
  return abi::from_ibv(a.qp_state);
}

ibv_qp* native(verbsim::QueuePair& qp) noexcept {
  auto* q = dynamic_cast<IbvQp*>(&qp);
  return q != nullptr ? q->native() : nullptr;
}

}  // namespace verbsim::ibverbs
