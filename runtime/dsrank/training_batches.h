// The trainer's micro-batches, from either kind of prepared dataset: a text
// token stream (GptSamples: every next token is a target) or instruction
// records (InstructionSamples: prompt tokens are not targets; packed rows
// carry positions and segments, Note [Instruction sample layout] in
// runtime/data/instruction_samples.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/status/status.h"
#include "runtime/data/gpt_samples.h"
#include "runtime/data/instruction_samples.h"
#include "runtime/model/model_interface.h"

namespace dslaunch::runtime {

class TrainingBatches {
 public:
  static std::unique_ptr<TrainingBatches> Text(std::unique_ptr<GptSamples> samples);
  // `packed`: rows may hold several records (positions and segments go to
  // the model); otherwise one record per row, padded at its end, which plain
  // causal attention already computes exactly.
  static std::unique_ptr<TrainingBatches> Instructions(std::unique_ptr<InstructionSamples> samples, bool packed);

  virtual ~TrainingBatches() = default;
  // The rows of global sample indices `indices`, as int64 tensors on
  // `device` (uploaded from pinned memory without waiting for queued GPU
  // work). A failed read sets *status.
  virtual TokenBatch Load(const std::vector<int64_t>& indices, torch::Device device, absl::Status* status) const = 0;
};

}  // namespace dslaunch::runtime
