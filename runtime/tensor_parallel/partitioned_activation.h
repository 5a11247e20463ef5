// DeepSpeed's partition_activations (Note [Partitioned activations]).
//
// Note [Partitioned activations]
// Without sequence parallelism every rank of a tensor group holds the same
// activation between layers, so a checkpointed layer's saved input is kept T
// times over. Partitioned, each rank keeps only its contiguous 1/T of the
// flattened input (the last part padded to equal length) and the group
// all-gathers the whole before the layer is recomputed in backward. Under
// sequence parallelism the input is already this rank's sequence chunk, a
// different tensor on every rank: nothing more to partition.
#pragma once

#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "runtime/tensor_parallel/tensor_parallel_group.h"

namespace dslaunch::runtime {

// The elements of a flattened tensor each rank of `ranks` keeps: the
// ceiling of numel / ranks.
int64_t PartitionLength(int64_t numel, int ranks);

// This rank's part of `whole` (replicated across `group`): a new tensor of
// PartitionLength elements, zero past the end of `whole`.
torch::Tensor KeepPartition(const torch::Tensor& whole, const TensorParallelGroup& group);

// The whole tensor of `shape` again from every rank's `partition` (a
// collective over the group), on the partition's device and dtype.
absl::StatusOr<torch::Tensor> GatherPartitions(const torch::Tensor& partition, const std::vector<int64_t>& shape,
                                               const TensorParallelGroup& group);

}  // namespace dslaunch::runtime
