// Which instruction set the CPU Adam step runs on, and how that is chosen.
// See Note [CPU Adam dispatch] in cpu_adam.h.
#pragma once

#include <vector>

#include "absl/status/statusor.h"

namespace dslaunch::kernels {

enum class CpuAdamIsaKind {
  kScalar,  // plain C++, any x86-64 (and the reference the others are tested against)
  kAvx2,    // AVX2 + FMA, 8 lanes
  kAvx512,  // AVX-512F, 16 lanes
};

// "scalar", "avx2" or "avx512": the spelling DSLAUNCH_CPU_ADAM_ISA accepts.
const char* CpuAdamIsaName(CpuAdamIsaKind isa);

// What the CPU in use (and its OS, which must save the wider registers) offers.
struct CpuIsaSupport {
  bool avx2_fma = false;
  bool avx512f = false;

  bool Supports(CpuAdamIsaKind isa) const;
};

CpuIsaSupport DetectCpuIsaSupport();

// Every ISA `support` can run, scalar first, widest last.
std::vector<CpuAdamIsaKind> SupportedCpuAdamIsas(const CpuIsaSupport& support);

// The ISA to use: `forced` (the value of DSLAUNCH_CPU_ADAM_ISA; null or empty
// when unset) if given, else the widest `support` offers. Errors:
// InvalidArgument for an unknown name, FailedPrecondition for an ISA the CPU
// lacks (a forced path never silently becomes another).
absl::StatusOr<CpuAdamIsaKind> ResolveCpuAdamIsa(const char* forced, const CpuIsaSupport& support);

}  // namespace dslaunch::kernels
