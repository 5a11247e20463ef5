// The MoE layer: dispatch and combine against a token-by-token reference, the
// auxiliary loss's gradient through RecordLossGradientScale, and the expert-
// parallel parity harness: at ep 2 and 4 over 4 Gloo ranks every rank's
// output and dense gradients equal ep 1's, and every expert's gradient summed
// over its expert-data-parallel group equals ep 1's summed over all ranks —
// capacity-bound and dropless, top-1 and top-2, GPT's and Mixtral's experts,
// with a residual dense expert, and under a skewed router with ranks of very
// different token counts. use_residual and Jitter against references. A
// broken backward exchange makes the harness fail.
//
// Tolerance: 1e-5 relative to each reference tensor's largest magnitude
// (the experts multiply other batches of rows at ep > 1: the same sums in
// other blockings).
#include "runtime/moe/moe_layer.h"

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/moe/expert_exchange.h"
#include "runtime/moe/top_k_gating.h"
#include "runtime/parallel/parallel_state.h"
#include "runtime/testing/expert_parallel_harness.h"

namespace dslaunch::runtime {
namespace {

using testing::BackwardResult;
using testing::CollectGradients;
using testing::CompareBackward;
using testing::ExpertGroupOf;
using testing::InProcessStore;
using testing::RunExpertParallelRanks;

constexpr int64_t kHidden = 8;
constexpr int64_t kExperts = 4;
constexpr double kTolerance = 1e-5;

// Mixtral's expert shape (the model's own, with adapters, is
// runtime/model/mixtral_expert.h): w2(silu(w1(x)) · w3(x)), no biases.
class SwiGluTestExpert : public ExpertMlp {
 public:
  SwiGluTestExpert(int64_t hidden, int64_t inner) {
    auto linear = [](int64_t in, int64_t out) {
      return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false));
    };
    w1 = register_module("w1", linear(hidden, inner));
    w2 = register_module("w2", linear(inner, hidden));
    w3 = register_module("w3", linear(hidden, inner));
  }
  torch::Tensor forward(const torch::Tensor& rows) override {
    return w2->forward(torch::silu(w1->forward(rows)) * w3->forward(rows));
  }
  torch::nn::Linear w1{nullptr}, w2{nullptr}, w3{nullptr};
};

MoeLayerImpl::ExpertFactory Experts(bool swiglu) {
  return [swiglu]() -> std::shared_ptr<ExpertMlp> {
    if (swiglu) return std::make_shared<SwiGluTestExpert>(kHidden, 12);
    return std::make_shared<GeluExpert>(kHidden, 12);
  };
}

// Every parameter drawn from its own name's generator: the same experts at
// every expert-parallel size.
void Initialize(MoeLayerImpl& layer, uint64_t seed) {
  torch::NoGradGuard no_grad;
  for (auto& item : layer.named_parameters()) {
    at::Generator generator = ExpertParameterGenerator(seed, item.key());
    item.value().normal_(0.0, 0.3, generator);
  }
}

// Rank r's tokens: [tokens_of(r), hidden], different on every rank.
torch::Tensor Tokens(int rank, int64_t count) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(100 + rank);
  return torch::randn({count, kHidden}, generator, torch::TensorOptions());
}

double RelativeError(const torch::Tensor& got, const torch::Tensor& want) {
  const double scale = std::max(want.abs().max().item<double>(), 1e-12);
  return (got - want).abs().max().item<double>() / scale;
}

// The mixture's output for each token of `flat`, expert by expert, from
// `routing` (the reference the layer's batched dispatch must equal).
torch::Tensor MixtureByToken(MoeLayerImpl& layer, const torch::Tensor& flat, const Routing& routing, int64_t k) {
  torch::Tensor out = torch::zeros_like(flat);
  for (int64_t t = 0; t < flat.size(0); ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = routing.experts[t][j].item<int64_t>();
      auto expert = std::dynamic_pointer_cast<ExpertMlp>(layer.experts->named_children()[std::to_string(e)]);
      out[t] += routing.weights[t][j] * expert->forward(flat[t].unsqueeze(0)).squeeze(0);
    }
  }
  return out;
}

TEST(MoeLayerTest, EqualsATokenByTokenReference) {
  for (int64_t k : {1, 2}) {
    for (bool swiglu : {false, true}) {
      SCOPED_TRACE(absl::StrCat("k=", k, " swiglu=", swiglu));
      LossGradientScale cell;
      MoeOptions options;
      options.gating = GatingOptions{.num_experts = kExperts, .top_k = k, .min_capacity = 0, .drop_tokens = false};
      MoeLayerImpl layer(kHidden, options, Experts(swiglu), &cell);
      Initialize(layer, 11);
      layer.eval();
      torch::Tensor x = Tokens(0, 10).view({2, 5, kHidden});
      torch::Tensor y = layer.forward(x);

      torch::Tensor flat = x.view({-1, kHidden});
      Routing routing = RouteTokens(torch::nn::functional::linear(flat, layer.gate_weight()), options.gating, false);
      const torch::Tensor want = MixtureByToken(layer, flat, routing, k);
      for (int64_t t = 0; t < flat.size(0); ++t) {
        EXPECT_LT(RelativeError(y.view({-1, kHidden})[t], want[t]), 1e-6) << "token " << t;
      }
    }
  }
}

// DeepSpeed's use_residual: the mixture and a dense expert, mixed per token
// by softmax(coefficient(x)).
TEST(MoeLayerTest, UseResidualMixesADenseExpertByALearnedCoefficient) {
  LossGradientScale cell;
  MoeOptions options;
  options.gating = GatingOptions{.num_experts = kExperts, .top_k = 2, .min_capacity = 0, .drop_tokens = false};
  options.use_residual = true;
  MoeLayerImpl layer(kHidden, options, Experts(true), &cell);
  Initialize(layer, 13);
  layer.eval();
  torch::Tensor flat = Tokens(0, 9);
  torch::Tensor y = layer.forward(flat);
  Routing routing = RouteTokens(torch::nn::functional::linear(flat, layer.gate_weight()), options.gating, false);
  torch::Tensor mixture = MixtureByToken(layer, flat, routing, 2);
  torch::Tensor coefficients = torch::softmax(torch::nn::functional::linear(flat, layer.coefficient->weight,
                                                                            layer.coefficient->bias), -1);
  for (int64_t t = 0; t < flat.size(0); ++t) {
    torch::Tensor want = mixture[t] * coefficients[t][0] + layer.mlp->forward(flat[t].unsqueeze(0)).squeeze(0) *
                                                               coefficients[t][1];
    EXPECT_LT(RelativeError(y[t], want), 1e-6) << "token " << t;
  }
  // The dense expert matters: without it the output is the mixture alone.
  EXPECT_GT(RelativeError(y, mixture), 1e-2);
}

// DeepSpeed's Jitter noisy gate policy: in training the router reads x times
// uniform noise in [1 - 0.01, 1 + 0.01] (drawn from the global generator, so
// a seed replays it); in evaluation it reads x.
TEST(MoeLayerTest, JitterScalesTheRoutersInputInTrainingOnly) {
  LossGradientScale cell;
  MoeOptions options;
  options.gating = GatingOptions{.num_experts = kExperts, .top_k = 1, .min_capacity = 0, .drop_tokens = false,
                                 .use_rts = false, .noisy_gate_policy = NoisyGatePolicy::kJitter};
  options.aux_loss_coef = 0;
  MoeLayerImpl layer(kHidden, options, Experts(false), &cell);
  Initialize(layer, 17);
  torch::Tensor flat = Tokens(0, 64);
  torch::NoGradGuard no_grad;

  torch::manual_seed(9);
  torch::Tensor trained = layer.forward(flat);
  torch::manual_seed(9);
  torch::Tensor noise = torch::rand({flat.size(0), kHidden}) * 0.02 + 0.99;
  Routing jittered =
      RouteTokens(torch::nn::functional::linear(flat * noise, layer.gate_weight()), options.gating, true);
  EXPECT_LT(RelativeError(trained, MixtureByToken(layer, flat, jittered, 1)), 1e-6);
  // The noise changes the gate's weights of the chosen experts (here every
  // token's), so the output is not the noiseless one.
  Routing plain = RouteTokens(torch::nn::functional::linear(flat, layer.gate_weight()), options.gating, true);
  EXPECT_GT(RelativeError(trained, MixtureByToken(layer, flat, plain, 1)), 1e-6);

  layer.eval();
  Routing evaluated = RouteTokens(torch::nn::functional::linear(flat, layer.gate_weight()), options.gating, false);
  EXPECT_LT(RelativeError(layer.forward(flat), MixtureByToken(layer, flat, evaluated, 1)), 1e-6);
}

TEST(MoeLayerTest, AuxiliaryLossGetsTheLossGradientScale) {
  // Top-1, dropless, no noise: training is deterministic.
  MoeOptions options;
  options.gating = GatingOptions{.num_experts = kExperts, .top_k = 1, .drop_tokens = false};
  options.aux_loss_coef = 0.5;
  options.z_loss_coef = 0.25;
  torch::Tensor x = Tokens(0, 12);

  LossGradientScale cell;
  MoeLayerImpl layer(kHidden, options, Experts(false), &cell);
  Initialize(layer, 3);
  torch::Tensor loss = RecordLossGradientScale(layer.forward(x).square().mean(), &cell);
  (loss * 3).backward();  // as the engine scales a loss (1/gas, fp16's scale)

  // The reference adds the weighted auxiliary losses to the loss itself.
  options.aux_loss_coef = options.z_loss_coef = 0;
  MoeLayerImpl reference(kHidden, options, Experts(false), &cell);
  Initialize(reference, 3);
  torch::Tensor out = reference.forward(x);
  Routing routing = RouteTokens(torch::nn::functional::linear(x, reference.gate_weight()), options.gating, true);
  (3 * (out.square().mean() + 0.5 * routing.aux_loss + 0.25 * routing.z_loss)).backward();
  EXPECT_LT(RelativeError(layer.gate_weight().grad(), reference.gate_weight().grad()), 1e-6);
  EXPECT_GT(layer.last_stats().weighted_loss.item<double>(), 0);

  // A backward that does not start at a recorded loss is refused.
  LossGradientScale unrecorded;
  options.aux_loss_coef = 0.5;
  MoeLayerImpl orphan(kHidden, options, Experts(false), &unrecorded);
  EXPECT_THROW(orphan.forward(x).sum().backward(), c10::Error);
}

// Note [Expert row buckets]: padding each expert's rows to a multiple
// changes no output and no gradient (dropless and capacity-bound, top-1 and
// top-2; the noise of top-2's second-expert sampling replayed by seed).
TEST(MoeLayerTest, ExpertRowBucketsChangeNoResult) {
  for (int64_t k : {1, 2}) {
    for (bool drop : {false, true}) {
      SCOPED_TRACE(absl::StrCat("k=", k, " drop_tokens=", drop));
      std::vector<torch::Tensor> reference;
      for (int64_t multiple : {1, 3, 128}) {
        MoeOptions options;
        options.gating = GatingOptions{.num_experts = kExperts, .top_k = k, .capacity_factor = 1.0,
                                       .min_capacity = 0, .drop_tokens = drop};
        options.expert_row_multiple = multiple;
        LossGradientScale cell;
        MoeLayerImpl layer(kHidden, options, Experts(true), &cell);
        Initialize(layer, 7);
        torch::Tensor x = Tokens(0, 23).requires_grad_(true);
        torch::manual_seed(5);
        torch::Tensor y = layer.forward(x);
        RecordLossGradientScale(y.square().mean(), &cell).backward();
        std::vector<torch::Tensor> results{y.detach(), x.grad()};
        for (const auto& item : layer.named_parameters()) results.push_back(item.value().grad());
        if (multiple == 1) {
          reference = results;
          continue;
        }
        ASSERT_EQ(results.size(), reference.size());
        for (size_t i = 0; i < results.size(); ++i) {
          EXPECT_LT(RelativeError(results[i], reference[i]), 1e-6) << "multiple " << multiple << ", tensor " << i;
        }
      }
    }
  }
}

struct Case {
  int64_t k = 1;
  bool drop_tokens = true;
  bool swiglu = false;
  bool skewed = false;  // ranks of 4..64 tokens; a router that sends most to expert 0
  bool residual = false;  // use_residual: a dense expert beside the mixture
};

// Runs the layer on 4 ranks at expert-parallel size `ep`; the input's
// gradient and the output count as dense results.
std::vector<BackwardResult> RunLayer(InProcessStore& store, int attempt, int ep, const Case& c) {
  constexpr int kWorld = 4;
  std::vector<BackwardResult> results(kWorld);
  RunExpertParallelRanks(store, attempt, kWorld, ep, [&](int rank, const ParallelState& parallel) {
    MoeOptions options;
    options.gating = GatingOptions{.num_experts = kExperts,
                                   .top_k = c.k,
                                   .capacity_factor = 1.0,
                                   .min_capacity = 1,
                                   .drop_tokens = c.drop_tokens,
                                   .use_rts = false,
                                   .second_expert_sampling = false};  // no draws: threads share the generator
    options.aux_loss_coef = 0.1;
    options.use_residual = c.residual;
    options.expert_parallel = ExpertGroupOf(parallel);
    LossGradientScale cell;
    MoeLayerImpl layer(kHidden, options, Experts(c.swiglu), &cell);
    Initialize(layer, 21);
    if (c.skewed) {
      torch::NoGradGuard no_grad;
      layer.gate_weight().mul_(0.05);
      layer.gate_weight()[0][0] = 3.0;  // tokens with a positive first feature go to expert 0
    }
    const int64_t count = c.skewed ? std::vector<int64_t>{4, 64, 16, 8}[rank] : 16;
    torch::Tensor x = Tokens(rank, count);
    if (c.skewed) x.select(1, 0).abs_().add_(1);  // every token's first feature positive
    x.requires_grad_(true);
    torch::Tensor out = layer.forward(x);
    torch::Tensor loss = RecordLossGradientScale((out * out).sum(), &cell);
    loss.backward();
    BackwardResult& result = results[rank];
    result.loss = loss.item<double>();
    result.dense["output"] = out.detach().clone();
    result.dense["input"] = x.grad().clone();
    CollectGradients(layer, kExperts, parallel.world(), &result);
  });
  return results;
}

class ExpertParallelParityTest : public ::testing::TestWithParam<Case> {};

TEST_P(ExpertParallelParityTest, EveryExpertParallelSizeEqualsOne) {
  const Case c = GetParam();
  InProcessStore store;
  std::vector<BackwardResult> reference = RunLayer(store, 0, 1, c);
  for (int ep : {2, 4}) {
    std::vector<std::string> bad = CompareBackward(RunLayer(store, ep, ep, c), reference, kTolerance);
    EXPECT_TRUE(bad.empty()) << "ep " << ep << ": " << bad.size() << " mismatches, first: " << bad.front();
  }
}

INSTANTIATE_TEST_SUITE_P(Routings, ExpertParallelParityTest,
                         ::testing::Values(Case{.k = 1, .drop_tokens = true}, Case{.k = 1, .drop_tokens = false},
                                           Case{.k = 2, .drop_tokens = true, .swiglu = true},
                                           Case{.k = 2, .drop_tokens = false, .swiglu = true},
                                           Case{.k = 2, .drop_tokens = false, .skewed = true},
                                           Case{.k = 2, .drop_tokens = false, .residual = true}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           const Case& c = info.param;
                           return absl::StrCat("Top", c.k, c.drop_tokens ? "CapacityBound" : "Dropless",
                                               c.swiglu ? "SwiGlu" : "Gelu", c.skewed ? "Skewed" : "",
                                               c.residual ? "Residual" : "");
                         });

TEST(ExpertParallelParityHarnessTest, ABrokenBackwardExchangeIsCaught) {
  InProcessStore store;
  const Case c{.k = 2, .drop_tokens = false};
  std::vector<BackwardResult> reference = RunLayer(store, 0, 1, c);
  BreakExpertExchangeBackwardForTesting(true);
  std::vector<BackwardResult> broken = RunLayer(store, 1, 2, c);
  BreakExpertExchangeBackwardForTesting(false);
  EXPECT_FALSE(CompareBackward(broken, reference, kTolerance).empty());
}

}  // namespace
}  // namespace dslaunch::runtime
