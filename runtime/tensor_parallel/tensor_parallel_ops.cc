#include "runtime/tensor_parallel/tensor_parallel_ops.h"

#include <atomic>
#include <vector>

namespace dslaunch::runtime {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int64_t kSequenceDim = 1;

std::atomic<BrokenReduction> broken_reduction{BrokenReduction::kNone};

void Check(const absl::Status& status, const char* what) {
  TORCH_CHECK(status.ok(), "tensor-parallel ", what, ": ", status.ToString());
}

// The communicator travels through the autograd context as an integer.
int64_t Handle(const TensorParallelGroup& group) { return reinterpret_cast<int64_t>(group.comm); }
Communicator* FromHandle(AutogradContext* ctx) {
  return reinterpret_cast<Communicator*>(ctx->saved_data["comm"].toInt());
}

torch::Tensor AllReduce(const torch::Tensor& x, Communicator* comm) {
  torch::Tensor out = x.contiguous().clone();
  Check(comm->AllReduce(out, ReduceOp::kSum), "all-reduce");
  return out;
}

torch::Tensor AllGatherSequence(const torch::Tensor& x, Communicator* comm) {
  torch::Tensor moved = x.movedim(kSequenceDim, 0).contiguous();
  std::vector<int64_t> sizes = moved.sizes().vec();
  sizes[0] *= comm->size();
  torch::Tensor all = torch::empty(sizes, moved.options());
  Check(comm->AllGather(moved, all), "all-gather along the sequence");
  return all.movedim(0, kSequenceDim).contiguous();
}

torch::Tensor ReduceScatterSequence(const torch::Tensor& x, Communicator* comm) {
  TORCH_CHECK(x.size(kSequenceDim) % comm->size() == 0, "sequence parallelism: a sequence of ",
              x.size(kSequenceDim), " steps does not split over ", comm->size(), " tensor-parallel ranks");
  torch::Tensor moved = x.movedim(kSequenceDim, 0).contiguous();
  std::vector<int64_t> sizes = moved.sizes().vec();
  sizes[0] /= comm->size();
  torch::Tensor mine = torch::empty(sizes, moved.options());
  Check(comm->ReduceScatter(moved, mine, ReduceOp::kSum), "reduce-scatter along the sequence");
  return mine.movedim(0, kSequenceDim).contiguous();
}

torch::Tensor SequenceChunk(const torch::Tensor& x, Communicator* comm) {
  TORCH_CHECK(x.size(kSequenceDim) % comm->size() == 0, "sequence parallelism: a sequence of ",
              x.size(kSequenceDim), " steps does not split over ", comm->size(), " tensor-parallel ranks");
  const int64_t chunk = x.size(kSequenceDim) / comm->size();
  return x.narrow(kSequenceDim, comm->rank() * chunk, chunk).contiguous();
}

torch::Tensor AllGatherLastDim(const torch::Tensor& x, Communicator* comm) {
  const int64_t last = x.dim() - 1;
  torch::Tensor moved = x.movedim(last, 0).contiguous();
  std::vector<int64_t> sizes = moved.sizes().vec();
  sizes[0] *= comm->size();
  torch::Tensor all = torch::empty(sizes, moved.options());
  Check(comm->AllGather(moved, all), "all-gather along the last dimension");
  return all.movedim(0, last).contiguous();
}

torch::Tensor LastDimChunk(const torch::Tensor& x, Communicator* comm) {
  const int64_t last = x.dim() - 1;
  TORCH_CHECK(x.size(last) % comm->size() == 0, "tensor parallelism: a last dimension of ", x.size(last),
              " does not split over ", comm->size(), " ranks");
  const int64_t chunk = x.size(last) / comm->size();
  return x.narrow(last, comm->rank() * chunk, chunk).contiguous();
}

bool ColumnGradientBroken() { return broken_reduction.load() == BrokenReduction::kColumnInputGradient; }

struct CopyToRegion : torch::autograd::Function<CopyToRegion> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t comm) {
    ctx->saved_data["comm"] = comm;
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    torch::Tensor grad = ColumnGradientBroken() ? grads[0] : AllReduce(grads[0], FromHandle(ctx));
    return {grad, torch::Tensor()};
  }
};

struct ReduceFromRegion : torch::autograd::Function<ReduceFromRegion> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t comm) {
    return AllReduce(x, reinterpret_cast<Communicator*>(comm));
  }
  static variable_list backward(AutogradContext*, variable_list grads) { return {grads[0], torch::Tensor()}; }
};

struct GatherFromSequence : torch::autograd::Function<GatherFromSequence> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t comm) {
    ctx->saved_data["comm"] = comm;
    return AllGatherSequence(x, reinterpret_cast<Communicator*>(comm));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Communicator* comm = FromHandle(ctx);
    torch::Tensor grad = ColumnGradientBroken() ? SequenceChunk(grads[0], comm) : ReduceScatterSequence(grads[0], comm);
    return {grad, torch::Tensor()};
  }
};

struct ReduceScatterToSequence : torch::autograd::Function<ReduceScatterToSequence> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t comm) {
    ctx->saved_data["comm"] = comm;
    return ReduceScatterSequence(x, reinterpret_cast<Communicator*>(comm));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {AllGatherSequence(grads[0], FromHandle(ctx)), torch::Tensor()};
  }
};

struct GatherFromRegion : torch::autograd::Function<GatherFromRegion> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t comm) {
    ctx->saved_data["comm"] = comm;
    return AllGatherLastDim(x, reinterpret_cast<Communicator*>(comm));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {LastDimChunk(grads[0], FromHandle(ctx)), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor GatherFromTensorParallelRegion(const torch::Tensor& x, const TensorParallelGroup& group) {
  return group.split() ? GatherFromRegion::apply(x, Handle(group)) : x;
}

torch::Tensor ColumnParallelLinear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                   const TensorParallelGroup& group, bool gather_output) {
  TORCH_CHECK(!(gather_output && group.sequence_parallel && group.split()),
              "a column-parallel layer cannot gather its output under sequence parallelism (as in Megatron): the "
              "next layer takes the split output");
  torch::Tensor y = torch::nn::functional::linear(EnterColumnParallel(x, group), weight, bias);
  return gather_output ? GatherFromTensorParallelRegion(y, group) : y;
}

torch::Tensor CopyToTensorParallelRegion(const torch::Tensor& x, const TensorParallelGroup& group) {
  return group.split() ? CopyToRegion::apply(x, Handle(group)) : x;
}

torch::Tensor ReduceFromTensorParallelRegion(const torch::Tensor& x, const TensorParallelGroup& group) {
  return group.split() ? ReduceFromRegion::apply(x, Handle(group)) : x;
}

torch::Tensor GatherFromSequenceParallelRegion(const torch::Tensor& x, const TensorParallelGroup& group) {
  return group.split() ? GatherFromSequence::apply(x, Handle(group)) : x;
}

torch::Tensor ReduceScatterToSequenceParallelRegion(const torch::Tensor& x, const TensorParallelGroup& group) {
  return group.split() ? ReduceScatterToSequence::apply(x, Handle(group)) : x;
}

torch::Tensor EnterColumnParallel(const torch::Tensor& x, const TensorParallelGroup& group) {
  return group.sequence_parallel ? GatherFromSequenceParallelRegion(x, group) : CopyToTensorParallelRegion(x, group);
}

torch::Tensor ExitRowParallel(const torch::Tensor& partial, const TensorParallelGroup& group) {
  return group.sequence_parallel ? ReduceScatterToSequenceParallelRegion(partial, group)
                                 : ReduceFromTensorParallelRegion(partial, group);
}

torch::Tensor ReplicatedWithPartialGradient(const torch::Tensor& parameter, const TensorParallelGroup& group) {
  if (broken_reduction.load() == BrokenReduction::kReplicatedParameterGradient) return parameter;
  return CopyToTensorParallelRegion(parameter, group);
}

torch::Tensor SequenceRegionParameter(const torch::Tensor& parameter, const TensorParallelGroup& group) {
  if (!parameter.defined() || !group.sequence_parallel) return parameter;
  return ReplicatedWithPartialGradient(parameter, group);
}

torch::Tensor WholeRegionInput(const torch::Tensor& x, const TensorParallelGroup& group) {
  if (!group.split() || !group.sequence_parallel) return x;
  torch::NoGradGuard no_grad;
  return AllGatherSequence(x, group.comm);
}

InputGradientReduction::InputGradientReduction(const torch::Tensor& grad, Communicator* comm, CommWorker* worker,
                                               bool sequence_parallel)
    : sequence_parallel_(sequence_parallel) {
  TORCH_CHECK(comm != nullptr, "an input-gradient reduction needs the tensor group's communicator");
  if (ColumnGradientBroken()) {  // BreakReductionForTesting: this rank's part, unsummed
    output_ = sequence_parallel ? SequenceChunk(grad, comm).movedim(kSequenceDim, 0) : grad;
    return;
  }
  if (sequence_parallel) {
    TORCH_CHECK(grad.size(kSequenceDim) % comm->size() == 0, "sequence parallelism: a sequence of ",
                grad.size(kSequenceDim), " steps does not split over ", comm->size(), " tensor-parallel ranks");
    input_ = grad.movedim(kSequenceDim, 0).contiguous();
    std::vector<int64_t> sizes = input_.sizes().vec();
    sizes[0] /= comm->size();
    output_ = torch::empty(sizes, input_.options());
  } else {
    input_ = grad.contiguous();
    output_ = input_;
  }
  auto reduce = [comm, input = input_, output = output_, sequence_parallel]() mutable {
    return sequence_parallel ? comm->ReduceScatter(input, output, ReduceOp::kSum)
                             : comm->AllReduce(input, ReduceOp::kSum);
  };
  if (worker != nullptr && input_.is_cuda()) {
    const torch::Device device = input_.device();
    const compat::StreamPoint gradient_ready = compat::StreamPoint::OnCurrentStream(device);
    compat::SideStream(device, /*high_priority=*/true).Run([&] {
      gradient_ready.BlockCurrentStream();
      inline_status_ = reduce();
      side_done_ = compat::StreamPoint::OnCurrentStream(device);
    });
  } else if (worker != nullptr) {
    ticket_.emplace(worker->Submit(std::move(reduce)));
  } else {
    inline_status_ = reduce();
  }
}

InputGradientReduction::~InputGradientReduction() {
  if (finished_) return;
  if (ticket_) ticket_->Wait().IgnoreError();
  // The buffers go back to the compute stream's pool only after the
  // collective that uses them.
  if (side_done_) side_done_->BlockCurrentStream();
}

torch::Tensor InputGradientReduction::Finish() {
  TORCH_CHECK(!finished_, "an input-gradient reduction finished twice");
  finished_ = true;
  const absl::Status status = ticket_ ? ticket_->Wait() : inline_status_;
  if (side_done_) side_done_->BlockCurrentStream();
  Check(status, sequence_parallel_ ? "reduce-scatter of an input gradient along the sequence"
                                   : "all-reduce of an input gradient");
  return sequence_parallel_ ? output_.movedim(0, kSequenceDim).contiguous() : output_;
}

void BreakReductionForTesting(BrokenReduction broken) { broken_reduction.store(broken); }

}  // namespace dslaunch::runtime
