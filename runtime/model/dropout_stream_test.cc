// Note [Dropout streams]: masks that depend on (seed, step) alone, chunks of
// the unsplit mask under sequence parallelism, and recomputation that draws
// its forward's masks again.
#include "runtime/model/dropout_stream.h"

#include "gtest/gtest.h"
#include "runtime/model/activation_checkpoint.h"

namespace dslaunch::runtime {
namespace {

torch::Tensor Ones() { return torch::ones({2, 8, 6}); }

TEST(DropoutStreamTest, TheMasksOfAStepDependOnTheSeedAndTheStepAlone) {
  DropoutStream uninterrupted(11), resumed(11);
  uninterrupted.StartStep(1);
  uninterrupted.Apply(Ones(), 0.5, true);
  uninterrupted.Apply(Ones(), 0.5, true);
  uninterrupted.StartStep(2);
  const torch::Tensor step2 = uninterrupted.Apply(Ones(), 0.5, true);
  // A job resumed at step 2 drew nothing before it.
  resumed.StartStep(2);
  EXPECT_TRUE(torch::equal(resumed.Apply(Ones(), 0.5, true), step2));
  // Other steps, seeds and replicas draw other masks.
  resumed.StartStep(3);
  EXPECT_FALSE(torch::equal(resumed.Apply(Ones(), 0.5, true), step2));
  DropoutStream other_seed(12);
  other_seed.StartStep(2);
  EXPECT_FALSE(torch::equal(other_seed.Apply(Ones(), 0.5, true), step2));
  EXPECT_NE(DropoutStream::ReplicaSeed(11, 0), DropoutStream::ReplicaSeed(11, 1));
  EXPECT_EQ(DropoutStream::ReplicaSeed(11, 1), DropoutStream::ReplicaSeed(11, 1));
  // Reseed starts over.
  uninterrupted.Reseed(11);
  uninterrupted.StartStep(2);
  EXPECT_TRUE(torch::equal(uninterrupted.Apply(Ones(), 0.5, true), step2));
}

TEST(DropoutStreamTest, InvertedDropoutZeroesAboutPAndScalesTheRest) {
  DropoutStream stream(5);
  const torch::Tensor x = torch::full({100000}, 2.0);
  const torch::Tensor y = stream.Apply(x, 0.25, true);
  const double dropped = (y == 0).to(torch::kDouble).mean().item<double>();
  EXPECT_NEAR(dropped, 0.25, 0.01);
  EXPECT_TRUE(torch::allclose(y.masked_select(y != 0), torch::full({1}, 2.0 / 0.75)));
  // Not training, or p = 0: the input itself.
  EXPECT_TRUE(stream.Apply(x, 0.25, false).is_same(x));
  EXPECT_TRUE(stream.Apply(x, 0.0, true).is_same(x));
  const torch::Tensor chunk = x.view({1, 100000, 1});
  EXPECT_TRUE(stream.ApplyInRegion(chunk, 0.25, false, TensorParallelGroup{nullptr, 1, 2, true}).is_same(chunk));
}

// Under sequence parallelism each rank's chunk gets its part of the mask the
// unsplit activation gets; a replicated activation gets the whole mask on
// every rank.
TEST(DropoutStreamTest, SequenceChunksGetTheirPartOfTheUnsplitMask) {
  const torch::Tensor x = torch::arange(2 * 8 * 6, torch::kFloat).view({2, 8, 6}) + 1;
  for (int size : {2, 4}) {
    DropoutStream whole_stream(3);
    whole_stream.StartStep(4);
    const torch::Tensor whole = whole_stream.Apply(x, 0.3, true);
    std::vector<torch::Tensor> chunks;
    for (int rank = 0; rank < size; ++rank) {
      DropoutStream stream(3);
      stream.StartStep(4);
      const int64_t chunk = 8 / size;
      chunks.push_back(stream.ApplyInRegion(x.narrow(1, rank * chunk, chunk), 0.3, true,
                                            TensorParallelGroup{nullptr, rank, size, /*sequence_parallel=*/true}));
      // Without sequence parallelism the activation is whole on every rank.
      DropoutStream replicated(3);
      replicated.StartStep(4);
      EXPECT_TRUE(torch::equal(
          replicated.ApplyInRegion(x, 0.3, true, TensorParallelGroup{nullptr, rank, size, false}), whole));
    }
    EXPECT_TRUE(torch::equal(torch::cat(chunks, 1), whole)) << size << " ranks";
  }
}

// A recomputed segment draws the masks its forward drew, from the stream and
// from the process's random state alike, and leaves both where the forward
// left them.
struct Drawn {
  torch::Tensor grad;   // of the segment's weight
  torch::Tensor after;  // masks drawn after the backward
};

Drawn RunSegment(const torch::Device& device, bool checkpointed) {
  DropoutStream stream(9);
  stream.StartStep(1);
  torch::manual_seed(21);
  if (device.is_cuda()) torch::cuda::manual_seed_all(21);
  const torch::Tensor weight = torch::linspace(0.5, 1.5, 64, torch::kFloat).to(device).requires_grad_(true);
  Segment segment = [&](const torch::Tensor& in) {
    // One mask from the stream, one from LibTorch's dropout on the device's
    // state, and noise from the CPU's (as routing noise draws on any device).
    return torch::dropout(stream.Apply(in * weight, 0.5, true), 0.5, true) * weight *
           torch::rand({64}).to(device);
  };
  const torch::Tensor x = torch::linspace(-1, 1, 64, torch::kFloat).to(device).requires_grad_(true);
  torch::Tensor y = checkpointed ? CheckpointedForward(segment, x, CheckpointStorage{}, &stream) : segment(x);
  y.sum().backward();
  return {weight.grad().cpu(), torch::cat({stream.Apply(torch::ones({16}, device), 0.5, true).cpu(),
                                           torch::dropout(torch::ones({16}, device), 0.5, true).cpu(),
                                           torch::rand({16})})};
}

// A recomputed segment draws the masks its forward drew, from the stream and
// from the process's random state alike, and leaves both where the forward
// left them (on CUDA too, where the device's generator is what LibTorch's
// dropout draws from and the CPU's what routing noise draws from). Seen
// failing on the CPU with the CPU generator left out of the snapshot.
TEST(DropoutStreamTest, RecomputationDrawsTheForwardsMasks) {
  std::vector<torch::Device> devices = {torch::kCPU};
  if (torch::cuda::is_available()) devices.push_back(torch::Device(torch::kCUDA, 0));
  for (const torch::Device& device : devices) {
    const Drawn plain = RunSegment(device, false), recomputed = RunSegment(device, true);
    EXPECT_TRUE(torch::equal(plain.grad, recomputed.grad)) << device;
    EXPECT_TRUE(torch::equal(plain.after, recomputed.after)) << device;
    // Not vacuous: the gradient depends on the masks.
    EXPECT_GT((plain.grad == 0).sum().item<int64_t>(), 0) << device;
  }
}

}  // namespace
}  // namespace dslaunch::runtime
