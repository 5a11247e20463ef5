// A folder for a test on a real file system: swap files and layer files
// refuse tmpfs (memory), where /tmp often is, so the folder sits beside the
// test binary's working directory, named for the process and the running
// test (a parameterized test's '/' made '_'), and goes with its contents
// when the object does. Header-only.
#pragma once

#include <unistd.h>

#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "runtime/fs/file_system.h"

namespace dslaunch::runtime::testing {

class DiskTestFolder {
 public:
  // `prefix` names the kind of test ("offload-test").
  explicit DiskTestFolder(const std::string& prefix) {
    std::string test = "none";
    if (const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info()) {
      test = info->name();
      for (char& c : test) c = c == '/' ? '_' : c;
    }
    char cwd[4096] = {0};
    if (::getcwd(cwd, sizeof(cwd)) == nullptr) ADD_FAILURE() << "getcwd failed";
    path_ = std::string(cwd) + "/" + prefix + "-" + std::to_string(::getpid()) + "-" + test;
    // Not std::filesystem: fs/file_system.h says why.
    if (absl::Status made = FileSystem::Default().CreateDirectories(path_); !made.ok()) ADD_FAILURE() << made;
  }
  ~DiskTestFolder() { (void)FileSystem::Default().RemoveTree(path_); }
  DiskTestFolder(const DiskTestFolder&) = delete;
  DiskTestFolder& operator=(const DiskTestFolder&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Flips the bits of `mask` in the byte at `offset` of `file` (a swap file's
// payload starts at 4096): what a checksum must catch.
inline void FlipBitsInFile(const std::string& file, int64_t offset, unsigned char mask) {
  std::fstream stream(file, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(stream.good()) << file;
  char byte = 0;
  stream.seekg(offset);
  stream.read(&byte, 1);
  byte = static_cast<char>(byte ^ mask);
  stream.seekp(offset);
  stream.write(&byte, 1);
  ASSERT_TRUE(stream.good()) << file;
}

}  // namespace dslaunch::runtime::testing
