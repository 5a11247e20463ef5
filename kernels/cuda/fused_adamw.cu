#include <cmath>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/fused_adamw.h"

namespace dslaunch::kernels {
namespace {

using device::FromFloat;
using device::ToFloat;

constexpr int kThreads = 512;

// Per-step scalars, rounded to float once (Note [CPU Adam formula]).
struct StepScalars {
  float lr, beta1, one_minus_beta1, beta2, one_minus_beta2, eps, weight_decay, decay_factor;
  float step_size, sqrt_bias_correction2, grad_scale;
  bool decoupled;
  // When set, grad_scale comes from ClipCoefficient on the device.
  const double* grad_norm_squared;
  double unscale, max_norm;
  // The norm is not finite: nothing is updated (Note [Non-finite guard]).
  bool skip;
};

// One element group: k consecutive elements of a chunk, in fp32 registers.
template <int k>
__device__ __forceinline__ void AdamWUpdate(const StepScalars& s, float (&p)[k], float (&g)[k], float (&m)[k],
                                            float (&v)[k]) {
#pragma unroll
  for (int u = 0; u < k; ++u) {
    g[u] *= s.grad_scale;
    if (s.decoupled) {
      p[u] = p[u] * s.decay_factor;
    } else if (s.weight_decay != 0.f) {
      g[u] = g[u] + s.weight_decay * p[u];
    }
    m[u] = s.beta1 * m[u] + s.one_minus_beta1 * g[u];
    v[u] = s.beta2 * v[u] + s.one_minus_beta2 * g[u] * g[u];
    const float denom = sqrtf(v[u]) / s.sqrt_bias_correction2 + s.eps;
    p[u] = p[u] - s.step_size * m[u] / denom;
  }
}

// Elements [begin, end) of one chunk, kVec at a time (kVec == 4: 16-byte
// fp32 accesses, the caller checked alignment; 1: any alignment).
template <typename G, typename P, int kVec>
__device__ __forceinline__ void StepRange(const StepScalars& s, float* master, const G* grad, float* m, float* v,
                                          P* param, int begin, int end) {
  for (int i = begin + static_cast<int>(threadIdx.x) * kVec; i + kVec <= end; i += kThreads * kVec) {
    float pv[kVec], gv[kVec], mv[kVec], vv[kVec];
    device::LoadAsFloat<float, kVec>(master + i, pv);
    if (s.skip) {
      // A skipped step still fills the 16-bit copy (a gather buffer's slot).
      if (param != nullptr) device::StoreFromFloat<P, kVec>(param + i, pv);
      continue;
    }
    device::LoadAsFloat<G, kVec>(grad + i, gv);
    device::LoadAsFloat<float, kVec>(m + i, mv);
    device::LoadAsFloat<float, kVec>(v + i, vv);
    AdamWUpdate<kVec>(s, pv, gv, mv, vv);
    device::StoreFromFloat<float, kVec>(master + i, pv);
    device::StoreFromFloat<float, kVec>(m + i, mv);
    device::StoreFromFloat<float, kVec>(v + i, vv);
    if (param != nullptr) device::StoreFromFloat<P, kVec>(param + i, pv);
  }
}

__device__ __forceinline__ bool AlignedTo(const void* p, uintptr_t bytes) {
  return (reinterpret_cast<uintptr_t>(p) & (bytes - 1)) == 0;
}

template <typename G, typename P>
__global__ void fused_adamw_kernel(const AdamWTensor* tensors, const AdamWChunk* chunks, int chunk_count,
                                   StepScalars s) {
  s.skip = false;
  if (s.grad_norm_squared != nullptr) {
    // Note [Non-finite guard] (runtime/engine/engine.cc): a NaN or infinite
    // norm means the gradient is unusable; the step is skipped here, since
    // the host reads the norm only after the step is queued.
    s.skip = !isfinite(*s.grad_norm_squared);
    // __dmul_rn: rounded on its own, as on the host (no fused multiply-add).
    s.grad_scale =
        static_cast<float>(ClipCoefficient(__dmul_rn(sqrt(*s.grad_norm_squared), s.unscale), s.unscale, s.max_norm));
  }
  for (int c = blockIdx.x; c < chunk_count; c += gridDim.x) {
    const AdamWChunk chunk = chunks[c];
    const AdamWTensor t = tensors[chunk.tensor];
    float* master = t.master + chunk.offset;
    const G* grad = static_cast<const G*>(t.grad) + chunk.offset;
    float* m = t.exp_avg + chunk.offset;
    float* v = t.exp_avg_sq + chunk.offset;
    P* param = t.param == nullptr ? nullptr : static_cast<P*>(t.param) + chunk.offset;
    const bool vector = AlignedTo(master, 16) && AlignedTo(m, 16) && AlignedTo(v, 16) &&
                        AlignedTo(grad, 4 * sizeof(G)) && (param == nullptr || AlignedTo(param, 4 * sizeof(P)));
    int done = 0;
    if (vector) {
      done = chunk.length / 4 * 4;
      StepRange<G, P, 4>(s, master, grad, m, v, param, 0, done);
    }
    StepRange<G, P, 1>(s, master, grad, m, v, param, done, chunk.length);
  }
}

template <typename G>
__global__ void grad_sum_squares_kernel(const AdamWTensor* tensors, const AdamWChunk* chunks, int chunk_count,
                                        float* partials) {
  __shared__ float scratch[32];
  for (int c = blockIdx.x; c < chunk_count; c += gridDim.x) {
    const AdamWChunk chunk = chunks[c];
    const G* grad = static_cast<const G*>(tensors[chunk.tensor].grad) + chunk.offset;
    float sum = 0.f;
    for (int i = threadIdx.x; i < chunk.length; i += kThreads) {
      const float g = ToFloat(grad[i]);
      sum += g * g;
    }
    sum = device::BlockSum(sum, scratch);
    if (threadIdx.x == 0) partials[c] = sum;
  }
}

__global__ void sum_partials_kernel(const float* partials, int count, double* out) {
  __shared__ double warp_sums[32];
  double sum = 0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) sum += partials[i];
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0;
    for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) total += warp_sums[w];  // fixed order
    *out = total;
  }
}

int Blocks(int chunk_count) {
  int device = 0, sms = 1;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  return chunk_count < sms * 4 ? chunk_count : sms * 4;
}

}  // namespace

std::vector<AdamWChunk> PlanAdamWChunks(const std::vector<int64_t>& numels) {
  std::vector<AdamWChunk> chunks;
  for (size_t t = 0; t < numels.size(); ++t) {
    for (int64_t offset = 0; offset < numels[t]; offset += kAdamWChunkElements) {
      const int64_t left = numels[t] - offset;
      chunks.push_back(AdamWChunk{static_cast<int32_t>(t),
                                  static_cast<int32_t>(left < kAdamWChunkElements ? left : kAdamWChunkElements),
                                  offset});
    }
  }
  return chunks;
}

cudaError_t fused_adamw(const AdamWTensor* tensors, const AdamWChunk* chunks, int chunk_count, ElementType grad_type,
                        ElementType param_type, const AdamWHyperparameters& h, cudaStream_t stream) {
  if (chunk_count <= 0) return chunk_count == 0 ? cudaSuccess : cudaErrorInvalidValue;
  StepScalars s;
  s.lr = static_cast<float>(h.lr);
  s.beta1 = static_cast<float>(h.beta1);
  s.beta2 = static_cast<float>(h.beta2);
  s.one_minus_beta1 = static_cast<float>(1.0 - static_cast<double>(s.beta1));
  s.one_minus_beta2 = static_cast<float>(1.0 - static_cast<double>(s.beta2));
  s.eps = static_cast<float>(h.eps);
  s.weight_decay = static_cast<float>(h.weight_decay);
  s.decay_factor = static_cast<float>(1.0 - h.lr * h.weight_decay);
  const double bias_correction1 = 1.0 - std::pow(h.beta1, static_cast<double>(h.step));
  const double bias_correction2 = 1.0 - std::pow(h.beta2, static_cast<double>(h.step));
  s.step_size = static_cast<float>(h.lr / bias_correction1);
  s.sqrt_bias_correction2 = static_cast<float>(std::sqrt(bias_correction2));
  s.grad_scale = static_cast<float>(h.grad_scale);
  s.decoupled = h.decoupled;
  s.grad_norm_squared = h.grad_norm_squared;
  s.unscale = h.grad_scale;
  s.max_norm = h.max_norm;
  const int blocks = Blocks(chunk_count);
  return DSLAUNCH_DISPATCH_ELEMENT_TYPE(grad_type, G, [&] {
    return DSLAUNCH_DISPATCH_ELEMENT_TYPE(param_type, P, [&] {
      fused_adamw_kernel<G, P><<<blocks, kThreads, 0, stream>>>(tensors, chunks, chunk_count, s);
      return cudaGetLastError();
    });
  });
}

cudaError_t adamw_grad_sum_squares(const AdamWTensor* tensors, const AdamWChunk* chunks, int chunk_count,
                                   ElementType grad_type, float* partials, double* out, cudaStream_t stream) {
  if (chunk_count <= 0) return cudaErrorInvalidValue;
  const int blocks = Blocks(chunk_count);
  return DSLAUNCH_DISPATCH_ELEMENT_TYPE(grad_type, G, [&] {
    grad_sum_squares_kernel<G><<<blocks, kThreads, 0, stream>>>(tensors, chunks, chunk_count, partials);
    sum_partials_kernel<<<1, 1024, 0, stream>>>(partials, chunk_count, out);
    return cudaGetLastError();
  });
}

}  // namespace dslaunch::kernels
