// The fused model kernels against LibTorch. On a GPU each fused result must
// be as close to an fp64 reference, computed from the same inputs, as
// LibTorch's own result in that dtype is (within 2x, or a floor of a few
// units in the last place of the dtype). Without a GPU only the CPU contract
// runs: asking for fused kernels on CPU tensors is an error, not a quiet
// switch to LibTorch.
#include "runtime/model/fused_ops.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "runtime/model/rotary_embedding.h"

namespace dslaunch::runtime {
namespace {

double MaxAbsDiff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

double Floor(torch::ScalarType type) { return type == torch::kFloat ? 2e-6 : 8e-3; }

// |fused - exact| ≤ max(2 |libtorch - exact|, floor · max |exact|).
void ExpectAsAccurateAsLibTorch(const torch::Tensor& fused, const torch::Tensor& libtorch, const torch::Tensor& exact,
                                torch::ScalarType type, const std::string& what) {
  ASSERT_EQ(fused.sizes(), exact.sizes()) << what;
  const double fused_error = MaxAbsDiff(fused, exact);
  const double libtorch_error = MaxAbsDiff(libtorch, exact);
  const double scale = exact.to(torch::kDouble).abs().max().item<double>();
  EXPECT_LE(fused_error, std::max(2 * libtorch_error, Floor(type) * scale))
      << what << ": fused error " << fused_error << ", LibTorch's " << libtorch_error << ", scale " << scale;
}

class FusedOpsGpuTest : public ::testing::TestWithParam<torch::ScalarType> {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
    if (!FusedKernelsBuilt()) GTEST_SKIP() << "built without the CUDA kernels";
    torch::manual_seed(7);
  }
  torch::TensorOptions Options() const { return torch::TensorOptions().device(torch::kCUDA).dtype(GetParam()); }
};

// Forward and input gradients of f at (inputs...) in three ways: fused,
// LibTorch in the dtype, and LibTorch in fp64 from the same values.
struct Results {
  std::vector<torch::Tensor> fused, libtorch, exact;
};

template <typename Fused, typename Reference>
Results RunThreeWays(const std::vector<torch::Tensor>& inputs, const torch::Tensor& upstream, Fused fused,
                     Reference reference) {
  Results results;
  auto once = [&](auto fn, torch::ScalarType type, std::vector<torch::Tensor>* out) {
    std::vector<torch::Tensor> leaves;
    for (const auto& x : inputs) leaves.push_back(x.detach().to(type).requires_grad_(true));
    torch::Tensor y = fn(leaves);
    y.backward(upstream.to(y.scalar_type()));
    out->push_back(y.detach());
    for (const auto& leaf : leaves) out->push_back(leaf.grad());
  };
  const torch::ScalarType type = inputs.front().scalar_type();
  once(fused, type, &results.fused);
  once(reference, type, &results.libtorch);
  once(reference, torch::kDouble, &results.exact);
  return results;
}

void ExpectAll(const Results& r, torch::ScalarType type, const std::vector<std::string>& names) {
  for (size_t i = 0; i < names.size(); ++i) {
    ExpectAsAccurateAsLibTorch(r.fused[i], r.libtorch[i], r.exact[i], type, names[i]);
  }
}

TEST_P(FusedOpsGpuTest, LayerNormForwardAndBackwardMatchLibTorch) {
  // 768 and 2048: 16-byte vector path; 100 (bf16) and 99: element path.
  for (auto [rows, width] : {std::pair<int64_t, int64_t>{4096, 768}, {1024, 2048}, {333, 100}, {17, 99}}) {
    auto x = torch::randn({rows, width}, Options()) * 3 + 1;
    auto w = torch::randn({width}, Options());
    auto b = torch::randn({width}, Options());
    auto upstream = torch::randn({rows, width}, Options());
    Results r = RunThreeWays(
        {x, w, b}, upstream, [](const auto& in) { return LayerNormOp(in[0], in[1], in[2], 1e-5, true); },
        [](const auto& in) { return torch::layer_norm(in[0], {in[0].size(-1)}, in[1], in[2], 1e-5); });
    ExpectAll(r, GetParam(), {"y", "dx", "dweight", "dbias"});
  }
}

TEST_P(FusedOpsGpuTest, BiasGeluForwardAndBackwardMatchLibTorch) {
  for (auto [rows, width] : {std::pair<int64_t, int64_t>{4096, 3072}, {100, 256}, {33, 90}}) {
    auto x = torch::randn({rows, width}, Options()) * 2;
    auto b = torch::randn({width}, Options());
    auto upstream = torch::randn({rows, width}, Options());
    Results r = RunThreeWays(
        {x, b}, upstream, [](const auto& in) { return BiasGeluOp(in[0], in[1], true); },
        [](const auto& in) { return torch::gelu(in[0] + in[1], "tanh"); });
    ExpectAll(r, GetParam(), {"y", "dx", "dbias"});
  }
}

// The fused loss and its logits gradient against LibTorch's loss as the
// model computed it before (on an fp32 copy); returns the fused gradient.
torch::Tensor ExpectCrossEntropyAsAccurateAsLibTorch(const torch::Tensor& logits, const torch::Tensor& targets,
                                                     torch::ScalarType type) {
  Results r = RunThreeWays(
      {logits}, torch::ones({}, logits.options()), [&](const auto& in) { return CrossEntropyOp(in[0], targets, true); },
      [&](const auto& in) {
        const bool exact = in[0].scalar_type() == torch::kDouble;
        return torch::nn::functional::cross_entropy(exact ? in[0] : in[0].to(torch::kFloat), targets);
      });
  // The loss is fp32 in both: the floor is fp32's.
  ExpectAsAccurateAsLibTorch(r.fused[0], r.libtorch[0], r.exact[0], torch::kFloat, "loss");
  ExpectAsAccurateAsLibTorch(r.fused[1], r.libtorch[1], r.exact[1], type, "dlogits");
  EXPECT_EQ(r.fused[1].scalar_type(), type) << "dlogits keep the logits' dtype";
  return r.fused[1];
}

TEST_P(FusedOpsGpuTest, CrossEntropyForwardAndBackwardMatchLibTorch) {
  // 50304: GPT-2's padded vocabulary (vector path); 257: bytes (element path).
  for (auto [rows, vocab] : {std::pair<int64_t, int64_t>{2048, 50304}, {300, 257}}) {
    auto logits = torch::randn({rows, vocab}, Options()) * 4;
    auto targets = torch::randint(vocab, {rows}, torch::TensorOptions().device(torch::kCUDA).dtype(torch::kLong));
    ExpectCrossEntropyAsAccurateAsLibTorch(logits, targets, GetParam());
  }
}

TEST_P(FusedOpsGpuTest, CrossEntropyIgnoresTargetsOfMinus100) {
  const int64_t rows = 512, vocab = 32000;
  auto logits = torch::randn({rows, vocab}, Options()) * 4;
  auto targets = torch::randint(vocab, {rows}, torch::TensorOptions().device(torch::kCUDA).dtype(torch::kLong));
  targets.index_put_({torch::arange(0, rows, 3, targets.options())}, -100);  // a third of the rows: a prompt
  torch::Tensor dlogits = ExpectCrossEntropyAsAccurateAsLibTorch(logits, targets, GetParam());
  EXPECT_EQ(dlogits.index({0}).abs().max().item<double>(), 0.0) << "an ignored row has no gradient";
}

TEST_P(FusedOpsGpuTest, RmsNormForwardAndBackwardMatchLibTorch) {
  // 2048 and 4096: 16-byte vector path; 100 (bf16) and 99: element path.
  for (auto [rows, width] : {std::pair<int64_t, int64_t>{4096, 2048}, {512, 4096}, {333, 100}, {17, 99}}) {
    auto x = torch::randn({rows, width}, Options()) * 3 + 1;
    auto w = torch::randn({width}, Options());
    auto upstream = torch::randn({rows, width}, Options());
    Results r = RunThreeWays(
        {x, w}, upstream, [](const auto& in) { return RmsNormOp(in[0], in[1], 1e-5, true); },
        [](const auto& in) {
          if (in[0].scalar_type() != torch::kDouble) return RmsNormOp(in[0], in[1], 1e-5, false);
          return in[1] * (in[0] * torch::rsqrt(in[0].pow(2).mean(-1, true) + 1e-5));  // exact: fp64 throughout
        });
    ExpectAll(r, GetParam(), {"y", "dx", "dweight"});
  }
}

TEST_P(FusedOpsGpuTest, SwiGluForwardAndBackwardMatchLibTorch) {
  for (int64_t elements : {int64_t{8192} * 5632, int64_t{1000}, int64_t{999}}) {
    auto gate = torch::randn({elements}, Options()) * 3;
    auto up = torch::randn({elements}, Options());
    auto upstream = torch::randn({elements}, Options());
    Results r = RunThreeWays(
        {gate, up}, upstream, [](const auto& in) { return SwiGluOp(in[0], in[1], true); },
        [](const auto& in) { return torch::silu(in[0]) * in[1]; });
    ExpectAll(r, GetParam(), {"y", "dgate", "dup"});
  }
}

TEST_P(FusedOpsGpuTest, StackedSwiGluForwardAndBackwardMatchLibTorch) {
  // A TinyLlama-shaped gate/up product (vector path), an odd width (element
  // path), and a 3-D one.
  for (std::vector<int64_t> shape : {std::vector<int64_t>{4096, 2 * 5632}, {333, 2 * 99}, {3, 17, 2 * 64}}) {
    auto gate_up = torch::randn(shape, Options()) * 3;
    std::vector<int64_t> out = shape;
    out.back() /= 2;
    auto upstream = torch::randn(out, Options());
    Results r = RunThreeWays(
        {gate_up}, upstream, [](const auto& in) { return SwiGluStackedOp(in[0], true); },
        [](const auto& in) {
          const int64_t n = in[0].size(-1) / 2;
          return torch::silu(in[0].narrow(-1, 0, n)) * in[0].narrow(-1, n, n);
        });
    ExpectAll(r, GetParam(), {"y", "dgate_up"});
  }
}

TEST_P(FusedOpsGpuTest, RotaryForwardAndBackwardMatchLibTorch) {
  // x as the attention makes it: [batch, time, heads, d] transposed to
  // [batch, heads, time, d]; one table for all sequences, or one per sequence.
  for (bool per_sequence : {false, true}) {
    const int64_t batch = 3, time = 37, heads = 5, dim = 64;
    auto x = torch::randn({batch, time, heads, dim}, Options()).transpose(1, 2);
    auto angles = torch::rand({per_sequence ? batch : 1, time, dim / 2}, Options().dtype(torch::kFloat)) * 6;
    angles = torch::cat({angles, angles}, -1);
    torch::Tensor cos = angles.cos().to(GetParam()), sin = angles.sin().to(GetParam());
    cos = per_sequence ? cos.unsqueeze(1) : cos[0];
    sin = per_sequence ? sin.unsqueeze(1) : sin[0];
    auto upstream = torch::randn({batch, heads, time, dim}, Options());
    Results r = RunThreeWays(
        {x}, upstream, [&](const auto& in) { return RotaryOp(in[0], cos, sin, true); },
        [&](const auto& in) {
          return RotaryOp(in[0], cos.to(in[0].scalar_type()), sin.to(in[0].scalar_type()), false);
        });
    ExpectAll(r, GetParam(), {"y", "dx"});
    EXPECT_EQ(r.fused[0].strides(), x.strides()) << "the result keeps x's layout";
  }
}

TEST_P(FusedOpsGpuTest, MismatchedParametersAreRefusedAndEmptyInputsWork) {
  auto x = torch::randn({4, 64}, Options());
  auto w = torch::ones({64}, Options()), b = torch::zeros({64}, Options());
  EXPECT_THROW(LayerNormOp(x, torch::ones({32}, Options()), b, 1e-5, true), c10::Error) << "weight of another width";
  EXPECT_THROW(LayerNormOp(x, w, b.to(torch::kDouble), 1e-5, true), c10::Error) << "bias of another dtype";
  EXPECT_THROW(LayerNormOp(x, w, b.cpu(), 1e-5, true), c10::Error) << "bias on another device";
  EXPECT_THROW(BiasGeluOp(x, torch::zeros({1}, Options()), true), c10::Error) << "a broadcast bias";
  EXPECT_THROW(CrossEntropyOp(x, torch::zeros({4}, torch::kLong), true), c10::Error) << "targets on the CPU";
  EXPECT_THROW(RmsNormOp(x, torch::ones({32}, Options()), 1e-5, true), c10::Error) << "RMSNorm weight of another width";
  EXPECT_THROW(SwiGluOp(x, torch::randn({4, 32}, Options()), true), c10::Error) << "SwiGLU inputs of two shapes";
  auto empty = torch::randn({0, 64}, Options()).requires_grad_(true);
  LayerNormOp(empty, w, b, 1e-5, true).sum().backward();
  EXPECT_EQ(empty.grad().sizes(), empty.sizes());
}

// The residual form gives exactly the add and the fused RMSNorm of the sum:
// the sum as LibTorch's add rounds it, the normalized rows bit for bit.
TEST_P(FusedOpsGpuTest, RmsNormWithAResidualIsTheAddAndTheRmsNorm) {
  for (auto [rows, width] : {std::pair<int64_t, int64_t>{1, 4096}, {7, 768}, {33, 100}, {5, 99}}) {
    SCOPED_TRACE(::testing::Message() << rows << " x " << width);
    const torch::Tensor x = torch::randn({1, rows, width}, Options()) * 3;
    const torch::Tensor delta = torch::randn({1, rows, width}, Options());
    const torch::Tensor w = torch::randn({width}, Options());
    torch::NoGradGuard no_grad;
    auto [sum, normalized] = AddRmsNormOp(x, delta, w, 1e-6, /*fused=*/true);
    EXPECT_TRUE(torch::equal(sum, x + delta));
    EXPECT_TRUE(torch::equal(normalized, RmsNormOp(x + delta, w, 1e-6, /*fused=*/true)));
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, FusedOpsGpuTest, ::testing::Values(torch::kFloat, torch::kBFloat16, torch::kHalf),
                         [](const auto& info) { return std::string(c10::toString(info.param)); });

TEST(FusedOpsTest, AskingForFusedKernelsOnCpuTensorsIsAnError) {
  auto x = torch::randn({4, 8});
  auto w = torch::ones({8}), b = torch::zeros({8});
  try {
    LayerNormOp(x, w, b, 1e-5, /*fused=*/true);
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what_without_backtrace()).find("CUDA"), std::string::npos) << e.what_without_backtrace();
  }
  EXPECT_THROW(BiasGeluOp(x, w, true), c10::Error);
  EXPECT_THROW(CrossEntropyOp(x, torch::zeros({4}, torch::kLong), true), c10::Error);
  EXPECT_THROW(RmsNormOp(x, w, 1e-5, true), c10::Error);
  EXPECT_THROW(AddRmsNormOp(x, x, w, 1e-5, true), c10::Error);
  EXPECT_THROW(SwiGluOp(x, x, true), c10::Error);
  EXPECT_THROW(SwiGluStackedOp(x, true), c10::Error);
  EXPECT_THROW(RotaryOp(x.view({1, 1, 4, 8}), w.view({1, 8}), w.view({1, 8}), true), c10::Error);
}

TEST(FusedOpsTest, UnfusedOpsAreLibTorchs) {
  auto x = torch::randn({4, 8});
  auto w = torch::randn({8}), b = torch::randn({8});
  EXPECT_TRUE(torch::equal(LayerNormOp(x, w, b, 1e-5, false), torch::layer_norm(x, {8}, w, b, 1e-5)));
  EXPECT_TRUE(torch::equal(BiasGeluOp(x, b, false), torch::gelu(x + b, "tanh")));
  auto targets = torch::tensor({1, 2, 3, 0}, torch::kLong);
  EXPECT_TRUE(torch::equal(CrossEntropyOp(x, targets, false), torch::nn::functional::cross_entropy(x, targets)));
  EXPECT_TRUE(torch::equal(SwiGluOp(x, w.expand({4, 8}), false), torch::silu(x) * w));
  EXPECT_TRUE(torch::equal(SwiGluStackedOp(x, false), torch::silu(x.narrow(1, 0, 4)) * x.narrow(1, 4, 4)));
  EXPECT_THROW(SwiGluStackedOp(torch::randn({4, 7}), false), c10::Error) << "an odd last dimension";
  torch::Tensor h = x * torch::rsqrt(x.pow(2).mean(-1, true) + 1e-6);
  EXPECT_TRUE(torch::allclose(RmsNormOp(x, w, 1e-6, false), w * h));
  auto delta = torch::randn({4, 8});
  auto [sum, normalized] = AddRmsNormOp(x, delta, w, 1e-6, false);
  EXPECT_TRUE(torch::equal(sum, x + delta));
  EXPECT_TRUE(torch::equal(normalized, RmsNormOp(x + delta, w, 1e-6, false)));
  auto q = torch::randn({1, 2, 4, 8}), cos = torch::randn({4, 8}), sin = torch::randn({4, 8});
  EXPECT_TRUE(torch::equal(RotaryOp(q, cos, sin, false), ApplyRotary(q, cos, sin)));
}

}  // namespace
}  // namespace dslaunch::runtime
