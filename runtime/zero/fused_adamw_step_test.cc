// The fused multi-tensor AdamW kernel against torch::optim::AdamW / Adam on
// the same GPU, over tensors of awkward sizes (one element, a chunk and one,
// several chunks), with bf16 gradients and bf16 parameter copies as the
// engine uses them. Skipped without a GPU.
#include "runtime/zero/fused_adamw_step.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

namespace dslaunch::runtime {
namespace {

class FusedAdamWTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
    if (!FusedAdamWAvailable()) GTEST_SKIP() << "built without the CUDA kernels";
    torch::manual_seed(3);
  }
};

TEST_P(FusedAdamWTest, StepsManyTensorsLikeLibTorch) {
  const bool decoupled = GetParam();
  const std::vector<int64_t> sizes = {1, 100, 65536, 65539, 200003};
  const auto f32 = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kFloat);
  std::vector<torch::Tensor> reference;
  std::vector<FusedAdamWEntry> entries;
  for (int64_t n : sizes) {
    torch::Tensor master = torch::randn({n}, f32);
    reference.push_back(master.clone().requires_grad_(true));
    entries.push_back(FusedAdamWEntry{master, torch::Tensor(), torch::zeros({n}, f32), torch::zeros({n}, f32),
                                      master.to(torch::kBFloat16)});
  }
  const double lr = 1e-3, wd = 0.1;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  if (decoupled) {
    optimizer = std::make_unique<torch::optim::AdamW>(
        reference, torch::optim::AdamWOptions(lr).betas({0.9, 0.95}).eps(1e-8).weight_decay(wd));
  } else {
    optimizer = std::make_unique<torch::optim::Adam>(
        reference, torch::optim::AdamOptions(lr).betas({0.9, 0.95}).eps(1e-8).weight_decay(wd));
  }
  for (int step = 1; step <= 3; ++step) {
    const double scale = step == 2 ? 0.25 : 1.0;  // an unscale-and-clip coefficient
    for (size_t i = 0; i < sizes.size(); ++i) {
      entries[i].grad = torch::randn({sizes[i]}, f32).to(torch::kBFloat16);
      reference[i].mutable_grad() = entries[i].grad.to(torch::kFloat) * scale;
    }
    optimizer->step();
    kernels::AdamWHyperparameters h;
    h.lr = lr;
    h.beta1 = 0.9;
    h.beta2 = 0.95;
    h.eps = 1e-8;
    h.weight_decay = wd;
    h.decoupled = decoupled;
    h.step = step;
    h.grad_scale = scale;
    FusedAdamWStep(entries, h);
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    const torch::Tensor expected = reference[i].detach();
    const double error = (entries[i].master - expected).abs().max().item<double>();
    // Three steps of size ~lr: fp32 rounding of the update is ~1e-7 of p.
    EXPECT_LE(error, 1e-6) << "tensor " << i << " (" << sizes[i] << " elements)";
    EXPECT_TRUE(torch::equal(entries[i].param, entries[i].master.to(torch::kBFloat16)))
        << "the bf16 copy is the new master rounded, tensor " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(AdamAndAdamW, FusedAdamWTest, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "AdamW" : "Adam"; });

TEST_F(FusedAdamWTest, GradSumSquaresMatchesFp64) {
  const auto bf16 = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  std::vector<FusedAdamWEntry> entries;
  double expected = 0;
  for (int64_t n : {7, 70000, 300001}) {
    FusedAdamWEntry e;
    e.grad = torch::randn({n}, bf16);
    expected += e.grad.to(torch::kDouble).pow(2).sum().item<double>();
    entries.push_back(e);
  }
  const double got = FusedGradSumSquares(entries).item<double>();
  EXPECT_NEAR(got, expected, 1e-5 * expected);
  entries[1].grad[5] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(std::isinf(FusedGradSumSquares(entries).item<double>())) << "overflow must show";
}

// Note [Clip on the device]: the kernel's own clip coefficient, from the norm
// on the device, gives the same bits as the engine's host coefficient, both
// when the norm is over the bound and when it is under.
TEST_F(FusedAdamWTest, ClipOnTheDeviceMatchesTheHostCoefficient) {
  const auto f32 = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kFloat);
  for (const double max_norm : {0.5, 1e6, 0.0}) {
    std::vector<FusedAdamWEntry> host, device;
    for (int64_t n : {3, 65537, 131072}) {
      torch::Tensor master = torch::randn({n}, f32);
      torch::Tensor grad = torch::randn({n}, f32).to(torch::kBFloat16);
      host.push_back(FusedAdamWEntry{master.clone(), grad, torch::zeros({n}, f32), torch::zeros({n}, f32),
                                     master.to(torch::kBFloat16)});
      device.push_back(FusedAdamWEntry{master.clone(), grad, torch::zeros({n}, f32), torch::zeros({n}, f32),
                                       master.to(torch::kBFloat16)});
    }
    torch::Tensor norm_squared = FusedGradSumSquares(device);
    kernels::AdamWHyperparameters h;
    h.lr = 1e-2;
    h.weight_decay = 0.1;
    h.step = 1;
    h.grad_scale = kernels::ClipCoefficient(std::sqrt(norm_squared.item<double>()), 1.0, max_norm);
    if (max_norm == 0.5) EXPECT_LT(h.grad_scale, 1.0) << "the norm of ~200K N(0,1) values is far over 0.5";
    if (max_norm != 0.5) EXPECT_EQ(h.grad_scale, 1.0);
    FusedAdamWStep(host, h);
    h.grad_scale = 1.0;
    h.grad_norm_squared = norm_squared.data_ptr<double>();
    h.max_norm = max_norm;
    FusedAdamWStep(device, h);
    for (size_t i = 0; i < host.size(); ++i) {
      EXPECT_TRUE(torch::equal(host[i].master, device[i].master)) << "max_norm " << max_norm << ", tensor " << i;
      EXPECT_TRUE(torch::equal(host[i].param, device[i].param)) << "max_norm " << max_norm << ", tensor " << i;
      EXPECT_TRUE(torch::equal(host[i].exp_avg_sq, device[i].exp_avg_sq)) << "max_norm " << max_norm;
    }
  }
}

}  // namespace
}  // namespace dslaunch::runtime
