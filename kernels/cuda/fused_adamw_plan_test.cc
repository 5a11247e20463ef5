// The host side of the fused AdamW kernel, on any machine: the chunks cover
// every element of every tensor exactly once, in order, none longer than
// kAdamWChunkElements, and empty tensors get none.
#include <gtest/gtest.h>

#include "kernels/cuda/fused_adamw_types.h"

namespace dslaunch::kernels {
namespace {

TEST(PlanAdamWChunksTest, CoversEveryElementOnceInBoundedChunks) {
  const std::vector<int64_t> numels = {1, 0, kAdamWChunkElements, kAdamWChunkElements + 1, 5 * kAdamWChunkElements - 3};
  const std::vector<AdamWChunk> chunks = PlanAdamWChunks(numels);
  std::vector<int64_t> covered(numels.size(), 0);
  int32_t last_tensor = -1;
  for (const AdamWChunk& c : chunks) {
    ASSERT_GE(c.tensor, last_tensor) << "chunks follow the tensors' order";
    if (c.tensor != last_tensor) covered[c.tensor] = 0;
    last_tensor = c.tensor;
    EXPECT_GT(c.length, 0);
    EXPECT_LE(c.length, kAdamWChunkElements);
    EXPECT_EQ(c.offset, covered[c.tensor]) << "no gap or overlap in tensor " << c.tensor;
    covered[c.tensor] += c.length;
  }
  for (size_t t = 0; t < numels.size(); ++t) EXPECT_EQ(covered[t], numels[t]) << "tensor " << t;
  EXPECT_EQ(chunks.size(), 1u + 0u + 1u + 2u + 5u);
  // Chunk offsets stay multiples of the chunk size: a 16-byte aligned tensor
  // keeps every chunk aligned for the vector path.
  for (const AdamWChunk& c : chunks) EXPECT_EQ(c.offset % kAdamWChunkElements, 0);
}

}  // namespace
}  // namespace dslaunch::kernels
