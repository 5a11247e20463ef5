// DeepSpeed's MoE layer (Note [Mixture of experts]): a router, E experts (this
// rank's share of them under expert parallelism) and, with use_residual, a
// dense expert beside them.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/moe/auxiliary_loss.h"
#include "runtime/moe/expert_mlp.h"
#include "runtime/moe/moe_options.h"

namespace dslaunch::runtime {

// Parameter names: "gate.weight" ([E, hidden]), "experts.<e>.…" with e the
// global expert index (so a checkpoint names an expert the same at every
// expert-parallel size), "mlp.…" and "coefficient.…" with use_residual.
inline constexpr char kExpertsModule[] = "experts";
// Whether a parameter (a module-qualified name) belongs to an expert: its
// copies live on one expert-parallel rank each and their gradients are
// reduced over the expert-data-parallel group (Note [Mixture of experts]).
bool IsExpertParameter(const std::string& name);
// The global expert index of an expert parameter's name; -1 for others.
int64_t ExpertIndexOf(const std::string& name);
// An expert parameter's name with its index as "*" ("layers.0.moe.experts.*.w1.weight"):
// what every expert's copy of that parameter shares. Empty for others.
std::string ExpertNameForm(const std::string& name);

// What the last forward routed (this rank's tokens), for telemetry.
struct MoeLayerStats {
  torch::Tensor tokens_per_expert;  // [E] int64: kept (token, choice) pairs
  torch::Tensor dropped;            // fp32 scalar: fraction of pairs dropped
  torch::Tensor aux_loss;           // fp32 scalar: the load-balancing loss (unweighted)
  torch::Tensor z_loss;             // fp32 scalar
  torch::Tensor weighted_loss;      // what was added to the loss: coefficients applied
};

// The router's projection, hidden -> E logits: a module registered as
// "gate" whose parameter "weight" is [E, hidden], and its product, fp32 in
// and out (DeepSpeed keeps the gate in fp32). The default is a plain linear
// map; a model family may give its own (Mixtral's carries a LoRA adapter,
// runtime/model/llama.cc).
struct RouterProjection {
  std::shared_ptr<torch::nn::Module> module;
  std::function<torch::Tensor(const torch::Tensor&)> logits;
};

class MoeLayerImpl : public torch::nn::Module {
 public:
  using ExpertFactory = std::function<std::shared_ptr<ExpertMlp>()>;
  using RouterFactory = std::function<RouterProjection(int64_t hidden, int64_t experts)>;

  // `scale` is the model's (auxiliary_loss.h); it must outlive the layer's
  // graphs. Experts are created in global order, this rank's only.
  // `make_router`: null for the plain linear router.
  MoeLayerImpl(int64_t hidden, const MoeOptions& options, const ExpertFactory& make_expert, LossGradientScale* scale,
               const RouterFactory& make_router = nullptr);

  // [..., hidden] → [..., hidden].
  torch::Tensor forward(const torch::Tensor& x);

  int64_t first_local_expert() const { return first_local_; }
  int64_t local_experts() const { return static_cast<int64_t>(local_.size()); }
  const MoeLayerStats& last_stats() const { return stats_; }
  const MoeOptions& options() const { return options_; }

  // The router's weight [E, hidden] (the "gate" module's "weight").
  torch::Tensor gate_weight() const;

  std::shared_ptr<torch::nn::Module> gate;  // the router's module
  std::shared_ptr<torch::nn::Module> experts;
  std::shared_ptr<ExpertMlp> mlp;          // use_residual
  torch::nn::Linear coefficient{nullptr};  // use_residual

 private:
  // The experts' outputs for the kept rows, in the order given (sorted by
  // expert; `counts` this rank's rows per expert).
  torch::Tensor RunExperts(const torch::Tensor& rows, const torch::Tensor& counts);

  MoeOptions options_;
  LossGradientScale* scale_;
  std::function<torch::Tensor(const torch::Tensor&)> router_logits_;
  int64_t first_local_ = 0;
  std::vector<std::shared_ptr<ExpertMlp>> local_;
  MoeLayerStats stats_;
};
TORCH_MODULE(MoeLayer);

// Every MoE layer of `module`, in registration order.
std::vector<MoeLayerImpl*> FindMoeLayers(torch::nn::Module& module);

// The training loss a model returns: `loss` plus the weighted auxiliary
// losses of `layers`' last forward (their values: the gradient reaches them
// through AttachAuxiliaryLoss), through RecordLossGradientScale(cell). `loss`
// itself when no layer is in training.
torch::Tensor AddAuxiliaryLosses(const torch::Tensor& loss, const std::vector<MoeLayerImpl*>& layers,
                                 LossGradientScale* cell);

// Note [Experts in pipeline stages] (runtime/pipeline/pipeline_engine.h):
// adds the weighted auxiliary loss of `layer`'s last forward (its value,
// detached) to `tally` when that forward ran in training; `tally` starts
// undefined.
void TallyAuxiliaryLoss(const MoeLayerImpl& layer, torch::Tensor* tally);

// A generator of its own for an expert parameter (by its module-qualified
// name), seeded from (seed, name): an expert starts the same at every
// expert-parallel size, and no rank draws for the experts it does not hold
// (which would shift every later draw of a shared generator).
at::Generator ExpertParameterGenerator(uint64_t seed, const std::string& name);

}  // namespace dslaunch::runtime
