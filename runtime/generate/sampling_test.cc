// Token choice: top-k keeps only the k most probable tokens, the repetition
// penalty moves a greedy choice off a seen token, and each out-of-range
// option is refused by name.
#include "runtime/generate/sampling.h"

#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;

TEST(SamplingTest, TopKDrawsOnlyTheKMostProbableTokens) {
  torch::Tensor logits = torch::tensor({0.1, 2.0, 1.5, 0.3, 1.9, -1.0}, torch::kDouble);
  SamplingOptions options;
  options.greedy = false;
  options.temperature = 5.0;  // flat: without top-k every token would be drawn
  options.top_k = 3;
  auto generator = at::make_generator<at::CPUGeneratorImpl>(1);
  std::set<int64_t> drawn;
  for (int i = 0; i < 300; ++i) drawn.insert(SampleToken(logits, options, generator).id);
  EXPECT_EQ(drawn, (std::set<int64_t>{1, 2, 4}));
  options.top_k = 0;
  for (int i = 0; i < 300; ++i) drawn.insert(SampleToken(logits, options, generator).id);
  EXPECT_EQ(drawn.size(), 6u);
}

TEST(SamplingTest, TheRepetitionPenaltyMovesGreedyOffASeenToken) {
  torch::Tensor logits = torch::tensor({1.0, 3.0, 2.5, -0.5}, torch::kDouble);
  SamplingOptions options;
  auto generator = at::make_generator<at::CPUGeneratorImpl>(0);
  EXPECT_EQ(SampleToken(logits, options, generator, {1}).id, 1);  // no penalty: the seen token still wins
  options.repetition_penalty = 1.5;  // 3.0 / 1.5 = 2.0 < 2.5
  SampledToken token = SampleToken(logits, options, generator, {1, 1, 3});
  EXPECT_EQ(token.id, 2);
  // The log-probability is the model's, unpenalised.
  EXPECT_NEAR(token.logprob, torch::log_softmax(logits, 0)[2].item<double>(), 1e-12);
  // A negative seen logit is multiplied: token 3 drops further, nothing else moves.
  logits = torch::tensor({-1.0, -0.9}, torch::kDouble);
  options.repetition_penalty = 1.2;  // -0.9 · 1.2 = -1.08 < -1.0
  EXPECT_EQ(SampleToken(logits, options, generator, {1}).id, 0);
}

TEST(SamplingTest, OutOfRangeOptionsAreRefusedByName) {
  SamplingOptions options;
  EXPECT_TRUE(CheckSamplingOptions(options, "").ok());
  options.greedy = false;
  options.temperature = 0;
  EXPECT_THAT(std::string(CheckSamplingOptions(options, "--").message()), HasSubstr("--temperature must be > 0"));
  options.temperature = 1;
  options.top_k = -1;
  EXPECT_THAT(std::string(CheckSamplingOptions(options, "").message()), HasSubstr("top_k must be >= 0"));
  options.top_k = 0;
  options.top_p = 0;
  EXPECT_THAT(std::string(CheckSamplingOptions(options, "").message()), HasSubstr("top_p must be in (0, 1]"));
  options.top_p = 1;
  options.repetition_penalty = 0;
  EXPECT_THAT(std::string(CheckSamplingOptions(options, "").message()), HasSubstr("repetition_penalty must be > 0"));
  options.repetition_penalty = 1;
  options.top_logprobs = kMaxTopLogprobs + 1;
  EXPECT_THAT(std::string(CheckSamplingOptions(options, "").message()), HasSubstr("top_logprobs must be in [0, 20]"));
}

TEST(SamplingTest, TopLogprobsAreTheModelsMostProbableTokensInOrder) {
  // Tokens 1 and 4 tie: the lower id comes first.
  torch::Tensor logits = torch::tensor({0.1, 2.0, 1.5, 0.3, 2.0, -1.0}, torch::kFloat);
  const torch::Tensor expected = torch::log_softmax(logits.to(torch::kDouble), 0);
  SamplingOptions options;
  options.greedy = false;
  options.temperature = 0.3;
  options.top_k = 2;
  options.repetition_penalty = 1.3;
  options.top_logprobs = 4;
  auto generator = at::make_generator<at::CPUGeneratorImpl>(5);
  const SampledToken token = SampleToken(logits, options, generator, {1});
  // The model's distribution, whatever the sampling options did to the draw.
  const std::vector<TokenLogprob> want = {{1, expected[1].item<double>()}, {4, expected[4].item<double>()},
                                          {2, expected[2].item<double>()}, {3, expected[3].item<double>()}};
  ASSERT_EQ(token.top.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(token.top[i].id, want[i].id) << i;
    EXPECT_NEAR(token.top[i].logprob, want[i].logprob, 1e-12) << i;
  }
  EXPECT_NEAR(token.logprob, expected[token.id].item<double>(), 1e-12);
  // More than the vocabulary: every token once; none asked: none given.
  options.top_logprobs = 20;
  EXPECT_EQ(SampleToken(logits, options, generator).top.size(), 6u);
  options.top_logprobs = 0;
  EXPECT_TRUE(SampleToken(logits, options, generator).top.empty());
}

}  // namespace
}  // namespace dslaunch::runtime
