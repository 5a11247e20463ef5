#include "runtime/checkpoint/lora_merge.h"

#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dslaunch::runtime {
namespace {

constexpr char kA[] = ".lora_A.weight";
constexpr char kB[] = ".lora_B.weight";

std::string Shape(const torch::Tensor& t) { return absl::StrCat("[", absl::StrJoin(t.sizes(), ", "), "]"); }

}  // namespace

absl::StatusOr<std::set<std::string>> LoraAdaptedProjections(const std::vector<std::string>& names) {
  std::set<std::string> with_a, with_b;
  for (const std::string& name : names) {
    if (absl::EndsWith(name, kA)) with_a.insert(name.substr(0, name.size() - sizeof(kA) + 1));
    if (absl::EndsWith(name, kB)) with_b.insert(name.substr(0, name.size() - sizeof(kB) + 1));
  }
  for (const std::string& prefix : with_a) {
    if (!with_b.count(prefix)) return absl::InvalidArgumentError(absl::StrCat(prefix, kA, " has no ", prefix, kB));
  }
  for (const std::string& prefix : with_b) {
    if (!with_a.count(prefix)) return absl::InvalidArgumentError(absl::StrCat(prefix, kB, " has no ", prefix, kA));
  }
  return with_a;
}

absl::StatusOr<torch::Tensor> MergeLoraWeight(const std::string& prefix, const torch::Tensor& weight,
                                              const torch::Tensor& lora_a, const torch::Tensor& lora_b,
                                              const LoraMergeSettings& settings) {
  if (!(settings.alpha > 0)) return absl::InvalidArgumentError("lora_alpha must be positive");
  if (weight.dim() != 2 || lora_a.dim() != 2 || lora_b.dim() != 2 || lora_a.size(0) != lora_b.size(1) ||
      lora_a.size(1) != weight.size(1) || lora_b.size(0) != weight.size(0)) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, ": the adapter's lora_A ", Shape(lora_a), " and lora_B ",
                                                   Shape(lora_b), " do not fit the base weight ", Shape(weight)));
  }
  const double r = static_cast<double>(lora_a.size(0));
  const double scale = settings.use_rslora ? settings.alpha / std::sqrt(r) : settings.alpha / r;
  torch::NoGradGuard no_grad;
  const torch::Tensor delta = torch::matmul(lora_b.to(torch::kFloat), lora_a.to(torch::kFloat));
  return (weight.to(torch::kFloat) + delta * scale).to(weight.scalar_type());
}

}  // namespace dslaunch::runtime
