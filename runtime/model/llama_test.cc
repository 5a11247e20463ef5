// The Llama family's arithmetic, by properties an error in it would break.
// (Logits against an independent PyTorch implementation of Hugging Face's
// Llama: tests/hf/test_llama_reference.sh.)
#include "runtime/model/llama.h"

#include <cmath>
#include <vector>

#include "runtime/model/fused_ops.h"
#include "gtest/gtest.h"

namespace dslaunch::runtime {
namespace {

LlamaOptions SmallLlama() {
  LlamaOptions o;
  o.layers = 2;
  o.hidden = 32;
  o.intermediate = 48;
  o.heads = 4;
  o.kv_heads = 2;
  o.head_dim = 8;
  o.vocab_size = 50;
  o.rope.theta = 10000;
  return o;
}

torch::Tensor Tokens(int64_t batch, int64_t time) {
  return (torch::arange(batch * time) * 7 % 50).view({batch, time});
}

TEST(RotaryEmbeddingTest, AttentionScoresDependOnlyOnTheDistanceBetweenPositions) {
  RopeOptions rope;
  rope.head_dim = 8;
  auto [cos, sin] = RotaryCosSin(rope, 12, torch::kCPU, torch::kDouble);
  torch::Tensor q = torch::randn({8}, torch::kDouble), k = torch::randn({8}, torch::kDouble);
  auto at = [&](const torch::Tensor& x, int64_t p) {
    return ApplyRotary(x.view({1, 1, 1, 8}), cos[p], sin[p]).view({8});
  };
  const double score_3_1 = at(q, 3).dot(at(k, 1)).item<double>();
  const double score_9_7 = at(q, 9).dot(at(k, 7)).item<double>();
  // cos and sin are computed in fp32 (as Hugging Face does), so ~1e-7.
  EXPECT_NEAR(score_3_1, score_9_7, 1e-6);
  EXPECT_NEAR(at(q, 5).norm().item<double>(), q.norm().item<double>(), 1e-6);
  // Rotate-half pairs element i with i + d/2: at position 1 the first
  // frequency (1 rad) turns (q0, q4).
  torch::Tensor turned = at(q, 1);
  EXPECT_NEAR(turned[0].item<double>(), q[0].item<double>() * std::cos(1.0) - q[4].item<double>() * std::sin(1.0), 1e-6);
  EXPECT_NEAR(turned[4].item<double>(), q[4].item<double>() * std::cos(1.0) + q[0].item<double>() * std::sin(1.0), 1e-6);
}

TEST(RotaryEmbeddingTest, ScalingsChangeTheFrequenciesTheWayTheirTypesSay) {
  RopeOptions rope;
  rope.head_dim = 64;
  rope.theta = 500000;
  rope.max_position_embeddings = 128;
  const torch::Tensor base = RotaryInverseFrequencies(rope, 16);
  EXPECT_NEAR(base[1].item<float>(), std::pow(500000.0, -2.0 / 64), 1e-6);

  rope.scaling.type = RopeScaling::Type::kLinear;
  rope.scaling.factor = 4;
  EXPECT_TRUE(torch::allclose(RotaryInverseFrequencies(rope, 16), base / 4));

  rope.scaling.type = RopeScaling::Type::kDynamic;
  EXPECT_TRUE(torch::allclose(RotaryInverseFrequencies(rope, 100), base)) << "within the trained context";
  EXPECT_TRUE((RotaryInverseFrequencies(rope, 1000) < base).index({torch::indexing::Slice(1)}).all().item<bool>());

  rope.scaling.type = RopeScaling::Type::kLlama3;
  rope.scaling.factor = 8;
  rope.scaling.low_freq_factor = 1;
  rope.scaling.high_freq_factor = 4;
  rope.scaling.original_max_position_embeddings = 8192;
  const torch::Tensor llama3 = RotaryInverseFrequencies(rope, 16);
  const torch::Tensor wavelength = 2 * M_PI / base;
  for (int64_t i = 0; i < 32; ++i) {
    const double w = wavelength[i].item<double>(), f = base[i].item<double>(), g = llama3[i].item<double>();
    if (w < 8192.0 / 4) {
      EXPECT_NEAR(g, f, 1e-6 * f) << i << ": short wavelengths stay";
    } else if (w > 8192.0) {
      EXPECT_NEAR(g, f / 8, 1e-6 * f) << i << ": long ones are divided by the factor";
    } else {
      EXPECT_TRUE(g < f && g > f / 8) << i << ": between, interpolated";
    }
  }
}

TEST(LlamaTest, GroupedQueryAttentionEqualsFullAttentionWithRepeatedKeyValueHeads) {
  torch::NoGradGuard no_grad;
  LlamaOptions grouped_options = SmallLlama();
  Llama grouped(grouped_options, 3);
  LlamaOptions full_options = SmallLlama();
  full_options.kv_heads = full_options.heads;
  Llama full(full_options, 4);
  // Copy every weight; k and v get each key/value head repeated for its
  // group of query heads (kv head j serves query heads 2j and 2j + 1).
  auto full_parameters = full->named_parameters();
  for (const auto& item : grouped->named_parameters()) {
    torch::Tensor value = item.value();
    if (item.key().find("k_proj") != std::string::npos || item.key().find("v_proj") != std::string::npos) {
      value = value.view({2, 1, 8, 32}).expand({2, 2, 8, 32}).reshape({32, 32});
    }
    full_parameters[item.key()].copy_(value);
  }
  torch::Tensor tokens = Tokens(2, 9);
  EXPECT_TRUE(torch::allclose(grouped->forward(tokens), full->forward(tokens), 1e-5, 1e-5));
}

TEST(LlamaTest, IsCausalAndTiedHeadsUseTheEmbedding) {
  torch::NoGradGuard no_grad;
  LlamaOptions options = SmallLlama();
  options.tie_word_embeddings = true;
  Llama llama(options, 5);
  EXPECT_FALSE(llama->lm_head);
  for (const auto& item : llama->named_parameters()) EXPECT_EQ(item.key().rfind("lm_head", 0), std::string::npos);
  torch::Tensor tokens = Tokens(1, 8);
  torch::Tensor changed = tokens.clone();
  changed[0][5] = 1;
  torch::Tensor a = llama->forward(tokens), b = llama->forward(changed);
  EXPECT_TRUE(torch::equal(a.narrow(1, 0, 5), b.narrow(1, 0, 5)));
  EXPECT_FALSE(torch::allclose(a.narrow(1, 5, 1), b.narrow(1, 5, 1)));
}

TEST(LlamaTest, RmsNormKeepsItsStatisticsInFloat32) {
  torch::NoGradGuard no_grad;
  LlamaRmsNorm norm(4, 1e-6);
  norm->weight.copy_(torch::tensor({1.0, 2.0, 0.5, 1.0}));
  torch::Tensor x = torch::tensor({{3.0, -1.0, 2.0, 5.0}});
  const double rms = std::sqrt((9.0 + 1 + 4 + 25) / 4 + 1e-6);
  torch::Tensor expected = torch::tensor({{3.0 / rms, -2.0 / rms, 1.0 / rms, 5.0 / rms}});
  EXPECT_TRUE(torch::allclose(norm->forward(x), expected, 1e-6, 1e-6));
  // In bf16 the statistics are not taken in bf16: large rows do not overflow.
  torch::Tensor big = torch::full({1, 4}, 3e5, torch::kBFloat16);
  norm->to(torch::kBFloat16);
  EXPECT_TRUE(torch::isfinite(norm->forward(big)).all().item<bool>());
}

TEST(LlamaTest, TheLossIgnoresTargetsOfMinus100) {
  LlamaOptions options = SmallLlama();
  Llama llama(options, 6);
  torch::Tensor tokens = Tokens(1, 8);
  torch::Tensor targets = tokens.roll(-1, 1);
  torch::Tensor masked = targets.clone();
  masked.narrow(1, 0, 4).fill_(-100);
  torch::Tensor logits = llama->forward(tokens).view({8, 50});
  torch::Tensor expected = torch::nn::functional::cross_entropy(logits.narrow(0, 4, 4), targets.view({8}).narrow(0, 4, 4));
  EXPECT_NEAR(llama->Loss(tokens, masked).item<double>(), expected.item<double>(), 1e-6);
}

TEST(LlamaTest, ActivationCheckpointingGivesTheSameGradients) {
  LlamaOptions options = SmallLlama();
  Llama plain(options, 8);
  options.checkpointed_blocks = 2;
  Llama checkpointed(options, 8);
  torch::Tensor tokens = Tokens(2, 8);
  plain->train();
  checkpointed->train();
  plain->Loss(tokens, tokens.roll(-1, 1)).backward();
  checkpointed->Loss(tokens, tokens.roll(-1, 1)).backward();
  auto a = plain->named_parameters(), b = checkpointed->named_parameters();
  for (const auto& item : a) {
    EXPECT_TRUE(torch::allclose(item.value().grad(), b[item.key()].grad(), 1e-5, 1e-6)) << item.key();
  }
}

TEST(LlamaTest, PackedRecordsComputeWhatEachComputesAlone) {
  Llama llama(SmallLlama(), 10);
  torch::NoGradGuard no_grad;
  // Row: record A (5 tokens), record B (4 tokens), 3 padding positions.
  const torch::Tensor a = Tokens(1, 5), b = (Tokens(1, 4) + 3) % 50;
  const torch::Tensor packed = torch::cat({a, b, torch::zeros({1, 3}, torch::kLong)}, 1);
  const torch::Tensor positions =
      torch::cat({torch::arange(5), torch::arange(4), torch::zeros({3}, torch::kLong)}).view({1, 12});
  const torch::Tensor segments = torch::tensor({1, 1, 1, 1, 1, 2, 2, 2, 2, 0, 0, 0}, torch::kLong).view({1, 12});
  const torch::Tensor logits = llama->forward(packed, positions, segments);
  EXPECT_TRUE(torch::allclose(logits.narrow(1, 0, 5), llama->forward(a), 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(logits.narrow(1, 5, 4), llama->forward(b), 1e-5, 1e-5));
  EXPECT_FALSE(torch::isnan(logits).any().item<bool>()) << "padding rows see themselves";
  // Without the mask, B would attend to A: the test would catch a mask that does nothing.
  EXPECT_FALSE(torch::allclose(llama->forward(packed).narrow(1, 5, 4), llama->forward(b), 1e-3, 1e-3));

  torch::Tensor targets =
      torch::cat({a.roll(-1, 1), b.roll(-1, 1), torch::full({1, 3}, -100, torch::kLong)}, 1);
  targets.index_put_({0, 4}, -100);
  targets.index_put_({0, 8}, -100);
  const double packed_loss = llama->BatchLoss(TokenBatch{packed, targets, positions, segments}).item<double>();
  torch::Tensor ta = a.roll(-1, 1), tb = b.roll(-1, 1);
  ta.index_put_({0, 4}, -100);
  tb.index_put_({0, 3}, -100);
  const double sum = llama->Loss(a, ta).item<double>() * 4 + llama->Loss(b, tb).item<double>() * 3;
  EXPECT_NEAR(packed_loss, sum / 7, 1e-5) << "the mean over the 7 labels of both records";
}

// The fused CUDA kernels (RMSNorm, SwiGLU, cross-entropy with ignored
// targets) against the LibTorch path, on the whole model: the loss and
// every parameter's gradient, in fp32 and bf16. Runs where a GPU is.
TEST(LlamaTest, FusedKernelsGiveLibTorchsLossAndGradientsOnTheGpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  if (!FusedKernelsBuilt()) GTEST_SKIP() << "built without the CUDA kernels";
  for (torch::ScalarType type : {torch::kFloat, torch::kBFloat16}) {
    LlamaOptions options = SmallLlama();
    options.hidden = 64;
    options.intermediate = 176;
    options.head_dim = 16;
    Llama plain(options, 5);
    options.fused_kernels = true;
    Llama fused(options, 5);
    torch::Tensor tokens = Tokens(4, 24).cuda();
    torch::Tensor targets = tokens.roll(-1, 1);
    targets.index_put_({torch::indexing::Slice(), torch::indexing::Slice(0, 5)}, -100);  // a prompt
    std::vector<torch::Tensor> losses;
    for (Llama* model : {&plain, &fused}) {
      (*model)->to(torch::kCUDA, type);
      losses.push_back((*model)->Loss(tokens, targets));
      losses.back().backward();
    }
    const double tolerance = type == torch::kFloat ? 1e-5 : 2e-2;
    EXPECT_NEAR(losses[0].item<double>(), losses[1].item<double>(), tolerance * losses[0].item<double>());
    auto plain_parameters = plain->named_parameters(), fused_parameters = fused->named_parameters();
    for (const auto& item : plain_parameters) {
      torch::Tensor a = item.value().grad().to(torch::kDouble), b = fused_parameters[item.key()].grad().to(torch::kDouble);
      const double scale = a.abs().max().item<double>();
      ASSERT_GT(scale, 0) << item.key();
      EXPECT_LE((a - b).abs().max().item<double>(), (type == torch::kFloat ? 1e-4 : 5e-2) * scale)
          << item.key() << " in " << c10::toString(type);
    }
  }
}

TEST(LlamaTest, ASequenceLongerThanTheSlidingWindowIsRefused) {
  LlamaOptions options = SmallLlama();
  options.sliding_window = 4;
  Llama llama(options, 9);
  EXPECT_THROW(llama->forward(Tokens(1, 5)), c10::Error);
  EXPECT_NO_THROW(llama->forward(Tokens(1, 4)));
}

}  // namespace
}  // namespace dslaunch::runtime
