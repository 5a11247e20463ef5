// The commit record and verification (Note [Checkpoint commit record]), the
// choice of the checkpoint to resume from (Note [Resuming from a verified
// checkpoint]) and rotation, on files alone: each corruption an operator
// has lost a run to is named and skipped, never loaded, never rotated over.
#include "runtime/checkpoint/checkpoint_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <functional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/fs/fault_injecting_file_system.h"
#include "runtime/fs/posix_file_system.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;

class CheckpointFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/ckpt-files-XXXXXX";
    dir_ = ::mkdtemp(pattern);
  }
  void TearDown() override { ASSERT_TRUE(fs_.RemoveTree(dir_).ok()); }

  // What the engine does for `ranks` ranks, with made-up rank files.
  void Save(const std::string& tag, int64_t step, int ranks = 2, int keep = 0) {
    ASSERT_TRUE(PreparePartial(fs_, dir_, tag).ok());
    for (int r = 0; r < ranks; ++r) {
      auto writer = ChecksummedFileWriter::Create(fs_, RankFile(PartialDir(dir_, tag), r));
      ASSERT_TRUE(writer.ok()) << writer.status();
      const std::string content = absl::StrCat("rank ", r, " of ", tag, std::string(1000, 'x'));
      ASSERT_TRUE((*writer)->Write(content.data(), content.size()).ok());
      auto digest = (*writer)->Finish();
      ASSERT_TRUE(digest.ok()) << digest.status();
      ASSERT_TRUE(RecordRankFile(fs_, PartialDir(dir_, tag), r, *digest).ok());
    }
    absl::Status committed = CommitCheckpoint(fs_, dir_, tag, step, ranks);
    ASSERT_TRUE(committed.ok()) << committed;
    absl::Status rotated = RotateCheckpoints(fs_, dir_, tag, step, keep);
    ASSERT_TRUE(rotated.ok()) << rotated;
  }
  void WriteFile(const std::string& path, const std::string& content) {
    std::ofstream(path, std::ios::trunc) << content;
  }
  void FlipByte(const std::string& path, off_t offset) {
    const int fd = ::open(path.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    char c;
    ASSERT_EQ(::pread(fd, &c, 1, offset), 1);
    c ^= 0x5a;
    ASSERT_EQ(::pwrite(fd, &c, 1, offset), 1);
    ::close(fd);
  }
  std::string Path(const std::string& relative) { return absl::StrCat(dir_, "/", relative); }

  PosixFileSystem fs_;
  std::string dir_;
};

TEST_F(CheckpointFilesTest, ACommittedCheckpointVerifiesAndItsRecordListsEveryFile) {
  Save("global_step5", 5);
  auto manifest = VerifyCheckpoint(fs_, dir_, "global_step5");
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_EQ(manifest->step, 5);
  EXPECT_EQ(manifest->ranks, 2);
  ASSERT_EQ(manifest->files.size(), 2u);
  EXPECT_EQ(manifest->files[1].name, "rank_1.pt");
  EXPECT_FALSE(fs_.Exists(Path("global_step5/rank_0.pt.digest")));
  auto latest = ReadLatestTag(fs_, dir_);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(*latest, "global_step5");
}

TEST_F(CheckpointFilesTest, AFlippedTruncatedOrDeletedFileFailsVerificationByName) {
  Save("global_step5", 5);
  FlipByte(Path("global_step5/rank_0.pt"), 500);
  auto flipped = VerifyCheckpoint(fs_, dir_, "global_step5");
  ASSERT_FALSE(flipped.ok());
  EXPECT_EQ(flipped.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(flipped.status().message()), HasSubstr("rank_0.pt does not match its checksum"));

  Save("global_step10", 10);
  ASSERT_EQ(::truncate(Path("global_step10/rank_1.pt").c_str(), 100), 0);
  auto truncated = VerifyCheckpoint(fs_, dir_, "global_step10");
  ASSERT_FALSE(truncated.ok());
  EXPECT_THAT(std::string(truncated.status().message()), HasSubstr("rank_1.pt has 100 bytes"));

  Save("global_step15", 15);
  ASSERT_EQ(::unlink(Path("global_step15/rank_1.pt").c_str()), 0);
  auto deleted = VerifyCheckpoint(fs_, dir_, "global_step15");
  ASSERT_FALSE(deleted.ok());
  EXPECT_THAT(std::string(deleted.status().message()), HasSubstr("rank_1.pt is missing"));
}

TEST_F(CheckpointFilesTest, ACommitWithoutEveryRanksFileIsRefusedAndLeavesNothing) {
  Save("global_step5", 5);
  ASSERT_TRUE(PreparePartial(fs_, dir_, "global_step10").ok());
  // Only rank 0 recorded its file.
  auto writer = ChecksummedFileWriter::Create(fs_, RankFile(PartialDir(dir_, "global_step10"), 0));
  ASSERT_TRUE(writer.ok());
  auto digest = (*writer)->Finish();
  ASSERT_TRUE(digest.ok());
  ASSERT_TRUE(RecordRankFile(fs_, PartialDir(dir_, "global_step10"), 0, *digest).ok());
  absl::Status committed = CommitCheckpoint(fs_, dir_, "global_step10", 10, 2);
  ASSERT_FALSE(committed.ok());
  EXPECT_THAT(std::string(committed.message()), HasSubstr("rank 1 recorded no file"));
  EXPECT_FALSE(fs_.Exists(PartialDir(dir_, "global_step10")));
  EXPECT_FALSE(fs_.Exists(Path("global_step10")));
  EXPECT_EQ(*ReadLatestTag(fs_, dir_), "global_step5");
}

TEST_F(CheckpointFilesTest, EveryUnreadableLatestIsNamedAndTheNewestVerifiedCheckpointIsChosen) {
  struct Case {
    std::string name;
    std::function<void()> spoil;
    std::string message;
    std::string chosen = "global_step15";
  };
  std::vector<Case> cases = {
      {"latest names a missing tag", [&] { WriteFile(Path("latest"), "global_step99\n"); }, "not a folder", "global_step20"},
      {"latest holds garbage", [&] { WriteFile(Path("latest"), "\x01\x02garbage/..\n"); }, "does not name a checkpoint",
       "global_step20"},
      {"latest is empty", [&] { WriteFile(Path("latest"), ""); }, "is empty", "global_step20"},
      {"latest escapes the folder", [&] { WriteFile(Path("latest"), "../other/global_step30\n"); },
       "does not name a checkpoint", "global_step20"},
      {"latest is deleted", [&] { ::unlink(Path("latest").c_str()); }, "no 'latest'", "global_step20"},
      {"COMPLETE is deleted", [&] { ::unlink(Path("global_step20/COMPLETE").c_str()); }, "no commit record"},
      {"the tag folder is a file", [&] {
         ASSERT_TRUE(fs_.RemoveTree(Path("global_step20")).ok());
         WriteFile(Path("global_step20"), "x");
       }, "not a folder"},
      {"the newest rank file is flipped", [&] { FlipByte(Path("global_step20/rank_1.pt"), 10); }, "does not match its checksum"},
  };
  for (const Case& c : cases) {
    ASSERT_TRUE(fs_.RemoveTree(dir_).ok());
    ASSERT_TRUE(fs_.CreateDirectories(dir_).ok());
    Save("global_step15", 15);
    Save("global_step20", 20);
    c.spoil();
    ResumeChoice choice = ChooseResumeCheckpoint(fs_, dir_, "");
    EXPECT_EQ(choice.tag, c.chosen) << c.name;
    if (!c.message.empty()) {
      ASSERT_FALSE(choice.notes.empty()) << c.name;
      EXPECT_THAT(choice.notes[0], HasSubstr(c.message)) << c.name;
    }
    // A fresh save after it rotates nothing newer away.
    Save("global_step16", 16, 2, /*keep=*/1);
    EXPECT_TRUE(fs_.Exists(Path("global_step16"))) << c.name;
    EXPECT_FALSE(fs_.Exists(Path("global_step15"))) << c.name << ": rotated (older)";
    if (c.name == "the newest rank file is flipped" || c.chosen == "global_step20") {
      EXPECT_TRUE(fs_.Exists(Path("global_step20"))) << c.name << ": a later step is never rotated away";
    }
  }
}

TEST_F(CheckpointFilesTest, WhenNothingVerifiesTrainingStartsFreshAndRotationKeepsTheSkippedOnes) {
  Save("global_step15", 15);
  Save("global_step20", 20);
  FlipByte(Path("global_step15/rank_0.pt"), 3);
  FlipByte(Path("global_step20/rank_0.pt"), 3);
  ResumeChoice choice = ChooseResumeCheckpoint(fs_, dir_, "");
  EXPECT_EQ(choice.tag, "");
  EXPECT_EQ(choice.skipped, 2);
  // The fresh run's checkpoints (earlier steps) never delete them.
  Save("global_step5", 5, 2, /*keep=*/2);
  Save("global_step10", 10, 2, /*keep=*/2);
  Save("global_step12", 12, 2, /*keep=*/2);
  EXPECT_TRUE(fs_.Exists(Path("global_step15")));
  EXPECT_TRUE(fs_.Exists(Path("global_step20")));
  EXPECT_FALSE(fs_.Exists(Path("global_step5")));
  EXPECT_TRUE(fs_.Exists(Path("global_step10")));
}

TEST_F(CheckpointFilesTest, TheControllersTagIsPreferredAndANewerOneIsNotUsedInstead) {
  Save("global_step15", 15);
  Save("global_step20", 20);
  Save("global_step25", 25);
  EXPECT_EQ(ChooseResumeCheckpoint(fs_, dir_, "global_step20").tag, "global_step20");
  FlipByte(Path("global_step20/rank_1.pt"), 0);
  ResumeChoice choice = ChooseResumeCheckpoint(fs_, dir_, "global_step20");
  EXPECT_EQ(choice.tag, "global_step15");
  EXPECT_EQ(choice.skipped, 1);
}

// Note [Replacing a tag]: rotation removes the commit record first, so a
// deletion cut short (a kill while nftw walks the folder) leaves no record
// without its files: the controller's tag, half deleted, no longer hides the
// newer checkpoint just committed.
TEST_F(CheckpointFilesTest, ARotationCutShortNeverHidesTheCheckpointJustCommitted) {
  Save("global_step10", 10, 2, /*keep=*/1);
  Save("global_step20", 20, 2, /*keep=*/1);  // the controller records this one
  FaultInjectingFileSystem faulty(fs_);
  std::shared_ptr<FsPause> held = faulty.PauseBefore(FsOp::kRemove, TagDir(dir_, "global_step20"), 2);
  std::thread saver([&] {
    ASSERT_TRUE(PreparePartial(faulty, dir_, "global_step30").ok());
    for (int r = 0; r < 2; ++r) {
      auto writer = ChecksummedFileWriter::Create(faulty, RankFile(PartialDir(dir_, "global_step30"), r));
      ASSERT_TRUE(writer.ok()) << writer.status();
      ASSERT_TRUE((*writer)->Write("x", 1).ok());
      auto digest = (*writer)->Finish();
      ASSERT_TRUE(digest.ok() && RecordRankFile(faulty, PartialDir(dir_, "global_step30"), r, *digest).ok());
    }
    ASSERT_TRUE(CommitCheckpoint(faulty, dir_, "global_step30", 30, 2).ok());
    EXPECT_TRUE(RotateCheckpoints(faulty, dir_, "global_step30", 30, /*keep=*/1).ok());
  });
  const bool reached = held->WaitUntilReached(absl::Seconds(60));
  if (reached) {
    // Held before the second removal in global_step20 (the first is its
    // record); a kill halfway through it leaves, say, one rank file gone.
    EXPECT_FALSE(fs_.Exists(Path("global_step20/COMPLETE")));
    EXPECT_TRUE(fs_.RemoveFile(Path("global_step20/rank_0.pt")).ok());
    ResumeChoice choice = ChooseResumeCheckpoint(fs_, dir_, "global_step20");
    EXPECT_EQ(choice.tag, "global_step30");
  }
  held->Release();
  saver.join();
  ASSERT_TRUE(reached) << "the rotation never removed global_step20";
  EXPECT_FALSE(fs_.Exists(Path("global_step20")));
}

// Note [Replacing a tag]: only a folder a save set aside (.<tag>.old with
// its commit record) is repaired; a user's own hidden entries are left.
TEST_F(CheckpointFilesTest, RepairLeavesWhatNoSaveSetAside) {
  Save("global_step10", 10);
  ASSERT_TRUE(fs_.CreateDirectories(Path(".old")).ok());
  WriteFile(Path(".notes.old"), "mine");
  ASSERT_TRUE(fs_.CreateDirectories(Path(".backup.old")).ok());
  WriteFile(Path(".backup.old/rank_0.pt"), "mine");
  ASSERT_TRUE(fs_.CreateDirectories(Path(".global_step10.old")).ok());  // no record: not a save's
  auto repaired = RecoverInterruptedReplace(fs_, dir_);
  ASSERT_TRUE(repaired.ok()) << repaired.status();
  EXPECT_TRUE(repaired->empty());
  for (const char* kept : {".old", ".notes.old", ".backup.old/rank_0.pt", ".global_step10.old"}) {
    EXPECT_TRUE(fs_.Exists(Path(kept))) << kept;
  }
  EXPECT_FALSE(fs_.Exists(Path("backup"))) << "a user's folder was taken for a checkpoint";
  EXPECT_EQ(ChooseResumeCheckpoint(fs_, dir_, "").tag, "global_step10");
}

TEST_F(CheckpointFilesTest, ARotationThatFailsLeavesTheNewCheckpointCommitted) {
  Save("global_step10", 10);
  FaultInjectingFileSystem faulty(fs_);
  faulty.FailNth(FsOp::kRemove, 1, EBUSY, TagDir(dir_, "global_step10"));
  Save("global_step20", 20);
  absl::Status rotated = RotateCheckpoints(faulty, dir_, "global_step20", 20, /*keep=*/1);
  EXPECT_THAT(std::string(rotated.message()), HasSubstr("global_step10/COMPLETE"));
  EXPECT_EQ(*ReadLatestTag(fs_, dir_), "global_step20");
  EXPECT_TRUE(VerifyCheckpoint(fs_, dir_, "global_step20").ok());
  EXPECT_TRUE(VerifyCheckpoint(fs_, dir_, "global_step10").ok()) << "its record is still there: still committed";
}

TEST_F(CheckpointFilesTest, TagsAreOneFolderInsideTheCheckpointDir) {
  for (const char* bad : {"", "../x", "a/b", ".hidden", "..", "tab\there", "latest", "latest.tmp"}) {
    EXPECT_FALSE(CheckTag(bad).ok()) << bad;
    EXPECT_FALSE(PreparePartial(fs_, dir_, bad).ok()) << bad;
  }
  EXPECT_TRUE(CheckTag("global_step20").ok());
}

TEST_F(CheckpointFilesTest, AWriteThatFailsNamesTheErrnoAndThePath) {
  auto writer = ChecksummedFileWriter::Create(fs_, "/dev/full");
  ASSERT_TRUE(writer.ok()) << writer.status();
  std::string data(4096, 'x');
  absl::Status written = (*writer)->Write(data.data(), data.size());
  if (written.ok()) written = (*writer)->Finish().status();  // the write was buffered
  ASSERT_FALSE(written.ok());
  EXPECT_EQ(written.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(written.message()), HasSubstr("write /dev/full: No space left on device (ENOSPC)"));
  // A `latest` that cannot be written leaves the old one.
  Save("global_step5", 5);
  ASSERT_EQ(::symlink("/dev/full", Path("latest.tmp").c_str()), 0);
  // The temporary file is a device that is full: the rename never happens.
  absl::Status atomically = WriteFileAtomically(fs_, Path("latest"), "global_step10\n");
  EXPECT_FALSE(atomically.ok());
  EXPECT_EQ(*ReadLatestTag(fs_, dir_), "global_step5");
}

TEST_F(CheckpointFilesTest, ALegacyRecordLoadsUnverifiedAndSaysSo) {
  Save("global_step5", 5);
  WriteFile(Path("global_step5/COMPLETE"), "global_step5\n");
  ResumeChoice choice = ChooseResumeCheckpoint(fs_, dir_, "");
  EXPECT_EQ(choice.tag, "global_step5");
  EXPECT_TRUE(choice.legacy);
  ASSERT_FALSE(choice.notes.empty());
  EXPECT_THAT(choice.notes[0], HasSubstr("unverified"));
}

TEST(CheckpointManifestTest, ARecordCutShortOrMalformedIsRefused) {
  CheckpointManifest manifest;
  manifest.tag = "t";
  manifest.step = 3;
  manifest.ranks = 1;
  manifest.files.push_back({"rank_0.pt", {10, 0xabcdef}});
  const std::string text = manifest.Serialize();
  auto parsed = CheckpointManifest::Parse(text, "C");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->files[0].digest, manifest.files[0].digest);
  EXPECT_FALSE(CheckpointManifest::Parse(text.substr(0, text.size() - 4), "C").ok());
  EXPECT_FALSE(CheckpointManifest::Parse(text + "more\n", "C").ok());
  EXPECT_THAT(std::string(CheckpointManifest::Parse("dslaunch-checkpoint 1\nfile x 1 zz\nend\n", "C").status().message()),
              HasSubstr("C:2: bad file entry"));
}

// A damaged or forged record cannot send VerifyCheckpoint out of the folder,
// nor list a file twice or with a digest that is not 16 hex digits.
TEST(CheckpointManifestTest, OnlyPlainFileNamesOfTheFolderAreListed) {
  const std::string head = "dslaunch-checkpoint 1\ntag t\nstep 1\nranks 1\n";
  const std::string rank0 = "file rank_0.pt 10 00000000000000ff\n";
  for (const std::string& name : {"../../etc/passwd", "sub/rank_1.pt", "..", ".", ""}) {
    SCOPED_TRACE(name);
    auto parsed = CheckpointManifest::Parse(head + rank0 + "file " + name + " 1 0123456789abcdef\nend\n", "C");
    ASSERT_FALSE(parsed.ok());
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("C:6: not a file name of the checkpoint folder"));
  }
  EXPECT_THAT(std::string(CheckpointManifest::Parse(head + rank0 + rank0 + "end\n", "C").status().message()),
              HasSubstr("C:6: the file is listed twice"));
  EXPECT_THAT(
      std::string(CheckpointManifest::Parse(head + "file rank_0.pt 10 0x000000000000ff\nend\n", "C").status().message()),
      HasSubstr("C:5: bad file entry"));
  EXPECT_TRUE(CheckpointManifest::Parse(head + rank0 + "end\n", "C").ok());
  // A one-line record of blanks is no tag (the fuzzer's first finding here).
  EXPECT_FALSE(CheckpointManifest::Parse("\v\v\v\v", "C").ok());
  EXPECT_FALSE(CheckpointManifest::Parse("a\tb\n", "C").ok());
  EXPECT_EQ(CheckpointManifest::Parse("global_step5\n", "C")->tag, "global_step5");
}

}  // namespace
}  // namespace dslaunch::runtime
