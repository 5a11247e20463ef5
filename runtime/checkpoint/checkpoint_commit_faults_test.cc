// The commit protocol (Note [Atomic checkpoint commit]) against every fault
// the file system can throw at it, injected through FaultInjectingFileSystem:
// for each operation a save makes, in order, the save either fails at it
// with ENOSPC (a disk that fills) or is held just before it (a crash there).
// Either way `latest` and the previous checkpoint stay intact and verified,
// and a failed save leaves no partial folder; the error names the operation,
// the path and the errno.
#include <cerrno>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/checkpoint/checkpoint_files.h"
#include "runtime/fs/fault_injecting_file_system.h"
#include "runtime/fs/posix_file_system.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;

class CheckpointCommitFaultsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/ckpt-faults-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { ASSERT_TRUE(posix_.RemoveTree(dir_).ok()); }

  // What the ranks and then rank 0 do in a save, in one thread; on a failure,
  // rank 0's clean-up (EngineCheckpointer::Save's `abandon`).
  absl::Status Save(FileSystem& fs, const std::string& tag, int64_t step, int ranks = 2) {
    absl::Status saved = [&]() -> absl::Status {
      DS_RETURN_IF_ERROR(PreparePartial(fs, dir_, tag));
      for (int r = 0; r < ranks; ++r) {
        DS_ASSIGN_OR_RETURN(auto writer, ChecksummedFileWriter::Create(fs, RankFile(PartialDir(dir_, tag), r)));
        const std::string content = absl::StrCat("rank ", r, " of ", tag, std::string(1000, 'x'));
        DS_RETURN_IF_ERROR(writer->Write(content.data(), content.size()));
        DS_ASSIGN_OR_RETURN(FileDigest digest, writer->Finish());
        DS_RETURN_IF_ERROR(RecordRankFile(fs, PartialDir(dir_, tag), r, digest));
      }
      return CommitCheckpoint(fs, dir_, tag, step, ranks);
    }();
    if (!saved.ok()) (void)RemovePartial(posix_, dir_, tag);
    return saved;
  }

  // A folder holding one committed checkpoint, global_step5.
  void Reset() {
    ASSERT_TRUE(posix_.RemoveTree(dir_).ok());
    ASSERT_TRUE(posix_.CreateDirectories(dir_).ok());
    ASSERT_TRUE(Save(posix_, "global_step5", 5).ok());
  }

  // Every operation a save of global_step10 makes after global_step5, with
  // how many operations of its kind on its path came before it (the rule
  // that picks it out, FaultInjectingFileSystem counting as it does).
  struct Target {
    FsCall call;
    int nth;
  };
  std::vector<Target> Operations() {
    Reset();
    FaultInjectingFileSystem recorder(posix_);
    EXPECT_TRUE(Save(recorder, "global_step10", 10).ok());
    std::vector<FsCall> log = recorder.Log();
    std::vector<Target> targets;
    for (size_t i = 0; i < log.size(); ++i) {
      int nth = 0;
      for (size_t j = 0; j <= i; ++j) {
        if (log[j].op == log[i].op &&
            (absl::StrContains(log[j].path, log[i].path) || absl::StrContains(log[j].to, log[i].path))) {
          ++nth;
        }
      }
      targets.push_back({log[i], nth});
    }
    return targets;
  }
  // Whether `latest` was already replaced before `index` (its rename done).
  static bool LatestRenamedBefore(const std::vector<Target>& targets, size_t index) {
    for (size_t j = 0; j < index; ++j) {
      if (targets[j].call.op == FsOp::kRename && absl::EndsWith(targets[j].call.to, "/latest")) return true;
    }
    return false;
  }

  // What a restarted job would find: `latest` names a checkpoint that
  // verifies, and the previous one is as it was.
  void ExpectPreviousIntact(const std::string& where, bool new_one_may_be_latest) {
    auto latest = ReadLatestTag(posix_, dir_);
    ASSERT_TRUE(latest.ok()) << where << ": " << latest.status();
    if (!new_one_may_be_latest) EXPECT_EQ(*latest, "global_step5") << where;
    EXPECT_TRUE(VerifyCheckpoint(posix_, dir_, *latest).ok()) << where;
    EXPECT_TRUE(VerifyCheckpoint(posix_, dir_, "global_step5").ok()) << where;
    EXPECT_EQ(ChooseResumeCheckpoint(posix_, dir_, "").tag, *latest) << where;
  }

  PosixFileSystem posix_;
  std::string dir_;
};

TEST_F(CheckpointCommitFaultsTest, ENOSPCAtEveryStepIsNamedAndLeavesLatestThePreviousCheckpointAndNoPartial) {
  const std::vector<Target> targets = Operations();
  ASSERT_GT(targets.size(), 20u);
  int writes = 0, syncs = 0, renames = 0;
  for (size_t i = 0; i < targets.size(); ++i) {
    const FsCall& call = targets[i].call;
    Reset();
    FaultInjectingFileSystem faulty(posix_);
    faulty.FailNth(call.op, targets[i].nth, ENOSPC, call.path);
    absl::Status saved = Save(faulty, "global_step10", 10);
    ASSERT_FALSE(saved.ok()) << call.text << " failed, yet the save succeeded";
    EXPECT_THAT(std::string(saved.message()), HasSubstr(call.text + ": No space left on device (ENOSPC)"));
    if (call.op == FsOp::kAppend || call.op == FsOp::kSync || call.op == FsOp::kRename) {
      EXPECT_EQ(saved.code(), absl::StatusCode::kResourceExhausted) << call.text << ": " << saved;
      writes += call.op == FsOp::kAppend;
      syncs += call.op == FsOp::kSync;
      renames += call.op == FsOp::kRename;
    }
    ExpectPreviousIntact(call.text, LatestRenamedBefore(targets, i + 1));
    EXPECT_FALSE(posix_.Exists(PartialDir(dir_, "global_step10"))) << call.text << ": a partial folder was left";
    EXPECT_FALSE(posix_.Exists(dir_ + "/latest.tmp")) << call.text;
  }
  // Each rank file and record, COMPLETE and `latest`: every kind was tried.
  EXPECT_GE(writes, 4);
  EXPECT_GE(syncs, 4);
  EXPECT_GE(renames, 4);
}

TEST_F(CheckpointCommitFaultsTest, ASaveHeldBeforeEveryStepLeavesACheckpointToResumeFrom) {
  const std::vector<Target> targets = Operations();
  for (size_t i = 0; i < targets.size(); ++i) {
    const FsCall& call = targets[i].call;
    Reset();
    FaultInjectingFileSystem faulty(posix_);
    std::shared_ptr<FsPause> pause = faulty.PauseBefore(call.op, call.path, targets[i].nth);
    absl::Status saved = absl::UnknownError("not finished");
    std::thread saver([&] { saved = Save(faulty, "global_step10", 10); });
    ASSERT_TRUE(pause->WaitUntilReached(absl::Seconds(60))) << call.text << " was never reached";
    // A crash here: what the next attempt would find.
    ExpectPreviousIntact("held before " + call.text, LatestRenamedBefore(targets, i));
    pause->Release();
    saver.join();
    EXPECT_TRUE(saved.ok()) << call.text << ": " << saved;
    EXPECT_EQ(*ReadLatestTag(posix_, dir_), "global_step10");
  }
}

// Note [Replacing a tag]: a save of a tag that exists ("final", saved at
// step 8, saved again at step 9), held before each of its operations (a
// crash there): what a restart finds, once RecoverInterruptedReplace has run
// (on a copy of the folder, as the crashed save would have left it), is
// "final", committed and verified, at step 8 or 9.
TEST_F(CheckpointCommitFaultsTest, ASaveOfAnExistingTagHeldBeforeEveryStepLeavesThatTagToResumeFrom) {
  auto reset = [&] {
    Reset();
    ASSERT_TRUE(Save(posix_, "final", 8).ok());
  };
  reset();
  FaultInjectingFileSystem recorder(posix_);
  ASSERT_TRUE(Save(recorder, "final", 9).ok());
  const std::vector<FsCall> log = recorder.Log();
  const std::string copy = dir_ + "-copy";
  int held_between_renames = 0;
  for (size_t i = 0; i < log.size(); ++i) {
    int nth = 0;
    for (size_t j = 0; j <= i; ++j) {  // as FaultInjectingFileSystem counts: the path in either name
      nth += log[j].op == log[i].op &&
             (absl::StrContains(log[j].path, log[i].path) || absl::StrContains(log[j].to, log[i].path));
    }
    reset();
    FaultInjectingFileSystem faulty(posix_);
    std::shared_ptr<FsPause> pause = faulty.PauseBefore(log[i].op, log[i].path, nth);
    absl::Status saved = absl::UnknownError("not finished");
    std::thread saver([&] { saved = Save(faulty, "final", 9); });
    const bool reached = pause->WaitUntilReached(absl::Seconds(60));
    if (reached) {
      // (EXPECT, not ASSERT: the saver is let go below whatever happens.)
      EXPECT_TRUE(posix_.RemoveTree(copy).ok());
      EXPECT_EQ(std::system(absl::StrCat("cp -a '", dir_, "' '", copy, "'").c_str()), 0);
      held_between_renames += !posix_.Exists(TagDir(copy, "final"));
      auto repaired = RecoverInterruptedReplace(posix_, copy);
      EXPECT_TRUE(repaired.ok()) << log[i].text << ": " << repaired.status();
      const ResumeChoice choice = ChooseResumeCheckpoint(posix_, copy, "");
      EXPECT_EQ(choice.tag, "final") << "held before " << log[i].text;
      auto manifest = ReadManifest(posix_, copy, "final");
      EXPECT_TRUE(manifest.ok()) << "held before " << log[i].text << ": " << manifest.status();
      if (manifest.ok()) EXPECT_TRUE(manifest->step == 8 || manifest->step == 9) << manifest->step;
      EXPECT_FALSE(posix_.Exists(OldDir(copy, "final"))) << "held before " << log[i].text;
    }
    pause->Release();
    saver.join();
    ASSERT_TRUE(reached) << log[i].text << " was never reached";
    EXPECT_TRUE(saved.ok()) << log[i].text << ": " << saved;
  }
  EXPECT_GE(held_between_renames, 1) << "no hold fell between moving the old folder aside and the new one in";
  ASSERT_TRUE(posix_.RemoveTree(copy).ok());
}

TEST_F(CheckpointCommitFaultsTest, ARankFileCorruptedAsItIsWrittenIsCaughtBeforeItIsLoaded) {
  Reset();
  FaultInjectingFileSystem faulty(posix_);
  faulty.CorruptNthAppend(1, "rank_1.pt");
  ASSERT_TRUE(Save(faulty, "global_step10", 10).ok());  // silent, as a bad disk is
  auto verified = VerifyCheckpoint(posix_, dir_, "global_step10");
  ASSERT_FALSE(verified.ok());
  EXPECT_THAT(std::string(verified.status().message()), HasSubstr("rank_1.pt does not match its checksum"));
  EXPECT_EQ(ChooseResumeCheckpoint(posix_, dir_, "").tag, "global_step5");
}

TEST_F(CheckpointCommitFaultsTest, ADiskThatFillsInTheMiddleOfARankFileFailsTheSaveByName) {
  Reset();
  FaultInjectingFileSystem faulty(posix_);
  faulty.TruncateNthAppend(1, ENOSPC, "rank_0.pt");
  absl::Status saved = Save(faulty, "global_step10", 10);
  EXPECT_EQ(saved.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(saved.message()),
              HasSubstr(absl::StrCat("write ", RankFile(PartialDir(dir_, "global_step10"), 0), ": No space left")));
  ExpectPreviousIntact("truncated", false);
  EXPECT_FALSE(posix_.Exists(PartialDir(dir_, "global_step10")));
}

}  // namespace
}  // namespace dslaunch::runtime
