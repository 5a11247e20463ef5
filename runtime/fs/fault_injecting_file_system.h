// A FileSystem for tests that passes every call to another one, except those
// it was told to fail, damage or hold (leveldb's fault_injection_test idea:
// the fault is a wrapper around the seam, never a variable read inside
// production code).
//
//   PosixFileSystem posix;
//   FaultInjectingFileSystem fs(posix);
//   fs.FailNth(FsOp::kRename, 1, ENOSPC, ".partial");   // the first rename of a partial folder
//   std::shared_ptr<FsPause> pause = fs.PauseBefore(FsOp::kRename, "/latest");
//   ... start the save on another thread ...
//   ASSERT_TRUE(pause->WaitUntilReached(absl::Seconds(30)));  // an event, not a sleep
//   ... look at the files mid-save ...
//   pause->Release();
//
// A rule matches an operation of its kind whose path (for a rename, either
// path) contains the rule's `path_part` ("" matches every path), or, with
// PathMatch::kWhole, equals it. Matching
// operations are counted per rule from the moment it is added. A failed
// operation does nothing and returns ErrnoStatus("<op> <path>", errno), as
// the POSIX one would. Thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "runtime/fs/file_system.h"

namespace dslaunch::runtime {

enum class PathMatch { kContains, kWhole };

enum class FsOp {
  kCreate,             // NewWritableFile, NewAppendableFile
  kAppend,             // WritableFile::Append, WriteAt, Flush
  kSync,               // WritableFile::Sync
  kClose,              // WritableFile::Close
  kOpen,               // NewSequentialFile, NewRandomAccessFile, MapReadOnly, ReadFile
  kRead,               // SequentialFile::Read, RandomAccessFile::Read
  kRename,             // Rename
  kRemove,             // RemoveFile, RemoveTree
  kCreateDirectories,  // CreateDirectories
  kSyncDirectory,      // SyncDirectory
};
const char* FsOpName(FsOp op);  // "append", "rename", ...

// One operation the file system was asked for, in the order asked.
struct FsCall {
  FsOp op;
  std::string path;
  std::string to;    // a rename's target
  std::string text;  // "rename /a to /b", "write /c": as in error messages
};

// A point where a test holds a thread inside the file system.
class FsPause {
 public:
  // Test side: true once a thread is held here; false after `timeout`.
  bool WaitUntilReached(absl::Duration timeout);
  // Lets the held thread (and every later one) through.
  void Release();

  // File-system side: blocks the caller until Release().
  void Arrive();

 private:
  absl::Mutex mutex_;
  bool reached_ ABSL_GUARDED_BY(mutex_) = false;
  bool released_ ABSL_GUARDED_BY(mutex_) = false;
};

class FaultInjectingFileSystem final : public FileSystem {
 public:
  // `base` must outlive this.
  explicit FaultInjectingFileSystem(FileSystem& base) : base_(base) {}

  // The `nth` (1-based) matching operation fails with `err`.
  void FailNth(FsOp op, int nth, int err, std::string path_part = "");
  // The `nth` matching operation and every one after it fail (a disk that
  // stays full).
  void FailFrom(FsOp op, int nth, int err, std::string path_part = "");
  // The `nth` matching Append writes the first half of its bytes, then fails
  // with `err`: a disk that fills in the middle of a write.
  void TruncateNthAppend(int nth, int err, std::string path_part = "");
  // The `nth` matching Append is written with its middle byte flipped and
  // reports success: silent corruption that only a checksum finds.
  void CorruptNthAppend(int nth, std::string path_part = "");
  // The thread making the `nth` matching operation waits, before doing it,
  // until the returned pause is released.
  std::shared_ptr<FsPause> PauseBefore(FsOp op, std::string path_part, int nth = 1,
                                       PathMatch match = PathMatch::kContains);
  // Removes every rule (held threads are not released).
  void ClearFaults();

  // Every operation tried (Stat and ListDirectory excepted), in order.
  std::vector<FsCall> Log() const;

  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override;
  absl::StatusOr<std::unique_ptr<WritableFile>> NewAppendableFile(const std::string& path) override;
  absl::StatusOr<std::unique_ptr<SequentialFile>> NewSequentialFile(const std::string& path) override;
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(const std::string& path) override;
  absl::StatusOr<std::unique_ptr<ReadOnlyMemoryRegion>> MapReadOnly(const std::string& path) override;
  using FileSystem::ReadFile;  // the one without a limit
  absl::StatusOr<std::string> ReadFile(const std::string& path, int64_t max_bytes) override;
  absl::StatusOr<FileInfo> Stat(const std::string& path) override;
  absl::Status CreateDirectories(const std::string& path) override;
  absl::Status RemoveFile(const std::string& path) override;
  absl::Status RemoveTree(const std::string& path) override;
  absl::Status Rename(const std::string& from, const std::string& to) override;
  absl::StatusOr<std::vector<std::string>> ListDirectory(const std::string& path) override;
  absl::Status SyncDirectory(const std::string& path) override;

  // What to do with one operation (public for the wrapped files).
  struct Decision {
    absl::Status failure;  // not ok: fail with it (after a truncated write)
    bool truncate = false;
    bool corrupt = false;
  };
  // Counts the operation against every rule, logs it, waits at a pause.
  Decision Decide(FsOp op, const std::string& path, const std::string& other_path = "");

 private:
  enum class Effect { kFail, kTruncate, kCorrupt, kPause };
  struct Rule {
    FsOp op;
    std::string path_part;
    int nth;
    bool and_after;  // every match from the nth on
    Effect effect;
    int err = 0;
    PathMatch match = PathMatch::kContains;
    int seen = 0;
    std::shared_ptr<FsPause> pause;
  };
  void AddRule(Rule rule);

  FileSystem& base_;
  mutable absl::Mutex mutex_;
  std::vector<Rule> rules_ ABSL_GUARDED_BY(mutex_);
  std::vector<FsCall> log_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace dslaunch::runtime
