// The fused decode attention kernel against LibTorch. On a GPU: its output
// for sequences of several lengths (padding past each end pointing at slots
// full of other values, which must not count), grouped-query attention and
// head sizes from 8 to 256, in fp32, bf16 and fp16, is as close to an fp64
// reference as LibTorch's own masked attention in that dtype (within 2x, or
// a floor of a few units in the last place); the new keys and values land in
// their slots and nowhere else; and an engine generating with fused kernels
// gives the unfused engine's greedy tokens in fp32, eager and replaying CUDA
// graphs, with prompts split across steps beside decoding sequences. On every
// machine: where the kernel cannot run is refused at the cache's creation.
#include "runtime/generate/fused_decode_attention.h"

#include <algorithm>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/generate/generation_engine.h"
#include "runtime/generate/paged_kv_cache.h"
#include "runtime/model/fused_ops.h"
#include "runtime/testing/generation_llama.h"
#include "runtime/torch_compat.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;

TEST(FusedDecodeAttentionTest, ACacheWhereTheKernelCannotRunIsRefused) {
  PagedKvCacheOptions options;
  options.layers = 1;
  options.kv_heads = 2;
  options.head_dim = 8;
  options.blocks = 4;
  options.fused_decode_attention = true;
  auto cache = PagedKvCache::Create(options);  // on the CPU
  ASSERT_FALSE(cache.ok());
  EXPECT_THAT(std::string(cache.status().message()), HasSubstr("runs on a CUDA device, not cpu"));

  const absl::Status wide = FusedDecodeAttentionProblem(torch::Device(torch::kCUDA, 0), 300);
  ASSERT_FALSE(wide.ok());
  EXPECT_THAT(std::string(wide.message()),
              HasSubstr(FusedKernelsBuilt() ? "this model's is 300" : "this build has no CUDA kernels"));
  if (FusedKernelsBuilt()) {
    EXPECT_FALSE(FusedDecodeAttentionProblem(torch::Device(torch::kCUDA, 0), 90).ok());  // 90 % 4 != 0
    EXPECT_TRUE(FusedDecodeAttentionProblem(torch::Device(torch::kCUDA, 0), 128).ok());
  }
}

struct DecodeCase {
  int64_t heads, kv_heads, head_dim;
};

double Farthest(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

// LibTorch's masked attention over the gathered slots, in `type`.
torch::Tensor GatheredAttention(const torch::Tensor& q, const torch::Tensor& keys, const torch::Tensor& values,
                                const torch::Tensor& visible, const torch::Tensor& ends, torch::ScalarType type) {
  const int64_t n = q.size(0), heads = q.size(1), kv_heads = keys.size(1), d = keys.size(2);
  const int64_t longest = visible.size(1);
  auto gather = [&](const torch::Tensor& pool) {
    return pool.to(type)
        .index_select(0, visible.view({-1}))
        .view({n, longest, kv_heads, d})
        .transpose(1, 2)
        .repeat_interleave(heads / kv_heads, /*dim=*/1);
  };
  const torch::Tensor allowed =
      (torch::arange(longest, visible.options()).unsqueeze(0) < ends.unsqueeze(1)).view({n, 1, 1, longest});
  return compat::MaskedAttention(q.to(type).unsqueeze(2), gather(keys), gather(values), allowed).squeeze(2);
}

class FusedDecodeAttentionGpuTest : public ::testing::TestWithParam<torch::ScalarType> {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
    if (!FusedKernelsBuilt()) GTEST_SKIP() << "built without the CUDA kernels";
    torch::manual_seed(11);
  }
};

TEST_P(FusedDecodeAttentionGpuTest, MatchesLibTorchAndWritesOnlyTheNewSlots) {
  const torch::ScalarType type = GetParam();
  const auto options = torch::TensorOptions().device(torch::kCUDA).dtype(type);
  const auto long_options = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kLong);
  const std::vector<int64_t> ends_host = {1, 7, 33, 64, 150};
  const int64_t n = static_cast<int64_t>(ends_host.size()), longest = 160, slots = 400;
  for (const DecodeCase& c : std::vector<DecodeCase>{{4, 2, 8}, {8, 8, 128}, {8, 2, 64}, {2, 1, 80}, {4, 4, 256}}) {
    SCOPED_TRACE(::testing::Message() << type << " heads " << c.heads << " kv_heads " << c.kv_heads << " head_dim "
                                      << c.head_dim);
    torch::Tensor key_pool = torch::randn({slots, c.kv_heads, c.head_dim}, options);
    torch::Tensor value_pool = torch::randn({slots, c.kv_heads, c.head_dim}, options);
    // Slot 0 (where padding points) holds values far off every other: a
    // padded position that counted would show.
    key_pool[0].fill_(4);
    value_pool[0].fill_(100);
    // Each sequence's positions in slots of its own, scattered (1 .. slots-1).
    const torch::Tensor order = torch::randperm(slots - 1, torch::kLong) + 1;
    std::vector<int64_t> visible_host(n * longest, 0), written_host;
    int64_t next = 0;
    for (int64_t s = 0; s < n; ++s) {
      for (int64_t p = 0; p < ends_host[s]; ++p) visible_host[s * longest + p] = order[next++].item<int64_t>();
      written_host.push_back(visible_host[s * longest + ends_host[s] - 1]);
    }
    const torch::Tensor visible = torch::tensor(visible_host, long_options).view({n, longest});
    const torch::Tensor written = torch::tensor(written_host, long_options);
    const torch::Tensor ends = torch::tensor(ends_host, long_options);
    // The step's tensors as the model makes them: [1, heads, n, d] viewed as
    // [n, heads, d] (strided, not contiguous).
    const torch::Tensor q = torch::randn({1, c.heads, n, c.head_dim}, options).squeeze(0).transpose(0, 1);
    const torch::Tensor new_keys = torch::randn({1, c.kv_heads, n, c.head_dim}, options).squeeze(0).transpose(0, 1);
    const torch::Tensor new_values = torch::randn({n, c.kv_heads, c.head_dim}, options);

    torch::Tensor expected_keys = key_pool.clone(), expected_values = value_pool.clone();
    expected_keys.index_copy_(0, written, new_keys);
    expected_values.index_copy_(0, written, new_values);
    const torch::Tensor exact = GatheredAttention(q, expected_keys, expected_values, visible, ends, torch::kDouble);
    const torch::Tensor libtorch = GatheredAttention(q, expected_keys, expected_values, visible, ends, type);

    const torch::Tensor fused =
        FusedDecodeAttention(q, new_keys, new_values, key_pool, value_pool, written, visible, ends);
    ASSERT_EQ(fused.sizes(), exact.sizes());
    EXPECT_TRUE(torch::equal(key_pool, expected_keys)) << "the key pool: the new keys in their slots only";
    EXPECT_TRUE(torch::equal(value_pool, expected_values)) << "the value pool: the new values in their slots only";
    const double fused_error = Farthest(fused, exact), libtorch_error = Farthest(libtorch, exact);
    const double floor = (type == torch::kFloat ? 2e-6 : 8e-3) * exact.abs().max().item<double>();
    EXPECT_LE(fused_error, std::max(2 * libtorch_error, floor))
        << "fused error " << fused_error << ", LibTorch's " << libtorch_error;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, FusedDecodeAttentionGpuTest,
                         ::testing::Values(torch::kFloat, torch::kBFloat16, torch::kHalf));

std::vector<GenerationRequest> FusedDecodeRequests() {
  std::vector<GenerationRequest> requests;
  for (int64_t i = 0; i < 5; ++i) {
    GenerationRequest request;
    for (int64_t t = 0; t < 3 + 5 * i; ++t) request.prompt.push_back((t * 7 + i * 13 + 2) % 64);
    request.max_new_tokens = 12 + 4 * i;
    requests.push_back(request);
  }
  return requests;
}

TEST(FusedDecodeAttentionTest, AnEngineWithFusedKernelsGivesTheUnfusedTokensOnAGpu) {
  if (!torch::cuda::is_available() || !FusedKernelsBuilt()) GTEST_SKIP() << "needs a GPU and the CUDA kernels";
  LlamaOptions llama = ::dslaunch::runtime::testing::GenerationTestLlama();
  Llama unfused(llama, /*seed=*/9);
  unfused->to(torch::kCUDA);
  llama.fused_kernels = true;
  Llama fused(llama, /*seed=*/9);
  fused->to(torch::kCUDA);
  GenerationEngineOptions options;
  options.block_size = 4;
  options.max_sequences = 3;        // requests wait, join and leave
  options.max_tokens_per_step = 6;  // prompts split over steps, beside decoding sequences
  options.key_length_multiple = 8;
  auto reference = GenerationEngine::Create(unfused, options);
  ASSERT_TRUE(reference.ok()) << reference.status();
  auto expected = (*reference)->GenerateAll(FusedDecodeRequests());
  ASSERT_TRUE(expected.ok()) << expected.status();
  for (bool graphs : {false, true}) {
    if (graphs && !compat::kHasCudaGraphs) continue;
    SCOPED_TRACE(::testing::Message() << "cuda_graphs " << graphs);
    GenerationEngineOptions with = options;
    with.cuda_graphs = graphs;
    auto engine = GenerationEngine::Create(fused, with);
    ASSERT_TRUE(engine.ok()) << engine.status();
    auto results = (*engine)->GenerateAll(FusedDecodeRequests());
    ASSERT_TRUE(results.ok()) << results.status();
    for (size_t i = 0; i < results->size(); ++i) {
      EXPECT_EQ((*results)[i].tokens, (*expected)[i].tokens) << "request " << i;
      ASSERT_EQ((*results)[i].logprobs.size(), (*expected)[i].logprobs.size());
      for (size_t t = 0; t < (*results)[i].logprobs.size(); ++t) {
        EXPECT_NEAR((*results)[i].logprobs[t], (*expected)[i].logprobs[t], 1e-4) << "request " << i << " token " << t;
      }
    }
  }
}

}  // namespace
}  // namespace dslaunch::runtime
