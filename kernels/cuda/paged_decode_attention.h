// Attention of one-token decode steps over a paged key/value pool (Note
// [Paged key/value cache], runtime/generate/paged_kv_cache.h), in one kernel
// per step and layer: each sequence's new key and value are written into its
// slot of the pool, then each of its query heads attends to the positions
// [0, end) its block table names, softmax(q·kᵀ·scale)·v computed in fp32
// with a running maximum (no score buffer), rounded once.
//
// Shapes (element strides; the head dimension is contiguous everywhere):
//   q, out                 [sequences, heads, head_dim]
//   new_keys, new_values   [sequences, kv_heads, head_dim]
//   key_pool, value_pool   [slots, kv_heads, head_dim], contiguous
//   written  [sequences]            int64: the pool slot of each new token
//   visible  [sequences, longest]   int64: slots of positions 0 .. longest-1
//   ends     [sequences]            int64: positions each attends to (1 ..
//                                   longest; the new token is the last)
// Query head h reads key/value head h / (heads / kv_heads) (grouped-query
// attention). head_dim is at most 256; every stride and pool row a multiple
// of the elements one lane reads (head_dim ≤ 32: 1, ≤ 64: 2, ≤ 128: 4, else
// 8), which head_dim must also divide. One block per (sequence, key/value
// head): it alone writes and reads that head's new slot.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/element_type.h"

namespace dslaunch::kernels {

struct PagedDecodeShape {
  int64_t sequences = 0, heads = 0, kv_heads = 0, head_dim = 0, longest = 0;
  // Over sequences and heads.
  int64_t q_strides[2] = {0, 0};
  int64_t out_strides[2] = {0, 0};
  int64_t new_key_strides[2] = {0, 0};
  int64_t new_value_strides[2] = {0, 0};
  float scale = 1.f;
};

// The largest head_dim the kernel takes.
inline constexpr int64_t kPagedDecodeMaxHeadDim = 256;

// Elements of a head one lane reads (0: head_dim not supported).
int64_t paged_decode_elements_per_lane(int64_t head_dim);

cudaError_t paged_decode_attention(ElementType type, const PagedDecodeShape& shape, void* out, const void* q,
                                   const void* new_keys, const void* new_values, void* key_pool, void* value_pool,
                                   const int64_t* written, const int64_t* visible, const int64_t* ends,
                                   cudaStream_t stream);

}  // namespace dslaunch::kernels
