// The scalar path against LibTorch's own optimizers on the same data: the
// formula of Note [CPU Adam formula] is LibTorch's, to rounding
// (Note [CPU Adam tolerances]). LibTorch is linked into this test only.
#include <torch/torch.h>

#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/bf16.h"
#include "kernels/cpu_adam.h"
#include "kernels/cpu_adam_test_util.h"

namespace dslaunch::kernels {
namespace {

using testing::AdamBuffers;
using testing::RandomAdamBuffers;
using testing::RandomGrads;
using testing::ToleranceModel;
using testing::WorstErrorRatio;

torch::Tensor CopyToTensor(const std::vector<float>& values) {
  return torch::from_blob(const_cast<float*>(values.data()),
                          {static_cast<int64_t>(values.size())}, torch::kFloat)
      .clone();
}

std::vector<float> CopyFromTensor(const torch::Tensor& tensor) {
  const torch::Tensor t = tensor.contiguous();
  return std::vector<float>(t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
}

// LibTorch's optimizer with our float hyperparameters (widened exactly to
// the doubles LibTorch keeps), holding one parameter tensor.
std::unique_ptr<torch::optim::Optimizer> MakeTorchOptimizer(const AdamParams& adam,
                                                            const torch::Tensor& param) {
  const auto betas = std::make_tuple(static_cast<double>(adam.beta1),
                                     static_cast<double>(adam.beta2));
  if (adam.adamw) {
    return std::make_unique<torch::optim::AdamW>(
        std::vector<torch::Tensor>{param}, torch::optim::AdamWOptions(adam.lr)
                                               .betas(betas)
                                               .eps(adam.eps)
                                               .weight_decay(adam.weight_decay));
  }
  return std::make_unique<torch::optim::Adam>(
      std::vector<torch::Tensor>{param},
      torch::optim::AdamOptions(adam.lr).betas(betas).eps(adam.eps).weight_decay(
          adam.weight_decay));
}

// The optimizer's moments for its only parameter. Iterating the state map
// avoids spelling its key, which differs between LibTorch 1.13 and 2.x.
template <typename ParamState>
AdamBuffers TorchState(torch::optim::Optimizer& optimizer, const torch::Tensor& param) {
  auto& state = static_cast<ParamState&>(*optimizer.state().begin()->second);
  return AdamBuffers{CopyFromTensor(param), CopyFromTensor(state.exp_avg()),
                     CopyFromTensor(state.exp_avg_sq())};
}

struct TorchCase {
  const char* name;
  AdamParams adam;
};

class CpuAdamTorchTest : public ::testing::TestWithParam<std::tuple<TorchCase, int64_t>> {};

TEST_P(CpuAdamTorchTest, ScalarPathMatchesLibTorch) {
  const auto& [tc, n] = GetParam();
  constexpr int kSteps = 5;
  AdamBuffers ours = RandomAdamBuffers(n, /*seed=*/3, /*warm_moments=*/false);
  torch::Tensor param = CopyToTensor(ours.params);
  std::unique_ptr<torch::optim::Optimizer> optimizer = MakeTorchOptimizer(tc.adam, param);
  ToleranceModel tolerance(n);
  double worst_ratio = 0.0;
  std::string worst;
  int64_t bit_identical_params = 0;
  for (int s = 1; s <= kSteps; ++s) {
    AdamParams adam = tc.adam;
    adam.step = s;
    const std::vector<float> grads = RandomGrads(n, /*seed=*/200 + s);
    const AdamBuffers before = ours;
    CpuAdamStepWithIsa(CpuAdamIsaKind::kScalar, adam, ours.params.data(), grads.data(),
                       ours.exp_avg.data(), ours.exp_avg_sq.data(), n);
    tolerance.AddStep(adam, before, grads, ours);

    param.mutable_grad() = CopyToTensor(grads);
    optimizer->step();
    const AdamBuffers theirs =
        adam.adamw ? TorchState<torch::optim::AdamWParamState>(*optimizer, param)
                   : TorchState<torch::optim::AdamParamState>(*optimizer, param);
    std::string step_worst;
    const double ratio = WorstErrorRatio(theirs, ours, tolerance, &step_worst);
    ASSERT_LE(ratio, 1.0) << "step " << s << ": LibTorch " << step_worst;
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      worst = step_worst;
    }
    if (s == kSteps) {
      for (int64_t i = 0; i < n; ++i) bit_identical_params += theirs.params[i] == ours.params[i];
    }
  }
  std::printf("[ TORCH    ] %s n=%lld: worst error / tolerance %.3g (%s); after %d steps "
              "%.4f%% of parameters bit-identical\n",
              tc.name, static_cast<long long>(n), worst_ratio, worst.c_str(), kSteps,
              100.0 * bit_identical_params / n);
}

INSTANTIATE_TEST_SUITE_P(
    Variants, CpuAdamTorchTest,
    ::testing::Combine(
        ::testing::Values(TorchCase{"adam", {.lr = 1e-3f}},
                          TorchCase{"adam_l2", {.lr = 1e-3f, .weight_decay = 1e-2f}},
                          TorchCase{"adamw", {.lr = 1e-3f, .adamw = true}},
                          TorchCase{"adamw_decay", {.lr = 2e-3f, .beta1 = 0.8f, .beta2 = 0.95f,
                                                    .eps = 1e-6f, .weight_decay = 0.1f,
                                                    .adamw = true}}),
        ::testing::Values(int64_t{7}, int64_t{1000003})),
    [](const auto& info) {
      return std::string(std::get<0>(info.param).name) + "_n" +
             std::to_string(std::get<1>(info.param));
    });

bool IsBf16Nan(uint16_t bits) { return (bits & 0x7F80) == 0x7F80 && (bits & 0x007F) != 0; }

// Our bf16 conversion is c10::BFloat16's, bit for bit, including edge values;
// for NaN only NaN-ness is compared (LibTorch's vector conversion writes
// 0xFFFF where its scalar one writes 0x7FC0).
TEST(Bf16TorchTest, MatchesLibTorchConversion) {
  std::vector<float> values = {0.0f, -0.0f, 1.0f, 1.00390625f, 1.01171875f, -3.4e38f, 3.4e38f,
                               1e-40f, -1e-45f, 65504.0f, std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::quiet_NaN()};
  for (uint32_t bits : {0x3F808000u, 0x3F818000u, 0x3F807FFFu, 0x7F7FFFFFu, 0x7F7F8000u,
                        0x00018000u, 0x7F800001u, 0x7FFFFFFFu}) {
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    values.push_back(f);
  }
  for (const std::vector<float>& random = RandomGrads(100000, 9); float f : random) {
    values.push_back(f);
  }
  const torch::Tensor converted = CopyToTensor(values).to(torch::kBFloat16).contiguous();
  const auto* torch_bits = reinterpret_cast<const uint16_t*>(converted.data_ptr());
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] != values[i]) {
      EXPECT_TRUE(IsBf16Nan(torch_bits[i]) && IsBf16Nan(FloatToBf16(values[i]))) << "index " << i;
      continue;
    }
    ASSERT_EQ(FloatToBf16(values[i]), torch_bits[i]) << "value " << values[i] << " index " << i;
  }
}

}  // namespace
}  // namespace dslaunch::kernels
