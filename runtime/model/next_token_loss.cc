#include "runtime/model/next_token_loss.h"

#include "runtime/model/fused_ops.h"
#include "runtime/tensor_parallel/vocab_parallel.h"

namespace dslaunch::runtime {

torch::Tensor NextTokenLoss(const torch::Tensor& logits, const torch::Tensor& targets, int64_t vocab_size,
                            double label_smoothing, const TensorParallelGroup& group, bool fused) {
  if (!group.split() && label_smoothing == 0 && logits.size(1) == vocab_size) {
    return CrossEntropyOp(logits, targets, fused);
  }
  return VocabParallelCrossEntropy(logits, targets, vocab_size, label_smoothing, group);
}

}  // namespace dslaunch::runtime
