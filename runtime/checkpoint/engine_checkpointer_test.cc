// Engine checkpoints through the file-system seam: a resume is bit for bit;
// no checkpoint is written from non-finite parameters; and a save that the
// fault-injecting file system fails (EIO on one rank, ENOSPC at the commit)
// or holds before its commit leaves `latest` and the previous checkpoint
// loadable, with no partial folder.
#include "runtime/checkpoint/engine_checkpointer.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <limits>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/checkpoint/checkpoint_files.h"
#include "runtime/fs/fault_injecting_file_system.h"
#include "runtime/fs/posix_file_system.h"
#include "runtime/model/gpt.h"
#include "runtime/testing/rank_group.h"
#include "runtime/testing/train_steps.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;
using testing::Batch;
using testing::MaxDifference;
using testing::Parameters;
using testing::TinyGpt;

DsConfig Config(int64_t micro, int64_t accumulation, int dp) {
  DsConfig config;
  config.train_micro_batch_size_per_gpu = micro;
  config.gradient_accumulation_steps = accumulation;
  config.train_batch_size = micro * accumulation * dp;
  config.optimizer.type = "AdamW";
  config.optimizer.lr = 1e-2;
  config.optimizer.weight_decay = 0.01;
  config.zero_optimization.reduce_bucket_size = 1000;
  return config;
}

std::vector<double> Train(Engine& engine, Gpt& model, int steps, int64_t micro, int64_t accumulation, int dp,
                          int rank, int first_step = 0) {
  return testing::TrainSteps(engine, model, steps, micro, accumulation, dp, rank, first_step);
}

class EngineCheckpointerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/engine-ckpt-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { ASSERT_TRUE(posix_.RemoveTree(dir_).ok()); }

  PosixFileSystem posix_;
  std::string dir_;
  testing::InProcessStore store_{"engine-checkpointer-test"};
};

TEST_F(EngineCheckpointerTest, AResumeIsBitForBit) {
  DsConfig config = Config(2, 2, 1);
  config.scheduler.type = "WarmupLR";
  config.scheduler.warmup_max_lr = 1e-2;
  config.scheduler.warmup_num_steps = 4;
  config.scheduler.warmup_type = "linear";
  Gpt straight(TinyGpt(), 9);
  auto engine = Engine::Create(straight.ptr(), config, ParallelState::DataParallelOnly(nullptr), torch::kCPU);
  ASSERT_TRUE(engine.ok());
  Train(**engine, straight, 3, 2, 2, 1, 0);
  ASSERT_TRUE(EngineCheckpointer(**engine).Save(dir_, "global_step3", {{"consumed_samples", 12}}).ok());
  auto uninterrupted = Train(**engine, straight, 3, 2, 2, 1, 0, 3);

  Gpt resumed(TinyGpt(), 1234);  // different init: everything must come from the checkpoint
  auto again = Engine::Create(resumed.ptr(), config, ParallelState::DataParallelOnly(nullptr), torch::kCPU);
  ASSERT_TRUE(again.ok());
  auto client = EngineCheckpointer(**again).Load(dir_);
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_EQ((*client)["consumed_samples"], 12);
  EXPECT_EQ((*again)->global_steps(), 3);
  auto continued = Train(**again, resumed, 3, 2, 2, 1, 0, 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(uninterrupted[i], continued[i]) << "step " << 3 + i;
  EXPECT_EQ(MaxDifference(Parameters(straight), Parameters(resumed)), 0.0);
}

TEST_F(EngineCheckpointerTest, NoCheckpointIsWrittenFromNonFiniteParameters) {
  store_.RunRanks(2, [&](int rank, Communicator& comm) {
    Gpt model(TinyGpt(), 5);
    auto engine = Engine::Create(model.ptr(), Config(2, 1, 2), ParallelState::DataParallelOnly(&comm), torch::kCPU);
    ASSERT_TRUE(engine.ok()) << engine.status();
    Train(**engine, model, 1, 2, 1, 2, rank);
    EngineCheckpointer checkpointer(**engine);
    ASSERT_TRUE(checkpointer.Save(dir_, "good", {}).ok());
    // A value goes bad on one rank only (memory corruption, a bad kernel).
    if (rank == 1) {
      torch::NoGradGuard no_grad;
      model->parameters()[0].view({-1})[0] = std::numeric_limits<double>::quiet_NaN();
    }
    absl::Status saved = checkpointer.Save(dir_, "bad", {});
    ASSERT_FALSE(saved.ok());
    if (rank == 1) {
      EXPECT_THAT(std::string(saved.message()), HasSubstr("not finite"));
      EXPECT_THAT(std::string(saved.message()), HasSubstr("parameter "));
    } else {
      EXPECT_THAT(std::string(saved.message()), HasSubstr("1 other rank(s)"));
    }
  });
  EXPECT_FALSE(posix_.Exists(TagDir(dir_, "bad")));
  EXPECT_FALSE(posix_.Exists(PartialDir(dir_, "bad")));
  auto latest = ReadLatestTag(posix_, dir_);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, "good");
}

// The acceptance test of the file-system seam (issue 14): a checkpoint save
// interrupted by the fault-injecting file system.
TEST_F(EngineCheckpointerTest, ASaveInterruptedByTheFaultInjectingFileSystemKeepsThePreviousCheckpoint) {
  FaultInjectingFileSystem faulty(posix_);
  // The faults, planned up front (rules count matching operations from now):
  // 1. the fsync of rank 1's file of global_step2 fails (EIO): nobody commits;
  faulty.FailNth(FsOp::kSync, 1, EIO, PartialDir(dir_, "global_step2") + "/rank_1.pt");
  // 2. the disk is full when rank 0 renames the partial folder into place;
  const std::string commit_target = TagDir(dir_, "global_step2");
  faulty.FailNth(FsOp::kRename, 1, ENOSPC, commit_target);
  // 3. rank 0 is held just before that rename (a crash there), then let go.
  std::shared_ptr<FsPause> commit = faulty.PauseBefore(FsOp::kRename, commit_target, 2);

  std::vector<torch::Tensor> saved_parameters;  // rank 0's, at global_step1
  std::thread ranks([&] {
    store_.RunRanks(2, [&](int rank, Communicator& comm) {
      Gpt model(TinyGpt(), 5);
      auto engine = Engine::Create(model.ptr(), Config(2, 1, 2), ParallelState::DataParallelOnly(&comm), torch::kCPU);
      ASSERT_TRUE(engine.ok()) << engine.status();
      EngineCheckpointer checkpointer(**engine, faulty);
      Train(**engine, model, 1, 2, 1, 2, rank);
      ASSERT_TRUE(checkpointer.Save(dir_, "global_step1", {{"consumed_samples", 4}}).ok());
      if (rank == 0) saved_parameters = Parameters(model);
      Train(**engine, model, 1, 2, 1, 2, rank, 1);

      absl::Status failed = checkpointer.Save(dir_, "global_step2", {{"consumed_samples", 8}});
      ASSERT_FALSE(failed.ok());
      EXPECT_THAT(std::string(failed.message()),
                  HasSubstr(rank == 1 ? "/rank_1.pt: Input/output error (EIO)" : "1 other rank(s) failed"));
      // Rank 0 removes the partial folder before it returns.
      if (rank == 0) EXPECT_FALSE(posix_.Exists(PartialDir(dir_, "global_step2")));

      failed = checkpointer.Save(dir_, "global_step2", {{"consumed_samples", 8}});
      ASSERT_FALSE(failed.ok());
      if (rank == 0) {
        EXPECT_EQ(failed.code(), absl::StatusCode::kResourceExhausted);
        EXPECT_THAT(std::string(failed.message()),
                    HasSubstr("partial to " + commit_target + ": No space left on device (ENOSPC)"));
      } else {
        EXPECT_THAT(std::string(failed.message()), HasSubstr("rank 0 failed to commit it"));
      }
      // Rank 0 removes the partial folder before it returns (rank 1 may
      // return first: it learns of the failed commit from the agreement).
      if (rank == 0) EXPECT_FALSE(posix_.Exists(PartialDir(dir_, "global_step2")));
      EXPECT_EQ(*ReadLatestTag(posix_, dir_), "global_step1");

      EXPECT_TRUE(checkpointer.Save(dir_, "global_step2", {{"consumed_samples", 8}}).ok());
    });
  });
  // What the next attempt would find while the save is held.
  auto check_while_held = [&] {
    EXPECT_EQ(*ReadLatestTag(posix_, dir_), "global_step1");
    EXPECT_FALSE(posix_.Exists(commit_target));
    Gpt fresh(TinyGpt(), 77);
    auto engine = Engine::Create(fresh.ptr(), Config(2, 1, 1), ParallelState::DataParallelOnly(nullptr), torch::kCPU);
    ASSERT_TRUE(engine.ok());
    auto client = EngineCheckpointer(**engine, posix_).Load(dir_);
    ASSERT_TRUE(client.ok()) << client.status();
    EXPECT_EQ((*client)["consumed_samples"], 4);
    EXPECT_EQ(MaxDifference(saved_parameters, Parameters(fresh)), 0.0);
  };
  const bool reached = commit->WaitUntilReached(absl::Seconds(120));
  if (reached) check_while_held();
  commit->Release();
  ranks.join();
  ASSERT_TRUE(reached) << "rank 0 never reached the commit rename";
  EXPECT_EQ(*ReadLatestTag(posix_, dir_), "global_step2");
  EXPECT_FALSE(posix_.Exists(PartialDir(dir_, "global_step2")));
}

// Two checkpoints of a two-rank job: global_step1 (4 samples) and
// global_step2 (8 samples).
void SaveTwoCheckpoints(testing::InProcessStore& store, const std::string& dir) {
  store.RunRanks(2, [&](int rank, Communicator& comm) {
    Gpt model(TinyGpt(), 5);
    auto engine = Engine::Create(model.ptr(), Config(2, 1, 2), ParallelState::DataParallelOnly(&comm), torch::kCPU);
    ASSERT_TRUE(engine.ok()) << engine.status();
    EngineCheckpointer checkpointer(**engine);
    Train(**engine, model, 1, 2, 1, 2, rank);
    ASSERT_TRUE(checkpointer.Save(dir, "global_step1", {{"consumed_samples", 4}}).ok());
    Train(**engine, model, 1, 2, 1, 2, rank, 1);
    ASSERT_TRUE(checkpointer.Save(dir, "global_step2", {{"consumed_samples", 8}}).ok());
  });
}

// Note [Resuming together]: rank 1 cannot read its share of the newest
// checkpoint (EIO on rank_1.pt, the file its share holds). Both ranks skip
// it and resume from the one before, each saying why; rank 0 never reads
// rank 1's file to verify it (every file is hashed by one rank).
TEST_F(EngineCheckpointerTest, TheRanksResumeFromOneCheckpointWhenOneCannotReadItsShare) {
  SaveTwoCheckpoints(store_, dir_);
  store_.RunRanks(2, [&](int rank, Communicator& comm) {
    FaultInjectingFileSystem faulty(posix_);
    if (rank == 1) faulty.FailNth(FsOp::kOpen, 1, EIO, TagDir(dir_, "global_step2") + "/rank_1.pt");
    Gpt model(TinyGpt(), 77);
    auto engine = Engine::Create(model.ptr(), Config(2, 1, 2), ParallelState::DataParallelOnly(&comm), torch::kCPU);
    ASSERT_TRUE(engine.ok()) << engine.status();
    EngineCheckpointer checkpointer(**engine, faulty);
    auto resumed = checkpointer.Resume(dir_, "");
    ASSERT_TRUE(resumed.ok()) << resumed.status();
    EXPECT_EQ(resumed->choice.tag, "global_step1") << "rank " << rank;
    EXPECT_EQ(resumed->choice.skipped, 1);
    EXPECT_EQ(resumed->client["consumed_samples"], 4);
    EXPECT_EQ((*engine)->global_steps(), 1);
    ASSERT_FALSE(resumed->choice.notes.empty());
    EXPECT_THAT(resumed->choice.notes.back(),
                HasSubstr(rank == 1 ? "rank_1.pt: Input/output error (EIO)" : "1 other rank(s) found a file"));
    if (rank == 0) {
      for (const FsCall& call : faulty.Log()) {
        EXPECT_FALSE(call.op == FsOp::kOpen && absl::StrContains(call.path, "global_step2/rank_1.pt")) << call.text;
      }
    }
  });
}

// A checkpoint.dir that is not one folder for every rank (a disk of each
// host's own): rank 1's lacks the newest checkpoint. Both ranks stop, saying
// so, before anything is loaded.
TEST_F(EngineCheckpointerTest, RanksThatFindDifferentCheckpointsStopTogether) {
  SaveTwoCheckpoints(store_, dir_);
  const std::string other = dir_ + "-other";
  ASSERT_EQ(std::system(absl::StrCat("cp -a '", dir_, "' '", other, "'").c_str()), 0);
  ASSERT_TRUE(posix_.RemoveTree(TagDir(other, "global_step2")).ok());
  store_.RunRanks(2, [&](int rank, Communicator& comm) {
    Gpt model(TinyGpt(), 77);
    auto engine = Engine::Create(model.ptr(), Config(2, 1, 2), ParallelState::DataParallelOnly(&comm), torch::kCPU);
    ASSERT_TRUE(engine.ok()) << engine.status();
    auto resumed = EngineCheckpointer(**engine, posix_).Resume(rank == 0 ? dir_ : other, "");
    ASSERT_FALSE(resumed.ok()) << "rank " << rank;
    EXPECT_THAT(std::string(resumed.status().message()), HasSubstr("the ranks find different committed checkpoints"));
    EXPECT_EQ((*engine)->global_steps(), 0);
  });
  ASSERT_TRUE(posix_.RemoveTree(other).ok());
}

// Note [Replacing a tag]: a save whose rotation fails is committed, and says so.
TEST_F(EngineCheckpointerTest, ASaveWhoseRotationFailsIsCommittedAndSaysSo) {
  FaultInjectingFileSystem faulty(posix_);
  faulty.FailNth(FsOp::kRemove, 1, EBUSY, TagDir(dir_, "global_step1"));
  Gpt model(TinyGpt(), 5);
  auto engine = Engine::Create(model.ptr(), Config(2, 1, 1), ParallelState::DataParallelOnly(nullptr), torch::kCPU);
  ASSERT_TRUE(engine.ok());
  EngineCheckpointer checkpointer(**engine, faulty);
  Train(**engine, model, 1, 2, 1, 1, 0);
  ASSERT_TRUE(checkpointer.Save(dir_, "global_step1", {}, /*keep=*/1).ok());
  EXPECT_TRUE(checkpointer.notes().empty());
  Train(**engine, model, 1, 2, 1, 1, 0, 1);
  absl::Status saved = checkpointer.Save(dir_, "global_step2", {}, /*keep=*/1);
  ASSERT_TRUE(saved.ok()) << saved;
  ASSERT_EQ(checkpointer.notes().size(), 1u);
  EXPECT_THAT(checkpointer.notes()[0], HasSubstr("global_step2 is committed, but removing older ones (keep 1) failed"));
  EXPECT_THAT(checkpointer.notes()[0], HasSubstr("(EBUSY)"));
  EXPECT_EQ(*ReadLatestTag(posix_, dir_), "global_step2");
}

}  // namespace
}  // namespace dslaunch::runtime
