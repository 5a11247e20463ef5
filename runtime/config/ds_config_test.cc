// LoadDsConfig on a bare ds_config: strictness (Note [Config strictness]),
// DeepSpeed's defaults, overrides, JSON and YAML, not-yet-supported lines.

#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/config/config_loader.h"
#include "runtime/config/ds_config_schema.h"
#include "runtime/config/config_test_util.h"

namespace dslaunch::runtime {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::SizeIs;
using ::testing::UnorderedElementsAre;

TEST_F(DsConfigTest, DefaultsAreDeepSpeeds) {
  auto config = Load("ds.json", R"({"train_batch_size": 8})");
  ASSERT_TRUE(config.ok()) << config.status();
  const DsConfig& c = *config;
  EXPECT_EQ(c.train_batch_size, 8);
  EXPECT_EQ(c.train_micro_batch_size_per_gpu, 8);
  EXPECT_EQ(c.gradient_accumulation_steps, 1);
  EXPECT_EQ(c.gradient_clipping, 0.0);
  EXPECT_EQ(c.steps_per_print, 10);
  EXPECT_FALSE(c.wall_clock_breakdown);
  EXPECT_FALSE(c.memory_breakdown);
  EXPECT_EQ(c.communication_data_type, "");
  EXPECT_FALSE(c.prescale_gradients);
  EXPECT_EQ(c.gradient_predivide_factor, 1.0);
  EXPECT_EQ(c.moe_expert_parallel_size, 1);
  // fp16 / bf16 (deepspeed/runtime/precision_config.py)
  EXPECT_FALSE(c.fp16.enabled);
  EXPECT_FALSE(c.fp16.auto_cast);
  EXPECT_EQ(c.fp16.loss_scale, 0);
  EXPECT_EQ(c.fp16.initial_scale_power, 16);
  EXPECT_EQ(c.fp16.loss_scale_window, 1000);
  EXPECT_EQ(c.fp16.hysteresis, 2);
  EXPECT_FALSE(c.fp16.consecutive_hysteresis);
  EXPECT_EQ(c.fp16.min_loss_scale, 1);
  EXPECT_FALSE(c.bf16.enabled);
  // No optimizer section: FusedAdam's defaults stand, marked absent.
  EXPECT_FALSE(c.optimizer.present);
  EXPECT_EQ(c.optimizer.lr, 1e-3);
  EXPECT_EQ(c.optimizer.betas[0], 0.9);
  EXPECT_EQ(c.optimizer.betas[1], 0.999);
  EXPECT_EQ(c.optimizer.eps, 1e-8);
  EXPECT_EQ(c.optimizer.weight_decay, 0.0);
  EXPECT_TRUE(c.optimizer.adam_w_mode);
  // Scheduler (deepspeed/runtime/lr_schedules.py)
  EXPECT_EQ(c.scheduler.type, "");
  EXPECT_EQ(c.scheduler.lr_range_test_min_lr, 1e-3);
  EXPECT_EQ(c.scheduler.lr_range_test_step_size, 2000);
  EXPECT_EQ(c.scheduler.lr_range_test_step_rate, 1.0);
  EXPECT_FALSE(c.scheduler.lr_range_test_staircase);
  EXPECT_EQ(c.scheduler.decay_lr_rate, 0);
  EXPECT_EQ(c.scheduler.cycle_first_step_size, 2000);
  EXPECT_EQ(c.scheduler.cycle_second_step_size, -1);
  EXPECT_EQ(c.scheduler.cycle_first_stair_count, 0);
  EXPECT_EQ(c.scheduler.cycle_second_stair_count, -1);
  EXPECT_EQ(c.scheduler.decay_step_size, 0);
  EXPECT_TRUE(c.scheduler.cycle_momentum);
  EXPECT_EQ(c.scheduler.cycle_min_mom, 0.8);
  EXPECT_EQ(c.scheduler.cycle_max_mom, 0.9);
  EXPECT_EQ(c.scheduler.decay_mom_rate, 0);
  EXPECT_EQ(c.scheduler.warmup_min_lr, 0);
  EXPECT_EQ(c.scheduler.warmup_max_lr, 1e-3);
  EXPECT_EQ(c.scheduler.warmup_num_steps, 1000);
  EXPECT_EQ(c.scheduler.warmup_type, "log");
  EXPECT_EQ(c.scheduler.warmup_min_ratio, 0);
  EXPECT_EQ(c.scheduler.cos_min_ratio, 1e-4);
  // ZeRO (deepspeed/runtime/zero/config.py, offload_config.py)
  const ZeroConfig& z = c.zero_optimization;
  EXPECT_EQ(z.stage, 0);
  EXPECT_TRUE(z.reduce_scatter);
  EXPECT_EQ(z.reduce_bucket_size, 500000000);
  EXPECT_FALSE(z.overlap_comm);  // stage < 3
  EXPECT_EQ(z.sub_group_size, 1000000000);
  EXPECT_EQ(z.stage3_prefetch_bucket_size, 50000000);
  EXPECT_EQ(z.stage3_param_persistence_threshold, 100000);
  EXPECT_EQ(z.stage3_max_live_parameters, 1000000000);
  EXPECT_FALSE(z.stage3_gather_16bit_weights_on_model_save);
  EXPECT_EQ(z.offload_optimizer.device, "none");
  EXPECT_EQ(z.offload_optimizer.ratio, 1.0);
  EXPECT_EQ(z.offload_param.device, "none");
  // Activation checkpointing, aio, pipeline, tensor parallel, MoE
  EXPECT_FALSE(c.activation_checkpointing.partition_activations);
  EXPECT_FALSE(c.activation_checkpointing.cpu_checkpointing);
  EXPECT_EQ(c.activation_checkpointing.number_checkpoints, -1);
  EXPECT_EQ(c.aio.block_size, 1048576);
  EXPECT_EQ(c.aio.queue_depth, 8);
  EXPECT_EQ(c.aio.thread_count, 1);
  EXPECT_EQ(c.pipeline.stages, 1);
  EXPECT_EQ(c.pipeline.activation_checkpoint_interval, 0);
  EXPECT_EQ(c.tensor_parallel.tp_size, 1);
  EXPECT_FALSE(c.moe.enabled);
  EXPECT_EQ(c.moe.ep_size, 1);
  // Monitors and the flops profiler (deepspeed/monitor/config.py, profiling/config.py)
  for (const MonitorConfig* m : {&c.tensorboard, &c.csv_monitor, &c.wandb}) {
    EXPECT_FALSE(m->enabled);
    EXPECT_EQ(m->output_path, "");
    EXPECT_EQ(m->job_name, "DeepSpeedJobName");
  }
  EXPECT_FALSE(c.flops_profiler.enabled);
  EXPECT_EQ(c.flops_profiler.profile_step, 1);
  EXPECT_EQ(c.flops_profiler.module_depth, -1);
  EXPECT_EQ(c.flops_profiler.top_modules, 1);
  EXPECT_TRUE(c.flops_profiler.detailed);
  EXPECT_EQ(c.flops_profiler.output_file, "");
}

constexpr char kJson[] = R"({
  "train_batch_size": 32,
  "gradient_accumulation_steps": 2,
  "gradient_clipping": 1.0,
  "optimizer": {"type": "Adam", "params": {"lr": 3e-4, "betas": [0.8, 0.95], "eps": 1e-6,
                                           "weight_decay": 0.1, "adam_w_mode": false}},
  "scheduler": {"type": "WarmupCosineLR",
                "params": {"total_num_steps": 1000, "warmup_num_steps": 50, "cos_min_ratio": 0.1}},
  "bf16": {"enabled": true},
  "zero_optimization": {"stage": 0, "reduce_bucket_size": 5e8, "allgather_bucket_size": 2e8},
  "communication_data_type": null
})";

constexpr char kYaml[] = R"(
train_batch_size: 32
gradient_accumulation_steps: 2
gradient_clipping: 1.0
optimizer:
  type: Adam
  params: {lr: 3.0e-4, betas: [0.8, 0.95], eps: 1.0e-6, weight_decay: 0.1, adam_w_mode: false}
scheduler:
  type: WarmupCosineLR
  params:
    total_num_steps: 1000
    warmup_num_steps: 50
    cos_min_ratio: 0.1
bf16:
  enabled: true
zero_optimization:
  stage: 0
  reduce_bucket_size: 500000000
  allgather_bucket_size: 200000000
communication_data_type: ~
)";

TEST_F(DsConfigTest, JsonAndYamlReadTheSame) {
  auto json = Load("ds.json", kJson, {}, 4);
  auto yaml = Load("ds.yaml", kYaml, {}, 4);
  ASSERT_TRUE(json.ok()) << json.status();
  ASSERT_TRUE(yaml.ok()) << yaml.status();
  EXPECT_EQ(DescribeDsConfig(*json), DescribeDsConfig(*yaml));
  const DsConfig& c = *json;
  EXPECT_EQ(c.train_micro_batch_size_per_gpu, 4);  // 32 / (2 * 4)
  EXPECT_TRUE(c.optimizer.present);
  EXPECT_EQ(c.optimizer.type, "Adam");
  EXPECT_FALSE(c.optimizer.adam_w_mode);
  EXPECT_EQ(c.optimizer.lr, 3e-4);
  EXPECT_EQ(c.optimizer.betas[0], 0.8);
  EXPECT_EQ(c.optimizer.betas[1], 0.95);
  EXPECT_EQ(c.optimizer.eps, 1e-6);
  EXPECT_EQ(c.optimizer.weight_decay, 0.1);
  EXPECT_EQ(c.scheduler.type, "WarmupCosineLR");
  EXPECT_EQ(c.scheduler.total_num_steps, 1000);
  EXPECT_EQ(c.scheduler.warmup_num_steps, 50);
  EXPECT_EQ(c.scheduler.cos_min_ratio, 0.1);
  EXPECT_TRUE(c.bf16.enabled);
  EXPECT_EQ(c.zero_optimization.reduce_bucket_size, 500000000);
  EXPECT_EQ(c.communication_data_type, "");
}

TEST_F(DsConfigTest, UnknownTopLevelKeyNamesFileLineAndNearestKey) {
  auto config = Load("ds.json", "{\n  \"train_batch_size\": 8,\n  \"zero_optimizaton\": {}\n}\n");
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ProblemLines(config),
              ElementsAre(path_ + ":3: unknown key 'zero_optimizaton' (did you mean "
                                  "'zero_optimization'?)"));
}

TEST_F(DsConfigTest, UnknownNestedKeySuggestsAmongItsSiblings) {
  auto config = Load("ds.yaml", "train_batch_size: 8\nzero_optimization:\n  stgae: 2\n");
  EXPECT_THAT(ProblemLines(config),
              ElementsAre(path_ + ":3: unknown key 'zero_optimization.stgae' (did you mean "
                                  "'zero_optimization.stage'?)"));
}

TEST_F(DsConfigTest, UnknownKeyWithoutACloseMatchListsTheValidOnes) {
  auto config = Load("ds.yaml", "train_batch_size: 8\nbf16:\n  enable_everything: true\n");
  EXPECT_THAT(ProblemLines(config),
              ElementsAre(AllOf(HasSubstr(path_ + ":3: unknown key 'bf16.enable_everything'"),
                                HasSubstr("valid keys of bf16: enabled, immediate_grad_update"))));
}

TEST_F(DsConfigTest, WrongTypeNamesKeyAndValue) {
  auto config =
      Load("ds.json", R"({"train_batch_size": 8, "zero_optimization": {"stage": "two"}})");
  EXPECT_THAT(ProblemLines(config),
              ElementsAre(path_ + ":1: zero_optimization.stage: expected an integer, got 'two'"));
  config = Load("ds.json", R"({"train_batch_size": 8, "fp16": {"enabled": "yes please"}})");
  EXPECT_THAT(ProblemLines(config),
              ElementsAre(HasSubstr("fp16.enabled: expected true or false, got 'yes please'")));
  config = Load("ds.json", R"({"train_batch_size": 8, "gradient_clipping": [1]})");
  EXPECT_THAT(ProblemLines(config),
              ElementsAre(HasSubstr("gradient_clipping: expected a number, got a list")));
  config = Load("ds.json", R"({"train_batch_size": 8, "fp16": true})");
  EXPECT_THAT(ProblemLines(config), ElementsAre(HasSubstr("fp16: expected a mapping, got 'true'")));
  config = Load("ds.json", R"({"train_batch_size": 1.5})");
  EXPECT_THAT(ProblemLines(config),
              ElementsAre(HasSubstr("train_batch_size: expected an integer, got '1.5'")));
}

TEST_F(DsConfigTest, ImpossibleValuesNameTheirRule) {
  auto config = Load("ds.json", R"({"train_batch_size": 8, "zero_optimization": {"stage": 4}})");
  EXPECT_THAT(ProblemLines(config),
              ElementsAre(path_ + ":1: zero_optimization.stage: 4 is not one of 0, 1, 2, 3"));
  config = Load("ds.json", R"({"train_batch_size": 8, "fp16": {"initial_scale_power": -1}})");
  EXPECT_THAT(ProblemLines(config),
              ElementsAre(path_ + ":1: fp16.initial_scale_power: -1 must be >= 0"));
  config = Load("ds.json", R"({"train_batch_size": 8, "fp16": {"min_loss_scale": 0}})");
  EXPECT_THAT(ProblemLines(config), ElementsAre(HasSubstr("fp16.min_loss_scale: 0 must be > 0")));
  config = Load("ds.json", R"({"train_batch_size": 8,
      "zero_optimization": {"offload_optimizer": {"device": "gpu"}}})");
  EXPECT_THAT(ProblemLines(config),
              ElementsAre(HasSubstr("zero_optimization.offload_optimizer.device: 'gpu' is not one "
                                    "of none, cpu, nvme")));
  config = Load("ds.json", R"({"train_batch_size": 0})");
  EXPECT_THAT(ProblemLines(config), ElementsAre(HasSubstr("train_batch_size: 0 must be >= 1")));
  config = Load("ds.json", R"({"train_batch_size": 8, "optimizer": {"type": "AdamW",
      "params": {"betas": [0.9, 1.5]}}})");
  EXPECT_THAT(ProblemLines(config),
              ElementsAre(HasSubstr("optimizer.params.betas: 1.5 must be < 1")));
}

TEST_F(DsConfigTest, Fp16AndBf16TogetherIsAnError) {
  auto config =
      Load("ds.yaml", "train_batch_size: 8\nfp16:\n  enabled: true\nbf16:\n  enabled: true\n");
  EXPECT_THAT(ProblemLines(config),
              ElementsAre(AllOf(HasSubstr(path_ + ":5: bf16.enabled"),
                                HasSubstr("fp16 and bf16 are both enabled"))));
}

TEST_F(DsConfigTest, LegacyBfloat16NameEnablesBf16) {
  auto config = Load("ds.json", R"({"train_batch_size": 8, "bfloat16": {"enabled": true}})");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->bf16.enabled);
  config = Load("ds.json", R"({"train_batch_size": 8, "bf16": {"enabled": true},
                                "bfloat16": {"enabled": false}})");
  EXPECT_THAT(ProblemLines(config),
              ElementsAre(HasSubstr("bfloat16.enabled: sets the same value as 'bf16.enabled'")));
}

TEST_F(DsConfigTest, ReportsEveryProblemAtOnce) {
  auto config = Load("ds.yaml", R"(train_batch_size: 8
zero_optimizaton: {}
zero_optimization:
  stage: two
fp16:
  enabled: true
  initial_scale_power: -1
bf16:
  enabled: true
scheduler:
  type: WarmupLR
  params:
    cycle_min_lr: 0.1
optimizer:
  params:
    max_grad_norm: 1.0
)");
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      ProblemLines(config),
      ElementsAre(
          path_ + ":2: unknown key 'zero_optimizaton' (did you mean 'zero_optimization'?)",
          path_ + ":4: zero_optimization.stage: expected an integer, got 'two'",
          path_ + ":7: fp16.initial_scale_power: -1 must be >= 0",
          path_ + ":13: scheduler.params.cycle_min_lr: is not a parameter of WarmupLR (it is one "
                  "of OneCycle)",
          HasSubstr(path_ + ":16: optimizer.params.max_grad_norm: is not an optimizer parameter"),
          HasSubstr(path_ + ":14: optimizer.type: required"),
          HasSubstr(path_ + ":9: bf16.enabled: fp16 and bf16 are both enabled")));
}

TEST_F(DsConfigTest, DuplicateKeysAreRefused) {
  auto config = Load("ds.json", "{\"train_batch_size\": 8,\n \"train_batch_size\": 16}");
  EXPECT_THAT(ProblemLines(config),
              ElementsAre(path_ + ":2: train_batch_size: duplicate key (first at line 1)"));
}

TEST_F(DsConfigTest, SchedulerTypeAndRequiredParameters) {
  auto config =
      Load("ds.json", R"({"train_batch_size": 8, "scheduler": {"type": "WarmupDecayLr"}})");
  EXPECT_THAT(ProblemLines(config),
              ElementsAre(HasSubstr("scheduler.type: 'WarmupDecayLr' is not one of LRRangeTest, "
                                    "OneCycle, WarmupLR, WarmupDecayLR, WarmupCosineLR (did you "
                                    "mean 'WarmupDecayLR'?)")));
  config = Load("ds.json", R"({"train_batch_size": 8, "scheduler": {"type": "WarmupDecayLR",
                                "params": {"warmup_num_steps": 10}}})");
  EXPECT_THAT(ProblemLines(config),
              ElementsAre(HasSubstr("scheduler.params.total_num_steps: required")));
  config = Load("ds.json", R"({"train_batch_size": 8, "scheduler": {"type": "OneCycle",
                                "params": {"cycle_min_lr": 0.001, "cycle_max_lr": 0.01,
                                           "cycle_first_step_size": 100}}})");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->scheduler.cycle_max_lr, 0.01);
  EXPECT_EQ(config->scheduler.cycle_first_step_size, 100);
  config = Load("ds.json", R"({"train_batch_size": 8, "scheduler": {"params": {}}})");
  EXPECT_THAT(ProblemLines(config), ElementsAre(HasSubstr("scheduler.type: required")));
}

TEST_F(DsConfigTest, OptimizerTypes) {
  auto config = Load("ds.json", R"({"train_batch_size": 8, "optimizer": {"type": "adamw"}})");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->optimizer.type, "AdamW");  // DeepSpeed matches names ignoring case
  // Optimizers not built here take any parameters, as DeepSpeed passes them on.
  std::vector<std::string> not_yet_supported;
  path_ = Write("lamb.json", R"({"train_batch_size": 8, "optimizer": {"type": "Lamb",
      "params": {"lr": 0.01, "max_coeff": 0.3, "min_coeff": 0.01}}})");
  config = LoadDsConfig(path_, {}, WorldShape{1}, &not_yet_supported);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->optimizer.lr, 0.01);
  EXPECT_THAT(not_yet_supported, ElementsAre(HasSubstr("optimizer.type=Lamb")));
  config = Load("ds.json", R"({"train_batch_size": 8, "optimizer": {"type": "AdamWW"}})");
  EXPECT_THAT(ProblemLines(config),
              ElementsAre(HasSubstr("optimizer.type: 'AdamWW' is not one of Adam, AdamW")));
  config = Load("ds.json", R"({"train_batch_size": 8, "optimizer": {"type": "Adam",
                                "params": {"learning_rate": 0.1}}})");
  EXPECT_THAT(ProblemLines(config),
              ElementsAre(HasSubstr("unknown key 'optimizer.params.learning_rate'")));
}

TEST_F(DsConfigTest, PipelineSchedulesAndExplicitPartitions) {
  auto config = Load("ds.json", R"({"train_batch_size": 8, "gradient_accumulation_steps": 4,
      "pipeline": {"stages": 2, "schedule": "interleaved", "virtual_stages": 2,
                   "layers_per_stage": [1, 2, 2, 1]}})",
                     {}, 2);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->pipeline.stages, 2);
  EXPECT_EQ(config->pipeline.schedule, "interleaved");
  EXPECT_EQ(config->pipeline.virtual_stages, 2);
  EXPECT_EQ(config->pipeline.layers_per_stage, (std::vector<int>{1, 2, 2, 1}));
  config = Load("ds.json", R"({"train_batch_size": 8,
      "pipeline": {"schedule": "zb", "layers_per_stage": [1, "two", 0]}})",
                {}, 2);
  EXPECT_THAT(ProblemLines(config), ElementsAre(HasSubstr("pipeline.schedule"), HasSubstr("pipeline.layers_per_stage")));
  std::vector<std::string> lines;
  path_ = Write("ds.yaml", R"(train_batch_size: 8
pipeline: {stages: 2, activation_checkpoint_interval: 1, pipe_partitioned: true}
)");
  ASSERT_TRUE(LoadDsConfig(path_, {}, WorldShape{2}, &lines).ok());
  // The interval is built (PipelineEngine::StageForward): only the partitioned transfers are not.
  EXPECT_THAT(lines, ElementsAre(HasSubstr("pipeline.pipe_partitioned=true:")));
}

TEST_F(DsConfigTest, AliasesAndDeepSpeedSpellings) {
  auto config = Load("ds.json", R"({"train_batch_size": 8,
      "zero_optimization": {"stage": 3, "prefetch_bucket_size": 1e6, "max_live_parameters": 7},
      "aio": {"intra_op_parallelism": 4},
      "tensor_parallel": {"autotp_size": 2},
      "pipeline": {"stages": "auto", "partition": "uniform", "pipe_partitioned": false}})",
                     {}, 2);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->zero_optimization.stage3_prefetch_bucket_size, 1000000);
  EXPECT_EQ(config->zero_optimization.stage3_max_live_parameters, 7);
  EXPECT_TRUE(config->zero_optimization.overlap_comm);  // DeepSpeed's default for stage 3
  EXPECT_EQ(config->aio.thread_count, 4);
  EXPECT_EQ(config->tensor_parallel.tp_size, 2);
  EXPECT_EQ(config->pipeline.stages, 1);
  EXPECT_EQ(config->pipeline.partition_method, "uniform");
  EXPECT_EQ(config->pipeline.pipe_partitioned, "false");
  EXPECT_EQ(config->train_micro_batch_size_per_gpu, 8);  // dp = 2 / tp 2 = 1
  config = Load("ds.json", R"({"train_batch_size": 8,
      "tensor_parallel": {"autotp_size": 2, "tp_size": 4}})",
                {}, 8);
  EXPECT_THAT(ProblemLines(config),
              ElementsAre(HasSubstr("tensor_parallel.autotp_size: 2 disagrees with "
                                    "tensor_parallel.tp_size (4)")));
}

TEST_F(DsConfigTest, BareConfigResolvesOnlyWhatNeedsNoJobFile) {
  auto config = Load("ds.json", R"({"train_batch_size": 16,
      "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
      "pipeline": {"stages": "auto"},
      "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": "auto"}}})",
                     {}, 2);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->train_micro_batch_size_per_gpu, 8);
  EXPECT_EQ(config->gradient_accumulation_steps, 1);
  EXPECT_EQ(config->scheduler.warmup_min_lr, 0);

  config = Load("ds.yaml", R"(train_batch_size: 16
gradient_clipping: auto
optimizer:
  type: AdamW
  params:
    lr: auto
zero_optimization:
  reduce_bucket_size: auto
bf16:
  enabled: auto
)");
  EXPECT_THAT(ProblemLines(config),
              UnorderedElementsAre(
                  path_ + ":2: gradient_clipping: \"auto\" needs a job file (it takes "
                          "train.grad_clip)",
                  path_ + ":6: optimizer.params.lr: \"auto\" needs a job file (it takes train.lr)",
                  HasSubstr(path_ + ":8: zero_optimization.reduce_bucket_size: \"auto\" needs a "
                                    "job file (it takes model.width"),
                  HasSubstr(path_ + ":10: bf16.enabled: \"auto\" needs a job file")));
}

TEST_F(DsConfigTest, EmptyFileHasNoBatchSize) {
  auto config = Load("ds.json", "");
  EXPECT_THAT(ProblemLines(config),
              ElementsAre(AllOf(HasSubstr("no batch size"), HasSubstr("train_batch_size"),
                                HasSubstr("train_micro_batch_size_per_gpu"),
                                HasSubstr("gradient_accumulation_steps"))));
}

TEST_F(DsConfigTest, FileProblemsAreNotFoundOrSyntax) {
  auto missing = LoadDsConfig(dir_ + "/absent.json", {}, WorldShape{1});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("absent.json: No such file or directory"));
  auto broken = Load("ds.json", "{\n  \"train_batch_size\": 8,\n  \"fp16\": {\"enabled\": true\n}");
  EXPECT_EQ(broken.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(broken.status().message(), HasSubstr(path_ + ":4:"));
  EXPECT_THAT(broken.status().message(), HasSubstr("not valid YAML or JSON"));
  auto list = Load("ds.json", "[1, 2]");
  EXPECT_THAT(ProblemLines(list),
              ElementsAre(HasSubstr("expected a mapping of keys at the top level, got a list")));
}

TEST_F(DsConfigTest, OverridesApplyBeforeValidation) {
  // Fixes a bad value ...
  auto config = Load("ds.json", R"({"train_batch_size": 8, "zero_optimization": {"stage": "two"}})",
                     {{"zero_optimization.stage", "0"}});
  ASSERT_TRUE(config.ok()) << config.status();
  // ... sets new ones, creating sections, lists included ...
  config = Load("ds.json", R"({"train_batch_size": 8})",
                {{"gradient_clipping", "1.0"},
                 {"optimizer.type", "Adam"},
                 {"optimizer.params.betas", "[0.8, 0.9]"}});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->gradient_clipping, 1.0);
  EXPECT_TRUE(config->optimizer.present);
  EXPECT_EQ(config->optimizer.betas[1], 0.9);
  // ... and is named when it breaks things.
  config = Load("ds.json", R"({"train_batch_size": 8})", {{"zero_optimization.stage", "7"}});
  EXPECT_THAT(ProblemLines(config),
              ElementsAre("--override 'zero_optimization.stage=7': zero_optimization.stage: 7 is "
                          "not one of 0, 1, 2, 3"));
  config = Load("ds.json", R"({"train_batch_size": 8})", {{"zero_optimizaton.stage", "1"}});
  EXPECT_THAT(ProblemLines(config),
              ElementsAre("--override 'zero_optimizaton.stage=1': unknown key 'zero_optimizaton' "
                          "(did you mean 'zero_optimization'?)"));
  config = Load("ds.json", R"({"train_batch_size": 8, "zero_optimization": {"stage": 0}})",
                {{"zero_optimization.stgae", "1"}});
  EXPECT_THAT(ProblemLines(config),
              ElementsAre("--override 'zero_optimization.stgae=1': unknown key "
                          "'zero_optimization.stgae' (did you mean 'zero_optimization.stage'?)"));
  // The last override of a key wins.
  config = Load("ds.json", R"({"train_batch_size": 8})",
                {{"steps_per_print", "0"}, {"steps_per_print", "5"}});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->steps_per_print, 5);
}

TEST_F(DsConfigTest, NotYetSupportedFeaturesAreListedNotRefused) {
  path_ = Write("ds.json", R"({
    "train_batch_size": 16,
    "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
                          "offload_param": {"device": "nvme", "nvme_path": "/nvme"}},
    "pipeline": {"stages": 2},
    "tensor_parallel": {"tp_size": 2},
    "moe": {"enabled": true},
    "activation_checkpointing": {"number_checkpoints": 4, "partition_activations": true,
                                 "cpu_checkpointing": true},
    "aio": {"block_size": 262144},
    "optimizer": {"type": "Lion"},
    "tensorboard": {"enabled": true, "output_path": "tb"},
    "csv_monitor": {"enabled": true},
    "flops_profiler": {"enabled": true},
    "communication_data_type": "FP16",
    "prescale_gradients": true
  })");
  std::vector<std::string> lines;
  auto config = LoadDsConfig(path_, {}, WorldShape{8}, &lines);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->communication_data_type, "fp16");
  EXPECT_EQ(config->train_micro_batch_size_per_gpu, 8);  // dp = 8 / (2 * 2)
  EXPECT_THAT(lines, ElementsAre(HasSubstr("optimizer.type=Lion:"),
                                 HasSubstr("flops_profiler.enabled=true: the flops profiler with pipeline stages"),
                                 HasSubstr("communication_data_type=fp16:"),
                                 HasSubstr("prescale_gradients=true:")));
  for (const std::string& line : lines) EXPECT_THAT(line, HasSubstr("is not yet supported"));
}

// The monitors DeepSpeed users enable: tensorboard and csv_monitor are
// written (runtime/monitor); wandb is refused at its key with the way round.
TEST_F(DsConfigTest, TensorBoardAndCsvMonitorsAreReadAndWandbIsRefusedWithTheWayRound) {
  auto config = Load("ds.json", R"({"train_batch_size": 8,
      "tensorboard": {"enabled": true, "output_path": "runs", "job_name": "gpt"},
      "csv_monitor": {"enabled": true}})");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->tensorboard.enabled);
  EXPECT_EQ(config->tensorboard.output_path, "runs");
  EXPECT_EQ(config->tensorboard.job_name, "gpt");
  EXPECT_TRUE(config->csv_monitor.enabled);
  EXPECT_EQ(config->csv_monitor.job_name, "DeepSpeedJobName");
  auto wandb = Load("ds.json", R"({"train_batch_size": 8, "wandb": {"enabled": true, "project": "p"}})");
  EXPECT_THAT(ProblemLines(wandb),
              ElementsAre(AllOf(HasSubstr("wandb.enabled: dslaunch does not write W&B runs"),
                                HasSubstr("wandb sync --sync-tensorboard"))));
}

TEST_F(DsConfigTest, OtherBehaviourChangingKnobsAreListedToo) {
  path_ = Write("ds.yaml", R"(train_batch_size: 8
sparse_gradients: true
amp: {enabled: true, opt_level: O1}
optimizer: {type: Adam, params: {amsgrad: true, bias_correction: false}}
scheduler: {type: WarmupLR, params: {last_batch_iteration: 99}}
moe_expert_parallel_size: 2
data_types: {grad_accum_dtype: fp32}
)");
  std::vector<std::string> lines;
  auto config = LoadDsConfig(path_, {}, WorldShape{1}, &lines);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_THAT(lines, UnorderedElementsAre(HasSubstr("sparse_gradients=true:"), HasSubstr("amp.enabled=true:"),
                                          HasSubstr("optimizer.params.amsgrad=true:"),
                                          HasSubstr("optimizer.params.bias_correction=false:"),
                                          HasSubstr("scheduler.params.last_batch_iteration=99:"),
                                          HasSubstr("data_types.grad_accum_dtype=fp32:")));
}

// Note [Keys without effect here]: a key that would change what is computed
// is refused unless it has DeepSpeed's default; one that only tunes
// DeepSpeed's speed or memory is accepted with a warning naming it; at the
// default, neither says anything.
TEST_F(DsConfigTest, KeysWithoutEffectAreRefusedOrWarnedAboutNeverIgnored) {
  path_ = Write("ds.yaml", R"(train_batch_size: 8
zero_optimization:
  stage: 3
  zero_quantized_gradients: true
  zero_hpz_partition_size: 8
  use_multi_rank_bucket_allreduce: false
  stage3_module_granularity_threshold: 0
  offload_optimizer: {device: cpu, cpuadam_cores_perc: 0.5}
bfloat16: {enabled: true, bf16_optimizer_states: true}
checkpoint: {load_universal: true, tag_validation: warn}
)");
  std::vector<std::string> refused, warned;
  auto config = LoadDsConfig(path_, {}, WorldShape{1}, &refused, &warned);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_THAT(refused, UnorderedElementsAre(
                           HasSubstr("zero_optimization.zero_quantized_gradients=true: ZeRO++ quantized gradient"),
                           HasSubstr("zero_optimization.zero_hpz_partition_size=8: ZeRO++ hierarchical"),
                           HasSubstr("bfloat16.bf16_optimizer_states=true: bf16 optimizer states"),  // as written
                           HasSubstr("checkpoint.load_universal=true: loading DeepSpeed's universal")));
  EXPECT_THAT(warned, UnorderedElementsAre(
                          AllOf(HasSubstr("zero_optimization.use_multi_rank_bucket_allreduce=false has no effect "
                                          "here (DeepSpeed's default is true)"),
                                HasSubstr("speed choice")),
                          AllOf(HasSubstr("zero_optimization.offload_optimizer.cpuadam_cores_perc=0.5"),
                                HasSubstr("DSLAUNCH_CPU_ADAM_THREADS"))));

  // DeepSpeed's defaults, written out: nothing to say.
  path_ = Write("defaults.yaml", R"(train_batch_size: 8
zero_optimization: {stage: 2, zero_quantized_gradients: false, zero_hpz_partition_size: 1,
                    use_multi_rank_bucket_allreduce: true, mics_shard_size: -1, ignore_unused_parameters: true}
checkpoint: {load_universal: false, tag_validation: Warn}
optimizer: {type: AdamW, params: {torch_adam: false, bias_correction: true}}
)");
  config = LoadDsConfig(path_, {}, WorldShape{1}, &refused, &warned);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_THAT(refused, IsEmpty());
  EXPECT_THAT(warned, IsEmpty());
}

// DeepSpeed's speed and memory knobs that nothing here reads are warned
// about by name when set to anything but DeepSpeed's default (they were
// stored and never read before); the parameters of a refused feature (the
// buffers of parameters on NVMe) say nothing.
TEST_F(DsConfigTest, SpeedKnobsNothingReadsAreWarnedAboutByName) {
  path_ = Write("ds.yaml", R"(train_batch_size: 8
zero_optimization:
  stage: 3
  contiguous_gradients: false
  allgather_partitions: true
  allgather_bucket_size: 200000000
  round_robin_gradients: true
  max_reuse_distance: 5
  offload_optimizer: {device: cpu, pin_memory: true, buffer_count: 8, fast_init: false}
  offload_param: {device: cpu, pin_memory: false, buffer_count: 2, buffer_size: 7, max_in_cpu: 9}
  aio: {single_submit: true, overlap_events: true}
activation_checkpointing: {profile: true, contiguous_memory_optimization: false}
tensor_parallel: {tp: {tp_grain_size: 64}}
)");
  std::vector<std::string> refused, warned;
  auto config = LoadDsConfig(path_, {}, WorldShape{1}, &refused, &warned);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_THAT(refused, IsEmpty());
  EXPECT_THAT(warned, UnorderedElementsAre(
                          HasSubstr("zero_optimization.contiguous_gradients=false has no effect here"),
                          AllOf(HasSubstr("zero_optimization.allgather_bucket_size=200000000 has no effect here"),
                                HasSubstr("reduce_bucket_size")),
                          HasSubstr("zero_optimization.round_robin_gradients=true has no effect here"),
                          HasSubstr("zero_optimization.max_reuse_distance=5 has no effect here"),  // as written
                          AllOf(HasSubstr("zero_optimization.offload_optimizer.pin_memory=true has no effect here"),
                                HasSubstr("always pinned")),
                          AllOf(HasSubstr("zero_optimization.offload_optimizer.buffer_count=8 has no effect here"),
                                HasSubstr("three buffer sets")),
                          AllOf(HasSubstr("zero_optimization.offload_param.buffer_count=2 has no effect here"),
                                HasSubstr("two staging buffers")),
                          HasSubstr("zero_optimization.offload_param.buffer_size=7 has no effect here"),
                          AllOf(HasSubstr("zero_optimization.offload_param.max_in_cpu=9 has no effect here"),
                                HasSubstr("offload_param.device=nvme (it is cpu)")),
                          HasSubstr("zero_optimization.aio.single_submit=true has no effect here"),
                          HasSubstr("activation_checkpointing.profile=true has no effect here"),
                          HasSubstr("tensor_parallel.tp.tp_grain_size=64 has no effect here")));
  // Still checked: a value of the wrong kind is an error naming the key.
  path_ = Write("bad.yaml", R"(train_batch_size: 8
zero_optimization: {stage: 2, offload_optimizer: {device: cpu, buffer_count: many}}
)");
  config = LoadDsConfig(path_, {}, WorldShape{1}, &refused, &warned);
  EXPECT_FALSE(config.ok());
  EXPECT_THAT(std::string(config.status().message()), HasSubstr("buffer_count"));
}

TEST_F(DsConfigTest, EveryKeyStoredNowhereSaysWhatItMeansHere) {
  for (const std::string& schedule : config_internal::SchedulerTypes()) {
    DsConfig config;
    for (const config_internal::KeySpec& spec : config_internal::DsConfigKeys(&config, schedule)) {
      if (!std::holds_alternative<std::monostate>(spec.field)) continue;
      EXPECT_NE(spec.unbuilt, config_internal::KeySpec::Unbuilt::kNone)
          << spec.path << " is stored nowhere and says nothing of a value other than DeepSpeed's default";
    }
  }
}

TEST_F(DsConfigTest, ExpertParallelSizeIsSaidOnce) {
  auto size_of = [&](const std::string& text) -> absl::StatusOr<int> {
    path_ = Write("ds.yaml", "train_batch_size: 8\n" + text);
    auto config = LoadDsConfig(path_, {}, WorldShape{8});
    if (!config.ok()) return config.status();
    return ExpertParallelSize(*config);
  };
  EXPECT_EQ(*size_of(""), 1);
  EXPECT_EQ(*size_of("moe: {enabled: true, ep_size: 4}\n"), 4);
  EXPECT_EQ(*size_of("moe_expert_parallel_size: 2\n"), 2);
  EXPECT_EQ(*size_of("moe: {enabled: true, ep_size: 2}\nmoe_expert_parallel_size: 2\n"), 2);
  EXPECT_THAT(size_of("moe: {enabled: true, ep_size: 4}\nmoe_expert_parallel_size: 2\n").status().message(),
              HasSubstr("moe.ep_size: 4 disagrees with moe_expert_parallel_size=2"));
  EXPECT_THAT(size_of("moe: {ep_size: 4}\n").status().message(), HasSubstr("without moe.enabled: true"));
  EXPECT_THAT(size_of("moe: {enabled: true, ep_size: 2}\nzero_optimization: {stage: 3}\n").status().message(),
              HasSubstr("3 with expert parallelism (2)"));
}

TEST_F(DsConfigTest, PlainConfigHasNothingUnsupported) {
  path_ = Write("ds.json", kJson);
  std::vector<std::string> lines = {"stale"};
  auto config = LoadDsConfig(path_, {}, WorldShape{1}, &lines);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_THAT(lines, IsEmpty());
}

TEST_F(DsConfigTest, DescribeListsEveryKeyAndReadsBack) {
  auto config = Load("ds.json", kJson, {}, 2);
  ASSERT_TRUE(config.ok()) << config.status();
  std::string described = DescribeDsConfig(*config);
  EXPECT_THAT(described, HasSubstr("train_batch_size: 32\n"));
  EXPECT_THAT(described, HasSubstr("train_micro_batch_size_per_gpu: 8\n"));
  EXPECT_THAT(described, HasSubstr("zero_optimization:\n  stage: 0\n"));
  EXPECT_THAT(described, HasSubstr("  offload_param:\n    device: \"none\"\n"));
  EXPECT_THAT(described, HasSubstr("    betas: [0.8, 0.95]\n"));
  EXPECT_THAT(described, HasSubstr("  cos_min_ratio: 0.1\n"));
  EXPECT_THAT(described, HasSubstr("communication_data_type: null\n"));
  EXPECT_THAT(described, HasSubstr("flops_profiler:\n  enabled: false\n"));
  EXPECT_THAT(described, Not(HasSubstr("warmup_max_lr")));  // not a WarmupCosineLR parameter
  auto again = Load("described.yaml", described, {}, 2);
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << described;
  EXPECT_EQ(DescribeDsConfig(*again), described);
}

TEST_F(DsConfigTest, BatchTriadProblemsNameTheFileAndNumbers) {
  auto config = Load("ds.json", R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 8,
                                    "gradient_accumulation_steps": 1})",
                     {}, 2);
  EXPECT_THAT(ProblemLines(config),
              ElementsAre(path_ + ":1: train_batch_size (32) != train_micro_batch_size_per_gpu (8) "
                                  "* gradient_accumulation_steps (1) * data-parallel size (2) = "
                                  "16"));
}

}  // namespace
}  // namespace dslaunch::runtime
