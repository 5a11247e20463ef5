// The greedy choice of a decode step in one kernel: for each of `rows` rows
// of logits [*, vocab] (row_stride elements apart; `row_index` picks the rows
// when not null), the index of the largest value (the first of equal ones; a
// NaN counts as the largest, as LibTorch's argmax takes it) and that token's
// log-softmax, computed in fp64 as log_softmax(row.to(double)) computes it:
// -log(sum(exp(row - max))). out is [2, rows] fp64: ids (as doubles, exact
// below 2^53), then log-probabilities. One block per row; a second pass over
// the row reads it back from L1/L2.
//
// In place of LibTorch's widening copy, argmax, log_softmax, gather and stack
// (about seven kernels a step, most of them as long as their launch).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/element_type.h"

namespace dslaunch::kernels {

cudaError_t greedy_choice(ElementType type, double* out, const void* logits, const int64_t* row_index, int64_t rows,
                          int64_t vocab, int64_t row_stride, cudaStream_t stream);

}  // namespace dslaunch::kernels
