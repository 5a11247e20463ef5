// Adam/AdamW over one flat fp32 shard, with its state in plain tensors the
// checkpoint code can cut and re-join (so a ZeRO checkpoint loads at another
// data-parallel size). The arithmetic is LibTorch's single-tensor Adam/AdamW
// step, so ZeRO matches stage 0 up to the order of gradient sums.
#pragma once

#include <torch/torch.h>

#include <functional>

#include "absl/status/status.h"
#include "runtime/config/job_config.h"
#include "runtime/offload/swapped_shard.h"
#include "runtime/zero/fused_adamw_step.h"

namespace dslaunch::runtime {

class ShardAdam {
 public:
  // `host_kernel`: step with the SIMD CPU Adam (kernels/cpu_adam.h) instead
  // of LibTorch ops; the tensors must be contiguous fp32 in host memory.
  // CUDA shards step with the fused AdamW kernel (kernels/cuda/fused_adamw.h)
  // in builds that have it.
  ShardAdam(const OptimizerConfig& config, const torch::Tensor& like, bool host_kernel = false);

  // p ← one step with gradient g × grad_scale (fp32, same shape as p; the
  // scale is folded into the step's one pass, rounded to float as
  // `g.mul_(grad_scale)` would be).
  void Step(torch::Tensor& p, const torch::Tensor& g, double lr, double beta1, double beta2,
            double grad_scale = 1.0);
  // Elements [offset, offset + length) of p, g and the moments through the
  // step CountStep counted (Note [Step while uploading] in zero_partition.h):
  // stepping a shard range by range gives the bits of one Step. With a
  // defined `rounded` (bf16, p's shape; Note [bf16 parameters from the host
  // step]), the host kernel also writes the range's new values rounded to
  // bf16 there, in the same pass.
  void StepRange(torch::Tensor& p, const torch::Tensor& g, int64_t offset, int64_t length, double lr,
                 double beta1, double beta2, double grad_scale, const torch::Tensor& rounded = {});
  // One step over entries that cover the shard in pieces (Note [In-place
  // fused step]); each gradient is multiplied by grad_scale first, or, given
  // the device Σ grad² (FusedGradSumSquares), by the clip coefficient the
  // kernel computes from it (kernels::AdamWHyperparameters::grad_norm_squared).
  void StepEntries(const std::vector<FusedAdamWEntry>& entries, double lr, double beta1, double beta2,
                   double grad_scale, const double* grad_norm_squared = nullptr, double max_norm = 0);

  // Note [NVMe offload]: one step of a shard whose master and moments are
  // streams 0, 1 and 2 of `swapped` (this ShardAdam then holds no moments:
  // construct it with an empty `like`), a sub-group at a time with the same
  // arithmetic as Step; updated(offset, master) receives each sub-group's
  // new master values (its error stops the step).
  absl::Status StepSwapped(SwappedShard& swapped, const torch::Tensor& g, double lr, double beta1, double beta2,
                           double grad_scale, const std::function<absl::Status(int64_t, const torch::Tensor&)>& updated);
  // For a checkpoint: the swapped moments read into exp_avg()/exp_avg_sq()
  // (or zeros of their shape when not `read`, for a load to overwrite),
  // then dropped again (written back to the swap files first when
  // `write_back`, after a load).
  absl::Status StageSwappedMoments(SwappedShard& swapped, bool read = true);
  absl::Status UnstageSwappedMoments(SwappedShard& swapped, bool write_back);

  // Counts one step and returns its hyperparameters, for a caller that
  // launches the fused kernel itself, piece by piece, with one step count
  // for all pieces (Note [Fused shard step]).
  kernels::AdamWHyperparameters CountStep(double lr, double beta1, double beta2);

  torch::Tensor& exp_avg() { return exp_avg_; }
  torch::Tensor& exp_avg_sq() { return exp_avg_sq_; }
  int64_t step() const { return step_; }
  void set_step(int64_t step) { step_ = step; }
  int64_t StateBytes() const { return (exp_avg_.numel() + exp_avg_sq_.numel()) * 4; }

 private:
  kernels::AdamWHyperparameters Hyperparameters(double lr, double beta1, double beta2) const;
  // p, m, v ← one step (the step count already advanced), in place.
  void StepTensors(torch::Tensor& p, const torch::Tensor& g, torch::Tensor& m, torch::Tensor& v, double lr,
                   double beta1, double beta2, double grad_scale, const torch::Tensor& rounded = {});

  const double eps_;
  const double weight_decay_;
  const bool decoupled_;
  const bool host_kernel_;
  torch::Tensor exp_avg_;
  torch::Tensor exp_avg_sq_;
  int64_t step_ = 0;
};

}  // namespace dslaunch::runtime
