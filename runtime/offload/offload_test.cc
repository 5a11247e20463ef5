#include <sys/statfs.h>
#include <unistd.h>

#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/fs/file_system.h"
#include "runtime/offload/swap_probe.h"
#include "runtime/offload/swapped_shard.h"
#include "runtime/testing/disk_test_folder.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;

// Swap files need a real file system (not tmpfs): a folder beside the test.
class SwappedShardTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    folder_ = std::make_unique<testing::DiskTestFolder>("offload-test");
    root_ = folder_->path();
  }
  void TearDown() override { folder_.reset(); }
  // Not std::filesystem: fs/file_system.h says why.
  static FileSystem& fs() { return FileSystem::Default(); }

  SwappedShardOptions Options(int64_t sub_group = 3000) {
    SwappedShardOptions options;
    options.nvme_path = root_;
    options.name = "rank0";
    options.sub_group_elements = sub_group;
    options.io.use_io_uring = GetParam();
    options.io.block_bytes = 8192;
    options.io.queue_depth = 4;
    options.io.thread_count = 2;
    return options;
  }
  std::string File(const std::string& stream, int group) {
    return root_ + "/dslaunch-swap/rank0/" + stream + "." + std::to_string(group) + ".swp";
  }

  std::unique_ptr<testing::DiskTestFolder> folder_;
  std::string root_;
};

TEST_P(SwappedShardTest, StreamsRoundTripBitForBit) {
  auto shard = SwappedShard::Create(Options(), {"master", "exp_avg"}, 10000);
  ASSERT_TRUE(shard.ok()) << shard.status();
  EXPECT_EQ((*shard)->groups(), 4);  // 3000, 3000, 3000, 1000
  EXPECT_THAT((*shard)->Describe(), HasSubstr(GetParam() ? "io_uring" : "pread/pwrite"));
  if (GetParam()) EXPECT_EQ((*shard)->io_fallback_reason(), "");
  torch::Tensor values = torch::randn({10000});
  ASSERT_TRUE((*shard)->WriteWhole(0, values).ok());
  auto master = (*shard)->ReadWhole(0);
  ASSERT_TRUE(master.ok()) << master.status();
  EXPECT_TRUE(torch::equal(*master, values));
  auto moments = (*shard)->ReadWhole(1);
  ASSERT_TRUE(moments.ok()) << moments.status();
  EXPECT_TRUE(torch::equal(*moments, torch::zeros({10000})));
  // Note [Registered buffers]: as root (CAP_IPC_LOCK: no locked-memory
  // limit) the ring takes the buffer sets, and the blocks go through them.
  if (GetParam() && ::geteuid() == 0) {
    EXPECT_THAT((*shard)->Describe(), HasSubstr("registered buffers"));
    EXPECT_GT((*shard)->registered_transfers(), 0);
  }
  if (!GetParam()) EXPECT_EQ((*shard)->registered_transfers(), 0);
  // Four files per stream, each a header plus its padded payload.
  EXPECT_EQ(fs().Stat(File("master", 3))->size, 4096 + 4096);
  EXPECT_EQ((*shard)->FileBytes(), 2 * (3 * (4096 + 12288) + (4096 + 4096)));
}

TEST_P(SwappedShardTest, ForEachGroupVisitsInOrderAndWritesBack) {
  auto shard = SwappedShard::Create(Options(), {"a", "b"}, 10000);
  ASSERT_TRUE(shard.ok()) << shard.status();
  torch::Tensor a = torch::randn({10000});
  ASSERT_TRUE((*shard)->WriteWhole(0, a).ok());
  // Twice over: the second pass reads what the first one wrote.
  torch::Tensor expected_a = a.clone(), expected_b = torch::zeros({10000});
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<int64_t> offsets;
    absl::Status visited = (*shard)->ForEachGroup([&](int64_t offset, std::vector<torch::Tensor>& values) {
      offsets.push_back(offset);
      EXPECT_TRUE(torch::equal(values[0], expected_a.narrow(0, offset, values[0].numel()))) << "pass " << pass;
      values[1].add_(values[0]);  // b += a
      values[0].mul_(2);          // a *= 2
      return absl::OkStatus();
    });
    ASSERT_TRUE(visited.ok()) << visited;
    EXPECT_THAT(offsets, ::testing::ElementsAre(0, 3000, 6000, 9000));
    expected_b += expected_a;
    expected_a *= 2;
    ASSERT_TRUE(torch::equal(*(*shard)->ReadWhole(0), expected_a)) << "pass " << pass;
    ASSERT_TRUE(torch::equal(*(*shard)->ReadWhole(1), expected_b)) << "pass " << pass;
  }
}

TEST_P(SwappedShardTest, ACorruptOrTruncatedFileIsAnErrorNamingIt) {
  auto shard = SwappedShard::Create(Options(), {"master"}, 10000);
  ASSERT_TRUE(shard.ok()) << shard.status();
  ASSERT_TRUE((*shard)->WriteWhole(0, torch::randn({10000})).ok());
  {
    // One flipped bit in group 1's payload.
    std::fstream file(File("master", 1), std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(4096 + 777);
    char c = 0;
    file.read(&c, 1);
    c ^= 0x10;
    file.seekp(4096 + 777);
    file.write(&c, 1);
  }
  auto flipped = (*shard)->ReadWhole(0);
  ASSERT_FALSE(flipped.ok());
  EXPECT_EQ(flipped.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(flipped.status().message()), HasSubstr(File("master", 1) + ": checksum mismatch"));
  absl::Status stepped = (*shard)->ForEachGroup([](int64_t, std::vector<torch::Tensor>&) { return absl::OkStatus(); });
  EXPECT_THAT(std::string(stepped.message()), HasSubstr("checksum mismatch"));

  auto fresh = SwappedShard::Create(Options(), {"master"}, 10000);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  ASSERT_EQ(::truncate(File("master", 2).c_str(), 4096 + 100), 0);
  auto truncated = (*fresh)->ReadWhole(0);
  ASSERT_FALSE(truncated.ok());
  EXPECT_THAT(std::string(truncated.status().message()), HasSubstr("swap file " + File("master", 2) + ": short read"));
}

TEST_P(SwappedShardTest, AStaleFolderIsRebuiltAndTheFolderGoesAtTheEnd) {
  const std::string folder = root_ + "/dslaunch-swap/rank0";
  ASSERT_TRUE(fs().CreateDirectories(folder).ok());
  std::ofstream(folder + "/master.0.swp") << "left by a crashed run";
  {
    auto shard = SwappedShard::Create(Options(), {"master"}, 100);
    ASSERT_TRUE(shard.ok()) << shard.status();
    auto read = (*shard)->ReadWhole(0);
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_TRUE(torch::equal(*read, torch::zeros({100})));
  }
  EXPECT_FALSE(fs().Exists(folder));
}

TEST_P(SwappedShardTest, BadFoldersAreRefusedByName) {
  SwappedShardOptions missing = Options();
  missing.nvme_path = root_ + "/nope";
  auto absent = SwappedShard::Create(missing, {"master"}, 100);
  ASSERT_FALSE(absent.ok());
  EXPECT_THAT(std::string(absent.status().message()), HasSubstr("offload_optimizer.nvme_path=" + root_ + "/nope is not a folder"));
  struct statfs info {};
  if (::statfs("/dev/shm", &info) == 0 && info.f_type == 0x01021994) {
    SwappedShardOptions shm = Options();
    shm.nvme_path = "/dev/shm";
    auto tmpfs = SwappedShard::Create(shm, {"master"}, 100);
    ASSERT_FALSE(tmpfs.ok());
    EXPECT_THAT(std::string(tmpfs.status().message()), HasSubstr("is on tmpfs (memory)"));
  }
  SwappedShardOptions huge = Options(int64_t{1} << 40);
  auto too_big = SwappedShard::Create(huge, {"master", "exp_avg", "exp_avg_sq"}, int64_t{1} << 44);
  ASSERT_FALSE(too_big.ok());
  EXPECT_THAT(std::string(too_big.status().message()), HasSubstr("free; the swap files need"));
  SwappedShardOptions odd_block = Options();
  odd_block.io.block_bytes = 1000;
  auto odd = SwappedShard::Create(odd_block, {"master"}, 100);
  ASSERT_FALSE(odd.ok());
  EXPECT_THAT(std::string(odd.status().message()), HasSubstr("aio.block_size=1000: must be a positive multiple of 4096"));
}

TEST_P(SwappedShardTest, TheProbeMeasuresTheSwapPathAndLeavesNothingBehind) {
  // Note [Swap path probe]: its own folder beside the shard's, gone after.
  auto speed = MeasureSwapSpeed(Options(), 1 << 20);
  ASSERT_TRUE(speed.ok()) << speed.status();
  EXPECT_GT(speed->write_gbps, 0);
  EXPECT_GT(speed->read_gbps, 0);
  EXPECT_GE(speed->bytes, 1 << 20);  // the payload and each file's header
  EXPECT_THAT(speed->io, HasSubstr(GetParam() ? "io_uring" : "pread/pwrite"));
  EXPECT_FALSE(fs().Exists(root_ + "/dslaunch-swap/rank0-probe"));
  // The cost of a step at that speed: both directions, each at its rate.
  SwapSpeed known{.write_gbps = 2, .read_gbps = 4, .bytes = 64 << 20, .io = "io_uring"};
  EXPECT_EQ(DescribeSwapCost(known, 8'000'000'000, 8'000'000'000),
            "probe of 64.0 MiB: write 2.00 GB/s, read 4.00 GB/s; a step reads and writes 8.00 GB of swap files: "
            "about 4.00 s per step from the drive (reads and writes overlapped)");
  // Parameters on NVMe: read at every gather during forward and backward,
  // then written while the step's own reads and writes run.
  EXPECT_EQ(DescribeSwapCost(known, 4'000'000'000, 6'000'000'000, 8'000'000'000),
            "probe of 64.0 MiB: write 2.00 GB/s, read 4.00 GB/s; a step reads 12.00 GB (8.00 GB of them during "
            "forward and backward) and writes 6.00 GB of swap files: about 5.00 s per step from the drive (reads and "
            "writes overlapped)");
  SwappedShardOptions missing = Options();
  missing.nvme_path = root_ + "/nope";
  auto refused = MeasureSwapSpeed(missing, 1 << 20);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr(root_ + "/nope is not a folder"));
}

INSTANTIATE_TEST_SUITE_P(IoUringAndPosix, SwappedShardTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? std::string("IoUring") : std::string("Pread");
                         });

}  // namespace
}  // namespace dslaunch::runtime
