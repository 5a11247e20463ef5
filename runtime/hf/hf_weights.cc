#include "runtime/hf/hf_weights.h"

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/model/deferred_parameters.h"

namespace dslaunch::runtime {
namespace {

std::string SafetensorsNameOfTorchDtype(const std::string& torch_dtype) {
  if (torch_dtype == "float32") return "F32";
  if (torch_dtype == "float16") return "F16";
  if (torch_dtype == "bfloat16") return "BF16";
  return "";
}

constexpr size_t kMaxListedProblems = 20;

// Whether two tensors of one shape hold the same values, compared in fp32 a
// block of rows at a time: no whole fp32 copy of an embedding per rank.
bool SameValues(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.dim() == 0) return torch::equal(a.to(torch::kFloat), b.to(torch::kFloat));
  constexpr int64_t kRows = 1024;
  for (int64_t row = 0; row < a.size(0); row += kRows) {
    const int64_t rows = std::min(kRows, a.size(0) - row);
    if (!torch::equal(a.narrow(0, row, rows).to(torch::kFloat), b.narrow(0, row, rows).to(torch::kFloat))) return false;
  }
  return true;
}

}  // namespace

absl::Status CheckHfWeights(const HfModelFolder& folder, const torch::nn::Module& module,
                            const std::vector<TensorParallelForm>& forms, int tp_rank, int tp_size,
                            const std::function<bool(const std::string&)>& held_elsewhere) {
  std::map<std::string, const TensorParallelForm*> form_of;
  for (const TensorParallelForm& form : forms) form_of[form.parameter] = &form;
  // The shape this rank holds of a folder tensor of shape `whole`.
  auto local_shape = [&](const std::string& name, const std::vector<int64_t>& whole) {
    auto it = form_of.find(name);
    return it == form_of.end() || whole.empty() ? whole : SliceShape(whole, *it->second, tp_size);
  };
  const std::string& torch_dtype = folder.torch_dtype();
  std::vector<std::string> problems;
  auto problem = [&](const std::string& text) { problems.push_back(text); };
  const std::string expected_dtype = SafetensorsNameOfTorchDtype(torch_dtype);
  auto parameters = module.named_parameters();
  const bool tied = !parameters.contains("lm_head.weight") && parameters.contains("model.embed_tokens.weight");

  for (const auto& item : parameters) {
    const std::string& name = item.key();
    const SafetensorsEntryInfo* entry = folder.Find(name);
    if (entry == nullptr) {
      problem(absl::StrCat("tensor '", name, "' is missing (the model of ", folder.config_path(), " has it)"));
      continue;
    }
    const std::string file = folder.FileOf(name);
    if (entry->dtype != SafetensorsDtype::kF32 && entry->dtype != SafetensorsDtype::kF16 &&
        entry->dtype != SafetensorsDtype::kBF16) {
      problem(absl::StrCat(file, ": tensor '", name, "' is ", entry->dtype_name, " (weights are F32, F16 or BF16)"));
    } else if (!expected_dtype.empty() && entry->dtype_name != expected_dtype) {
      problem(absl::StrCat(file, ": tensor '", name, "' is ", entry->dtype_name, " but ", folder.config_path(),
                           " says torch_dtype ", torch_dtype, " (", expected_dtype, ")"));
    }
    if (local_shape(name, entry->shape) != item.value().sizes().vec()) {
      problem(absl::StrCat(file, ": tensor '", name, "' has shape [", absl::StrJoin(entry->shape, ", "), "] but ",
                           folder.config_path(), " gives [", absl::StrJoin(item.value().sizes().vec(), ", "), "]",
                           tp_size > 1 ? absl::StrCat(" for tensor-parallel rank ", tp_rank, " of ", tp_size) : ""));
    }
  }
  for (const std::string& name : folder.TensorNames()) {
    if (parameters.contains(name)) continue;
    if (absl::EndsWith(name, ".rotary_emb.inv_freq")) continue;
    if (held_elsewhere && held_elsewhere(name)) continue;
    if (tied && name == "lm_head.weight" && folder.Find("model.embed_tokens.weight") != nullptr) {
      auto head = folder.View(name);
      auto embedding = folder.View("model.embed_tokens.weight");
      if (!head.ok()) return head.status();
      if (!embedding.ok()) return embedding.status();
      if (head->sizes() == embedding->sizes() && SameValues(*head, *embedding)) continue;
      problem(absl::StrCat(folder.FileOf(name), ": tensor 'lm_head.weight' differs from model.embed_tokens.weight, "
                           "but ", folder.config_path(), " says tie_word_embeddings: true"));
      continue;
    }
    problem(absl::StrCat(folder.FileOf(name), ": tensor '", name, "' is not a parameter of the model ",
                         folder.config_path(), " describes"));
  }
  if (!problems.empty()) {
    const size_t count = problems.size();
    if (count > kMaxListedProblems) problems.resize(kMaxListedProblems);
    return absl::InvalidArgumentError(absl::StrCat(folder.folder(), ": the weights do not fit the model (", count,
                                                   count == 1 ? " problem" : " problems", "): ",
                                                   absl::StrJoin(problems, "; "),
                                                   count > kMaxListedProblems ? "; ..." : ""));
  }
  return absl::OkStatus();
}

absl::Status LoadHfWeights(const HfModelFolder& folder, torch::nn::Module& module,
                           const std::vector<TensorParallelForm>& forms, int tp_rank, int tp_size,
                           const std::function<bool(const std::string&)>& held_elsewhere) {
  for (const auto& item : module.named_parameters()) {
    if (IsDeferredParameter(item.value())) {
      return absl::FailedPreconditionError(absl::StrCat(
          "parameter '", item.key(), "' is deferred (Note [Shard-only loading]): its values come from the folder "
          "when the ZeRO-3 engine partitions it (HfParameterSource), not from a whole load"));
    }
  }
  if (absl::Status checked = CheckHfWeights(folder, module, forms, tp_rank, tp_size, held_elsewhere); !checked.ok()) {
    return checked;
  }
  std::map<std::string, const TensorParallelForm*> form_of;
  for (const TensorParallelForm& form : forms) form_of[form.parameter] = &form;
  auto parameters = module.named_parameters();
  torch::NoGradGuard no_grad;
  for (auto& item : parameters) {
    auto view = folder.View(item.key());
    if (!view.ok()) return view.status();
    if (auto it = form_of.find(item.key()); it != form_of.end()) {
      auto slice = SliceForRank(*view, *it->second, tp_rank, tp_size);
      if (!slice.ok()) return slice.status();
      item.value().copy_(*slice);
      continue;
    }
    item.value().copy_(*view);
  }
  return absl::OkStatus();
}

}  // namespace dslaunch::runtime
