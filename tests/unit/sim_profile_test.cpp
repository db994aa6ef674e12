// Profiles as files: the built-in ones, the format's errors, and a world that runs a file.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>

#include "fabric/profile.hpp"
#include "verbsim/sim/profile.hpp"
#include "verbsim/sim/world.hpp"
#include "verbsim/verbsim.hpp"

namespace verbsim::sim {
namespace {

std::string parse_error(std::string_view text) {
  try {
    ProfileFile::parse(text, "t.profile");
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(parsed)";
}

TEST(Profile, EveryBuiltInProfileWritesAFileThatReadsBackTheSame) {
  for (const Profile p : {Profile::strict, Profile::rxe, Profile::mlx5}) {
    const ProfileFile f = ProfileFile::builtin(p);
    const ProfileFile back = ProfileFile::parse(f.text(), "written");
    EXPECT_TRUE(back.differences(f).empty()) << to_string(p);
    EXPECT_EQ(back.name(), to_string(p));
    EXPECT_EQ(back.family(), p);
    EXPECT_EQ(back.text(), f.text());
  }
}

TEST(Profile, TheTableAWorldReadsIsTheFilesValues) {
  const ProfileTraits& rxe = ProfileTraits::of(Profile::rxe);
  EXPECT_TRUE(rxe.pow2_minus_one_depths);
  EXPECT_TRUE(rxe.read_atomic_local_check_on_response);
  EXPECT_EQ(rxe.bad_lkey_status, WcStatus::loc_qp_op_err);
  EXPECT_EQ(rxe.pool_full_errno, EINVAL);
  EXPECT_EQ(rxe.builder_limit_errno, ENOSPC);
  EXPECT_EQ(rxe.kernel_crossings, ProviderModel::rxe);
  EXPECT_EQ(rxe.limits.max_msg_sz, 0x800000u);
  EXPECT_EQ(rxe.limits.gid_tbl_len, 1024u);
  const ProfileTraits& strict = ProfileTraits::of(Profile::strict);
  EXPECT_EQ(strict.bad_lkey_status, WcStatus::loc_prot_err);
  EXPECT_EQ(strict.limits.max_mw, 65536u);
  const ProfileTraits from_file = ProfileTraits::from(ProfileFile::builtin(Profile::rxe));
  EXPECT_EQ(from_file.name, "rxe");
  EXPECT_EQ(from_file.limits.max_qp_wr, rxe.limits.max_qp_wr);
}

TEST(Profile, Mlx5IsStrictWithTwoDifferences) {
  const auto d = ProfileFile::builtin(Profile::mlx5).differences(ProfileFile::builtin(Profile::strict));
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0].key, "family");
  EXPECT_EQ(d[1].key, "ud_ah_pd_checked");
  EXPECT_EQ(d[2].key, "post_send_needs_rts");
  EXPECT_EQ(d[2].ours, "false");
  EXPECT_EQ(d[2].theirs, "true");
}

TEST(Profile, AFileNamesTheLineAndKeyOfWhatIsWrong) {
  EXPECT_EQ(parse_error("base = rxe\n\nfoo = 1\n"),
            "t.profile:3: unknown key 'foo' (docs/FIDELITY.md, \"Profile files\", lists them)");
  EXPECT_EQ(parse_error("base = rxe\nretire_on_poll = yes\n"),
            "t.profile:2: retire_on_poll: 'yes' is not true or false");
  EXPECT_EQ(parse_error("base = rxe\npool_full_errno = EWHAT\n"),
            "t.profile:2: pool_full_errno: 'EWHAT' is not an errno a profile may name (EINVAL, "
            "ENOMEM, ENOSPC, EOPNOTSUPP, ...)");
  EXPECT_EQ(parse_error("base = rxe\nmax_cqe = 12x\n"),
            "t.profile:2: max_cqe: '12x' is not a number from 0 to 4294967295");
  EXPECT_EQ(parse_error("base = rxe\nmax_cqe = 4294967296\n"),
            "t.profile:2: max_cqe: '4294967296' is not a number from 0 to 4294967295");
  EXPECT_EQ(parse_error("base = rxe\nmax_cqe = 1\nmax_cqe = 2\n"), "t.profile:3: max_cqe: set twice");
  EXPECT_EQ(parse_error("max_cqe = 1\nbase = rxe\n"), "t.profile:2: base: must come first, and once");
  EXPECT_EQ(parse_error("base = rxe\nfamily = ib\n"),
            "t.profile:2: family: 'ib' is not strict, rxe or mlx5");
  EXPECT_EQ(parse_error("base = rxe\nbad_lkey_status = OOPS\n"),
            "t.profile:2: bad_lkey_status: 'OOPS' is not a completion status (LOC_PROT_ERR, "
            "LOC_QP_OP_ERR, ...)");
  EXPECT_EQ(parse_error("base = rxe\njust words\n"),
            "t.profile:2: expected 'key = value', got 'just words'");
  EXPECT_EQ(parse_error("base = rxe\nname =\n"), "t.profile:2: name: no value");
  const std::string missing = parse_error("name = x\nfamily = rxe\n");
  EXPECT_TRUE(missing.starts_with("t.profile: no base, and no value for pow2_minus_one_depths, "))
      << missing;
  EXPECT_TRUE(missing.ends_with("max_mw")) << missing;
}

TEST(Profile, CommentsBlankLinesAndHexadecimal) {
  const ProfileFile f = ProfileFile::parse(
      "# a comment\n\nbase = strict   # start there\n  name = mine  \r\nmax_msg_sz = 0x1000\n");
  EXPECT_EQ(f.name(), "mine");
  EXPECT_EQ(f.value("max_msg_sz"), "4096");
  EXPECT_EQ(f.family(), Profile::strict);
}

TEST(Profile, SetChecksTheValueAndNotesAreWrittenAfterIt) {
  ProfileFile f = ProfileFile::builtin(Profile::strict);
  EXPECT_THROW(f.set("retire_on_poll", "sometimes"), std::invalid_argument);
  EXPECT_THROW(f.set("no_such_key", "true"), std::invalid_argument);
  EXPECT_THROW(f.set("name", "a # b"), std::invalid_argument);
  f.set("max_sge", "0x10");
  EXPECT_EQ(f.value("max_sge"), "16");
  f.note("max_sge", "probed: Device.QueryDeviceLimits max_sge=16");
  EXPECT_NE(f.text().find("max_sge = 16  # probed: Device.QueryDeviceLimits max_sge=16\n"),
            std::string::npos);
  EXPECT_EQ(ProfileFile::doc("max_sge"), "SGEs per work request");
  EXPECT_EQ(ProfileFile::doc("nothing"), "");
}

// A world made from a file runs the file's profile: here strict with rxe's queue depths.
TEST(Profile, AWorldRunsItsProfileFile) {
  Config c;
  c.profile_file = ProfileFile::parse("base = strict\nname = odd\npow2_minus_one_depths = true\n");
  World w(c);
  EXPECT_EQ(w.config().profile, Profile::strict);
  auto ctx = w.open("sim0");
  EXPECT_EQ(ctx->query_device().fw_ver, "verbsim-0.1 (strict)");
  auto pd = ctx->alloc_pd();
  auto cq = ctx->create_cq(16);
  auto qp = pd->create_qp(QpInitAttr{.send_cq = cq.get(), .recv_cq = cq.get(),
                                     .cap = {.max_send_wr = 4, .max_recv_wr = 8}});
  EXPECT_EQ(qp->cap().max_send_wr, 7u);  // 2^n - 1, as the file says
  EXPECT_EQ(qp->cap().max_recv_wr, 15u);
  EXPECT_NE(w.report().find("profile 'odd' (a file, family strict)"), std::string::npos);
}

TEST(Profile, VerbsimProfileNamesABuiltInProfileOrAFile) {
  const std::string path = ::testing::TempDir() + "verbsim_profile_test.profile";
  {
    std::ofstream out(path);
    out << "base = rxe\nname = from env\nmax_cqe = 1023\n";
  }
  ::setenv("VERBSIM_PROFILE", path.c_str(), 1);
  const Config c = Config::from_env();
  ASSERT_TRUE(c.profile_file.has_value());
  EXPECT_EQ(c.profile, Profile::rxe);
  EXPECT_EQ(c.profile_file->value("max_cqe"), "1023");
  ::setenv("VERBSIM_PROFILE", "mlx5", 1);
  EXPECT_FALSE(Config::from_env().profile_file.has_value());
  EXPECT_EQ(Config::from_env().profile, Profile::mlx5);
  ::setenv("VERBSIM_PROFILE", "/no/such/file.profile", 1);
  EXPECT_THROW(Config::from_env(), std::invalid_argument);
  ::unsetenv("VERBSIM_PROFILE");
  std::remove(path.c_str());
}

// A profile is a small regular file. /dev/zero would be read for ever (the memory grew without
// bound), a FIFO would block: both are refused, as is a file past the limit, with its name.
TEST(Profile, LoadReadsOnlyASmallRegularFile) {
  const auto error_of = [](const std::string& path) -> std::string {
    try {
      (void)ProfileFile::load(path);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "(loaded)";
  };
  EXPECT_EQ(error_of("/dev/zero"),
            "the profile file '/dev/zero' is not a regular file (a device, FIFO, socket or "
            "directory)");
  const std::string dir = ::testing::TempDir();
  const std::string fifo = dir + "verbsim_profile_test.fifo";
  std::remove(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  EXPECT_NE(error_of(fifo).find("is not a regular file"), std::string::npos);  // not blocked
  std::remove(fifo.c_str());
  EXPECT_NE(error_of(dir).find("is not a regular file"), std::string::npos);

  // A comment fills the file up to the limit: that loads; one byte more does not.
  const std::string path = dir + "verbsim_profile_test_large.profile";
  const std::string head = "base = rxe\n#";
  constexpr std::size_t kLimit = std::size_t{1} << 20;
  {
    std::ofstream out(path);
    out << head << std::string(kLimit - head.size(), 'x');
  }
  EXPECT_EQ(error_of(path), "(loaded)");
  {
    std::ofstream out(path, std::ios::app);
    out << 'x';
  }
  EXPECT_EQ(error_of(path), "the profile file '" + path +
                                "' is larger than 1048576 bytes (1 MiB), the most a profile "
                                "file may hold");
  std::remove(path.c_str());
}

}  // namespace
}  // namespace verbsim::sim
