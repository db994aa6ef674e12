// Simulator-only verbs (verbsim/sim/extensions.hpp).
#include "verbsim/sim/extensions.hpp"

#include <algorithm>
#include <cerrno>
#include <string>

#include "transport/qp.hpp"
#include "verbsim/error.hpp"
#include "verbsim/verb_log.hpp"

namespace verbsim::sim {

bool set_window_key(MemoryWindow& mw, std::uint32_t rkey) noexcept {
  auto* w = dynamic_cast<SimMw*>(&unlogged(mw));  // the window behind a verb log's wrapper
  if (w == nullptr) return false;
  w->set_rkey(rkey);
  return true;
}

PostResult check_post_send(QueuePair& qp, std::span<const SendWr> wrs) noexcept {
  const auto* q = dynamic_cast<const SimQp*>(&unlogged(qp));
  if (q == nullptr) return {0, EINVAL, "not a QP of the simulator"};
  return q->check_posts(wrs);
}

bool post_error_in_errno(const PostResult& r) noexcept {
  return r.err != 0 && (r.reason == kDoorbellRefused || r.reason == kDoorbellRefusedWrRefused);
}

void resize_srq(SharedReceiveQueue& srq, std::uint32_t max_wr) {
  auto* s = dynamic_cast<SimSrq*>(&unlogged(srq));
  if (s == nullptr) throw_verb_error("ibv_modify_srq", EINVAL, "not an SRQ of the simulator");
  s->resize(max_wr);
}

bool can_resize_srq(const World& world) noexcept {
  return world.impl().traits().srq_resize;
}

DropinTraits dropin_traits(const World& world) noexcept {
  const ProfileTraits& t = world.impl().traits();
  return {t.parent_domain, t.import_device, t.create_reports_requested, t.builder_limit_errno};
}

}  // namespace verbsim::sim

namespace verbsim::sim {

ProviderModel verb_log_model(const World& world) noexcept {
  return world.impl().traits().kernel_crossings;
}

std::string verb_log_model_source(const World& world) {
  return "sim profile " + world.impl().traits().name;
}

}  // namespace verbsim::sim
