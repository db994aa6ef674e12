// What a world tells its observers (verbsim/sim/observe.hpp) and the counters it keeps
// (Config::stats): exact packet, ACK, NAK, retry and completion counts for known exchanges,
// and observers change nothing in the run.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "../support/sim_pair.hpp"
#include "verbsim/sim/observe.hpp"
#include "verbsim/sim/scenario.hpp"
#include "verbsim/sim/world.hpp"
#include "verbsim/verbsim.hpp"

namespace verbsim {
namespace {

using testing::PairOptions;
using testing::SimPair;

// Records everything it is told.
struct Recorder final : sim::Observer {
  std::vector<sim::PostRecord> posts;
  std::vector<sim::PacketRecord> packets;
  std::vector<sim::CompletionRecord> completions;
  std::vector<std::string> instants;
  std::vector<std::vector<std::uint8_t>> payloads;
  void posted(const sim::PostRecord& r) override { posts.push_back(r); }
  void packet(const sim::PacketRecord& r) override {
    packets.push_back(r);
    payloads.emplace_back(r.payload.begin(), r.payload.end());
    packets.back().payload = {};
  }
  void completion(const sim::CompletionRecord& r) override { completions.push_back(r); }
  void instant(const sim::InstantRecord& r) override { instants.emplace_back(r.what); }
};

sim::Config with_stats(const char* faults = "") {
  sim::Config c;
  c.stats = true;
  c.faults = sim::FaultPlan::parse(faults);
  return c;
}

// One SEND of `len` bytes from a to b, its receive posted first; runs the world dry.
void send_once(SimPair& p, std::uint32_t len, std::uint64_t wr_id = 1) {
  std::memcpy(p.a.buf.data(), "observe me", 11);
  const Sge rs = p.b.sge(0, 4096);
  ASSERT_FALSE(p.b.qp->post_recv(RecvWr{100 + wr_id, {&rs, 1}}).error());
  const Sge ss = p.a.sge(0, len);
  SendWr wr;
  wr.wr_id = wr_id;
  wr.opcode = WrOpcode::send;
  wr.flags = SendFlags::signaled;
  wr.sg_list = {&ss, 1};
  ASSERT_FALSE(p.a.qp->post_send(wr).error());
  testing::drain(p.world, *p.a.cq);
  testing::drain(p.world, *p.b.cq);
}

TEST(Observe, ASendIsOnePostOneRequestOneAckTwoCompletions) {
  Recorder rec;  // outlives the world, which tells it when the run ends
  SimPair p;
  p.world.add_observer(rec);
  send_once(p, 64);
  ASSERT_EQ(rec.posts.size(), 2u);  // the receive, then the send
  EXPECT_FALSE(rec.posts[0].send);
  EXPECT_EQ(rec.posts[1].wr_id, 1u);
  EXPECT_EQ(rec.posts[1].length, 64u);
  ASSERT_EQ(rec.packets.size(), 2u);
  const sim::PacketRecord& req = rec.packets[0];
  EXPECT_EQ(req.kind, sim::PacketKind::request);
  EXPECT_EQ(req.opcode, WrOpcode::send);
  EXPECT_EQ(req.src_qpn, p.a.qp->qp_num());
  EXPECT_EQ(req.dst_qpn, p.b.qp->qp_num());
  EXPECT_EQ(req.src_dev, 0);
  EXPECT_EQ(req.dst_dev, 1);
  EXPECT_EQ(req.psn, 100u);  // the PSN SimPair connects a with
  EXPECT_EQ(req.length, 64u);
  EXPECT_EQ(req.fate, sim::PacketFate::delivered);
  EXPECT_GT(req.arrives_ns, req.sent_ns);
  ASSERT_EQ(rec.payloads[0].size(), 64u);
  EXPECT_EQ(std::memcmp(rec.payloads[0].data(), "observe me", 11), 0);
  EXPECT_TRUE(req.src_gid.is_ipv4_mapped());
  const sim::PacketRecord& ack = rec.packets[1];
  EXPECT_EQ(ack.kind, sim::PacketKind::ack);
  EXPECT_EQ(ack.src_qpn, p.b.qp->qp_num());
  EXPECT_EQ(ack.dst_qpn, p.a.qp->qp_num());
  EXPECT_EQ(ack.psn, 100u);
  ASSERT_EQ(rec.completions.size(), 2u);
  EXPECT_FALSE(rec.completions[0].send);  // the receive completes when the data lands
  EXPECT_EQ(rec.completions[0].wc.wr_id, 101u);
  EXPECT_TRUE(rec.completions[1].send);
  EXPECT_EQ(rec.completions[1].wc.status, WcStatus::success);
  EXPECT_EQ(rec.completions[1].time_ns, ack.arrives_ns);
}

TEST(Observe, AReadResponseCarriesTheData) {
  Recorder rec;  // outlives the world, which tells it when the run ends
  SimPair p;
  p.world.add_observer(rec);
  std::memcpy(p.b.buf.data(), "remote bytes", 13);
  const Sge ls = p.a.sge(0, 13);
  SendWr rd;
  rd.wr_id = 7;
  rd.opcode = WrOpcode::rdma_read;
  rd.flags = SendFlags::signaled;
  rd.sg_list = {&ls, 1};
  rd.remote_addr = reinterpret_cast<std::uint64_t>(p.b.buf.data());
  rd.rkey = p.b.mr->rkey();
  ASSERT_FALSE(p.a.qp->post_send(rd).error());
  testing::drain(p.world, *p.a.cq);
  ASSERT_EQ(rec.packets.size(), 2u);
  EXPECT_EQ(rec.packets[0].opcode, WrOpcode::rdma_read);
  EXPECT_EQ(rec.packets[0].rkey, p.b.mr->rkey());
  EXPECT_TRUE(rec.payloads[0].empty());  // a READ request carries no data
  EXPECT_EQ(rec.packets[1].kind, sim::PacketKind::read_response);
  EXPECT_EQ(rec.packets[1].length, 13u);
  ASSERT_EQ(rec.payloads[1].size(), 13u);
  EXPECT_EQ(std::memcmp(rec.payloads[1].data(), "remote bytes", 13), 0);
}

TEST(Observe, CountersOfADroppedSendAndItsRetry) {
  // The first packet of the run (a's SEND) is dropped: the requester times out and sends it
  // again, which b ACKs.
  SimPair p(with_stats("drop nth=1"));
  send_once(p, 64);
  const sim::Stats s = p.world.stats();
  ASSERT_TRUE(s.collected);
  const sim::QpCounters* a = s.qp(0, p.a.qp->qp_num());
  const sim::QpCounters* b = s.qp(1, p.b.qp->qp_num());
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(a->packets_sent, 2u);
  EXPECT_EQ(a->bytes_sent, 128u);
  EXPECT_EQ(a->lost_to_faults, 1u);
  EXPECT_EQ(a->retransmissions, 1u);
  EXPECT_EQ(a->timeouts, 1u);
  EXPECT_EQ(a->acks_received, 1u);
  EXPECT_EQ(a->completions[static_cast<int>(WcStatus::success)], 1u);
  EXPECT_EQ(b->packets_received, 1u);
  EXPECT_EQ(b->acks_sent, 1u);
  EXPECT_EQ(b->completions[static_cast<int>(WcStatus::success)], 1u);
  ASSERT_EQ(s.ports.size(), 2u);
  EXPECT_EQ(s.ports[0].second.packets_lost, 1u);
  EXPECT_NE(s.to_string().find("retransmissions 1"), std::string::npos) << s.to_string();
}

TEST(Observe, AnRnrNakIsCountedOnBothSides) {
  PairOptions o;
  o.connect_options.rnr_retry = 1;
  o.connect_options.min_rnr_timer = 14;
  Recorder rec;
  SimPair p(with_stats(), o);
  p.world.add_observer(rec);
  const Sge ss = p.a.sge(0, 8);
  SendWr wr;
  wr.wr_id = 1;
  wr.opcode = WrOpcode::send;
  wr.flags = SendFlags::signaled;
  wr.sg_list = {&ss, 1};
  ASSERT_FALSE(p.a.qp->post_send(wr).error());  // b has no receive posted
  const auto wcs = testing::drain(p.world, *p.a.cq);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::rnr_retry_exc_err);
  const sim::Stats s = p.world.stats();
  const sim::QpCounters* a = s.qp(0, p.a.qp->qp_num());
  const sim::QpCounters* b = s.qp(1, p.b.qp->qp_num());
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(a->naks_received[static_cast<int>(sim::NakCode::rnr)], 2u);  // the try and its retry
  EXPECT_EQ(a->rnr_waits, 2u);
  EXPECT_EQ(b->naks_sent[static_cast<int>(sim::NakCode::rnr)], 2u);
  EXPECT_EQ(a->completions[static_cast<int>(WcStatus::rnr_retry_exc_err)], 1u);
  ASSERT_EQ(rec.packets.size(), 4u);  // SEND, RNR NAK, SEND again, RNR NAK
  EXPECT_EQ(rec.packets[1].kind, sim::PacketKind::nak);
  EXPECT_EQ(rec.packets[1].nak, sim::NakCode::rnr);
  EXPECT_EQ(rec.packets[1].rnr_timer, 14);
  EXPECT_EQ(rec.packets[2].psn, rec.packets[0].psn);
}

// Port counters (verbsim/sim/port_counters.hpp): a SEND of 2,500 bytes on a 1,024-byte path
// MTU is 3 packets of 1024, 1024 and 452 bytes, 625 words; the ACK is one packet without data.
TEST(PortCounters, AMessageIsAsManyPacketsAsThePathMtuCutsItInto) {
  SimPair p;
  p.world.count_port_traffic();
  send_once(p, 2500);
  const sim::PortHwCounters a = p.world.port_counters(0, 1);
  const sim::PortHwCounters b = p.world.port_counters(1, 1);
  EXPECT_EQ(a.xmit_packets, 3u);
  EXPECT_EQ(a.xmit_words, 625u);
  EXPECT_EQ(a.rcv_packets, 1u);
  EXPECT_EQ(a.rcv_words, 0u);
  EXPECT_EQ(a.rdma_sends, 1u);
  EXPECT_EQ(b.rcv_packets, 3u);
  EXPECT_EQ(b.rcv_words, 625u);
  EXPECT_EQ(b.xmit_packets, 1u);
  EXPECT_EQ(b.rdma_recvs, 1u);
  EXPECT_EQ(p.world.port_counters(2, 1).xmit_packets, 0u);  // no such device
}

// Error counters are kept without count_port_traffic(); traffic is not.
TEST(PortCounters, RnrNaksAreCountedOnBothSidesAlways) {
  PairOptions o;
  o.connect_options.rnr_retry = 1;
  o.connect_options.min_rnr_timer = 14;
  SimPair p(sim::Config{}, o);
  const Sge ss = p.a.sge(0, 8);
  SendWr wr;
  wr.wr_id = 1;
  wr.opcode = WrOpcode::send;
  wr.flags = SendFlags::signaled;
  wr.sg_list = {&ss, 1};
  ASSERT_FALSE(p.a.qp->post_send(wr).error());  // b has no receive posted
  ASSERT_EQ(testing::drain(p.world, *p.a.cq).size(), 1u);
  const sim::PortHwCounters a = p.world.port_counters(0, 1);
  const sim::PortHwCounters b = p.world.port_counters(1, 1);
  EXPECT_EQ(a.rcvd_rnr_err, 2u);  // the try and its retry
  EXPECT_EQ(a.retry_rnr_exceeded_err, 1u);
  EXPECT_EQ(b.send_rnr_err, 2u);
  EXPECT_EQ(a.xmit_packets, 0u);
  EXPECT_EQ(b.rcv_packets, 0u);
}

// A lost SEND is a timeout and a resend; a duplicated one a duplicate request at the far end.
TEST(PortCounters, LossAndDuplicationAsRxeCountsThem) {
  SimPair p(with_stats("drop psn=101; duplicate psn=102"));
  p.world.count_port_traffic();
  for (std::uint64_t i = 1; i <= 3; ++i) send_once(p, 64, i);
  const sim::PortHwCounters a = p.world.port_counters(0, 1);
  const sim::PortHwCounters b = p.world.port_counters(1, 1);
  EXPECT_EQ(a.xmit_packets, 4u);  // 3 SENDs, one twice
  EXPECT_EQ(a.xmit_words, 4u * 16);
  EXPECT_EQ(b.rcv_packets, 4u);  // one lost, one twice
  EXPECT_EQ(b.duplicate_request, 1u);
  EXPECT_EQ(b.xmit_packets, 4u);  // each arrival ACKed
  EXPECT_EQ(a.rcv_packets, 4u);
  EXPECT_EQ(a.completer_retry_err, 1u);
  EXPECT_EQ(a.rcvd_seq_err, 0u);
  EXPECT_EQ(a.rdma_sends, 3u);
  EXPECT_EQ(b.rdma_recvs, 3u);
}

// packets= narrows a rule: the first response lost is an ACK (the SEND goes again and arrives
// twice), the first request lost is the SEND itself (it arrives once, late).
TEST(PortCounters, PacketKindsNarrowARule) {
  {
    SimPair p(with_stats("drop nth=1 packets=responses"));
    p.world.count_port_traffic();
    send_once(p, 64);
    const sim::PortHwCounters a = p.world.port_counters(0, 1);
    const sim::PortHwCounters b = p.world.port_counters(1, 1);
    EXPECT_EQ(a.xmit_packets, 2u);  // the SEND, and again after its ACK was lost
    EXPECT_EQ(b.rcv_packets, 2u);
    EXPECT_EQ(b.duplicate_request, 1u);
    EXPECT_EQ(a.rcv_packets, 1u);  // the second ACK
  }
  {
    SimPair p(with_stats("drop nth=1 packets=requests"));
    p.world.count_port_traffic();
    send_once(p, 64);
    const sim::PortHwCounters a = p.world.port_counters(0, 1);
    const sim::PortHwCounters b = p.world.port_counters(1, 1);
    EXPECT_EQ(a.xmit_packets, 2u);
    EXPECT_EQ(b.rcv_packets, 1u);  // the first copy was lost
    EXPECT_EQ(b.duplicate_request, 0u);
    EXPECT_EQ(a.rcv_packets, 1u);
  }
}

TEST(PortCounters, CountingChangesNothingInTheRun) {
  auto digest = [](bool counted) {
    SimPair p(with_stats("drop p=0.3; duplicate p=0.2; reorder p=0.2 by=2us"));
    if (counted) p.world.count_port_traffic();
    for (std::uint64_t i = 1; i <= 20; ++i) send_once(p, 100, i);
    return p.world.digest();
  };
  EXPECT_EQ(digest(false), digest(true));
}

TEST(Observe, WithoutStatsNothingIsCollected) {
  SimPair p;
  send_once(p, 8);
  EXPECT_FALSE(p.world.stats().collected);
}

TEST(Observe, ObserversChangeNothingInTheRun) {
  auto digest = [](bool observed) {
    sim::Config c = with_stats("drop p=0.3; duplicate p=0.2; reorder p=0.2 by=2us");
    c.stats = observed;
    Recorder rec;
    SimPair p(c);
    if (observed) p.world.add_observer(rec);
    for (std::uint64_t i = 1; i <= 20; ++i) send_once(p, 100, i);
    return p.world.digest();
  };
  EXPECT_EQ(digest(false), digest(true));
}

// Keeps the connection manager's messages it is told of.
struct CmRecorder final : sim::Observer {
  std::vector<sim::CmRecord> messages;
  void cm(const sim::CmRecord& r) override {
    messages.push_back(r);
    messages.back().private_data = {};
  }
};

CmEventType next_cm_event(CmEventChannel& ch) {
  CmEvent ev;
  EXPECT_FALSE(ch.get_event(ev, Wait::blocking));
  return ev.type;
}

// A client on sim1 connects to a server listening on sim0; the fault plan loses the first REP.
// The client's REQ times out (rdma_cm's CM response timeout, 2^32 ns) and goes again. The
// server's timer for its REP runs out as that REQ arrives: it sends its REP for both, and the
// client answers each with an RTU.
TEST(Observe, ALostReplyIsSentAgainWhenTheRequestIs) {
  constexpr std::uint64_t kResponseTimeoutNs = 4'294'967'296;
  sim::Config config;
  config.devices = 2;
  config.faults = sim::FaultPlan::parse("cm_drop msg=rep nth=1");
  CmRecorder rec;  // outlives the world
  sim::World world(config);
  world.add_observer(rec);
  testing::Side server = testing::make_side(world, "sim0", {});
  testing::Side client = testing::make_side(world, "sim1", {});
  auto server_ch = world.create_cm_channel();
  auto client_ch = world.create_cm_channel();
  auto listener = server_ch->create_id();
  listener->bind_addr(SockAddr::parse("10.0.0.1:7471"));
  listener->listen();
  auto client_id = client_ch->create_id();
  client_id->bind_addr(SockAddr::parse("10.0.1.1:0"));
  client_id->resolve_addr(SockAddr::parse("10.0.0.1:7471"));
  ASSERT_EQ(next_cm_event(*client_ch), CmEventType::addr_resolved);
  client_id->resolve_route();
  ASSERT_EQ(next_cm_event(*client_ch), CmEventType::route_resolved);
  client_id->connect(*client.qp);
  CmEvent req;
  ASSERT_FALSE(server_ch->get_event(req, Wait::blocking));
  ASSERT_EQ(req.type, CmEventType::connect_request);
  std::unique_ptr<CmId> server_id = std::move(req.new_id);
  server_id->accept(*server.qp);
  EXPECT_EQ(next_cm_event(*client_ch), CmEventType::established);
  EXPECT_EQ(next_cm_event(*server_ch), CmEventType::established);

  // The client's id is the CM's node 1 (the listener is 0), the server's id node 2: comm ids
  // 2 and 3.
  const std::uint32_t client_qpn = client.qp->qp_num();
  const std::uint32_t server_qpn = server.qp->qp_num();
  struct Expected {
    std::uint64_t sent_ns;
    sim::CmMessage kind;
    sim::PacketFate fate;
    std::uint16_t src_dev, dst_dev;
    std::uint32_t local_comm_id, remote_comm_id, qpn;
  };
  const std::uint64_t l = world.config().link_latency_ns;
  const std::uint64_t t = kResponseTimeoutNs;
  const Expected expected[] = {
      {0, sim::CmMessage::req, sim::PacketFate::delivered, 1, 0, 2, 0, client_qpn},
      {l, sim::CmMessage::rep, sim::PacketFate::dropped, 0, 1, 3, 2, server_qpn},
      {t, sim::CmMessage::req, sim::PacketFate::delivered, 1, 0, 2, 0, client_qpn},
      {t + l, sim::CmMessage::rep, sim::PacketFate::delivered, 0, 1, 3, 2, server_qpn},
      {t + l, sim::CmMessage::rep, sim::PacketFate::delivered, 0, 1, 3, 2, server_qpn},
      {t + 2 * l, sim::CmMessage::rtu, sim::PacketFate::delivered, 1, 0, 2, 3, 0},
      {t + 2 * l, sim::CmMessage::rtu, sim::PacketFate::delivered, 1, 0, 2, 3, 0},
  };
  ASSERT_EQ(rec.messages.size(), std::size(expected));
  for (std::size_t i = 0; i < std::size(expected); ++i) {
    SCOPED_TRACE("message " + std::to_string(i) + ": " + sim::describe(rec.messages[i]));
    const sim::CmRecord& m = rec.messages[i];
    EXPECT_EQ(m.sent_ns, expected[i].sent_ns);
    EXPECT_EQ(m.arrives_ns, expected[i].sent_ns + l);
    EXPECT_EQ(m.kind, expected[i].kind);
    EXPECT_EQ(m.fate, expected[i].fate);
    EXPECT_EQ(m.src_dev, expected[i].src_dev);
    EXPECT_EQ(m.dst_dev, expected[i].dst_dev);
    EXPECT_EQ(m.local_comm_id, expected[i].local_comm_id);
    EXPECT_EQ(m.remote_comm_id, expected[i].remote_comm_id);
    EXPECT_EQ(m.qpn, expected[i].qpn);
    EXPECT_FALSE(m.sidr);
  }
}

}  // namespace
}  // namespace verbsim

namespace verbsim {
namespace {

// A seeded run that fails on purpose, for tests/observe/failure-report.sh: the test main
// must print the world's report and a command that reruns it to the same failure.
// OBSERVE_DEMO_SENDS, a variable of the test's own (not VERBSIM_*), sets how many SENDs it
// makes: the rerun command keeps it when VERBSIM_KEEP_ENV names it.
TEST(FailureReport, ADeliberateFailure) {
  if (std::getenv("VERBSIM_DEMO_FAILURE") == nullptr) {
    GTEST_SKIP() << "fails on purpose only with VERBSIM_DEMO_FAILURE set (failure-report.sh)";
  }
  sim::Config c;
  c.seed = 7;
  c.faults = sim::FaultPlan::parse("drop nth=2; delay p=0.5 by=1us");
  SimPair p(c);
  const char* sends = std::getenv("OBSERVE_DEMO_SENDS");
  const std::uint64_t n = sends != nullptr ? std::strtoull(sends, nullptr, 10) : 4;
  for (std::uint64_t i = 1; i <= n; ++i) send_once(p, 64, i);
  ADD_FAILURE() << "deliberate failure, digest " << p.world.digest_hex();
}

}  // namespace
}  // namespace verbsim

namespace verbsim {
namespace {

// VERBSIM_CHECK_DETERMINISM (run_scenario's check) names where two runs part, not only that
// their digests differ: here the second run sends 65 bytes where the first sent 64.
TEST(Determinism, TheFirstRecordWhereTwoRunsDifferIsNamed) {
  int runs = 0;
  const auto scenario = [&runs](sim::World& world) {
    ++runs;
    testing::Side a = testing::make_side(world, "sim0", {});
    testing::Side b = testing::make_side(world, "sim1", {});
    connect(*a.qp, 1, testing::endpoint_of(b, 2));
    connect(*b.qp, 2, testing::endpoint_of(a, 1));
    const Sge rs = b.sge(0, 128);
    ASSERT_FALSE(b.qp->post_recv(RecvWr{9, {&rs, 1}}).error());
    const Sge ss = a.sge(0, runs == 1 ? 64 : 65);
    SendWr wr;
    wr.wr_id = 5;
    wr.flags = SendFlags::signaled;
    wr.sg_list = {&ss, 1};
    ASSERT_FALSE(a.qp->post_send(wr).error());
    testing::drain(world, *a.cq);
  };
  const sim::ScenarioResult r = sim::run_scenario(sim::Config{}, scenario, /*check=*/true);
  EXPECT_FALSE(r.deterministic);
  EXPECT_NE(r.message.find("they part at record 1: first run 't=0 ns post sim0 qp 17 send "
                           "wr_id=5 SEND 64 B', second run 't=0 ns post sim0 qp 17 send wr_id=5 "
                           "SEND 65 B'"),
            std::string::npos)
      << r.message;
}

}  // namespace
}  // namespace verbsim
