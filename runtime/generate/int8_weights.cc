#include "runtime/generate/int8_weights.h"

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/tensor_parallel/tensor_parallel_layout.h"

namespace dslaunch::runtime {

absl::StatusOr<Int8Report> QuantizeWeightsInt8(Llama& model, std::optional<torch::Device> collective_device) {
  const TensorParallelGroup& group = model->options().tensor_parallel;
  // Row-parallel weights hold part of each row (Note [Int8 weights]).
  std::set<std::string> row_parallel;
  for (const TensorParallelForm& form : model->TensorParallelForms()) {
    if (form.split == TensorParallelSplit::kRow) row_parallel.insert(form.parameter);
  }
  std::vector<std::pair<std::string, LoraLinear>> projections;
  for (const auto& item : model->named_modules()) {
    if (item.value()->as<LoraLinearImpl>() == nullptr || item.value()->as<LoraLinearImpl>()->keep_float) continue;
    projections.emplace_back(item.key(), LoraLinear(std::dynamic_pointer_cast<LoraLinearImpl>(item.value())));
  }
  Int8Report report;
  try {
    for (auto& [name, projection] : projections) {
      // An adapter goes into the weight before the weight is rounded to
      // int8: W + scale·B·A (in fp32, then in the weight's dtype) quantized,
      // as an exported, merged folder served with --int8 would be.
      if (projection->adapted()) {
        projection->MergeAdapter();
        ++report.adapters_merged;
      }
      report.float_bytes += projection->weight.numel() * projection->weight.element_size();
      torch::Tensor row_absmax;
      if (group.split() && row_parallel.count(name + ".weight")) {
        row_absmax = projection->RowAbsMax();
        if (collective_device) row_absmax = row_absmax.to(*collective_device);
        if (absl::Status reduced = group.comm->AllReduce(row_absmax, ReduceOp::kMax); !reduced.ok()) {
          return absl::Status(reduced.code(),
                              absl::StrCat("int8 weights: the row maxima of ", name, ": ", reduced.message()));
        }
      }
      projection->QuantizeInt8(row_absmax);
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
