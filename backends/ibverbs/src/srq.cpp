// SharedReceiveQueue over ibv_srq.
#include <infiniband/verbs.h>

#include <cerrno>
#include <string>

#include "objects.hpp"
#include "post.hpp"
#include "verbsim/abi/translate.hpp"
#include "verbsim/ibverbs/backend.hpp"

namespace verbsim::ibverbs {

IbvSrq::IbvSrq(ibv_pd* pd, const SrqInitAttr& attr) {
  ibv_srq_init_attr init{};
  init.srq_context = static_cast<SharedReceiveQueue*>(this);
  init.attr.max_wr = attr.max_wr;
  init.attr.max_sge = attr.max_sge;
  init.attr.srq_limit = attr.srq_limit;
  errno = 0;
  srq_ = ::ibv_create_srq(pd, &init);
  if (srq_ == nullptr) {
    const int err = creator_errno();
    throw_verb_error("ibv_create_srq", err,
                     "max_wr=" + std::to_string(attr.max_wr) +
                         " max_sge=" + std::to_string(attr.max_sge) +
                         " srq_limit=" + std::to_string(attr.srq_limit));
  }
}

IbvSrq::~IbvSrq() {
  if (const int err = release(); err != 0) warn_leak("ibv_destroy_srq", err, "SRQ");
}

int IbvSrq::release() noexcept {
  if (srq_ == nullptr) return 0;
  if (const int ret = ::ibv_destroy_srq(srq_); ret != 0) return returned_errno(ret);
  srq_ = nullptr;
  return 0;
}

void IbvSrq::destroy() {
  const int err = release();
  if (err == EBUSY) throw_verb_error("ibv_destroy_srq", err, "QPs still use the SRQ");
  if (err != 0) throw_verb_error("ibv_destroy_srq", err);
}

PostResult IbvSrq::post_recv(std::span<const RecvWr> wrs) noexcept {
  const auto post = [this](ibv_recv_wr* first, ibv_recv_wr** bad) noexcept {
    return ::ibv_post_srq_recv(srq_, first, bad);
  };
  if (wrs.size() != 1) [[unlikely]] return post_recv_chunks(wrs, post);
  return post_one_recv(wrs.front(), post);
}

void IbvSrq::modify(const SrqAttr& attr, SrqAttrMask mask) {
  // Resizing is optional (IBV_DEVICE_SRQ_RESIZE: rxe has it, mlx5 not); the core API refuses it
  // everywhere so programs behave alike on every device.
  if (any(mask, SrqAttrMask::max_wr)) {
    throw_verb_error("ibv_modify_srq", EINVAL, "resizing an SRQ (max_wr) is not supported");
  }
  ibv_srq_attr a{attr.max_wr, attr.max_sge, attr.srq_limit};
  if (const int ret = ::ibv_modify_srq(srq_, &a, abi::to_ibv(mask)); ret != 0) {
    throw_verb_error("ibv_modify_srq", returned_errno(ret),
                     "srq_limit=" + std::to_string(attr.srq_limit));
  }
}

SrqAttr IbvSrq::query() const {
  ibv_srq_attr a{};
  if (const int ret = ::ibv_query_srq(srq_, &a); ret != 0) {
    throw_verb_error("ibv_query_srq", returned_errno(ret));
  }
  return {a.max_wr, a.max_sge, a.srq_limit};
}

ibv_srq* native(verbsim::SharedReceiveQueue& srq) noexcept {
  auto* s = dynamic_cast<IbvSrq*>(&srq);
  return s != nullptr ? s->native() : nullptr;
}

}  // namespace verbsim::ibverbs
