// adapter_config.json as PEFT (and export.adapter_dir) writes it reads back
// into the same LoRA settings; every setting this runtime does not compute
// is refused naming its key. (Loading the tensors onto a model is checked
// against the independent reference in integration.test_llama_lora.)
#include "runtime/generate/peft_adapter_loader.h"

#include <unistd.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dslaunch::runtime {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class PeftAdapterConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/peft-config-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { ASSERT_TRUE(FileSystem::Default().RemoveTree(dir_).ok()); }
  absl::StatusOr<LoraSettings> Read(const std::string& json) {
    EXPECT_TRUE(WriteFileAtomically(FileSystem::Default(), dir_ + "/" + kPeftConfigFile, json).ok());
    return ReadPeftAdapterConfig(FileSystem::Default(), dir_);
  }
  std::string dir_;
};

TEST_F(PeftAdapterConfigTest, WhatExportWritesReadsBackTheSame) {
  LoraSettings written;
  written.adapter.r = 4;
  written.adapter.alpha = 12;
  written.adapter.use_rslora = true;
  written.target_modules = {"q_proj", "self_attn.v_proj"};
  auto read = Read(PeftAdapterConfigJson(written, "base"));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->adapter.r, 4);
  EXPECT_EQ(read->adapter.alpha, 12);
  EXPECT_TRUE(read->adapter.use_rslora);
  EXPECT_THAT(read->target_modules, ElementsAre("q_proj", "self_attn.v_proj"));
  written.target_modules = {"all-linear"};
  read = Read(PeftAdapterConfigJson(written, "base"));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_THAT(read->target_modules, ElementsAre("all-linear"));
  // PEFT's string form: a pattern, kept as one (not read as a module name).
  written.target_modules.clear();
  written.target_pattern = R"(model\.layers\.[1-9]\d*\.self_attn\.(q|v)_proj)";
  read = Read(PeftAdapterConfigJson(written, "base"));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(read->target_modules.empty());
  EXPECT_EQ(read->target_pattern, written.target_pattern);
}

TEST_F(PeftAdapterConfigTest, SettingsNotComputedHereAreRefusedByName) {
  const std::string base = R"({"peft_type": "LORA", "r": 8, "lora_alpha": 16, "target_modules": ["q_proj"], )";
  struct Case {
    std::string json;
    std::string says;
  };
  for (const Case& c : {
           Case{base + R"("use_dora": true})", "use_dora is set; DoRA is not supported"},
           Case{base + R"("bias": "all"})", "bias is set"},
           Case{base + R"("fan_in_fan_out": true})", "fan_in_fan_out is set"},
           Case{base + R"("modules_to_save": ["lm_head"]})", "modules_to_save is set"},
           Case{base + R"("layers_to_transform": [0, 1]})", "layers_to_transform is set"},
           Case{base + R"("rank_pattern": {"q_proj": 4}})", "rank_pattern is set"},
           Case{base + R"("alpha_pattern": {"q_proj": 4}})", "alpha_pattern is set"},
           Case{R"({"peft_type": "IA3", "r": 8, "lora_alpha": 16, "target_modules": ["q_proj"]})",
                "peft_type IA3 is not supported"},
           Case{R"({"peft_type": "LORA", "lora_alpha": 16, "target_modules": ["q_proj"]})",
                "r and lora_alpha are required"},
           Case{R"({"r": 8, "lora_alpha": 16, "target_modules": []})", "target_modules must name"},
       }) {
    auto read = Read(c.json);
    ASSERT_FALSE(read.ok()) << c.json;
    EXPECT_THAT(std::string(read.status().message()), HasSubstr(c.says)) << c.json;
    EXPECT_THAT(std::string(read.status().message()), HasSubstr(kPeftConfigFile)) << c.json;
  }
  // Defaults written out in full are fine.
  EXPECT_TRUE(Read(base + R"("use_dora": false, "bias": "none", "modules_to_save": null, "rank_pattern": {}})").ok());
}

}  // namespace
}  // namespace dslaunch::runtime
