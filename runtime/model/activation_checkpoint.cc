#include "runtime/model/activation_checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>

namespace dslaunch::runtime {
namespace {

class CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x,
                               const Segment* segment, bool input_to_cpu) {
    // Non-tensor state travels through saved_data; the segment pointer is
    // owned by the caller for the duration of the step.
    ctx->saved_data["segment"] = reinterpret_cast<int64_t>(segment);
    ctx->saved_data["device"] = static_cast<int64_t>(x.device().is_cuda() ? x.device().index() : -1);
    {
      auto generator = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(generator.mutex());
      ctx->saved_data["rng"] = generator.get_state();
    }
    ctx->save_for_backward({input_to_cpu ? x.to(torch::kCPU) : x});
    torch::NoGradGuard no_grad;
    return (*segment)(x);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto* segment = reinterpret_cast<const Segment*>(ctx->saved_data["segment"].toInt());
    const int64_t device = ctx->saved_data["device"].toInt();
    torch::Tensor x = ctx->get_saved_variables()[0];
    if (device >= 0) x = x.to(torch::Device(torch::kCUDA, static_cast<int>(device)));
    x = x.detach().requires_grad_(true);
    auto generator = at::detail::getDefaultCPUGenerator();
    torch::Tensor now;
    {
      std::lock_guard<std::mutex> lock(generator.mutex());
      now = generator.get_state();
      generator.set_state(ctx->saved_data["rng"].toTensor());
    }
    torch::Tensor y;
    {
      torch::AutoGradMode enable(true);
      y = (*segment)(x);
    }
    {
      std::lock_guard<std::mutex> lock(generator.mutex());
      generator.set_state(now);
    }
    // Accumulates into the segment's parameter gradients and x's.
    torch::autograd::backward({y}, {grad_outputs[0]});
    return {x.grad(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor CheckpointedForward(const Segment& segment, const torch::Tensor& x, bool input_to_cpu) {
  return CheckpointFunction::apply(x, &segment, input_to_cpu);
}

}  // namespace dslaunch::runtime
