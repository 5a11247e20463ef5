// Megatron's ColumnParallelLinear with gather_output on Gloo: every rank's
// output is the unsplit layer's, and backward gives the unsplit input
// gradient and each rank's rows of the weight and bias gradients; with the
// input gradient's reduction broken the input gradient is wrong. An input
// gradient's reduction runs on the group's worker while its caller goes on
// (Note [Overlapped input-gradient reduction]).
#include "runtime/tensor_parallel/tensor_parallel_ops.h"

#include <future>
#include <thread>

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

// Forwards to a real communicator, but holds each all-reduce and
// reduce-scatter until the test releases it, and says which thread ran it.
class HeldCommunicator : public Communicator {
 public:
  explicit HeldCommunicator(Communicator& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  const std::string& backend() const override { return inner_.backend(); }
  absl::Status AllReduce(torch::Tensor& tensor, ReduceOp op) override {
    Hold();
    return inner_.AllReduce(tensor, op);
  }
  absl::Status ReduceScatter(const torch::Tensor& input, torch::Tensor& output, ReduceOp op) override {
    Hold();
    return inner_.ReduceScatter(input, output, op);
  }
  absl::Status AllGather(const torch::Tensor& input, torch::Tensor& output) override {
    return inner_.AllGather(input, output);
  }
  absl::Status Broadcast(torch::Tensor& tensor, int root) override { return inner_.Broadcast(tensor, root); }
  absl::Status Send(const torch::Tensor& tensor, int peer) override { return inner_.Send(tensor, peer); }
  absl::Status Recv(torch::Tensor& tensor, int peer) override { return inner_.Recv(tensor, peer); }
  absl::Status SendRecv(std::vector<PeerTransfer>& transfers) override { return inner_.SendRecv(transfers); }
  absl::Status AllToAll(const torch::Tensor& input, torch::Tensor& output) override {
    return inner_.AllToAll(input, output);
  }
  absl::Status Barrier() override { return inner_.Barrier(); }

  // Blocks until a collective is held; the thread that runs it.
  std::thread::id AwaitHeld() { return held_.get_future().get(); }
  void Release() { release_.set_value(); }

 private:
  void Hold() {
    held_.set_value(std::this_thread::get_id());
    release_.get_future().wait();
  }
  Communicator& inner_;
  std::promise<std::thread::id> held_;
  std::promise<void> release_;
};

// Rank r's part of the gradient of a region's whole input [2, 6, 4].
torch::Tensor PartOf(int rank) {
  return torch::arange(48, torch::kFloat).view({2, 6, 4}) * (rank + 1) + rank;
}

TEST(InputGradientReductionTest, SumsTheRanksPartsOnTheWorkerWhileTheCallerGoesOn) {
  for (int size : {2, 3}) {
    torch::Tensor sum = torch::zeros({2, 6, 4});
    for (int r = 0; r < size; ++r) sum += PartOf(r);
    for (bool sequence_parallel : {false, true}) {
      InProcessStore store;
      store.RunRanks(size, [&](int rank, Communicator& comm) {
        const torch::Tensor expected = sequence_parallel ? sum.narrow(1, rank * (6 / size), 6 / size) : sum;
        const std::string what = std::to_string(size) + " ranks, rank " + std::to_string(rank) +
                                 (sequence_parallel ? ", sequence parallel" : "");
        {  // On a worker: started, and held, while this thread is free.
          HeldCommunicator held(comm);
          CommWorker worker;
          InputGradientReduction reduction(PartOf(rank), &held, &worker, sequence_parallel);
          EXPECT_NE(held.AwaitHeld(), std::this_thread::get_id()) << what;
          held.Release();
          EXPECT_TRUE(torch::equal(reduction.Finish(), expected)) << what;
        }
        {  // Without one: inline, done when the constructor returns.
          InputGradientReduction reduction(PartOf(rank), &comm, nullptr, sequence_parallel);
          EXPECT_TRUE(torch::equal(reduction.Finish(), expected)) << what;
        }
      });
      // Broken for the parity tests: each rank keeps its part, unsummed.
      BreakReductionForTesting(BrokenReduction::kColumnInputGradient);
      InProcessStore broken;
      broken.RunRanks(size, [&](int rank, Communicator& comm) {
        CommWorker worker;
        InputGradientReduction reduction(PartOf(rank), &comm, &worker, sequence_parallel);
        const torch::Tensor part = PartOf(rank);
        EXPECT_TRUE(torch::equal(reduction.Finish(),
                                 sequence_parallel ? part.narrow(1, rank * (6 / size), 6 / size) : part));
      });
      BreakReductionForTesting(BrokenReduction::kNone);
    }
  }
}

}  // namespace
}  // namespace dslaunch::runtime
