#include "verbsim/testing/pair.hpp"

#include <gtest/gtest.h>

#include <thread>

#include "verbsim/sim/world.hpp"

namespace verbsim::testing {

std::vector<WorkCompletion> poll_completions(CompletionQueue& cq, std::size_t n, sim::World* world,
                                             std::chrono::milliseconds timeout) {
  std::vector<WorkCompletion> out;
  WorkCompletion wc[16];
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (out.size() < n) {
    const PollResult r = cq.poll(std::span(wc, std::min<std::size_t>(16, n - out.size())));
    if (r.error()) {
      ADD_FAILURE() << "poll: " << r.error().message();
      break;
    }
    out.insert(out.end(), wc, wc + r.count);
    if (r.count != 0) continue;
    if (world != nullptr) {
      if (world->pending_events() == 0) break;
    } else {
      if (std::chrono::steady_clock::now() > deadline) break;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  return out;
}

namespace {

ConnectedPair::End make_end(Backend& backend, const std::string& device,
                            const ConnectedPair::Options& o) {
  ConnectedPair::End e;
  e.ctx = backend.open(device);
  e.gid_index = roce_v2_gid_index(*e.ctx, o.connect.port_num);
  e.pd = e.ctx->alloc_pd();
  e.cq = e.ctx->create_cq(o.cqe);
  QpInitAttr init;
  init.type = QpType::rc;
  init.send_cq = e.cq.get();
  init.recv_cq = e.cq.get();
  init.cap = o.cap;
  e.qp = e.pd->create_qp(init);
  e.buf.assign(o.buf_size, std::byte{0});
  e.mr = e.pd->reg_mr(
      e.buf.data(), e.buf.size(),
      Access::local_write | Access::remote_write | Access::remote_read | Access::remote_atomic);
  return e;
}

}  // namespace

ConnectedPair::ConnectedPair(Backend& backend, const Options& o)
    : world_(dynamic_cast<sim::World*>(&backend)) {
  std::string dev_a = o.device_a;
  std::string dev_b = o.device_b;
  if (world_ != nullptr) {
    if (dev_a.empty()) dev_a = "sim0";
    if (dev_b.empty()) dev_b = dev_a == "sim1" ? "sim0" : "sim1";
  } else if (dev_b.empty()) {
    dev_b = dev_a;
  }
  a = make_end(backend, dev_a, o);
  b = make_end(backend, dev_b, o);
  ConnectOptions ca = o.connect;
  ConnectOptions cb = o.connect;
  ca.sgid_index = a.gid_index;
  cb.sgid_index = b.gid_index;
  connect(*a.qp, o.psn_a,
          {b.ctx->query_gid(o.connect.port_num, b.gid_index), b.qp->qp_num(), o.psn_b}, ca);
  connect(*b.qp, o.psn_b,
          {a.ctx->query_gid(o.connect.port_num, a.gid_index), a.qp->qp_num(), o.psn_a}, cb);
}

}  // namespace verbsim::testing
