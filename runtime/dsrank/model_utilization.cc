#include "runtime/dsrank/model_utilization.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/estimate/model_flops.h"
#include "runtime/estimate/model_size.h"
#include "runtime/torch_compat.h"

namespace dslaunch::runtime {

ModelUtilization ModelUtilizationOf(const JobConfig& job, const TrainerContext& context) {
  const DsConfig& ds = job.ds;
  ModelUtilization result;
  if (!context.device.is_cuda()) return result;
  absl::StatusOr<ModelSize> size = ModelSizeOf(job);
  const std::string gpu = compat::CudaDeviceName(context.device.index());
  std::string peak_text;
  if (size.ok()) {
    result.flops_per_token = ModelFlopsPerToken(*size);
    result.peak_flops = ds.bf16.enabled || ds.fp16.enabled ? PeakTensorFlops(gpu) : 0;
    peak_text = result.peak_flops > 0 ? absl::StrFormat("MFU against %s's %.1f TFLOP/s (dense bf16/fp16)", gpu,
                                                 result.peak_flops / 1e12)
                               : absl::StrCat("no MFU: ",
                                              ds.bf16.enabled || ds.fp16.enabled
                                                  ? absl::StrCat("the peak of ", gpu, " is not in the table")
                                                  : std::string("fp32 has no tensor-core peak to compare with"));
  }
  if (context.rank == 0) {
    absl::FPrintF(context.out, "dsrank: %s\n",
                  size.ok() ? absl::StrFormat("model FLOPs: %.3f GFLOP per token; %s", result.flops_per_token / 1e9,
                                              peak_text)
                            : absl::StrCat("no TFLOP/s or MFU in the step line: ", size.status().message()));
  }
  return result;
}

}  // namespace dslaunch::runtime
