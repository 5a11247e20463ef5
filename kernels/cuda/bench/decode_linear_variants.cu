// Design bench for the decode linear (Note [Decode linear]): the products of
// one Llama-2-7B decode step at one row (per layer q/k/v joined, o, gate/up
// joined, down; then the head; every layer its own weights so nothing is
// served from L2), through variants of the warp-per-row kernel, launched
// back to back and replayed from a CUDA graph, as the engine's decode step
// does. Against a pure read of the same bytes and a device-to-device copy in
// the same run. It decides the shipped kernel's shape (warps per block,
// loads in flight, cache hints, programmatic dependent launch); the shipped
// kernel itself is measured by decode_linear_bench.
//
//   cuda_decode_linear_variants [--layers 32] [--iterations 20]
//
// Plain CUDA (no LibTorch); weights are a deterministic pattern. Every
// variant's output is checked against the first's.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda/device_math.cuh"

namespace {

void Check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(status));
    std::exit(1);
  }
}

template <bool kStreaming>
__device__ __forceinline__ int4 LoadWeights(const int4* p) {
  if constexpr (kStreaming) return __ldcs(p);
  return __ldg(p);
}

__device__ __forceinline__ void Accumulate(const int4& raw, const __nv_bfloat16* __restrict__ x, float& acc) {
  const int4 xin = __ldg(reinterpret_cast<const int4*>(x));
  const __nv_bfloat162* w = reinterpret_cast<const __nv_bfloat162*>(&raw);
  const __nv_bfloat162* v = reinterpret_cast<const __nv_bfloat162*>(&xin);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 wf = __bfloat1622float2(w[i]);
    const float2 vf = __bfloat1622float2(v[i]);
    acc = fmaf(wf.x, vf.x, acc);
    acc = fmaf(wf.y, vf.y, acc);
  }
}

// One warp per output row; kUnroll 16-byte weight loads in flight per lane.
// kPdl: the weights' first loads are issued before waiting for the previous
// kernel (programmatic dependent launch); the next kernel may start once
// every block of this one has waited (as the shipped kernel does, Note
// [Dependent launch]) or, kTriggerFirst, as soon as every block has started
// (against the Note's rule: here only to see what it would gain).
template <int kWarps, int kUnroll, bool kStreaming, bool kPdl, bool kTriggerFirst = false>
__global__ void __launch_bounds__(kWarps * 32)
    gemv(__nv_bfloat16* __restrict__ y, const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
         int in, int out) {
  if constexpr (kPdl && kTriggerFirst) asm volatile("griddepcontrol.launch_dependents;");
  const int lane = threadIdx.x % 32;
  const int n = blockIdx.x * kWarps + threadIdx.x / 32;
  if (n >= out) {
    if constexpr (kPdl) asm volatile("griddepcontrol.wait;" ::: "memory");
    if constexpr (kPdl && !kTriggerFirst) asm volatile("griddepcontrol.launch_dependents;");
    return;
  }
  const int4* row = reinterpret_cast<const int4*>(w + static_cast<int64_t>(n) * in);
  const int loads = in / 8;
  float acc = 0.f;
  int l = lane;
  int4 raw[kUnroll];
  bool whole = l + (kUnroll - 1) * 32 < loads;
  if (whole) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) raw[u] = LoadWeights<kStreaming>(row + l + u * 32);
  }
  if constexpr (kPdl) asm volatile("griddepcontrol.wait;" ::: "memory");
  if constexpr (kPdl && !kTriggerFirst) asm volatile("griddepcontrol.launch_dependents;");
  while (whole) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) Accumulate(raw[u], x + (l + u * 32) * 8, acc);
    l += kUnroll * 32;
    whole = l + (kUnroll - 1) * 32 < loads;
    if (whole) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) raw[u] = LoadWeights<kStreaming>(row + l + u * 32);
    }
  }
  for (; l < loads; l += 32) Accumulate(LoadWeights<kStreaming>(row + l), x + l * 8, acc);
  acc = dslaunch::kernels::device::WarpSum(acc);
  if (lane == 0) y[n] = __float2bfloat16(acc);
}

// Reads every weight once (the ceiling for a kernel that must read them).
__global__ void read_all(const int4* __restrict__ p, int64_t count, float* sink) {
  float acc = 0.f;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int4 v = __ldcs(p + i);
    acc += __int_as_float(v.x ^ v.y ^ v.z ^ v.w);
  }
  if (acc == 12345.f) *sink = acc;  // keeps the loads
}

__global__ void fill(__nv_bfloat16* p, int64_t count, uint32_t salt) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint32_t h = (static_cast<uint32_t>(i) * 2654435761u) ^ salt;
    p[i] = __float2bfloat16((static_cast<float>(h % 2001) - 1000.f) / 32000.f);
  }
}

struct Product {
  int in, out;
  __nv_bfloat16* weight;
  __nv_bfloat16* y;
};

struct Variant {
  const char* name;
  void (*launch)(const Product&, const __nv_bfloat16* x, cudaStream_t);
};

template <int kWarps, int kUnroll, bool kStreaming, bool kPdl, bool kTriggerFirst = false>
void Launch(const Product& p, const __nv_bfloat16* x, cudaStream_t stream) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3((p.out + kWarps - 1) / kWarps);
  config.blockDim = dim3(kWarps * 32);
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = kPdl ? 1 : 0;
  Check(cudaLaunchKernelEx(&config, gemv<kWarps, kUnroll, kStreaming, kPdl, kTriggerFirst>, p.y, x,
                           static_cast<const __nv_bfloat16*>(p.weight), p.in, p.out),
        "launch");
}

}  // namespace

int main(int argc, char** argv) {
  int layers = 32, iterations = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--layers")) layers = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--iterations")) iterations = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  const int hidden = 4096, intermediate = 11008, vocab = 32000;
  std::vector<Product> products;
  for (int l = 0; l < layers; ++l) {
    products.push_back({hidden, 3 * hidden});
    products.push_back({hidden, hidden});
    products.push_back({hidden, 2 * intermediate});
    products.push_back({intermediate, hidden});
  }
  products.push_back({hidden, vocab});
  int64_t total = 0;
  for (const Product& p : products) total += static_cast<int64_t>(p.in) * p.out;
  __nv_bfloat16* weights = nullptr;
  Check(cudaMalloc(&weights, total * 2), "weights");
  fill<<<4096, 256>>>(weights, total, 7);
  __nv_bfloat16* x = nullptr;
  Check(cudaMalloc(&x, intermediate * 2), "x");
  fill<<<64, 256>>>(x, intermediate, 11);
  int64_t at = 0;
  int64_t outputs = 0;
  for (Product& p : products) {
    p.weight = weights + at;
    at += static_cast<int64_t>(p.in) * p.out;
    outputs += p.out;
  }
  __nv_bfloat16* ys = nullptr;
  Check(cudaMalloc(&ys, outputs * 2), "y");
  at = 0;
  for (Product& p : products) {
    p.y = ys + at;
    at += p.out;
  }
  float* sink = nullptr;
  Check(cudaMalloc(&sink, 4), "sink");
  cudaStream_t stream;
  Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  const double bytes = static_cast<double>(total) * 2;
  auto time_ms = [&](auto&& body) {
    body();
    Check(cudaStreamSynchronize(stream), "warm");
    cudaEventRecord(start, stream);
    for (int i = 0; i < iterations; ++i) body();
    cudaEventRecord(stop, stream);
    Check(cudaEventSynchronize(stop), "timed");
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    return ms / iterations;
  };
  {
    __nv_bfloat16* copy = nullptr;
    const int64_t chunk = std::min<int64_t>(total, int64_t{1} << 30);  // 2 GB
    Check(cudaMalloc(&copy, chunk * 2), "copy");
    const double ms = time_ms([&] { cudaMemcpyAsync(copy, weights, chunk * 2, cudaMemcpyDeviceToDevice, stream); });
    std::printf("device-to-device copy: %.0f GB/s (read + written)\n", 2.0 * chunk * 2 / ms / 1e6);
    cudaFree(copy);
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    const double read_ms = time_ms([&] { read_all<<<sms * 8, 512, 0, stream>>>(reinterpret_cast<const int4*>(weights), total / 8, sink); });
    std::printf("one read of the step's %.2f GB: %.3f ms, %.0f GB/s\n", bytes / 1e9, read_ms, bytes / read_ms / 1e6);
  }
  const std::vector<Variant> variants = {
      {"warps 8, loads 4, streaming", Launch<8, 4, true, false>},
      {"warps 8, loads 8, streaming", Launch<8, 8, true, false>},
      {"warps 4, loads 4, streaming", Launch<4, 4, true, false>},
      {"warps 4, loads 8, streaming", Launch<4, 8, true, false>},
      {"warps 16, loads 4, streaming", Launch<16, 4, true, false>},
      {"warps 8, loads 4, cached", Launch<8, 4, false, false>},
      {"warps 8, loads 4, streaming, PDL", Launch<8, 4, true, true>},
      {"warps 8, loads 8, streaming, PDL (shipped)", Launch<8, 8, true, true>},
      {"warps 4, loads 8, streaming, PDL", Launch<4, 8, true, true>},
      {"warps 8, loads 8, PDL, trigger first", Launch<8, 8, true, true, true>},
  };
  std::vector<__nv_bfloat16> first(outputs), got(outputs);
  for (size_t v = 0; v < variants.size(); ++v) {
    const Variant& variant = variants[v];
    auto step = [&] {
      for (const Product& p : products) variant.launch(p, x, stream);
    };
    const double stream_ms = time_ms(step);
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    Check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "capture");
    step();
    Check(cudaStreamEndCapture(stream, &graph), "end capture");
    Check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
    const double graph_ms = time_ms([&] { cudaGraphLaunch(exec, stream); });
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    Check(cudaMemcpy(got.data(), ys, outputs * 2, cudaMemcpyDeviceToHost), "read back");
    double largest = 0;
    if (v == 0) first = got;
    for (int64_t i = 0; i < outputs; ++i) {
      largest = std::max(largest, std::abs(static_cast<double>(__bfloat162float(got[i])) -
                                           static_cast<double>(__bfloat162float(first[i]))));
    }
    std::printf("%-44s stream %.3f ms (%.0f GB/s)  graph %.3f ms (%.0f GB/s)  |y - first| <= %.3g\n", variant.name,
                stream_ms, bytes / stream_ms / 1e6, graph_ms, bytes / graph_ms / 1e6, largest);
  }
  return 0;
}
