// How a model's parameters are split across a tensor-parallel group (Note
// [Tensor parallelism]): the forms a model family declares, this rank's slice
// of a whole tensor, and the whole tensor gathered back from the slices.
// Initialisation, checkpoints and the parity tests all go through these
// functions, so a layout is defined once. A form is written to checkpoints
// as one line (FormLine / ParseFormLine) so a checkpoint saved at one
// tensor-parallel degree loads at another.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "runtime/tensor_parallel/tensor_parallel_group.h"

namespace dslaunch::runtime {

enum class TensorParallelSplit {
  kColumn,  // split along the output dimension (weight dim 0, and its bias)
  kRow,     // split along the input dimension (weight dim 1); its bias is added after the reduce
  kVocab,   // an embedding or output head split into contiguous vocabulary ranges (dim 0), padded
};

struct TensorParallelForm {
  std::string parameter;
  TensorParallelSplit split = TensorParallelSplit::kColumn;
  // Column splits of fused projections: the output dimension holds this many
  // equal parts (q, k, v = 3) and each is split on its own.
  int fused_parts = 1;
  // kVocab: the vocabulary (the whole tensor's rows) and the padded row count
  // the slices cut (PaddedVocabSize); rows past the vocabulary are zero.
  int64_t vocab_size = 0;
  int64_t padded_vocab_size = 0;
};

// The vocabulary rounded up to a multiple of tp_size·divisor (Megatron's
// make_vocab_size_divisible_by is the divisor).
int64_t PaddedVocabSize(int64_t vocab_size, int tp_size, int divisor);

// The dimension `form` splits (0, or 1 for kRow).
int64_t SplitDimension(const TensorParallelForm& form);

// Rank `rank` of `size`'s slice of `whole` (the tensor as one process holds
// it), contiguous. InvalidArgument naming the parameter when the split
// dimension does not divide.
absl::StatusOr<torch::Tensor> SliceForRank(const torch::Tensor& whole, const TensorParallelForm& form, int rank,
                                           int size);

// The shape of rank slices of a tensor of shape `whole` (what SliceForRank
// returns); the split dimension is -1 where it does not divide.
std::vector<int64_t> SliceShape(std::vector<int64_t> whole, const TensorParallelForm& form, int size);

// Rows [first, first + count) (along dimension 0) of rank `rank`'s slice of
// `whole`, reading only the rows of `whole` they come from (vocabulary rows
// past the vocabulary are zeros): SliceForRank(whole, ...).narrow(0, first,
// count), without the rest of the tensor (Note [Shard-only loading]).
absl::StatusOr<torch::Tensor> SliceRows(const torch::Tensor& whole, const TensorParallelForm& form, int rank, int size,
                                        int64_t first, int64_t count);

// The whole tensor from every rank's slice, slices[r] being rank r's (the
// inverse of SliceForRank over r = 0 .. slices.size()-1), padding dropped.
torch::Tensor AssembleWhole(const std::vector<torch::Tensor>& slices, const TensorParallelForm& form);

// Every rank's `local` slice assembled into the whole tensor (padding
// dropped), on every rank: a collective over the group.
absl::StatusOr<torch::Tensor> GatherWhole(const torch::Tensor& local, const TensorParallelForm& form,
                                          const TensorParallelGroup& group);

// "name<TAB>column|row|vocab<TAB>fused_parts<TAB>vocab_size<TAB>padded".
std::string FormLine(const TensorParallelForm& form);
absl::StatusOr<TensorParallelForm> ParseFormLine(const std::string& line);

}  // namespace dslaunch::runtime
