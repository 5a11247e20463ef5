#include "runtime/model/lora.h"

#include <map>
#include <regex>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/json_quote.h"
#include "common/status_macros.h"
#include "runtime/moe/moe_layer.h"

namespace dslaunch::runtime {
namespace {


bool Targets(const std::string& module_name, const std::string& target) {
  return module_name == target || absl::EndsWith(module_name, "." + target);
}

// Every LoraLinear of `model` by its full module name, in module order.
std::vector<std::pair<std::string, LoraLinearImpl*>> Projections(const torch::nn::Module& model) {
  std::vector<std::pair<std::string, LoraLinearImpl*>> found;
  // Not the model itself (that would need it held by a shared_ptr).
  for (const auto& item : model.named_modules(/*name_prefix=*/"", /*include_self=*/false)) {
    if (auto* projection = const_cast<torch::nn::Module&>(*item.value()).as<LoraLinearImpl>()) {
      found.emplace_back(item.key(), projection);
    }
  }
  return found;
}

std::string LastComponent(const std::string& name) {
  const size_t dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(dot + 1);
}

// Under expert parallelism a rank holds its experts only (Note [Mixture of
// experts]). Every expert projection of the whole model, by its full name,
// with the expert-parallel rank that holds it: from each split MoE layer's
// local experts' projections, named for every expert of the layer.
std::vector<std::pair<std::string, int>> ExpertProjectionsOfEveryRank(
    const torch::nn::Module& model, const std::vector<std::pair<std::string, LoraLinearImpl*>>& projections) {
  std::vector<std::pair<std::string, int>> every;
  for (const auto& item : model.named_modules(/*name_prefix=*/"", /*include_self=*/false)) {
    const auto* layer = dynamic_cast<const MoeLayerImpl*>(item.value().get());
    if (layer == nullptr || !layer->options().expert_parallel.split()) continue;
    const std::string experts = absl::StrCat(item.key(), ".", kExpertsModule, ".");
    const std::string first = absl::StrCat(experts, layer->first_local_expert(), ".");
    std::vector<std::string> rests;  // "w1", ...: the projections of one expert
    for (const auto& [name, projection] : projections) {
      if (absl::StartsWith(name, first)) rests.push_back(name.substr(first.size()));
    }
    for (int64_t e = 0; e < layer->options().gating.num_experts; ++e) {
      for (const std::string& rest : rests) {
        every.emplace_back(absl::StrCat(experts, e, ".", rest), static_cast<int>(e / layer->local_experts()));
      }
    }
  }
  return every;
}

}  // namespace

absl::StatusOr<LoraSummary> ApplyLora(torch::nn::Module& model, const LoraSettings& settings, uint64_t seed) {
  if (settings.adapter.r <= 0) return absl::InvalidArgumentError(absl::StrCat("lora.r must be positive, got ", settings.adapter.r));
  const bool by_pattern = !settings.target_pattern.empty();
  if (by_pattern && !settings.target_modules.empty()) {
    return absl::InvalidArgumentError("lora.target_modules: a list of names or one pattern, not both");
  }
  if (settings.target_modules.empty() && !by_pattern) {
    return absl::InvalidArgumentError("lora.target_modules: name at least one projection");
  }
  std::regex pattern;
  if (by_pattern) {
    try {
      pattern = std::regex(settings.target_pattern, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      return absl::InvalidArgumentError(absl::StrCat("lora.target_modules: the pattern '", settings.target_pattern,
                                                     "' is not a regular expression: ", e.what()));
    }
  }
  // PEFT's string form matches whole names; the list form, names or their ends.
  auto targeted = [&](const std::string& name, const std::string& target) {
    return by_pattern ? std::regex_match(name, pattern) : Targets(name, target);
  };
  const std::vector<std::string> targets =
      by_pattern ? std::vector<std::string>{settings.target_pattern} : settings.target_modules;
  const auto projections = Projections(model);
  if (projections.empty()) {
    return absl::InvalidArgumentError("this model has no projection that can carry a LoRA adapter");
  }
  const bool all_linear =
      std::find(settings.target_modules.begin(), settings.target_modules.end(), kLoraAllLinear) != settings.target_modules.end();
  if (all_linear && settings.target_modules.size() > 1) {
    return absl::InvalidArgumentError("lora.target_modules: 'all-linear' stands alone");
  }
  std::vector<std::string> kinds;  // for the error message: the projections there are
  for (const auto& [name, projection] : projections) {
    const std::string kind = LastComponent(name);
    if (std::find(kinds.begin(), kinds.end(), kind) == kinds.end()) kinds.push_back(kind);
  }
  std::vector<std::pair<std::string, LoraLinearImpl*>> chosen;
  std::map<std::string, int> matches;
  for (const auto& [name, projection] : projections) {
    bool take = false;
    if (all_linear) {
      take = name != "lm_head";  // PEFT's all-linear leaves the output head out
    } else {
      for (const std::string& target : targets) {
        if (targeted(name, target)) {
          take = true;
          ++matches[target];
        }
      }
    }
    if (take) chosen.emplace_back(name, projection);
  }
  // Expert parallelism: a target may name an expert another rank holds; and
  // the experts of every rank or of none carry adapters (a rank whose experts
  // are all frozen has no expert partition to step, while one with expert
  // adapters steps its partition with collectives the other would not join).
  const auto expert_projections = ExpertProjectionsOfEveryRank(model, projections);
  int unadapted_holder = -1, adapted_holder = -1;  // expert-parallel ranks of each kind
  if (!expert_projections.empty()) {
    std::map<int, bool> adapts;  // per expert-parallel rank
    for (const auto& [name, holder] : expert_projections) {
      bool& any = adapts[holder];
      for (const std::string& target : targets) {
        if (all_linear || !targeted(name, target)) continue;
        any = true;
        ++matches[target];
      }
      any = any || all_linear;
    }
    for (const auto& [holder, any] : adapts) {
      int& first = any ? adapted_holder : unadapted_holder;
      if (first < 0) first = holder;
    }
  }
  if (!all_linear) {
    for (const std::string& target : targets) {
      if (matches[target] == 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "lora.target_modules: '", target, "' matches no projection of this model (it has ",
            absl::StrJoin(kinds, ", "), by_pattern ? "; a pattern must match whole names such as " : "",
            by_pattern ? projections.front().first : "", ")"));
      }
    }
  }
  if (unadapted_holder >= 0 && adapted_holder >= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "lora.target_modules: with expert parallelism the experts of every rank or of none must carry adapters, "
        "but the experts of expert-parallel rank ", unadapted_holder, " match no target while rank ",
        adapted_holder, "'s do: name the projections of every expert (w1, w2, w3), or none of them, or train at "
        "expert-parallel size 1"));
  }
  LoraSummary summary;
  try {
    for (auto& p : model.parameters()) p.set_requires_grad(false);
    auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
    for (const auto& [name, projection] : chosen) {
      // An expert's adapter draws from the expert's own generator (Note
      // [Mixture of experts]): it starts the same at every expert-parallel
      // size, and a rank's draws do not depend on which experts it holds.
      projection->EnableAdapter(settings.adapter,
                                IsExpertParameter(name) ? ExpertParameterGenerator(seed, name) : generator);
    }
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(absl::StrCat("LoRA: ", e.what_without_backtrace()));
  }
  summary.adapted_projections = static_cast<int64_t>(chosen.size());
  for (const auto& [name, projection] : chosen) {
    const std::string kind = LastComponent(name);
    if (std::find(summary.adapted_kinds.begin(), summary.adapted_kinds.end(), kind) == summary.adapted_kinds.end()) {
      summary.adapted_kinds.push_back(kind);
    }
  }
  for (const auto& p : model.parameters()) {
    (p.requires_grad() ? summary.trainable_parameters : summary.frozen_parameters) += p.numel();
  }
  return summary;
}

bool IsLoraParameterName(const std::string& name) {
  return absl::StrContains(name, ".lora_A.") || absl::StrContains(name, ".lora_B.");
}

absl::StatusOr<std::optional<TensorParallelForm>> LoraFactorForm(const TensorParallelForm& projection_form,
                                                                  const std::string& factor) {
  const bool is_a = absl::StrContains(factor, ".lora_A.");
  if (!is_a && !absl::StrContains(factor, ".lora_B.")) {
    return absl::InvalidArgumentError(absl::StrCat(factor, " is no LoRA factor"));
  }
  TensorParallelForm form = projection_form;
  form.parameter = factor;
  switch (projection_form.split) {
    case TensorParallelSplit::kColumn:  // output rows split: B's rows
      if (is_a) return std::nullopt;
      return form;
    case TensorParallelSplit::kRow:  // input columns split: A's columns
      if (!is_a) return std::nullopt;
      return form;
    case TensorParallelSplit::kVocab:
      break;
  }
  return absl::UnimplementedError(absl::StrCat(factor, " adapts ", projection_form.parameter,
                                               ", split by vocabulary over the tensor group: not supported"));
}

absl::StatusOr<std::vector<TensorParallelForm>> LoraAdapterForms(const torch::nn::Module& model,
                                                                 const std::vector<TensorParallelForm>& forms) {
  std::map<std::string, const TensorParallelForm*> form_of;
  for (const TensorParallelForm& form : forms) form_of[form.parameter] = &form;
  std::vector<TensorParallelForm> adapter_forms;
  for (const auto& [name, projection] : Projections(model)) {
    if (!projection->adapted()) continue;
    auto it = form_of.find(name + ".weight");
    if (it == form_of.end()) continue;  // whole on every rank: so are its factors
    for (const char* factor : {".lora_A.weight", ".lora_B.weight"}) {
      DS_ASSIGN_OR_RETURN(std::optional<TensorParallelForm> form, LoraFactorForm(*it->second, name + factor));
      if (form.has_value()) adapter_forms.push_back(*std::move(form));
    }
  }
  return adapter_forms;
}

std::vector<std::string> MergedParameterNames(const torch::nn::Module& model) {
  std::vector<std::string> names;
  for (const auto& item : model.named_parameters()) {
    if (!IsLoraParameterName(item.key())) names.push_back(item.key());
  }
  return names;
}

torch::Tensor MergedParameter(const torch::nn::Module& model, const std::string& name) {
  if (absl::EndsWith(name, ".weight")) {
    const std::string module_name = name.substr(0, name.size() - 7);
    for (const auto& [projection_name, projection] : Projections(model)) {
      if (projection_name == module_name) return projection->MergedWeight();
    }
  }
  const torch::Tensor* found = model.named_parameters().find(name);
  TORCH_CHECK(found != nullptr, "no parameter ", name);
  return found->detach();
}

std::string PeftAdapterConfigJson(const LoraSettings& settings, const std::string& base_model_name_or_path) {
  std::vector<std::string> targets;
  for (const std::string& target : settings.target_modules) targets.push_back(JsonQuote(target));
  const std::string target_modules =
      !settings.target_pattern.empty()          ? JsonQuote(settings.target_pattern)
      : TargetsAllLinear(settings.target_modules) ? JsonQuote(kLoraAllLinear)
                                                  : absl::StrCat("[", absl::StrJoin(targets, ", "), "]");
  const LoraAdapterOptions& a = settings.adapter;
  return absl::StrCat("{\n", "  \"alpha_pattern\": {},\n",
                      "  \"base_model_name_or_path\": ", JsonQuote(base_model_name_or_path), ",\n",
                      "  \"bias\": \"none\",\n", "  \"fan_in_fan_out\": false,\n", "  \"inference_mode\": true,\n",
                      "  \"init_lora_weights\": true,\n", "  \"layers_pattern\": null,\n",
                      "  \"layers_to_transform\": null,\n", "  \"lora_alpha\": ", a.alpha, ",\n",
                      "  \"lora_dropout\": ", a.dropout, ",\n", "  \"modules_to_save\": null,\n",
                      "  \"peft_type\": \"LORA\",\n", "  \"r\": ", a.r, ",\n", "  \"rank_pattern\": {},\n",
                      "  \"revision\": null,\n", "  \"target_modules\": ", target_modules, ",\n",
                      "  \"task_type\": \"CAUSAL_LM\",\n", "  \"use_dora\": false,\n",
                      "  \"use_rslora\": ", a.use_rslora ? "true" : "false", "\n}\n");
}

}  // namespace dslaunch::runtime
