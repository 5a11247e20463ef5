// A linear layer for the few rows of a decode step: y = x·Wᵀ (· scale) (+ b)
// with x [rows, in], W [out, in] in x's type (rows ≤ kDecodeLinearMaxRows)
// or int8 with one scale per output row (rows ≤ kDecodeLinearMaxInt8Rows;
// Note [Int8 weights], runtime/generate/int8_weights.h), b [out] or none,
// y [rows, out].
//
// At a decode step's few rows a linear layer is a matrix-vector product: it
// reads every weight once and does two flops per weight per row, so the
// figure of merit is the bandwidth at which it streams W (the HBM roofline of
// a batch-1 decode). cuBLAS's tensor-core GEMMs are shaped for many rows;
// here one warp computes one output row: its lanes stream the weight row in
// 16-byte loads, several in flight per lane, marked evict-first so x stays in
// L1, and sum in fp32 with a warp reduction; the result is rounded once (as
// cuBLAS rounds its fp32 sum). An int8 weight row is read as 16 weights per
// load and never widened in memory: half the bytes of a bf16 row.
// Launched dependent (Note [Dependent launch]): it starts in the previous
// kernel's last wave. A 7B step's 129 products replayed from a graph on an
// H100 (cuda_decode_linear_variants, one run, where a read of the same bytes
// reached 3,192 GB/s): 2,908 GB/s launched plainly with 4 loads in flight,
// 3,026 GB/s launched dependent with 8 and the weights' first loads before
// the wait (3,032 with the next kernel let in before the wait instead of
// after: the trigger's place gains nothing).
// Each weight load is matched by a load of x per row from L1, so the kernel
// gains on cuBLAS only at one or two rows (a 7B decode step's products on an
// H100, decode_linear_bench: 1.10x at one row, 1.05x at two, 0.92x at four);
// with int8 weights it reads half the bytes LibTorch's widened product does
// and wins at every row count up to eight.
//
// Every pointer 16-byte aligned, x and W contiguous, `in` a multiple of the
// elements one load reads (16 bytes: 8 bf16/fp16, 4 fp32, 16 int8);
// decode_linear_supported says whether a call meets that. Scale and bias
// are in x's type.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/element_type.h"

namespace dslaunch::kernels {

inline constexpr int64_t kDecodeLinearMaxRows = 2;
inline constexpr int64_t kDecodeLinearMaxInt8Rows = 8;

struct DecodeLinearArgs {
  ElementType type = ElementType::kBFloat16;  // x, y, bias, scale (and W unless int8)
  bool int8_weight = false;
  void* y = nullptr;
  const void* x = nullptr;
  const void* weight = nullptr;
  const void* scale = nullptr;  // [out]; with int8_weight only
  const void* bias = nullptr;   // [out] or nullptr
  int64_t rows = 0, in = 0, out = 0;
  // No kernel still running or queued ahead of this one writes the weights
  // (an inference engine's): their first loads may then be issued before
  // the previous kernel ends (Note [Dependent launch],
  // kernels/cuda/dependent_launch.cuh). Otherwise the kernel waits first.
  bool weights_constant = false;
};

bool decode_linear_supported(const DecodeLinearArgs& args);

cudaError_t decode_linear(const DecodeLinearArgs& args, cudaStream_t stream);

}  // namespace dslaunch::kernels
