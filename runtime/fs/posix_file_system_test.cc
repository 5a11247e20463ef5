// The POSIX file system on real files: what each operation promises, and
// errors that name the operation, the path and the errno.
#include "runtime/fs/posix_file_system.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

class PosixFileSystemTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/posix-fs-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { ASSERT_TRUE(fs_.RemoveTree(dir_).ok()); }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  PosixFileSystem fs_;
  std::string dir_;
};

TEST_F(PosixFileSystemTest, WrittenBytesReadBackWholeSequentiallyAndMapped) {
  auto file = fs_.NewWritableFile(Path("a"));
  ASSERT_TRUE(file.ok()) << file.status();
  const std::string big(3 << 20, 'b');  // larger than the write buffer
  ASSERT_TRUE((*file)->Append("head:").ok());
  ASSERT_TRUE((*file)->Append(big).ok());
  ASSERT_TRUE((*file)->Sync().ok());
  ASSERT_TRUE((*file)->Close().ok());
  const std::string expected = "head:" + big;

  auto whole = fs_.ReadFile(Path("a"));
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(*whole, expected);

  auto sequential = fs_.NewSequentialFile(Path("a"));
  ASSERT_TRUE(sequential.ok());
  std::string read;
  char buffer[4096];
  while (true) {
    auto n = (*sequential)->Read(buffer, sizeof(buffer));
    ASSERT_TRUE(n.ok()) << n.status();
    if (*n == 0) break;
    read.append(buffer, *n);
  }
  EXPECT_EQ(read, expected);

  auto ranged = fs_.NewRandomAccessFile(Path("a"));
  ASSERT_TRUE(ranged.ok());
  EXPECT_EQ((*ranged)->size(), static_cast<int64_t>(expected.size()));
  char piece[8];
  auto got = (*ranged)->Read(2, piece, sizeof(piece));
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(std::string(piece, *got), expected.substr(2, 8));
  got = (*ranged)->Read(expected.size() - 3, piece, sizeof(piece));  // short at the end
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, 3u);

  auto mapped = fs_.MapReadOnly(Path("a"));
  ASSERT_TRUE(mapped.ok());
  ASSERT_EQ((*mapped)->size(), expected.size());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>((*mapped)->data()), (*mapped)->size()), expected);
  auto info = fs_.Stat(Path("a"));
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->type, FileType::kRegular);
  EXPECT_EQ(info->size, static_cast<int64_t>(expected.size()));
}

TEST_F(PosixFileSystemTest, WritesAtOffsetsMixWithBufferedAppends) {
  auto file = fs_.NewWritableFile(Path("a"));
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_TRUE((*file)->Append("0123").ok());     // still in the buffer
  ASSERT_TRUE((*file)->WriteAt(6, "xy").ok());   // past the end: a gap of zeros
  ASSERT_TRUE((*file)->WriteAt(1, "AB").ok());   // over appended bytes
  ASSERT_TRUE((*file)->Append("45").ok());       // at the end of what was appended
  ASSERT_TRUE((*file)->Close().ok());
  auto whole = fs_.ReadFile(Path("a"));
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(*whole, std::string("0AB345xy", 8));

  // O_APPEND would put the bytes at the end whatever the offset: refused.
  auto appendable = fs_.NewAppendableFile(Path("a"));
  ASSERT_TRUE(appendable.ok());
  absl::Status placed = (*appendable)->WriteAt(0, "z");
  EXPECT_EQ(placed.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(placed.message()), HasSubstr("opened for appending"));
}

TEST_F(PosixFileSystemTest, FoldersAreCreatedListedRenamedAndRemoved) {
  ASSERT_TRUE(fs_.CreateDirectories(Path("x/y/z")).ok());
  ASSERT_TRUE(fs_.CreateDirectories(Path("x/y/z")).ok());  // again: not an error
  EXPECT_TRUE(fs_.IsDirectory(Path("x/y/z")));
  ASSERT_TRUE(WriteFileAtomically(fs_, Path("x/f"), "one").ok());
  EXPECT_FALSE(fs_.Exists(Path("x/f.tmp")));
  auto names = fs_.ListDirectory(Path("x"));
  ASSERT_TRUE(names.ok());
  EXPECT_THAT(*names, UnorderedElementsAre("y", "f"));
  ASSERT_TRUE(fs_.Rename(Path("x"), Path("w")).ok());
  EXPECT_EQ(*fs_.ReadFile(Path("w/f")), "one");
  ASSERT_TRUE(fs_.SyncDirectory(Path("w")).ok());
  ASSERT_TRUE(fs_.RemoveFile(Path("w/f")).ok());
  ASSERT_TRUE(fs_.RemoveFile(Path("w/f")).ok());  // missing: not an error
  ASSERT_TRUE(fs_.RemoveTree(Path("w")).ok());
  EXPECT_FALSE(fs_.Exists(Path("w")));
  ASSERT_TRUE(fs_.RemoveTree(Path("w")).ok());
}

// An appendable file creates a missing file and keeps what an existing one
// holds; Flush makes the appended bytes readable while the file stays open.
TEST_F(PosixFileSystemTest, AppendableFilesKeepWhatIsThereAndFlushMakesBytesVisible) {
  auto created = fs_.NewAppendableFile(Path("log"));
  ASSERT_TRUE(created.ok()) << created.status();
  ASSERT_TRUE((*created)->Append("one\n").ok());
  EXPECT_EQ(*fs_.ReadFile(Path("log")), "");  // still buffered
  ASSERT_TRUE((*created)->Flush().ok());
  EXPECT_EQ(*fs_.ReadFile(Path("log")), "one\n");
  ASSERT_TRUE((*created)->Close().ok());
  EXPECT_EQ((*created)->Flush().code(), absl::StatusCode::kFailedPrecondition);

  auto reopened = fs_.NewAppendableFile(Path("log"));
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  ASSERT_TRUE((*reopened)->Append("two\n").ok());
  ASSERT_TRUE((*reopened)->Close().ok());
  EXPECT_EQ(*fs_.ReadFile(Path("log")), "one\ntwo\n");

  auto in_missing_folder = fs_.NewAppendableFile(Path("no/such/log"));
  EXPECT_THAT(std::string(in_missing_folder.status().message()), HasSubstr("open for appending " + Path("no/such/log")));
}

TEST_F(PosixFileSystemTest, ErrorsNameTheOperationThePathAndTheErrno) {
  auto missing = fs_.ReadFile(Path("missing"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("open " + Path("missing")));
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("(ENOENT)"));

  auto full = fs_.NewWritableFile("/dev/full");
  ASSERT_TRUE(full.ok()) << full.status();
  ASSERT_TRUE((*full)->Append(std::string(4096, 'x')).ok());  // buffered
  absl::Status synced = (*full)->Sync();
  EXPECT_EQ(synced.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(synced.message()), HasSubstr("write /dev/full: No space left on device (ENOSPC)"));

  absl::Status renamed = fs_.Rename(Path("nothing"), Path("else"));
  EXPECT_THAT(std::string(renamed.message()), HasSubstr("rename " + Path("nothing") + " to " + Path("else")));

  ASSERT_EQ(::mkfifo(Path("fifo").c_str(), 0600), 0);
  auto fifo = fs_.ReadFile(Path("fifo"));  // refused, not waited on
  EXPECT_EQ(fifo.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(fifo.status().message()), HasSubstr("not a regular file"));
  ASSERT_TRUE(WriteFileAtomically(fs_, Path("big"), std::string(100, 'x')).ok());
  EXPECT_EQ(fs_.ReadFile(Path("big"), 99).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(PosixFileSystemTest, AnAtomicWriteThatFailsLeavesTheOldFile) {
  ASSERT_TRUE(WriteFileAtomically(fs_, Path("latest"), "old\n").ok());
  // The temporary file is a device that is full: the rename never happens.
  ASSERT_EQ(::symlink("/dev/full", Path("latest.tmp").c_str()), 0);
  absl::Status written = WriteFileAtomically(fs_, Path("latest"), "new\n");
  EXPECT_EQ(written.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(*fs_.ReadFile(Path("latest")), "old\n");
  EXPECT_FALSE(fs_.Exists(Path("latest.tmp")));
}

}  // namespace
}  // namespace dslaunch::runtime
