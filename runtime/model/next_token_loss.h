// The next-token loss every family ends with: mean cross-entropy in fp32 over
// the targets that are not -100.
#pragma once

#include <cstdint>

#include <torch/torch.h>

#include "runtime/tensor_parallel/tensor_parallel_group.h"

namespace dslaunch::runtime {

// logits [rows, columns]: the whole vocabulary, or this rank's range of it
// (Note [Tensor parallelism]), columns past `vocab_size` being padding;
// targets [rows]. Whole, unpadded and unsmoothed logits go through
// CrossEntropyOp (fused_ops.h: the fused kernel when `fused`); the others
// through VocabParallelCrossEntropy, which never gathers them.
torch::Tensor NextTokenLoss(const torch::Tensor& logits, const torch::Tensor& targets, int64_t vocab_size,
                            double label_smoothing, const TensorParallelGroup& group, bool fused);

}  // namespace dslaunch::runtime
