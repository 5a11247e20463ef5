#include "launcher/dry_run.h"

#include <cstdio>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dslaunch {
namespace {

using ::testing::HasSubstr;

std::string DryRun(int slots, int tensor_parallel = 1) {
  JobSpec spec;
  spec.tensor_parallel_size = tensor_parallel;
  spec.job_id = "job-dry";
  std::vector<int> all;
  for (int slot = 0; slot < slots; ++slot) all.push_back(slot);
  spec.plan = BuildLaunchPlan({HostSlots{"big-host", all}});
  spec.program = {"/opt/train"};
  spec.environment.master_addr = "10.0.0.1";
  spec.environment.job_id = spec.job_id;
  char* buffer = nullptr;
  size_t size = 0;
  std::FILE* out = ::open_memstream(&buffer, &size);
  PrintDryRun(spec, LauncherKind::kLocal, out);
  std::fclose(out);
  std::string text(buffer, size);
  std::free(buffer);
  return text;
}

TEST(DryRun, PrintsEachHostsEnvironmentOnceAndEachRanksOwnVariables) {
  const std::string text = DryRun(2);
  EXPECT_THAT(text, HasSubstr("dslaunch dry run: job job-dry, 2 rank(s) on 1 node(s), launcher local\n"));
  EXPECT_THAT(text, HasSubstr("node 0: host big-host, 2 rank(s); the environment they share"));
  EXPECT_THAT(text, HasSubstr("\n  CUDA_VISIBLE_DEVICES=0,1\n"));
  EXPECT_THAT(text, HasSubstr("\n  MASTER_PORT=(a free port picked at launch by the agent of big-host)\n"));
  EXPECT_THAT(text, HasSubstr("\nrank 1: host big-host, local rank 1 of 2, device 1\n"
                              "  argv: /opt/train --local_rank=1\n"
                              "  LOCAL_RANK=1\n  RANK=1\n  ROLE_RANK=1\n"));
  size_t devices = 0;
  for (size_t at = text.find("CUDA_VISIBLE_DEVICES"); at != std::string::npos;
       at = text.find("CUDA_VISIBLE_DEVICES", at + 1)) {
    ++devices;
  }
  EXPECT_EQ(devices, 1u);
}

// Before: each rank printed the whole environment, CUDA_VISIBLE_DEVICES
// listing every slot (slots=100000: 59 GB of output).
TEST(DryRun, OutputGrowsLinearlyWithTheRanks) {
  const size_t bytes_1024 = DryRun(1024).size();
  const size_t bytes_4096 = DryRun(4096).size();
  EXPECT_LT(bytes_1024, 200u * 1024);
  EXPECT_LT(bytes_4096, bytes_1024 * 42 / 10);
}

// With tensor parallelism each rank's place in DeepSpeed's (pipe, data,
// model) grid: the tensor groups are adjacent ranks.
TEST(DryRun, ShowsEachRanksGridCoordinatesWithTensorParallelism) {
  const std::string text = DryRun(4, /*tensor_parallel=*/2);
  EXPECT_THAT(text, HasSubstr("rank 0: host big-host, local rank 0 of 4, device 0, (pipe, data, model) = (0, 0, 0)\n"));
  EXPECT_THAT(text, HasSubstr("rank 1: host big-host, local rank 1 of 4, device 1, (pipe, data, model) = (0, 0, 1)\n"));
  EXPECT_THAT(text, HasSubstr("rank 2: host big-host, local rank 2 of 4, device 2, (pipe, data, model) = (0, 1, 0)\n"));
  EXPECT_THAT(DryRun(2), ::testing::Not(HasSubstr("(pipe, data, model)")));
}

}  // namespace
}  // namespace dslaunch
