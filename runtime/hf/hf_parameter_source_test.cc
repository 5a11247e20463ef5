// Note [Shard-only loading]: an HfParameterSource gives, for any range of
// any parameter, exactly the values a whole load puts there (under tensor
// parallelism too), reading only the rows of the range; a deferred module
// is checked like a whole one and refused by the whole load.
#include <stdlib.h>

#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/hf/hf_export.h"
#include "runtime/hf/hf_model_folder.h"
#include "runtime/hf/hf_parameter_source.h"
#include "runtime/hf/hf_weights.h"
#include "runtime/model/deferred_parameters.h"
#include "runtime/model/llama.h"
#include "runtime/model/llama_hf_config.h"
#include "runtime/testing/hf_test_llama.h"
#include "runtime/testing/temp_folder.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;
using TempFolder = testing::TempFolder;


// Grouped-query attention: 4 heads, 2 key/value heads (split
// at TP 2), an untied head and a vocabulary that TP 2 pads (41 rows).
// 41 rows: the vocabulary does not split evenly.
LlamaHfConfig SourceTestConfig() { return testing::HfTestLlamaConfig(/*vocab_size=*/41, /*tied=*/false); }

// A bf16 folder of a Llama drawn from seed 1, in shards of about 4 KB.
std::string WriteFolder(const TempFolder& temp, const LlamaHfConfig& config) {
  Llama original(config.options, 1);
  HfExportOptions options;
  options.folder = temp.path() + "/model";
  options.dtype = torch::kBFloat16;
  options.max_shard_bytes = 4000;
  options.config_json = LlamaHfConfigJson(config, TorchDtypeName(torch::kBFloat16));
  std::vector<HfTensorSpec> specs;
  for (const auto& item : original->named_parameters()) specs.push_back({item.key(), item.value().sizes().vec()});
  auto parameters = original->named_parameters();
  absl::Status written =
      ExportHfFolder(FileSystem::Default(), options, specs,
                     [&](const std::string& name) -> absl::StatusOr<torch::Tensor> { return parameters[name]; });
  EXPECT_TRUE(written.ok()) << written;
  return options.folder;
}

LlamaOptions AtRank(LlamaOptions options, int rank, int size, bool deferred) {
  options.tensor_parallel.rank = rank;
  options.tensor_parallel.size = size;
  options.deferred = deferred;
  return options;
}

TEST(HfParameterSourceTest, AnyRangeReadsWhatAWholeLoadHolds) {
  TempFolder temp("dshfs");
  const LlamaHfConfig config = SourceTestConfig();
  const std::string folder = WriteFolder(temp, config);
  std::mt19937 random(7);
  for (int size : {1, 2}) {
    for (int rank = 0; rank < size; ++rank) {
      SCOPED_TRACE(::testing::Message() << "tensor-parallel rank " << rank << " of " << size);
      Llama whole(AtRank(config.options, rank, size, /*deferred=*/false), 2);
      Llama deferred(AtRank(config.options, rank, size, /*deferred=*/true), 2);
      for (const auto& item : deferred->named_parameters()) {
        EXPECT_TRUE(IsDeferredParameter(item.value())) << item.key();
      }
      auto opened = HfModelFolder::Open(FileSystem::Default(), folder);
      ASSERT_TRUE(opened.ok()) << opened.status();
      const auto forms = whole->TensorParallelForms();
      ASSERT_TRUE(LoadHfWeights(**opened, *whole, forms, rank, size).ok());
      ASSERT_TRUE(CheckHfWeights(**opened, *deferred, forms, rank, size).ok());
      HfParameterSource source(std::move(*opened), forms, rank, size);
      for (const auto& item : whole->named_parameters()) {
        const torch::Tensor expected = item.value().reshape({-1});
        const int64_t n = expected.numel();
        // The whole tensor, then random ranges (in fp32: the values convert).
        std::vector<std::pair<int64_t, int64_t>> ranges = {{0, n}, {n - 1, 1}};
        for (int k = 0; k < 6; ++k) {
          const int64_t offset = std::uniform_int_distribution<int64_t>(0, n - 1)(random);
          ranges.push_back({offset, std::uniform_int_distribution<int64_t>(0, n - offset)(random)});
        }
        for (const auto& [offset, count] : ranges) {
          torch::Tensor out = torch::full({count}, -7.0f);
          absl::Status read = source.Read(item.key(), offset, out);
          ASSERT_TRUE(read.ok()) << item.key() << ": " << read;
          EXPECT_TRUE(torch::equal(out, expected.narrow(0, offset, count)))
              << item.key() << " [" << offset << ", +" << count << ")";
        }
      }
      torch::Tensor past = torch::empty({2});
      absl::Status outside = source.Read("model.norm.weight", config.options.hidden - 1, past);
      EXPECT_THAT(outside.message(), HasSubstr("tensor 'model.norm.weight': elements [15, 17) of 16"));
      EXPECT_THAT(source.Read("model.nothing", 0, past).message(), HasSubstr("model.nothing"));
    }
  }
}

// What ZeRO-3 asks of a rank of 2 (half of every tensor) reads about half
// of the folder's bytes: only the rows of those halves.
TEST(HfParameterSourceTest, HalfOfEveryTensorReadsAboutHalfTheFolder) {
  TempFolder temp("dshfs");
  const LlamaHfConfig config = SourceTestConfig();
  const std::string folder = WriteFolder(temp, config);
  auto opened = HfModelFolder::Open(FileSystem::Default(), folder);
  ASSERT_TRUE(opened.ok()) << opened.status();
  Llama deferred(AtRank(config.options, 0, 1, /*deferred=*/true), 2);
  HfParameterSource source(std::move(*opened), {}, 0, 1);
  int64_t asked = 0, rows = 0;  // bf16 bytes
  for (const auto& item : deferred->named_parameters()) {
    const torch::Tensor& p = item.value();
    const int64_t half = p.numel() / 2;
    ASSERT_TRUE(source.Read(item.key(), half, torch::empty({p.numel() - half})).ok()) << item.key();
    asked += (p.numel() - half) * 2;
    rows += p.numel() / p.size(0) * 2;
  }
  // The elements asked for, plus at most the part of one row before them.
  EXPECT_GE(source.bytes_read(), asked);
  EXPECT_LE(source.bytes_read(), asked + rows);
  EXPECT_EQ(source.folder_bytes(), CountParameters(*deferred) * 2);
}

TEST(HfParameterSourceTest, AWholeLoadRefusesADeferredModuleAndTheCheckAloneFindsAMisfit) {
  TempFolder temp("dshfs");
  LlamaHfConfig config = SourceTestConfig();
  const std::string folder = WriteFolder(temp, config);
  auto opened = HfModelFolder::Open(FileSystem::Default(), folder);
  ASSERT_TRUE(opened.ok()) << opened.status();
  Llama deferred(AtRank(config.options, 0, 1, /*deferred=*/true), 2);
  absl::Status loaded = LoadHfWeights(**opened, *deferred);
  EXPECT_THAT(loaded.message(), HasSubstr("is deferred"));
  EXPECT_TRUE(IsDeferredParameter(deferred->named_parameters()["model.norm.weight"]));
  // A model the folder does not fit is refused by the check alone.
  config.options.intermediate = 32;
  Llama wider(AtRank(config.options, 0, 1, /*deferred=*/true), 2);
  absl::Status checked = CheckHfWeights(**opened, *wider);
  EXPECT_THAT(checked.message(), HasSubstr("tensor 'model.layers.0.mlp.up_proj.weight' has shape [24, 16]"));
}

}  // namespace
}  // namespace dslaunch::runtime
