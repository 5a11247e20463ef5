// Every SIMD path against the scalar reference; bf16 rounding; the tunables.
// The scalar path against LibTorch is in cpu_adam_torch_test.cc.
#include "kernels/cpu_adam.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/bf16.h"
#include "kernels/cpu_adam_test_util.h"

namespace dslaunch::kernels {
namespace {

using testing::AdamBuffers;
using testing::RandomAdamBuffers;
using testing::RandomGrads;
using testing::ToleranceModel;
using testing::WorstErrorRatio;

// The optimizer variants every path is checked on.
struct AdamVariant {
  const char* name;
  AdamParams adam;
  int64_t first_step;
};

const AdamVariant kVariants[] = {
    {"adam", {.lr = 1e-3f}, 1},
    {"adam_l2", {.lr = 1e-3f, .weight_decay = 1e-2f}, 1},
    {"adamw", {.lr = 1e-3f, .adamw = true}, 1},
    {"adamw_decay", {.lr = 2e-3f, .beta1 = 0.8f, .beta2 = 0.95f, .eps = 1e-6f,
                     .weight_decay = 0.1f, .adamw = true}, 1},
    {"adamw_late_steps", {.lr = 1e-3f, .weight_decay = 1e-2f, .adamw = true}, 1000},
    {"adam_no_bias_correction", {.lr = 1e-3f, .weight_decay = 1e-2f, .bias_correction = false}, 1},
};
constexpr int kSteps = 4;

std::string IsaList(const std::vector<CpuAdamIsaKind>& isas) {
  std::string text;
  for (CpuAdamIsaKind isa : isas) {
    text += std::string(text.empty() ? "" : " ") + CpuAdamIsaName(isa);
  }
  return text;
}

class CpuAdamIsaTest
    : public ::testing::TestWithParam<std::tuple<CpuAdamIsaKind, int64_t, AdamVariant>> {};

// kSteps steps on the tested ISA and on the scalar path from the same start
// with the same gradients; the two must stay within the tolerance model.
TEST_P(CpuAdamIsaTest, MatchesScalarReference) {
  const auto& [isa, n, variant] = GetParam();
  if (!DetectCpuIsaSupport().Supports(isa)) {
    GTEST_SKIP() << CpuAdamIsaName(isa) << " is not available on this CPU; tested here: "
                 << IsaList(SupportedCpuAdamIsas(DetectCpuIsaSupport()));
  }
  std::printf("[ ISA      ] %s, n=%lld, %s\n", CpuAdamIsaName(isa), static_cast<long long>(n),
              variant.name);
  AdamBuffers want = RandomAdamBuffers(n, /*seed=*/1, /*warm_moments=*/true);
  AdamBuffers got = want;
  std::vector<uint16_t> bf16(n);
  ToleranceModel tolerance(n);
  double worst_ratio = 0.0;
  std::string worst;
  for (int s = 0; s < kSteps; ++s) {
    AdamParams adam = variant.adam;
    adam.step = variant.first_step + s;
    const std::vector<float> grads = RandomGrads(n, /*seed=*/100 + s);
    const AdamBuffers before = want;
    CpuAdamStepWithIsa(CpuAdamIsaKind::kScalar, adam, want.params.data(), grads.data(),
                       want.exp_avg.data(), want.exp_avg_sq.data(), n);
    CpuAdamStepWithIsa(isa, adam, got.params.data(), grads.data(), got.exp_avg.data(),
                       got.exp_avg_sq.data(), n, bf16.data());
    tolerance.AddStep(adam, before, grads, want);
    std::string step_worst;
    const double ratio = WorstErrorRatio(got, want, tolerance, &step_worst);
    ASSERT_LE(ratio, 1.0) << "step " << adam.step << ", " << step_worst;
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      worst = step_worst;
    }
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(bf16[i], FloatToBf16(got.params[i])) << "element " << i << " step " << adam.step;
    }
  }
  std::printf("[ ISA      ] worst error / tolerance: %.3g %s\n", worst_ratio, worst.c_str());
}

INSTANTIATE_TEST_SUITE_P(
    AllIsas, CpuAdamIsaTest,
    ::testing::Combine(::testing::Values(CpuAdamIsaKind::kAvx2, CpuAdamIsaKind::kAvx512),
                       ::testing::Values(int64_t{1}, int64_t{7}, int64_t{1000003}),
                       ::testing::ValuesIn(kVariants)),
    [](const auto& info) {
      return std::string(CpuAdamIsaName(std::get<0>(info.param))) + "_n" +
             std::to_string(std::get<1>(info.param)) + "_" + std::get<2>(info.param).name;
    });

// Where piece boundaries and vector tails fall must not change any element's
// result: stepping a buffer in odd-sized slices equals stepping it whole.
TEST(CpuAdamTest, ResultDoesNotDependOnSlicing) {
  const int64_t n = 300007;
  const AdamParams adam{.lr = 1e-3f, .weight_decay = 1e-2f, .adamw = true, .step = 3};
  const std::vector<float> grads = RandomGrads(n, 7);
  for (CpuAdamIsaKind isa : SupportedCpuAdamIsas(DetectCpuIsaSupport())) {
    AdamBuffers whole = RandomAdamBuffers(n, 2, /*warm_moments=*/true);
    AdamBuffers sliced = whole;
    std::vector<uint16_t> whole_bf16(n), sliced_bf16(n);
    CpuAdamStepWithIsa(isa, adam, whole.params.data(), grads.data(), whole.exp_avg.data(),
                       whole.exp_avg_sq.data(), n, whole_bf16.data());
    for (int64_t begin = 0, len = 1; begin < n; begin += len, len = len * 3 + 2) {
      const int64_t count = std::min(len, n - begin);
      CpuAdamStepWithIsa(isa, adam, sliced.params.data() + begin, grads.data() + begin,
                         sliced.exp_avg.data() + begin, sliced.exp_avg_sq.data() + begin, count,
                         sliced_bf16.data() + begin);
    }
    EXPECT_EQ(whole.params, sliced.params) << CpuAdamIsaName(isa);
    EXPECT_EQ(whole.exp_avg, sliced.exp_avg) << CpuAdamIsaName(isa);
    EXPECT_EQ(whole.exp_avg_sq, sliced.exp_avg_sq) << CpuAdamIsaName(isa);
    EXPECT_EQ(whole_bf16, sliced_bf16) << CpuAdamIsaName(isa);
  }
}

// grad_scale folds the clip coefficient into the pass: on every path, the
// same bits as multiplying the gradients by float(grad_scale) first (what the
// engine did with `grad.mul_(coefficient)` before the step).
TEST(CpuAdamTest, GradScaleEqualsPrescaledGradients) {
  const int64_t n = 100003;
  const std::vector<float> grads = RandomGrads(n, 11);
  for (const AdamVariant& variant : kVariants) {
    AdamParams scaled = variant.adam;
    scaled.step = variant.first_step;
    scaled.grad_scale = 0.3712345678901;
    AdamParams plain = scaled;
    plain.grad_scale = 1.0;
    std::vector<float> prescaled(grads);
    for (float& g : prescaled) g *= static_cast<float>(scaled.grad_scale);
    for (CpuAdamIsaKind isa : SupportedCpuAdamIsas(DetectCpuIsaSupport())) {
      AdamBuffers want = RandomAdamBuffers(n, 3, /*warm_moments=*/true);
      AdamBuffers got = want;
      CpuAdamStepWithIsa(isa, plain, want.params.data(), prescaled.data(), want.exp_avg.data(),
                         want.exp_avg_sq.data(), n);
      CpuAdamStepWithIsa(isa, scaled, got.params.data(), grads.data(), got.exp_avg.data(),
                         got.exp_avg_sq.data(), n);
      EXPECT_EQ(want.params, got.params) << CpuAdamIsaName(isa) << " " << variant.name;
      EXPECT_EQ(want.exp_avg, got.exp_avg) << CpuAdamIsaName(isa) << " " << variant.name;
      EXPECT_EQ(want.exp_avg_sq, got.exp_avg_sq) << CpuAdamIsaName(isa) << " " << variant.name;
    }
  }
}

uint32_t Bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
}

float FromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// fp32 patterns and their bf16 under round-to-nearest-even (Note [bf16 rounding]).
const std::pair<uint32_t, uint16_t> kBf16Cases[] = {
    {0x00000000, 0x0000},  // +0
    {0x80000000, 0x8000},  // -0
    {0x3F800000, 0x3F80},  // 1
    {0x3F807FFF, 0x3F80},  // just below a tie: down
    {0x3F808000, 0x3F80},  // tie, kept bit even: down
    {0x3F808001, 0x3F81},  // just above a tie: up
    {0x3F818000, 0x3F82},  // tie, kept bit odd: up to even
    {0xBF818000, 0xBF82},  // the same, negative
    {0x3FFF8000, 0x4000},  // tie carrying into the exponent
    {0x00000001, 0x0000},  // smallest subnormal
    {0x00018000, 0x0002},  // subnormal tie, odd: up
    {0x80008000, 0x8000},  // negative subnormal tie, even: down
    {0x7F7F7FFF, 0x7F7F},  // largest float that stays finite
    {0x7F7FFFFF, 0x7F80},  // FLT_MAX rounds to +inf
    {0xFF7FFFFF, 0xFF80},  // -FLT_MAX rounds to -inf
    {0x7F800000, 0x7F80},  // +inf
    {0xFF800000, 0xFF80},  // -inf
    {0x7FC00000, 0x7FC0},  // quiet NaN
    {0x7F800001, 0x7FC0},  // signalling NaN: must not round to inf
    {0x7FFFFFFF, 0x7FC0},  // NaN with all mantissa bits (the bias would carry)
    {0xFFFFFFFF, 0x7FC0},  // negative NaN (the bias would overflow 32 bits)
};

TEST(Bf16Test, RoundsToNearestEven) {
  for (const auto& [in, out] : kBf16Cases) {
    EXPECT_EQ(FloatToBf16(FromBits(in)), out) << std::hex << "0x" << in;
  }
  EXPECT_EQ(Bits(Bf16ToFloat(0x3F82)), 0x3F820000u);
}

// The vector paths' bf16 copy on the same cases, placed in both the vector
// body and the tail. lr = 0 and g = 0 leave every parameter exactly as it was
// (inf included; a NaN stays NaN), so the copy is the conversion of the input.
TEST(Bf16Test, EveryIsaRoundsEdgeValuesLikeTheScalarConversion) {
  std::vector<float> params, expected_params;
  std::vector<uint16_t> expected;
  for (int repeat = 0; repeat < 3; ++repeat) {
    for (const auto& [in, out] : kBf16Cases) {
      params.push_back(FromBits(in));
      expected.push_back(out);
    }
  }
  const int64_t n = static_cast<int64_t>(params.size());  // 63: 3 x 16 + 15, 7 x 8 + 7
  const std::vector<float> grads(n, 0.0f);
  for (CpuAdamIsaKind isa : SupportedCpuAdamIsas(DetectCpuIsaSupport())) {
    std::vector<float> p = params, m(n, 0.0f), v(n, 0.0f);
    std::vector<uint16_t> bf16(n, 0xDEAD);
    CpuAdamStepWithIsa(isa, AdamParams{.lr = 0.0f}, p.data(), grads.data(), m.data(), v.data(), n,
                       bf16.data());
    for (int64_t i = 0; i < n; ++i) {
      if (params[i] == params[i]) {  // arithmetic quiets a signalling NaN
        EXPECT_EQ(Bits(p[i]), Bits(params[i])) << CpuAdamIsaName(isa) << " element " << i;
      }
      EXPECT_EQ(bf16[i], expected[i]) << CpuAdamIsaName(isa) << " element " << i << std::hex
                                      << " input 0x" << Bits(params[i]);
    }
  }
}

TEST(CpuAdamIsaResolutionTest, PicksTheWidestSupported) {
  EXPECT_EQ(*ResolveCpuAdamIsa(nullptr, {.avx2_fma = true, .avx512f = true}),
            CpuAdamIsaKind::kAvx512);
  EXPECT_EQ(*ResolveCpuAdamIsa("", {.avx2_fma = true, .avx512f = false}), CpuAdamIsaKind::kAvx2);
  EXPECT_EQ(*ResolveCpuAdamIsa(nullptr, {}), CpuAdamIsaKind::kScalar);
}

TEST(CpuAdamIsaResolutionTest, HonoursAForcedIsaOnlyWhenTheCpuHasIt) {
  EXPECT_EQ(*ResolveCpuAdamIsa("scalar", {.avx2_fma = true, .avx512f = true}),
            CpuAdamIsaKind::kScalar);
  EXPECT_EQ(*ResolveCpuAdamIsa("avx2", {.avx2_fma = true, .avx512f = true}),
            CpuAdamIsaKind::kAvx2);
  EXPECT_EQ(ResolveCpuAdamIsa("avx512", {.avx2_fma = true}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ResolveCpuAdamIsa("avx2", {}).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ResolveCpuAdamIsa("sse4", {.avx2_fma = true}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CpuAdamIsaResolutionTest, ParsesTheThreadCount) {
  EXPECT_EQ(*ResolveCpuAdamThreads(nullptr, 8), 8);
  EXPECT_EQ(*ResolveCpuAdamThreads("", 0), 1);
  EXPECT_EQ(*ResolveCpuAdamThreads("3", 8), 3);
  EXPECT_FALSE(ResolveCpuAdamThreads("0", 8).ok());
  EXPECT_FALSE(ResolveCpuAdamThreads("-2", 8).ok());
  EXPECT_FALSE(ResolveCpuAdamThreads("two", 8).ok());
}

// End to end through the environment: run the binary with
// DSLAUNCH_CPU_ADAM_ISA=scalar|avx2|avx512 (or DSLAUNCH_CPU_ADAM_THREADS) to
// check each forced choice; a bad value must surface from CpuAdamInit().
TEST(CpuAdamTest, UsesTheIsaTheEnvironmentChose) {
  const CpuIsaSupport support = DetectCpuIsaSupport();
  const char* forced = std::getenv("DSLAUNCH_CPU_ADAM_ISA");
  const absl::StatusOr<CpuAdamIsaKind> expected = ResolveCpuAdamIsa(forced, support);
  std::printf("[ ISA      ] DSLAUNCH_CPU_ADAM_ISA=%s; CPU supports: %s; "
              "CpuAdamIsa()=%s, %d threads\n",
              forced ? forced : "(unset)", IsaList(SupportedCpuAdamIsas(support)).c_str(),
              CpuAdamIsa(), CpuAdamThreads());
  const absl::StatusOr<int> threads =
      ResolveCpuAdamThreads(std::getenv("DSLAUNCH_CPU_ADAM_THREADS"), 1);
  EXPECT_EQ(CpuAdamInit().code(),
            !expected.ok() ? expected.status().code() : threads.status().code());
  const CpuAdamIsaKind used = expected.ok() ? *expected : CpuAdamIsaKind::kScalar;
  EXPECT_STREQ(CpuAdamIsa(), CpuAdamIsaName(used));

  const int64_t n = 200003;
  const AdamParams adam{.weight_decay = 1e-2f, .adamw = true, .step = 2};
  const std::vector<float> grads = RandomGrads(n, 5);
  AdamBuffers a = RandomAdamBuffers(n, 6, /*warm_moments=*/true);
  AdamBuffers b = a;
  CpuAdamStep(adam, a.params.data(), grads.data(), a.exp_avg.data(), a.exp_avg_sq.data(), n);
  CpuAdamStepWithIsa(used, adam, b.params.data(), grads.data(), b.exp_avg.data(),
                     b.exp_avg_sq.data(), n);
  EXPECT_EQ(a.params, b.params);
  EXPECT_EQ(a.exp_avg, b.exp_avg);
  EXPECT_EQ(a.exp_avg_sq, b.exp_avg_sq);
}

TEST(CpuAdamTest, EmptyBufferIsANoOp) {
  CpuAdamStep(AdamParams{}, nullptr, nullptr, nullptr, nullptr, 0);
}

}  // namespace
}  // namespace dslaunch::kernels
