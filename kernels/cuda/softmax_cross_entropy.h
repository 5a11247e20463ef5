// Fused softmax cross-entropy over logits [rows, vocab] in fp32, bf16 or
// fp16, with int64 targets [rows]. Never makes an fp32 copy of the logits:
// forward reads each row once (an online max and sum of exponentials in
// fp32) and writes the row's loss and log-sum-exp; backward reads the logits
// once more and writes the gradient in the logits' type.
//
//   loss[r]  = lse[r] - logits[r, target[r]],  lse[r] = log Σ_v exp(logits[r, v])
//   dlogits[r, v] = (exp(logits[r, v] - lse[r]) - [v == target[r]]) · dloss[r]
//
// A target of -100 (kIgnoredTarget, PyTorch's default ignore_index: an
// instruction prompt's tokens) gives its row a loss of 0 and a gradient of
// 0; any other target outside [0, vocab) gives a NaN loss for its row.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/element_type.h"

namespace dslaunch::kernels {

inline constexpr int64_t kIgnoredTarget = -100;

// loss, lse: [rows] fp32.
cudaError_t softmax_cross_entropy_forward(ElementType type, float* loss, float* lse, const void* logits,
                                          const int64_t* targets, int64_t rows, int64_t vocab, cudaStream_t stream);

// dloss: [rows] fp32. dlogits may be the logits buffer itself.
cudaError_t softmax_cross_entropy_backward(ElementType type, void* dlogits, const void* logits, const float* lse,
                                           const int64_t* targets, const float* dloss, int64_t rows, int64_t vocab,
                                           cudaStream_t stream);

}  // namespace dslaunch::kernels
