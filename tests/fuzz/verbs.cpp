// libFuzzer target: sequences of verbs through the libibverbs drop-in's C ABI, as a hostile or
// buggy C program makes them. Objects live in small tables; each operation takes its arguments
// from the input: sizes and counts at their edges (0, -1, INT_MAX, huge), keys and QP numbers
// right or wrong, states in any order, SGE lists longer than the QP allows, opcodes out of range.
// Every call must return an errno or succeed; a crash or a sanitizer report is a finding. All
// objects are destroyed at the end of each input (the drop-in's world lives on).
#include <fcntl.h>
#include <infiniband/verbs.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "input.hpp"

namespace {

using verbsim::fuzz::Input;

constexpr std::size_t kSlots = 4;
constexpr std::size_t kBuf = 1 << 16;
alignas(4096) std::uint8_t g_buf[kBuf];

struct Objects {
  ibv_context* ctx = nullptr;
  std::array<ibv_pd*, kSlots> pd{};
  std::array<ibv_mr*, kSlots> mr{};
  std::array<ibv_cq*, kSlots> cq{};
  std::array<ibv_qp*, kSlots> qp{};
  std::array<ibv_ah*, kSlots> ah{};
  ibv_comp_channel* ch = nullptr;
};

template <class T>
T* any(Input& in, const std::array<T*, kSlots>& a) {
  return a[in.below(kSlots)];
}

std::uint32_t key(Input& in, const Objects& o, bool remote) {
  const ibv_mr* mr = any(in, o.mr);
  if (mr != nullptr && in.u8() % 4 != 0) return remote ? mr->rkey : mr->lkey;
  return in.u32();
}

void modify(Input& in, Objects& o, ibv_qp* qp) {
  ibv_qp_attr a{};
  int mask = 0;
  const std::uint8_t to = in.u8() % 8;  // RESET .. ERR, and one past
  a.qp_state = static_cast<ibv_qp_state>(to);
  mask |= IBV_QP_STATE;
  if (in.u8() % 4 != 0) {  // the attributes the state needs, mostly right
    switch (to) {
      case IBV_QPS_INIT:
        a.pkey_index = static_cast<std::uint16_t>(in.size());
        a.port_num = in.u8() % 3;
        a.qp_access_flags = in.u8();
        a.qkey = 0x11111111;
        mask |= IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                (qp->qp_type == IBV_QPT_UD ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS);
        break;
      case IBV_QPS_RTR: {
        const ibv_qp* peer = any(in, o.qp);
        a.path_mtu = static_cast<ibv_mtu>(in.u8() % 7);
        a.dest_qp_num = peer != nullptr && in.u8() % 4 != 0 ? peer->qp_num : in.u32();
        a.rq_psn = in.u32();
        a.max_dest_rd_atomic = in.u8();
        a.min_rnr_timer = in.u8();
        a.ah_attr.port_num = in.u8() % 3;
        a.ah_attr.is_global = 1;
        a.ah_attr.grh.hop_limit = 1;
        a.ah_attr.grh.sgid_index = in.u8() % 3;
        ibv_query_gid(o.ctx, 1, 1, &a.ah_attr.grh.dgid);
        if (qp->qp_type != IBV_QPT_UD) {
          mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
          if (qp->qp_type == IBV_QPT_RC) mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
        }
        break;
      }
      case IBV_QPS_RTS:
        a.sq_psn = in.u32();
        a.timeout = in.u8();
        a.retry_cnt = in.u8();
        a.rnr_retry = in.u8();
        a.max_rd_atomic = in.u8();
        mask |= IBV_QP_SQ_PSN;
        if (qp->qp_type == IBV_QPT_RC) {
          mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
        }
        break;
      default: break;
    }
  } else {
    mask = static_cast<int>(in.u32());  // any mask at all: only masked fields may be read
  }
  ibv_modify_qp(qp, &a, mask);
}

void post_send(Input& in, const Objects& o, ibv_qp* qp) {
  std::vector<ibv_sge> sges(in.u8() % 40);
  for (ibv_sge& s : sges) {
    const std::uint64_t off = in.u32() % kBuf;
    s.addr = in.u8() % 8 != 0 ? reinterpret_cast<std::uint64_t>(g_buf + off) : in.u64();
    s.length = static_cast<std::uint32_t>(in.u8() % 8 != 0 ? in.u32() % (kBuf - off) : in.size());
    s.lkey = key(in, o, false);
  }
  ibv_send_wr wr{};
  wr.wr_id = in.u32();
  wr.sg_list = sges.data();
  wr.num_sge = in.u8() % 8 != 0 ? static_cast<int>(sges.size()) : static_cast<int>(in.size());
  if (wr.num_sge > static_cast<int>(sges.size()) && sges.size() < 64) {
    wr.num_sge = static_cast<int>(sges.size());  // never past the array: that is the program's bug
  }
  wr.opcode = static_cast<ibv_wr_opcode>(in.u8() % 16);
  wr.send_flags = in.u8();
  wr.imm_data = in.u32();
  const ibv_mr* mr = any(in, o.mr);
  wr.wr.rdma.remote_addr = mr != nullptr && in.u8() % 4 != 0
                               ? reinterpret_cast<std::uint64_t>(mr->addr) + in.u32() % 4096
                               : in.u64();
  wr.wr.rdma.rkey = key(in, o, true);
  if (qp->qp_type == IBV_QPT_UD) {
    wr.wr.ud.ah = any(in, o.ah);
    if (wr.wr.ud.ah == nullptr) return;  // a NULL AH is the program's crash on hardware too
    const ibv_qp* peer = any(in, o.qp);
    wr.wr.ud.remote_qpn = peer != nullptr ? peer->qp_num : in.u32();
    wr.wr.ud.remote_qkey = 0x11111111;
  }
  ibv_send_wr* bad = nullptr;
  ibv_post_send(qp, &wr, &bad);
}

void post_recv(Input& in, const Objects& o, ibv_qp* qp) {
  std::vector<ibv_sge> sges(in.u8() % 8);
  for (ibv_sge& s : sges) {
    const std::uint64_t off = in.u32() % kBuf;
    s.addr = reinterpret_cast<std::uint64_t>(g_buf + off);
    s.length = in.u32() % (kBuf - off);
    s.lkey = key(in, o, false);
  }
  ibv_recv_wr wr{};
  wr.wr_id = in.u32();
  wr.sg_list = sges.data();
  wr.num_sge = static_cast<int>(sges.size());
  ibv_recv_wr* bad = nullptr;
  ibv_post_recv(qp, &wr, &bad);
}

void step(Input& in, Objects& o) {
  const std::size_t i = in.below(kSlots);
  switch (in.u8() % 16) {
    case 0:
      if (o.pd[i] == nullptr) o.pd[i] = ibv_alloc_pd(o.ctx);
      break;
    case 1:
      if (o.pd[i] != nullptr && ibv_dealloc_pd(o.pd[i]) == 0) o.pd[i] = nullptr;
      break;
    case 2:
      if (ibv_pd* pd = any(in, o.pd); o.mr[i] == nullptr && pd != nullptr) {
        const std::uint64_t off = in.u32() % kBuf;
        const std::size_t len = in.u8() % 8 != 0 ? in.u32() % (kBuf - off) + 1 : in.size();
        void* addr = in.u8() % 16 != 0 ? static_cast<void*>(g_buf + off)
                                       : reinterpret_cast<void*>(in.u64());
        o.mr[i] = ibv_reg_mr(pd, addr, len, static_cast<int>(in.u8() % 16));
      }
      break;
    case 3:
      if (o.mr[i] != nullptr && ibv_dereg_mr(o.mr[i]) == 0) o.mr[i] = nullptr;
      break;
    case 4:
      if (o.cq[i] == nullptr) {
        const int cqe = in.u8() % 4 != 0 ? in.u8() % 64 + 1 : static_cast<int>(in.size());
        o.cq[i] = ibv_create_cq(o.ctx, cqe, nullptr, in.u8() % 2 != 0 ? o.ch : nullptr, 0);
      }
      break;
    case 5:
      if (o.cq[i] != nullptr && ibv_destroy_cq(o.cq[i]) == 0) o.cq[i] = nullptr;
      break;
    case 6:
      if (ibv_pd* pd = any(in, o.pd); o.qp[i] == nullptr && pd != nullptr) {
        ibv_qp_init_attr init{};
        init.send_cq = any(in, o.cq);
        init.recv_cq = any(in, o.cq);
        if (init.send_cq == nullptr || init.recv_cq == nullptr) break;  // NULL CQs: EINVAL
        static constexpr ibv_qp_type kTypes[] = {IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD};
        init.qp_type = kTypes[in.below(3)];
        init.cap.max_send_wr = static_cast<std::uint32_t>(in.u8() % 4 != 0 ? in.u8() % 32 : in.size());
        init.cap.max_recv_wr = static_cast<std::uint32_t>(in.u8() % 4 != 0 ? in.u8() % 32 : in.size());
        init.cap.max_send_sge = static_cast<std::uint32_t>(in.u8() % 4 != 0 ? in.u8() % 8 : in.size());
        init.cap.max_recv_sge = static_cast<std::uint32_t>(in.u8() % 4 != 0 ? in.u8() % 8 : in.size());
        init.cap.max_inline_data = static_cast<std::uint32_t>(in.u8() % 4 != 0 ? in.u8() : in.size());
        init.sq_sig_all = in.u8() % 2;
        o.qp[i] = ibv_create_qp(pd, &init);
      }
      break;
    case 7:
      if (o.qp[i] != nullptr && ibv_destroy_qp(o.qp[i]) == 0) o.qp[i] = nullptr;
      break;
    case 8:
      if (o.qp[i] != nullptr) modify(in, o, o.qp[i]);
      break;
    case 9:
    case 10:
      if (o.qp[i] != nullptr) post_send(in, o, o.qp[i]);
      break;
    case 11:
      if (o.qp[i] != nullptr) post_recv(in, o, o.qp[i]);
      break;
    case 12:
      if (o.cq[i] != nullptr) {
        ibv_wc wc[16];
        ibv_poll_cq(o.cq[i], static_cast<int>(in.u8() % 17), wc);
      }
      break;
    case 13:
      if (o.cq[i] != nullptr) {
        ibv_req_notify_cq(o.cq[i], in.u8() % 2);
        ibv_cq* cq = nullptr;
        void* cq_ctx = nullptr;
        if (ibv_get_cq_event(o.ch, &cq, &cq_ctx) == 0) ibv_ack_cq_events(cq, 1);
      }
      break;
    case 14:
      if (ibv_pd* pd = any(in, o.pd); o.ah[i] == nullptr && pd != nullptr) {
        ibv_ah_attr a{};
        a.port_num = in.u8() % 3;
        a.is_global = in.u8() % 4 != 0;
        a.grh.sgid_index = static_cast<std::uint8_t>(in.u8() % 3);
        a.grh.hop_limit = 1;
        ibv_query_gid(o.ctx, 1, 1, &a.grh.dgid);
        o.ah[i] = ibv_create_ah(pd, &a);
      }
      break;
    default: {
      ibv_port_attr pa;
      ibv_query_port(o.ctx, static_cast<std::uint8_t>(in.u8()), &pa);
      ibv_gid gid;
      ibv_query_gid(o.ctx, static_cast<std::uint8_t>(in.u8() % 3), static_cast<int>(in.size()), &gid);
      if (o.qp[i] != nullptr) {
        ibv_qp_attr qa;
        ibv_qp_init_attr qi;
        ibv_query_qp(o.qp[i], &qa, static_cast<int>(in.u32()), &qi);
      }
      break;
    }
  }
}

// Everything an input made goes, dependents first; a destroy refused with EBUSY would be a
// leak the next input inherits, so it is a finding.
void destroy_all(Objects& o) {
  auto check = [](int rc, const char* what) {
    if (rc != 0) {
      std::fprintf(stderr, "fuzz_verbs: %s failed with %d at cleanup\n", what, rc);
      std::abort();
    }
  };
  for (ibv_qp*& qp : o.qp) if (qp != nullptr) { check(ibv_destroy_qp(qp), "ibv_destroy_qp"); qp = nullptr; }
  for (ibv_ah*& ah : o.ah) if (ah != nullptr) { check(ibv_destroy_ah(ah), "ibv_destroy_ah"); ah = nullptr; }
  for (ibv_mr*& mr : o.mr) if (mr != nullptr) { check(ibv_dereg_mr(mr), "ibv_dereg_mr"); mr = nullptr; }
  for (ibv_cq*& cq : o.cq) {
    if (cq == nullptr) continue;
    // Events taken and not acknowledged were acknowledged at once above.
    check(ibv_destroy_cq(cq), "ibv_destroy_cq");
    cq = nullptr;
  }
  for (ibv_pd*& pd : o.pd) if (pd != nullptr) { check(ibv_dealloc_pd(pd), "ibv_dealloc_pd"); pd = nullptr; }
}

void fcntl_nonblock(int fd) {
  const int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

ibv_context* open_first_device() {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr || n == 0) {
    std::fprintf(stderr, "fuzz_verbs: no device (is the drop-in the libibverbs loaded?)\n");
    std::abort();
  }
  ibv_context* ctx = ibv_open_device(list[0]);
  ibv_free_device_list(list);
  return ctx;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static ibv_context* ctx = open_first_device();
  static ibv_comp_channel* ch = [] {
    ibv_comp_channel* c = ibv_create_comp_channel(ctx);
    // Never block: an empty channel answers EAGAIN.
    if (c != nullptr) fcntl_nonblock(c->fd);
    return c;
  }();
  Input in(data, size);
  Objects o;
  o.ctx = ctx;
  o.ch = ch;
  for (int i = 0; i < 96 && !in.empty(); ++i) step(in, o);
  destroy_all(o);
  return 0;
}
