// The greedy choice against a reference walked by hand in fp64: the first
// of equal maxima, NaN above every number, -inf entries, a subset of rows,
// rows a stride apart. On every machine the LibTorch path; on a GPU the
// kernel, in fp32, bf16 and fp16, for vocabularies from 1 to 128,256, with
// exactly the reference's ids and its log-probabilities to fp64 rounding.
#include "runtime/generate/greedy_choice.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/model/fused_ops.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;

struct Choice {
  int64_t id;
  double logprob;
};

// The row's first largest value (a NaN, if any) and its log-softmax, in fp64.
Choice ChooseByHand(const torch::Tensor& row_any_dtype) {
  const torch::Tensor row = row_any_dtype.to(torch::kCPU).to(torch::kDouble).contiguous();
  const double* x = row.data_ptr<double>();
  int64_t best = 0;
  for (int64_t i = 1; i < row.numel(); ++i) {
    if (std::isnan(x[best])) break;
    if (std::isnan(x[i]) || x[i] > x[best]) best = i;
  }
  double sum = 0;
  for (int64_t i = 0; i < row.numel(); ++i) sum += std::exp(x[i] - x[best]);
  return {best, (x[best] - x[best]) - std::log(sum)};
}

void ExpectChoices(const torch::Tensor& chosen_any_device, const torch::Tensor& logits, const std::vector<int64_t>& rows,
                   double tolerance) {
  const torch::Tensor chosen = chosen_any_device.to(torch::kCPU);
  ASSERT_EQ(chosen.scalar_type(), torch::kDouble);
  ASSERT_EQ(chosen.sizes(), torch::IntArrayRef({2, static_cast<int64_t>(rows.size())}));
  for (size_t i = 0; i < rows.size(); ++i) {
    const Choice expected = ChooseByHand(logits[rows[i]]);
    EXPECT_EQ(chosen[0][i].item<double>(), static_cast<double>(expected.id)) << "row " << rows[i];
    const double logprob = chosen[1][i].item<double>();
    if (std::isnan(expected.logprob)) {
      EXPECT_TRUE(std::isnan(logprob)) << "row " << rows[i];
    } else {
      EXPECT_NEAR(logprob, expected.logprob, tolerance * std::max(1.0, std::abs(expected.logprob))) << "row " << rows[i];
    }
  }
}

// Rows with ties at the top, -inf entries, one NaN, one all-equal row.
torch::Tensor AwkwardLogits(int64_t rows, int64_t vocab, torch::ScalarType type, uint64_t seed) {
  torch::manual_seed(seed);
  torch::Tensor logits = torch::randn({rows, vocab}) * 4;
  for (int64_t r = 0; r < rows; ++r) {
    const float top = logits[r].max().item<float>() + 1.0f;
    switch (r % 5) {
      case 0:  // a tie at the top: the first one wins
        logits[r][(r * 7) % vocab] = top;
        logits[r][(r * 7 + vocab / 2 + 1) % vocab] = top;
        break;
      case 1:  // -inf entries
        logits[r].slice(0, 0, vocab / 3) = -std::numeric_limits<float>::infinity();
        break;
      case 2:  // the maximum last
        logits[r][vocab - 1] = top;
        break;
      case 3:
        if (rows > 5) logits[r].fill_(0.25f);  // every value equal: token 0
        break;
      default:
        break;
    }
  }
  if (rows > 4) logits[4][vocab / 2] = std::numeric_limits<float>::quiet_NaN();
  return logits.to(type);
}

std::vector<int64_t> Every(int64_t rows) {
  std::vector<int64_t> all(rows);
  for (int64_t i = 0; i < rows; ++i) all[i] = i;
  return all;
}

TEST(GreedyChoiceTest, LibTorchPathMatchesTheHandWalk) {
  for (torch::ScalarType type : {torch::kFloat, torch::kBFloat16, torch::kDouble}) {
    const torch::Tensor logits = AwkwardLogits(11, 301, type, 3);
    ExpectChoices(ChooseGreedily(logits), logits, Every(11), 1e-12);
    const std::vector<int64_t> some = {7, 0, 4, 4};
    ExpectChoices(ChooseGreedily(logits, torch::tensor(some, torch::kLong)), logits, some, 1e-12);
  }
}

TEST(GreedyChoiceTest, BadRowsAreRefusedByName) {
  const torch::Tensor logits = torch::randn({3, 10});
  try {
    ChooseGreedily(logits, torch::tensor(std::vector<int64_t>{0, 3}, torch::kLong));
    FAIL() << "row 3 of 3 was taken";
  } catch (const c10::Error& e) {
    EXPECT_THAT(std::string(e.what_without_backtrace()), HasSubstr("row 3 of logits with 3 rows"));
  }
  EXPECT_THROW(ChooseGreedily(torch::randn({10})), c10::Error);
  EXPECT_THROW(ChooseGreedily(logits, torch::tensor(std::vector<int32_t>{0}, torch::kInt)), c10::Error);
}

class GreedyChoiceGpuTest : public ::testing::TestWithParam<torch::ScalarType> {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
    if (!FusedKernelsBuilt()) GTEST_SKIP() << "built without the CUDA kernels";
  }
};

TEST_P(GreedyChoiceGpuTest, TheKernelGivesTheHandWalksChoices) {
  const torch::ScalarType type = GetParam();
  const torch::Device cuda(torch::kCUDA, 0);
  for (int64_t vocab : {1, 7, 513, 32000, 128256}) {
    for (int64_t rows : {1, 6, 64}) {
      SCOPED_TRACE(::testing::Message() << "vocab " << vocab << ", rows " << rows);
      const torch::Tensor logits = AwkwardLogits(rows, vocab, type, vocab + rows).to(cuda);
      ExpectChoices(ChooseGreedily(logits), logits, Every(rows), 1e-12);
      // The kernel's answer against LibTorch's on the device, too.
      const torch::Tensor kernel = ChooseGreedily(logits).cpu(), libtorch = ChooseGreedilyWithLibTorch(logits).cpu();
      EXPECT_TRUE(torch::equal(kernel[0], libtorch[0]));
      if (rows > 1) {
        const std::vector<int64_t> some = {rows - 1, 0, rows / 2, rows - 1};
        ExpectChoices(ChooseGreedily(logits, torch::tensor(some, torch::kLong)), logits, some, 1e-12);
      }
    }
  }
}

TEST_P(GreedyChoiceGpuTest, RowsAStrideApartAreReadInPlace) {
  const torch::Tensor wide = AwkwardLogits(6, 1000, GetParam(), 9).to(torch::Device(torch::kCUDA, 0));
  const torch::Tensor logits = wide.slice(1, 0, 999);  // rows 1,000 elements apart
  ASSERT_FALSE(logits.is_contiguous());
  ExpectChoices(ChooseGreedily(logits), logits, Every(6), 1e-12);
  // Rows the kernel cannot read in place: one row expanded into four
  // (stride 0), and rows that overlap (10 elements apart).
  const torch::Tensor expanded = wide.slice(0, 2, 3).expand({4, 1000});
  ExpectChoices(ChooseGreedily(expanded), expanded, Every(4), 1e-12);
  const torch::Tensor overlapping = wide.as_strided({4, 1000}, {10, 1});
  ExpectChoices(ChooseGreedily(overlapping), overlapping, Every(4), 1e-12);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GreedyChoiceGpuTest, ::testing::Values(torch::kFloat, torch::kBFloat16, torch::kHalf),
                         [](const ::testing::TestParamInfo<torch::ScalarType>& info) {
                           return std::string(c10::toString(info.param));
                         });

}  // namespace
}  // namespace dslaunch::runtime
