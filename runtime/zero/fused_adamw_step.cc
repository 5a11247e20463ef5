#include "runtime/zero/fused_adamw_step.h"

#include <cstring>

#include "runtime/kernel_element_type.h"
#include "runtime/torch_compat.h"

#if defined(DSLAUNCH_HAVE_CUDA_KERNELS)
#include "kernels/cuda/fused_adamw.h"
#endif

namespace dslaunch::runtime {

#if defined(DSLAUNCH_HAVE_CUDA_KERNELS)
namespace {

// The kernel's two tables in one device buffer: the tensors, then the chunks.
// Built per call from the tensors' current addresses (gradients are
// reallocated between steps); the host side is pinned, so the upload is
// asynchronous on the current stream and the caching host allocator keeps
// the buffer until the copy is done.
struct DeviceTables {
  torch::Tensor bytes;
  const kernels::AdamWTensor* tensors = nullptr;
  const kernels::AdamWChunk* chunks = nullptr;
  int chunk_count = 0;
  kernels::ElementType grad_type = kernels::ElementType::kFloat32;
  kernels::ElementType param_type = kernels::ElementType::kFloat32;
};

DeviceTables Upload(const std::vector<FusedAdamWEntry>& entries, bool need_state) {
  TORCH_CHECK(!entries.empty(), "fused AdamW: no tensors");
  std::vector<kernels::AdamWTensor> tensors;
  std::vector<int64_t> numels;
  DeviceTables tables;
  const torch::Device device = entries.front().grad.device();
  tables.grad_type = KernelElementType(entries.front().grad.scalar_type(), "fused AdamW");
  const bool with_param = entries.front().param.defined();
  if (with_param) tables.param_type = KernelElementType(entries.front().param.scalar_type(), "fused AdamW");
  for (const FusedAdamWEntry& e : entries) {
    const int64_t n = e.grad.numel();
    TORCH_CHECK(e.grad.device() == device && e.grad.is_cuda() && e.grad.is_contiguous(),
                "fused AdamW: gradients must be contiguous and on one CUDA device");
    TORCH_CHECK(KernelElementType(e.grad.scalar_type(), "fused AdamW") == tables.grad_type,
                "fused AdamW: mixed gradient dtypes");
    kernels::AdamWTensor t;
    t.grad = e.grad.data_ptr();
    t.numel = n;
    if (need_state) {
      for (const torch::Tensor* state : {&e.master, &e.exp_avg, &e.exp_avg_sq}) {
        TORCH_CHECK(state->scalar_type() == torch::kFloat && state->is_contiguous() && state->numel() == n &&
                        state->device() == device,
                    "fused AdamW: master weights and moments must be contiguous fp32 of the gradient's size "
                    "on its device");
      }
      t.master = e.master.data_ptr<float>();
      t.exp_avg = e.exp_avg.data_ptr<float>();
      t.exp_avg_sq = e.exp_avg_sq.data_ptr<float>();
      TORCH_CHECK(e.param.defined() == with_param, "fused AdamW: every entry or none has a parameter copy");
      if (with_param) {
        TORCH_CHECK(e.param.is_contiguous() && e.param.numel() == n && e.param.device() == device &&
                        KernelElementType(e.param.scalar_type(), "fused AdamW") == tables.param_type,
                    "fused AdamW: parameter copies must be contiguous, of one dtype, the gradient's size");
        t.param = e.param.data_ptr();
      }
    }
    tensors.push_back(t);
    numels.push_back(n);
  }
  const std::vector<kernels::AdamWChunk> chunks = kernels::PlanAdamWChunks(numels);
  const size_t tensor_bytes = tensors.size() * sizeof(kernels::AdamWTensor);
  const size_t total = tensor_bytes + chunks.size() * sizeof(kernels::AdamWChunk);
  torch::Tensor host =
      torch::empty({static_cast<int64_t>(total)}, torch::TensorOptions().dtype(torch::kByte).pinned_memory(true));
  std::memcpy(host.data_ptr(), tensors.data(), tensor_bytes);
  std::memcpy(static_cast<char*>(host.data_ptr()) + tensor_bytes, chunks.data(), total - tensor_bytes);
  tables.bytes = host.to(device, /*non_blocking=*/true);
  auto* base = static_cast<char*>(tables.bytes.data_ptr());
  tables.tensors = reinterpret_cast<const kernels::AdamWTensor*>(base);
  tables.chunks = reinterpret_cast<const kernels::AdamWChunk*>(base + tensor_bytes);
  tables.chunk_count = static_cast<int>(chunks.size());
  return tables;
}

}  // namespace

bool FusedAdamWAvailable() { return true; }

void FusedAdamWStep(const std::vector<FusedAdamWEntry>& entries, const kernels::AdamWHyperparameters& h) {
  TORCH_CHECK(!entries.empty(), "fused AdamW: no tensors");
  compat::CudaDeviceGuard device(entries.front().grad.device());
  const DeviceTables tables = Upload(entries, /*need_state=*/true);
  const cudaError_t launched = kernels::fused_adamw(tables.tensors, tables.chunks, tables.chunk_count, tables.grad_type,
                                                    tables.param_type, h, compat::CurrentCudaStream());
  TORCH_CHECK(launched == cudaSuccess, "fused AdamW: ", cudaGetErrorString(launched));
}

torch::Tensor FusedGradSumSquares(const std::vector<FusedAdamWEntry>& entries) {
  TORCH_CHECK(!entries.empty(), "fused gradient norm: no tensors");
  compat::CudaDeviceGuard device(entries.front().grad.device());
  const DeviceTables tables = Upload(entries, /*need_state=*/false);
  const auto options = entries.front().grad.options();
  torch::Tensor partials = torch::empty({tables.chunk_count}, options.dtype(torch::kFloat));
  torch::Tensor out = torch::empty({1}, options.dtype(torch::kDouble));
  const cudaError_t launched =
      kernels::adamw_grad_sum_squares(tables.tensors, tables.chunks, tables.chunk_count, tables.grad_type,
                                      partials.data_ptr<float>(), out.data_ptr<double>(), compat::CurrentCudaStream());
  TORCH_CHECK(launched == cudaSuccess, "fused gradient norm: ", cudaGetErrorString(launched));
  return out;
}
#else
bool FusedAdamWAvailable() { return false; }

void FusedAdamWStep(const std::vector<FusedAdamWEntry>&, const kernels::AdamWHyperparameters&) {
  TORCH_CHECK(false, "fused AdamW: this build has no CUDA kernels");
}

torch::Tensor FusedGradSumSquares(const std::vector<FusedAdamWEntry>&) {
  TORCH_CHECK(false, "fused gradient norm: this build has no CUDA kernels");
}
#endif

}  // namespace dslaunch::runtime
