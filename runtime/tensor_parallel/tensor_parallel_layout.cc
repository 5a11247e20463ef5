#include "runtime/tensor_parallel/tensor_parallel_layout.h"

#include <vector>

#include "absl/strings/str_cat.h"

namespace dslaunch::runtime {

int64_t PaddedVocabSize(int64_t vocab_size, int tp_size, int divisor) {
  const int64_t multiple = static_cast<int64_t>(std::max(1, tp_size)) * std::max(1, divisor);
  return (vocab_size + multiple - 1) / multiple * multiple;
}

int64_t SplitDimension(const TensorParallelForm& form) { return form.split == TensorParallelSplit::kRow ? 1 : 0; }

absl::StatusOr<torch::Tensor> SliceForRank(const torch::Tensor& whole, const TensorParallelForm& form, int rank,
                                           int size) {
  const int64_t dim = SplitDimension(form);
  if (whole.dim() <= dim) {
    return absl::InvalidArgumentError(absl::StrCat(form.parameter, ": a ", whole.dim(),
                                                   "-dimensional tensor has no dimension ", dim, " to split"));
  }
  torch::Tensor moved = whole.movedim(dim, 0);
  if (form.split == TensorParallelSplit::kVocab) {
    if (moved.size(0) != form.vocab_size || form.padded_vocab_size < form.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(form.parameter, ": ", moved.size(0),
                                                     " rows, expected the vocabulary of ", form.vocab_size));
    }
    std::vector<int64_t> padded = moved.sizes().vec();
    padded[0] = form.padded_vocab_size;
    torch::Tensor grown = torch::zeros(padded, moved.options());
    grown.narrow(0, 0, form.vocab_size).copy_(moved);
    moved = grown;
  }
  const int64_t parts = std::max(1, form.fused_parts);
  const int64_t rows = moved.size(0);
  if (rows % (parts * size) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(form.parameter, ": dimension ", dim, " (", rows,
                                                   ") does not split into ", parts, " part(s) of ", size,
                                                   " tensor-parallel slices"));
  }
  const int64_t chunk = rows / (parts * size);
  std::vector<int64_t> grouped = moved.sizes().vec();
  grouped[0] = chunk;
  grouped.insert(grouped.begin(), parts * size);
  // [parts·size, chunk, ...]: part p's slice for rank r is row p·size + r.
  torch::Tensor pieces = moved.reshape(grouped);
  std::vector<torch::Tensor> mine;
  for (int64_t p = 0; p < parts; ++p) mine.push_back(pieces[p * size + rank]);
  return torch::cat(mine, 0).movedim(0, dim).contiguous();
}

absl::StatusOr<torch::Tensor> GatherWhole(const torch::Tensor& local, const TensorParallelForm& form,
                                          const TensorParallelGroup& group) {
  const int64_t dim = SplitDimension(form);
  torch::Tensor moved = local.movedim(dim, 0).contiguous();
  torch::Tensor all = moved;
  if (group.split()) {
    std::vector<int64_t> sizes = moved.sizes().vec();
    sizes[0] *= group.size;
    all = torch::empty(sizes, moved.options());
    absl::Status gathered = group.comm->AllGather(moved, all);
    if (!gathered.ok()) return gathered;
  }
  const int64_t parts = std::max(1, form.fused_parts);
  if (parts > 1 && group.size > 1) {
    // [size, parts, chunk, ...] → [parts, size, chunk, ...].
    std::vector<int64_t> grouped = moved.sizes().vec();
    grouped[0] = moved.size(0) / parts;
    grouped.insert(grouped.begin(), parts);
    grouped.insert(grouped.begin(), group.size);
    std::vector<int64_t> flat = all.sizes().vec();
    all = all.reshape(grouped).transpose(0, 1).reshape(flat);
  }
  if (form.split == TensorParallelSplit::kVocab) all = all.narrow(0, 0, form.vocab_size);
  return all.movedim(0, dim).contiguous();
}

}  // namespace dslaunch::runtime
