#include "verbsim/types.hpp"

#include <array>
#include <cstdio>

namespace verbsim {

std::string_view to_string(WcStatus s) noexcept {
  static constexpr std::array<std::string_view, 22> names{
      "SUCCESS",          "LOC_LEN_ERR",      "LOC_QP_OP_ERR",     "LOC_EEC_OP_ERR",
      "LOC_PROT_ERR",     "WR_FLUSH_ERR",     "MW_BIND_ERR",       "BAD_RESP_ERR",
      "LOC_ACCESS_ERR",   "REM_INV_REQ_ERR",  "REM_ACCESS_ERR",    "REM_OP_ERR",
      "RETRY_EXC_ERR",    "RNR_RETRY_EXC_ERR", "LOC_RDD_VIOL_ERR", "REM_INV_RD_REQ_ERR",
      "REM_ABORT_ERR",    "INV_EECN_ERR",     "INV_EEC_STATE_ERR", "FATAL_ERR",
      "RESP_TIMEOUT_ERR", "GENERAL_ERR"};
  const auto i = static_cast<std::size_t>(s);
  return i < names.size() ? names[i] : "UNKNOWN";
}

std::string_view to_string(WcOpcode o) noexcept {
  switch (o) {
    case WcOpcode::send: return "SEND";
    case WcOpcode::rdma_write: return "RDMA_WRITE";
    case WcOpcode::rdma_read: return "RDMA_READ";
    case WcOpcode::comp_swap: return "COMP_SWAP";
    case WcOpcode::fetch_add: return "FETCH_ADD";
    case WcOpcode::bind_mw: return "BIND_MW";
    case WcOpcode::local_inv: return "LOCAL_INV";
    case WcOpcode::recv: return "RECV";
    case WcOpcode::recv_rdma_with_imm: return "RECV_RDMA_WITH_IMM";
  }
  return "UNKNOWN";
}

std::string_view to_string(WrOpcode o) noexcept {
  switch (o) {
    case WrOpcode::rdma_write: return "RDMA_WRITE";
    case WrOpcode::rdma_write_with_imm: return "RDMA_WRITE_WITH_IMM";
    case WrOpcode::send: return "SEND";
    case WrOpcode::send_with_imm: return "SEND_WITH_IMM";
    case WrOpcode::rdma_read: return "RDMA_READ";
    case WrOpcode::atomic_cmp_and_swp: return "ATOMIC_CMP_AND_SWP";
    case WrOpcode::atomic_fetch_and_add: return "ATOMIC_FETCH_AND_ADD";
    case WrOpcode::local_inv: return "LOCAL_INV";
    case WrOpcode::bind_mw: return "BIND_MW";
    case WrOpcode::send_with_inv: return "SEND_WITH_INV";
  }
  return "UNKNOWN";
}

std::string_view to_string(MwType t) noexcept {
  switch (t) {
    case MwType::type1: return "TYPE_1";
    case MwType::type2: return "TYPE_2";
  }
  return "UNKNOWN";
}

std::string_view to_string(QpState s) noexcept {
  static constexpr std::array<std::string_view, 7> names{"RESET", "INIT", "RTR", "RTS",
                                                         "SQD",   "SQE",  "ERR"};
  const auto i = static_cast<std::size_t>(s);
  return i < names.size() ? names[i] : "UNKNOWN";
}

std::string_view to_string(QpType t) noexcept {
  switch (t) {
    case QpType::rc: return "RC";
    case QpType::uc: return "UC";
    case QpType::ud: return "UD";
  }
  return "UNKNOWN";
}

std::string_view to_string(AsyncEventType t) noexcept {
  static constexpr std::array<std::string_view, 20> names{
      "CQ_ERR",        "QP_FATAL",          "QP_REQ_ERR",           "QP_ACCESS_ERR",
      "COMM_EST",      "SQ_DRAINED",        "PATH_MIG",             "PATH_MIG_ERR",
      "DEVICE_FATAL",  "PORT_ACTIVE",       "PORT_ERR",             "LID_CHANGE",
      "PKEY_CHANGE",   "SM_CHANGE",         "SRQ_ERR",              "SRQ_LIMIT_REACHED",
      "QP_LAST_WQE_REACHED", "CLIENT_REREGISTER", "GID_CHANGE",     "WQ_FATAL"};
  const auto i = static_cast<std::size_t>(t);
  return i < names.size() ? names[i] : "UNKNOWN";
}

bool Gid::is_zero() const noexcept {
  for (auto b : raw) {
    if (b != 0) return false;
  }
  return true;
}

std::string Gid::to_string() const {
  char buf[40];
  std::snprintf(buf, sizeof buf,
                "%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x", raw[0],
                raw[1], raw[2], raw[3], raw[4], raw[5], raw[6], raw[7], raw[8], raw[9], raw[10],
                raw[11], raw[12], raw[13], raw[14], raw[15]);
  return buf;
}

Gid Gid::from_ipv4(std::uint8_t a, std::uint8_t b, std::uint8_t c, std::uint8_t d) noexcept {
  Gid g;
  g.raw[10] = 0xff;
  g.raw[11] = 0xff;
  g.raw[12] = a;
  g.raw[13] = b;
  g.raw[14] = c;
  g.raw[15] = d;
  return g;
}

std::uint64_t rnr_timer_ns(std::uint8_t min_rnr_timer) noexcept {
  // IB spec table 45, in units of 10 ns to keep exact values (0 = 655.36 ms).
  static constexpr std::array<std::uint32_t, 32> tens_of_ns{
      65536000, 1000,   2000,   3000,   4000,    6000,    8000,    12000,
      16000,    24000,  32000,  48000,  64000,   96000,   128000,  192000,
      256000,   384000, 512000, 768000, 1024000, 1536000, 2048000, 3072000,
      4096000,  6144000, 8192000, 12288000, 16384000, 24576000, 32768000, 49152000};
  return std::uint64_t{tens_of_ns[min_rnr_timer & 31u]} * 10u;
}

}  // namespace verbsim
