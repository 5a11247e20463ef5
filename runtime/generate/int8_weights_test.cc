// Note [Int8 weights]: per-row int8 values are within half a step of the
// weights, the projections' memory drops to about a quarter (fp32), the
// cached generation path still agrees with the training forward, and the
// logits of a tiny random Llama move by a few percent of their range; a LoRA
// adapter is merged into its projection before the projection is rounded.
#include "runtime/generate/int8_weights.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/generate/cached_forward_probe.h"
#include "runtime/generate/generation_engine.h"

namespace dslaunch::runtime {
namespace {

LlamaOptions Int8Llama() {
  LlamaOptions options;
  options.layers = 2;
  options.hidden = 64;
  options.intermediate = 128;
  options.heads = 8;
  options.kv_heads = 4;
  options.head_dim = 8;
  options.vocab_size = 96;
  options.qkv_bias = true;
  options.initializer_range = 0.2;
  options.rope.max_position_embeddings = 128;
  return options;
}

TEST(Int8WeightsTest, RowsAreWithinHalfAStepAndTheMemoryIsAQuarter) {
  torch::NoGradGuard no_grad;
  LoraLinear projection(16, 8, /*bias=*/true);
  const torch::Tensor before = projection->weight.detach().clone();
  const torch::Tensor x = torch::randn({3, 16});
  const torch::Tensor y_float = projection->forward(x);
  projection->QuantizeInt8();
  ASSERT_TRUE(projection->int8());
  EXPECT_EQ(projection->weight.numel(), 0) << "the float weight's memory stays";
  EXPECT_EQ(projection->weight_int8.scalar_type(), torch::kChar);
  const torch::Tensor step = projection->weight_scale.unsqueeze(1);
  const torch::Tensor back = projection->weight_int8.to(torch::kFloat) * step;
  EXPECT_TRUE(((back - before).abs() <= step / 2 + 1e-7).all().item<bool>());
  EXPECT_EQ(projection->weight_int8.abs().amax(1).min().item<int>(), 127) << "each row uses the whole range";
  const torch::Tensor y_int8 = projection->forward(x);
  EXPECT_LT((y_int8 - y_float).abs().max().item<double>(), 0.02 * y_float.abs().max().item<double>());
}

TEST(Int8WeightsTest, AQuantizedModelStillAgreesWithItselfAndMovesLogitsByAFewPercent) {
  torch::NoGradGuard no_grad;
  Llama whole(Int8Llama(), /*seed=*/4);
  Llama quantized(Int8Llama(), /*seed=*/4);
  whole->eval();
  quantized->eval();
  auto report = QuantizeWeightsInt8(quantized);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->projections, 2 * 7 + 1) << "7 per layer and the untied head";
  EXPECT_LT(report->int8_bytes * 3, report->float_bytes) << report->int8_bytes << " of " << report->float_bytes;
  std::vector<int64_t> tokens;
  for (int64_t i = 0; i < 24; ++i) tokens.push_back((i * 13 + 5) % 96);
  // The generation path agrees with the training forward of the int8 model.
  auto probe = ProbeCachedForward(quantized, tokens);
  ASSERT_TRUE(probe.ok()) << probe.status();
  const torch::Tensor ids = torch::tensor(tokens, torch::kLong).view({1, -1});
  const torch::Tensor a = whole->forward(ids)[0], b = quantized->forward(ids)[0];
  const double relative = ((b - a).abs().max() / a.abs().max()).item<double>();
  const double agreement = (b.argmax(1) == a.argmax(1)).to(torch::kFloat).mean().item<double>();
  std::printf("int8 on the tiny Llama: max |logit difference| %.4f of the largest |logit|, top-1 agreement %.3f\n",
              relative, agreement);
  EXPECT_LT(relative, 0.1);
  EXPECT_GE(agreement, 0.9);
  EXPECT_GT(relative, 0.0) << "nothing was quantized";
}

// The adapter a generation run puts on (dsgen --adapter --int8) goes into its
// projection's weight before the weight is rounded: the model quantizes to
// exactly what the merged (exported) model quantizes to.
TEST(Int8WeightsTest, AnAdapterIsMergedIntoItsProjectionBeforeTheProjectionIsQuantized) {
  torch::NoGradGuard no_grad;
  auto q_proj = [](Llama& model) { return model->model->layers[0]->as<LlamaDecoderLayerImpl>()->self_attn->q_proj; };
  Llama adapted(Int8Llama(), /*seed=*/4);
  adapted->eval();
  LoraAdapterOptions lora;
  lora.r = 4;
  lora.alpha = 8;
  q_proj(adapted)->EnableAdapter(lora, at::make_generator<at::CPUGeneratorImpl>(1));
  // B starts at zero (the adapter then changes nothing): give it values.
  q_proj(adapted)->lora_B->weight.normal_(0, 0.5, at::make_generator<at::CPUGeneratorImpl>(2));
  std::vector<int64_t> tokens;
  for (int64_t i = 0; i < 16; ++i) tokens.push_back((i * 7 + 3) % 96);
  const torch::Tensor ids = torch::tensor(tokens, torch::kLong).view({1, -1});
  const torch::Tensor with_adapter = adapted->forward(ids);

  // What an export would hold: the merged weight, no adapter.
  Llama exported(Int8Llama(), /*seed=*/4);
  exported->eval();
  q_proj(exported)->weight.copy_(q_proj(adapted)->MergedWeight());
  Llama plain(Int8Llama(), /*seed=*/4);
  plain->eval();
  EXPECT_FALSE(torch::allclose(plain->forward(ids), with_adapter, 1e-3, 1e-3)) << "the adapter changes nothing";
  EXPECT_TRUE(torch::allclose(exported->forward(ids), with_adapter, 1e-5, 1e-5));

  auto report = QuantizeWeightsInt8(adapted);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->adapters_merged, 1);
  EXPECT_EQ(report->projections, 2 * 7 + 1);
  EXPECT_FALSE(q_proj(adapted)->adapted());
  for (const auto& parameter : adapted->named_parameters()) {
    EXPECT_EQ(parameter.key().find("lora_"), std::string::npos) << parameter.key();
  }
  auto exported_report = QuantizeWeightsInt8(exported);
  ASSERT_TRUE(exported_report.ok()) << exported_report.status();
  EXPECT_EQ(exported_report->adapters_merged, 0);
  EXPECT_TRUE(torch::equal(q_proj(adapted)->weight_int8, q_proj(exported)->weight_int8));
  EXPECT_TRUE(torch::equal(q_proj(adapted)->weight_scale, q_proj(exported)->weight_scale));
  EXPECT_TRUE(torch::equal(adapted->forward(ids), exported->forward(ids)));
}

TEST(Int8WeightsTest, NoAdapterToMergeAndAnAdapterOnInt8AreRefused) {
  LoraLinear projection(16, 8, /*bias=*/false);
  try {
    projection->MergeAdapter();
    ADD_FAILURE() << "merged an adapter that is not there";
  } catch (const c10::Error& e) {
    EXPECT_THAT(e.what_without_backtrace(), ::testing::HasSubstr("no LoRA adapter to merge"));
  }
  projection->QuantizeInt8();
  try {
    projection->EnableAdapter(LoraAdapterOptions{}, at::make_generator<at::CPUGeneratorImpl>(1));
    ADD_FAILURE() << "an adapter went on an int8 projection";
  } catch (const c10::Error& e) {
    EXPECT_THAT(e.what_without_backtrace(), ::testing::HasSubstr("int8 projection"));
  }
}

}  // namespace
}  // namespace dslaunch::runtime
