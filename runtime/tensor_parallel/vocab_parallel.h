// The vocabulary split across the tensor-parallel group (Note [Tensor
// parallelism]): rank r holds rows [r·V'/T, (r+1)·V'/T) of the embedding
// (and of the output head), V' the padded vocabulary (PaddedVocabSize).
#pragma once

#include <cstdint>

#include <torch/torch.h>

#include "runtime/tensor_parallel/tensor_parallel_group.h"

namespace dslaunch::runtime {

// ids [batch, time] → [batch, time, hidden]: this rank's rows looked up (ids
// outside its range give zeros) and the partial results summed across the
// group (ExitRowParallel: under sequence parallelism, this rank's chunk of
// the time steps).
torch::Tensor VocabParallelEmbedding(const torch::Tensor& ids, const torch::Tensor& local_weight,
                                     const TensorParallelGroup& group);

// Mean next-token cross-entropy, in fp32, of logits split by vocabulary:
// `logits` [rows, V'/T] are this rank's columns, `targets` [rows] the whole
// vocabulary's ids (-100: no loss, PyTorch's ignore_index), `vocab_size` the
// unpadded vocabulary (padding columns take no part). With label smoothing ε
// each row's loss is (1-ε)·(−log p_target) + ε·mean over the vocabulary of
// (−log p_j), PyTorch's cross_entropy(label_smoothing=ε). The full logits are
// never gathered: the row maxima, then the target logit, Σexp and Σlogit are
// all-reduced (two collectives). The result is the same on every rank.
torch::Tensor VocabParallelCrossEntropy(const torch::Tensor& logits, const torch::Tensor& targets,
                                        int64_t vocab_size, double label_smoothing, const TensorParallelGroup& group);

}  // namespace dslaunch::runtime
