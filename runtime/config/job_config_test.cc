// LoadJobConfig: the job file, its ds_config inline or by path, overrides,
// model and data checks, relative paths.

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/config/config_loader.h"
#include "runtime/config/config_test_util.h"

namespace dslaunch::runtime {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kJob[] = R"(model:
  type: gpt
  layers: 4
  heads: 4
  width: 128
  sequence_length: 256
  vocab_size: 512
  dropout: 0.1
data:
  prepared: data/corpus
  text_files: [texts/a.txt, /abs/b.txt, "texts/*.md"]
  tokenizer: sentencepiece
  tokenizer_vocab_size: 512
  validation_fraction: 0.1
train:
  steps: 1000
  seed: 7
  eval_interval: 100
  eval_steps: 5
  lr: 0.0006
  min_lr: 0.00006
  warmup_steps: 100
  weight_decay: 0.1
  betas: [0.9, 0.95]
  eps: 1.0e-8
  grad_clip: 1.0
  micro_batch_size: 16
  global_batch_size: 64
  precision: fp32
checkpoint:
  dir: ckpt
  interval: 200
  keep: 3
  resume: false
)";

constexpr char kInlineDs[] = R"(ds_config:
  train_batch_size: auto
  train_micro_batch_size_per_gpu: auto
  gradient_clipping: auto
  zero_optimization:
    stage: 0
)";

class JobConfigTest : public ConfigFileTest {
 protected:
  absl::StatusOr<JobConfig> LoadText(const std::string& text,
                                     std::vector<ConfigOverride> overrides = {},
                                     int world_size = 1) {
    path_ = Write("job/train.cfg", text);
    return LoadJobConfig(path_, overrides, WorldShape{world_size});
  }
  std::string path_;
};

TEST_F(JobConfigTest, ReadsEverySectionAndResolvesRelativePaths) {
  auto job = LoadText(absl::StrCat(kJob, kInlineDs), {}, 2);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->path, path_);
  EXPECT_EQ(job->model.type, "gpt");
  EXPECT_EQ(job->model.layers, 4);
  EXPECT_EQ(job->model.heads, 4);
  EXPECT_EQ(job->model.width, 128);
  EXPECT_EQ(job->model.sequence_length, 256);
  EXPECT_EQ(job->model.vocab_size, 512);
  EXPECT_EQ(job->model.dropout, 0.1);
  const std::string folder = dir_ + "/job/";
  EXPECT_EQ(job->data.prepared, folder + "data/corpus");
  EXPECT_THAT(job->data.text_files,
              ElementsAre(folder + "texts/a.txt", "/abs/b.txt", folder + "texts/*.md"));
  EXPECT_EQ(job->data.tokenizer, "sentencepiece");
  EXPECT_EQ(job->data.tokenizer_vocab_size, 512);
  EXPECT_EQ(job->data.validation_fraction, 0.1);
  EXPECT_EQ(job->train.steps, 1000);
  EXPECT_EQ(job->train.seed, 7u);
  EXPECT_EQ(job->train.eval_interval, 100);
  EXPECT_EQ(job->train.eval_steps, 5);
  EXPECT_EQ(job->train.lr, 0.0006);
  EXPECT_EQ(job->train.min_lr, 0.00006);
  EXPECT_EQ(job->train.warmup_steps, 100);
  EXPECT_EQ(job->train.weight_decay, 0.1);
  EXPECT_EQ(job->train.betas[1], 0.95);
  EXPECT_EQ(job->train.grad_clip, 1.0);
  EXPECT_EQ(job->train.micro_batch_size, 16);
  EXPECT_EQ(job->train.global_batch_size, 64);
  EXPECT_EQ(job->train.precision, "fp32");
  EXPECT_EQ(job->checkpoint.dir, folder + "ckpt");
  EXPECT_EQ(job->checkpoint.interval, 200);
  EXPECT_EQ(job->checkpoint.keep, 3);
  EXPECT_FALSE(job->checkpoint.resume);
  EXPECT_EQ(job->ds_config_path, "");
  EXPECT_EQ(job->ds.train_batch_size, 64);
  EXPECT_EQ(job->ds.train_micro_batch_size_per_gpu, 16);
  EXPECT_EQ(job->ds.gradient_accumulation_steps, 2);
  EXPECT_EQ(job->ds.gradient_clipping, 1.0);
  EXPECT_THAT(job->not_yet_supported, IsEmpty());
}

TEST_F(JobConfigTest, DsConfigByPathIsRelativeToTheJobFile) {
  Write("job/ds/zero.json", R"({
  "train_batch_size": "auto",
  "train_micro_batch_size_per_gpu": 16,
  "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}},
  "prescale_gradients": true
})");
  auto job = LoadText(absl::StrCat(kJob, "ds_config: ds/zero.json\n"), {}, 4);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->ds_config_path, dir_ + "/job/ds/zero.json");
  EXPECT_EQ(job->ds.train_batch_size, 64);
  EXPECT_EQ(job->ds.gradient_accumulation_steps, 1);
  EXPECT_THAT(job->not_yet_supported,
              ElementsAre("prescale_gradients=true: gradient prescaling is not yet supported"));

  Write("job/ds.yaml", "train_batch_size: 64\nfp16:\n  enabled: true\n");
  job = LoadText(absl::StrCat(kJob, "ds_config: ds.yaml\n"));
  EXPECT_THAT(ProblemLines(job),
              ElementsAre(HasSubstr(dir_ + "/job/ds.yaml:3: fp16.enabled: true disagrees with "
                                           "train.precision (fp32)")));
}

TEST_F(JobConfigTest, ProblemsInADsConfigFileNameThatFile) {
  const std::string ds = Write("job/ds.json",
                               "{\n  \"train_batch_size\": 64,\n"
                               "  \"zero_optimization\": {\"stage\": 5}\n}\n");
  auto job = LoadText(absl::StrCat(kJob, "ds_config: ds.json\n"));
  EXPECT_THAT(ProblemLines(job),
              ElementsAre(ds + ":3: zero_optimization.stage: 5 is not one of 0, 1, 2, 3"));
  Write("job/broken.json", "{\"train_batch_size\": 64,");
  job = LoadText(absl::StrCat(kJob, "ds_config: broken.json\n"));
  EXPECT_THAT(ProblemLines(job), ElementsAre(AllOf(HasSubstr(dir_ + "/job/broken.json:"),
                                                   HasSubstr("not valid YAML or JSON"))));
}

TEST_F(JobConfigTest, MissingDsConfig) {
  auto job = LoadText(absl::StrCat(kJob, "ds_config: nowhere.json\n"));
  EXPECT_THAT(ProblemLines(job),
              ElementsAre(AllOf(HasSubstr(path_ + ":35: ds_config: "),
                                HasSubstr(dir_ + "/job/nowhere.json: No such file or directory"))));
  job = LoadText(kJob);
  EXPECT_THAT(ProblemLines(job), ElementsAre(path_ + ": ds_config: required (a mapping, or the "
                                                     "path of a JSON/YAML file)"));
  job = LoadText(absl::StrCat(kJob, "ds_config: [1]\n"));
  EXPECT_THAT(ProblemLines(job),
              ElementsAre(HasSubstr("ds_config: expected a mapping or the path of a JSON/YAML "
                                    "file, got a list")));
}

TEST_F(JobConfigTest, PipelineRulesAreCheckedAtTheirKeys) {
  auto job = LoadText(R"(model: {type: llama, layers: 2, heads: 2, width: 8, sequence_length: 32}
data: {prepared: d}
train: {steps: 1}
lora: {r: 4, target_modules: [q_proj]}  # LoRA with a pipeline is fine
export: {hf_dir: out}
ds_config:
  train_batch_size: 5
  train_micro_batch_size_per_gpu: 1
  zero_optimization: {stage: 3}
  pipeline: {stages: 2, schedule: interleaved, virtual_stages: 3, layers_per_stage: [1, 1, 1, 2]}
)",
                      {}, 2);
  EXPECT_THAT(ProblemLines(job),
              ElementsAre(HasSubstr("zero_optimization.stage: 3 with pipeline.stages=2: ZeRO-3"),
                          HasSubstr("pipeline.schedule: interleaved needs gradient_accumulation_steps (the "
                                    "micro-batches per step, 5) to be a multiple of pipeline.stages=2"),
                          HasSubstr("pipeline.layers_per_stage: has 4 entries; the pipeline has 6"),
                          HasSubstr("pipeline.stages: 6 (virtual) stages for 4 layers"),
                          HasSubstr("pipeline.layers_per_stage: adds up to 5 layers; the model has 4")));
  job = LoadText(R"(model: {type: gpt, layers: 2, heads: 2, width: 8, sequence_length: 32}
data: {prepared: d}
train: {steps: 1}
ds_config: {train_batch_size: 4, train_micro_batch_size_per_gpu: 1, pipeline: {stages: 2, layers_per_stage: [2, 2]}}
)",
                 {}, 2);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->ds.gradient_accumulation_steps, 4);
  job = LoadText(R"(model: {type: gpt, layers: 2, heads: 2, width: 8, sequence_length: 32}
data: {prepared: d}
train: {steps: 1}
ds_config: {train_batch_size: 1, pipeline: {virtual_stages: 2}}
)");
  EXPECT_THAT(ProblemLines(job), ElementsAre(HasSubstr("pipeline.virtual_stages: 2 model chunks per rank need "
                                                       "pipeline.schedule: interleaved")));
  // num_layers_per_virtual_stage (Megatron's): chunks for the interleaved
  // schedule, from the model's depth, and the only say on the cut.
  const std::string chunked = R"(model: {type: gpt, layers: 6, heads: 2, width: 8, sequence_length: 32}
data: {prepared: d}
train: {steps: 1}
ds_config: {train_batch_size: 4, train_micro_batch_size_per_gpu: 1, pipeline: {stages: 2, )";
  job = LoadText(chunked + "schedule: interleaved, num_layers_per_virtual_stage: 1}}\n", {}, 2);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->ds.pipeline.num_layers_per_virtual_stage, 1);
  job = LoadText(chunked + "num_layers_per_virtual_stage: 1}}\n", {}, 2);
  EXPECT_THAT(ProblemLines(job), ElementsAre(HasSubstr("pipeline.num_layers_per_virtual_stage: cuts the model into "
                                                       "chunks for pipeline.schedule: interleaved (the schedule is 1f1b)")));
  job = LoadText(chunked + "schedule: interleaved, num_layers_per_virtual_stage: 2}}\n", {}, 2);
  EXPECT_THAT(ProblemLines(job), ElementsAre(HasSubstr("pipeline.num_layers_per_virtual_stage: 2: the model's 6 blocks "
                                                       "do not split into 2 stages x 2 blocks per model chunk")));
  job = LoadText(chunked + "schedule: interleaved, num_layers_per_virtual_stage: 1, virtual_stages: 2}}\n", {}, 2);
  EXPECT_THAT(ProblemLines(job), ElementsAre(HasSubstr("pipeline.virtual_stages: 2 but "
                                                       "pipeline.num_layers_per_virtual_stage=1 gives 3 model chunks")));
  job = LoadText(chunked + "schedule: interleaved, num_layers_per_virtual_stage: 1, layers_per_stage: [4, 4]}}\n", {},
                 2);
  EXPECT_THAT(ProblemLines(job), Contains(HasSubstr("pipeline.num_layers_per_virtual_stage: and "
                                                    "pipeline.layers_per_stage both say how the layers are cut")));
  // activation_checkpoint_interval: a pipeline's, and not beside number_checkpoints.
  const std::string interval_job = R"(model: {type: gpt, layers: 2, heads: 2, width: 8, sequence_length: 32}
data: {prepared: d}
train: {steps: 1}
)";
  job = LoadText(interval_job + "ds_config: {train_batch_size: 1, pipeline: {activation_checkpoint_interval: 1}}\n");
  EXPECT_THAT(ProblemLines(job), ElementsAre(HasSubstr("pipeline.activation_checkpoint_interval: recomputes segments "
                                                       "of each pipeline stage and needs pipeline.stages > 1")));
  job = LoadText(interval_job +
                     "ds_config: {train_batch_size: 4, train_micro_batch_size_per_gpu: 1, "
                     "activation_checkpointing: {number_checkpoints: 1}, "
                     "pipeline: {stages: 2, activation_checkpoint_interval: 1}}\n",
                 {}, 2);
  EXPECT_THAT(ProblemLines(job), ElementsAre(HasSubstr("pipeline.activation_checkpoint_interval: and "
                                                       "activation_checkpointing.number_checkpoints=1 both say what "
                                                       "is recomputed")));
  job = LoadText(interval_job + "ds_config: {train_batch_size: 4, train_micro_batch_size_per_gpu: 1, "
                                "pipeline: {stages: 2, activation_checkpoint_interval: 1}}\n",
                 {}, 2);
  EXPECT_TRUE(job.ok()) << job.status();
}

// Adapters split with their projections under tensor parallelism, but for
// the output head's (split by vocabulary): refused at its key.
TEST_F(JobConfigTest, LoraOnTheHeadWithTensorParallelismIsRefusedAtItsKey) {
  const std::string head_job = R"(model: {type: llama, layers: 2, heads: 2, width: 8, sequence_length: 32}
data: {prepared: d}
train: {steps: 1}
lora: {r: 4,
  target_modules: [q_proj, o_proj, lm_head]}
)";
  auto job = LoadText(absl::StrCat(head_job, "ds_config: {train_batch_size: 2, tensor_parallel: {tp_size: 2}}\n"), {}, 2);
  EXPECT_THAT(ProblemLines(job),
              ElementsAre(HasSubstr(":5: lora.target_modules: a LoRA adapter on lm_head with "
                                    "tensor_parallel.tp_size=2 is not yet supported")));
  job = LoadText(absl::StrCat(head_job, "ds_config: {train_batch_size: 2, tensor_parallel: {tp_size: 1}}\n"), {}, 2);
  EXPECT_TRUE(job.ok()) << job.status();
  const std::string projections_job = absl::StrReplaceAll(head_job, {{", lm_head]", "]"}});
  job = LoadText(absl::StrCat(projections_job, "ds_config: {train_batch_size: 2, tensor_parallel: {tp_size: 2}}\n"),
                 {}, 2);
  EXPECT_TRUE(job.ok()) << job.status();
}

TEST_F(JobConfigTest, ModelSanity) {
  auto job = LoadText(R"(model: {type: bert, layers: 0, heads: 3, width: 100}
data: {prepared: d}
train: {steps: 1}
ds_config: {train_batch_size: 1}
)");
  EXPECT_THAT(ProblemLines(job),
              ElementsAre(path_ + ":1: model.type: 'bert' is not one of gpt, llama",
                          path_ + ":1: model.layers: 0 must be >= 1",
                          path_ + ":1: model.sequence_length: required",
                          path_ + ":1: model.width: 100 is not divisible by model.heads (3)"));
}

TEST_F(JobConfigTest, AHuggingFaceFolderGivesTheSizes) {
  auto job = LoadText(R"(model: {type: llama, from: hf/tiny, sequence_length: 32}
data: {prepared: d}
train: {steps: 1}
export: {hf_dir: out/hf, dtype: float32, max_shard_size: 2GB}
ds_config: {train_batch_size: 1}
)");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->model.from, dir_ + "/job/hf/tiny");
  EXPECT_EQ(job->export_.hf_dir, dir_ + "/job/out/hf");
  EXPECT_EQ(job->export_.dtype, "float32");
  job = LoadText(R"(model: {type: gpt, from: hf/tiny, layers: 2, sequence_length: 32}
data: {prepared: d}
train: {steps: 1}
export: {hf_dir: out}
ds_config: {train_batch_size: 1}
)");
  EXPECT_THAT(ProblemLines(job),
              ElementsAre(HasSubstr("model.layers: comes from model.from's config.json"),
                          HasSubstr("model.from: needs model.type: llama"),
                          HasSubstr("export.hf_dir: Hugging Face export is built for model.type llama, not 'gpt'")));
  job = LoadText(R"(model: {type: llama, heads: 2, width: 8, sequence_length: 32}
data: {prepared: d}
train: {steps: 1}
ds_config: {train_batch_size: 1}
)");
  EXPECT_THAT(ProblemLines(job),
              ElementsAre(HasSubstr("model.layers: required (or model.from: a Hugging Face model folder")));
}

TEST_F(JobConfigTest, TheLoraSectionIsPeftsLoraConfig) {
  auto job = LoadText(R"(model: {type: llama, from: hf/tiny, sequence_length: 32}
data: {prepared: d}
train: {steps: 1}
lora: {r: 16, lora_alpha: 32, lora_dropout: 0.05, target_modules: [q_proj, v_proj], use_rslora: true}
export: {adapter_dir: out/adapter}
ds_config: {train_batch_size: 1}
)");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->lora.r, 16);
  EXPECT_EQ(job->lora.lora_alpha, 32);
  EXPECT_EQ(job->lora.lora_dropout, 0.05);
  EXPECT_THAT(job->lora.target_modules, ElementsAre("q_proj", "v_proj"));
  EXPECT_TRUE(job->lora.use_rslora);
  EXPECT_EQ(job->export_.adapter_dir, dir_ + "/job/out/adapter");
  job = LoadText(R"(model: {type: gpt, layers: 2, heads: 2, width: 8, sequence_length: 32}
data: {prepared: d}
train: {steps: 1}
lora: {r: 8, bias: all, lora_dropout: 1.5}
export: {adapter_dir: out}
ds_config: {train_batch_size: 1}
)");
  EXPECT_THAT(ProblemLines(job), ElementsAre(HasSubstr("lora.bias: 'all' is not one of none"), HasSubstr("lora.lora_dropout"),
                                             HasSubstr("lora.r: LoRA is built for model.type llama, not 'gpt'"),
                                             HasSubstr("lora.target_modules: required with lora.r > 0")));
  job = LoadText(R"(model: {type: llama, from: hf/tiny, sequence_length: 32}
data: {prepared: d}
train: {steps: 1}
lora: {target_modules: [q_proj]}
export: {adapter_dir: out}
ds_config: {train_batch_size: 1}
)");
  EXPECT_THAT(ProblemLines(job), ElementsAre(HasSubstr("lora.target_modules: set, but lora.r is 0"),
                                             HasSubstr("export.adapter_dir: needs lora.r > 0")));
}

TEST_F(JobConfigTest, RequiredSectionsAndData) {
  auto job = LoadText("ds_config: {train_batch_size: 1}\n");
  EXPECT_THAT(ProblemLines(job),
              ElementsAre(HasSubstr("model: required"), HasSubstr("train: required"),
                          HasSubstr("data: set prepared")));
  job = LoadText(R"(model: {layers: 1, heads: 1, width: 8, sequence_length: 8, vocab_size: 100}
data: {text_files: [a.txt], tokenizer: byte}
train: {steps: 1, min_lr: 0.1, lr: 0.01}
ds_config: {train_batch_size: 1}
)");
  EXPECT_THAT(ProblemLines(job),
              ElementsAre(HasSubstr("model.vocab_size: 100 is smaller than the byte tokenizer's "
                                    "256 symbols"),
                          HasSubstr("train.min_lr: 0.1 is above train.lr (0.01)")));
  job = LoadText(R"(model: {layers: 1, heads: 1, width: 8, sequence_length: 8}
data: {prepared: p, tokenizer: sentencepiece}
train: {steps: 1}
ds_config: {train_batch_size: 1}
)");
  EXPECT_THAT(ProblemLines(job),
              ElementsAre(HasSubstr("data.tokenizer_vocab_size: required (> 0) with tokenizer "
                                    "sentencepiece")));
}

TEST_F(JobConfigTest, UnknownKeysInTheJobAndItsInlineDsConfig) {
  auto job = LoadText(absl::StrCat(kJob, kInlineDs, "  zero_optimizaton: {}\ntrian: {}\n"));
  EXPECT_THAT(ProblemLines(job),
              ElementsAre(path_ + ":42: unknown key 'trian' (did you mean 'train'?)",
                          path_ + ":41: unknown key 'ds_config.zero_optimizaton' (did you mean "
                                  "'ds_config.zero_optimization'?)"));
}

TEST_F(JobConfigTest, OverridesReachTheJobAndItsDsConfig) {
  auto job = LoadText(absl::StrCat(kJob, kInlineDs), {{"train.steps", "5"},
                                                      {"model.layers", "2"},
                                                      {"ds_config.zero_optimization.stage", "3"},
                                                      {"ds_config.steps_per_print", "3"}});
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->train.steps, 5);
  EXPECT_EQ(job->model.layers, 2);
  EXPECT_EQ(job->ds.zero_optimization.stage, 3);
  EXPECT_EQ(job->ds.steps_per_print, 3);
  EXPECT_THAT(job->not_yet_supported, IsEmpty());  // stage 3 is built

  Write("job/ds.json", R"({"train_batch_size": 64})");
  job = LoadText(absl::StrCat(kJob, "ds_config: ds.json\n"),
                 {{"ds_config.gradient_accumulation_steps", "2"}}, 4);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->ds.train_micro_batch_size_per_gpu, 8);  // 64 / (2 * 4)
  // A ds_config value that contradicts the job file is named, override or not.
  job = LoadText(absl::StrCat(kJob, "ds_config: ds.json\n"),
                 {{"ds_config.train_micro_batch_size_per_gpu", "8"}});
  EXPECT_THAT(ProblemLines(job),
              ElementsAre("--override 'ds_config.train_micro_batch_size_per_gpu=8': "
                          "train_micro_batch_size_per_gpu: 8 disagrees with train.micro_batch_size "
                          "(16) in the job file; write \"auto\" to take it, or make them equal"));

  // ds_config itself can be swapped for another file.
  Write("job/other.yaml", "train_batch_size: auto\ngradient_accumulation_steps: 4\n");
  job = LoadText(absl::StrCat(kJob, "ds_config: ds.json\n"), {{"ds_config", "other.yaml"}});
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->ds_config_path, dir_ + "/job/other.yaml");
  EXPECT_EQ(job->ds.gradient_accumulation_steps, 4);
}

TEST_F(JobConfigTest, BadOverridesAreNamed) {
  auto job = LoadText(
      absl::StrCat(kJob, kInlineDs),
      {{"train.stpes", "5"}, {"ds_config.zero_optimizaton.stage", "1"}, {"model.heads", "3"}});
  EXPECT_THAT(
      ProblemLines(job),
      ElementsAre("--override 'train.stpes=5': unknown key 'train.stpes' (did you mean "
                  "'train.steps'?)",
                  path_ + ":5: model.width: 128 is not divisible by model.heads (3)",
                  "--override 'ds_config.zero_optimizaton.stage=1': unknown key "
                  "'ds_config.zero_optimizaton' (did you mean 'ds_config.zero_optimization'?)"));
}

TEST_F(JobConfigTest, DescribeShowsEverythingAndReadsBack) {
  auto job = LoadText(absl::StrCat(kJob, kInlineDs),
                      {{"ds_config.zero_optimization.stage", "3"},
                       {"ds_config.prescale_gradients", "true"}});
  ASSERT_TRUE(job.ok()) << job.status();
  std::string described = DescribeJobConfig(*job);
  EXPECT_THAT(described, HasSubstr("model:\n  type: \"gpt\"\n  from: \"\"\n  layers: 4\n"));
  EXPECT_THAT(described, HasSubstr("  betas: [0.9, 0.95]\n"));
  EXPECT_THAT(described, HasSubstr("  dir: \"" + dir_ + "/job/ckpt\"\n"));
  EXPECT_THAT(described, HasSubstr("ds_config:\n  train_batch_size: 64\n"));
  EXPECT_THAT(described, HasSubstr("  zero_optimization:\n    stage: 3\n"));
  EXPECT_THAT(described, HasSubstr("# not yet supported:\n#   prescale_gradients=true: gradient prescaling is not "
                                   "yet supported\n"));
  path_ = Write("described.cfg", described);
  auto again = LoadJobConfig(path_, {}, WorldShape{1});
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << described;
  again->path = job->path;
  EXPECT_EQ(DescribeJobConfig(*again), described);
}

// Mixture of experts: each conflict one line at its key, before anything
// starts.
TEST_F(JobConfigTest, MoeConflictsAreNamedAtTheirKeys) {
  const std::string job = absl::StrCat(kJob, kInlineDs);
  auto moe = [](std::vector<ConfigOverride> more) {
    std::vector<ConfigOverride> all = {{"model.moe.num_experts", "4"}};
    all.insert(all.end(), more.begin(), more.end());
    return all;
  };
  struct Case {
    std::vector<ConfigOverride> changes;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {moe({{"ds_config.moe.enabled", "true"}, {"ds_config.moe.ep_size", "3"}}),
            "model.moe.num_experts: 4 is not a multiple of the expert-parallel "
            "size (moe.ep_size=3)"},
           {moe({{"model.moe.top_k", "5"}}), "model.moe.top_k: 5 is more than model.moe.num_experts (4)"},
           {moe({{"ds_config.tensor_parallel.tp_size", "2"}}),
            "model.moe.num_experts: experts with tensor_parallel.tp_size=2 are "
            "not yet supported"},
           {moe({{"ds_config.pipeline.stages", "2"}, {"ds_config.moe.enabled", "true"}, {"ds_config.moe.ep_size", "2"}}),
            "moe.ep_size: 2: expert parallelism with pipeline.stages=2 is not yet supported"},
           {{{"ds_config.moe.enabled", "true"}},
            "moe.enabled: true, but the job's model has no experts (set "
            "model.moe.num_experts)"},
           {{{"ds_config.moe_expert_parallel_size", "2"}},
            "moe_expert_parallel_size: 2: expert parallelism, but the job's "
            "model has no experts"},
           {{{"model.moe.top_k", "2"}},
            "model.moe.top_k: set, but model.moe.num_experts is 0 (a dense "
            "model)"},
       }) {
    auto loaded = LoadText(job, c.changes, 4);
    EXPECT_THAT(ProblemLines(loaded), Contains(HasSubstr(c.message))) << c.message;
  }
  auto fine = LoadText(job,
                       moe({{"ds_config.moe.enabled", "true"},
                            {"ds_config.moe.ep_size", "2"},
                            {"model.moe.noisy_gate_policy", "RSample"}}),
                       4);
  ASSERT_TRUE(fine.ok()) << fine.status();
  EXPECT_EQ(ExpertParallelSize(fine->ds), 2);
  EXPECT_EQ(fine->model.moe.noisy_gate_policy, "RSample");
  EXPECT_TRUE(fine->not_yet_supported.empty());
}

// Issue 13, finding 7: these passed --validate and the ranks aborted.
TEST_F(JobConfigTest, ModelDimensionsAndBatchSizesHaveUpperBounds) {
  const std::string job = absl::StrCat(kJob, kInlineDs);
  struct Case {
    ConfigOverride change;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {{"model.layers", "1000000000"}, "model.layers: 1000000000 must be <= 1024"},
           {{"model.heads", "1025"}, "model.heads: 1025 must be <= 1024"},
           {{"model.width", "65537"}, "model.width: 65537 must be <= 65536"},
           {{"model.sequence_length", "1048577"}, "model.sequence_length: 1048577 must be <= 1048576"},
           {{"model.vocab_size", "2097153"}, "model.vocab_size: 2097153 must be <= 2097152"},
           {{"data.tokenizer_vocab_size", "2097153"}, "data.tokenizer_vocab_size: 2097153 must be <= 2097152"},
           {{"train.micro_batch_size", "2147483647"}, "train.micro_batch_size: 2147483647 must be <= 65536"},
           {{"train.global_batch_size", "67108865"}, "train.global_batch_size: 67108865 must be <= 67108864"},
           {{"ds_config.gradient_accumulation_steps", "1048577"},
            "gradient_accumulation_steps: 1048577 must be <= 1048576"},
       }) {
    auto loaded = LoadText(job, {c.change});
    EXPECT_THAT(ProblemLines(loaded), ElementsAre(HasSubstr(c.message))) << c.change.path;  // one line each
  }
}

TEST_F(JobConfigTest, TheParameterEstimateIsBounded) {
  // 1024 x 65536 passes each key's bound; together they are 5.3e13 parameters.
  auto job = LoadText(absl::StrCat(kJob, kInlineDs),
                      {{"model.layers", "1024"}, {"model.width", "65536"}, {"model.heads", "64"}});
  EXPECT_THAT(ProblemLines(job),
              ElementsAre(path_ + ":1: model: about 5.28e+13 parameters (1024 layers of width 65536, "
                                  "vocabulary 512, sequence 256): more than the 1e+12 this runtime "
                                  "accepts (training state of 16 bytes per parameter: 844 TB)"));
  // A ~1.3B GPT is far inside.
  job = LoadText(absl::StrCat(kJob, kInlineDs),
                 {{"model.layers", "24"}, {"model.width", "2048"}, {"model.heads", "16"},
                  {"model.vocab_size", "50304"}, {"model.sequence_length", "1024"}});
  EXPECT_TRUE(job.ok()) << job.status();
}

TEST_F(JobConfigTest, TokensPerMicroBatchAreBounded) {
  auto job = LoadText(absl::StrCat(kJob, kInlineDs),
                      {{"train.micro_batch_size", "65536"}, {"train.global_batch_size", "65536"},
                       {"model.sequence_length", "1024"}});
  EXPECT_THAT(ProblemLines(job),
              ElementsAre("--override 'train.micro_batch_size=65536': train.micro_batch_size: 65536 x "
                          "model.sequence_length 1024 = 67108864 tokens per micro-batch, more than 16777216"));
}

TEST_F(JobConfigTest, DerivedBatchSizesAreBoundedToo) {
  // train_batch_size alone at one rank derives a micro-batch of the same size.
  auto job = LoadText(absl::StrCat(kJob, "ds_config:\n  train_batch_size: 1000000\n"),
                      {{"train.micro_batch_size", "null"}, {"train.global_batch_size", "null"}});
  EXPECT_THAT(ProblemLines(job),
              ElementsAre(path_ + ":36: ds_config.train_micro_batch_size_per_gpu would be 1000000 (derived "
                                  "from the other batch sizes and the data-parallel size (1)), more than 65536"));
}

// Note [Bounded input files], Note [One config document].
TEST_F(JobConfigTest, FilesThatAreNotOneRegularDocumentAreRefusedByName) {
  auto zero = LoadJobConfig("/dev/zero", {}, WorldShape{1});
  EXPECT_EQ(zero.status().message(), "job file /dev/zero: is a character device, not a regular file");
  auto ds_zero = LoadText(absl::StrCat(kJob, "ds_config: /dev/zero\n"));
  EXPECT_THAT(ProblemLines(ds_zero),
              ElementsAre(path_ + ":35: ds_config: ds_config file /dev/zero: is a character device, "
                                  "not a regular file"));
  auto dir = LoadText(absl::StrCat(kJob, "ds_config: .\n"));
  EXPECT_THAT(ProblemLines(dir), ElementsAre(path_ + ":35: ds_config: ds_config file " + dir_ +
                                             "/job/: is a directory, not a regular file"));

  auto two = LoadText(absl::StrCat(kJob, kInlineDs, "---\ntrain:\n  steps: 1\n"));
  EXPECT_THAT(ProblemLines(two), ElementsAre(path_ + ":41: a second YAML document starts here; a config "
                                                     "holds exactly one (remove the '---')"));
  const std::string comma = Write("job/comma.json", "{\"train_batch_size\": 64,\n \"steps_per_print\": 5,\n}\n");
  auto with_comma = LoadText(absl::StrCat(kJob, "ds_config: comma.json\n"));
  EXPECT_THAT(ProblemLines(with_comma),
              ElementsAre(comma + ":2:22: trailing comma before '}' (JSON allows none)"));
}

}  // namespace
}  // namespace dslaunch::runtime
