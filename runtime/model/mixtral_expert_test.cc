// Mixtral's expert with LoRA (runtime/model/mixtral_expert.h): the adapted
// expert computes PEFT's formula in training and generation, every expert of
// every layer takes the adapter, an expert's adapter starts the same
// whatever experts a rank holds, and merging folds it into the expert's
// weight.
#include "runtime/model/mixtral_expert.h"

#include <ATen/CPUGeneratorImpl.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/model/llama.h"
#include "absl/strings/match.h"
#include "runtime/model/lora.h"
#include "runtime/testing/rank_group.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kHidden = 8, kInner = 12;

// x·Wᵀ + scale·(x·Aᵀ)·Bᵀ, spelled out (Note [LoRA]).
torch::Tensor Adapted(const LoraLinearImpl& p, const torch::Tensor& x) {
  return torch::matmul(x, p.weight.t()) +
         p.adapter_options().scale() * torch::matmul(torch::matmul(x, p.lora_A->weight.t()), p.lora_B->weight.t());
}

void AdaptEveryProjection(MixtralExpert& expert, double alpha) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(7);
  LoraAdapterOptions options;
  options.r = 3;
  options.alpha = alpha;
  torch::NoGradGuard no_grad;
  for (LoraLinear p : {expert.w1, expert.w2, expert.w3}) {
    p->weight.normal_(0, 0.3, generator);
    p->EnableAdapter(options, generator);
    p->lora_B->weight.normal_(0, 0.3, generator);  // not zero: the adapter's product counts
  }
}

TEST(MixtralExpertTest, AnAdaptedExpertComputesPeftsFormulaForwardAndBackward) {
  MixtralExpert expert(kHidden, kInner, /*fused_kernels=*/false);
  AdaptEveryProjection(expert, 6);
  const torch::Tensor x = torch::randn({5, kHidden}, at::make_generator<at::CPUGeneratorImpl>(3)).requires_grad_();

  // Training: w1 and w3 as one stacked product (Note [Stacked projections]).
  torch::Tensor got = expert.forward(x);
  torch::Tensor want =
      Adapted(*expert.w2, torch::silu(Adapted(*expert.w1, x)) * Adapted(*expert.w3, x));
  EXPECT_TRUE(torch::allclose(got, want, 1e-5, 1e-6));
  std::vector<torch::Tensor> inputs = {x};
  for (LoraLinear p : {expert.w1, expert.w2, expert.w3}) {
    inputs.push_back(p->lora_A->weight);
    inputs.push_back(p->lora_B->weight);
  }
  const torch::Tensor upstream = torch::randn_like(want);
  std::vector<torch::Tensor> got_grads = torch::autograd::grad({got}, inputs, {upstream});
  std::vector<torch::Tensor> want_grads = torch::autograd::grad({want}, inputs, {upstream});
  for (size_t i = 0; i < inputs.size(); ++i) {
    EXPECT_TRUE(torch::allclose(got_grads[i], want_grads[i], 1e-5, 1e-6)) << "gradient " << i;
  }
  // The base stays frozen: no gradient reaches it.
  for (LoraLinear p : {expert.w1, expert.w2, expert.w3}) EXPECT_FALSE(p->weight.requires_grad());

  // Generation (no gradient): the projections apart, the same values.
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::allclose(expert.forward(x), want, 1e-5, 1e-6));
}

// testing::TinyLlama (2 layers, hidden 16, FFN 24) with 4 experts, top-2.
LlamaOptions TinyMixtral(int expert_parallel_rank = 0, int expert_parallel_size = 1) {
  LlamaOptions o = testing::TinyLlama();
  o.moe.gating.num_experts = 4;
  o.moe.gating.top_k = 2;
  o.moe.gating.drop_tokens = false;
  o.moe.expert_parallel = ExpertParallelGroup{nullptr, expert_parallel_rank, expert_parallel_size};
  return o;
}

LoraSettings Targets(std::vector<std::string> targets) {
  LoraSettings settings;
  settings.adapter.r = 4;
  settings.adapter.alpha = 8;
  settings.target_modules = std::move(targets);
  return settings;
}

torch::Tensor Parameter(const torch::nn::Module& model, const std::string& name) {
  const torch::Tensor* found = model.named_parameters().find(name);
  EXPECT_NE(found, nullptr) << name;
  return found == nullptr ? torch::Tensor() : found->detach().clone();
}

TEST(MixtralLoraTest, EveryExpertTakesTheAdapter) {
  Llama model(TinyMixtral(), 1);
  model->eval();  // routing without random draws
  const torch::Tensor tokens = (torch::arange(2 * 7) * 5 % 32).view({2, 7});
  torch::Tensor before;
  {
    torch::NoGradGuard no_grad;
    before = model->forward(tokens);
  }
  auto applied = ApplyLora(*model, Targets({"w1", "w2", "w3", "q_proj"}), 5);
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_EQ(applied->adapted_projections, 2 * (4 * 3 + 1));  // per layer: 4 experts × 3, and q_proj
  // w1, w3: A [4, 16] + B [24, 4]; w2: A [4, 24] + B [16, 4]; q: A [4, 16] + B [16, 4].
  EXPECT_EQ(applied->trainable_parameters, 2 * (4 * (2 * (4 * 16 + 24 * 4) + 4 * 24 + 16 * 4) + 4 * 16 + 16 * 4));
  for (const auto& item : model->named_parameters()) {
    EXPECT_EQ(item.value().requires_grad(), IsLoraParameterName(item.key())) << item.key();
  }
  EXPECT_EQ(model->named_parameters().find("model.layers.0.block_sparse_moe.gate.lora_A.weight"), nullptr);
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::equal(model->forward(tokens), before)) << "lora_B starts at zero";

  // all-linear: attention, the router and the experts, as PEFT's (the
  // router is an nn.Linear there).
  Llama all(TinyMixtral(), 1);
  auto all_linear = ApplyLora(*all, Targets({"all-linear"}), 5);
  ASSERT_TRUE(all_linear.ok()) << all_linear.status();
  EXPECT_EQ(all_linear->adapted_projections, 2 * (4 + 1 + 4 * 3));
  EXPECT_THAT(all_linear->adapted_kinds,
              ::testing::ElementsAre("q_proj", "k_proj", "v_proj", "o_proj", "gate", "w1", "w2", "w3"));
}

// The router takes an adapter as PEFT puts one on Mixtral's gate: in fp32,
// its product added to the router's logits, its gradient reached through
// the routing weights; merged, the model computes the same.
TEST(MixtralLoraTest, TheRouterTakesAnAdapterInFloat) {
  Llama model(TinyMixtral(), 1);
  model->to(torch::kBFloat16);
  const torch::Tensor tokens = (torch::arange(2 * 7) * 5 % 32).view({2, 7});
  auto applied = ApplyLora(*model, Targets({"gate"}), 5);
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_EQ(applied->adapted_projections, 2);
  EXPECT_EQ(applied->trainable_parameters, 2 * (4 * 16 + 4 * 4));  // A [4, 16], B [4 experts, 4]
  const auto parameters = model->named_parameters();
  ASSERT_NE(parameters.find("model.layers.0.block_sparse_moe.gate.lora_B.weight"), nullptr);
  const torch::Tensor b = *parameters.find("model.layers.0.block_sparse_moe.gate.lora_B.weight");
  {
    torch::NoGradGuard no_grad;
    for (auto& item : model->named_parameters()) {
      if (absl::StrContains(item.key(), "gate.lora_B")) item.value().normal_(0, 2.0);
    }
  }
  // The router's logits: fp32 whatever the parameters' dtype, W + s·B·A.
  auto* layer = model->model->layers[0]->as<LlamaDecoderLayerImpl>()->block_sparse_moe.get();
  auto* gate = layer->gate->as<LoraLinearImpl>();
  ASSERT_NE(gate, nullptr);
  const torch::Tensor x = torch::randn({5, 16});
  const torch::Tensor merged = gate->weight.to(torch::kFloat) +
                               gate->adapter_options().scale() * torch::matmul(gate->lora_B->weight.to(torch::kFloat),
                                                                               gate->lora_A->weight.to(torch::kFloat));
  const torch::Tensor logits = gate->ForwardInFloat(x.to(torch::kBFloat16));
  EXPECT_EQ(logits.scalar_type(), torch::kFloat);
  EXPECT_TRUE(torch::allclose(logits, torch::matmul(x.to(torch::kBFloat16).to(torch::kFloat), merged.t()), 1e-5, 1e-5));
  // A gradient reaches the adapter through the routing weights.
  model->train();
  model->Loss(tokens, tokens).backward();
  ASSERT_TRUE(b.grad().defined());
  EXPECT_GT(b.grad().abs().sum().item<double>(), 0);
  // Merged into the router's weight, the model routes and computes the same
  // (the merged weight rounded to bf16 once).
  model->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor adapted = model->forward(tokens);
  for (const std::string& name : MergedParameterNames(*model)) {
    if (absl::StrContains(name, "gate.weight")) model->named_parameters().find(name)->copy_(MergedParameter(*model, name));
  }
  for (auto& item : model->named_parameters()) {
    if (absl::StrContains(item.key(), "gate.lora_B")) item.value().zero_();
  }
  EXPECT_TRUE(torch::allclose(model->forward(tokens).to(torch::kFloat), adapted.to(torch::kFloat), 0.05, 0.05));
}

// Expert parallelism: rank 1 of 2 holds experts 2 and 3. Their adapters
// start as the whole model's, and the other adapters' draws do not depend on
// the experts adapted or held.
TEST(MixtralLoraTest, AnExpertsAdapterStartsTheSameWhateverExpertsTheRankHolds) {
  Llama whole(TinyMixtral(), 1);
  Llama half(TinyMixtral(/*expert_parallel_rank=*/1, /*expert_parallel_size=*/2), 1);
  Llama attention_only(TinyMixtral(), 1);
  const LoraSettings settings = Targets({"q_proj", "w2"});
  ASSERT_TRUE(ApplyLora(*whole, settings, 9).ok());
  ASSERT_TRUE(ApplyLora(*half, settings, 9).ok());
  ASSERT_TRUE(ApplyLora(*attention_only, Targets({"q_proj"}), 9).ok());
  EXPECT_EQ(half->named_parameters().find("model.layers.1.block_sparse_moe.experts.0.w2.lora_A.weight"), nullptr);
  for (const std::string name : {"model.layers.0.block_sparse_moe.experts.2.w2.lora_A.weight",
                                 "model.layers.1.block_sparse_moe.experts.3.w2.lora_A.weight"}) {
    EXPECT_TRUE(torch::equal(Parameter(*whole, name), Parameter(*half, name))) << name;
  }
  EXPECT_FALSE(torch::equal(Parameter(*whole, "model.layers.0.block_sparse_moe.experts.2.w2.lora_A.weight"),
                            Parameter(*whole, "model.layers.0.block_sparse_moe.experts.3.w2.lora_A.weight")))
      << "each expert draws its own";
  for (const std::string name : {"model.layers.0.self_attn.q_proj.lora_A.weight",
                                 "model.layers.1.self_attn.q_proj.lora_A.weight"}) {
    EXPECT_TRUE(torch::equal(Parameter(*whole, name), Parameter(*half, name))) << name;
    EXPECT_TRUE(torch::equal(Parameter(*whole, name), Parameter(*attention_only, name))) << name;
  }
}

// Under expert parallelism a target may name an expert another rank holds,
// and the experts of every rank or of none carry adapters: the same verdict
// on every rank, before anything is frozen.
TEST(MixtralLoraTest, UnderExpertParallelismTargetsAreCheckedAgainstEveryRanksExperts) {
  for (int rank : {0, 1}) {
    SCOPED_TRACE(rank);
    Llama model(TinyMixtral(rank, 2), 1);
    auto applied = ApplyLora(*model, Targets({"layers.0.block_sparse_moe.experts.0.w1", "w2"}), 5);
    ASSERT_TRUE(applied.ok()) << applied.status();
    // Rank 0 holds expert 0: its w1 in layer 0, and w2 of experts 0 and 1 in both layers.
    EXPECT_EQ(applied->adapted_projections, rank == 0 ? 1 + 2 * 2 : 2 * 2);
    Llama attention_only(TinyMixtral(rank, 2), 1);  // no rank's experts adapted: accepted
    auto attention = ApplyLora(*attention_only, Targets({"q_proj"}), 5);
    ASSERT_TRUE(attention.ok()) << attention.status();
    EXPECT_EQ(attention->adapted_projections, 2);
    Llama refused(TinyMixtral(rank, 2), 1);  // only rank 1's expert 3 adapted
    auto status = ApplyLora(*refused, Targets({"layers.1.block_sparse_moe.experts.3.w3"}), 5).status();
    EXPECT_THAT(std::string(status.message()),
                HasSubstr("the experts of expert-parallel rank 0 match no target while rank 1's do"));
    for (const auto& p : refused->parameters()) EXPECT_TRUE(p.requires_grad()) << "nothing was frozen";
  }
}

TEST(MixtralLoraTest, MergingFoldsAnExpertsAdapterIntoItsWeight) {
  Llama model(TinyMixtral(), 1);
  ASSERT_TRUE(ApplyLora(*model, Targets({"w2"}), 5).ok());
  const std::string expert = "model.layers.1.block_sparse_moe.experts.3.w2";
  {
    torch::NoGradGuard no_grad;
    model->named_parameters()[expert + ".lora_B.weight"].normal_(0, 0.5);
  }
  const torch::Tensor w = Parameter(*model, expert + ".weight"), a = Parameter(*model, expert + ".lora_A.weight"),
                      b = Parameter(*model, expert + ".lora_B.weight");
  EXPECT_TRUE(torch::allclose(MergedParameter(*model, expert + ".weight"), w + 2.0 * torch::matmul(b, a), 1e-5, 1e-6));
  const std::vector<std::string> names = MergedParameterNames(*model);
  EXPECT_NE(std::find(names.begin(), names.end(), expert + ".weight"), names.end());
  for (const std::string& name : names) EXPECT_FALSE(IsLoraParameterName(name)) << name;
}

}  // namespace
}  // namespace dslaunch::runtime
