#include "runtime/generate/greedy_choice.h"

#include "runtime/torch_compat.h"

#if defined(DSLAUNCH_HAVE_CUDA_KERNELS)
#include "kernels/cuda/greedy_choice.h"
#include "runtime/kernel_element_type.h"
#endif

namespace dslaunch::runtime {
namespace {

void CheckShapes(const torch::Tensor& logits, const torch::Tensor& rows) {
  TORCH_CHECK(logits.dim() == 2 && logits.size(1) > 0, "greedy choice: logits are [rows, vocab], got ",
              logits.sizes());
  TORCH_CHECK(torch::isFloatingType(logits.scalar_type()), "greedy choice: logits are floating point, not ",
              logits.scalar_type());
  if (rows.defined()) {
    TORCH_CHECK(rows.dim() == 1 && rows.scalar_type() == torch::kLong && rows.device().is_cpu(),
                "greedy choice: rows are int64 [n] on the host, got ", rows.sizes(), " ", rows.scalar_type(), " on ",
                rows.device());
    const torch::Tensor host_rows = rows.contiguous();
    const int64_t* row = host_rows.data_ptr<int64_t>();
    for (int64_t i = 0; i < host_rows.numel(); ++i) {
      TORCH_CHECK(row[i] >= 0 && row[i] < logits.size(0), "greedy choice: row ", row[i], " of logits with ",
                  logits.size(0), " rows");
    }
  }
}

}  // namespace

torch::Tensor ChooseGreedilyWithLibTorch(const torch::Tensor& logits, const torch::Tensor& rows) {
  CheckShapes(logits, rows);
  const torch::Tensor picked =
      (rows.defined() ? logits.index_select(0, rows.to(logits.device())) : logits).to(torch::kDouble);
  const torch::Tensor ids = picked.argmax(-1);
  const torch::Tensor logprobs = torch::log_softmax(picked, -1).gather(1, ids.unsqueeze(1)).squeeze(1);
  return torch::stack({ids.to(torch::kDouble), logprobs});
}

torch::Tensor ChooseGreedily(const torch::Tensor& logits, const torch::Tensor& rows) {
#if defined(DSLAUNCH_HAVE_CUDA_KERNELS)
  const torch::ScalarType type = logits.scalar_type();
  if (logits.is_cuda() &&
      (type == torch::kFloat || type == torch::kBFloat16 || type == torch::kHalf)) {
    CheckShapes(logits, rows);
    compat::CudaDeviceGuard device(logits.device());
    const torch::Tensor rows_here = rows.defined() ? rows.to(logits.device()).contiguous() : torch::Tensor();
    // The kernel reads rows a stride apart, each contiguous and apart from
    // the next (a row expanded or transposed into place is copied first).
    const torch::Tensor source =
        logits.stride(1) == 1 && (logits.size(0) == 1 || logits.stride(0) >= logits.size(1)) ? logits
                                                                                             : logits.contiguous();
    const int64_t n = rows.defined() ? rows.size(0) : logits.size(0);
    torch::Tensor chosen = torch::empty({2, n}, logits.options().dtype(torch::kDouble));
    const cudaError_t launched = kernels::greedy_choice(
        KernelElementType(type, "greedy choice"), chosen.data_ptr<double>(), source.data_ptr(),
        rows.defined() ? rows_here.data_ptr<int64_t>() : nullptr, n, source.size(1),
        source.size(0) == 1 ? source.size(1) : source.stride(0),
        compat::CurrentCudaStream());
    TORCH_CHECK(launched == cudaSuccess, "greedy choice: ", cudaGetErrorString(launched));
    return chosen;
  }
#endif
  return ChooseGreedilyWithLibTorch(logits, rows);
}

}  // namespace dslaunch::runtime
