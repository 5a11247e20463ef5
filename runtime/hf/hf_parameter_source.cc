#include "runtime/hf/hf_parameter_source.h"

#include <numeric>

#include "absl/strings/str_cat.h"

namespace dslaunch::runtime {

HfParameterSource::HfParameterSource(std::unique_ptr<HfModelFolder> folder,
                                     const std::vector<TensorParallelForm>& forms, int tp_rank, int tp_size)
    : folder_(std::move(folder)), tp_rank_(tp_rank), tp_size_(std::max(1, tp_size)) {
  for (const TensorParallelForm& form : forms) form_of_[form.parameter] = form;
}

int64_t HfParameterSource::folder_bytes() const {
  int64_t bytes = 0;
  for (const std::string& name : folder_->TensorNames()) {
    if (const SafetensorsEntryInfo* entry = folder_->Find(name)) bytes += entry->end - entry->begin;
  }
  return bytes;
}

absl::Status HfParameterSource::Read(const std::string& name, int64_t offset, torch::Tensor out) const {
  auto view = folder_->View(name);
  if (!view.ok()) return view.status();
  auto form = form_of_.find(name);
  const bool sliced = form != form_of_.end() && view->dim() > SplitDimension(form->second);
  const std::vector<int64_t> shape = sliced ? SliceShape(view->sizes().vec(), form->second, tp_size_) : view->sizes().vec();
  const int64_t numel = std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
  const int64_t count = out.numel();
  if (offset < 0 || offset + count > numel || numel < 0) {
    return absl::OutOfRangeError(absl::StrCat(folder_->FileOf(name), ": tensor '", name, "': elements [", offset, ", ",
                                              offset + count, ") of ", numel));
  }
  if (count == 0) return absl::OkStatus();
  torch::NoGradGuard no_grad;
  if (view->dim() == 0) {
    out.copy_(view->reshape({1}));
    bytes_read_ += view->element_size();
    return absl::OkStatus();
  }
  // The rows the range covers, then the range within them.
  const int64_t row = numel / shape[0];
  const int64_t first = offset / row;
  const int64_t rows = (offset + count - 1) / row - first + 1;
  torch::Tensor covered;
  if (sliced) {
    auto slice = SliceRows(*view, form->second, tp_rank_, tp_size_, first, rows);
    if (!slice.ok()) return absl::Status(slice.status().code(), absl::StrCat(folder_->FileOf(name), ": ", slice.status().message()));
    covered = *slice;
  } else {
    covered = view->narrow(0, first, rows);
  }
  bytes_read_ += covered.numel() * covered.element_size();
  out.copy_(covered.reshape({-1}).narrow(0, offset - first * row, count));
  return absl::OkStatus();
}

}  // namespace dslaunch::runtime
