// Note [Probe logits]: the cached generation forward agrees with the training
// forward on a sound model, and the probe refuses one where they part: a
// dynamic-NTK model past its context, where cached keys keep the rotation of
// their own length (as Hugging Face's cached generate) while the training
// forward rotates every position by the whole length.
#include "runtime/generate/cached_forward_probe.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/testing/generation_llama.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;

LlamaOptions ProbeModelOptions() {
  LlamaOptions options = ::dslaunch::runtime::testing::GenerationTestLlama();
  options.rope.max_position_embeddings = 64;
  return options;
}

std::vector<int64_t> ProbeTokens(int64_t n) {
  std::vector<int64_t> tokens;
  for (int64_t i = 0; i < n; ++i) tokens.push_back((i * 11 + 5) % 64);
  return tokens;
}

TEST(CachedForwardProbeTest, ASoundModelPassesWithinTheStatedTolerance) {
  for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
    SCOPED_TRACE(c10::toString(dtype));
    Llama model(ProbeModelOptions(), /*seed=*/3);
    model->to(dtype);
    auto report = ProbeCachedForward(model, ProbeTokens(13));
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_EQ(report->positions, 13);
    EXPECT_GT(report->largest_logit, 0.0);
    EXPECT_LE(report->max_abs_difference, report->tolerance);
    EXPECT_DOUBLE_EQ(report->tolerance, ProbeRelativeTolerance(dtype) * std::max(1.0, report->largest_logit));
  }
}

TEST(CachedForwardProbeTest, ACachedPathThatPartsFromTheTrainingForwardIsRefused) {
  LlamaOptions options = ProbeModelOptions();
  options.rope.max_position_embeddings = 4;
  options.rope.scaling.type = RopeScaling::Type::kDynamic;
  options.rope.scaling.factor = 8.0;
  Llama model(options, /*seed=*/3);
  auto report = ProbeCachedForward(model, ProbeTokens(24));
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(report.status().message()),
              HasSubstr("the cached generation forward disagrees with the training forward"));
  EXPECT_THAT(std::string(report.status().message()), HasSubstr("refusing to generate"));
}

TEST(CachedForwardProbeTest, AOneTokenProbeIsRefused) {
  Llama model(ProbeModelOptions(), /*seed=*/3);
  EXPECT_EQ(ProbeCachedForward(model, {1}).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dslaunch::runtime
