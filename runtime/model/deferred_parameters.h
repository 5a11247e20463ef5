// Parameters built without their values, filled piece by piece where they
// are kept (Note [Shard-only loading]). Header-only.
//
// Note [Shard-only loading]
// Under ZeRO-3 a rank keeps 1/N of the model, but building the module whole
// first (and copying a Hugging Face folder into it) needs the whole model in
// every rank's memory before the engine cuts it: 28 GB of fp32 per rank for
// a 7B model, eight times over on an 8-GPU host, and a 70B model never
// fits. DeepSpeed's answer is zero.Init; ours:
//   1. The family builds its parameters deferred (ModelSpec::
//      deferred_parameters): right sizes and dtype, no memory. Each layer's
//      parameters are deferred as soon as the layer is built, so the
//      constructor holds one layer at most.
//   2. The folder is checked whole against the module (names, shapes,
//      dtypes, headers) as for a full load, and nothing is copied.
//   3. The engine's ZeRO-3 partitions build each unit's flat buffer on the
//      device, fill only this rank's piece from a ParameterSource (the
//      folder's memory mapping: only the rows of this rank's piece are read;
//      for a model that starts from its seed, SeededParameterSource replays
//      the random draws one tensor at a time), keep the piece, and release
//      the buffer before the next unit. The persistent units are then
//      gathered from every rank's pieces.
// So no rank ever holds more than its shard plus one unit, and each rank
// reads about 1/N of the folder. LoRA's adapters are built with values as
// usual (they are small and start from the seed); only the base defers.
// A deferred parameter is a tensor whose storage has no memory (released
// the way ZeRO-3 releases a unit, runtime/zero/tensor_storage.h): LibTorch
// 1.13 cannot set_data a parameter to a meta tensor. Nothing may read it
// before the engine fills it: the loaders refuse it, and the engine accepts
// it only at stage 3 with a source.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace dslaunch::runtime {

// Where deferred parameters' values come from.
class ParameterSource {
 public:
  virtual ~ParameterSource() = default;
  // Elements [offset, offset + out.numel()) of parameter `name` (a name from
  // the module's named_parameters()) as this rank holds it, flattened in
  // row-major order, into `out` (converted to its dtype and device).
  virtual absl::Status Read(const std::string& name, int64_t offset, torch::Tensor out) const = 0;
};

// A parameter with elements but no memory behind them.
inline bool IsDeferredParameter(const torch::Tensor& tensor) {
  return tensor.defined() && tensor.numel() > 0 && tensor.has_storage() && tensor.storage().nbytes() == 0;
}

// A deferred tensor of `sizes` and `options` (nothing is allocated).
inline torch::Tensor DeferredTensor(c10::IntArrayRef sizes, const torch::TensorOptions& options) {
  torch::Tensor tensor = torch::empty({0}, options);
  tensor.unsafeGetTensorImpl()->set_sizes_contiguous(sizes);
  return tensor;
}

// Every parameter of `module` deferred (their memory is freed; they keep
// their sizes, dtype, device and requires_grad).
inline void DeferParameters(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  for (torch::Tensor& p : module.parameters()) {
    if (p.numel() > 0 && !IsDeferredParameter(p)) p.set_data(DeferredTensor(p.sizes(), p.options()));
  }
}

}  // namespace dslaunch::runtime
