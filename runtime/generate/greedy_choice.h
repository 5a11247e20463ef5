// Note [Choosing on the device] (generation_engine.cc): the greedy token of
// logit rows and its log-probability, computed where the logits are, so that
// two numbers a row cross to the host instead of a vocabulary's logits.
#pragma once

#include <torch/torch.h>

namespace dslaunch::runtime {

// [2, n] fp64 on `logits`' device: for each row of `logits` [rows, vocab]
// named by `rows` (int64 [n] on the host; undefined: every row, n = rows),
// its argmax (the first of equal values; NaN above every number, as
// LibTorch's argmax) and that token's log-softmax in fp64, as
// log_softmax(row.to(kDouble)) gives it. On a CUDA device of a build with the
// CUDA kernels, one kernel (kernels/cuda/greedy_choice.h); elsewhere
// LibTorch's ops. The two agree on ids and to fp64 rounding on
// log-probabilities. Throws c10::Error naming what is wrong.
torch::Tensor ChooseGreedily(const torch::Tensor& logits, const torch::Tensor& rows = {});

// The LibTorch ops alone (the CPU path, and the GPU test's reference).
torch::Tensor ChooseGreedilyWithLibTorch(const torch::Tensor& logits, const torch::Tensor& rows = {});

}  // namespace dslaunch::runtime
