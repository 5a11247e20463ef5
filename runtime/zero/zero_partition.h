// ZeRO stages 1 and 2 (Note [ZeRO partitioning]).
//
// All trainable parameters are viewed as one flat vector of Ψ elements,
// padded to a multiple of the data-parallel size N; rank r owns the
// contiguous range [r·S, (r+1)·S) with S = padded Ψ / N. It keeps the fp32
// master weights and the optimizer state of that range only (stage 1), and
// with stage 2 also only that range of the gradients: each micro-step's
// gradients are reduce-scattered into a persistent shard accumulator in the
// gradients' dtype and the full gradients are freed. After the optimizer step
// on the shard, the updated parameters are all-gathered back into every
// rank's (16-bit or fp32) model parameters.
//
// Model states per rank with mixed-precision Adam: stage 1 4Ψ + 12Ψ/N,
// stage 2 2Ψ + 14Ψ/N (REFERENCE.md).
//
// Stage 0 with mixed precision uses the same machinery with one range (the
// whole vector on every rank, gradients all-reduced): one flat fp32 master
// that one fused Adam step updates, instead of one optimizer step per
// parameter tensor (16Ψ either way).
//
// Not thread-safe; owned by the Engine.
#pragma once

#include <memory>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "runtime/comm/communicator.h"

namespace dslaunch::runtime {

class ZeroPartition {
 public:
  // `comm` may be null (one rank: the shard is everything).
  // `offload`: the master shard lives in host memory (pinned when the
  // parameters are on a GPU) and gradients come down to it for the step
  // (offload_optimizer.device: cpu, ZeRO-Offload).
  static absl::StatusOr<std::unique_ptr<ZeroPartition>> Create(int stage,
                                                               std::vector<torch::Tensor> params,
                                                               Communicator* comm,
                                                               bool offload = false);
  bool offload() const { return offload_; }

  int stage() const { return stage_; }
  int64_t total() const { return total_; }          // Ψ
  int64_t shard_size() const { return shard_size_; } // S
  int64_t shard_begin() const { return shard_rank_ * shard_size_; }
  // How many ranges the vector is cut into: N for stages 1-2, 1 for stage 0.
  int shards() const { return shards_; }

  // The fp32 master weights of this rank's range, as a leaf tensor with a
  // gradient: what the optimizer steps.
  torch::Tensor& master_shard() { return master_shard_; }

  // Stage 2, every micro-step: reduce-scatter (sum) the model gradients into
  // the shard accumulator and free them. No-op for stage 1.
  absl::Status AccumulateMicroStep();
  // At the boundary: the averaged gradient of this rank's range into
  // master_shard().grad() (fp32). Stage 1 first all-reduces the full gradients.
  absl::Status PrepareShardGradient();
  // Σ g² over this rank's range of the prepared gradient, in fp64.
  double LocalGradNormSquared() const;
  // After the optimizer stepped the shard: all-gather every rank's updated
  // range into the model parameters.
  absl::Status GatherParameters();
  // Drops gradients (model and shard) for the next accumulation window.
  void ZeroGradients();

  // Bytes held persistently by this rank.
  int64_t GradientBytes() const;
  int64_t MasterBytes() const { return master_shard_.numel() * 4; }

  // For checkpoints: this rank's master range, and the whole master vector
  // rebuilt from every rank's ranges (for loading at another world size).
  // This rank's range [S] of a flat vector of Ψ elements (fp32), padded with
  // zeros: how a checkpoint written at another world size is re-cut.
  torch::Tensor ShardOf(const torch::Tensor& full_unpadded) const;

 private:
  ZeroPartition(int stage, std::vector<torch::Tensor> params, Communicator* comm, bool offload);
  // The model gradients flattened into the padded layout (zeros where a
  // parameter has no gradient).
  torch::Tensor FlatGradients() const;

  const int stage_;
  const bool offload_;
  std::vector<torch::Tensor> params_;
  Communicator* const comm_;
  int rank_ = 0;
  int size_ = 1;         // data-parallel ranks (gradients are averaged over them)
  int shards_ = 1;       // ranges the flat vector is cut into
  int shard_rank_ = 0;   // which range this rank owns
  int64_t total_ = 0;
  int64_t shard_size_ = 0;
  torch::Tensor master_shard_;
  torch::Tensor grad_accumulator_;  // stage 2: [S] in the gradients' dtype
  bool accumulated_ = false;        // stage 2: something is in the accumulator
  double local_norm_squared_ = 0;   // of the prepared shard gradient
};

}  // namespace dslaunch::runtime
