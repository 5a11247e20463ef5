#include "runtime/model/activation_checkpoint.h"

#include <utility>

#include "runtime/tensor_parallel/partitioned_activation.h"

namespace dslaunch::runtime {
namespace {

// The segment rides in the autograd node until its backward recomputes it,
// so a caller may checkpoint per-call closures (a pipeline keeps several
// micro-batches' forwards alive at once, each with its own context).
// Its random state rides along: the recomputation draws the forward's
// dropout masks again (Note [Dropout streams]).
struct SegmentHolder : torch::CustomClassHolder {
  SegmentHolder(Segment s, RandomStateSnapshot r, TensorParallelGroup p)
      : segment(std::move(s)), random(std::move(r)), partition_over(p) {}
  Segment segment;
  RandomStateSnapshot random;
  TensorParallelGroup partition_over;  // split: the saved input is this rank's part
};

class CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x, Segment segment,
                               const CheckpointStorage* storage, DropoutStream* stream) {
    auto holder = c10::make_intrusive<SegmentHolder>(
        std::move(segment), RandomStateSnapshot(SegmentGenerators(x.device(), stream)), storage->partition_over);
    const Segment& run = holder->segment;
    ctx->saved_data["segment"] = c10::IValue::make_capsule(holder);
    ctx->saved_data["device"] = static_cast<int64_t>(x.device().is_cuda() ? x.device().index() : -1);
    ctx->saved_data["shape"] = x.sizes().vec();
    torch::Tensor kept = holder->partition_over.split() ? KeepPartition(x, holder->partition_over) : x;
    ctx->save_for_backward({storage->on_cpu ? kept.to(torch::kCPU) : kept});
    torch::NoGradGuard no_grad;
    return run(x);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    auto holder = c10::static_intrusive_pointer_cast<SegmentHolder>(ctx->saved_data["segment"].toCapsule());
    const Segment& segment = holder->segment;
    const int64_t device = ctx->saved_data["device"].toInt();
    torch::Tensor x = ctx->get_saved_variables()[0];
    if (device >= 0) x = x.to(torch::Device(torch::kCUDA, static_cast<int>(device)));
    if (holder->partition_over.split()) {
      absl::StatusOr<torch::Tensor> whole =
          GatherPartitions(x, ctx->saved_data["shape"].toIntVector(), holder->partition_over);
      TORCH_CHECK(whole.ok(), "activation checkpointing: ", whole.status().ToString());
      x = *whole;
    }
    x = x.detach().requires_grad_(true);
    const RandomStateSnapshot now = holder->random.Swap();
    torch::Tensor y;
    {
      torch::AutoGradMode enable(true);
      y = segment(x);
    }
    now.Swap();
    // Accumulates into the segment's parameter gradients and x's.
    torch::autograd::backward({y}, {grad_outputs[0]});
    return {x.grad(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

CheckpointStorage ModelCheckpointStorage(bool on_cpu, bool partition, const TensorParallelGroup& group) {
  CheckpointStorage storage;
  storage.on_cpu = on_cpu;
  if (partition && group.split() && !group.sequence_parallel) storage.partition_over = group;
  return storage;
}

torch::Tensor CheckpointedForward(Segment segment, const torch::Tensor& x, const CheckpointStorage& storage,
                                  DropoutStream* stream) {
  // An autograd function's output has a gradient only if an input needs one,
  // and the segment's parameters are not inputs: with a frozen embedding (a
  // LoRA fine-tune) the first segment's output would have none and backward
  // would stop there. An input that needs no gradient gets one, discarded
  // (what Hugging Face's enable_input_require_grads does).
  const torch::Tensor input =
      x.requires_grad() || !torch::GradMode::is_enabled() ? x : x.detach().requires_grad_(true);
  return CheckpointFunction::apply(input, std::move(segment), &storage, stream);
}

}  // namespace dslaunch::runtime
