// The plain structs of the fused AdamW kernel (kernels/cuda/fused_adamw.h),
// without CUDA headers: code that only describes a step can include this.
#pragma once

#include <cstdint>
#include <vector>

namespace dslaunch::kernels {

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
};

}  // namespace dslaunch::kernels
