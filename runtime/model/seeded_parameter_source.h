// Note [Shard-only loading] for a model that starts from its seed: the
// values of a deferred model drawn where they are kept. The model's random
// draws are replayed in named_parameters() order, each tensor whole (as the
// constructor would draw it, ModelInterface::InitialValues) and then cut to
// this tensor-parallel rank's slice, so only one tensor is ever whole; the
// values are bit for bit those of the model built whole from the same seed.
// Reads must therefore come in parameter order (a ZeRO-3 partition's units
// do): a read of a tensor already passed is an error.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "runtime/model/deferred_parameters.h"
#include "runtime/model/model_interface.h"

namespace dslaunch::runtime {

class SeededParameterSource : public ParameterSource {
 public:
  // `module` as built (deferred, before LoRA adds its adapters), `forms` its
  // tensor-parallel forms, `group` this rank's place, `fill` the family's
  // InitialValues(seed).
  SeededParameterSource(const torch::nn::Module& module, const std::vector<TensorParallelForm>& forms,
                        const TensorParallelGroup& group, ParameterFill fill);

  absl::Status Read(const std::string& name, int64_t offset, torch::Tensor out) const override;

 private:
  struct Entry {
    std::string name;
    std::vector<int64_t> local_shape;
    std::optional<TensorParallelForm> form;
  };
  std::vector<Entry> order_;
  std::map<std::string, size_t> index_;
  TensorParallelGroup group_;
  ParameterFill fill_;
  // The draws so far: the next tensor to draw, and the last one drawn
  // (flattened, this rank's slice).
  mutable size_t next_ = 0;
  mutable std::optional<size_t> current_;
  mutable torch::Tensor current_values_;
};

}  // namespace dslaunch::runtime
