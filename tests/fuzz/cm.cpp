// libFuzzer target: sequences of connection-manager calls on a fresh simulated world, under a
// fault plan that loses, per the input, some of the CM's messages. Ids are created, bound,
// resolved, listened on, connected, accepted, rejected, disconnected and destroyed in any order;
// events are taken and the world run in between. A refused call (VerbError, the errno rdma_cm
// gives) is fine; a crash, a sanitizer report, an exception of another kind or a world whose
// accounting does not balance is a finding.
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "input.hpp"
#include "verbsim/sim/world.hpp"
#include "verbsim/verbsim.hpp"

namespace verbsim {
namespace {

constexpr std::size_t kSlots = 8;
const std::array<const char*, 5> kAddrs = {"10.0.0.1:7471", "10.0.1.1:0", "10.0.0.1:0",
                                           "10.0.9.9:7471", "0.0.0.0:7471"};

struct Host {
  std::unique_ptr<Context> ctx;
  std::unique_ptr<ProtectionDomain> pd;
  std::unique_ptr<CompletionQueue> cq;
  std::unique_ptr<CmEventChannel> ch;
};

struct Slot {
  std::unique_ptr<CmId> id;
  std::unique_ptr<QueuePair> qp;
};

std::unique_ptr<QueuePair> make_qp(Host& h, bool ud) {
  QpInitAttr init;
  init.type = ud ? QpType::ud : QpType::rc;
  init.send_cq = h.cq.get();
  init.recv_cq = h.cq.get();
  init.cap = {.max_send_wr = 2, .max_recv_wr = 2, .max_send_sge = 1, .max_recv_sge = 1};
  return h.pd->create_qp(init);
}

void run(fuzz::Input& in) {
  sim::Config config;
  config.seed = in.u8();
  config.env_faults = false;
  const std::uint8_t loss = in.u8() % 4;  // 0: none, else 10, 20 or 30 % of the CM's messages
  if (loss != 0) config.faults = sim::FaultPlan::parse("cm_drop p=0." + std::to_string(loss));
  config.budget = sim::Budget::parse("events=200000");
  sim::World world(config);
  std::array<Host, 2> hosts;
  for (int i = 0; i < 2; ++i) {
    hosts[i].ctx = world.open(i == 0 ? "sim0" : "sim1");
    hosts[i].pd = hosts[i].ctx->alloc_pd();
    hosts[i].cq = hosts[i].ctx->create_cq(64);
    hosts[i].ch = world.create_cm_channel();
  }
  std::array<Slot, kSlots> slots;
  std::vector<CmEvent> requests;  // connection requests not yet answered

  for (int step = 0; step < 64 && !in.empty(); ++step) {
    const std::uint8_t op = in.u8() % 12;
    Slot& s = slots[in.below(kSlots)];
    Host& h = hosts[in.below(2)];
    try {
      switch (op) {
        case 0:
          s.id = h.ch->create_id(in.u8() % 3 == 0 ? PortSpace::udp : PortSpace::tcp);
          break;
        case 1:
          if (s.id) s.id->bind_addr(SockAddr::parse(kAddrs[in.below(kAddrs.size())]));
          break;
        case 2:
          if (s.id) s.id->resolve_addr(SockAddr::parse(kAddrs[in.below(kAddrs.size())]),
                                       static_cast<int>(in.u8()) * 10);
          break;
        case 3:
          if (s.id) s.id->resolve_route(static_cast<int>(in.u8()) * 10);
          break;
        case 4:
          if (s.id) s.id->listen(static_cast<int>(static_cast<std::int8_t>(in.u8())));
          break;
        case 5:
          if (s.id) {
            if (!s.qp) s.qp = make_qp(h, in.u8() % 2 != 0);
            ConnParam p;
            p.private_data.resize(in.u8() % 80);  // past 56 bytes rdma_connect refuses
            p.retry_count = in.u8() % 9;
            s.id->connect(*s.qp, p);
          }
          break;
        case 6:
        case 7:
          if (!requests.empty()) {
            CmEvent ev = std::move(requests.back());
            requests.pop_back();
            if (op == 6) {
              s.qp = make_qp(h, false);
              ev.new_id->accept(*s.qp);
            } else {
              ev.new_id->reject();
            }
            s.id = std::move(ev.new_id);
          }
          break;
        case 8:
          if (s.id) s.id->disconnect();
          break;
        case 9:
          s.id.reset();
          if (in.u8() % 2 != 0) s.qp.reset();
          break;
        case 10:
          for (Host& x : hosts) {
            CmEvent ev;
            while (!x.ch->get_event(ev, Wait::nonblocking)) {
              if (ev.type == CmEventType::connect_request) requests.push_back(std::move(ev));
              ev = CmEvent{};
            }
          }
          break;
        default:
          world.run_until(world.now() + std::uint64_t{in.u8()} * 100'000'000);
          break;
      }
    } catch (const VerbError&) {
      // refused, with the errno rdma_cm gives: fine
    } catch (const sim::BudgetExceeded&) {
      break;
    }
  }
  // Everything goes, in an order the input chose in part: ids before their channels or not.
  if (in.u8() % 2 != 0) {
    for (Host& x : hosts) x.ch.reset();
  }
  requests.clear();
  for (Slot& s : slots) s = Slot{};
  if (!world.accounting().balanced()) {
    std::fprintf(stderr, "fuzz_cm: the world's accounting does not balance\n");
    std::abort();
  }
}

}  // namespace
}  // namespace verbsim

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  verbsim::fuzz::Input in(data, size);
  verbsim::run(in);
  return 0;
}
