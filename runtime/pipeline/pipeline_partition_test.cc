#include "runtime/pipeline/pipeline_partition.h"

#include <gtest/gtest.h>

namespace dslaunch::runtime {
namespace {

// A GPT-like list: a heavy embedding, equal blocks, a light head.
std::vector<PipelineLayerInfo> GptLike(int blocks, int64_t embedding, int64_t block, int64_t head) {
  std::vector<PipelineLayerInfo> layers{{"embedding", "Embedding", embedding}};
  for (int i = 0; i < blocks; ++i) layers.push_back({"blocks." + std::to_string(i), "GptBlock", block});
  layers.push_back({"head", "Head", head});
  return layers;
}

TEST(PipelinePartitionTest, ParametersBalanceTheHeaviestStage) {
  // Embedding = two blocks: it gets a stage of its own weight.
  auto cut = PartitionLayers(GptLike(6, 200, 100, 1), "parameters", 4);
  ASSERT_TRUE(cut.ok()) << cut.status();
  EXPECT_EQ(*cut, (std::vector<int>{0, 1, 3, 5, 8}));
}

TEST(PipelinePartitionTest, UniformBalancesLayerCounts) {
  auto cut = PartitionLayers(GptLike(6, 200, 100, 1), "uniform", 4);
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ(*cut, (std::vector<int>{0, 2, 4, 6, 8}));
}

TEST(PipelinePartitionTest, TypeRegexCountsMatchingLayersOnly) {
  auto cut = PartitionLayers(GptLike(4, 200, 100, 1), "type:gptblock", 2);
  ASSERT_TRUE(cut.ok());
  // Two blocks per stage; the embedding and head ride along at no weight.
  EXPECT_EQ(*cut, (std::vector<int>{0, 3, 6}));
  auto few = PartitionLayers(GptLike(1, 200, 100, 1), "type:GptBlock", 2);
  ASSERT_FALSE(few.ok());
  EXPECT_NE(few.status().message().find("Embedding, GptBlock, Head"), std::string::npos) << few.status();
  EXPECT_FALSE(PartitionLayers(GptLike(4, 1, 1, 1), "type:(", 2).ok());
}

TEST(PipelinePartitionTest, EveryStageGetsALayer) {
  auto cut = PartitionLayers(GptLike(2, 1000000, 1, 1), "parameters", 4);
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ(*cut, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_FALSE(PartitionLayers(GptLike(2, 1, 1, 1), "parameters", 5).ok());
  EXPECT_FALSE(PartitionLayers(GptLike(2, 1, 1, 1), "balanced", 2).ok());
}

TEST(PipelinePartitionTest, ExplicitCounts) {
  auto cut = PartitionByCounts({1, 3, 2}, 6);
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ(*cut, (std::vector<int>{0, 1, 4, 6}));
  EXPECT_FALSE(PartitionByCounts({1, 3, 1}, 6).ok());
  EXPECT_FALSE(PartitionByCounts({0, 6}, 6).ok());
}

TEST(PipelinePartitionTest, Describe) {
  auto layers = GptLike(2, 10, 5, 1);
  auto lines = DescribePartition(layers, {0, 1, 4});
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "stage 0: embedding (1 layers, 10 parameters)");
  EXPECT_EQ(lines[1], "stage 1: blocks.0 .. head (3 layers, 11 parameters)");
}

}  // namespace
}  // namespace dslaunch::runtime
