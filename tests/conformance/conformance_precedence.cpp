// Which error a request reports when more than one thing is wrong with it, and where each check
// happens: an RDMA READ, compare-and-swap, fetch-and-add or WRITE whose local SGE key is
// unknown, whose rkey is, or both, signaled or not. A READ's or atomic's own buffer only matters
// once its response arrives (rxe checks it then: the responder has executed the request, and an
// atomic has changed the remote word); a WRITE's is read before anything is sent.
#include <cerrno>
#include <cstring>

#include "conformance.hpp"

namespace verbsim::conformance {
namespace {

constexpr std::size_t kLocal = 0;      // the requester's SGE: a READ's destination, a WRITE's source
constexpr std::size_t kRemote = 16384;  // the target of the request
constexpr std::uint64_t kWord = 5;     // the remote word before an atomic

enum class Bad { local, remote, both };

class Precedence : public Conformance {
 protected:
  std::uint64_t& word(std::size_t offset) { return *reinterpret_cast<std::uint64_t*>(mem(offset)); }

  // One request of `op` with the keys `bad` names spoiled (an unknown key: the MR's with its
  // index changed), on a fresh pair.
  void run(WrOpcode op, Bad bad, bool signaled) {
    Pair p = make_pair();
    const bool atomic = op == WrOpcode::atomic_cmp_and_swp || op == WrOpcode::atomic_fetch_and_add;
    const std::uint32_t len = atomic ? 8 : 64;
    std::memset(mem(kLocal), 0x11, 64);
    std::memset(mem(kRemote), 0x22, 64);
    if (atomic) word(kRemote) = kWord;
    Sge s = sge(kLocal, len);
    std::uint32_t rkey = mr().rkey();
    if (bad != Bad::remote) s.lkey ^= 0x100;
    if (bad != Bad::local) rkey ^= 0x100;
    SendWr wr = rdma_wr(7, op, &s, mr().address(kRemote), rkey,
                        signaled ? SendFlags::signaled : SendFlags::none);
    wr.compare_add = op == WrOpcode::atomic_cmp_and_swp ? kWord : 3;
    wr.swap = 9;
    CHECK_ERR("post", p.a->post_send(wr).error(), 0);

    // Who finds the fault first: the requester before sending (a WRITE's source; every local
    // key where the profile checks them up front), or the responder (the rkey), or the
    // requester when the response lands (a READ's or atomic's own buffer on rxe).
    const bool reads_back = op == WrOpcode::rdma_read || atomic;
    const bool local_first = bad != Bad::remote && (!reads_back || !expect().local_check_on_response);
    const bool responder_fails = !local_first && bad != Bad::local;
    WcStatus status = WcStatus::rem_access_err;
    if (local_first) status = reads_back ? WcStatus::loc_prot_err : expect().bad_lkey;
    if (!local_first && !responder_fails) status = WcStatus::loc_prot_err;  // on the response
    const WcOpcode wc_op = op == WrOpcode::rdma_read             ? WcOpcode::rdma_read
                           : op == WrOpcode::atomic_cmp_and_swp   ? WcOpcode::comp_swap
                           : op == WrOpcode::atomic_fetch_and_add ? WcOpcode::fetch_add
                                                                  : WcOpcode::rdma_write;
    const auto wcs = poll_n(*p.cq_a, 1);
    CHECK_OBS("wc", describe(wcs), err_wc(status, wc_op, len));
    CHECK_OBS("wr_id", wcs.empty() ? 0 : wcs[0].wr_id, 7);
    CHECK_OBS("requester", wait_state(*p.a, QpState::err), QpState::err);
    const QpState responder = responder_fails ? QpState::err : QpState::rts;
    CHECK_OBS("responder", wait_state(*p.b, responder), responder);
    // The remote memory: an atomic whose rkey is good has executed, whatever became of its
    // result; nothing else changes it.
    const bool executed = atomic && !local_first && !responder_fails;
    if (atomic) {
      const std::uint64_t after = op == WrOpcode::atomic_cmp_and_swp ? 9 : kWord + 3;
      CHECK_OBS("remote", word(kRemote), executed ? after : kWord);
    } else {
      bool untouched = true;
      for (int i = 0; i < 64; ++i) untouched = untouched && mem(kRemote)[i] == 0x22;
      CHECK_OBS("remote_untouched", untouched, true);
    }
    // The requester's own buffer is never written through a bad key.
    bool local_untouched = true;
    for (std::uint32_t i = 0; i < len; ++i) local_untouched = local_untouched && mem(kLocal)[i] == 0x11;
    CHECK_OBS("local_untouched", local_untouched, true);
    CHECK_OBS("more", describe(poll_quiet(*p.cq_a)), "none");
  }
};

#define VERBSIM_PRECEDENCE_CASES(Op, opcode)                                                    \
  TEST_P(Precedence, Op##BadLocalKeySignaled) { run(opcode, Bad::local, true); }                \
  TEST_P(Precedence, Op##BadLocalKeyUnsignaled) { run(opcode, Bad::local, false); }             \
  TEST_P(Precedence, Op##BadRemoteKeySignaled) { run(opcode, Bad::remote, true); }              \
  TEST_P(Precedence, Op##BadRemoteKeyUnsignaled) { run(opcode, Bad::remote, false); }           \
  TEST_P(Precedence, Op##BothKeysBadSignaled) { run(opcode, Bad::both, true); }                 \
  TEST_P(Precedence, Op##BothKeysBadUnsignaled) { run(opcode, Bad::both, false); }

VERBSIM_PRECEDENCE_CASES(Read, WrOpcode::rdma_read)
VERBSIM_PRECEDENCE_CASES(CompareSwap, WrOpcode::atomic_cmp_and_swp)
VERBSIM_PRECEDENCE_CASES(FetchAdd, WrOpcode::atomic_fetch_and_add)
VERBSIM_PRECEDENCE_CASES(Write, WrOpcode::rdma_write)

VERBSIM_CONFORMANCE_SUITE(Precedence);

}  // namespace
}  // namespace verbsim::conformance
