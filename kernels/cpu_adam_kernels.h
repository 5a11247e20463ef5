// Internal to kernels/: the per-ISA loops behind CpuAdamStep. Each steps one
// contiguous piece; cpu_adam.cc does the splitting and the choosing.
#pragma once

#include <cstdint>

#include "kernels/cpu_adam.h"

namespace dslaunch::kernels {

// The per-step scalars of Note [CPU Adam formula], rounded to float once.
struct AdamStepCoefficients {
  float beta1;
  float one_minus_beta1;
  float beta2;
  float one_minus_beta2;
  float neg_step_size;          // -lr / bc1
  float bias_correction2_sqrt;  // sqrt(bc2)
  float eps;
  float grad_scale;             // g *= grad_scale first
  bool l2_decay;                // Adam with weight decay: g += weight_decay * p
  float weight_decay;
  bool decoupled_decay;         // AdamW with weight decay: p *= param_scale
  float param_scale;            // 1 - lr * weight_decay
};

AdamStepCoefficients MakeAdamStepCoefficients(const AdamParams& adam);

// Each steps elements [0, n) of the given arrays; bf16_out may be null.
using AdamPieceKernel = void (*)(const AdamStepCoefficients& c, float* params, const float* grads,
                                 float* exp_avg, float* exp_avg_sq, int64_t n, uint16_t* bf16_out);

void AdamPieceScalar(const AdamStepCoefficients& c, float* params, const float* grads,
                     float* exp_avg, float* exp_avg_sq, int64_t n, uint16_t* bf16_out);
// REQUIRES: the CPU has AVX2 and FMA.
void AdamPieceAvx2(const AdamStepCoefficients& c, float* params, const float* grads,
                   float* exp_avg, float* exp_avg_sq, int64_t n, uint16_t* bf16_out);
// REQUIRES: the CPU has AVX-512F.
void AdamPieceAvx512(const AdamStepCoefficients& c, float* params, const float* grads,
                     float* exp_avg, float* exp_avg_sq, int64_t n, uint16_t* bf16_out);

}  // namespace dslaunch::kernels
