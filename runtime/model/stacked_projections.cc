#include "runtime/model/stacked_projections.h"

#include <optional>

#include "runtime/model/decode_linear.h"
#include "runtime/tensor_parallel/tensor_parallel_ops.h"

namespace dslaunch::runtime {

bool Stackable(const std::vector<LoraLinear>& projections) {
  if (projections.empty()) return false;
  const LoraLinear& first = projections.front();
  for (const LoraLinear& projection : projections) {
    if (projection->int8() || !projection->weight.defined() || projection->weight.dim() != 2) return false;
    if (projection->weight.size(1) != first->weight.size(1) ||
        projection->weight.scalar_type() != first->weight.scalar_type() ||
        projection->weight.device() != first->weight.device() ||
        projection->bias.defined() != first->bias.defined()) {
      return false;
    }
  }
  return true;
}

namespace {

// x [rows, in] times the weights stacked [Σ out, in] (plus the biases): one
// matrix product forward, over a stacked copy that lives only for it. Saved
// for backward are x (when a weight learns) and the weights themselves (when
// x needs its gradient; parameters, alive anyway, and under ZeRO-3 released
// and gathered again like any), never the copy;
// backward computes the input's gradient as one buffer that each weight's
// product accumulates into (beta 1: no adds), and each weight's and bias's
// gradient from its columns of the output's gradient.
//
// With a region (a split tensor group's communicator), x is this rank's view
// of a column-parallel region's input, [batch, time, in]: forward makes it
// whole first (WholeRegionInput), and backward starts summing the input's
// gradient across the group before it computes the weights' gradients, and
// waits for the sum after (Note [Overlapped input-gradient reduction]).
class StackedLinearFunction : public torch::autograd::Function<StackedLinearFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x, at::TensorList weights,
                               at::TensorList biases, bool fused_kernels, int64_t region, int64_t worker,
                               bool sequence_parallel) {
    torch::Tensor rows = x;
    if (region != 0) {
      auto* comm = reinterpret_cast<Communicator*>(region);
      const torch::Tensor whole =
          WholeRegionInput(x, TensorParallelGroup{comm, comm->rank(), comm->size(), sequence_parallel});
      ctx->saved_data["whole"] = whole.sizes().vec();
      rows = whole.reshape({-1, whole.size(-1)});
    }
    ctx->saved_data["region"] = region;
    ctx->saved_data["worker"] = worker;
    ctx->saved_data["sequence_parallel"] = sequence_parallel;
    // Only what backward reads: the input for the weights' gradients, the
    // weights for the input's. A frozen base (LoRA) keeps no input alive.
    bool weights_learn = false;
    for (const torch::Tensor& weight : weights) weights_learn = weights_learn || weight.requires_grad();
    std::vector<torch::Tensor> saved = {weights_learn ? rows : torch::Tensor()};
    for (const torch::Tensor& weight : weights) saved.push_back(x.requires_grad() ? weight : torch::Tensor());
    ctx->saved_data["widths"] = [&] {
      std::vector<int64_t> widths;
      for (const torch::Tensor& weight : weights) widths.push_back(weight.size(0));
      return widths;
    }();
    ctx->save_for_backward(saved);
    ctx->saved_data["biases"] = static_cast<int64_t>(biases.size());
    const torch::Tensor weight = weights.size() == 1 ? weights[0] : torch::cat(weights);
    const torch::Tensor bias = biases.empty() ? torch::Tensor() : biases.size() == 1 ? biases[0] : torch::cat(biases);
    return LinearOp(rows, weight, bias, fused_kernels);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const torch::autograd::variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& rows = saved[0];
    const size_t count = saved.size() - 1;
    const bool biases = ctx->saved_data["biases"].toInt() > 0;
    const torch::Tensor grad = grads[0].contiguous();
    std::vector<torch::Tensor> parts;
    int64_t offset = 0;
    for (int64_t width : ctx->saved_data["widths"].toIntVector()) {
      parts.push_back(grad.narrow(1, offset, width));
      offset += width;
    }
    torch::autograd::variable_list result(1 + count + (biases ? count : 0));
    std::optional<InputGradientReduction> reduction;
    if (ctx->needs_input_grad(0)) {
      torch::Tensor input_grad = torch::mm(parts[0], saved[1]);
      for (size_t i = 1; i < count; ++i) input_grad.addmm_(parts[i], saved[1 + i]);
      const int64_t region = ctx->saved_data["region"].toInt();
      if (region == 0) {
        result[0] = input_grad;
      } else {
        reduction.emplace(input_grad.view(ctx->saved_data["whole"].toIntVector()),
                          reinterpret_cast<Communicator*>(region),
                          reinterpret_cast<CommWorker*>(ctx->saved_data["worker"].toInt()),
                          ctx->saved_data["sequence_parallel"].toBool());
      }
    }
    for (size_t i = 0; i < count; ++i) {
      if (ctx->needs_input_grad(1 + i)) result[1 + i] = torch::mm(parts[i].t(), rows);
      if (biases && ctx->needs_input_grad(1 + count + i)) result[1 + count + i] = parts[i].sum(0);
    }
    if (reduction) result[0] = reduction->Finish();
    result.resize(result.size() + 4);  // fused_kernels, region, worker, sequence_parallel
    return result;
  }
};

}  // namespace

torch::Tensor StackedProduct(const std::vector<LoraLinear>& projections, const torch::Tensor& x,
                             const TensorParallelGroup& group) {
  TORCH_CHECK(Stackable(projections), "these projections cannot run as one product");
  namespace F = torch::nn::functional;
  const int64_t in = projections.front()->weight.size(1);
  std::vector<torch::Tensor> weights, biases;
  int64_t outputs = 0;
  for (const LoraLinear& projection : projections) {
    weights.push_back(projection->weight);
    if (projection->bias.defined()) biases.push_back(projection->bias);
    outputs += projection->weight.size(0);
  }
  const torch::Tensor rows = x.reshape({-1, in});
  torch::Tensor y = StackedLinearFunction::apply(rows, at::TensorList(weights), at::TensorList(biases),
                                                 projections.front()->fused_kernels, /*region=*/0, /*worker=*/0,
                                                 /*sequence_parallel=*/false);

  std::vector<LoraLinear> adapted;
  for (const LoraLinear& projection : projections) {
    if (projection->adapted()) adapted.push_back(projection);
  }
  if (!adapted.empty()) {
    auto a_of = [&](const LoraLinear& projection) {
      const torch::Tensor& a = projection->lora_A->weight;
      return group.split() ? ReplicatedWithPartialGradient(a, group) : a;
    };
    bool draws = false;
    const double scale = adapted.front()->adapter_options().scale();
    bool one_scale = true;
    for (const LoraLinear& projection : adapted) {
      draws = draws || (projection->adapter_options().dropout > 0 && projection->is_training());
      one_scale = one_scale && projection->adapter_options().scale() == scale;
    }
    torch::Tensor u;
    if (!draws) {
      std::vector<torch::Tensor> as;
      for (const LoraLinear& projection : adapted) as.push_back(a_of(projection));
      u = F::linear(rows, as.size() == 1 ? as[0] : torch::cat(as));
    } else {
      std::vector<torch::Tensor> us;
      for (LoraLinear projection : adapted) {  // a handle: AdapterDropout draws
        us.push_back(F::linear(projection->AdapterDropout(x).reshape({-1, in}), a_of(projection)));
      }
      u = torch::cat(us, /*dim=*/1);
    }
    std::vector<torch::Tensor> blocks;
    for (const LoraLinear& projection : projections) {
      if (!projection->adapted()) {
        blocks.push_back(torch::zeros({projection->weight.size(0), 0}, y.options()));
        continue;
      }
      const torch::Tensor& b = projection->lora_B->weight;
      blocks.push_back(one_scale ? b : b * projection->adapter_options().scale());
    }
    const torch::Tensor b = blocks.size() == 1 ? blocks[0] : torch::block_diag(blocks);
    y.addmm_(u, b.t(), /*beta=*/1, /*alpha=*/one_scale ? scale : 1.0);
  }
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = outputs;
  return y.view(shape);
}

torch::Tensor ColumnParallelProduct(const torch::Tensor& input, const std::vector<torch::Tensor>& weights,
                                    const std::vector<torch::Tensor>& biases, const TensorParallelGroup& group,
                                    bool fused_kernels) {
  TORCH_CHECK(!weights.empty(), "a column-parallel product needs a weight");
  const int64_t in = weights.front().size(1);
  std::vector<int64_t> shape = input.sizes().vec();
  int64_t outputs = 0;
  for (const torch::Tensor& weight : weights) outputs += weight.size(0);
  shape.back() = outputs;
  if (!group.split()) {
    if (weights.size() == 1) {
      return LinearOp(input.reshape({-1, in}), weights[0], biases.empty() ? torch::Tensor() : biases[0], fused_kernels)
          .view(shape);
    }
    return StackedLinearFunction::apply(input.reshape({-1, in}), at::TensorList(weights), at::TensorList(biases),
                                        fused_kernels, /*region=*/0, /*worker=*/0, /*sequence_parallel=*/false)
        .view(shape);
  }
  TORCH_CHECK(input.dim() == 3, "a column-parallel product takes [batch, time, width] activations, got ",
              input.sizes());
  if (group.sequence_parallel) shape[1] *= group.size;
  return StackedLinearFunction::apply(input, at::TensorList(weights), at::TensorList(biases), fused_kernels,
                                      reinterpret_cast<int64_t>(group.comm),
                                      reinterpret_cast<int64_t>(group.worker.get()), group.sequence_parallel)
      .view(shape);
}

torch::Tensor ColumnParallelStackedProduct(const std::vector<LoraLinear>& projections, const torch::Tensor& input,
                                           const TensorParallelGroup& group) {
  TORCH_CHECK(Stackable(projections), "these projections cannot run as one product");
  bool adapted = false;
  for (const LoraLinear& projection : projections) adapted = adapted || projection->adapted();
  // Note [Overlapped input-gradient reduction]: adapters read the input too.
  if (adapted) return StackedProduct(projections, EnterColumnParallel(input, group), group);
  std::vector<torch::Tensor> weights, biases;
  for (const LoraLinear& projection : projections) {
    weights.push_back(projection->weight);
    if (projection->bias.defined()) biases.push_back(projection->bias);
  }
  return ColumnParallelProduct(input, weights, biases, group, projections.front()->fused_kernels);
}

}  // namespace dslaunch::runtime
