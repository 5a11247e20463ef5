// The fault-injecting wrapper does what a test asks of it and nothing else:
// the Nth matching operation fails with the chosen errno, a truncated or
// corrupted write lands on disk as described, and a pause holds a thread
// until it is released.
#include "runtime/fs/fault_injecting_file_system.h"

#include <algorithm>
#include <cerrno>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/fs/posix_file_system.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;

class FaultInjectingFileSystemTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/fault-fs-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { ASSERT_TRUE(posix_.RemoveTree(dir_).ok()); }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  absl::Status Write(const std::string& name, const std::string& content) {
    auto file = fs_.NewWritableFile(Path(name));
    if (!file.ok()) return file.status();
    if (absl::Status s = (*file)->Append(content); !s.ok()) return s;
    if (absl::Status s = (*file)->Sync(); !s.ok()) return s;
    return (*file)->Close();
  }

  PosixFileSystem posix_;
  FaultInjectingFileSystem fs_{posix_};
  std::string dir_;
};

TEST_F(FaultInjectingFileSystemTest, TheNthMatchingOperationFailsWithItsErrnoAndOthersPass) {
  fs_.FailNth(FsOp::kSync, 2, EIO, "/b");
  EXPECT_TRUE(Write("a", "1").ok());  // another path: not counted
  EXPECT_TRUE(Write("b", "1").ok());  // the first match
  absl::Status second = Write("b", "2");
  EXPECT_EQ(second.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(second.message()), HasSubstr("fsync " + Path("b") + ": Input/output error (EIO)"));
  EXPECT_TRUE(Write("b", "3").ok());  // only the nth

  fs_.FailFrom(FsOp::kRename, 1, ENOSPC);
  for (int i = 0; i < 2; ++i) {
    absl::Status renamed = fs_.Rename(Path("a"), Path("c"));
    EXPECT_EQ(renamed.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(std::string(renamed.message()),
                HasSubstr("rename " + Path("a") + " to " + Path("c") + ": No space left on device (ENOSPC)"));
  }
  EXPECT_TRUE(posix_.Exists(Path("a")));  // a failed operation does nothing
  fs_.ClearFaults();
  EXPECT_TRUE(fs_.Rename(Path("a"), Path("c")).ok());
}

TEST_F(FaultInjectingFileSystemTest, ATruncatedWriteKeepsHalfAndACorruptedOneFlipsAByte) {
  fs_.TruncateNthAppend(1, ENOSPC, "/short");
  absl::Status truncated = Write("short", "0123456789");
  EXPECT_EQ(truncated.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(truncated.message()), HasSubstr("write " + Path("short")));
  EXPECT_EQ(*posix_.ReadFile(Path("short")), "01234");

  fs_.CorruptNthAppend(1, "/bad");
  ASSERT_TRUE(Write("bad", "0123456789").ok());  // silent
  const std::string read = *posix_.ReadFile(Path("bad"));
  EXPECT_EQ(read.size(), 10u);
  EXPECT_NE(read, "0123456789");
}

TEST_F(FaultInjectingFileSystemTest, APauseHoldsTheThreadUntilReleased) {
  std::shared_ptr<FsPause> pause = fs_.PauseBefore(FsOp::kRename, "/from");
  ASSERT_TRUE(Write("from", "x").ok());
  absl::Status renamed = absl::UnknownError("not yet");
  std::thread mover([&] { renamed = fs_.Rename(Path("from"), Path("to")); });
  ASSERT_TRUE(pause->WaitUntilReached(absl::Seconds(30)));
  // Held before the rename: nothing has moved, and other calls go on.
  EXPECT_TRUE(fs_.Exists(Path("from")));
  EXPECT_TRUE(Write("other", "y").ok());
  pause->Release();
  mover.join();
  EXPECT_TRUE(renamed.ok()) << renamed;
  EXPECT_TRUE(fs_.Exists(Path("to")));
  const std::vector<FsCall> log = fs_.Log();
  auto rename = std::find_if(log.begin(), log.end(), [](const FsCall& call) { return call.op == FsOp::kRename; });
  ASSERT_NE(rename, log.end());
  EXPECT_EQ(rename->text, "rename " + Path("from") + " to " + Path("to"));
}

TEST_F(FaultInjectingFileSystemTest, AnUnreachedPauseTimesOut) {
  std::shared_ptr<FsPause> pause = fs_.PauseBefore(FsOp::kRename, "/never");
  EXPECT_FALSE(pause->WaitUntilReached(absl::Milliseconds(1)));
}

}  // namespace
}  // namespace dslaunch::runtime
