// Recorded decode steps (Note [Decode graphs]) on the CPU, through the
// recorder that runs the recorded step again at each replay: every replay
// reads its tokens, positions and cache slots from the recorded step's input
// buffers, so a value taken from anywhere else (fixed when the step was
// recorded) makes later steps wrong. Replayed steps give the eager steps'
// tokens and log-probabilities, for one sequence and for a mixed batch that
// joins and leaves, with the graphs dropped and recorded again.
#include "runtime/generate/decode_graphs.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/generate/generation_engine.h"
#include "runtime/testing/generation_llama.h"
#include "runtime/torch_compat.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;

std::vector<int64_t> GraphPrompt(int64_t length, int64_t salt) {
  std::vector<int64_t> prompt;
  for (int64_t i = 0; i < length; ++i) prompt.push_back((i * 5 + salt * 11 + 1) % 64);
  return prompt;
}

std::vector<GenerationRequest> GraphMixedRequests() {
  std::vector<GenerationRequest> requests;
  for (int64_t i = 0; i < 5; ++i) {
    GenerationRequest request;
    request.prompt = GraphPrompt(3 + 4 * i, i);
    request.max_new_tokens = 9 + 3 * i;
    if (i % 2 == 1) {
      request.sampling.temperature = 0.8;
      request.sampling.top_k = 20;
      request.sampling.seed = 100 + i;
    }
    requests.push_back(request);
  }
  return requests;
}

GenerationEngineOptions GraphEngineOptions(int64_t max_graphs) {
  GenerationEngineOptions options;
  options.block_size = 4;
  options.max_sequences = 3;       // requests wait, join and leave
  options.max_tokens_per_step = 6;  // prompts split over steps
  options.key_length_multiple = 8;  // sequences cross into new graphs
  options.max_cuda_graphs = max_graphs;
  return options;
}

Llama GraphTestModel() {
  Llama model(::dslaunch::runtime::testing::GenerationTestLlama(), /*seed=*/5);
  model->eval();
  return model;
}

TEST(DecodeGraphsTest, ReplayedDecodeStepsGiveTheEagerTokens) {
  Llama model = GraphTestModel();
  auto eager = GenerationEngine::Create(model, GraphEngineOptions(128));
  ASSERT_TRUE(eager.ok()) << eager.status();
  auto expected = (*eager)->GenerateAll(GraphMixedRequests());
  ASSERT_TRUE(expected.ok()) << expected.status();
  EXPECT_EQ((*eager)->Stats().graphed_steps, 0);

  for (int64_t max_graphs : {128, 2}) {
    SCOPED_TRACE(::testing::Message() << "max_cuda_graphs " << max_graphs);
    auto engine = GenerationEngine::Create(model, GraphEngineOptions(max_graphs), RerunRecorder());
    ASSERT_TRUE(engine.ok()) << engine.status();
    auto results = (*engine)->GenerateAll(GraphMixedRequests());
    ASSERT_TRUE(results.ok()) << results.status();
    ASSERT_EQ(results->size(), expected->size());
    for (size_t i = 0; i < results->size(); ++i) {
      SCOPED_TRACE(::testing::Message() << "request " << i);
      EXPECT_EQ((*results)[i].tokens, (*expected)[i].tokens);
      ASSERT_EQ((*results)[i].logprobs.size(), (*expected)[i].logprobs.size());
      for (size_t t = 0; t < (*results)[i].logprobs.size(); ++t) {
        EXPECT_NEAR((*results)[i].logprobs[t], (*expected)[i].logprobs[t], 1e-5);
      }
    }
    const GenerationStats stats = (*engine)->Stats();
    // Most steps decode only; each (sequences, key length) met is recorded.
    EXPECT_GT(stats.graphed_steps, stats.steps / 2);
    EXPECT_GT(stats.graphs_recorded, 3);
    EXPECT_LE(stats.graphs_held, max_graphs);
    if (max_graphs == 2) {
      EXPECT_EQ(stats.graphs_held, 2);
    }
  }
}

TEST(DecodeGraphsTest, OneSequenceReplaysOneGraphPerKeyLengthStep) {
  Llama model = GraphTestModel();
  GenerationRequest request;
  request.prompt = GraphPrompt(5, 2);
  request.max_new_tokens = 30;  // positions 5 .. 34: key lengths 8, 16, 24, 32, 40
  auto eager = GenerationEngine::Create(model, GraphEngineOptions(128));
  ASSERT_TRUE(eager.ok());
  auto expected = (*eager)->GenerateAll({request});
  ASSERT_TRUE(expected.ok()) << expected.status();
  auto engine = GenerationEngine::Create(model, GraphEngineOptions(128), RerunRecorder());
  ASSERT_TRUE(engine.ok());
  auto results = (*engine)->GenerateAll({request});
  ASSERT_TRUE(results.ok()) << results.status();
  EXPECT_EQ((*results)[0].tokens, (*expected)[0].tokens);
  const GenerationStats stats = (*engine)->Stats();
  EXPECT_EQ(stats.graphed_steps, 29);  // every token but the prefill's
  EXPECT_EQ(stats.graphs_recorded, 5);
}

// The real thing: CUDA graphs on a GPU (scripts/gpu-generation-bench.sh
// runs this test too), in fp32 and bf16, with graphs dropped and recorded
// again.
TEST(DecodeGraphsTest, CudaGraphsGiveTheEagerTokensOnAGpu) {
  if (!compat::kHasCudaGraphs || !torch::cuda::is_available()) GTEST_SKIP() << "needs a GPU";
  for (torch::ScalarType dtype : {torch::kFloat, torch::kBFloat16}) {
    for (int64_t max_graphs : {128, 2}) {
      SCOPED_TRACE(::testing::Message() << "dtype " << dtype << " max_cuda_graphs " << max_graphs);
      Llama model = GraphTestModel();
      model->to(torch::kCUDA, dtype);
      auto eager = GenerationEngine::Create(model, GraphEngineOptions(max_graphs));
      ASSERT_TRUE(eager.ok()) << eager.status();
      auto expected = (*eager)->GenerateAll(GraphMixedRequests());
      ASSERT_TRUE(expected.ok()) << expected.status();
      GenerationEngineOptions options = GraphEngineOptions(max_graphs);
      options.cuda_graphs = true;
      auto engine = GenerationEngine::Create(model, options);
      ASSERT_TRUE(engine.ok()) << engine.status();
      auto results = (*engine)->GenerateAll(GraphMixedRequests());
      ASSERT_TRUE(results.ok()) << results.status();
      for (size_t i = 0; i < results->size(); ++i) EXPECT_EQ((*results)[i].tokens, (*expected)[i].tokens) << i;
      EXPECT_GT((*engine)->Stats().graphed_steps, (*engine)->Stats().steps / 2);
    }
  }
}

TEST(DecodeGraphsTest, WhatARecordedStepCannotHoldIsRefusedAtCreate) {
  {
    GenerationEngineOptions options;
    options.cuda_graphs = true;
    auto engine = GenerationEngine::Create(GraphTestModel(), options);
    ASSERT_FALSE(engine.ok());
    EXPECT_THAT(std::string(engine.status().message()), HasSubstr("cuda_graphs"));
  }
  {
    LlamaOptions dynamic = ::dslaunch::runtime::testing::GenerationTestLlama();
    dynamic.rope.scaling.type = RopeScaling::Type::kDynamic;
    dynamic.rope.scaling.factor = 2.0;
    Llama model(dynamic, /*seed=*/5);
    auto engine = GenerationEngine::Create(model, GraphEngineOptions(8), RerunRecorder());
    ASSERT_FALSE(engine.ok());
    EXPECT_EQ(engine.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_THAT(std::string(engine.status().message()), HasSubstr("dynamic"));
  }
  {
    auto engine = GenerationEngine::Create(GraphTestModel(), GraphEngineOptions(0), RerunRecorder());
    ASSERT_FALSE(engine.ok());
    EXPECT_THAT(std::string(engine.status().message()), HasSubstr("max_cuda_graphs"));
  }
}

TEST(DecodeGraphsTest, APromptPieceIsNotADecodeStep) {
  PagedKvCacheOptions options;
  options.layers = 1;
  options.kv_heads = 1;
  options.head_dim = 2;
  options.block_size = 4;
  options.blocks = 4;
  auto cache = PagedKvCache::Create(options);
  ASSERT_TRUE(cache.ok());
  ASSERT_TRUE((*cache)->Reserve(1, 8).ok());
  auto plan = (*cache)->PlanDecodes({{1, 0, 3}});
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(std::string(plan.status().message()), HasSubstr("one token each"));
  plan = (*cache)->PlanDecodes({{1, 5, 1}});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->written, std::vector<int64_t>{plan->visible[5]});
  EXPECT_EQ(plan->ends, std::vector<int64_t>{6});
  EXPECT_EQ(plan->longest, 6);
}

}  // namespace
}  // namespace dslaunch::runtime
