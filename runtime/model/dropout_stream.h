// Where a model's dropout masks come from (Note [Dropout streams]).
//
// Note [Dropout streams]
// A model draws every dropout mask from its own stream, not from the
// process's random state, so that:
// - the ranks of a tensor group draw the same masks as each other and as the
//   unsplit model: the stream's seed depends on the job's seed and the rank's
//   model replica (its data-parallel rank), never on its tensor or pipeline
//   coordinate. A replicated activation gets one mask on every rank; an
//   activation split along the sequence (sequence parallelism) gets the
//   unsplit activation's mask, drawn whole on every rank, each keeping its
//   chunk. Tensor parallelism with dropout is then equal to TP = 1 exactly
//   on the CPU, where Megatron's per-rank streams give other masks.
// - a resumed job draws the masks the uninterrupted one drew: StartStep
//   reseeds the stream from (seed, step), so nothing about the stream needs
//   saving in a checkpoint.
// - a recomputed (activation-checkpointed) segment draws its forward's masks
//   again: Generators() names what CheckpointedForward saves and restores. On
//   CUDA that is the device's default generator, which LibTorch's fused
//   dropout kernel draws from (so the CUDA path keeps that kernel); on the CPU
//   a generator of the stream's own, so that ranks run as threads of one
//   process (the parity tests) do not share one.
// Other random draws (routing noise) stay on the process's random state.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "runtime/tensor_parallel/tensor_parallel_group.h"

namespace dslaunch::runtime {

class DropoutStream {
 public:
  explicit DropoutStream(uint64_t seed);

  // The seed of this rank's masks: the job's seed and the rank's model
  // replica, the same for every tensor and pipeline coordinate of it.
  static uint64_t ReplicaSeed(uint64_t job_seed, int64_t data_parallel_rank);
  // Starts over at `seed` (step 0).
  void Reseed(uint64_t seed);
  // The masks of optimizer step `step` onwards come from (seed, step) alone.
  void StartStep(int64_t step);

  // Inverted dropout of `x` with probability `p` (x itself when not
  // training or p is 0).
  torch::Tensor Apply(const torch::Tensor& x, double p, bool training);
  // Dropout of an activation that `group` may hold split along the sequence
  // (dimension 1, sequence parallelism): the unsplit activation's mask is
  // drawn and this rank's chunk of it applied. Apply when it is not split.
  torch::Tensor ApplyInRegion(const torch::Tensor& x, double p, bool training, const TensorParallelGroup& group);
  // Dropout of part `index` of `parts` equal parts of an activation split
  // along `dim` (a row-parallel projection's input, split along the hidden
  // dimension): the whole activation's mask is drawn and this part applied.
  torch::Tensor ApplyToPart(const torch::Tensor& x, double p, bool training, int64_t dim, int64_t parts,
                            int64_t index);

  // The generators masks on `device` are drawn from (brought to the current
  // step first): what a recomputation saves and restores.
  std::vector<at::Generator> Generators(const torch::Device& device);

 private:
  // Reseeds the generator of `device` if the step moved since it last drew.
  at::Generator Prepared(const torch::Device& device);

  uint64_t seed_;
  uint64_t step_seed_;
  at::Generator cpu_;
  bool cpu_stale_ = false;
  // CUDA device index whose default generator holds step_seed_ (-1: none).
  int cuda_seeded_device_ = -1;
};

// A segment's random state for recomputation: the CPU's default generator,
// the default generator of the segment's device, and the generators a
// stream names.
class RandomStateSnapshot {
 public:
  RandomStateSnapshot() = default;
  explicit RandomStateSnapshot(std::vector<at::Generator> generators);
  // Sets every generator to its saved state and returns what they held.
  RandomStateSnapshot Swap() const;

 private:
  std::vector<at::Generator> generators_;
  std::vector<torch::Tensor> states_;
};

// The generators a segment on `device` draws from: the CPU's default
// generator (routing noise draws there on any device), the device's, and,
// with a stream, the stream's.
std::vector<at::Generator> SegmentGenerators(const torch::Device& device, DropoutStream* stream);

}  // namespace dslaunch::runtime
