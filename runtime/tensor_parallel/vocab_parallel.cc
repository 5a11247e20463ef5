#include "runtime/tensor_parallel/vocab_parallel.h"

#include <limits>

#include "runtime/tensor_parallel/tensor_parallel_ops.h"

namespace dslaunch::runtime {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int64_t kIgnoreIndex = -100;

void CheckVocabCollective(const absl::Status& status, const char* what) {
  TORCH_CHECK(status.ok(), "vocab-parallel cross-entropy ", what, ": ", status.ToString());
}

struct VocabParallelLoss : torch::autograd::Function<VocabParallelLoss> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& logits, const torch::Tensor& targets,
                               int64_t vocab_size, double smoothing, int64_t comm_handle, int64_t rank) {
    Communicator* comm = reinterpret_cast<Communicator*>(comm_handle);
    TORCH_CHECK(logits.dim() == 2 && targets.dim() == 1 && logits.size(0) == targets.size(0),
                "vocab-parallel cross-entropy: logits [rows, columns] and targets [rows], got ", logits.sizes(),
                " and ", targets.sizes());
    const int64_t columns = logits.size(1);
    const int64_t start = rank * columns;
    // Columns of this rank inside the vocabulary; the rest are padding.
    const int64_t real = std::clamp<int64_t>(vocab_size - start, 0, columns);
    torch::Tensor z = logits.to(torch::kFloat, /*non_blocking=*/false, /*copy=*/true);
    if (real < columns) z.narrow(1, real, columns - real).fill_(-std::numeric_limits<float>::infinity());
    torch::Tensor row_max = std::get<0>(z.max(1));
    if (comm != nullptr) CheckVocabCollective(comm->AllReduce(row_max, ReduceOp::kMax), "all-reduce of the row maxima");
    z.sub_(row_max.unsqueeze(1));

    const torch::Tensor kept = targets.ne(kIgnoreIndex);
    const torch::Tensor mine = kept.logical_and(targets.ge(start)).logical_and(targets.lt(start + columns));
    const torch::Tensor local_target = (targets - start).clamp(0, columns - 1).unsqueeze(1);
    // Per row: the target's logit (on the rank that holds it), Σexp, Σlogit.
    torch::Tensor sums = torch::empty({3, z.size(0)}, z.options());
    sums[0] = z.gather(1, local_target).squeeze(1) * mine.to(torch::kFloat);
    sums[2] = smoothing > 0 ? z.narrow(1, 0, real).sum(1) : torch::zeros({z.size(0)}, z.options());
    z.exp_();
    sums[1] = z.sum(1);
    if (comm != nullptr) CheckVocabCollective(comm->AllReduce(sums, ReduceOp::kSum), "all-reduce of the row sums");

    torch::Tensor row_loss = sums[1].log() - (1.0 - smoothing) * sums[0];
    if (smoothing > 0) row_loss = row_loss - smoothing * sums[2] / static_cast<double>(vocab_size);
    const torch::Tensor kept_float = kept.to(torch::kFloat);
    const torch::Tensor count = kept_float.sum();
    torch::Tensor loss = (row_loss * kept_float).sum() / count;

    z.div_(sums[1].unsqueeze(1));  // softmax, what backward starts from
    ctx->save_for_backward({z, local_target, mine, kept_float, count});
    ctx->saved_data["smoothing"] = smoothing;
    ctx->saved_data["vocab"] = vocab_size;
    ctx->saved_data["real"] = real;
    ctx->saved_data["dtype"] = static_cast<int64_t>(logits.scalar_type());
    return loss;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& softmax = saved[0];
    const torch::Tensor& local_target = saved[1];
    const torch::Tensor& mine = saved[2];
    const torch::Tensor& kept = saved[3];
    const torch::Tensor& count = saved[4];
    const double smoothing = ctx->saved_data["smoothing"].toDouble();
    const int64_t vocab = ctx->saved_data["vocab"].toInt();
    const int64_t real = ctx->saved_data["real"].toInt();
    // d loss / d z_j = (p_j − (1−ε)·[j = target] − ε/V) · kept / count.
    torch::Tensor grad = softmax.clone();
    if (smoothing > 0 && real > 0) grad.narrow(1, 0, real).sub_(smoothing / static_cast<double>(vocab));
    grad.scatter_add_(1, local_target, (mine.to(torch::kFloat) * -(1.0 - smoothing)).unsqueeze(1));
    grad.mul_((kept * grads[0] / count).unsqueeze(1));
    const auto dtype = static_cast<torch::ScalarType>(ctx->saved_data["dtype"].toInt());
    return {grad.to(dtype), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor VocabParallelEmbedding(const torch::Tensor& ids, const torch::Tensor& local_weight,
                                     const TensorParallelGroup& group) {
  if (!group.split()) return torch::embedding(local_weight, ids);
  const int64_t rows = local_weight.size(0);
  const int64_t start = group.rank * rows;
  const torch::Tensor outside = ids.lt(start).logical_or(ids.ge(start + rows));
  const torch::Tensor local_ids = (ids - start).masked_fill(outside, 0);
  torch::Tensor partial = torch::embedding(local_weight, local_ids).masked_fill(outside.unsqueeze(-1), 0);
  return ExitRowParallel(partial, group);
}

torch::Tensor VocabParallelCrossEntropy(const torch::Tensor& logits, const torch::Tensor& targets,
                                        int64_t vocab_size, double label_smoothing, const TensorParallelGroup& group) {
  return VocabParallelLoss::apply(logits, targets, vocab_size, label_smoothing,
                                  reinterpret_cast<int64_t>(group.split() ? group.comm : nullptr),
                                  static_cast<int64_t>(group.split() ? group.rank : 0));
}

}  // namespace dslaunch::runtime
