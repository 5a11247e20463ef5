// The decode half of a paged attention step in one CUDA kernel
// (kernels/cuda/paged_decode_attention.h): PagedKvCache::Step's decodes with
// fused kernels, in place of LibTorch's scatter of the new keys and values,
// gathers, widening for grouped-query attention, masked attention and
// copies (about ten kernels a layer, one).
#pragma once

#include <cstdint>

#include <torch/torch.h>

#include "absl/status/status.h"

namespace dslaunch::runtime {

// Why a cache on `device` with heads of `head_dim` cannot decode through the
// kernel (not a CUDA device, a build without the CUDA kernels, a head wider
// than the kernel takes); OK when it can.
absl::Status FusedDecodeAttentionProblem(const torch::Device& device, int64_t head_dim);

// Writes new_keys and new_values [n, kv_heads, head_dim] into key_pool and
// value_pool [slots, kv_heads, head_dim] at slots written [n], then returns
// each of the n tokens' attention over its sequence's positions: q [n, heads,
// head_dim]; visible [n, longest] int64 slots; ends [n] int64, the positions
// each one attends to (the new one last). The result is [n, heads, head_dim]
// in q's dtype; scale 1/sqrt(head_dim), as SDPA's default. Every tensor on one
// CUDA device, q, the new keys and values and the pools of one dtype. Throws
// c10::Error naming what is wrong.
torch::Tensor FusedDecodeAttention(const torch::Tensor& q, const torch::Tensor& new_keys,
                                   const torch::Tensor& new_values, torch::Tensor& key_pool,
                                   torch::Tensor& value_pool, const torch::Tensor& written,
                                   const torch::Tensor& visible, const torch::Tensor& ends);

}  // namespace dslaunch::runtime
