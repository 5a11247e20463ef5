#include "kernels/cuda/decode_linear.h"

#include <type_traits>

#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/device_math.cuh"

namespace dslaunch::kernels {
namespace {

using device::FromFloat;
using device::ToFloat;

constexpr int kWarps = 8;  // output rows per block, one per warp
// 16-byte weight loads in flight per lane: 8 for a float row (4 and 8 read
// alike launched plainly, and 8 gained with dependent launch:
// cuda_decode_linear_variants), 4 for int8's up to 8 rows of sums.
template <typename W>
inline constexpr int kUnroll = std::is_same_v<W, int8_t> ? 4 : 8;

// Weights in one 16-byte load.
template <typename W>
inline constexpr int kPerLoad = 16 / static_cast<int>(sizeof(W));

__device__ __forceinline__ float WeightToFloat(int8_t w) { return static_cast<float>(w); }
template <typename W>
__device__ __forceinline__ float WeightToFloat(W w) {
  return ToFloat(w);
}

// `kCount` elements of x at p as fp32, in 16-byte loads that keep to L1 (every
// warp of the block reads the same x). The read-only path is safe under
// dependent launch: x is first read after the wait for the kernel that
// wrote it, and nothing writes it while this kernel runs.
template <typename T, int kCount>
__device__ __forceinline__ void LoadInput(const T* p, float (&out)[kCount]) {
  constexpr int kPiece = device::kVector<T>;
  static_assert(kCount % kPiece == 0, "a weight load covers whole input loads");
#pragma unroll
  for (int i = 0; i < kCount / kPiece; ++i) {
    const int4 raw = __ldg(reinterpret_cast<const int4*>(p) + i);
    const T* v = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int j = 0; j < kPiece; ++j) out[i * kPiece + j] = ToFloat(v[j]);
  }
}

// acc[r] += the weights of one load · x[r, k0 .. k0 + kPerLoad<W>).
template <typename T, typename W, int kRows>
__device__ __forceinline__ void Accumulate(const int4& raw, const T* __restrict__ x, int64_t in, int64_t k0,
                                           float (&acc)[kRows]) {
  constexpr int kCount = kPerLoad<W>;
  const W* packed = reinterpret_cast<const W*>(&raw);
  float w[kCount];
#pragma unroll
  for (int i = 0; i < kCount; ++i) w[i] = WeightToFloat(packed[i]);
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    float v[kCount];
    LoadInput<T, kCount>(x + r * in + k0, v);
#pragma unroll
    for (int i = 0; i < kCount; ++i) acc[r] = fmaf(w[i], v[i], acc[r]);
  }
}

// One warp per output row n: y[r, n] = (Σ_k x[r, k]·W[n, k]) · scale[n] + bias[n].
// Launched dependent (Note [Dependent launch]): with weights_constant, each
// lane's first loads of its weight row are issued before the wait, so the
// product streams its weights while the kernel before it finishes.
template <typename T, typename W, int kRows>
__global__ void __launch_bounds__(kWarps * 32)
    decode_linear_kernel(T* __restrict__ y, const T* __restrict__ x, const W* __restrict__ weight,
                         const T* __restrict__ scale, const T* __restrict__ bias, int64_t in, int64_t out,
                         bool weights_constant) {
  constexpr int kLoads = kUnroll<W>;
  const int lane = threadIdx.x % 32;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (n >= out) {  // the whole warp
    device::WaitForPreviousKernel();
    device::LetNextKernelStart();
    return;
  }
  constexpr int kCount = kPerLoad<W>;
  const int4* row = reinterpret_cast<const int4*>(weight + n * in);
  const int64_t loads = in / kCount;
  float acc[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r] = 0.f;
  int64_t l = lane;
  int4 raw[kLoads];
  // Every load of a run issued before any is used; evict-first: each weight is read once.
  auto load_run = [&] {
#pragma unroll
    for (int u = 0; u < kLoads; ++u) raw[u] = __ldcs(row + l + u * 32);
  };
  bool whole_run = l + (kLoads - 1) * 32 < loads;
  if (weights_constant && whole_run) load_run();
  device::WaitForPreviousKernel();
  device::LetNextKernelStart();
  if (!weights_constant && whole_run) load_run();
  while (whole_run) {
#pragma unroll
    for (int u = 0; u < kLoads; ++u) Accumulate<T, W, kRows>(raw[u], x, in, (l + u * 32) * kCount, acc);
    l += kLoads * 32;
    whole_run = l + (kLoads - 1) * 32 < loads;
    if (whole_run) load_run();
  }
  for (; l < loads; l += 32) Accumulate<T, W, kRows>(__ldcs(row + l), x, in, l * kCount, acc);
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r] = device::WarpSum(acc[r]);
  if (lane == 0) {
    const float s = scale != nullptr ? ToFloat(scale[n]) : 1.f;
    const float b = bias != nullptr ? ToFloat(bias[n]) : 0.f;
#pragma unroll
    for (int r = 0; r < kRows; ++r) y[r * out + n] = FromFloat<T>(acc[r] * s + b);
  }
}

template <typename T, typename W>
cudaError_t Launch(const DecodeLinearArgs& args, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((args.out + kWarps - 1) / kWarps));
  auto go = [&](auto kernel) {
    return device::LaunchDependent(kernel, grid, dim3(kWarps * 32), 0, stream, static_cast<T*>(args.y),
                                   static_cast<const T*>(args.x), static_cast<const W*>(args.weight),
                                   static_cast<const T*>(args.scale), static_cast<const T*>(args.bias), args.in,
                                   args.out, args.weights_constant);
  };
  static_assert(kDecodeLinearMaxRows == 2 && kDecodeLinearMaxInt8Rows == 8, "a kernel per row count below");
  switch (args.rows) {
    case 1: return go(decode_linear_kernel<T, W, 1>);
    case 2: return go(decode_linear_kernel<T, W, 2>);
  }
  if constexpr (std::is_same_v<W, int8_t>) {  // more rows: int8 weights only
    switch (args.rows) {
      case 3: return go(decode_linear_kernel<T, W, 3>);
      case 4: return go(decode_linear_kernel<T, W, 4>);
      case 5: return go(decode_linear_kernel<T, W, 5>);
      case 6: return go(decode_linear_kernel<T, W, 6>);
      case 7: return go(decode_linear_kernel<T, W, 7>);
      case 8: return go(decode_linear_kernel<T, W, 8>);
    }
  }
  return cudaErrorInvalidValue;
}

}  // namespace

bool decode_linear_supported(const DecodeLinearArgs& args) {
  const int64_t max_rows = args.int8_weight ? kDecodeLinearMaxInt8Rows : kDecodeLinearMaxRows;
  if (args.rows < 1 || args.rows > max_rows || args.in <= 0 || args.out <= 0) return false;
  if (args.y == nullptr || args.x == nullptr || args.weight == nullptr) return false;
  if (args.int8_weight != (args.scale != nullptr)) return false;
  const int64_t per_load = args.int8_weight ? 16 : 16 / ElementBytes(args.type);
  // Rows of x start 16-byte aligned when the first does and `in` is a whole
  // number of weight loads (which covers whole input loads too).
  return args.in % per_load == 0 && (args.out + kWarps - 1) / kWarps <= 0x7fffffff && device::Aligned16(args.x) &&
         device::Aligned16(args.weight);
}

cudaError_t decode_linear(const DecodeLinearArgs& args, cudaStream_t stream) {
  if (!decode_linear_supported(args)) return cudaErrorInvalidValue;
  return DSLAUNCH_DISPATCH_ELEMENT_TYPE(args.type, T, [&] {
    return args.int8_weight ? Launch<T, int8_t>(args, stream) : Launch<T, T>(args, stream);
  });
}

}  // namespace dslaunch::kernels
