// Note [Joined projections]: joined weights are the same parameters (views of
// one tensor, the same values, no added tensor in the module), the joined
// product equals the separate ones, and it stands aside whenever it would be
// wrong: under autograd, after an adapter is added, after the module moved.
#include "runtime/model/joined_projections.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "runtime/model/llama.h"
#include "runtime/testing/generation_llama.h"
#include "runtime/testing/qkv_test_projections.h"

namespace dslaunch::runtime {
namespace {

std::vector<LoraLinear> ThreeProjections(bool bias) { return testing::QkvTestProjections(bias, /*seed=*/3); }

TEST(JoinedProjectionsTest, TheProjectionsBecomeViewsAndTheProductEqualsTheirs) {
  for (bool bias : {false, true}) {
    SCOPED_TRACE(bias ? "with biases" : "without biases");
    std::vector<LoraLinear> projections = ThreeProjections(bias);
    const torch::Tensor x = torch::randn({2, 5, 16});
    std::vector<torch::Tensor> before, weights;
    for (LoraLinear& p : projections) {
      before.push_back(p->forward(x).detach());
      weights.push_back(p->weight.detach().clone());
    }
    const torch::Tensor parameter = projections[1]->weight;  // the module's handle
    JoinedProjections joined;
    ASSERT_TRUE(joined.Join(projections));
    EXPECT_TRUE(parameter.is_alias_of(projections[0]->weight)) << "the parameter is the same and shares the joined storage";
    torch::NoGradGuard no_grad;
    ASSERT_TRUE(joined.usable());
    const std::vector<torch::Tensor> after = joined.Forward(x);
    ASSERT_EQ(after.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_TRUE(torch::equal(projections[i]->weight, weights[i])) << i;
      EXPECT_TRUE(torch::allclose(after[i], before[i], 1e-5, 1e-5)) << i;
      EXPECT_TRUE(torch::allclose(projections[i]->forward(x), before[i], 1e-5, 1e-5)) << i;
    }
    // An in-place change to a projection is a change to the joined product.
    projections[2]->weight.zero_();
    EXPECT_EQ(joined.Forward(x)[2].abs().max().item<float>(), bias ? projections[2]->bias.abs().max().item<float>() : 0.f);
  }
}

TEST(JoinedProjectionsTest, ItStandsAsideWhereItWouldBeWrong) {
  {
    std::vector<LoraLinear> projections = ThreeProjections(false);
    JoinedProjections joined;
    ASSERT_TRUE(joined.Join(projections));
    EXPECT_FALSE(joined.usable()) << "under autograd the projections' weights would get no gradient";
    torch::NoGradGuard no_grad;
    EXPECT_TRUE(joined.usable());
    projections[1]->EnableAdapter(LoraAdapterOptions{}, at::detail::getDefaultCPUGenerator());
    EXPECT_FALSE(joined.usable()) << "an adapter added after joining";
  }
  {
    std::vector<LoraLinear> projections = ThreeProjections(true);
    JoinedProjections joined;
    ASSERT_TRUE(joined.Join(projections));
    projections[0]->to(torch::kDouble);  // a new tensor for that weight
    torch::NoGradGuard no_grad;
    EXPECT_FALSE(joined.usable()) << "a projection whose weight is no longer a view of the joined one";
  }
  {
    std::vector<LoraLinear> projections = ThreeProjections(false);
    projections[2]->EnableAdapter(LoraAdapterOptions{}, at::detail::getDefaultCPUGenerator());
    JoinedProjections joined;
    EXPECT_FALSE(joined.Join(projections)) << "an adapted projection is not joined";
    std::vector<LoraLinear> mixed = {LoraLinear(8, 4, true), LoraLinear(8, 4, false)};
    EXPECT_FALSE(joined.Join(mixed)) << "one with a bias, one without";
  }
}

TEST(JoinedProjectionsTest, AJoinedLlamaKeepsItsParametersAndItsLogits) {
  LlamaOptions options = ::dslaunch::runtime::testing::GenerationTestLlama();
  Llama llama(options, /*seed=*/4);
  llama->eval();
  const torch::Tensor tokens = torch::randint(0, options.vocab_size, {2, 9});
  torch::NoGradGuard no_grad;
  const torch::Tensor logits = llama->forward(tokens, {}, {});
  std::vector<std::pair<std::string, torch::Tensor>> before;
  for (const auto& item : llama->named_parameters()) before.emplace_back(item.key(), item.value().clone());
  llama->JoinProjections();
  const auto after = llama->named_parameters();
  ASSERT_EQ(after.size(), before.size());
  for (const auto& [name, value] : before) EXPECT_TRUE(torch::equal(after[name], value)) << name;
  EXPECT_TRUE(after["model.layers.0.self_attn.k_proj.weight"].is_alias_of(after["model.layers.0.self_attn.q_proj.weight"]));
  EXPECT_TRUE(after["model.layers.1.mlp.up_proj.weight"].is_alias_of(after["model.layers.1.mlp.gate_proj.weight"]));
  EXPECT_TRUE(torch::allclose(llama->forward(tokens, {}, {}), logits, 1e-5, 1e-5));
}

}  // namespace
}  // namespace dslaunch::runtime
