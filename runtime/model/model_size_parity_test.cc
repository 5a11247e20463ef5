// Note [Model size]: `dslaunch estimate` counts parameters without building
// the model; here its counts meet the built models' own.
#include <stdlib.h>

#include <fstream>

#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "runtime/estimate/model_size.h"
#include "runtime/fs/file_system.h"
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
  LlamaHfConfig mixtral;
  mixtral.model_type = "mixtral";
  mixtral.options = testing::TinyLlama();
  mixtral.options.moe.gating.num_experts = 3;
  mixtral.options.moe.gating.top_k = 2;
  absl::StatusOr<LlamaShape> mixtral_shape = ParseLlamaShape(LlamaHfConfigJson(mixtral, "float32"), "config.json");
  ASSERT_TRUE(mixtral_shape.ok()) << mixtral_shape.status();
  struct Case {
    const LlamaHfConfig* config;
    const LlamaShape* shape;
    std::vector<std::string> targets;
  };
  for (const Case& c : {Case{&config, &*shape, {"q_proj", "v_proj"}}, Case{&config, &*shape, {"all-linear"}},
                        Case{&mixtral, &*mixtral_shape, {"all-linear"}}, Case{&mixtral, &*mixtral_shape, {"w2", "k_proj"}}}) {
    Llama model(c.config->options, 1);
    LoraSettings settings;
    settings.adapter.r = 4;
    settings.target_modules = c.targets;
    absl::StatusOr<LoraSummary> summary = ApplyLora(*model, settings, 3);
    ASSERT_TRUE(summary.ok()) << summary.status();
    LoraConfig lora;
    lora.r = 4;
    lora.target_modules = c.targets;
    EXPECT_EQ(*LlamaLoraParameters(*c.shape, lora), summary->trainable_parameters)
        << c.config->model_type << " " << c.targets.front();
  }
}

// The layer list --dry_run partitions (LayerSizesOf) against the built
// models' Layers(): every layer's name, type and parameter elements on
// tensor-parallel rank 0, for the GPT at TP 1 and 2 and the Llama family
// with a tied or untied head, biases, LoRA (on attention, on everything,
// on the head), key/value heads split or replicated at TP 2 and 4, and
// Mixtral's experts.
std::vector<LayerSize> BuiltLayers(torch::nn::Module& module, const ModelInterface& family) {
  auto parameters = module.named_parameters();
  std::vector<LayerSize> sizes;
  for (const ModelLayer& layer : family.Layers()) {
    int64_t elements = 0, trainable = 0;
    for (const std::string& name : layer.parameters) {
      elements += parameters[name].numel();
      if (parameters[name].requires_grad()) trainable += parameters[name].numel();
    }
    sizes.push_back({layer.name, layer.type, elements, trainable});
  }
  return sizes;
}

void ExpectSameLayers(const std::vector<LayerSize>& estimated, const std::vector<LayerSize>& built,
                      const std::string& what) {
  ASSERT_EQ(estimated.size(), built.size()) << what;
  for (size_t i = 0; i < built.size(); ++i) {
    EXPECT_EQ(estimated[i].name, built[i].name) << what;
    EXPECT_EQ(estimated[i].type, built[i].type) << what;
    EXPECT_EQ(estimated[i].parameters, built[i].parameters) << what << ": " << built[i].name;
    EXPECT_EQ(estimated[i].trainable, built[i].trainable) << what << ": " << built[i].name << " (trainable)";
  }
}

TEST(ModelSizeParityTest, LayerSizesMatchTheBuiltModelsLayers) {
  for (int tp : {1, 2}) {
    GptOptions options = testing::TinyGpt();
    options.layers = 3;
    options.width = 24;
    options.heads = 2;
    options.vocab_size = 37;
    options.sequence_length = 16;
    options.tensor_parallel = TensorParallelGroup{nullptr, 0, tp};
    options.vocab_divisor = 4;
    Gpt model(options, 1);
    JobConfig job;
    job.model.type = "gpt";
    job.model.layers = 3;
    job.model.width = 24;
    job.model.heads = 2;
    job.model.vocab_size = 37;
    job.model.sequence_length = 16;
    job.model.make_vocab_size_divisible_by = 4;
    job.ds.tensor_parallel.tp_size = tp;
    auto estimated = LayerSizesOf(job);
    ASSERT_TRUE(estimated.ok()) << estimated.status();
    ExpectSameLayers(*estimated, BuiltLayers(*model, *model), absl::StrCat("gpt TP ", tp));
  }
  char pattern[] = "/tmp/layer-sizes-XXXXXX";
  ASSERT_NE(::mkdtemp(pattern), nullptr);
  const std::string folder = pattern;
  struct Case {
    const char* model_type;
    bool tied, bias;
    int tp, kv_heads, experts;
    std::vector<std::string> lora;
  };
  for (const Case& c : {Case{"llama", false, false, 1, 2, 0, {}}, Case{"llama", true, true, 2, 2, 0, {"q_proj", "v_proj"}},
                        Case{"qwen2", false, true, 2, 4, 0, {"all-linear"}}, Case{"llama", false, false, 4, 2, 0, {"all-linear"}},
                        Case{"llama", false, false, 1, 4, 0, {"lm_head", "o_proj"}}, Case{"mixtral", false, false, 1, 2, 3, {}},
                        Case{"llama", false, false, 2, 2, 0, {"self_attn.q_proj", "layers.1.mlp.down_proj"}},
                        Case{"mixtral", false, false, 1, 2, 3, {"all-linear"}},
                        Case{"mixtral", false, false, 1, 2, 3, {"layers.1.block_sparse_moe.experts.2.w3", "v_proj"}}}) {
    LlamaHfConfig config;
    config.model_type = c.model_type;
    config.options = testing::TinyLlama();
    config.options.heads = 4;
    config.options.kv_heads = c.kv_heads;
    config.options.tie_word_embeddings = c.tied;
    config.options.qkv_bias = c.bias;
    config.options.output_bias = c.bias && std::string(c.model_type) == "llama";
    if (c.experts > 0) {
      config.options.moe.gating.num_experts = c.experts;
      config.options.moe.gating.top_k = 2;
    }
    {
      std::ofstream out(folder + "/config.json");
      out << LlamaHfConfigJson(config, "float32");
    }
    LlamaOptions options = config.options;
    options.tensor_parallel = TensorParallelGroup{nullptr, 0, c.tp};
    options.vocab_divisor = 2;
    Llama model(options, 1);
    JobConfig job;
    job.model.type = "llama";
    job.model.from = folder;
    job.model.make_vocab_size_divisible_by = 2;
    job.ds.tensor_parallel.tp_size = c.tp;
    if (!c.lora.empty()) {
      LoraSettings settings;
      settings.adapter.r = 3;
      settings.target_modules = c.lora;
      ASSERT_TRUE(ApplyLora(*model, settings, 3).ok());
      job.lora.r = 3;
      job.lora.target_modules = c.lora;
    }
    auto estimated = LayerSizesOf(job);
    ASSERT_TRUE(estimated.ok()) << estimated.status();
    ExpectSameLayers(*estimated, BuiltLayers(*model, *model),
                     absl::StrCat(c.model_type, " TP ", c.tp, " kv ", c.kv_heads, c.tied ? " tied" : "",
                                  c.bias ? " bias" : "", c.lora.empty() ? "" : " LoRA ", absl::StrJoin(c.lora, ",")));
  }
  EXPECT_TRUE(FileSystem::Default().RemoveTree(folder).ok());  // not std::filesystem (fs/file_system.h)
}

}  // namespace
}  // namespace dslaunch::runtime
