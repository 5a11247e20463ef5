#include "runtime/fs/fault_injecting_file_system.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace dslaunch::runtime {
namespace {

class FaultInjectingWritableFile final : public WritableFile {
 public:
  FaultInjectingWritableFile(FaultInjectingFileSystem& fs, std::unique_ptr<WritableFile> base)
      : fs_(fs), base_(std::move(base)) {}

  absl::Status Append(absl::string_view data) override {
    FaultInjectingFileSystem::Decision decision = fs_.Decide(FsOp::kAppend, path());
    if (decision.truncate) {
      // The first half reaches the disk before it fills.
      (void)base_->Append(data.substr(0, data.size() / 2));
      (void)base_->Sync();
    }
    if (!decision.failure.ok()) return decision.failure;
    if (decision.corrupt && !data.empty()) {
      std::string damaged(data);
      damaged[damaged.size() / 2] ^= 0x5a;
      return base_->Append(damaged);
    }
    return base_->Append(data);
  }
  absl::Status WriteAt(uint64_t offset, absl::string_view data) override {
    FaultInjectingFileSystem::Decision decision = fs_.Decide(FsOp::kAppend, path());
    if (decision.truncate) {
      (void)base_->WriteAt(offset, data.substr(0, data.size() / 2));
      (void)base_->Sync();
    }
    if (!decision.failure.ok()) return decision.failure;
    if (decision.corrupt && !data.empty()) {
      std::string damaged(data);
      damaged[damaged.size() / 2] ^= 0x5a;
      return base_->WriteAt(offset, damaged);
    }
    return base_->WriteAt(offset, data);
  }
  absl::Status Flush() override {
    FaultInjectingFileSystem::Decision decision = fs_.Decide(FsOp::kAppend, path());
    if (!decision.failure.ok()) return decision.failure;
    return base_->Flush();
  }
  absl::Status Sync() override {
    FaultInjectingFileSystem::Decision decision = fs_.Decide(FsOp::kSync, path());
    if (!decision.failure.ok()) return decision.failure;
    return base_->Sync();
  }
  absl::Status Close() override {
    FaultInjectingFileSystem::Decision decision = fs_.Decide(FsOp::kClose, path());
    // The descriptor goes either way, as with close(2).
    absl::Status closed = base_->Close();
    if (!decision.failure.ok()) return decision.failure;
    return closed;
  }
  const std::string& path() const override { return base_->path(); }

 private:
  FaultInjectingFileSystem& fs_;
  std::unique_ptr<WritableFile> base_;
};

class FaultInjectingSequentialFile final : public SequentialFile {
 public:
  FaultInjectingSequentialFile(FaultInjectingFileSystem& fs, std::unique_ptr<SequentialFile> base)
      : fs_(fs), base_(std::move(base)) {}

  absl::StatusOr<size_t> Read(char* buffer, size_t size) override {
    FaultInjectingFileSystem::Decision decision = fs_.Decide(FsOp::kRead, path());
    if (!decision.failure.ok()) return decision.failure;
    return base_->Read(buffer, size);
  }
  const std::string& path() const override { return base_->path(); }

 private:
  FaultInjectingFileSystem& fs_;
  std::unique_ptr<SequentialFile> base_;
};

class FaultInjectingRandomAccessFile final : public RandomAccessFile {
 public:
  FaultInjectingRandomAccessFile(FaultInjectingFileSystem& fs, std::unique_ptr<RandomAccessFile> base)
      : fs_(fs), base_(std::move(base)) {}

  absl::StatusOr<size_t> Read(uint64_t offset, char* buffer, size_t size) const override {
    FaultInjectingFileSystem::Decision decision = fs_.Decide(FsOp::kRead, path());
    if (!decision.failure.ok()) return decision.failure;
    return base_->Read(offset, buffer, size);
  }
  int64_t size() const override { return base_->size(); }
  const std::string& path() const override { return base_->path(); }

 private:
  FaultInjectingFileSystem& fs_;
  std::unique_ptr<RandomAccessFile> base_;
};

}  // namespace

const char* FsOpName(FsOp op) {
  // The system call's name, so that an injected error reads like a real one.
  switch (op) {
    case FsOp::kCreate: return "create";
    case FsOp::kAppend: return "write";
    case FsOp::kSync: return "fsync";
    case FsOp::kClose: return "close";
    case FsOp::kOpen: return "open";
    case FsOp::kRead: return "read";
    case FsOp::kRename: return "rename";
    case FsOp::kRemove: return "remove";
    case FsOp::kCreateDirectories: return "mkdir";
    case FsOp::kSyncDirectory: return "fsync";
  }
  return "?";
}

bool FsPause::WaitUntilReached(absl::Duration timeout) {
  absl::MutexLock lock(&mutex_);
  return mutex_.AwaitWithTimeout(absl::Condition(&reached_), timeout);
}

void FsPause::Release() {
  absl::MutexLock lock(&mutex_);
  released_ = true;
}

void FsPause::Arrive() {
  absl::MutexLock lock(&mutex_);
  reached_ = true;
  mutex_.Await(absl::Condition(&released_));
}

void FaultInjectingFileSystem::AddRule(Rule rule) {
  absl::MutexLock lock(&mutex_);
  rules_.push_back(std::move(rule));
}

void FaultInjectingFileSystem::FailNth(FsOp op, int nth, int err, std::string path_part) {
  AddRule(Rule{op, std::move(path_part), nth, false, Effect::kFail, err});
}

void FaultInjectingFileSystem::FailFrom(FsOp op, int nth, int err, std::string path_part) {
  AddRule(Rule{op, std::move(path_part), nth, true, Effect::kFail, err});
}

void FaultInjectingFileSystem::TruncateNthAppend(int nth, int err, std::string path_part) {
  AddRule(Rule{FsOp::kAppend, std::move(path_part), nth, false, Effect::kTruncate, err});
}

void FaultInjectingFileSystem::CorruptNthAppend(int nth, std::string path_part) {
  AddRule(Rule{FsOp::kAppend, std::move(path_part), nth, false, Effect::kCorrupt});
}

std::shared_ptr<FsPause> FaultInjectingFileSystem::PauseBefore(FsOp op, std::string path_part, int nth,
                                                               PathMatch match) {
  Rule rule{op, std::move(path_part), nth, false, Effect::kPause};
  rule.match = match;
  rule.pause = std::make_shared<FsPause>();
  std::shared_ptr<FsPause> pause = rule.pause;
  AddRule(std::move(rule));
  return pause;
}

void FaultInjectingFileSystem::ClearFaults() {
  absl::MutexLock lock(&mutex_);
  rules_.clear();
}

std::vector<FsCall> FaultInjectingFileSystem::Log() const {
  absl::MutexLock lock(&mutex_);
  return log_;
}

FaultInjectingFileSystem::Decision FaultInjectingFileSystem::Decide(FsOp op, const std::string& path,
                                                                    const std::string& other_path) {
  const std::string what = other_path.empty() ? absl::StrCat(FsOpName(op), " ", path)
                                              : absl::StrCat(FsOpName(op), " ", path, " to ", other_path);
  Decision decision;
  std::vector<std::shared_ptr<FsPause>> pauses;
  {
    absl::MutexLock lock(&mutex_);
    log_.push_back(FsCall{op, path, other_path, what});
    for (Rule& rule : rules_) {
      if (rule.op != op) continue;
      auto matches = [&](const std::string& candidate) {
        return rule.match == PathMatch::kWhole ? candidate == rule.path_part
                                               : absl::StrContains(candidate, rule.path_part);
      };
      if (!matches(path) && !(!other_path.empty() && matches(other_path))) continue;
      ++rule.seen;
      if (rule.and_after ? rule.seen < rule.nth : rule.seen != rule.nth) continue;
      switch (rule.effect) {
        case Effect::kFail:
          if (decision.failure.ok()) decision.failure = ErrnoStatus(what, rule.err);
          break;
        case Effect::kTruncate:
          decision.truncate = true;
          if (decision.failure.ok()) decision.failure = ErrnoStatus(what, rule.err);
          break;
        case Effect::kCorrupt:
          decision.corrupt = true;
          break;
        case Effect::kPause:
          pauses.push_back(rule.pause);
          break;
      }
    }
  }
  // Held outside the lock: other threads go on using the file system.
  for (const std::shared_ptr<FsPause>& pause : pauses) pause->Arrive();
  return decision;
}

absl::StatusOr<std::unique_ptr<WritableFile>> FaultInjectingFileSystem::NewWritableFile(const std::string& path) {
  Decision decision = Decide(FsOp::kCreate, path);
  if (!decision.failure.ok()) return decision.failure;
  DS_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, base_.NewWritableFile(path));
  return std::unique_ptr<WritableFile>(new FaultInjectingWritableFile(*this, std::move(file)));
}

absl::StatusOr<std::unique_ptr<WritableFile>> FaultInjectingFileSystem::NewAppendableFile(const std::string& path) {
  Decision decision = Decide(FsOp::kCreate, path);
  if (!decision.failure.ok()) return decision.failure;
  DS_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, base_.NewAppendableFile(path));
  return std::unique_ptr<WritableFile>(new FaultInjectingWritableFile(*this, std::move(file)));
}

absl::StatusOr<std::unique_ptr<SequentialFile>> FaultInjectingFileSystem::NewSequentialFile(const std::string& path) {
  Decision decision = Decide(FsOp::kOpen, path);
  if (!decision.failure.ok()) return decision.failure;
  DS_ASSIGN_OR_RETURN(std::unique_ptr<SequentialFile> file, base_.NewSequentialFile(path));
  return std::unique_ptr<SequentialFile>(new FaultInjectingSequentialFile(*this, std::move(file)));
}

absl::StatusOr<std::unique_ptr<RandomAccessFile>> FaultInjectingFileSystem::NewRandomAccessFile(
    const std::string& path) {
  Decision decision = Decide(FsOp::kOpen, path);
  if (!decision.failure.ok()) return decision.failure;
  DS_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file, base_.NewRandomAccessFile(path));
  return std::unique_ptr<RandomAccessFile>(new FaultInjectingRandomAccessFile(*this, std::move(file)));
}

absl::StatusOr<std::unique_ptr<ReadOnlyMemoryRegion>> FaultInjectingFileSystem::MapReadOnly(const std::string& path) {
  Decision decision = Decide(FsOp::kOpen, path);
  if (!decision.failure.ok()) return decision.failure;
  return base_.MapReadOnly(path);
}

absl::StatusOr<std::string> FaultInjectingFileSystem::ReadFile(const std::string& path, int64_t max_bytes) {
  Decision decision = Decide(FsOp::kOpen, path);
  if (!decision.failure.ok()) return decision.failure;
  return base_.ReadFile(path, max_bytes);
}

absl::StatusOr<FileInfo> FaultInjectingFileSystem::Stat(const std::string& path) { return base_.Stat(path); }

absl::Status FaultInjectingFileSystem::CreateDirectories(const std::string& path) {
  Decision decision = Decide(FsOp::kCreateDirectories, path);
  if (!decision.failure.ok()) return decision.failure;
  return base_.CreateDirectories(path);
}

absl::Status FaultInjectingFileSystem::RemoveFile(const std::string& path) {
  Decision decision = Decide(FsOp::kRemove, path);
  if (!decision.failure.ok()) return decision.failure;
  return base_.RemoveFile(path);
}

absl::Status FaultInjectingFileSystem::RemoveTree(const std::string& path) {
  Decision decision = Decide(FsOp::kRemove, path);
  if (!decision.failure.ok()) return decision.failure;
  return base_.RemoveTree(path);
}

absl::Status FaultInjectingFileSystem::Rename(const std::string& from, const std::string& to) {
  Decision decision = Decide(FsOp::kRename, from, to);
  if (!decision.failure.ok()) return decision.failure;
  return base_.Rename(from, to);
}

absl::StatusOr<std::vector<std::string>> FaultInjectingFileSystem::ListDirectory(const std::string& path) {
  return base_.ListDirectory(path);
}

absl::Status FaultInjectingFileSystem::SyncDirectory(const std::string& path) {
  Decision decision = Decide(FsOp::kSyncDirectory, path);
  if (!decision.failure.ok()) return decision.failure;
  return base_.SyncDirectory(path);
}

}  // namespace dslaunch::runtime
