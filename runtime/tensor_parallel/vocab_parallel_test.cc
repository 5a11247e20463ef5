#include "runtime/tensor_parallel/vocab_parallel.h"

#include "gtest/gtest.h"
#include "runtime/tensor_parallel/tensor_parallel_layout.h"
#include "runtime/testing/rank_group.h"

namespace dslaunch::runtime {
namespace {

using testing::InProcessStore;

constexpr int64_t kVocab = 11;
constexpr int64_t kRows = 7;

// From a generator of its own: ranks call this on threads at once, and
// reseeding LibTorch's shared generator there raced (a rank drew other logits).
torch::Tensor Logits() {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(5);
  return torch::randn({kRows, kVocab}, generator, torch::TensorOptions()) * 3;
}

torch::Tensor Targets() { return torch::tensor({3, -100, 0, 10, 7, -100, 5}, torch::kLong); }

// PyTorch's own loss: the reference for every group size.
std::pair<torch::Tensor, torch::Tensor> TorchLossAndGradient(double smoothing) {
  torch::Tensor logits = Logits().requires_grad_(true);
  torch::Tensor loss = torch::nn::functional::cross_entropy(
      logits, Targets(),
      torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100).label_smoothing(smoothing));
  loss.backward();
  return {loss.detach(), logits.grad()};
}

TEST(VocabParallelTest, OneRankMatchesPyTorchsCrossEntropyWithIgnoredTargetsAndSmoothing) {
  for (double smoothing : {0.0, 0.1}) {
    auto [expected_loss, expected_grad] = TorchLossAndGradient(smoothing);
    torch::Tensor logits = Logits().requires_grad_(true);
    torch::Tensor loss = VocabParallelCrossEntropy(logits, Targets(), kVocab, smoothing, TensorParallelGroup{});
    loss.backward();
    EXPECT_NEAR(loss.item<double>(), expected_loss.item<double>(), 1e-5) << "smoothing " << smoothing;
    EXPECT_TRUE(torch::allclose(logits.grad(), expected_grad, 1e-5, 1e-6)) << "smoothing " << smoothing;
  }
}

// Split over 2, 3 and 4 ranks (the vocabulary padded: 11 → 12, 12, 12), each
// rank holding only its columns: the same loss on every rank, and the
// gathered gradient is PyTorch's.
TEST(VocabParallelTest, SplitVocabularyGivesTheWholeLossAndGradientOnGloo) {
  for (int size : {2, 3, 4}) {
    for (double smoothing : {0.0, 0.2}) {
      auto [expected_loss, expected_grad] = TorchLossAndGradient(smoothing);
      // Logits as a [vocab, rows] "weight" so the vocabulary form slices them.
      const TensorParallelForm form{"logits", TensorParallelSplit::kVocab, 1, kVocab, PaddedVocabSize(kVocab, size, 1)};
      InProcessStore store;
      store.RunRanks(size, [&](int rank, Communicator& comm) {
        TensorParallelGroup group{&comm, rank, size};
        auto mine = SliceForRank(Logits().t(), form, rank, size);
        ASSERT_TRUE(mine.ok()) << mine.status();
        // Padding columns hold garbage in a real head: they must not count.
        torch::Tensor local = mine->t().contiguous() + 0;
        if (rank == size - 1) local.narrow(1, local.size(1) - 1, 1).fill_(50.0);
        local.requires_grad_(true);
        torch::Tensor loss = VocabParallelCrossEntropy(local, Targets(), kVocab, smoothing, group);
        loss.backward();
        EXPECT_NEAR(loss.item<double>(), expected_loss.item<double>(), 1e-5) << size << " ranks, rank " << rank;
        auto grad = GatherWhole(local.grad().t().contiguous(), form, group);
        ASSERT_TRUE(grad.ok()) << grad.status();
        EXPECT_TRUE(torch::allclose(grad->t(), expected_grad, 1e-5, 1e-6))
            << size << " ranks, rank " << rank << ", smoothing " << smoothing;
      });
    }
  }
}

// The embedding split by vocabulary: each rank's rows, zeros elsewhere,
// summed across the group, is the whole lookup; its gradient lands in the
// rank that holds the row.
TEST(VocabParallelTest, SplitEmbeddingLooksUpTheWholeTableOnGloo) {
  torch::manual_seed(9);
  const torch::Tensor table = torch::randn({kVocab, 6});
  const torch::Tensor ids = torch::tensor({{0, 10, 4, 4}, {7, 1, 9, 2}}, torch::kLong);
  torch::Tensor whole_table = table.clone().requires_grad_(true);
  torch::Tensor expected = torch::embedding(whole_table, ids);
  (expected * expected).sum().backward();
  for (int size : {2, 4}) {
    for (bool sequence_parallel : {false, true}) {
      const TensorParallelForm form{"embed", TensorParallelSplit::kVocab, 1, kVocab, PaddedVocabSize(kVocab, size, 1)};
      InProcessStore store;
      store.RunRanks(size, [&](int rank, Communicator& comm) {
        TensorParallelGroup group{&comm, rank, size, sequence_parallel};
        torch::Tensor local = SliceForRank(table, form, rank, size).value().requires_grad_(true);
        torch::Tensor out = VocabParallelEmbedding(ids, local, group);
        torch::Tensor want = expected.detach();
        if (sequence_parallel) want = want.narrow(1, rank * (4 / size), 4 / size);
        EXPECT_TRUE(torch::allclose(out, want)) << size << " ranks, sequence parallel " << sequence_parallel;
        // Under sequence parallelism each rank's loss covers its time steps;
        // the reduce-scatter's backward gathers every rank's gradient, so each
        // rank's rows get the gradient of the sum of the ranks' losses.
        (out * out).sum().backward();
        torch::Tensor whole = GatherWhole(local.grad(), form, group).value();
        EXPECT_TRUE(torch::allclose(whole, whole_table.grad(), 1e-5, 1e-6)) << size << " ranks";
      });
    }
  }
}

}  // namespace
}  // namespace dslaunch::runtime
