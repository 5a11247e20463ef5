// Model sizes against published parameter counts (the built models' own
// counts are checked in runtime/model/model_size_parity_test.cc).
#include "runtime/estimate/model_size.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/data/indexed_dataset_format.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;

LlamaShape Parse(const std::string& json) {
  absl::StatusOr<LlamaShape> shape = ParseLlamaShape(json, "config.json");
  EXPECT_TRUE(shape.ok()) << shape.status();
  return shape.ok() ? *shape : LlamaShape{};
}

TEST(ModelSizeTest, GptTwoSmallHasItsPublishedCount) {
  EXPECT_EQ(GptParameters({12, 768, 50257, 1024}), 124439808);
}

TEST(ModelSizeTest, LlamaFamilyConfigsGiveTheirPublishedCounts) {
  // Llama-2-7B: untied head, multi-head attention.
  EXPECT_EQ(LlamaParameters(Parse(R"({"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
      "num_hidden_layers": 32, "num_attention_heads": 32, "vocab_size": 32000})")),
            6738415616);
  // Llama-3-8B: grouped-query attention (8 key/value heads).
  EXPECT_EQ(LlamaParameters(Parse(R"({"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
      "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
      "tie_word_embeddings": false})")),
            8030261248);
  // Mixtral-8x7B: eight experts and a router per layer.
  EXPECT_EQ(LlamaParameters(Parse(R"({"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
      "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000,
      "num_local_experts": 8})")),
            46702792704);
  // Qwen2-0.5B: tied embeddings and q/k/v biases.
  EXPECT_EQ(LlamaParameters(Parse(R"({"model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864,
      "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
      "tie_word_embeddings": true})")),
            494032768);
}

TEST(ModelSizeTest, LoraOnLlamaTwoCountsWhatPeftReports) {
  const LlamaShape llama2 = Parse(R"({"hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
      "num_attention_heads": 32, "vocab_size": 32000})");
  LoraConfig lora;
  lora.r = 8;
  lora.target_modules = {"q_proj", "v_proj"};
  // PEFT's print_trainable_parameters for this setting: 4,194,304.
  EXPECT_EQ(*LlamaLoraParameters(llama2, lora), 4194304);
  lora.target_modules = {"q_proj", "vproj"};
  absl::StatusOr<int64_t> misspelled = LlamaLoraParameters(llama2, lora);
  ASSERT_FALSE(misspelled.ok());
  EXPECT_THAT(std::string(misspelled.status().message()), HasSubstr("'vproj' matches no projection"));
}

TEST(ModelSizeTest, AConfigOfAnotherFamilyOrWithoutItsSizesIsRefusedByKey) {
  absl::StatusOr<LlamaShape> bert = ParseLlamaShape(R"({"model_type": "bert", "hidden_size": 8})", "/m/config.json");
  ASSERT_FALSE(bert.ok());
  EXPECT_THAT(std::string(bert.status().message()), HasSubstr("/m/config.json: model_type: 'bert'"));
  absl::StatusOr<LlamaShape> partial = ParseLlamaShape(R"({"hidden_size": 8})", "/m/config.json");
  ASSERT_FALSE(partial.ok());
  EXPECT_THAT(std::string(partial.status().message()), HasSubstr("/m/config.json: intermediate_size is missing"));
  // Values of the wrong kind are named, not read as a default.
  const std::string sizes =
      R"("hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 4)";
  absl::StatusOr<LlamaShape> listed = ParseLlamaShape("{\"model_type\": [\"llama\"], " + sizes + "}", "/m/config.json");
  ASSERT_FALSE(listed.ok());
  EXPECT_THAT(std::string(listed.status().message()), HasSubstr("/m/config.json: model_type: expected a string"));
  absl::StatusOr<LlamaShape> tied = ParseLlamaShape("{\"tie_word_embeddings\": \"yes please\", " + sizes + "}",
                                                    "/m/config.json");
  ASSERT_FALSE(tied.ok());
  EXPECT_THAT(std::string(tied.status().message()),
              HasSubstr("/m/config.json: tie_word_embeddings: expected true or false"));
}

TEST(ModelSizeTest, AJobsGptTakesTheByteVocabularyWhenTheFileLeavesItToTheDataset) {
  JobConfig job;
  job.path = "train.cfg";
  job.model.layers = 2;
  job.model.width = 64;
  job.model.heads = 4;
  job.model.sequence_length = 32;
  job.data.tokenizer = "byte";
  absl::StatusOr<ModelSize> size = ModelSizeOf(job);
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(size->vocab, 257);
  EXPECT_EQ(size->trainable, GptParameters({2, 64, 257, 32}));
  EXPECT_EQ(size->block, 12 * 64 * 64 + 13 * 64);
  job.data.tokenizer = "model";
  EXPECT_THAT(std::string(ModelSizeOf(job).status().message()), HasSubstr("train.cfg: model.vocab_size is 0"));
  // A prepared dataset's header says what the ranks will take (a model
  // tokenizer's 32000 here), whatever the tokenizer key would guess.
  char folder[] = "/tmp/model-size-XXXXXX";
  ASSERT_NE(::mkdtemp(folder), nullptr);
  job.data.prepared = std::string(folder) + "/corpus";
  IndexHeader header;
  header.vocab_size = 32000;
  header.token_bytes = 2;
  {
    std::ofstream idx(job.data.prepared + ".idx", std::ios::binary);
    idx << EncodeIndexHeader(header);
  }
  size = ModelSizeOf(job);
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(size->vocab, 32000);
  job.data.tokenizer = "byte";
  EXPECT_EQ(ModelSizeOf(job)->vocab, 32000);
  std::remove((job.data.prepared + ".idx").c_str());
  ::rmdir(folder);
}

}  // namespace
}  // namespace dslaunch::runtime
