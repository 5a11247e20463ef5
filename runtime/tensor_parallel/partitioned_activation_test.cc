// Note [Partitioned activations]: each rank keeps 1/T of a replicated
// activation and the group rebuilds it exactly.
#include "runtime/tensor_parallel/partitioned_activation.h"

#include "gtest/gtest.h"
#include "runtime/testing/rank_group.h"

namespace dslaunch::runtime {
namespace {

using testing::InProcessStore;

TEST(PartitionedActivationTest, EachRankKeepsItsShareAndTheGroupRebuildsTheWhole) {
  // 2 x 5 x 7 = 70 elements: 35 per rank over 2, 24 over 3 (the last part
  // padded by 2), 18 over 4 (padded by 2).
  const torch::Tensor whole = torch::arange(70, torch::kFloat).view({2, 5, 7}) * 0.5 - 3;
  for (int size : {2, 3, 4}) {
    InProcessStore store;
    store.RunRanks(size, [&](int rank, Communicator& comm) {
      const TensorParallelGroup group{&comm, rank, size};
      const torch::Tensor kept = KeepPartition(whole, group);
      EXPECT_EQ(kept.numel(), PartitionLength(70, size)) << size << " ranks, rank " << rank;
      EXPECT_LE(kept.numel() * size, 70 + size - 1);
      auto rebuilt = GatherPartitions(kept, {2, 5, 7}, group);
      ASSERT_TRUE(rebuilt.ok()) << rebuilt.status();
      EXPECT_TRUE(torch::equal(*rebuilt, whole)) << size << " ranks, rank " << rank;
    });
  }
}

TEST(PartitionedActivationTest, OneRankKeepsTheWholeAndAWrongLengthIsAnError) {
  const torch::Tensor whole = torch::randn({3, 4});
  const TensorParallelGroup alone;
  const torch::Tensor kept = KeepPartition(whole, alone);
  EXPECT_EQ(kept.numel(), 12);
  auto rebuilt = GatherPartitions(kept, {3, 4}, alone);
  ASSERT_TRUE(rebuilt.ok());
  EXPECT_TRUE(torch::equal(*rebuilt, whole));
  EXPECT_FALSE(GatherPartitions(kept, {3, 5}, alone).ok());
}

}  // namespace
}  // namespace dslaunch::runtime
