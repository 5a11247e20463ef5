#include "common/bounded_file.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dslaunch {
namespace {

using ::testing::HasSubstr;

// A private folder under /tmp, removed at the end of the test.
class BoundedFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/bounded_file_test-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& content) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << content;
    return path;
  }
  std::string dir_;
};

TEST_F(BoundedFileTest, ReadsARegularFileWhole) {
  std::string path = Write("hosts", "a slots=1\nb slots=2\n");
  auto content = ReadConfigFile(path, "hostfile");
  ASSERT_TRUE(content.ok()) << content.status();
  EXPECT_EQ(*content, "a slots=1\nb slots=2\n");
}

TEST_F(BoundedFileTest, AFileOfExactlyTheLimitIsRead) {
  std::string path = Write("f", std::string(100, 'x'));
  auto content = ReadConfigFile(path, "job file", 100);
  ASSERT_TRUE(content.ok()) << content.status();
  EXPECT_EQ(content->size(), 100u);
}

TEST_F(BoundedFileTest, ALargerFileIsRefusedWithItsSizeAndTheLimit) {
  std::string path = Write("f", std::string(101, 'x'));
  auto content = ReadConfigFile(path, "job file", 100);
  ASSERT_FALSE(content.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(content.status()));
  EXPECT_EQ(content.status().message(),
            "job file " + path + ": 101 bytes; the limit for a job file is 100 bytes");
  auto default_limit = ReadConfigFile(Write("big", std::string(kMaxConfigFileBytes + 1, '#')), "hostfile");
  EXPECT_THAT(default_limit.status().message(), HasSubstr("the limit for a hostfile is 4 MiB"));
}

TEST_F(BoundedFileTest, AFileThatReportsNoSizeIsStillBounded) {
  // procfs files are regular with st_size 0; /proc/self/maps of a gtest binary
  // is far longer than 16 bytes.
  auto content = ReadConfigFile("/proc/self/maps", "ds_config", 16);
  ASSERT_FALSE(content.ok());
  EXPECT_THAT(content.status().message(),
              HasSubstr("ds_config /proc/self/maps: more than 16 bytes; the limit for a ds_config is 16 bytes"));
}

TEST_F(BoundedFileTest, MissingFileIsNotFoundAndNamed) {
  auto content = ReadConfigFile(dir_ + "/absent", "hostfile");
  EXPECT_TRUE(absl::IsNotFound(content.status()));
  EXPECT_EQ(content.status().message(), "hostfile " + dir_ + "/absent: No such file or directory (ENOENT)");
}

TEST_F(BoundedFileTest, DevicesAreRefusedByNameBeforeReading) {
  for (const char* device : {"/dev/zero", "/dev/urandom", "/dev/null"}) {
    auto content = ReadConfigFile(device, "hostfile");
    ASSERT_FALSE(content.ok()) << device;
    EXPECT_TRUE(absl::IsInvalidArgument(content.status()));
    EXPECT_EQ(content.status().message(),
              std::string("hostfile ") + device + ": is a character device, not a regular file");
  }
}

TEST_F(BoundedFileTest, AFifoIsRefusedAtOnceEvenWithNoWriter) {
  std::string fifo = dir_ + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto start = std::chrono::steady_clock::now();
  auto content = ReadConfigFile(fifo, "job file");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(content.status().message(), "job file " + fifo + ": is a FIFO, not a regular file");
}

TEST_F(BoundedFileTest, DirectoriesAndSocketsAreRefusedByName) {
  EXPECT_EQ(ReadConfigFile(dir_, "ds_config").status().message(),
            "ds_config " + dir_ + ": is a directory, not a regular file");

  std::string socket_path = dir_ + "/sock";
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, socket_path.c_str(), sizeof(address.sun_path) - 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  EXPECT_EQ(ReadConfigFile(socket_path, "token file").status().message(),
            "token file " + socket_path + ": is a socket, not a regular file");
  ::close(fd);
}

TEST_F(BoundedFileTest, ASymlinkToARegularFileIsFollowed) {
  std::string target = Write("real.cfg", "model: {}\n");
  std::string link = dir_ + "/link.cfg";
  std::filesystem::create_symlink(target, link);
  auto content = ReadConfigFile(link, "job file");
  ASSERT_TRUE(content.ok()) << content.status();
  EXPECT_EQ(*content, "model: {}\n");
  std::filesystem::create_symlink("/dev/zero", dir_ + "/zero.cfg");
  EXPECT_EQ(ReadConfigFile(dir_ + "/zero.cfg", "job file").status().message(),
            "job file " + dir_ + "/zero.cfg: is a character device, not a regular file");
}

}  // namespace
}  // namespace dslaunch
