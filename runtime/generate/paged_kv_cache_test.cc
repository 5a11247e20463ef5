// The paged cache: blocks are given and taken back whole, a reservation the
// pool cannot hold takes nothing, and attention through the cache, a
// sequence fed in pieces over several steps, equals causal attention over
// the whole sequence at once.
#include "runtime/generate/paged_kv_cache.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/torch_compat.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;

PagedKvCacheOptions Options(int64_t blocks) {
  PagedKvCacheOptions options;
  options.layers = 2;
  options.kv_heads = 2;
  options.head_dim = 4;
  options.block_size = 3;
  options.blocks = blocks;
  return options;
}

TEST(PagedKvCacheTest, BlocksAreGivenAndTakenBackWhole) {
  auto cache = PagedKvCache::Create(Options(5));
  ASSERT_TRUE(cache.ok()) << cache.status();
  EXPECT_EQ((*cache)->bytes(), 2 * 2 * 2 * 4 * 4 * 5 * 3);  // k and v, layers, heads, dim, fp32, positions
  ASSERT_TRUE((*cache)->Reserve(7, 4).ok());  // 2 blocks
  EXPECT_EQ((*cache)->Capacity(7), 6);
  ASSERT_TRUE((*cache)->Reserve(7, 6).ok());  // already there
  EXPECT_EQ((*cache)->free_blocks(), 3);
  absl::Status too_many = (*cache)->Reserve(8, 10);  // 4 blocks, 3 free
  EXPECT_EQ(too_many.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(too_many.message()), HasSubstr("3 free blocks of 3 positions; 10 positions need 4 more"));
  EXPECT_EQ((*cache)->free_blocks(), 3);
  EXPECT_EQ((*cache)->Capacity(8), 0);
  ASSERT_TRUE((*cache)->Reserve(8, 9).ok());
  EXPECT_EQ((*cache)->free_blocks(), 0);
  (*cache)->Release(7);
  EXPECT_EQ((*cache)->free_blocks(), 2);
  (*cache)->Release(7);  // twice: nothing more
  EXPECT_EQ((*cache)->free_blocks(), 2);
  auto unreserved = (*cache)->BeginStep({{7, 0, 1}});
  EXPECT_EQ(unreserved.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(PagedKvCache::Create(Options(0)).ok());
}

TEST(PagedKvCacheTest, AttentionInPiecesEqualsCausalAttentionOverTheWhole) {
  // Two sequences interleaved in each step, at different lengths, with
  // grouped-query attention (4 query heads over 2 key/value heads).
  for (int64_t multiple : {1, 4}) {
  SCOPED_TRACE(::testing::Message() << "key_length_multiple " << multiple);
  PagedKvCacheOptions options = Options(16);
  options.key_length_multiple = multiple;
  auto cache = PagedKvCache::Create(options);
  ASSERT_TRUE(cache.ok());
  auto generator = at::make_generator<at::CPUGeneratorImpl>(5);
  const int64_t lengths[2] = {10, 7};
  torch::Tensor q[2], k[2], v[2];
  for (int s = 0; s < 2; ++s) {
    q[s] = torch::randn({1, 4, lengths[s], 4}, generator);
    k[s] = torch::randn({1, 2, lengths[s], 4}, generator);
    v[s] = torch::randn({1, 2, lengths[s], 4}, generator);
    ASSERT_TRUE((*cache)->Reserve(s, lengths[s]).ok());
  }
  // Steps: (seq 0 [0,4), seq 1 [0,2)), (seq 1 [2,7), seq 0 [4,5)), (seq 0 [5,10)).
  const std::vector<std::vector<StepPiece>> steps = {
      {{0, 0, 4}, {1, 0, 2}}, {{1, 2, 5}, {0, 4, 1}}, {{0, 5, 5}}};
  torch::Tensor got[2] = {torch::zeros({1, 4, 10, 4}), torch::zeros({1, 4, 7, 4})};
  for (const auto& pieces : steps) {
    auto step = (*cache)->BeginStep(pieces);
    ASSERT_TRUE(step.ok()) << step.status();
    std::vector<torch::Tensor> qs, ks, vs;
    for (const StepPiece& p : pieces) {
      qs.push_back(q[p.sequence].narrow(2, p.first, p.count));
      ks.push_back(k[p.sequence].narrow(2, p.first, p.count));
      vs.push_back(v[p.sequence].narrow(2, p.first, p.count));
    }
    for (int64_t layer = 0; layer < 2; ++layer) {
      // Layer 1 sees the keys doubled: the layers keep apart.
      const double scale = layer == 0 ? 1.0 : 2.0;
      torch::Tensor out = (*step)->Attend(layer, torch::cat(qs, 2), torch::cat(ks, 2) * scale, torch::cat(vs, 2));
      if (layer == 0) {
        int64_t offset = 0;
        for (const StepPiece& p : pieces) {
          got[p.sequence].narrow(2, p.first, p.count).copy_(out.narrow(2, offset, p.count));
          offset += p.count;
        }
      }
    }
  }
  for (int s = 0; s < 2; ++s) {
    torch::Tensor expected = compat::CausalAttention(q[s], k[s].repeat_interleave(2, 1), v[s].repeat_interleave(2, 1));
    EXPECT_TRUE(torch::allclose(got[s], expected, 1e-5, 1e-6)) << "sequence " << s << ": "
                                                               << (got[s] - expected).abs().max().item<double>();
  }
  }
}

}  // namespace
}  // namespace dslaunch::runtime
