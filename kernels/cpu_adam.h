// CPU Adam / AdamW step for ZeRO-Offload (DeepSpeed's cpu_adam counterpart),
// without LibTorch: fp32 master parameters, gradients and both moments live in
// host memory, and one fused pass per element updates them.
//
// Note [CPU Adam formula]
// torch::optim::Adam / AdamW's formula (LibTorch 1.13 and 2.x), per element:
//   g = g * grad_scale                               (float(grad_scale); exact when 1)
//   Adam (L2):   g = g + wd * p                      (before the moments)
//   AdamW:       p = p * (1 - lr * wd)               (before the update)
//   m = b1 * m + (1 - b1) * g
//   v = b2 * v + (1 - b2) * g * g
//   bc1 = 1 - b1^t,  bc2 = 1 - b2^t                  (1 when !bias_correction)
//   p = p + (-lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)
// The per-step scalars (1 - b1, lr / bc1, sqrt(bc2), 1 - lr * wd) are computed
// in double from the float hyperparameters and rounded to float once, as
// LibTorch does with its double options. The scalar path evaluates each line
// in LibTorch's order, one rounding per operation; the SIMD paths fuse the
// moment updates (FMA). Results therefore agree with LibTorch to a few ulp,
// not bit for bit (LibTorch's own vector kernels fuse some operations too);
// see Note [CPU Adam tolerances] in cpu_adam_test_util.h.
//
// Note [CPU Adam dispatch]
// The scalar, AVX2+FMA and AVX-512F paths are all compiled into the library
// with function-level target attributes (generic compile flags), and one is
// chosen at run time: the widest the CPU supports, unless the environment
// forces one (Note [CPU Adam tunables]). Every path gives the same result
// wherever an element sits in the buffer (vector tails run the vector code).
//
// Note [CPU Adam tunables]
// Read once per process, here and nowhere else, at the first CpuAdam* call:
//   DSLAUNCH_CPU_ADAM_ISA      scalar | avx2 | avx512   default: widest supported
//   DSLAUNCH_CPU_ADAM_THREADS  threads stepping one buffer  default: the cores of the affinity mask
// Each call splits the buffer into contiguous pieces of at least
// kCpuAdamMinPieceElements over that many threads (the caller included).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cpu_adam_isa.h"

namespace dslaunch::kernels {

// Hyperparameters of one step (defaults: torch::optim::AdamOptions').
struct AdamParams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  bool adamw = false;           // decoupled weight decay (AdamW) instead of L2 (Adam)
  bool bias_correction = true;
  int64_t step = 1;             // 1-based count of this step, for bias correction
  // Each gradient is multiplied by this first, rounded to float as
  // `grad.mul_(grad_scale)` would (the clip coefficient, folded into the pass
  // instead of a separate one over the whole buffer).
  double grad_scale = 1.0;
};

// Pieces smaller than this are not worth a thread: ~1.8 MB of traffic.
inline constexpr int64_t kCpuAdamMinPieceElements = 64 * 1024;

// Resolves the tunables (Note [CPU Adam tunables]) if not yet done and
// returns their error, the same one on every call: InvalidArgument for a
// malformed value, FailedPrecondition for a forced ISA this CPU lacks. Callers
// that own the process (the rank runtime) call it at startup to fail early;
// after an error, steps run on the scalar path, on hardware_concurrency
// threads.
absl::Status CpuAdamInit();

// Name of the ISA CpuAdamStep uses ("scalar", "avx2" or "avx512").
const char* CpuAdamIsa();

// Threads CpuAdamStep splits one call over.
int CpuAdamThreads();

// One Adam/AdamW step (Note [CPU Adam formula]) over n elements, in place on
// params, exp_avg and exp_avg_sq. With params_bf16_out, also writes the updated
// parameters rounded to bfloat16 (Note [bf16 rounding] in bf16.h) in the same
// pass, for the mixed-precision copy sent back to the accelerator.
// REQUIRES: the arrays hold n elements each and do not overlap; adam.step >= 1
// when adam.bias_correction. Thread-safe; concurrent calls share (and take
// turns on) one process-wide thread pool.
void CpuAdamStep(const AdamParams& adam, float* params, const float* grads, float* exp_avg,
                 float* exp_avg_sq, int64_t n, uint16_t* params_bf16_out = nullptr);

// CpuAdamStep on the given ISA instead of the chosen one (tests, benchmarks).
// REQUIRES: DetectCpuIsaSupport().Supports(isa).
void CpuAdamStepWithIsa(CpuAdamIsaKind isa, const AdamParams& adam, float* params,
                        const float* grads, float* exp_avg, float* exp_avg_sq, int64_t n,
                        uint16_t* params_bf16_out = nullptr);

// Parses DSLAUNCH_CPU_ADAM_THREADS (`forced`, null or empty when unset):
// a positive integer, else `hardware_concurrency` (at least 1).
absl::StatusOr<int> ResolveCpuAdamThreads(const char* forced, unsigned hardware_concurrency);

}  // namespace dslaunch::kernels
