#include "runtime/generate/fused_decode_attention.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "runtime/torch_compat.h"

#if defined(DSLAUNCH_HAVE_CUDA_KERNELS)
#include "kernels/cuda/paged_decode_attention.h"
#include "runtime/kernel_element_type.h"
#endif

namespace dslaunch::runtime {

absl::Status FusedDecodeAttentionProblem(const torch::Device& device, int64_t head_dim) {
  if (!device.is_cuda()) {
    return absl::InvalidArgumentError(
        absl::StrCat("fused decode attention runs on a CUDA device, not ", device.str(), " (fused_kernels)"));
  }
#if defined(DSLAUNCH_HAVE_CUDA_KERNELS)
  if (kernels::paged_decode_elements_per_lane(head_dim) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "fused decode attention takes a head_dim up to ", kernels::kPagedDecodeMaxHeadDim,
        " that a warp's lanes split evenly (<= 32, an even number <= 64, a multiple of 4 <= 128 or of 8 <= 256); ",
        "this model's is ", head_dim, " (generate without fused_kernels)"));
  }
  return absl::OkStatus();
#else
  (void)head_dim;
  return absl::FailedPreconditionError(
      "fused decode attention: this build has no CUDA kernels (nvcc was not found at configure time)");
#endif
}

torch::Tensor FusedDecodeAttention(const torch::Tensor& q, const torch::Tensor& new_keys,
                                   const torch::Tensor& new_values, torch::Tensor& key_pool,
                                   torch::Tensor& value_pool, const torch::Tensor& written,
                                   const torch::Tensor& visible, const torch::Tensor& ends) {
  TORCH_CHECK(q.dim() == 3 && new_keys.dim() == 3 && new_values.dim() == 3 && key_pool.dim() == 3 &&
                  value_pool.dim() == 3,
              "fused decode attention: q, the new keys and values and the pools are 3-D, got ", q.sizes(), ", ",
              new_keys.sizes(), ", ", new_values.sizes(), ", ", key_pool.sizes(), ", ", value_pool.sizes());
  const int64_t n = q.size(0), heads = q.size(1), head_dim = q.size(2), kv_heads = key_pool.size(1);
  TORCH_CHECK(new_keys.sizes() == torch::IntArrayRef({n, kv_heads, head_dim}) &&
                  new_values.sizes() == new_keys.sizes() && value_pool.sizes() == key_pool.sizes() &&
                  key_pool.size(2) == head_dim,
              "fused decode attention: new keys/values ", new_keys.sizes(), "/", new_values.sizes(), " and pools ",
              key_pool.sizes(), "/", value_pool.sizes(), " do not fit q ", q.sizes());
  TORCH_CHECK(kv_heads >= 1 && heads % kv_heads == 0, "fused decode attention: ", heads,
              " query heads do not share ", kv_heads, " key/value heads evenly");
  TORCH_CHECK(visible.dim() == 2 && visible.size(0) == n && written.numel() == n && ends.numel() == n &&
                  visible.scalar_type() == torch::kLong && written.scalar_type() == torch::kLong &&
                  ends.scalar_type() == torch::kLong,
              "fused decode attention: written [", n, "], visible [", n, ", longest] and ends [", n,
              "] are int64, got ", written.sizes(), " ", written.scalar_type(), ", ", visible.sizes(), " ",
              visible.scalar_type(), ", ", ends.sizes(), " ", ends.scalar_type());
  for (const torch::Tensor* t : std::initializer_list<const torch::Tensor*>{&new_keys, &new_values, &key_pool, &value_pool}) {
    TORCH_CHECK(t->scalar_type() == q.scalar_type(), "fused decode attention: q is ", q.scalar_type(),
                " but the keys, values or pools are ", t->scalar_type());
  }
  for (const torch::Tensor* t : std::initializer_list<const torch::Tensor*>{&new_keys, &new_values, &key_pool, &value_pool, &written, &visible, &ends}) {
    TORCH_CHECK(t->device() == q.device(), "fused decode attention: every tensor on q's device (", q.device(),
                "), one is on ", t->device());
  }
  if (absl::Status problem = FusedDecodeAttentionProblem(q.device(), head_dim); !problem.ok()) {
    TORCH_CHECK(false, problem.message());
  }
  TORCH_CHECK(key_pool.is_contiguous() && value_pool.is_contiguous(), "fused decode attention: the pools are contiguous");
#if defined(DSLAUNCH_HAVE_CUDA_KERNELS)
  compat::CudaDeviceGuard device(q.device());
  const int64_t per_lane = kernels::paged_decode_elements_per_lane(head_dim);
  // The head dimension contiguous and every stride a whole number of lane reads.
  auto readable = [per_lane](const torch::Tensor& t) {
    return t.stride(2) == 1 && t.stride(0) % per_lane == 0 && t.stride(1) % per_lane == 0 ? t : t.contiguous();
  };
  const torch::Tensor queries = readable(q), keys = readable(new_keys), values = readable(new_values);
  const torch::Tensor tables = visible.contiguous(), slots = written.contiguous(), lengths = ends.contiguous();
  torch::Tensor out = torch::empty({n, heads, head_dim}, q.options());
  kernels::PagedDecodeShape shape;
  shape.sequences = n;
  shape.heads = heads;
  shape.kv_heads = kv_heads;
  shape.head_dim = head_dim;
  shape.longest = tables.size(1);
  for (int d = 0; d < 2; ++d) {
    shape.q_strides[d] = queries.stride(d);
    shape.out_strides[d] = out.stride(d);
    shape.new_key_strides[d] = keys.stride(d);
    shape.new_value_strides[d] = values.stride(d);
  }
  shape.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
  const cudaError_t launched = kernels::paged_decode_attention(
      KernelElementType(q.scalar_type(), "fused decode attention"), shape, out.data_ptr(), queries.data_ptr(),
      keys.data_ptr(), values.data_ptr(), key_pool.data_ptr(), value_pool.data_ptr(), slots.data_ptr<int64_t>(),
      tables.data_ptr<int64_t>(), lengths.data_ptr<int64_t>(), compat::CurrentCudaStream());
  TORCH_CHECK(launched == cudaSuccess, "fused decode attention: ", cudaGetErrorString(launched));
  return out;
#else
  return {};
#endif
}

}  // namespace dslaunch::runtime
