// GoogleMock implementations of the verbs interfaces, for testing code written against verbsim
// without any backend: script a post_send that returns ENOMEM, a poll that hands back an error
// completion, a modify that throws. Prefer the simulator for behaviour (it is a faithful fake);
// use these for interaction tests ("retries after ENOMEM", "re-arms before sleeping").
//
// Header-only; link GTest::gmock.
#pragma once

#include <gmock/gmock.h>

#include "verbsim/verbsim.hpp"

namespace verbsim::testing {

class MockQueuePair : public QueuePair {
 public:
  MOCK_METHOD(void, destroy, (), (override));
  MOCK_METHOD(std::uint32_t, qp_num, (), (const, noexcept, override));
  MOCK_METHOD(QpType, type, (), (const, noexcept, override));
  MOCK_METHOD(const QpCap&, cap, (), (const, noexcept, override));
  MOCK_METHOD(const QpCap&, requested_cap, (), (const, noexcept, override));
  MOCK_METHOD(PostResult, post_send, (std::span<const SendWr> wrs), (noexcept, override));
  MOCK_METHOD(PostResult, post_recv, (std::span<const RecvWr> wrs), (noexcept, override));
  MOCK_METHOD(PostResult, bind_mw, (MemoryWindow & mw, const MwBind& bind), (noexcept, override));
  MOCK_METHOD(void, modify, (const QpAttr& attr, QpAttrMask mask), (override));
  MOCK_METHOD(QpAttr, query, (QpAttrMask mask), (const, override));
  MOCK_METHOD(QpState, state, (), (const, noexcept, override));
  using QueuePair::post_recv;
  using QueuePair::post_send;
};

class MockCompletionQueue : public CompletionQueue {
 public:
  MOCK_METHOD(void, destroy, (), (override));
  MOCK_METHOD(PollResult, poll, (std::span<WorkCompletion> out), (noexcept, override));
  MOCK_METHOD(std::error_code, req_notify, (bool solicited_only), (noexcept, override));
  MOCK_METHOD(void, ack_events, (unsigned n), (noexcept, override));
  MOCK_METHOD(void, resize, (int cqe), (override));
  MOCK_METHOD(int, cqe, (), (const, noexcept, override));
  MOCK_METHOD(int, requested_cqe, (), (const, noexcept, override));
  MOCK_METHOD(CompletionChannel*, channel, (), (const, noexcept, override));
};

class MockCompletionChannel : public CompletionChannel {
 public:
  MOCK_METHOD(void, destroy, (), (override));
  MOCK_METHOD(std::error_code, get_cq_event, (CompletionQueue * &cq, Wait wait), (override));
  MOCK_METHOD(int, fd, (), (const, noexcept, override));
};

class MockSharedReceiveQueue : public SharedReceiveQueue {
 public:
  MOCK_METHOD(void, destroy, (), (override));
  MOCK_METHOD(PostResult, post_recv, (std::span<const RecvWr> wrs), (noexcept, override));
  MOCK_METHOD(void, modify, (const SrqAttr& attr, SrqAttrMask mask), (override));
  MOCK_METHOD(SrqAttr, query, (), (const, override));
  using SharedReceiveQueue::post_recv;
};

class MockMemoryRegion : public MemoryRegion {
 public:
  MOCK_METHOD(void, destroy, (), (override));
  MOCK_METHOD(void*, addr, (), (const, noexcept, override));
  MOCK_METHOD(std::uint64_t, iova, (), (const, noexcept, override));
  MOCK_METHOD(std::size_t, length, (), (const, noexcept, override));
  MOCK_METHOD(std::uint32_t, lkey, (), (const, noexcept, override));
  MOCK_METHOD(std::uint32_t, rkey, (), (const, noexcept, override));
  MOCK_METHOD(Access, access, (), (const, noexcept, override));
  MOCK_METHOD(void, rereg, (const MrChange& change), (override));
};

class MockMemoryWindow : public MemoryWindow {
 public:
  MOCK_METHOD(void, destroy, (), (override));
  MOCK_METHOD(MwType, type, (), (const, noexcept, override));
  MOCK_METHOD(std::uint32_t, rkey, (), (const, noexcept, override));
};

class MockProtectionDomain : public ProtectionDomain {
 public:
  MOCK_METHOD(void, destroy, (), (override));
  MOCK_METHOD(std::unique_ptr<MemoryRegion>, reg_mr_iova,
              (void* addr, std::size_t length, std::uint64_t iova, Access access), (override));
  MOCK_METHOD(std::unique_ptr<QueuePair>, create_qp, (const QpInitAttr& attr), (override));
  MOCK_METHOD(std::unique_ptr<SharedReceiveQueue>, create_srq, (const SrqInitAttr& attr),
              (override));
  MOCK_METHOD(std::unique_ptr<AddressHandle>, create_ah, (const AhAttr& attr), (override));
  MOCK_METHOD(std::unique_ptr<MemoryWindow>, alloc_mw, (MwType type), (override));
};

class MockContext : public Context {
 public:
  MOCK_METHOD(void, destroy, (), (override));
  MOCK_METHOD(const DeviceInfo&, info, (), (const, noexcept, override));
  MOCK_METHOD(DeviceAttr, query_device, (), (const, override));
  MOCK_METHOD(PortAttr, query_port, (std::uint8_t port_num), (const, override));
  MOCK_METHOD(Gid, query_gid, (std::uint8_t port_num, int index), (const, override));
  MOCK_METHOD(std::unique_ptr<ProtectionDomain>, alloc_pd, (), (override));
  MOCK_METHOD(std::unique_ptr<CompletionChannel>, create_comp_channel, (), (override));
  MOCK_METHOD(std::unique_ptr<CompletionQueue>, create_cq,
              (int cqe, CompletionChannel* channel, int comp_vector, CqCreateFlags flags),
              (override));
  MOCK_METHOD(std::error_code, get_async_event, (AsyncEvent & event, Wait wait), (override));
  MOCK_METHOD(int, async_fd, (), (const, noexcept, override));
  MOCK_METHOD(const Clock&, clock, (), (const, noexcept, override));
};

class MockCmId : public CmId {
 public:
  MOCK_METHOD(void, bind_addr, (const SockAddr& addr), (override));
  MOCK_METHOD(void, listen, (int backlog), (override));
  MOCK_METHOD(void, resolve_addr, (const SockAddr& dst, int timeout_ms), (override));
  MOCK_METHOD(void, resolve_route, (int timeout_ms), (override));
  MOCK_METHOD(void, connect, (QueuePair & qp, const ConnParam& param), (override));
  MOCK_METHOD(void, accept, (QueuePair & qp, const ConnParam& param), (override));
  MOCK_METHOD(void, reject, (std::span<const std::uint8_t> private_data), (override));
  MOCK_METHOD(void, disconnect, (), (override));
  MOCK_METHOD(void, connect_own_qp, (std::uint32_t qp_num, const ConnParam& param), (override));
  MOCK_METHOD(void, accept_own_qp, (std::uint32_t qp_num, const ConnParam& param), (override));
  MOCK_METHOD(QpAttrMask, init_qp_attr, (QpState state, QpAttr& attr), (const, override));
  MOCK_METHOD(void, establish, (), (override));
  MOCK_METHOD(void, migrate, (CmEventChannel & to), (override));
  MOCK_METHOD(std::string, device_name, (), (const, override));
  MOCK_METHOD(std::uint8_t, port_num, (), (const, noexcept, override));
  MOCK_METHOD(SockAddr, local_addr, (), (const, override));
  MOCK_METHOD(SockAddr, peer_addr, (), (const, override));
  MOCK_METHOD(QueuePair*, qp, (), (const, noexcept, override));
};

class MockCmEventChannel : public CmEventChannel {
 public:
  MOCK_METHOD(std::unique_ptr<CmId>, create_id, (PortSpace space), (override));
  MOCK_METHOD(std::error_code, get_event, (CmEvent & event, Wait wait), (override));
  MOCK_METHOD(int, fd, (), (const, noexcept, override));
};

}  // namespace verbsim::testing
