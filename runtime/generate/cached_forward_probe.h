// Note [Probe logits]: before a server answers anyone, the generation path
// (the paged key/value cache, split prompts, one-token decodes) is checked
// against the training forward on a probe prompt: every position's logits
// must agree within a tolerance stated per dtype, relative to the largest
// logit. A wrong rotation, a stale cache slot or a mask off by one moves
// logits by their own size; rounding moves them by far less (fp32 1e-4,
// bf16 5e-2, fp16 2e-2 of the largest |logit|: a bf16 forward's reductions
// run in a different order when the prompt arrives in pieces). A mismatch
// refuses to serve, naming the position and the difference.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/model/llama.h"

namespace dslaunch::runtime {

struct ProbeReport {
  int64_t positions = 0;
  double max_abs_difference = 0;  // over every position and vocabulary entry
  int64_t worst_position = 0;
  double largest_logit = 0;       // max |logit| of the training forward
  double tolerance = 0;           // allowed max_abs_difference
};

// The relative tolerance of Note [Probe logits] for the model's dtype.
double ProbeRelativeTolerance(torch::ScalarType dtype);

// Runs `tokens` (at least 2) through the training forward and through the
// cached forward (the first half as one piece, then one token per step) and
// compares. FailedPrecondition with the report's figures on a mismatch.
absl::StatusOr<ProbeReport> ProbeCachedForward(Llama& model, const std::vector<int64_t>& tokens);

}  // namespace dslaunch::runtime
