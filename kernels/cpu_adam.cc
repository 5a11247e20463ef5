#include "kernels/cpu_adam.h"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/rank_contract.h"
#include "kernels/cpu_adam_kernels.h"
#include "kernels/range_thread_pool.h"

namespace dslaunch::kernels {
namespace {

// Piece boundaries fall on multiples of the widest vector (16 floats), so
// every piece but the last runs without a tail.
constexpr int64_t kPieceAlign = 16;

// The process-wide state behind CpuAdamStep, built once from the tunables
// (Note [CPU Adam tunables]) and immutable afterwards except for the pool,
// which is thread-safe.
struct CpuAdamRuntime {
  absl::Status init_status;
  CpuAdamIsaKind isa = CpuAdamIsaKind::kScalar;
  std::unique_ptr<RangeThreadPool> pool;
};

const CpuAdamRuntime& Runtime() {
  // Never destroyed: steps may still run from other threads' static teardown.
  static const CpuAdamRuntime* const runtime = [] {
    auto* r = new CpuAdamRuntime;
    // The cores this process may run on (its affinity mask: a rank bound to
    // a NUMA node or a share of the host), not every core of the host.
    unsigned hardware = std::thread::hardware_concurrency();
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    if (::sched_getaffinity(0, sizeof(allowed), &allowed) == 0 && CPU_COUNT(&allowed) > 0) {
      hardware = static_cast<unsigned>(CPU_COUNT(&allowed));
    }
    absl::StatusOr<CpuAdamIsaKind> isa =
        ResolveCpuAdamIsa(std::getenv(rank_env::kCpuAdamIsa), DetectCpuIsaSupport());
    absl::StatusOr<int> threads =
        ResolveCpuAdamThreads(std::getenv(rank_env::kCpuAdamThreads), hardware);
    if (isa.ok()) {
      r->isa = *isa;
    } else {
      r->init_status = isa.status();
    }
    if (!threads.ok() && r->init_status.ok()) r->init_status = threads.status();
    r->pool = std::make_unique<RangeThreadPool>(
        threads.ok() ? *threads : static_cast<int>(std::max(hardware, 1u)));
    return r;
  }();
  return *runtime;
}

AdamPieceKernel KernelFor(CpuAdamIsaKind isa) {
  switch (isa) {
    case CpuAdamIsaKind::kAvx2: return &AdamPieceAvx2;
    case CpuAdamIsaKind::kAvx512: return &AdamPieceAvx512;
    case CpuAdamIsaKind::kScalar: break;
  }
  return &AdamPieceScalar;
}

}  // namespace

AdamStepCoefficients MakeAdamStepCoefficients(const AdamParams& adam) {
  // Doubles first, one rounding to float: LibTorch keeps its options in double
  // and rounds each Scalar argument to the tensor's float type.
  const double lr = adam.lr;
  const double beta1 = adam.beta1;
  const double beta2 = adam.beta2;
  const double weight_decay = adam.weight_decay;
  const double step = static_cast<double>(adam.step);
  const double bias_correction1 = adam.bias_correction ? 1.0 - std::pow(beta1, step) : 1.0;
  const double bias_correction2 = adam.bias_correction ? 1.0 - std::pow(beta2, step) : 1.0;

  AdamStepCoefficients c;
  c.beta1 = adam.beta1;
  c.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  c.beta2 = adam.beta2;
  c.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  c.neg_step_size = static_cast<float>(-(lr / bias_correction1));
  c.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  c.eps = adam.eps;
  c.grad_scale = static_cast<float>(adam.grad_scale);
  const bool decay = adam.weight_decay != 0.0f;
  c.l2_decay = decay && !adam.adamw;
  c.weight_decay = adam.weight_decay;
  c.decoupled_decay = decay && adam.adamw;
  c.param_scale = static_cast<float>(1.0 - lr * weight_decay);
  return c;
}

absl::StatusOr<int> ResolveCpuAdamThreads(const char* forced, unsigned hardware_concurrency) {
  if (forced == nullptr || *forced == '\0') {
    return static_cast<int>(std::max(hardware_concurrency, 1u));
  }
  int threads = 0;
  if (!absl::SimpleAtoi(forced, &threads) || threads < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        rank_env::kCpuAdamThreads, "=", forced, ": expected a positive integer"));
  }
  return threads;
}

absl::Status CpuAdamInit() { return Runtime().init_status; }

const char* CpuAdamIsa() { return CpuAdamIsaName(Runtime().isa); }

int CpuAdamThreads() { return Runtime().pool->num_threads(); }

void CpuAdamStep(const AdamParams& adam, float* params, const float* grads, float* exp_avg,
                 float* exp_avg_sq, int64_t n, uint16_t* params_bf16_out) {
  CpuAdamStepWithIsa(Runtime().isa, adam, params, grads, exp_avg, exp_avg_sq, n,
                     params_bf16_out);
}

void CpuAdamStepWithIsa(CpuAdamIsaKind isa, const AdamParams& adam, float* params,
                        const float* grads, float* exp_avg, float* exp_avg_sq, int64_t n,
                        uint16_t* params_bf16_out) {
  if (n <= 0) return;
  const AdamStepCoefficients c = MakeAdamStepCoefficients(adam);
  const AdamPieceKernel kernel = KernelFor(isa);
  Runtime().pool->ParallelFor(
      n, kCpuAdamMinPieceElements, kPieceAlign, [&](int64_t begin, int64_t end) {
        kernel(c, params + begin, grads + begin, exp_avg + begin, exp_avg_sq + begin,
               end - begin, params_bf16_out == nullptr ? nullptr : params_bf16_out + begin);
      });
}

}  // namespace dslaunch::kernels
