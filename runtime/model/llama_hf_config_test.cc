#include "runtime/model/llama_hf_config.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;

constexpr char kLlama3[] = R"({
  "architectures": ["LlamaForCausalLM"],
  "bos_token_id": 128000,
  "eos_token_id": [128001, 128008],
  "hidden_act": "silu",
  "hidden_size": 64,
  "intermediate_size": 160,
  "max_position_embeddings": 131072,
  "model_type": "llama",
  "num_attention_heads": 8,
  "num_hidden_layers": 2,
  "num_key_value_heads": 2,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0",
  "use_cache": true,
  "vocab_size": 300
})";

TEST(LlamaHfConfigTest, ReadsALlama3Config) {
  auto config = ParseLlamaHfConfig(kLlama3, "/m/config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  const LlamaOptions& o = config->options;
  EXPECT_EQ(o.hidden, 64);
  EXPECT_EQ(o.kv_heads, 2);
  EXPECT_EQ(o.head_dim, 8);
  EXPECT_DOUBLE_EQ(o.rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(o.rope.theta, 500000);
  EXPECT_EQ(o.rope.scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_DOUBLE_EQ(o.rope.scaling.factor, 8);
  EXPECT_EQ(o.rope.scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(config->torch_dtype, "bfloat16");
  EXPECT_EQ(config->descriptive.at("eos_token_id"), "[128001, 128008]");
}

TEST(LlamaHfConfigTest, WritesWhatItReads) {
  auto config = ParseLlamaHfConfig(kLlama3, "/m/config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  const std::string written = LlamaHfConfigJson(*config, "float32");
  auto again = ParseLlamaHfConfig(written, "out/config.json");
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << written;
  EXPECT_EQ(again->torch_dtype, "float32");
  EXPECT_EQ(LlamaHfConfigJson(*again, "float32"), written);
  EXPECT_EQ(again->descriptive, config->descriptive);
}

TEST(LlamaHfConfigTest, ReadsTheRopeParametersFormAndQwen2Biases) {
  std::string text = R"({"model_type": "qwen2", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
    "num_attention_heads": 4, "vocab_size": 100, "use_sliding_window": false, "sliding_window": 4096,
    "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1000000.0}})";
  auto config = ParseLlamaHfConfig(text, "q/config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->options.qkv_bias);
  EXPECT_FALSE(config->options.output_bias);
  EXPECT_EQ(config->options.rope.scaling.type, RopeScaling::Type::kLinear);
  EXPECT_DOUBLE_EQ(config->options.rope.theta, 1e6);
  EXPECT_DOUBLE_EQ(config->options.rms_norm_eps, 1e-6);
}

TEST(LlamaHfConfigTest, ReadsAndWritesMixtralsExperts) {
  const std::string text = R"({"model_type": "mixtral", "architectures": ["MixtralForCausalLM"], "hidden_size": 32,
    "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "vocab_size": 100, "num_local_experts": 8, "num_experts_per_tok": 2, "router_aux_loss_coef": 0.02,
    "output_router_logits": false, "router_jitter_noise": 0.0, "sliding_window": null, "rope_theta": 1000000.0})";
  auto config = ParseLlamaHfConfig(text, "m/config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  const MoeOptions& moe = config->options.moe;
  EXPECT_EQ(moe.gating.num_experts, 8);
  EXPECT_EQ(moe.gating.top_k, 2);
  EXPECT_FALSE(moe.gating.drop_tokens);             // dropless
  EXPECT_FALSE(moe.gating.second_expert_sampling);  // the plain top-2
  EXPECT_EQ(moe.every, 1);
  EXPECT_EQ(moe.aux_loss_coef, 0.0);  // as transformers: only with output_router_logits
  const std::string written = LlamaHfConfigJson(*config, "bfloat16");
  EXPECT_THAT(written, HasSubstr("\"num_local_experts\": 8"));
  EXPECT_THAT(written, HasSubstr("\"router_aux_loss_coef\": 0.02"));
  auto again = ParseLlamaHfConfig(written, "out/config.json");
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << written;
  EXPECT_EQ(LlamaHfConfigJson(*again, "bfloat16"), written);

  std::string with_loss = text;
  with_loss.replace(with_loss.find("\"output_router_logits\": false"), 29, "\"output_router_logits\": true");
  EXPECT_DOUBLE_EQ(ParseLlamaHfConfig(with_loss, "m/config.json")->options.moe.aux_loss_coef, 0.02);

  std::string jitter = text;
  jitter.replace(jitter.find("\"router_jitter_noise\": 0.0"), 26, "\"router_jitter_noise\": 0.1");
  EXPECT_THAT(ParseLlamaHfConfig(jitter, "m/config.json").status().message(),
              HasSubstr("router_jitter_noise: 0.1: only 0 is supported"));
  EXPECT_THAT(ParseLlamaHfConfig(R"({"model_type": "llama", "hidden_size": 32, "intermediate_size": 64,
    "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 100, "num_local_experts": 8})",
                                 "l/config.json")
                  .status()
                  .message(),
              HasSubstr("num_local_experts: a Mixtral key in a llama config"));
}

TEST(LlamaHfConfigTest, RefusesWhatItDoesNotComputeNamingTheKey) {
  struct Case {
    std::string replace, with, message;
  };
  const std::vector<Case> cases = {
      {"\"model_type\": \"llama\"", "\"model_type\": \"gpt2\"", "model_type: 'gpt2' is not a Llama-family"},
      {"\"num_key_value_heads\": 2", "\"num_key_value_heads\": 3", "num_key_value_heads: 3 does not divide"},
      {"\"rope_type\": \"llama3\"", "\"rope_type\": \"yarn\"", "rope_scaling.rope_type: 'yarn'"},
      {"\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"", "hidden_act: 'gelu'"},
      {"\"use_cache\": true", "\"quantization_config\": {}", "quantization_config: quantized checkpoints"},
      {"\"use_cache\": true", "\"partial_rotary_factor\": 0.5", "partial_rotary_factor: not a key"},
      {"\"hidden_size\": 64", "\"hidden_size\": \"64\"", "hidden_size: expected an integer, got \"64\""},
      {"\"hidden_size\": 64,", "", "hidden_size: missing"},
      {"\"low_freq_factor\": 1.0,", "", "rope_scaling.low_freq_factor: missing"},
  };
  for (const Case& c : cases) {
    std::string text = kLlama3;
    const size_t at = text.find(c.replace);
    ASSERT_NE(at, std::string::npos) << c.replace;
    text.replace(at, c.replace.size(), c.with);
    auto config = ParseLlamaHfConfig(text, "/m/config.json");
    ASSERT_FALSE(config.ok()) << c.with;
    EXPECT_THAT(config.status().message(), HasSubstr("/m/config.json: ")) << c.with;
    EXPECT_THAT(config.status().message(), HasSubstr(c.message)) << c.with;
  }
  EXPECT_THAT(ParseLlamaHfConfig("{\"a\": ", "/m/config.json").status().message(), HasSubstr("not valid JSON"));
}

}  // namespace
}  // namespace dslaunch::runtime
