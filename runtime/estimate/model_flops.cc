#include "runtime/estimate/model_flops.h"

#include <utility>

#include "absl/strings/match.h"

namespace dslaunch::runtime {

double ModelFlopsPerToken(const ModelSize& size) {
  const double all = static_cast<double>(size.trainable + size.frozen);
  return 4.0 * all + 2.0 * static_cast<double>(size.trainable) +
         12.0 * static_cast<double>(size.layers) * static_cast<double>(size.hidden) *
             static_cast<double>(size.sequence_length);
}

double PeakTensorFlops(const std::string& device_name) {
  // Datasheet dense bf16/fp16 tensor-core FLOP/s (SXM parts), most specific
  // name first.
  static const std::pair<const char*, double> kPeaks[] = {
      {"GH200", 989.4e12}, {"H200", 989.4e12}, {"H100 PCIe", 756.5e12}, {"H100", 989.4e12},
      {"H800", 989.4e12},  {"A100", 312e12},   {"A800", 312e12},        {"L40S", 362.05e12},
      {"L4", 121e12},      {"A10G", 70e12},    {"V100", 125e12},
  };
  for (const auto& [name, peak] : kPeaks) {
    if (absl::StrContains(device_name, name)) return peak;
  }
  return 0;
}

}  // namespace dslaunch::runtime
