// The decode linear (Note [Decode linear]): LibTorch's linear without
// `fused`; on a GPU the kernel for a decode step's few rows, checked against
// an fp64 product next to cuBLAS's own error, in every dtype, at each row
// count it takes, with and without bias, with int8 weights; and the calls it
// does not take (more rows, autograd, a strided weight) giving LibTorch's
// result.
#include "runtime/model/decode_linear.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "runtime/model/fused_ops.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;

torch::Tensor Int8Reference(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& scale,
                            const torch::Tensor& bias) {
  torch::Tensor y = torch::nn::functional::linear(x, w.to(x.scalar_type())) * scale;
  return bias.defined() ? y + bias : y;
}

TEST(DecodeLinearTest, WithoutFusedItIsLibTorchsLinear) {
  torch::manual_seed(3);
  const torch::Tensor x = torch::randn({1, 3, 16}), w = torch::randn({5, 16}), b = torch::randn({5});
  EXPECT_TRUE(torch::equal(LinearOp(x, w, b, /*fused=*/false), torch::nn::functional::linear(x, w, b)));
  EXPECT_TRUE(torch::equal(LinearOp(x, w, {}, /*fused=*/false), torch::nn::functional::linear(x, w)));
  const torch::Tensor w8 = torch::randint(-127, 128, {5, 16}, torch::kChar), scale = torch::rand({5}) + 0.01;
  EXPECT_TRUE(torch::equal(Int8LinearOp(x, w8, scale, b, /*fused=*/false), Int8Reference(x, w8, scale, b)));
  EXPECT_FALSE(UsesDecodeLinearKernel(x, w, {}, b));  // a CPU tensor
}

TEST(DecodeLinearTest, FusedOnACpuTensorIsAnError) {
  const torch::Tensor x = torch::ones({1, 16}), w = torch::ones({4, 16});
  try {
    LinearOp(x, w, {}, /*fused=*/true);
    FAIL() << "a fused linear of a CPU tensor ran";
  } catch (const c10::Error& e) {
    EXPECT_THAT(e.what_without_backtrace(), HasSubstr("fused kernels run on CUDA tensors"));
  }
  EXPECT_THROW(Int8LinearOp(x, torch::ones({4, 16}, torch::kChar), torch::ones({4}), {}, /*fused=*/true),
               c10::Error);
}

TEST(DecodeLinearTest, AnInt8LinearNeedsInt8WeightsAndScales) {
  const torch::Tensor x = torch::ones({1, 16});
  EXPECT_THROW(Int8LinearOp(x, torch::ones({4, 16}), torch::ones({4}), {}, /*fused=*/false), c10::Error);
  EXPECT_THROW(Int8LinearOp(x, torch::ones({4, 16}, torch::kChar), {}, {}, /*fused=*/false), c10::Error);
}

TEST(DecodeLinearTest, ConstantWeightsScopesNestAndEnd) {
  EXPECT_FALSE(ConstantWeightsScope::active());
  {
    ConstantWeightsScope outer;
    EXPECT_TRUE(ConstantWeightsScope::active());
    {
      ConstantWeightsScope inner;
      EXPECT_TRUE(ConstantWeightsScope::active());
    }
    EXPECT_TRUE(ConstantWeightsScope::active()) << "the inner scope's end keeps the outer's";
  }
  EXPECT_FALSE(ConstantWeightsScope::active());
}

class DecodeLinearGpuTest : public ::testing::TestWithParam<torch::ScalarType> {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
    if (!FusedKernelsBuilt()) GTEST_SKIP() << "built without the CUDA kernels";
  }
  torch::TensorOptions Options() const { return torch::TensorOptions().dtype(GetParam()).device(torch::kCUDA); }
};

// max |y - exact| for y computed in the parameter's dtype.
double MaxError(const torch::Tensor& y, const torch::Tensor& exact) {
  return (y.to(torch::kDouble) - exact).abs().max().item<double>();
}

// The kernel's error against the fp64 product is at most twice cuBLAS's, or
// a floor: four roundings of the largest output to the dtype plus an fp32
// sum's error over `in` terms.
void ExpectAsCloseAsCuBlas(const torch::Tensor& fused, const torch::Tensor& libtorch, const torch::Tensor& exact,
                           int64_t in) {
  ASSERT_EQ(fused.sizes(), libtorch.sizes());
  ASSERT_EQ(fused.scalar_type(), libtorch.scalar_type());
  const double fp32_roundoff = std::ldexp(1.0, -24);
  const double roundoff = fused.scalar_type() == torch::kFloat  ? fp32_roundoff
                          : fused.scalar_type() == torch::kHalf ? std::ldexp(1.0, -11)
                                                                : std::ldexp(1.0, -8);
  const double floor = std::max(1.0, exact.abs().max().item<double>()) *
                       (4 * roundoff + 2 * std::sqrt(static_cast<double>(in)) * fp32_roundoff);
  const double fused_error = MaxError(fused, exact), libtorch_error = MaxError(libtorch, exact);
  EXPECT_LE(fused_error, std::max(2 * libtorch_error, floor))
      << "kernel error " << fused_error << ", cuBLAS error " << libtorch_error;
}

TEST_P(DecodeLinearGpuTest, MatchesAnExactProductAsCloselyAsCuBlas) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(11);
  for (int64_t in : {8, 264, 1000, 4096}) {
    for (int64_t out : {1, 7, 37, 300}) {
      for (int64_t rows = 1; rows <= 3; ++rows) {  // the kernel's, then cuBLAS's
        for (bool with_bias : {false, true}) {
          SCOPED_TRACE(::testing::Message() << "in " << in << " out " << out << " rows " << rows << " bias "
                                            << with_bias);
          const torch::Tensor x = torch::randn({1, rows, in}, generator).to(Options());
          const torch::Tensor w = (torch::randn({out, in}, generator) / std::sqrt(in)).to(Options());
          const torch::Tensor b = with_bias ? torch::randn({out}, generator).to(Options()) : torch::Tensor();
          ASSERT_EQ(UsesDecodeLinearKernel(x, w, {}, b), rows <= 2);
          const torch::Tensor exact = torch::nn::functional::linear(
              x.to(torch::kDouble), w.to(torch::kDouble), with_bias ? b.to(torch::kDouble) : torch::Tensor());
          ExpectAsCloseAsCuBlas(LinearOp(x, w, b, /*fused=*/true), torch::nn::functional::linear(x, w, b), exact,
                                in);
        }
      }
    }
  }
}

TEST_P(DecodeLinearGpuTest, Int8WeightsMatchTheirWidenedProduct) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(12);
  for (int64_t in : {16, 528, 4096}) {
    for (int64_t rows : {1, 3, 8}) {
      SCOPED_TRACE(::testing::Message() << "in " << in << " rows " << rows);
      const int64_t out = 45;
      const torch::Tensor x = torch::randn({rows, in}, generator).to(Options());
      const torch::Tensor w = torch::randint(-127, 128, {out, in}, generator, torch::kChar).to(torch::kCUDA);
      const torch::Tensor scale = ((torch::rand({out}, generator) + 0.5) / (127 * std::sqrt(in))).to(Options());
      const torch::Tensor b = torch::randn({out}, generator).to(Options());
      ASSERT_TRUE(UsesDecodeLinearKernel(x, w, scale, b));
      const torch::Tensor exact =
          torch::nn::functional::linear(x.to(torch::kDouble), w.to(torch::kDouble)) * scale.to(torch::kDouble) +
          b.to(torch::kDouble);
      ExpectAsCloseAsCuBlas(Int8LinearOp(x, w, scale, b, /*fused=*/true), Int8Reference(x, w, scale, b), exact,
                            in);
    }
  }
}

// With constant weights the kernel issues its first weight loads before
// waiting for the kernel ahead of it (Note [Dependent launch]): the same
// sums in the same order, so the same bits, with every input produced by the
// kernel just before the product (a stale read of x would show).
TEST_P(DecodeLinearGpuTest, ConstantWeightsGiveTheSameProducts) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(14);
  for (bool int8 : {false, true}) {
    for (int64_t in : {16, 272, 4096, 11008}) {
      for (int64_t rows : {1, 2}) {
        SCOPED_TRACE(::testing::Message() << "int8 " << int8 << " in " << in << " rows " << rows);
        const int64_t out = 300;
        const torch::Tensor base = torch::randn({rows, in}, generator).to(Options());
        const torch::Tensor w = int8 ? torch::randint(-127, 128, {out, in}, generator, torch::kChar).to(torch::kCUDA)
                                     : (torch::randn({out, in}, generator) / std::sqrt(in)).to(Options());
        const torch::Tensor scale =
            int8 ? ((torch::rand({out}, generator) + 0.5) / (127 * std::sqrt(in))).to(Options()) : torch::Tensor();
        auto product = [&] {
          const torch::Tensor x = base * 2;  // written by the kernel just before the product
          return int8 ? Int8LinearOp(x, w, scale, {}, /*fused=*/true) : LinearOp(x, w, {}, /*fused=*/true);
        };
        const torch::Tensor waiting = product();
        torch::Tensor constant;
        {
          ConstantWeightsScope constant_weights;
          constant = product();
        }
        EXPECT_TRUE(torch::equal(constant, waiting));
        const torch::Tensor exact =
            torch::nn::functional::linear((base * 2).to(torch::kDouble), w.to(torch::kDouble)) *
            (int8 ? scale.to(torch::kDouble) : torch::ones({out}, torch::kDouble).to(torch::kCUDA));
        const torch::Tensor libtorch = int8 ? Int8Reference(base * 2, w, scale, {})
                                            : torch::nn::functional::linear(base * 2, w);
        ExpectAsCloseAsCuBlas(constant, libtorch, exact, in);
      }
    }
  }
}

TEST_P(DecodeLinearGpuTest, CallsTheKernelDoesNotTakeGiveLibTorchsResult) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(13);
  const torch::Tensor w = torch::randn({24, 64}, generator).to(Options());
  // Three rows of bf16 weights, nine of int8: cuBLAS's (or LibTorch's widened product).
  const torch::Tensor many = torch::randn({3, 64}, generator).to(Options());
  EXPECT_FALSE(UsesDecodeLinearKernel(many, w, {}, {}));
  EXPECT_TRUE(torch::equal(LinearOp(many, w, {}, true), torch::nn::functional::linear(many, w)));
  const torch::Tensor nine = torch::randn({9, 64}, generator).to(Options());
  const torch::Tensor w8 = torch::randint(-127, 128, {24, 64}, generator, torch::kChar).to(torch::kCUDA);
  const torch::Tensor scale = torch::rand({24}, generator).to(Options());
  EXPECT_FALSE(UsesDecodeLinearKernel(nine, w8, scale, {}));
  EXPECT_TRUE(torch::equal(Int8LinearOp(nine, w8, scale, {}, true), Int8Reference(nine, w8, scale, {})));
  // A strided weight (a transposed view).
  const torch::Tensor wt = torch::randn({64, 24}, generator).to(Options()).t();
  const torch::Tensor x = torch::randn({2, 64}, generator).to(Options());
  EXPECT_FALSE(UsesDecodeLinearKernel(x, wt, {}, {}));
  EXPECT_TRUE(torch::equal(LinearOp(x, wt, {}, true), torch::nn::functional::linear(x, wt)));
  // An input width that is no whole number of 16-byte loads.
  const torch::Tensor odd_w = torch::randn({24, 63}, generator).to(Options());
  const torch::Tensor odd_x = torch::randn({2, 63}, generator).to(Options());
  EXPECT_FALSE(UsesDecodeLinearKernel(odd_x, odd_w, {}, {}));
  EXPECT_TRUE(torch::equal(LinearOp(odd_x, odd_w, {}, true), torch::nn::functional::linear(odd_x, odd_w)));
  // Autograd: LibTorch's linear records it, and the gradient arrives.
  torch::Tensor trained = w.clone().requires_grad_(true);
  EXPECT_FALSE(UsesDecodeLinearKernel(x, trained, {}, {}));
  LinearOp(x, trained, {}, true).sum().backward();
  ASSERT_TRUE(trained.grad().defined());
  EXPECT_TRUE(torch::allclose(trained.grad().to(torch::kFloat),
                              x.sum(0).to(torch::kFloat).expand({24, 64}), 1e-2, 1e-2));
  // No autograd to record (a decode step's NoGradGuard): the kernel.
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(UsesDecodeLinearKernel(x, trained, {}, {}));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, DecodeLinearGpuTest, ::testing::Values(torch::kFloat, torch::kBFloat16, torch::kHalf),
                         [](const ::testing::TestParamInfo<torch::ScalarType>& info) {
                           return std::string(c10::toString(info.param));
                         });

}  // namespace
}  // namespace dslaunch::runtime
