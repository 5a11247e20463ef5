#include "runtime/model/seeded_parameter_source.h"

#include "absl/strings/str_cat.h"

namespace dslaunch::runtime {

SeededParameterSource::SeededParameterSource(const torch::nn::Module& module,
                                             const std::vector<TensorParallelForm>& forms,
                                             const TensorParallelGroup& group, ParameterFill fill)
    : group_(group), fill_(std::move(fill)) {
  std::map<std::string, TensorParallelForm> form_of;
  for (const TensorParallelForm& form : forms) form_of[form.parameter] = form;
  for (const auto& item : module.named_parameters()) {
    Entry entry{item.key(), item.value().sizes().vec(), std::nullopt};
    if (auto it = form_of.find(item.key()); it != form_of.end()) entry.form = it->second;
    index_[entry.name] = order_.size();
    order_.push_back(std::move(entry));
  }
}

absl::Status SeededParameterSource::Read(const std::string& name, int64_t offset, torch::Tensor out) const {
  auto found = index_.find(name);
  if (found == index_.end()) {
    return absl::NotFoundError(absl::StrCat("parameter '", name, "' was not in the model when it was built"));
  }
  const size_t index = found->second;
  if (!fill_) return absl::FailedPreconditionError("this model family cannot draw its initial values apart");
  torch::NoGradGuard no_grad;
  if (current_ != index) {
    if (index < next_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "parameter '", name, "' read after '", order_[next_ - 1].name,
          "': the seeded values are drawn once, in the model's parameter order (Note [Shard-only loading])"));
    }
    // Draw every tensor up to this one, in order: the generator's sequence.
    for (; next_ <= index; ++next_) {
      const Entry& entry = order_[next_];
      const TensorParallelForm* form = entry.form ? &*entry.form : nullptr;
      torch::Tensor whole = torch::empty(UnsplitShape(entry.local_shape, form, group_.size), torch::kFloat);
      fill_(entry.name, whole);
      if (next_ != index) continue;
      if (form != nullptr) {
        auto slice = SliceForRank(whole, *form, group_.rank, std::max(1, group_.size));
        if (!slice.ok()) return slice.status();
        whole = *slice;
      }
      current_values_ = whole.reshape({-1});
    }
    current_ = index;
  }
  if (offset < 0 || offset + out.numel() > current_values_.numel()) {
    return absl::OutOfRangeError(absl::StrCat("parameter '", name, "': elements [", offset, ", ", offset + out.numel(),
                                              ") of ", current_values_.numel()));
  }
  out.copy_(current_values_.narrow(0, offset, out.numel()));
  return absl::OkStatus();
}

}  // namespace dslaunch::runtime
