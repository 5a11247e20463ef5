#include "kernels/cpu_adam_isa.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/rank_contract.h"

namespace dslaunch::kernels {

const char* CpuAdamIsaName(CpuAdamIsaKind isa) {
  switch (isa) {
    case CpuAdamIsaKind::kScalar: return "scalar";
    case CpuAdamIsaKind::kAvx2: return "avx2";
    case CpuAdamIsaKind::kAvx512: return "avx512";
  }
  return "unknown";
}

bool CpuIsaSupport::Supports(CpuAdamIsaKind isa) const {
  switch (isa) {
    case CpuAdamIsaKind::kScalar: return true;
    case CpuAdamIsaKind::kAvx2: return avx2_fma;
    case CpuAdamIsaKind::kAvx512: return avx512f;
  }
  return false;
}

CpuIsaSupport DetectCpuIsaSupport() {
  // libgcc's feature probe also checks XCR0, so an OS that does not save the
  // YMM/ZMM state reports the feature as absent.
  __builtin_cpu_init();
  CpuIsaSupport support;
  support.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  support.avx512f = __builtin_cpu_supports("avx512f");
  return support;
}

std::vector<CpuAdamIsaKind> SupportedCpuAdamIsas(const CpuIsaSupport& support) {
  std::vector<CpuAdamIsaKind> isas;
  for (CpuAdamIsaKind isa :
       {CpuAdamIsaKind::kScalar, CpuAdamIsaKind::kAvx2, CpuAdamIsaKind::kAvx512}) {
    if (support.Supports(isa)) isas.push_back(isa);
  }
  return isas;
}

absl::StatusOr<CpuAdamIsaKind> ResolveCpuAdamIsa(const char* forced, const CpuIsaSupport& support) {
  if (forced == nullptr || *forced == '\0') return SupportedCpuAdamIsas(support).back();
  const absl::string_view name(forced);
  for (CpuAdamIsaKind isa :
       {CpuAdamIsaKind::kScalar, CpuAdamIsaKind::kAvx2, CpuAdamIsaKind::kAvx512}) {
    if (name != CpuAdamIsaName(isa)) continue;
    if (!support.Supports(isa)) {
      return absl::FailedPreconditionError(absl::StrCat(
          rank_env::kCpuAdamIsa, "=", name, " but this CPU lacks ",
          isa == CpuAdamIsaKind::kAvx2 ? "avx2+fma" : "avx512f"));
    }
    return isa;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      rank_env::kCpuAdamIsa, "=", name, ": expected scalar, avx2 or avx512"));
}

}  // namespace dslaunch::kernels
