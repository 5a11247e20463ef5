// The plain structs of the fused AdamW kernel (kernels/cuda/fused_adamw.h),
// without CUDA headers: code that only describes a step can include this.
#pragma once

#include <cstdint>
#include <vector>

#if defined(__CUDACC__)
#define DSLAUNCH_HOST_DEVICE __host__ __device__
#else
#define DSLAUNCH_HOST_DEVICE
#endif

namespace dslaunch::kernels {

// The unscale-and-clip coefficient: `unscale` (1 / loss scale), times
// max_norm / (norm + 1e-6) when the unscaled gradient norm exceeds max_norm
// (max_norm <= 0: no clipping). The engine computes it on the host and the
// fused AdamW kernel on the device (AdamWHyperparameters::grad_norm_squared)
// with this one function, so both give the same bits.
DSLAUNCH_HOST_DEVICE inline double ClipCoefficient(double unscaled_norm, double unscale, double max_norm) {
  return max_norm > 0 && unscaled_norm > max_norm ? unscale * (max_norm / (unscaled_norm + 1e-6)) : unscale;
}

struct AdamWTensor {
  float* master = nullptr;
  const void* grad = nullptr;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  void* param = nullptr;  // optional: rewritten from the new master
  int64_t numel = 0;
};

struct AdamWChunk {
  int32_t tensor = 0;
  int32_t length = 0;
  int64_t offset = 0;
};

inline constexpr int32_t kAdamWChunkElements = 1 << 16;

// The chunks covering `numels` (host side; copy the result to the device).
std::vector<AdamWChunk> PlanAdamWChunks(const std::vector<int64_t>& numels);

struct AdamWHyperparameters {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  bool decoupled = true;  // AdamW; false: Adam with L2 weight decay
  int64_t step = 1;       // after incrementing, as LibTorch counts
  double grad_scale = 1;
  // Optional: Σ grad² on the device (adamw_grad_sum_squares). The kernel then
  // multiplies the gradients by ClipCoefficient(sqrt(Σ grad²) · grad_scale,
  // grad_scale, max_norm) instead of grad_scale, so a clipped step needs no
  // round trip through the host. A norm that is not finite skips the update
  // (master, moments unchanged; the 16-bit copy is written from the master).
  const double* grad_norm_squared = nullptr;
  double max_norm = 0;
};

}  // namespace dslaunch::kernels
