// Achieved memory bandwidth of each fused kernel at GPT shapes, against the
// device's own device-to-device copy measured in the same run (the H200's is
// ~4.3 TB/s counted as bytes read plus bytes written). Every kernel here is
// memory-bound, so bandwidth is the figure of merit: bytes are the minimum
// each kernel must move (inputs read once, outputs written once).
//
//   cuda_kernel_bench [--rows 16384] [--width 768] [--vocab 50304] [--params 124000000]
//
// Plain CUDA (no LibTorch): inputs are filled with a deterministic pattern.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cuda/bias_gelu.h"
#include "kernels/cuda/fused_adamw.h"
#include "kernels/cuda/layer_norm.h"
#include "kernels/cuda/softmax_cross_entropy.h"

namespace {

using dslaunch::kernels::ElementType;

void Check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    std::fprintf(stderr, "cuda_kernel_bench: %s: %s\n", what, cudaGetErrorString(status));
    std::exit(1);
  }
}

__global__ void FillKernel(__nv_bfloat16* p, int64_t n, float scale) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    p[i] = __float2bfloat16(scale * (static_cast<float>((i * 2654435761u) % 2001) / 1000.f - 1.f));
  }
}

__global__ void FillFloatKernel(float* p, int64_t n, float value) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    p[i] = value;
}

__global__ void FillTargetsKernel(int64_t* p, int64_t n, int64_t vocab) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    p[i] = (i * 7919) % vocab;
  }
}

template <typename T>
T* Alloc(int64_t n) {
  void* p = nullptr;
  Check(cudaMalloc(&p, static_cast<size_t>(n) * sizeof(T)), "cudaMalloc");
  return static_cast<T*>(p);
}

__nv_bfloat16* Bf16(int64_t n, float scale = 1.f) {
  auto* p = Alloc<__nv_bfloat16>(n);
  FillKernel<<<1024, 256>>>(p, n, scale);
  return p;
}

float* Floats(int64_t n, float value) {
  auto* p = Alloc<float>(n);
  FillFloatKernel<<<1024, 256>>>(p, n, value);
  return p;
}

// Median-free simple timing: warm up, then the mean of `iterations` runs.
double Milliseconds(const std::function<cudaError_t()>& run, int iterations = 20) {
  for (int i = 0; i < 3; ++i) Check(run(), "warm-up launch");
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start);
  for (int i = 0; i < iterations; ++i) Check(run(), "launch");
  cudaEventRecord(stop);
  Check(cudaEventSynchronize(stop), "synchronize");
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / iterations;
}

int64_t Flag(int argc, char** argv, const char* name, int64_t fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return std::atoll(argv[i + 1]);
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t rows = Flag(argc, argv, "--rows", 16384);  // batch 16 x sequence 1024
  const int64_t width = Flag(argc, argv, "--width", 768);
  const int64_t vocab = Flag(argc, argv, "--vocab", 50304);
  const int64_t params = Flag(argc, argv, "--params", 124000000);
  cudaDeviceProp prop;
  Check(cudaGetDeviceProperties(&prop, 0), "device properties");
  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);

  // The reference: a 1 GiB device-to-device copy.
  const int64_t copy_bytes = int64_t{1} << 30;
  void *from = Alloc<char>(copy_bytes), *to = Alloc<char>(copy_bytes);
  const double copy_ms = Milliseconds([&] { return cudaMemcpyAsync(to, from, copy_bytes, cudaMemcpyDeviceToDevice); });
  const double copy_gbs = 2.0 * copy_bytes / copy_ms / 1e6;
  std::printf("%-34s %10s %12s %10s\n", "kernel (bf16)", "time ms", "GB/s", "of copy");
  std::printf("%-34s %10.3f %12.0f %9.0f%%\n", "device copy 1 GiB (reference)", copy_ms, copy_gbs, 100.0);
  cudaFree(from);
  cudaFree(to);

  auto report = [&](const std::string& name, double ms, double bytes) {
    const double gbs = bytes / ms / 1e6;
    std::printf("%-34s %10.3f %12.0f %9.0f%%\n", name.c_str(), ms, gbs, 100.0 * gbs / copy_gbs);
  };
  const ElementType bf16 = ElementType::kBFloat16;

  {  // LayerNorm [rows, width]
    auto *x = Bf16(rows * width, 3.f), *y = Bf16(rows * width), *dy = Bf16(rows * width), *dx = Bf16(rows * width);
    auto *w = Bf16(width), *b = Bf16(width), *dw = Bf16(width), *db = Bf16(width);
    float *mean = Floats(rows, 0.f), *rstd = Floats(rows, 1.f);
    float* scratch = Floats(dslaunch::kernels::layer_norm_backward_scratch(rows, width), 0.f);
    const double io = 2.0 * rows * width;
    const std::string shape = "[" + std::to_string(rows) + "," + std::to_string(width) + "]";
    report("layer_norm_forward " + shape, Milliseconds([&] {
             return dslaunch::kernels::layer_norm_forward(bf16, y, mean, rstd, x, w, b, rows, width, 1e-5f, nullptr);
           }),
           2 * io + 8.0 * rows);
    report("layer_norm_backward " + shape, Milliseconds([&] {
             return dslaunch::kernels::layer_norm_backward(bf16, dx, dw, db, dy, x, w, mean, rstd, rows, width, scratch,
                                                           nullptr);
           }),
           3 * io + 8.0 * rows);
  }
  {  // bias + GELU on the MLP's [rows, 4·width]
    const int64_t n = 4 * width;
    auto *x = Bf16(rows * n), *y = Bf16(rows * n), *dy = Bf16(rows * n), *dx = Bf16(rows * n);
    auto *b = Bf16(n), *db = Bf16(n);
    float* scratch = Floats(dslaunch::kernels::bias_gelu_backward_scratch(rows, n), 0.f);
    const double io = 2.0 * rows * n;
    const std::string shape = "[" + std::to_string(rows) + "," + std::to_string(n) + "]";
    report("bias_gelu_forward " + shape,
           Milliseconds([&] { return dslaunch::kernels::bias_gelu_forward(bf16, y, x, b, rows, n, nullptr); }), 2 * io);
    report("bias_gelu_backward " + shape, Milliseconds([&] {
             return dslaunch::kernels::bias_gelu_backward(bf16, dx, db, dy, x, b, rows, n, scratch, nullptr);
           }),
           3 * io);
  }
  {  // softmax cross-entropy over [rows, vocab]
    auto *logits = Bf16(rows * vocab, 4.f), *dlogits = Bf16(rows * vocab);
    float *loss = Floats(rows, 0.f), *lse = Floats(rows, 0.f), *dloss = Floats(rows, 1.f / rows);
    auto* targets = Alloc<int64_t>(rows);
    FillTargetsKernel<<<64, 256>>>(targets, rows, vocab);
    const double io = 2.0 * rows * vocab;
    const std::string shape = "[" + std::to_string(rows) + "," + std::to_string(vocab) + "]";
    report("softmax_xent_forward " + shape, Milliseconds([&] {
             return dslaunch::kernels::softmax_cross_entropy_forward(bf16, loss, lse, logits, targets, rows, vocab,
                                                                     nullptr);
           }),
           io);
    report("softmax_xent_backward " + shape, Milliseconds([&] {
             return dslaunch::kernels::softmax_cross_entropy_backward(bf16, dlogits, logits, lse, targets, dloss, rows,
                                                                      vocab, nullptr);
           }),
           2 * io);
    cudaFree(logits);
    cudaFree(dlogits);
  }
  {  // fused AdamW over `params` elements in 148 tensors (GPT-124M's count)
    const int tensors = 148;
    std::vector<int64_t> numels(tensors, params / tensors);
    numels.back() += params % tensors;
    float *master = Floats(params, 0.5f), *m = Floats(params, 0.f), *v = Floats(params, 0.f);
    auto *grad = Bf16(params, 1e-2f), *param = Bf16(params);
    std::vector<dslaunch::kernels::AdamWTensor> table;
    int64_t offset = 0;
    for (int64_t n : numels) {
      table.push_back({master + offset, grad + offset, m + offset, v + offset, param + offset, n});
      offset += n;
    }
    const auto chunks = dslaunch::kernels::PlanAdamWChunks(numels);
    auto* device_table = Alloc<dslaunch::kernels::AdamWTensor>(tensors);
    auto* device_chunks = Alloc<dslaunch::kernels::AdamWChunk>(static_cast<int64_t>(chunks.size()));
    Check(cudaMemcpy(device_table, table.data(), table.size() * sizeof(table[0]), cudaMemcpyHostToDevice), "table");
    Check(cudaMemcpy(device_chunks, chunks.data(), chunks.size() * sizeof(chunks[0]), cudaMemcpyHostToDevice),
          "chunks");
    dslaunch::kernels::AdamWHyperparameters h;
    h.weight_decay = 0.1;
    int64_t step = 0;
    report("fused_adamw " + std::to_string(params / 1000000) + "M in 148 tensors", Milliseconds([&] {
             h.step = ++step;
             return dslaunch::kernels::fused_adamw(device_table, device_chunks, static_cast<int>(chunks.size()), bf16,
                                                   bf16, h, nullptr);
           }),
           28.0 * params);  // read master, m, v (fp32), grad (bf16); write master, m, v, param
    float* partials = Floats(static_cast<int64_t>(chunks.size()), 0.f);
    double* norm = Alloc<double>(1);
    report("grad_sum_squares (bf16)", Milliseconds([&] {
             return dslaunch::kernels::adamw_grad_sum_squares(
                 device_table, device_chunks, static_cast<int>(chunks.size()), bf16, partials, norm, nullptr);
           }),
           2.0 * params);
  }
  Check(cudaDeviceSynchronize(), "final synchronize");
  return 0;
}
