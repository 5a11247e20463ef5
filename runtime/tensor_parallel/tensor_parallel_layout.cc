#include "runtime/tensor_parallel/tensor_parallel_layout.h"

#include <algorithm>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

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

std::vector<int64_t> SliceShape(std::vector<int64_t> whole, const TensorParallelForm& form, int size) {
  const int64_t dim = SplitDimension(form);
  if (static_cast<int64_t>(whole.size()) <= dim) return whole;
  if (form.split == TensorParallelSplit::kVocab && whole[0] == form.vocab_size) whole[0] = form.padded_vocab_size;
  const int64_t parts = std::max(1, form.fused_parts);
  whole[dim] = whole[dim] % (parts * std::max(1, size)) == 0 ? whole[dim] / std::max(1, size) : -1;
  return whole;
}

absl::StatusOr<torch::Tensor> SliceRows(const torch::Tensor& whole, const TensorParallelForm& form, int rank, int size,
                                        int64_t first, int64_t count) {
  const int64_t dim = SplitDimension(form);
  if (whole.dim() <= dim) {
    return absl::InvalidArgumentError(absl::StrCat(form.parameter, ": a ", whole.dim(),
                                                   "-dimensional tensor has no dimension ", dim, " to split"));
  }
  if (dim != 0) {
    // Split along the columns: the rows are whole's own.
    if (first < 0 || count < 0 || first + count > whole.size(0)) {
      return absl::InvalidArgumentError(absl::StrCat(form.parameter, ": rows [", first, ", ", first + count,
                                                     ") of a slice of ", whole.size(0), " rows"));
    }
    return SliceForRank(whole.narrow(0, first, count), form, rank, size);
  }
  const bool vocab = form.split == TensorParallelSplit::kVocab;
  if (vocab && (whole.size(0) != form.vocab_size || form.padded_vocab_size < form.vocab_size)) {
    return absl::InvalidArgumentError(
        absl::StrCat(form.parameter, ": ", whole.size(0), " rows, expected the vocabulary of ", form.vocab_size));
  }
  const int64_t rows = vocab ? form.padded_vocab_size : whole.size(0);
  const int64_t parts = std::max(1, form.fused_parts);
  const int64_t slices = parts * std::max(1, size);
  if (rows % slices != 0) {
    return absl::InvalidArgumentError(absl::StrCat(form.parameter, ": dimension 0 (", rows, ") does not split into ",
                                                   parts, " part(s) of ", size, " tensor-parallel slices"));
  }
  const int64_t chunk = rows / slices;
  if (first < 0 || count < 0 || first + count > chunk * parts) {
    return absl::InvalidArgumentError(absl::StrCat(form.parameter, ": rows [", first, ", ", first + count,
                                                   ") of a slice of ", chunk * parts, " rows"));
  }
  // Local row i is row (p·size + rank)·chunk + i mod chunk of the (padded)
  // whole, p = i / chunk: a run of rows per part.
  std::vector<torch::Tensor> pieces;
  for (int64_t i = first; i < first + count;) {
    const int64_t part = i / chunk;
    const int64_t length = std::min(first + count, (part + 1) * chunk) - i;
    const int64_t source = (part * std::max(1, size) + rank) * chunk + i % chunk;
    const int64_t real = std::clamp<int64_t>(whole.size(0) - source, 0, length);
    if (real > 0) pieces.push_back(whole.narrow(0, source, real));
    if (real < length) {
      std::vector<int64_t> shape = whole.sizes().vec();
      shape[0] = length - real;
      pieces.push_back(torch::zeros(shape, whole.options()));
    }
    i += length;
  }
  if (pieces.empty()) {
    std::vector<int64_t> shape = whole.sizes().vec();
    shape[0] = 0;
    return torch::empty(shape, whole.options());
  }
  return pieces.size() == 1 ? pieces.front().contiguous() : torch::cat(pieces, 0);
}

torch::Tensor AssembleWhole(const std::vector<torch::Tensor>& slices, const TensorParallelForm& form) {
  const int64_t dim = SplitDimension(form);
  const int64_t size = static_cast<int64_t>(slices.size());
  const int64_t parts = std::max(1, form.fused_parts);
  std::vector<torch::Tensor> pieces;  // part p of rank r at p·size + r
  pieces.resize(parts * size);
  for (int64_t r = 0; r < size; ++r) {
    std::vector<torch::Tensor> own = slices[r].movedim(dim, 0).chunk(parts, 0);
    for (int64_t p = 0; p < parts; ++p) pieces[p * size + r] = own[p];
  }
  torch::Tensor all = torch::cat(pieces, 0);
  if (form.split == TensorParallelSplit::kVocab) all = all.narrow(0, 0, form.vocab_size);
  return all.movedim(0, dim).contiguous();
}

absl::StatusOr<torch::Tensor> GatherWhole(const torch::Tensor& local, const TensorParallelForm& form,
                                          const TensorParallelGroup& group) {
  if (!group.split()) return AssembleWhole({local}, form);
  const int64_t dim = SplitDimension(form);
  torch::Tensor moved = local.movedim(dim, 0).contiguous();
  std::vector<int64_t> sizes = moved.sizes().vec();
  sizes[0] *= group.size;
  torch::Tensor all = torch::empty(sizes, moved.options());
  absl::Status gathered = group.comm->AllGather(moved, all);
  if (!gathered.ok()) return gathered;
  std::vector<torch::Tensor> slices;
  for (torch::Tensor& slice : all.chunk(group.size, 0)) slices.push_back(slice.movedim(0, dim));
  return AssembleWhole(slices, form);
}

std::string FormLine(const TensorParallelForm& form) {
  const char* kind = form.split == TensorParallelSplit::kColumn ? "column"
                     : form.split == TensorParallelSplit::kRow  ? "row"
                                                                : "vocab";
  return absl::StrCat(form.parameter, "\t", kind, "\t", form.fused_parts, "\t", form.vocab_size, "\t",
                      form.padded_vocab_size);
}

absl::StatusOr<TensorParallelForm> ParseFormLine(const std::string& line) {
  std::vector<std::string> fields = absl::StrSplit(line, '\t');
  TensorParallelForm form;
  int64_t parts = 0;
  if (fields.size() != 5 || !absl::SimpleAtoi(fields[2], &parts) || !absl::SimpleAtoi(fields[3], &form.vocab_size) ||
      !absl::SimpleAtoi(fields[4], &form.padded_vocab_size) || parts < 1) {
    return absl::DataLossError(absl::StrCat("malformed tensor-parallel form: '", line, "'"));
  }
  form.parameter = fields[0];
  form.fused_parts = static_cast<int>(parts);
  if (fields[1] == "column") {
    form.split = TensorParallelSplit::kColumn;
  } else if (fields[1] == "row") {
    form.split = TensorParallelSplit::kRow;
  } else if (fields[1] == "vocab") {
    form.split = TensorParallelSplit::kVocab;
  } else {
    return absl::DataLossError(absl::StrCat("tensor-parallel form of ", fields[0], ": unknown split '", fields[1], "'"));
  }
  return form;
}

}  // namespace dslaunch::runtime
