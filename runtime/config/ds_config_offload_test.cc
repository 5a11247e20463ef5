// The offload blocks of a ds_config (zero_optimization.offload_optimizer,
// offload_param, aio): the delayed update, and ZeRO-Infinity's NVMe paths,
// stages and knobs, each problem named at its key.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/config/config_test_util.h"

namespace dslaunch::runtime {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST_F(DsConfigTest, DelayUpdateIsReadAndNeedsCpuOffload) {
  std::vector<std::string> lines;
  path_ = Write("delay.json", R"({"train_batch_size": 8,
      "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "delay_update": true}}})");
  auto delayed = LoadDsConfig(path_, {}, WorldShape{1}, &lines);
  ASSERT_TRUE(delayed.ok()) << delayed.status();
  EXPECT_TRUE(delayed->zero_optimization.offload_optimizer.delay_update);
  EXPECT_THAT(lines, ElementsAre());
  auto without = Load("ds.json", R"({"train_batch_size": 8,
      "zero_optimization": {"stage": 2, "offload_optimizer": {"delay_update": true}}})");
  EXPECT_THAT(ProblemLines(without),
              ElementsAre(HasSubstr("zero_optimization.offload_optimizer.delay_update: delay_update overlaps the "
                                    "host optimizer step with the next forward and backward: it needs "
                                    "offload_optimizer.device=cpu (it is none)")));
  path_ = Write("warm.json", R"({"train_batch_size": 8, "zero_optimization": {"stage": 2,
      "offload_optimizer": {"device": "cpu", "delay_update": true, "delay_update_warmup_steps": 40}}})");
  auto warm = LoadDsConfig(path_, {}, WorldShape{1}, &lines);
  ASSERT_TRUE(warm.ok()) << warm.status();
  EXPECT_EQ(warm->zero_optimization.offload_optimizer.delay_update_warmup_steps, 40);
  auto warmup_alone = Load("ds.json", R"({"train_batch_size": 8, "zero_optimization": {"stage": 2,
      "offload_optimizer": {"device": "cpu", "delay_update_warmup_steps": 40}}})");
  EXPECT_THAT(ProblemLines(warmup_alone),
              ElementsAre(HasSubstr("zero_optimization.offload_optimizer.delay_update_warmup_steps: "
                                    "delay_update_warmup_steps counts the plain steps before the delayed update "
                                    "begins: it has no effect without delay_update: true")));
}

TEST_F(DsConfigTest, NvmeOffloadOfTheOptimizerNeedsItsPathAndReadsAioFromEitherPlace) {
  auto missing = Load("ds.json", R"({"train_batch_size": 8,
      "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme"}}})");
  EXPECT_THAT(ProblemLines(missing),
              ElementsAre(HasSubstr("zero_optimization.offload_optimizer.device: offload_optimizer.device=nvme "
                                    "needs offload_optimizer.nvme_path")));
  // DeepSpeed's top-level aio block.
  std::vector<std::string> lines;
  path_ = Write("top.json", R"({"train_batch_size": 8, "aio": {"block_size": 262144, "queue_depth": 16},
      "zero_optimization": {"stage": 3, "sub_group_size": 100000000,
                            "offload_optimizer": {"device": "nvme", "nvme_path": "/local_nvme"}}})");
  auto top = LoadDsConfig(path_, {}, WorldShape{1}, &lines);
  ASSERT_TRUE(top.ok()) << top.status();
  EXPECT_THAT(lines, ElementsAre());  // supported now
  EXPECT_EQ(top->aio.block_size, 262144);
  EXPECT_EQ(top->aio.queue_depth, 16);
  EXPECT_EQ(top->aio_section, "aio");
  // The seeds' block inside zero_optimization.
  path_ = Write("seed.json", R"({"train_batch_size": 8,
      "zero_optimization": {"stage": 3, "aio": {"block_size": 524288, "intra_op_parallelism": 4},
                            "offload_optimizer": {"device": "nvme", "nvme_path": "/local_nvme"}}})");
  auto seed = LoadDsConfig(path_, {}, WorldShape{1}, &lines);
  ASSERT_TRUE(seed.ok()) << seed.status();
  EXPECT_EQ(seed->aio.block_size, 524288);
  EXPECT_EQ(seed->aio.thread_count, 4);
  EXPECT_EQ(seed->aio_section, "zero_optimization.aio");
}

// ZeRO-Infinity's parameter offload (Note [Parameters on NVMe]): the seeds'
// config loads with nothing listed as unsupported; its path is required, its
// stage checked, and the delayed update refused beside it.
TEST_F(DsConfigTest, NvmeOffloadOfTheParametersNeedsItsPathStageThreeAndNoDelayedUpdate) {
  std::vector<std::string> lines, warned;
  path_ = Write("infinity.json", R"({"train_batch_size": 8,
      "zero_optimization": {"stage": 3,
          "offload_optimizer": {"device": "nvme", "nvme_path": "/local_nvme", "pin_memory": true, "buffer_count": 4},
          "offload_param": {"device": "nvme", "nvme_path": "/local_nvme", "pin_memory": true, "buffer_count": 5,
                            "buffer_size": 1e8, "max_in_cpu": 1e9}}})");
  auto infinity = LoadDsConfig(path_, {}, WorldShape{1}, &lines, &warned);
  ASSERT_TRUE(infinity.ok()) << infinity.status();
  EXPECT_THAT(lines, ElementsAre());
  EXPECT_THAT(warned, ElementsAre(HasSubstr("offload_optimizer.pin_memory=true has no effect here"),
                                  HasSubstr("offload_param.pin_memory=true has no effect here")));
  EXPECT_EQ(infinity->zero_optimization.offload_param.nvme_path, "/local_nvme");
  // Honoured (DeepSpeed ignores it, #4221); unset, every piece on the drive.
  EXPECT_EQ(infinity->zero_optimization.offload_param.max_in_cpu, 1'000'000'000);
  auto unset = Load("unset.json", R"({"train_batch_size": 8,
      "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/local_nvme"}}})");
  ASSERT_TRUE(unset.ok()) << unset.status();
  EXPECT_EQ(unset->zero_optimization.offload_param.max_in_cpu, 0);
  EXPECT_THAT(ProblemLines(Load("negative.json", R"({"train_batch_size": 8, "zero_optimization": {"stage": 3,
      "offload_param": {"device": "nvme", "nvme_path": "/n", "max_in_cpu": -1}}})")),
              ElementsAre(HasSubstr("zero_optimization.offload_param.max_in_cpu")));
  auto missing = Load("ds.json", R"({"train_batch_size": 8,
      "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}})");
  EXPECT_THAT(ProblemLines(missing),
              ElementsAre(HasSubstr("zero_optimization.offload_param.device: offload_param.device=nvme needs "
                                    "offload_param.nvme_path")));
  auto stage2 = Load("ds.json", R"({"train_batch_size": 8,
      "zero_optimization": {"stage": 2, "offload_param": {"device": "nvme", "nvme_path": "/n"}}})");
  EXPECT_THAT(ProblemLines(stage2), ElementsAre(HasSubstr("offload_param.device=nvme offloads partitioned "
                                                          "parameters: it needs zero_optimization.stage 3")));
  auto delayed = Load("ds.json", R"({"train_batch_size": 8,
      "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/n"},
                            "offload_optimizer": {"device": "cpu", "delay_update": true}}})");
  EXPECT_THAT(ProblemLines(delayed),
              ElementsAre(HasSubstr("zero_optimization.offload_optimizer.delay_update: delay_update runs the host "
                                    "step while the next forward reads the parameters")));
}

}  // namespace
}  // namespace dslaunch::runtime
