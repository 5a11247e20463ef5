#include "agent/rank_keeper_protocol.h"

#include "gtest/gtest.h"

namespace dslaunch {
namespace {

TEST(KeeperSpec, RoundTripsEveryField) {
  KeeperSpec spec;
  spec.exe = "/usr/bin/env";
  spec.working_dir = "/tmp/with space";
  spec.argv = {"/usr/bin/env", "", "a b", "--x=1\n2"};
  spec.env = {"A=1", "EMPTY=", "LIST=0,1,2"};
  KeeperSpec decoded;
  std::string error;
  ASSERT_TRUE(DecodeKeeperSpec(EncodeKeeperSpec(spec), &decoded, &error)) << error;
  EXPECT_EQ(decoded.exe, spec.exe);
  EXPECT_EQ(decoded.working_dir, spec.working_dir);
  EXPECT_EQ(decoded.argv, spec.argv);
  EXPECT_EQ(decoded.env, spec.env);
  EXPECT_TRUE(decoded.cpus.empty());
  EXPECT_EQ(decoded.mem_node, -1);
  // Note [Core binding].
  spec.cpus = {2, 3};
  spec.mem_node = 1;
  ASSERT_TRUE(DecodeKeeperSpec(EncodeKeeperSpec(spec), &decoded, &error)) << error;
  EXPECT_EQ(decoded.cpus, spec.cpus);
  EXPECT_EQ(decoded.mem_node, 1);
  EXPECT_EQ(decoded.uid, -1);
  EXPECT_EQ(decoded.gid, -1);
  // Note [Ranks as another user]; uid 0 is a uid like any other.
  for (int64_t uid : {int64_t{0}, int64_t{65534}, int64_t{4294967294}}) {
    spec.uid = uid;
    spec.gid = 100;
    spec.groups = {100, 44, 0};
    ASSERT_TRUE(DecodeKeeperSpec(EncodeKeeperSpec(spec), &decoded, &error)) << error;
    EXPECT_EQ(decoded.uid, uid);
    EXPECT_EQ(decoded.gid, 100);
    EXPECT_EQ(decoded.groups, spec.groups);
  }
}

TEST(KeeperSpec, RefusesWhatWasNotEncoded) {
  KeeperSpec spec;
  spec.exe = "/bin/true";
  spec.argv = {"/bin/true"};
  const std::string good = EncodeKeeperSpec(spec);
  KeeperSpec decoded;
  std::string error;
  EXPECT_FALSE(DecodeKeeperSpec("", &decoded, &error));
  EXPECT_NE(error.find("version tag"), std::string::npos);
  EXPECT_FALSE(DecodeKeeperSpec(good.substr(0, good.size() - 1), &decoded, &error));
  EXPECT_FALSE(DecodeKeeperSpec(good + "x", &decoded, &error));
  EXPECT_NE(error.find("bytes after"), std::string::npos);
  spec.uid = 1000;  // no gid
  EXPECT_FALSE(DecodeKeeperSpec(EncodeKeeperSpec(spec), &decoded, &error));
  EXPECT_NE(error.find("uid without a gid"), std::string::npos);
  spec.uid = -1;
  spec.argv.clear();
  EXPECT_FALSE(DecodeKeeperSpec(EncodeKeeperSpec(spec), &decoded, &error));
  EXPECT_NE(error.find("argv"), std::string::npos);
}

TEST(KeeperReport, ParsesBothLinesAndNothingElse) {
  KeeperReport report;
  ASSERT_TRUE(ParseKeeperReport(KeeperStartedLine(4242), &report));
  EXPECT_TRUE(report.started);
  EXPECT_EQ(report.rank_pid, 4242);
  ASSERT_TRUE(ParseKeeperReport(KeeperFailedLine("cannot start 'x':\nno"), &report));
  EXPECT_FALSE(report.started);
  EXPECT_EQ(report.error, "cannot start 'x': no");
  EXPECT_FALSE(ParseKeeperReport("", &report));
  EXPECT_FALSE(ParseKeeperReport("started \n", &report));
  EXPECT_FALSE(ParseKeeperReport("started 12x\n", &report));
  EXPECT_FALSE(ParseKeeperReport("started 0\n", &report));
  EXPECT_FALSE(ParseKeeperReport("started 1\nstarted 2\n", &report));
}

}  // namespace
}  // namespace dslaunch
