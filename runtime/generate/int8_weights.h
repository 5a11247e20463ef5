// Weight-only int8 for generation (Note [Int8 weights] in
// runtime/model/lora_linear.h): every decoder layer's projection (q, k, v,
// o, gate, up, down) and an untied head keep int8 values and a scale per
// output row, as gpt-fast's int8 does. The embedding (and a head tied to
// it), the norms and mixture-of-experts experts stay in the compute dtype.
#pragma once

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "runtime/model/llama.h"

namespace dslaunch::runtime {

struct Int8Report {
  int64_t projections = 0;
  int64_t float_bytes = 0;  // the projections' weights before
  int64_t int8_bytes = 0;   // their int8 values and scales after
  int64_t adapters_merged = 0;  // LoRA adapters folded into their weights first
};

// A projection that carries a LoRA adapter has it merged first (W + scale·B·A
// computed in fp32, rounded to the weight's dtype, then quantized, as the
// merged export would be): the adapter no longer exists apart afterwards.
// REQUIRES: `model` on its final device and dtype. Split over a tensor
// group, every rank calls it (a row-parallel projection's row maxima are
// reduced over the group, in one order on every rank, on
// `collective_device`: the group's device when the weights are elsewhere,
// as streamed layers are in host memory; unset: the weights' own).
absl::StatusOr<Int8Report> QuantizeWeightsInt8(Llama& model,
                                               std::optional<torch::Device> collective_device = std::nullopt);

}  // namespace dslaunch::runtime
