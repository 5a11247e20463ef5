#include "launcher/hostfile.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/launch_limits.h"

namespace dslaunch {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::SizeIs;

TEST(Hostfile, ParsesHostsInFileOrderWithLineNumbers) {
  auto hostfile = ParseHostfile(
      "# training cluster\n"
      "worker-0 slots=8\n"
      "\n"
      "worker-1 slots=4   # trailing comments are fine\n"
      "10.0.0.2 slots=1\n",
      "hosts");
  ASSERT_TRUE(hostfile.ok()) << hostfile.status();
  EXPECT_EQ(hostfile->path, "hosts");
  ASSERT_THAT(hostfile->hosts, SizeIs(3));
  EXPECT_EQ(hostfile->hosts[0].host, "worker-0");
  EXPECT_EQ(hostfile->hosts[0].slots, 8);
  EXPECT_EQ(hostfile->hosts[0].line, 2);
  EXPECT_EQ(hostfile->hosts[1].host, "worker-1");
  EXPECT_EQ(hostfile->hosts[1].slots, 4);
  EXPECT_EQ(hostfile->hosts[1].line, 4);
  EXPECT_EQ(hostfile->hosts[2].host, "10.0.0.2");
  EXPECT_EQ(hostfile->hosts[2].slots, 1);
  EXPECT_EQ(hostfile->hosts[2].line, 5);
}

TEST(Hostfile, AcceptsTabsExtraSpacesCrlfAndNoFinalNewline) {
  auto hostfile = ParseHostfile("  \tnode_a.example.com \t slots=16\t\r\nnode-B slots=2#c", "h");
  ASSERT_TRUE(hostfile.ok()) << hostfile.status();
  ASSERT_THAT(hostfile->hosts, SizeIs(2));
  EXPECT_EQ(hostfile->hosts[0].host, "node_a.example.com");
  EXPECT_EQ(hostfile->hosts[0].slots, 16);
  EXPECT_EQ(hostfile->hosts[1].host, "node-B");
  EXPECT_EQ(hostfile->hosts[1].slots, 2);
  EXPECT_EQ(hostfile->hosts[1].line, 2);
}

TEST(Hostfile, CommentAndBlankOnlyLinesAreSkippedButCounted) {
  auto hostfile = ParseHostfile("#a\n   \n\t# b\nw slots=1\n", "h");
  ASSERT_TRUE(hostfile.ok()) << hostfile.status();
  ASSERT_THAT(hostfile->hosts, SizeIs(1));
  EXPECT_EQ(hostfile->hosts[0].line, 4);
}

TEST(Hostfile, BadSyntaxNamesFileLineAndText) {
  auto hostfile = ParseHostfile("worker-0 slots=4\n# x\nworker-1 slot=4\n", "hosts");
  ASSERT_FALSE(hostfile.ok());
  EXPECT_EQ(hostfile.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(hostfile.status().message(),
              HasSubstr("hosts:3: 'worker-1 slot=4': expected 'HOST slots=N'"));
}

TEST(Hostfile, ExtraFieldIsAnError) {
  auto hostfile = ParseHostfile("w slots=4 gpus=2\n", "hosts");
  ASSERT_FALSE(hostfile.ok());
  EXPECT_THAT(hostfile.status().message(),
              HasSubstr("hosts:1: 'w slots=4 gpus=2': expected 'HOST slots=N'"));
}

TEST(Hostfile, HostWithoutSlotsIsAnError) {
  auto hostfile = ParseHostfile("worker-0\n", "hosts");
  ASSERT_FALSE(hostfile.ok());
  EXPECT_THAT(hostfile.status().message(),
              HasSubstr("hosts:1: 'worker-0': host 'worker-0' has no slots"));
}

TEST(Hostfile, SlotsMustBeAPositiveInteger) {
  for (const char* bad : {"0", "-1", "abc", "", "+4", "4.0", "4x"}) {
    std::string line = std::string("w slots=") + bad;
    auto hostfile = ParseHostfile(line + "\n", "hosts");
    ASSERT_FALSE(hostfile.ok()) << line;
    EXPECT_THAT(hostfile.status().message(),
                HasSubstr("hosts:1: '" + line + "': slots must be a positive integer, got '" +
                          bad + "'"));
  }
}

TEST(Hostfile, SlotsAreBoundedPerHost) {
  auto at_limit = ParseHostfile("w slots=1024\n", "hosts");
  ASSERT_TRUE(at_limit.ok()) << at_limit.status();
  EXPECT_EQ(at_limit->hosts[0].slots, kMaxSlotsPerHost);
  for (const char* big : {"1025", "100000", "100000000", "99999999999999999999"}) {
    std::string line = std::string("w slots=") + big;
    auto hostfile = ParseHostfile(line + "\n", "hosts");
    ASSERT_FALSE(hostfile.ok()) << line;
    EXPECT_EQ(hostfile.status().message(), "hosts:1: '" + line + "': slots=" + big +
                                               " is more than 1024, the most one host may have");
  }
}

TEST(Hostfile, HostsAndTotalSlotsAreBounded) {
  std::string many;
  for (int i = 0; i <= kMaxHosts; ++i) absl::StrAppend(&many, "h", i, " slots=1\n");
  auto hostfile = ParseHostfile(many, "hosts");
  ASSERT_FALSE(hostfile.ok());
  EXPECT_EQ(hostfile.status().message(),
            absl::StrCat("hosts:", kMaxHosts + 1, ": 'h", kMaxHosts,
                         " slots=1': more than 65536 hosts, the most a hostfile may list"));

  std::string wide;
  for (int i = 0; i <= kMaxHostfileSlots / kMaxSlotsPerHost; ++i) {
    absl::StrAppend(&wide, "h", i, " slots=1024\n");
  }
  auto too_wide = ParseHostfile(wide, "hosts");
  ASSERT_FALSE(too_wide.ok());
  EXPECT_THAT(too_wide.status().message(),
              HasSubstr("slots=1024': more than 1048576 slots in all, the most a hostfile may hold"));
}

TEST(Hostfile, ManyBadLinesAreCappedInTheMessage) {
  std::string bad;
  for (int i = 0; i < 100; ++i) absl::StrAppend(&bad, "h", i, " slot=1\n");
  auto hostfile = ParseHostfile(bad, "hosts");
  ASSERT_FALSE(hostfile.ok());
  std::vector<std::string> lines = absl::StrSplit(hostfile.status().message(), '\n');
  ASSERT_THAT(lines, SizeIs(21));
  EXPECT_EQ(lines.back(), "hosts: 80 more bad line(s) not shown");
}

TEST(Hostfile, BadHostNamesAreErrors) {
  for (const char* bad : {"host:1", "wor@ker", "a/b", "[::1]"}) {
    std::string line = std::string(bad) + " slots=2";
    auto hostfile = ParseHostfile(line, "hosts");
    ASSERT_FALSE(hostfile.ok()) << line;
    EXPECT_THAT(hostfile.status().message(),
                HasSubstr("hosts:1: '" + line + "': bad host name '" + bad + "'"));
  }
}

TEST(Hostfile, DuplicateHostNamesTheFirstLine) {
  auto hostfile = ParseHostfile("# c\nworker-0 slots=8\nworker-1 slots=8\n\nworker-0 slots=4\n",
                                "hosts");
  ASSERT_FALSE(hostfile.ok());
  EXPECT_THAT(hostfile.status().message(), HasSubstr("hosts:5: 'worker-0 slots=4'"));
  EXPECT_THAT(hostfile.status().message(),
              HasSubstr("duplicate host 'worker-0' (first on line 2)"));
}

TEST(Hostfile, ReportsEveryBadLineOnePerMessageLine) {
  auto hostfile = ParseHostfile(
      "a slots=1\n"
      "b slot=1\n"
      "c slots=0\n"
      "a slots=2\n"
      "d\n"
      "e slots=3\n",
      "cluster/hosts");
  ASSERT_FALSE(hostfile.ok());
  std::vector<std::string> lines = absl::StrSplit(hostfile.status().message(), '\n');
  ASSERT_THAT(lines, SizeIs(4)) << hostfile.status();
  EXPECT_THAT(lines[0], HasSubstr("cluster/hosts:2: 'b slot=1'"));
  EXPECT_THAT(lines[1], HasSubstr("cluster/hosts:3: 'c slots=0'"));
  EXPECT_THAT(lines[2], HasSubstr("cluster/hosts:4: 'a slots=2': duplicate host 'a'"));
  EXPECT_THAT(lines[3], HasSubstr("cluster/hosts:5: 'd'"));
  EXPECT_THAT(hostfile.status().message(), Not(HasSubstr("'e slots=3'")));
}

TEST(Hostfile, FileWithNoHostIsAnError) {
  for (const char* content : {"", "\n\n", "# only a comment\n   # another\n"}) {
    auto hostfile = ParseHostfile(content, "hosts");
    ASSERT_FALSE(hostfile.ok()) << '"' << content << '"';
    EXPECT_EQ(hostfile.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(hostfile.status().message(), HasSubstr("hosts: no host in file"));
  }
}

TEST(Hostfile, ControlBytesInABadLineAreEscaped) {
  auto hostfile = ParseHostfile(std::string("w\x01 slots=1\n"), "hosts");
  ASSERT_FALSE(hostfile.ok());
  EXPECT_THAT(hostfile.status().message(), HasSubstr("'w\\x01 slots=1'"));
}

// A temporary directory removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string pattern = ::testing::TempDir() + "hostfile_test_XXXXXX";
    path_ = ::mkdtemp(pattern.data()) ? pattern : "";
  }
  ~TempDir() {
    if (!path_.empty()) std::system(("rm -rf '" + path_ + "'").c_str());
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(Hostfile, ReadsAFile) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  std::string path = dir.path() + "/hostfile";
  FILE* file = std::fopen(path.c_str(), "w");
  ASSERT_NE(file, nullptr);
  std::fputs("worker-0 slots=2\nworker-1 slots=3\n", file);
  std::fclose(file);

  auto hostfile = ReadHostfile(path);
  ASSERT_TRUE(hostfile.ok()) << hostfile.status();
  EXPECT_EQ(hostfile->path, path);
  ASSERT_THAT(hostfile->hosts, SizeIs(2));
  EXPECT_EQ(hostfile->hosts[1].host, "worker-1");
  EXPECT_EQ(hostfile->hosts[1].slots, 3);
}

TEST(Hostfile, ReadErrorsNameTheFile) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  std::string path = dir.path() + "/hostfile";
  FILE* file = std::fopen(path.c_str(), "w");
  ASSERT_NE(file, nullptr);
  std::fputs("worker-0 slots=two\n", file);
  std::fclose(file);

  auto bad = ReadHostfile(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr(path + ":1: 'worker-0 slots=two'"));
}

TEST(Hostfile, MissingFileIsNotFoundAndNamesIt) {
  TempDir dir;
  std::string path = dir.path() + "/no-such-hostfile";
  auto hostfile = ReadHostfile(path);
  ASSERT_FALSE(hostfile.ok());
  EXPECT_EQ(hostfile.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(hostfile.status().message(), HasSubstr(path));
}

TEST(Hostfile, DirectoryIsAnError) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  auto hostfile = ReadHostfile(dir.path());
  ASSERT_FALSE(hostfile.ok());
  EXPECT_THAT(hostfile.status().message(), HasSubstr(dir.path()));
  EXPECT_THAT(hostfile.status().message(), HasSubstr("is a directory"));
}

// Note [Bounded input files]: before, /dev/zero was read until memory ran
// out (SIGABRT after ~9 s) and a FIFO with no writer blocked forever.
TEST(Hostfile, DevicesAndFifosAreRefusedByName) {
  auto zero = ReadHostfile("/dev/zero");
  EXPECT_EQ(zero.status().message(), "hostfile /dev/zero: is a character device, not a regular file");
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  std::string fifo = dir.path() + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(ReadHostfile(fifo).status().message(),
            "hostfile " + fifo + ": is a FIFO, not a regular file");
}

}  // namespace
}  // namespace dslaunch
