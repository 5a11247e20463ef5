#include "runtime/moe/moe_layer.h"

#include <regex>

#include "absl/strings/str_cat.h"
#include "runtime/moe/expert_exchange.h"
#include "runtime/moe/top_k_gating.h"

namespace dslaunch::runtime {
namespace {

constexpr double kJitterEpsilon = 1e-2;

std::vector<int64_t> ToVector(const torch::Tensor& cpu_long) {
  const int64_t* data = cpu_long.data_ptr<int64_t>();
  return std::vector<int64_t>(data, data + cpu_long.numel());
}

}  // namespace

bool IsExpertParameter(const std::string& name) { return ExpertIndexOf(name) >= 0; }

int64_t ExpertIndexOf(const std::string& name) {
  static const std::regex pattern(absl::StrCat("(^|\\.)", kExpertsModule, "\\.([0-9]+)\\."));
  std::smatch match;
  if (!std::regex_search(name, match, pattern)) return -1;
  return std::stoll(match[2].str());
}

std::string ExpertNameForm(const std::string& name) {
  const int64_t e = ExpertIndexOf(name);
  if (e < 0) return "";
  const std::string marker = absl::StrCat(kExpertsModule, ".", e, ".");
  const size_t at = name.find(marker);
  return absl::StrCat(name.substr(0, at), kExpertsModule, ".*.", name.substr(at + marker.size()));
}

at::Generator ExpertParameterGenerator(uint64_t seed, const std::string& name) {
  uint64_t hash = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : name) hash = (hash ^ c) * 1099511628211ull;
  return at::make_generator<at::CPUGeneratorImpl>(seed ^ hash);
}

std::vector<MoeLayerImpl*> FindMoeLayers(torch::nn::Module& module) {
  std::vector<MoeLayerImpl*> layers;
  for (const auto& child : module.modules(/*include_self=*/true)) {
    if (auto* layer = dynamic_cast<MoeLayerImpl*>(child.get())) layers.push_back(layer);
  }
  return layers;
}

torch::Tensor AddAuxiliaryLosses(const torch::Tensor& loss, const std::vector<MoeLayerImpl*>& layers,
                                 LossGradientScale* cell) {
  torch::Tensor total = loss;
  bool training = false;
  for (MoeLayerImpl* layer : layers) {
    if (!layer->is_training() || !layer->last_stats().weighted_loss.defined()) continue;
    training = true;
    total = total + layer->last_stats().weighted_loss.to(loss.device(), loss.scalar_type());
  }
  return training ? RecordLossGradientScale(total, cell) : loss;
}

void TallyAuxiliaryLoss(const MoeLayerImpl& layer, torch::Tensor* tally) {
  const torch::Tensor& loss = layer.last_stats().weighted_loss;
  if (!layer.is_training() || !loss.defined()) return;
  const torch::Tensor value = loss.detach().to(torch::kDouble).reshape({});
  *tally = tally->defined() ? *tally + value : value;
}

MoeLayerImpl::MoeLayerImpl(int64_t hidden, const MoeOptions& options, const ExpertFactory& make_expert,
                           LossGradientScale* scale, const RouterFactory& make_router)
    : options_(options), scale_(scale) {
  const std::string problem = CheckMoeOptions(options);
  TORCH_CHECK(problem.empty(), problem);
  const int64_t num_experts = options.gating.num_experts;
  const ExpertParallelGroup& group = options.expert_parallel;
  const int64_t per_rank = num_experts / group.size;
  first_local_ = group.rank * per_rank;
  RouterProjection router;
  if (make_router) {
    router = make_router(hidden, num_experts);
  } else {
    torch::nn::Linear linear(torch::nn::LinearOptions(hidden, num_experts).bias(false));
    router.module = linear.ptr();
    router.logits = [impl = linear.get()](const torch::Tensor& x) {
      return torch::nn::functional::linear(x, impl->weight.to(torch::kFloat));
    };
  }
  gate = register_module("gate", router.module);
  router_logits_ = std::move(router.logits);
  TORCH_CHECK(gate_weight().defined() && gate_weight().sizes() == torch::IntArrayRef({num_experts, hidden}),
              "the router's module must hold a weight [", num_experts, ", ", hidden, "]");
  experts = register_module(kExpertsModule, std::make_shared<torch::nn::Module>());
  for (int64_t e = first_local_; e < first_local_ + per_rank; ++e) {
    local_.push_back(experts->register_module(std::to_string(e), make_expert()));
  }
  if (options.use_residual) {
    mlp = register_module("mlp", make_expert());
    coefficient = register_module("coefficient", torch::nn::Linear(hidden, 2));
  }
}

torch::Tensor MoeLayerImpl::RunExperts(const torch::Tensor& rows, const torch::Tensor& counts) {
  const ExpertParallelGroup& group = options_.expert_parallel;
  const int64_t per_rank = local_experts();
  // [P, E]: every rank's rows per expert, the same matrix on every rank.
  const int64_t num_experts = options_.gating.num_experts;
  const std::vector<int64_t> matrix = ToVector(AgreeExpertCounts(counts, group).contiguous());
  auto rows_from = [&](int q, int64_t expert) { return matrix[q * num_experts + expert]; };
  std::vector<int64_t> send(group.size, 0), recv(group.size, 0);
  for (int q = 0; q < group.size; ++q) {
    for (int64_t l = 0; l < per_rank; ++l) {
      send[q] += rows_from(group.rank, q * per_rank + l);
      recv[q] += rows_from(q, first_local_ + l);
    }
  }
  torch::Tensor received = ExchangeRows(rows, send, recv, group);

  // What arrived is grouped by source rank, then by local expert; the experts
  // want it grouped by expert. `order[i]`: the received row at grouped row i.
  // With one rank or one local expert the two orders are the same: no order
  // is built or copied to the device (this runs per MoE layer and step).
  const bool regroup = group.split() && per_rank > 1;
  std::vector<int64_t> order;
  if (regroup) order.reserve(received.size(0));
  std::vector<int64_t> rows_of_expert(per_rank, 0);
  int64_t source_start = 0;
  std::vector<int64_t> start_in_source(group.size * per_rank);
  for (int q = 0; q < group.size; ++q) {
    for (int64_t l = 0; l < per_rank; ++l) {
      start_in_source[q * per_rank + l] = source_start;
      source_start += rows_from(q, first_local_ + l);
    }
  }
  for (int64_t l = 0; l < per_rank; ++l) {
    for (int q = 0; q < group.size; ++q) {
      const int64_t n = rows_from(q, first_local_ + l), start = start_in_source[q * per_rank + l];
      if (regroup) {
        for (int64_t i = 0; i < n; ++i) order.push_back(start + i);
      }
      rows_of_expert[l] += n;
    }
  }
  torch::Tensor order_tensor = regroup ? torch::tensor(order, torch::kLong).to(rows.device()) : torch::Tensor();
  torch::Tensor grouped = regroup ? received.index_select(0, order_tensor) : received;

  // One matrix product per local expert over its contiguous rows (an expert
  // with no rows still runs, on none, so its gradient exists and is zero).
  // Note [Expert row buckets]: padded to a multiple of expert_row_multiple.
  std::vector<torch::Tensor> outputs;
  int64_t offset = 0;
  const int64_t multiple = std::max<int64_t>(1, options_.expert_row_multiple);
  for (int64_t l = 0; l < per_rank; ++l) {
    const int64_t n = rows_of_expert[l];
    const int64_t padded = (n + multiple - 1) / multiple * multiple;
    torch::Tensor input = grouped.narrow(0, offset, n);
    if (padded != n) input = torch::constant_pad_nd(input, {0, 0, 0, padded - n});
    torch::Tensor output = local_[l]->forward(input);
    outputs.push_back(padded != n ? output.narrow(0, 0, n) : output);
    offset += n;
  }
  torch::Tensor out = torch::cat(outputs, 0);
  if (regroup) {
    torch::Tensor inverse =
        torch::empty_like(order_tensor)
            .index_copy_(0, order_tensor, torch::arange(order_tensor.numel(), order_tensor.options()));
    out = out.index_select(0, inverse);
  }
  return ExchangeRows(out, recv, send, group);
}

torch::Tensor MoeLayerImpl::gate_weight() const {
  const auto parameters = gate->named_parameters(/*recurse=*/false);
  const torch::Tensor* weight = parameters.find("weight");
  return weight != nullptr ? *weight : torch::Tensor();
}

torch::Tensor MoeLayerImpl::forward(const torch::Tensor& x) {
  const int64_t hidden = x.size(-1);
  torch::Tensor flat = x.reshape({-1, hidden});
  const int64_t tokens = flat.size(0), k = options_.gating.top_k;

  // The router, in fp32 (DeepSpeed keeps the gate in fp32).
  torch::Tensor router_input = flat.to(torch::kFloat);
  if (is_training() && options_.gating.noisy_gate_policy == NoisyGatePolicy::kJitter) {
    torch::Tensor jitter = torch::rand({tokens, hidden}, torch::kFloat) * (2 * kJitterEpsilon) + (1 - kJitterEpsilon);
    router_input = router_input * jitter.to(flat.device());
  }
  torch::Tensor logits = router_logits_(router_input);
  Routing routing = RouteTokens(logits, options_.gating, is_training());

  // The kept (token, choice) pairs sorted by expert (stable: token order
  // within an expert), and the rows they read.
  torch::Tensor kept_pairs = routing.kept.reshape({-1}).nonzero().view({-1});
  torch::Tensor pair_experts = routing.experts.reshape({-1}).index_select(0, kept_pairs);
  torch::Tensor by_expert = std::get<1>(pair_experts.sort(/*stable=*/true, /*dim=*/0, /*descending=*/false));
  torch::Tensor pairs = kept_pairs.index_select(0, by_expert);
  torch::Tensor token_of_pair = pairs.div(k, "floor");
  torch::Tensor weight_of_pair = routing.weights.reshape({-1}).index_select(0, pairs);

  torch::Tensor expert_out = RunExperts(flat.index_select(0, token_of_pair), routing.counts);
  torch::Tensor weighted = expert_out * weight_of_pair.to(expert_out.scalar_type()).unsqueeze(1);
  torch::Tensor combined = torch::zeros({tokens, hidden}, weighted.options()).index_add(0, token_of_pair, weighted);

  if (options_.use_residual) {
    torch::Tensor mix = torch::softmax(coefficient->forward(flat), -1);
    combined = combined * mix.narrow(1, 0, 1) + mlp->forward(flat) * mix.narrow(1, 1, 1);
  }

  torch::Tensor auxiliary = routing.aux_loss * options_.aux_loss_coef;
  if (options_.z_loss_coef != 0) auxiliary = auxiliary + routing.z_loss * options_.z_loss_coef;
  stats_ = MoeLayerStats{routing.counts, routing.dropped.detach(), routing.aux_loss.detach(), routing.z_loss.detach(),
                         auxiliary.detach()};
  torch::Tensor output = combined.view(x.sizes());
  return is_training() ? AttachAuxiliaryLoss(output, auxiliary, scale_) : output;
}

}  // namespace dslaunch::runtime
