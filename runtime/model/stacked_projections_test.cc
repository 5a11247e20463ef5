// Note [Stacked projections]: one product over the projections' weights (and
// their adapters) gives each projection's forward, and every parameter and
// the input the gradients the separate projections give them.
#include "runtime/model/stacked_projections.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "runtime/testing/qkv_test_projections.h"

namespace dslaunch::runtime {
namespace {

std::vector<LoraLinear> StackTestProjections(bool bias) { return testing::QkvTestProjections(bias, /*seed=*/5); }

void Adapt(LoraLinear& projection, int64_t r, double alpha, double dropout, bool rslora, uint64_t seed) {
  LoraAdapterOptions options;
  options.r = r;
  options.alpha = alpha;
  options.dropout = dropout;
  options.use_rslora = rslora;
  projection->EnableAdapter(options, at::make_generator<at::CPUGeneratorImpl>(seed));
  torch::NoGradGuard no_grad;
  projection->lora_B->weight.normal_();  // B starts at zero; a test wants it to count
}

// What Note [LoRA] says a projection computes, spelled out.
torch::Tensor ByTheFormula(const LoraLinear& p, const torch::Tensor& x, const torch::Tensor& dropped) {
  torch::Tensor y = torch::matmul(x, p->weight.t());
  if (p->bias.defined()) y = y + p->bias;
  if (!p->adapted()) return y;
  return y + torch::matmul(torch::matmul(dropped, p->lora_A->weight.t()), p->lora_B->weight.t()) *
                 p->adapter_options().scale();
}

std::vector<torch::Tensor> Parameters(const std::vector<LoraLinear>& projections) {
  std::vector<torch::Tensor> all;
  for (const LoraLinear& p : projections) {
    for (const torch::Tensor& t : p->parameters()) {
      if (t.requires_grad()) all.push_back(t);
    }
  }
  return all;
}

// The stacked product and the formula's, their gradients for x and every
// trainable parameter under one upstream gradient.
void ExpectStackedEqualsSeparate(std::vector<LoraLinear> projections, const std::string& what) {
  SCOPED_TRACE(what);
  const torch::Tensor x = torch::randn({2, 5, 16}).requires_grad_(true);
  const std::vector<torch::Tensor> parameters = Parameters(projections);
  const torch::Tensor stacked = StackedProduct(projections, x, TensorParallelGroup{});
  int64_t outputs = 0;
  for (const LoraLinear& p : projections) outputs += p->weight.size(0);
  ASSERT_EQ(stacked.sizes(), (std::vector<int64_t>{2, 5, outputs}));
  const torch::Tensor upstream = torch::randn(stacked.sizes());
  std::vector<torch::Tensor> inputs = {x};
  inputs.insert(inputs.end(), parameters.begin(), parameters.end());
  const std::vector<torch::Tensor> stacked_grads = torch::autograd::grad({stacked}, inputs, {upstream});

  std::vector<torch::Tensor> separate;
  for (const LoraLinear& p : projections) separate.push_back(ByTheFormula(p, x, x));
  const torch::Tensor expected = torch::cat(separate, -1);
  const std::vector<torch::Tensor> expected_grads = torch::autograd::grad({expected}, inputs, {upstream});
  EXPECT_TRUE(torch::allclose(stacked, expected, 1e-5, 1e-5)) << (stacked - expected).abs().max();
  ASSERT_EQ(stacked_grads.size(), expected_grads.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    ASSERT_TRUE(stacked_grads[i].defined()) << "input " << i;
    EXPECT_TRUE(torch::allclose(stacked_grads[i], expected_grads[i], 1e-5, 1e-5))
        << "gradient of input " << i << " (0: x), off by " << (stacked_grads[i] - expected_grads[i]).abs().max();
  }
}

TEST(StackedProjectionsTest, OneProductGivesEachProjectionsOutputAndGradients) {
  for (bool bias : {false, true}) {
    ExpectStackedEqualsSeparate(StackTestProjections(bias), bias ? "plain, with biases" : "plain");
  }
}

TEST(StackedProjectionsTest, AdaptersJoinTheProductWithTheirOwnScales) {
  {
    std::vector<LoraLinear> projections = StackTestProjections(false);
    Adapt(projections[0], 4, 8, 0, false, 1);
    Adapt(projections[2], 4, 8, 0, false, 2);
    ExpectStackedEqualsSeparate(projections, "q and v adapted, k not");
  }
  {
    std::vector<LoraLinear> projections = StackTestProjections(true);
    Adapt(projections[0], 2, 8, 0, false, 1);
    Adapt(projections[1], 3, 8, 0, /*rslora=*/true, 2);
    Adapt(projections[2], 4, 16, 0, false, 3);
    ExpectStackedEqualsSeparate(projections, "every one adapted, ranks and scales differing, with biases");
  }
  {
    std::vector<LoraLinear> projections = StackTestProjections(false);
    Adapt(projections[1], 4, 8, 0, false, 1);
    ExpectStackedEqualsSeparate({projections[1]}, "a single adapted projection");
  }
}

TEST(StackedProjectionsTest, DropoutDrawsEachAdaptersMaskInTheProjectionsOrder) {
  std::vector<LoraLinear> projections = StackTestProjections(false);
  for (size_t i = 0; i < projections.size(); ++i) Adapt(projections[i], 4, 8, 0.25, false, i + 1);
  const torch::Tensor x = torch::randn({2, 5, 16});
  torch::manual_seed(11);
  const torch::Tensor stacked = StackedProduct(projections, x, TensorParallelGroup{});
  torch::manual_seed(11);
  std::vector<torch::Tensor> separate;
  for (LoraLinear& p : projections) separate.push_back(p->forward(x));
  EXPECT_TRUE(torch::allclose(stacked, torch::cat(separate, -1), 1e-5, 1e-5))
      << "the masks differ from the separate projections' (drawn in another order?)";
  // The masks are really drawn: without them the product differs.
  for (LoraLinear& p : projections) p->eval();
  EXPECT_FALSE(torch::allclose(StackedProduct(projections, x, TensorParallelGroup{}), stacked, 1e-3, 1e-3));
}

TEST(StackedProjectionsTest, AnAdaptedProjectionAloneIsTheFormula) {
  LoraLinear projection(16, 8, /*bias=*/true);
  Adapt(projection, 4, 32, 0, false, 9);
  const torch::Tensor x = torch::randn({3, 2, 16}).requires_grad_(true);
  const torch::Tensor y = projection->forward(x);
  const torch::Tensor expected = ByTheFormula(projection, x, x);
  ASSERT_EQ(y.sizes(), expected.sizes());
  EXPECT_TRUE(torch::allclose(y, expected, 1e-5, 1e-5));
  const torch::Tensor upstream = torch::randn(y.sizes());
  const std::vector<torch::Tensor> inputs = {x, projection->lora_A->weight, projection->lora_B->weight};
  const auto got = torch::autograd::grad({y}, inputs, {upstream});
  const auto want = torch::autograd::grad({expected}, inputs, {upstream});
  for (size_t i = 0; i < inputs.size(); ++i) EXPECT_TRUE(torch::allclose(got[i], want[i], 1e-5, 1e-5)) << i;
  EXPECT_FALSE(projection->weight.requires_grad()) << "the base stays frozen";
}

// Backward reads the weights themselves, never a stacked copy: a copy would
// hold a whole unit's weights from forward to backward (at ZeRO-3, the
// parameters a unit releases between its uses; for a frozen 7B base, 8 GiB).
// Autograd sees a weight changed after forward only if it saved the weight.
TEST(StackedProjectionsTest, BackwardReadsTheWeightsNotAStackedCopy) {
  std::vector<LoraLinear> projections = StackTestProjections(false);
  const torch::Tensor x = torch::randn({2, 5, 16}, torch::requires_grad());
  const torch::Tensor y = StackedProduct(projections, x, TensorParallelGroup{});
  {
    torch::NoGradGuard no_grad;
    projections[1]->weight.add_(1);
  }
  EXPECT_THROW(y.sum().backward(), c10::Error) << "backward did not read the weight it was given";
}

// A frozen base (LoRA's) needs no input for backward: the product keeps
// none alive (the input changed after forward is no error, and the input's
// gradient is still right); learning weights do read it.
TEST(StackedProjectionsTest, AFrozenBaseKeepsNoInputForBackward) {
  for (bool frozen : {true, false}) {
    std::vector<LoraLinear> projections = StackTestProjections(false);
    for (LoraLinear& p : projections) p->weight.requires_grad_(!frozen);
    const torch::Tensor x = torch::randn({2, 5, 16}, torch::requires_grad());
    const torch::Tensor y = StackedProduct(projections, x, TensorParallelGroup{});
    const torch::Tensor upstream = torch::randn(y.sizes());
    {
      torch::NoGradGuard no_grad;
      x.add_(1);
    }
    if (!frozen) {
      EXPECT_THROW(y.backward(upstream), c10::Error) << "backward did not read the input it was given";
      continue;
    }
    y.backward(upstream);
    std::vector<torch::Tensor> weights;
    for (const LoraLinear& p : projections) weights.push_back(p->weight);
    EXPECT_TRUE(torch::allclose(x.grad(), torch::matmul(upstream, torch::cat(weights)), 1e-5, 1e-6));
  }
}

TEST(StackedProjectionsTest, ProjectionsThatCannotShareAProductAreNotStackable) {
  EXPECT_FALSE(Stackable({}));
  EXPECT_TRUE(Stackable(StackTestProjections(true)));
  EXPECT_FALSE(Stackable({LoraLinear(16, 4, false), LoraLinear(8, 4, false)})) << "two input widths";
  EXPECT_FALSE(Stackable({LoraLinear(16, 4, true), LoraLinear(16, 4, false)})) << "a bias on one only";
  LoraLinear half(16, 4, false);
  half->to(torch::kDouble);
  EXPECT_FALSE(Stackable({LoraLinear(16, 4, false), half})) << "two dtypes";
  LoraLinear quantized(16, 4, false);
  quantized->QuantizeInt8();
  EXPECT_FALSE(Stackable({LoraLinear(16, 4, false), quantized})) << "an int8 projection";
}

}  // namespace
}  // namespace dslaunch::runtime
