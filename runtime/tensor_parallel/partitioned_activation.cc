#include "runtime/tensor_parallel/partitioned_activation.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace dslaunch::runtime {

int64_t PartitionLength(int64_t numel, int ranks) {
  const int64_t parts = std::max(1, ranks);
  return (numel + parts - 1) / parts;
}

torch::Tensor KeepPartition(const torch::Tensor& whole, const TensorParallelGroup& group) {
  const torch::Tensor flat = whole.detach().reshape({-1});
  const int64_t length = PartitionLength(flat.numel(), group.size);
  const int64_t begin = std::min<int64_t>(flat.numel(), group.rank * length);
  const int64_t taken = std::min<int64_t>(length, flat.numel() - begin);
  torch::Tensor kept = torch::zeros({length}, flat.options());
  if (taken > 0) kept.narrow(0, 0, taken).copy_(flat.narrow(0, begin, taken));
  return kept;
}

absl::StatusOr<torch::Tensor> GatherPartitions(const torch::Tensor& partition, const std::vector<int64_t>& shape,
                                               const TensorParallelGroup& group) {
  int64_t numel = 1;
  for (int64_t size : shape) numel *= size;
  if (partition.dim() != 1 || partition.numel() != PartitionLength(numel, group.size)) {
    return absl::InvalidArgumentError(absl::StrCat("a partition of ", partition.numel(), " elements cannot rebuild ",
                                                   numel, " over ", group.size, " ranks"));
  }
  if (!group.split()) return partition.narrow(0, 0, numel).view(shape);
  torch::Tensor gathered = torch::empty({partition.numel() * group.size}, partition.options());
  if (absl::Status s = group.comm->AllGather(partition, gathered); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("gathering a partitioned activation: ", s.message()));
  }
  return gathered.narrow(0, 0, numel).view(shape);
}

}  // namespace dslaunch::runtime
