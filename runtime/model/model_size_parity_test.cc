// Note [Model size]: `dslaunch estimate` counts parameters without building
// the model; here its counts meet the built models' own.
#include "gtest/gtest.h"
#include "runtime/estimate/model_size.h"
#include "runtime/model/gpt.h"
#include "runtime/model/llama.h"
#include "runtime/model/llama_hf_config.h"
#include "runtime/model/lora.h"
#include "runtime/testing/rank_group.h"

namespace dslaunch::runtime {
namespace {

TEST(ModelSizeParityTest, GptCountsMatchTheBuiltModel) {
  for (auto [layers, width, vocab, sequence] :
       {std::tuple{2, 16, 32, 8}, std::tuple{3, 24, 257, 40}, std::tuple{1, 64, 50, 16}}) {
    GptOptions options = testing::TinyGpt();
    options.layers = layers;
    options.width = width;
    options.heads = 2;
    options.vocab_size = vocab;
    options.sequence_length = sequence;
    Gpt model(options, 1);
    EXPECT_EQ(GptParameters({layers, width, vocab, sequence}), model->ParameterCount()) << layers << " " << width;
  }
}

TEST(ModelSizeParityTest, LlamaFamilyCountsFromConfigJsonMatchTheBuiltModel) {
  struct Case {
    const char* model_type;
    bool tied, qkv_bias, output_bias;
  };
  for (const Case& c : {Case{"llama", false, false, false}, Case{"llama", true, false, false},
                        Case{"llama", false, true, true}, Case{"qwen2", false, true, false}}) {
    LlamaHfConfig config;
    config.model_type = c.model_type;
    config.options = testing::TinyLlama();
    config.options.tie_word_embeddings = c.tied;
    config.options.qkv_bias = c.qkv_bias;
    config.options.output_bias = c.output_bias;
    const std::string json = LlamaHfConfigJson(config, "float32");
    absl::StatusOr<LlamaShape> shape = ParseLlamaShape(json, "config.json");
    ASSERT_TRUE(shape.ok()) << shape.status() << "\n" << json;
    Llama model(config.options, 1);
    EXPECT_EQ(LlamaParameters(*shape), model->ParameterCount()) << json;
  }
}

TEST(ModelSizeParityTest, LoraCountsMatchTheAdaptersApplied) {
  LlamaHfConfig config;
  config.options = testing::TinyLlama();
  absl::StatusOr<LlamaShape> shape = ParseLlamaShape(LlamaHfConfigJson(config, "float32"), "config.json");
  ASSERT_TRUE(shape.ok()) << shape.status();
  for (const std::vector<std::string>& targets :
       {std::vector<std::string>{"q_proj", "v_proj"}, std::vector<std::string>{"all-linear"}}) {
    Llama model(config.options, 1);
    LoraSettings settings;
    settings.adapter.r = 4;
    settings.target_modules = targets;
    absl::StatusOr<LoraSummary> summary = ApplyLora(*model, settings, 3);
    ASSERT_TRUE(summary.ok()) << summary.status();
    LoraConfig lora;
    lora.r = 4;
    lora.target_modules = targets;
    EXPECT_EQ(*LlamaLoraParameters(*shape, lora), summary->trainable_parameters) << targets.front();
  }
}

}  // namespace
}  // namespace dslaunch::runtime
