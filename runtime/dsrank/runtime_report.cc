#include "runtime/dsrank/runtime_report.h"

#include <torch/torch.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/version.h"
#include "kernels/cpu_adam.h"
#include "kernels/cpu_adam_isa.h"
#include "runtime/torch_compat.h"
#include "runtime/zero/fused_adamw_step.h"

#if defined(DSLAUNCH_HAVE_NCCL)
#include <cuda_runtime_api.h>
#include <nccl.h>
#endif

namespace dslaunch::runtime {
namespace {

std::string CudaVersionText(int version) {
  return version > 0 ? absl::StrCat(version / 1000, ".", (version % 1000) / 10) : std::string("none");
}

// The CUDA runtime this binary links, the driver's, and every visible GPU.
void AppendCuda(std::vector<std::string>& lines) {
#if defined(DSLAUNCH_HAVE_NCCL)
  int runtime_version = 0, driver_version = 0;
  (void)cudaRuntimeGetVersion(&runtime_version);
  (void)cudaDriverGetVersion(&driver_version);
  lines.push_back(absl::StrCat("CUDA runtime: ", CudaVersionText(runtime_version),
                               "; driver supports: ", CudaVersionText(driver_version)));
  int nccl = 0;
  if (ncclGetVersion(&nccl) == ncclSuccess) {
    lines.push_back(absl::StrCat("NCCL: ", nccl / 10000, ".", (nccl / 100) % 100, ".", nccl % 100,
                                 " (the NCCL backend of dslaunch's communicator)"));
  }
  int devices = 0;
  const cudaError_t counted = cudaGetDeviceCount(&devices);
  if (counted != cudaSuccess) {
    lines.push_back(absl::StrCat("GPUs: none visible (", cudaGetErrorString(counted), ")"));
    (void)cudaGetLastError();
    return;
  }
  lines.push_back(absl::StrCat("GPUs: ", devices));
  for (int d = 0; d < devices; ++d) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, d) != cudaSuccess) continue;
    lines.push_back(absl::StrFormat("  GPU %d: %s, %.1f GiB, compute capability %d.%d, %d SMs, PCI %04x:%02x:%02x", d,
                                    p.name, p.totalGlobalMem / 1073741824.0, p.major, p.minor, p.multiProcessorCount,
                                    p.pciDomainID, p.pciBusID, p.pciDeviceID));
  }
#else
  lines.push_back("CUDA runtime: not linked (no CUDA toolkit at build time); NCCL: none");
#endif
}

}  // namespace

std::string RuntimeReport() {
  std::vector<std::string> lines;
  lines.push_back(absl::StrCat("version: ", VersionLine("dsrank")));
  lines.push_back(absl::StrCat("LibTorch: ", TORCH_VERSION, ", with CUDA: ", torch::cuda::is_available() ? "yes" : "no",
                               ", CUDA devices it sees: ", torch::cuda::device_count()));
  lines.push_back(absl::StrCat("LibTorch intra-op threads: ", torch::get_num_threads()));
  AppendCuda(lines);
  std::vector<std::string> collectives = {"gloo"};
#if defined(DSLAUNCH_HAVE_NCCL)
  collectives.push_back("nccl");
#endif
  lines.push_back(absl::StrCat("collective backends compiled in: ", absl::StrJoin(collectives, ", ")));
#if defined(DSLAUNCH_HAVE_CUDA_KERNELS)
  const bool cuda_kernels = true;
#else
  const bool cuda_kernels = false;
#endif
  lines.push_back(absl::StrCat("fused CUDA kernels (kernels/cuda: LayerNorm, bias+GELU, cross-entropy, AdamW): ",
                               cuda_kernels ? "compiled in" : "not compiled in", "; usable now (a GPU visible): ",
                               FusedAdamWAvailable() && torch::cuda::is_available() ? "yes" : "no"));
  lines.push_back(absl::StrCat("fused attention (SDPA): ", compat::kHasFusedAttention ? "yes" : "no (LibTorch 1.x)"));
  std::vector<std::string> isas;
  for (kernels::CpuAdamIsaKind isa : kernels::SupportedCpuAdamIsas(kernels::DetectCpuIsaSupport())) {
    isas.push_back(kernels::CpuAdamIsaName(isa));
  }
  const absl::Status adam = kernels::CpuAdamInit();
  lines.push_back(absl::StrCat("CPU Adam (offload): ", kernels::CpuAdamIsa(), " on ", kernels::CpuAdamThreads(),
                               " threads; this CPU supports ", absl::StrJoin(isas, ", "),
                               adam.ok() ? std::string() : absl::StrCat("; ", adam.message())));
  return absl::StrJoin(lines, "\n") + "\n";
}

}  // namespace dslaunch::runtime
