// Megatron's ColumnParallelLinear with gather_output on Gloo: every rank's
// output is the unsplit layer's, and backward gives the unsplit input
// gradient and each rank's rows of the weight and bias gradients; with the
// input gradient's reduction broken the input gradient is wrong.
#include "runtime/tensor_parallel/tensor_parallel_ops.h"

#include "gtest/gtest.h"
#include "runtime/testing/rank_group.h"

namespace dslaunch::runtime {
namespace {

using testing::InProcessStore;

struct Unsplit {
  torch::Tensor x, weight, bias, target;
};

// From a generator of its own (ranks call this on threads at once).
Unsplit Values() {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(9);
  Unsplit v;
  v.x = torch::randn({2, 3, 8}, generator, torch::TensorOptions());
  v.weight = torch::randn({12, 8}, generator, torch::TensorOptions());
  v.bias = torch::randn({12}, generator, torch::TensorOptions());
  v.target = torch::randn({2, 3, 12}, generator, torch::TensorOptions());
  return v;
}

struct Gradients {
  torch::Tensor output, x, weight, bias;
};

// The loss Σ y·target (its gradient reaches every output column).
Gradients RunLayer(const Unsplit& v, const TensorParallelGroup& group, bool gather) {
  const int64_t rows = v.weight.size(0) / group.size;
  torch::Tensor x = v.x.clone().requires_grad_(true);
  torch::Tensor weight = v.weight.narrow(0, group.rank * rows, rows).clone().requires_grad_(true);
  torch::Tensor bias = v.bias.narrow(0, group.rank * rows, rows).clone().requires_grad_(true);
  torch::Tensor y = ColumnParallelLinear(x, weight, bias, group, gather);
  torch::Tensor target = gather ? v.target : v.target.narrow(2, group.rank * rows, rows);
  // Without the gather each rank's loss is its columns' share: the sum over
  // the group is the whole loss, as the row-parallel layer after it makes it.
  (y * target).sum().backward();
  return {y.detach(), x.grad(), weight.grad(), bias.grad()};
}

TEST(TensorParallelOpsTest, ColumnParallelLinearWithGatheredOutputIsTheUnsplitLayerOnGloo) {
  const Unsplit v = Values();
  const Gradients whole = RunLayer(v, TensorParallelGroup{}, /*gather=*/true);
  for (int size : {2, 3, 4}) {
    for (bool broken : {false, true}) {
      BreakReductionForTesting(broken ? BrokenReduction::kColumnInputGradient : BrokenReduction::kNone);
      InProcessStore store;
      store.RunRanks(size, [&](int rank, Communicator& comm) {
        const TensorParallelGroup group{&comm, rank, size};
        const int64_t rows = 12 / size;
        for (bool gather : {true, false}) {
          const Gradients mine = RunLayer(v, group, gather);
          const torch::Tensor expected_output =
              gather ? whole.output : whole.output.narrow(2, rank * rows, rows);
          EXPECT_TRUE(torch::allclose(mine.output, expected_output, 1e-5, 1e-6)) << size << " ranks, rank " << rank;
          EXPECT_TRUE(torch::allclose(mine.weight, whole.weight.narrow(0, rank * rows, rows), 1e-5, 1e-6));
          EXPECT_TRUE(torch::allclose(mine.bias, whole.bias.narrow(0, rank * rows, rows), 1e-5, 1e-6));
          // The input gradient is the group's sum: wrong when its reduction is broken.
          EXPECT_EQ(torch::allclose(mine.x, whole.x, 1e-5, 1e-6), !broken)
              << size << " ranks, rank " << rank << (broken ? ", reduction broken" : "");
        }
      });
      BreakReductionForTesting(BrokenReduction::kNone);
    }
  }
}

TEST(TensorParallelOpsTest, GatheringTheOutputIsRefusedUnderSequenceParallelism) {
  InProcessStore store;
  store.RunRanks(2, [&](int rank, Communicator& comm) {
    TensorParallelGroup group{&comm, rank, 2, /*sequence_parallel=*/true};
    EXPECT_THROW(ColumnParallelLinear(torch::ones({1, 2, 4}), torch::ones({3, 4}), torch::Tensor(), group, true),
                 c10::Error);
  });
}

}  // namespace
}  // namespace dslaunch::runtime
