#include <cmath>

#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/paged_decode_attention.h"

namespace dslaunch::kernels {
namespace {

using device::FromFloat;
using device::LoadAsFloat;
using device::StoreFromFloat;
using device::WarpSum;

// Warps of a block (one block per sequence and key/value head): at batch 1
// a 7B step has 32 blocks on a card of 132 multiprocessors, so the keys a
// block walks are split over many warps. With 8, a 7B layer's step over
// about 200 keys took 10.9 us on an H100 (Nsight Compute, the kernel alone;
// 9.1 with 16), some 10 times the time its 3.3 MB of keys and values take
// to read: the walk's latency, not bandwidth, bounds it.
constexpr int kWarps = 16;
// Positions a warp loads before it computes any of them: independent loads in
// flight, where one position at a time would wait out the memory's latency
// for each.
constexpr int kUnroll = 4;

struct Pointers {
  void* out;
  const void* q;
  const void* new_keys;
  const void* new_values;
  void* key_pool;
  void* value_pool;
  const int64_t* written;
  const int64_t* visible;
  const int64_t* ends;
};

template <typename T, int kPer>
__device__ __forceinline__ void Load(const T* p, bool active, float (&v)[kPer]) {
  if (active) {
    LoadAsFloat<T, kPer>(p, v);
  } else {
#pragma unroll
    for (int i = 0; i < kPer; ++i) v[i] = 0.f;
  }
}

template <typename T, int kPer>
__device__ __forceinline__ void Copy(T* to, const T* from) {
  float v[kPer];
  LoadAsFloat<T, kPer>(from, v);
  StoreFromFloat<T, kPer>(to, v);
}

// Block (sequence, kv_head); lane l holds elements [l·kPer, l·kPer + kPer) of
// a head. Warp w takes positions in runs of kUnroll: w·kUnroll, then
// kWarps·kUnroll further on, and so on; each keeps its own running maximum,
// sum and weighted values, merged at the end through shared memory.
template <typename T, int kPer>
__global__ void __launch_bounds__(kWarps * 32)
    paged_decode_attention_kernel(PagedDecodeShape shape, Pointers p) {
  extern __shared__ float partials[];  // [kWarps][head_dim + 2]: values, max, sum
  device::WaitForPreviousKernel();  // Note [Dependent launch]
  device::LetNextKernelStart();
  const int64_t sequence = blockIdx.x;
  const int64_t kv_head = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t d = shape.head_dim;
  const int64_t first = static_cast<int64_t>(lane) * kPer;
  const bool active = first < d;
  const int64_t row = shape.kv_heads * d;  // a pool slot's elements
  T* key_pool = static_cast<T*>(p.key_pool);
  T* value_pool = static_cast<T*>(p.value_pool);

  // This step's key and value into the pool first: the new token attends to itself.
  if (warp < 2 && active) {
    const int64_t to = p.written[sequence] * row + kv_head * d + first;
    if (warp == 0) {
      Copy<T, kPer>(key_pool + to, static_cast<const T*>(p.new_keys) + sequence * shape.new_key_strides[0] +
                                       kv_head * shape.new_key_strides[1] + first);
    } else {
      Copy<T, kPer>(value_pool + to, static_cast<const T*>(p.new_values) + sequence * shape.new_value_strides[0] +
                                         kv_head * shape.new_value_strides[1] + first);
    }
  }
  __syncthreads();  // the block's global writes are visible to the whole block

  const int64_t end = p.ends[sequence];
  const int64_t* slots = p.visible + sequence * shape.longest;
  const int64_t group = shape.heads / shape.kv_heads;
  float* mine = partials + warp * (d + 2);
  for (int64_t g = 0; g < group; ++g) {
    const int64_t head = kv_head * group + g;
    float q[kPer];
    Load<T, kPer>(static_cast<const T*>(p.q) + sequence * shape.q_strides[0] + head * shape.q_strides[1] + first,
                  active, q);
#pragma unroll
    for (int i = 0; i < kPer; ++i) q[i] *= shape.scale;
    float running_max = -INFINITY, running_sum = 0.f, acc[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) acc[i] = 0.f;
    for (int64_t base = static_cast<int64_t>(warp) * kUnroll; base < end; base += kWarps * kUnroll) {
      float k[kUnroll][kPer], v[kUnroll][kPer];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const bool inside = base + u < end;
        const int64_t at = inside ? slots[base + u] * row + kv_head * d + first : 0;
        Load<T, kPer>(key_pool + at, active && inside, k[u]);
        Load<T, kPer>(value_pool + at, active && inside, v[u]);
      }
      float score[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        float partial = 0.f;
#pragma unroll
        for (int i = 0; i < kPer; ++i) partial += q[i] * k[u][i];
        score[u] = WarpSum(partial);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (base + u >= end) break;
        const float new_max = fmaxf(running_max, score[u]);
        const float kept = expf(running_max - new_max);  // 0 while running_max is -inf
        const float weight = expf(score[u] - new_max);
        running_sum = running_sum * kept + weight;
#pragma unroll
        for (int i = 0; i < kPer; ++i) acc[i] = acc[i] * kept + weight * v[u][i];
        running_max = new_max;
      }
    }
    if (active) {
#pragma unroll
      for (int i = 0; i < kPer; ++i) mine[first + i] = acc[i];
    }
    if (lane == 0) {
      mine[d] = running_max;
      mine[d + 1] = running_sum;
    }
    __syncthreads();
    float overall_max = -INFINITY;
    for (int w = 0; w < kWarps; ++w) overall_max = fmaxf(overall_max, partials[w * (d + 2) + d]);
    T* out = static_cast<T*>(p.out) + sequence * shape.out_strides[0] + head * shape.out_strides[1];
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
      float sum = 0.f, value = 0.f;
      for (int w = 0; w < kWarps; ++w) {
        const float* theirs = partials + w * (d + 2);
        if (theirs[d] == -INFINITY) continue;  // a warp that saw no position
        const float scale = expf(theirs[d] - overall_max);
        sum += theirs[d + 1] * scale;
        value += theirs[i] * scale;
      }
      out[i] = FromFloat<T>(value / sum);
    }
    __syncthreads();  // the partials are read before the next head writes them
  }
}

template <typename T>
cudaError_t Launch(const PagedDecodeShape& shape, const Pointers& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(shape.sequences), static_cast<unsigned>(shape.kv_heads));
  const size_t shared = sizeof(float) * kWarps * (shape.head_dim + 2);
  auto launch = [&](auto kernel) {
    return device::LaunchDependent(kernel, grid, dim3(kWarps * 32), shared, stream, shape, p);
  };
  switch (paged_decode_elements_per_lane(shape.head_dim)) {
    case 1: return launch(paged_decode_attention_kernel<T, 1>);
    case 2: return launch(paged_decode_attention_kernel<T, 2>);
    case 4: return launch(paged_decode_attention_kernel<T, 4>);
    case 8: return launch(paged_decode_attention_kernel<T, 8>);
  }
  return cudaErrorInvalidValue;
}

bool Aligned(const void* pointer, int64_t bytes) { return reinterpret_cast<uintptr_t>(pointer) % bytes == 0; }

}  // namespace

int64_t paged_decode_elements_per_lane(int64_t head_dim) {
  if (head_dim < 1 || head_dim > kPagedDecodeMaxHeadDim) return 0;
  const int64_t per_lane = head_dim <= 32 ? 1 : head_dim <= 64 ? 2 : head_dim <= 128 ? 4 : 8;
  return head_dim % per_lane == 0 ? per_lane : 0;
}

cudaError_t paged_decode_attention(ElementType type, const PagedDecodeShape& shape, void* out, const void* q,
                                   const void* new_keys, const void* new_values, void* key_pool, void* value_pool,
                                   const int64_t* written, const int64_t* visible, const int64_t* ends,
                                   cudaStream_t stream) {
  if (shape.sequences == 0) return cudaSuccess;
  const int64_t per_lane = paged_decode_elements_per_lane(shape.head_dim);
  if (per_lane == 0 || shape.sequences < 0 || shape.sequences > 0x7fffffff || shape.kv_heads < 1 ||
      shape.kv_heads > 65535 || shape.heads % shape.kv_heads != 0 || shape.longest < 1) {
    return cudaErrorInvalidValue;
  }
  for (const int64_t* strides : {shape.q_strides, shape.out_strides, shape.new_key_strides, shape.new_value_strides}) {
    if (strides[0] % per_lane != 0 || strides[1] % per_lane != 0) return cudaErrorInvalidValue;
  }
  const int64_t access = per_lane * ElementBytes(type);
  for (const void* pointer : {static_cast<const void*>(out), q, new_keys, new_values,
                              static_cast<const void*>(key_pool), static_cast<const void*>(value_pool)}) {
    if (!Aligned(pointer, access)) return cudaErrorInvalidValue;
  }
  const Pointers pointers{out, q, new_keys, new_values, key_pool, value_pool, written, visible, ends};
  return DSLAUNCH_DISPATCH_ELEMENT_TYPE(type, T, [&] { return Launch<T>(shape, pointers, stream); });
}

}  // namespace dslaunch::kernels
