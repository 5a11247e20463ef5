// Note [Pieces on NVMe]: each piece's bytes come back from its file
// as written, in any order and through either staging buffer; a file that
// changed after it was written is an error naming it; the folder is this
// object's, made fresh and removed with it; a folder that cannot hold the
// files is refused by the flag's name.
#include "runtime/offload/swapped_pieces.h"

#include <fcntl.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/fs/file_system.h"
#include "runtime/testing/disk_test_folder.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;
using ::testing::AllOf;

// The files need a real file system (not tmpfs): a folder beside the test.
class SwappedPiecesTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    folder_ = std::make_unique<testing::DiskTestFolder>("swapped-pieces-test");
    root_ = folder_->path();
  }
  void TearDown() override { folder_.reset(); }

  SwappedPiecesOptions Options() const {
    SwappedPiecesOptions options;
    options.nvme_path = root_;
    options.name = "model";
    options.io.use_io_uring = GetParam();
    options.io.block_bytes = 8192;
    options.io.queue_depth = 4;
    return options;
  }
  std::string Folder() const { return root_ + "/dslaunch-swap/model"; }
  // Distinct bytes for each piece (and not a multiple of 4 long, for the padding).
  static torch::Tensor PieceBytes(int64_t piece, int64_t length) {
    return (torch::arange(length, torch::kLong) * (piece + 3) + piece).remainder(251).to(torch::kUInt8);
  }

  std::unique_ptr<testing::DiskTestFolder> folder_;
  std::string root_;
};

TEST_P(SwappedPiecesTest, EachPieceReadsBackAsWrittenInAnyOrderThroughEitherBuffer) {
  const std::vector<int64_t> lengths = {10'001, 20'003, 10'001, 7};
  auto files = SwappedPieces::Create(Options(), lengths, /*pinned=*/false);
  ASSERT_TRUE(files.ok()) << files.status();
  for (int64_t piece = 0; piece < 4; ++piece) {
    ASSERT_TRUE((*files)->Write(piece, PieceBytes(piece, lengths[piece])).ok());
  }
  EXPECT_EQ((*files)->file_bytes(), 4096 * 4 + 12288 + 20480 + 12288 + 4096) << "a header, then 4096-byte pages";
  int64_t expected_read = 0;
  for (auto [piece, buffer] : {std::pair{1, 0}, std::pair{0, 1}, std::pair{3, 0}, std::pair{1, 1}, std::pair{2, 0}}) {
    SCOPED_TRACE(::testing::Message() << "piece " << piece << " into buffer " << buffer);
    (*files)->StartRead(piece, buffer);
    EXPECT_EQ((*files)->pending(buffer), piece);
    auto bytes = (*files)->FinishRead(buffer);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    EXPECT_EQ((*files)->pending(buffer), -1);
    EXPECT_TRUE(torch::equal(*bytes, PieceBytes(piece, lengths[piece])));
    expected_read += lengths[piece];
  }
  EXPECT_EQ((*files)->read_bytes(), expected_read);
  // Two reads in flight at once, one per buffer.
  (*files)->StartRead(2, 0);
  (*files)->StartRead(1, 1);
  auto second = (*files)->FinishRead(1);
  auto first = (*files)->FinishRead(0);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_TRUE(torch::equal(*first, PieceBytes(2, lengths[2])));
  EXPECT_TRUE(torch::equal(*second, PieceBytes(1, lengths[1])));
  EXPECT_FALSE((*files)->FinishRead(0).ok()) << "no read pending";
  EXPECT_THAT((*files)->Describe(), HasSubstr("4 files under " + Folder()));
}

// Zero-3's parameters on NVMe rewrite every piece after each step through
// both staging buffers, one filling while the other's write runs.
TEST_P(SwappedPiecesTest, StreamedWritesThroughBothBuffersReadBackAndAreCounted) {
  const std::vector<int64_t> lengths = {9'999, 4'097, 12'288};
  auto files = SwappedPieces::Create(Options(), lengths, /*pinned=*/false);
  ASSERT_TRUE(files.ok()) << files.status();
  for (int round = 0; round < 2; ++round) {
    for (int64_t piece = 0; piece < 3; ++piece) {
      const int buffer = static_cast<int>(piece % 2);
      if (piece >= 2) ASSERT_TRUE((*files)->FinishWrite(buffer).ok());
      (*files)->Staging(buffer, piece).copy_(PieceBytes(piece + 10 * round, lengths[piece]));
      (*files)->StartWrite(piece, buffer);
      EXPECT_EQ((*files)->pending(buffer), -1) << "a write is not a read";
    }
    ASSERT_TRUE((*files)->FinishWrite(0).ok());
    ASSERT_TRUE((*files)->FinishWrite(1).ok());
    EXPECT_FALSE((*files)->FinishWrite(1).ok()) << "nothing pending";
    for (int64_t piece = 0; piece < 3; ++piece) {
      (*files)->StartRead(piece, 1);
      auto bytes = (*files)->FinishRead(1);
      ASSERT_TRUE(bytes.ok()) << bytes.status();
      EXPECT_TRUE(torch::equal(*bytes, PieceBytes(piece + 10 * round, lengths[piece]))) << "round " << round;
    }
  }
  EXPECT_EQ((*files)->written_bytes(), 2 * (9'999 + 4'097 + 12'288));
  // Note [Registered buffers]: both staging buffers, as root (no locked-memory limit).
  if (GetParam() && ::geteuid() == 0) {
    EXPECT_THAT((*files)->Describe(), HasSubstr("2 registered buffers"));
    EXPECT_GT((*files)->registered_transfers(), 0);
  }
  if (!GetParam()) EXPECT_EQ((*files)->registered_transfers(), 0);
  EXPECT_EQ((*files)->read_bytes(), 2 * (9'999 + 4'097 + 12'288));
}

// offload_param.max_in_cpu: the pieces that fit, in order, stay in host
// memory (no file, no drive traffic) and read and write like the others.
TEST_P(SwappedPiecesTest, PiecesThatFitTheResidentBytesStayInHostMemory) {
  const std::vector<int64_t> lengths = {10'001, 20'003, 10'001, 7};
  SwappedPiecesOptions options = Options();
  options.resident_bytes = 20'002;  // pieces 0 and 2; 1 is too large for what is left, 3 finds none left
  auto files = SwappedPieces::Create(options, lengths, /*pinned=*/false);
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_TRUE((*files)->resident(0));
  EXPECT_FALSE((*files)->resident(1));
  EXPECT_TRUE((*files)->resident(2));
  EXPECT_FALSE((*files)->resident(3));
  EXPECT_EQ((*files)->resident_bytes(), 20'002);
  EXPECT_EQ((*files)->file_bytes(), 4096 + 20480 + 4096 + 4096);
  auto names = FileSystem::Default().ListDirectory(Folder());
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_THAT(*names, ::testing::UnorderedElementsAre("piece.1.swp", "piece.3.swp"));
  for (int64_t piece = 0; piece < 4; ++piece) {
    ASSERT_TRUE((*files)->Write(piece, PieceBytes(piece, lengths[piece])).ok());
  }
  EXPECT_EQ((*files)->written_bytes(), 20'003 + 7) << "drive traffic only";
  for (int64_t piece = 0; piece < 4; ++piece) {
    (*files)->StartRead(piece, piece % 2);
    EXPECT_EQ((*files)->pending(piece % 2), piece);
    auto bytes = (*files)->FinishRead(piece % 2);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    EXPECT_TRUE(torch::equal(*bytes, PieceBytes(piece, lengths[piece]))) << "piece " << piece;
  }
  EXPECT_EQ((*files)->read_bytes(), 20'003 + 7);
  // A streamed write into a piece in memory is done when StartWrite returns.
  (*files)->Staging(1, 2).copy_(PieceBytes(9, lengths[2]));
  (*files)->StartWrite(2, 1);
  ASSERT_TRUE((*files)->FinishWrite(1).ok());
  EXPECT_FALSE((*files)->FinishWrite(1).ok()) << "nothing pending";
  (*files)->StartRead(2, 0);
  auto rewritten = (*files)->FinishRead(0);
  ASSERT_TRUE(rewritten.ok()) << rewritten.status();
  EXPECT_TRUE(torch::equal(*rewritten, PieceBytes(9, lengths[2])));
  EXPECT_THAT((*files)->Describe(), AllOf(HasSubstr("2 files under " + Folder()),
                                          HasSubstr("; 2 pieces (0.00 GB) in host memory")));
  options.resident_bytes = -1;
  EXPECT_FALSE(SwappedPieces::Create(options, lengths, /*pinned=*/false).ok());
}

TEST_P(SwappedPiecesTest, AFileChangedAfterItWasWrittenIsAnErrorNamingIt) {
  auto files = SwappedPieces::Create(Options(), {5000, 5000}, /*pinned=*/false);
  ASSERT_TRUE(files.ok()) << files.status();
  for (int64_t piece = 0; piece < 2; ++piece) ASSERT_TRUE((*files)->Write(piece, PieceBytes(piece, 5000)).ok());
  const std::string file = Folder() + "/piece.1.swp";
  const int fd = ::open(file.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  const unsigned char flipped = 0xff;
  ASSERT_EQ(::pwrite(fd, &flipped, 1, 4096 + 1234), 1);
  ::close(fd);
  (*files)->StartRead(1, 0);
  auto bytes = (*files)->FinishRead(0);
  ASSERT_FALSE(bytes.ok());
  EXPECT_EQ(bytes.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(bytes.status().message()), HasSubstr(file + ": checksum mismatch"));
  // The other piece still reads.
  (*files)->StartRead(0, 1);
  EXPECT_TRUE((*files)->FinishRead(1).ok());
}

TEST_P(SwappedPiecesTest, TheFolderIsMadeFreshAndRemovedWithTheFiles) {
  ASSERT_TRUE(FileSystem::Default().CreateDirectories(Folder()).ok());
  const std::string stale = Folder() + "/piece.7.swp";
  ASSERT_TRUE(WriteFileAtomically(FileSystem::Default(), stale, "a crashed run's piece").ok());
  {
    auto files = SwappedPieces::Create(Options(), {100}, /*pinned=*/false);
    ASSERT_TRUE(files.ok()) << files.status();
    EXPECT_FALSE(FileSystem::Default().Exists(stale));
    EXPECT_TRUE(FileSystem::Default().Exists(Folder() + "/piece.0.swp"));
  }
  EXPECT_FALSE(FileSystem::Default().Exists(Folder()));
}

TEST_P(SwappedPiecesTest, AFolderThatCannotHoldTheFilesIsRefusedByTheFlagsName) {
  SwappedPiecesOptions missing = Options();
  missing.nvme_path = root_ + "/nope";
  auto absent = SwappedPieces::Create(missing, {100}, /*pinned=*/false);
  ASSERT_FALSE(absent.ok());
  EXPECT_THAT(std::string(absent.status().message()), HasSubstr("--nvme_path=" + root_ + "/nope is not a folder"));
  auto huge = SwappedPieces::Create(Options(), {int64_t{1} << 60}, /*pinned=*/false);
  ASSERT_FALSE(huge.ok());
  EXPECT_THAT(std::string(huge.status().message()), HasSubstr("--nvme_path"));
  struct statfs info {};
  if (::statfs("/dev/shm", &info) == 0 && info.f_type == 0x01021994) {
    SwappedPiecesOptions shm = Options();
    shm.nvme_path = "/dev/shm";
    auto tmpfs = SwappedPieces::Create(shm, {100}, /*pinned=*/false);
    ASSERT_FALSE(tmpfs.ok());
    EXPECT_THAT(std::string(tmpfs.status().message()), HasSubstr("is on tmpfs (memory)"));
  }
  EXPECT_FALSE(SwappedPieces::Create(Options(), {}, /*pinned=*/false).ok());
}

// A run killed before it removed its files leaves a folder named by its
// process id: the next run removes it, and leaves a live process's alone.
TEST_P(SwappedPiecesTest, TheFoldersOfEndedProcessesAreRemovedAndLiveOnesKept) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);  // reaped: its id names no process now
  FileSystem& fs = FileSystem::Default();
  const std::string swap = root_ + "/dslaunch-swap/";
  const std::string ended = swap + "inference-layers-" + std::to_string(child) + "-rank0";
  const std::string live = swap + "inference-layers-" + std::to_string(::getpid()) + "-rank1";
  const std::string other = swap + "model";
  for (const std::string& folder : {ended, live, other}) {
    ASSERT_TRUE(fs.CreateDirectories(folder).ok());
    ASSERT_TRUE(WriteFileAtomically(fs, folder + "/piece.0.swp", "bytes").ok());
  }
  // Two ranks sweeping at once: one removes the folder, neither fails.
  absl::StatusOr<int> sweeps[2];
  std::thread other_rank([&] { sweeps[1] = RemoveSwapFoldersOfEndedProcesses(root_, "inference-layers-"); });
  sweeps[0] = RemoveSwapFoldersOfEndedProcesses(root_, "inference-layers-");
  other_rank.join();
  ASSERT_TRUE(sweeps[0].ok()) << sweeps[0].status();
  ASSERT_TRUE(sweeps[1].ok()) << sweeps[1].status();
  EXPECT_EQ(*sweeps[0] + *sweeps[1], 1);
  EXPECT_FALSE(fs.Exists(ended));
  EXPECT_TRUE(fs.Exists(live + "/piece.0.swp"));
  EXPECT_TRUE(fs.Exists(other + "/piece.0.swp"));
  auto none = RemoveSwapFoldersOfEndedProcesses(root_ + "/nothing-here", "inference-layers-");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, 0);
}

INSTANTIATE_TEST_SUITE_P(IoUringAndThreads, SwappedPiecesTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "io_uring" : "pread_pwrite";
                         });

}  // namespace
}  // namespace dslaunch::runtime
