#include "runtime/generate/int8_weights.h"

#include "absl/strings/str_cat.h"

namespace dslaunch::runtime {

absl::StatusOr<Int8Report> QuantizeWeightsInt8(Llama& model) {
  if (model->options().tensor_parallel.split()) {
    return absl::UnimplementedError("int8 weights with tensor parallelism are not built");
  }
  std::vector<LoraLinear> projections;
  for (const auto& item : model->named_modules()) {
    if (item.value()->as<LoraLinearImpl>() == nullptr) continue;
    projections.push_back(LoraLinear(std::dynamic_pointer_cast<LoraLinearImpl>(item.value())));
  }
  Int8Report report;
  try {
    for (LoraLinear& projection : projections) {
      // An adapter goes into the weight before the weight is rounded to
      // int8: W + scale·B·A (in fp32, then in the weight's dtype) quantized,
      // as an exported, merged folder served with --int8 would be.
      if (projection->adapted()) {
        projection->MergeAdapter();
        ++report.adapters_merged;
      }
      report.float_bytes += projection->weight.numel() * projection->weight.element_size();
      projection->QuantizeInt8();
      report.int8_bytes += projection->weight_int8.numel() + projection->weight_scale.numel() *
                                                                 projection->weight_scale.element_size();
      ++report.projections;
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("int8 weights: ", e.what_without_backtrace()));
  }
  return report;
}

}  // namespace dslaunch::runtime
