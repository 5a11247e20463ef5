// Every example in configs/ loads: job files (*.cfg) for world sizes 1, 2 and
// 4, ds_configs (*.json, *.yaml) for the world sizes their batch sizes allow.

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/config/config_loader.h"
#include "runtime/fs/file_system.h"

namespace dslaunch::runtime {
namespace {

using ::testing::IsEmpty;
using ::testing::Not;

const std::string kConfigs = std::string(DSLAUNCH_SOURCE_DIR) + "/configs";

std::vector<std::string> ExampleFiles(const std::vector<std::string>& extensions) {
  std::vector<std::string> files;
  FileSystem& fs = FileSystem::Default();
  auto names = fs.ListDirectory(kConfigs);
  EXPECT_TRUE(names.ok()) << names.status();
  if (!names.ok()) return files;
  for (const std::string& name : *names) {
    const std::string path = JoinPath(kConfigs, name);
    auto info = fs.Stat(path);
    if (!info.ok() || info->type != FileType::kRegular) continue;
    for (const std::string& extension : extensions) {
      if (absl::EndsWith(name, extension)) files.push_back(path);
    }
  }
  return files;
}

TEST(ExampleConfigs, EveryJobFileLoadsForOneTwoAndFourRanks) {
  std::vector<std::string> files = ExampleFiles({".cfg"});
  ASSERT_THAT(files, Not(IsEmpty()));
  for (const std::string& file : files) {
    for (int world : {1, 2, 4}) {
      auto job = LoadJobConfig(file, {}, WorldShape{world});
      EXPECT_TRUE(job.ok()) << file << " at world size " << world << ":\n" << job.status();
    }
  }
}

TEST(ExampleConfigs, EveryDsConfigLoads) {
  std::vector<std::string> files = ExampleFiles({".json", ".yaml", ".yml"});
  ASSERT_THAT(files, Not(IsEmpty()));
  for (const std::string& file : files) {
    // Hugging Face's style of DeepSpeed config: its "auto" values come from a
    // job file (llama-finetune*.cfg loads it above).
    if (absl::EndsWith(file, "/ds_zero2_config.json")) continue;
    auto config = LoadDsConfig(file, {}, WorldShape{1});
    EXPECT_TRUE(config.ok()) << file << ":\n" << config.status();
  }
}

TEST(ExampleConfigs, GptTinyAdaptsItsGlobalBatchToTheWorld) {
  for (int world : {1, 2, 4}) {
    auto job = LoadJobConfig(kConfigs + "/gpt-tiny.cfg", {}, WorldShape{world});
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_EQ(job->ds.train_micro_batch_size_per_gpu, 8);
    EXPECT_EQ(job->ds.gradient_accumulation_steps, 1);
    EXPECT_EQ(job->ds.train_batch_size, 8 * world);
    EXPECT_EQ(job->ds.optimizer.lr, 1e-3);
    EXPECT_EQ(job->ds.scheduler.type, "WarmupDecayLR");
    EXPECT_EQ(job->ds.scheduler.warmup_num_steps, 20);
    EXPECT_EQ(job->ds.scheduler.total_num_steps, 200);
    EXPECT_EQ(job->ds.gradient_clipping, 1.0);
    EXPECT_THAT(job->not_yet_supported, IsEmpty());
    EXPECT_EQ(job->data.prepared, kConfigs + "/data/fortunes-byte");
    EXPECT_EQ(job->checkpoint.dir, kConfigs + "/checkpoints/gpt-tiny");
    for (const std::string& text : job->data.text_files) {
      EXPECT_TRUE(FileSystem::Default().Exists(text)) << text;
    }
  }
}

TEST(ExampleConfigs, DsConfigZero0IsWhatADeepSpeedUserWrites) {
  auto config = LoadDsConfig(kConfigs + "/ds_config_zero0.json", {}, WorldShape{2});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->train_batch_size, 16);
  EXPECT_EQ(config->train_micro_batch_size_per_gpu, 8);
  EXPECT_EQ(config->gradient_accumulation_steps, 1);
  EXPECT_EQ(config->optimizer.type, "AdamW");
  EXPECT_EQ(config->scheduler.type, "WarmupLR");
  EXPECT_FALSE(config->fp16.enabled);
  EXPECT_FALSE(config->bf16.enabled);
}

TEST(ElasticBatch, AGlobalBatchTheWorldCannotKeepIsAdjustedAndStated) {
  // Note [Elastic batch]: 16 samples of 8 per rank fit 1 and 2 ranks, not 3.
  const std::string file = kConfigs + "/gpt-tiny.cfg";
  const std::vector<ConfigOverride> overrides = {{"train.global_batch_size", "16"}, {"train.micro_batch_size", "8"},
                                                 {"train.steps", "30"}, {"checkpoint.dir", "\"\""}};
  std::string note;
  auto kept = LoadElasticJobConfig(file, overrides, WorldShape{2}, &note);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->ds.train_batch_size, 16);
  EXPECT_EQ(note, "");
  EXPECT_FALSE(LoadJobConfig(file, overrides, WorldShape{3}).ok());
  auto adjusted = LoadElasticJobConfig(file, overrides, WorldShape{3}, &note);
  ASSERT_TRUE(adjusted.ok()) << adjusted.status();
  EXPECT_EQ(adjusted->ds.train_batch_size, 24);
  EXPECT_EQ(adjusted->ds.gradient_accumulation_steps, 1);
  EXPECT_EQ(note, "the global batch of 16 cannot be kept on 3 data-parallel rank(s) with micro-batch 8; using 24 "
                  "(gradient accumulation 1)");
  // A problem of its own is reported as such, not hidden behind the batch.
  std::vector<ConfigOverride> short_run = overrides;
  short_run.push_back({"train.steps", "12"});  // fewer than the 20 warm-up steps
  auto refused = LoadElasticJobConfig(file, short_run, WorldShape{3}, &note);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), ::testing::HasSubstr("must be greater than warmup_num_steps=20"));
}

}  // namespace
}  // namespace dslaunch::runtime
