// Note [Tensor-parallel generation]: a Llama split over 2 ranks (Gloo, on
// threads) generates, on every rank, the tokens the whole model generates
// on one: greedy, sampled with seeds, top-k, top-p and a repetition penalty,
// in a batch with prompts split over steps; log-probabilities agree within
// rounding. GQA with one key/value head per rank, and a vocabulary the
// ranks' slices pad; with int8 weights, the whole int8 model's tokens.
#include <vector>

#include "gtest/gtest.h"
#include "runtime/generate/generation_engine.h"
#include "runtime/generate/int8_weights.h"
#include "runtime/testing/rank_group.h"
#include "runtime/testing/generation_llama.h"

namespace dslaunch::runtime {
namespace {

// 37: padded to the ranks' slices.
LlamaOptions SplitLlama() { return ::dslaunch::runtime::testing::GenerationTestLlama(8, 2, 4, 37); }

std::vector<GenerationRequest> SplitRequests() {
  std::vector<GenerationRequest> requests;
  const int64_t lengths[] = {1, 4, 13, 6};
  for (int64_t i = 0; i < 4; ++i) {
    GenerationRequest request;
    for (int64_t p = 0; p < lengths[i]; ++p) request.prompt.push_back((p * 5 + i * 11 + 2) % 37);
    request.max_new_tokens = 7 + i;
    if (i % 2 == 1) {
      request.sampling.greedy = false;
      request.sampling.temperature = 0.9;
      request.sampling.top_k = i == 1 ? 8 : 0;
      request.sampling.top_p = i == 3 ? 0.85 : 1.0;
      request.sampling.seed = 40 + i;
    }
    if (i == 2) request.sampling.repetition_penalty = 1.2;
    requests.push_back(request);
  }
  return requests;
}

std::vector<GenerationResult> Generate(const LlamaOptions& options, bool int8 = false) {
  torch::NoGradGuard no_grad;
  Llama model(options, /*seed=*/9);
  model->eval();
  if (int8) {
    auto report = QuantizeWeightsInt8(model);
    EXPECT_TRUE(report.ok()) << report.status();
    if (!report.ok()) return {};
  }
  GenerationEngineOptions engine_options;
  engine_options.max_sequences = 3;
  engine_options.max_tokens_per_step = 6;  // prompts split over steps beside decodes
  engine_options.block_size = 4;
  engine_options.cache_positions = 256;
  auto engine = GenerationEngine::Create(model, engine_options);
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return {};
  auto results = (*engine)->GenerateAll(SplitRequests());
  EXPECT_TRUE(results.ok()) << results.status();
  return results.ok() ? *results : std::vector<GenerationResult>{};
}

// The whole model's results and each of 2 ranks' with `base` split.
void ExpectTwoRanksGenerateWhatTheWholeModelDoes(const LlamaOptions& base, bool int8) {
  const std::vector<GenerationResult> whole = Generate(base, int8);
  ASSERT_EQ(whole.size(), 4u);
  std::vector<std::vector<GenerationResult>> split(2);
  testing::InProcessStore store;
  store.RunRanks(2, [&](int rank, Communicator& comm) {
    LlamaOptions options = base;
    options.tensor_parallel = TensorParallelGroup{&comm, rank, 2, false};
    split[rank] = Generate(options, int8);
  });
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_EQ(split[rank].size(), whole.size()) << "rank " << rank;
    for (size_t i = 0; i < whole.size(); ++i) {
      SCOPED_TRACE(::testing::Message() << "rank " << rank << " request " << i);
      EXPECT_EQ(split[rank][i].tokens, whole[i].tokens);
      EXPECT_EQ(split[rank][i].finished, whole[i].finished);
      ASSERT_EQ(split[rank][i].logprobs.size(), whole[i].logprobs.size());
      for (size_t t = 0; t < whole[i].logprobs.size(); ++t) {
        EXPECT_NEAR(split[rank][i].logprobs[t], whole[i].logprobs[t], 1e-5);
      }
    }
  }
}

TEST(TensorParallelGenerationTest, TwoRanksGenerateWhatTheWholeModelDoes) {
  ExpectTwoRanksGenerateWhatTheWholeModelDoes(SplitLlama(), /*int8=*/false);
}

// Note [Int8 weights]: each rank's int8 values are its slice of the whole
// model's (a row-parallel scale is the whole row's), so the split model
// generates what the whole int8 model does.
TEST(TensorParallelGenerationTest, TwoRanksWithInt8WeightsGenerateWhatTheWholeInt8ModelDoes) {
  ExpectTwoRanksGenerateWhatTheWholeModelDoes(SplitLlama(), /*int8=*/true);
}

}  // namespace
}  // namespace dslaunch::runtime
