// Note [Two LibTorch worlds]
// The same sources build against Debian's LibTorch 1.13 (CPU, CI) and a GPU
// host's LibTorch 2.x with CUDA. Every difference between them lives here,
// behind small functions; nothing else in the tree tests a version macro.
#pragma once

#include <torch/torch.h>
#include <torch/version.h>
#if defined(DSLAUNCH_TORCH_HAS_CUDA)
#include <ATen/cuda/CUDAContext.h>
#endif

namespace dslaunch::runtime::compat {

inline constexpr bool kHasFusedAttention = TORCH_VERSION_MAJOR >= 2;

// Grouped-query attention: key/value head j serves query heads j·g .. j·g + g - 1
// (g = query heads / key/value heads); this repeats each key/value head g times.
inline torch::Tensor RepeatKeyValueHeads(const torch::Tensor& t, int64_t query_heads) {
  const int64_t heads = t.size(-3);
  return heads == query_heads ? t : t.repeat_interleave(query_heads / heads, /*dim=*/-3);
}

// Whether LibTorch's fused attention reads grouped key/value heads in place
// (SDPA's enable_gqa, 2.5 and later): only its flash kernel does (CUDA, 16-bit
// floats, head_dim up to 256); every other backend would repeat the heads
// itself, no faster than RepeatKeyValueHeads.
inline bool AttendsGroupedHeadsInPlace(const torch::Tensor& q) {
#if (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)) && defined(DSLAUNCH_TORCH_HAS_CUDA)
  // Flash's own conditions (else SDPA would take its math path, O(T²) memory):
  // Ampere or later, 16-bit floats, head_dim a multiple of 8 up to 256.
  return q.is_cuda() && (q.scalar_type() == torch::kBFloat16 || q.scalar_type() == torch::kHalf) &&
         q.size(-1) <= 256 && q.size(-1) % 8 == 0 && at::cuda::getDeviceProperties(q.device().index())->major >= 8;
#else
  (void)q;
  return false;
#endif
}

// Causal self-attention over [batch, heads, time, head_dim] tensors; k and v
// may have fewer heads than q, a divisor of its count (grouped-query
// attention). LibTorch 2.x: the fused scaled-dot-product kernel (flash /
// memory-efficient on GPU; flash reads grouped heads without copying them).
// 1.13: the same arithmetic spelled out (softmax of masked scores).
inline torch::Tensor CausalAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  TORCH_CHECK(k.size(-3) == v.size(-3) && k.size(-3) > 0 && q.size(-3) % k.size(-3) == 0, "attention: ",
              q.size(-3), " query heads cannot share ", k.size(-3), " key/value heads");
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
  if (k.size(-3) != q.size(-3) && AttendsGroupedHeadsInPlace(q)) {
    return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, /*is_causal=*/true,
                                            /*scale=*/std::nullopt, /*enable_gqa=*/true);
  }
#endif
  const torch::Tensor keys = RepeatKeyValueHeads(k, q.size(-3)), values = RepeatKeyValueHeads(v, q.size(-3));
#if TORCH_VERSION_MAJOR >= 2
  return at::scaled_dot_product_attention(q, keys, values, /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                          /*is_causal=*/true);
#else
  const int64_t time = q.size(-2);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  auto scores = torch::matmul(q, keys.transpose(-2, -1)) * scale;
  auto mask = torch::ones({time, time}, torch::TensorOptions().dtype(torch::kBool).device(q.device()))
                  .triu(1);
  scores = scores.masked_fill(mask, -std::numeric_limits<float>::infinity());
  return torch::matmul(torch::softmax(scores.to(torch::kFloat), -1).to(q.scalar_type()), values);
#endif
}

// Attention over [batch, heads, time, head_dim] tensors where `allowed`
// ([batch or 1, 1, time, time] bool) says which keys each query may see (packed
// records: causal within each record). Every row allows at least one key.
// k and v may have fewer heads than q, as for CausalAttention (repeated here:
// no fused kernel takes both a mask and grouped heads).
inline torch::Tensor MaskedAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                     const torch::Tensor& allowed) {
  const torch::Tensor keys = RepeatKeyValueHeads(k, q.size(-3)), values = RepeatKeyValueHeads(v, q.size(-3));
#if TORCH_VERSION_MAJOR >= 2
  return at::scaled_dot_product_attention(q, keys, values, /*attn_mask=*/allowed, /*dropout_p=*/0.0,
                                          /*is_causal=*/false);
#else
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  auto scores = torch::matmul(q, keys.transpose(-2, -1)) * scale;
  scores = scores.masked_fill(allowed.logical_not(), -std::numeric_limits<float>::infinity());
  return torch::matmul(torch::softmax(scores.to(torch::kFloat), -1).to(q.scalar_type()), values);
#endif
}

}  // namespace dslaunch::runtime::compat

// Note [CUDA in the LibTorch build]
// Whether LibTorch itself has CUDA is a build variant (the CPU build links
// Debian's CPU-only LibTorch even on a machine with the CUDA toolkit). The
// NCCL backend and the fused kernels enqueue on LibTorch's current stream when
// they can see it, and on the default stream otherwise (CPU builds never hold CUDA tensors anyway).
#if defined(DSLAUNCH_TORCH_HAS_CUDA)
#include <ATen/cuda/CUDAContext.h>
#endif
#if defined(DSLAUNCH_HAVE_NCCL) || defined(DSLAUNCH_HAVE_CUDA_KERNELS)
#include <cuda_runtime_api.h>
namespace dslaunch::runtime::compat {
inline cudaStream_t CurrentCudaStream() {
#if defined(DSLAUNCH_TORCH_HAS_CUDA)
  return at::cuda::getCurrentCUDAStream().stream();
#else
  return nullptr;
#endif
}
}  // namespace dslaunch::runtime::compat
#endif

// c10d::Store gained a pure virtual clone() in LibTorch 2.x. Stores derive
// from StoreBase and implement CloneStore(); 1.13 never calls it.
#include <torch/csrc/distributed/c10d/Store.hpp>
namespace dslaunch::runtime::compat {
class StoreBase : public c10d::Store {
 public:
  virtual c10::intrusive_ptr<c10d::Store> CloneStore() = 0;
#if TORCH_VERSION_MAJOR >= 2
  c10::intrusive_ptr<c10d::Store> clone() override { return CloneStore(); }
#endif
};
}  // namespace dslaunch::runtime::compat

// Caps what LibTorch's CUDA caching allocator may hold on `device` (a
// benchmark stands in for a smaller GPU this way: a model that does not fit
// fails with out-of-memory instead of using the whole card).
#include "absl/status/status.h"
#if defined(DSLAUNCH_TORCH_HAS_CUDA)
#include <c10/cuda/CUDACachingAllocator.h>
#endif
namespace dslaunch::runtime::compat {
inline absl::Status LimitCudaMemory(int device, double bytes) {
#if defined(DSLAUNCH_TORCH_HAS_CUDA)
  const double total = static_cast<double>(at::cuda::getDeviceProperties(device)->totalGlobalMem);
  if (bytes <= 0 || bytes > total) {
    return absl::InvalidArgumentError("the CUDA memory limit must be between 0 and the device's memory");
  }
  try {
    // The allocator of a device exists once something was allocated on it.
    torch::empty({1}, torch::TensorOptions().device(torch::kCUDA, device));
    c10::cuda::CUDACachingAllocator::setMemoryFraction(bytes / total, device);
  } catch (const c10::Error& e) {
    return absl::InternalError(e.what_without_backtrace());
  }
  return absl::OkStatus();
#else
  (void)device;
  (void)bytes;
  return absl::FailedPreconditionError("a CUDA memory limit needs a LibTorch build with CUDA");
#endif
}
}  // namespace dslaunch::runtime::compat

namespace dslaunch::runtime::compat {
// The name CUDA reports for `device` ("NVIDIA H200"); empty without CUDA.
inline std::string CudaDeviceName(int device) {
#if defined(DSLAUNCH_TORCH_HAS_CUDA)
  return at::cuda::getDeviceProperties(device)->name;
#else
  (void)device;
  return "";
#endif
}

// The most bytes LibTorch's CUDA allocator has held in tensors on `device`
// (torch.cuda.max_memory_allocated); 0 without CUDA.
inline int64_t CudaPeakAllocatedBytes(int device) {
#if defined(DSLAUNCH_TORCH_HAS_CUDA)
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device);
  return stats.allocated_bytes[0].peak;  // index 0: StatType::AGGREGATE
#else
  (void)device;
  return 0;
#endif
}
}  // namespace dslaunch::runtime::compat

// Waits for every kernel queued on `device` (a no-op for the CPU).
#if defined(DSLAUNCH_TORCH_HAS_CUDA)
#include <c10/cuda/CUDAFunctions.h>
#endif
namespace dslaunch::runtime::compat {
inline void SynchronizeDevice(const torch::Device& device) {
#if defined(DSLAUNCH_TORCH_HAS_CUDA)
  if (device.is_cuda()) c10::cuda::device_synchronize();
#else
  (void)device;
#endif
}
}  // namespace dslaunch::runtime::compat

// Marks what a profiler started with --profile-from-start off (Nsight
// Compute) looks at: the CUDA work between the two calls. Nothing on the CPU.
#if defined(DSLAUNCH_TORCH_HAS_CUDA)
#include <cuda_profiler_api.h>
#endif
namespace dslaunch::runtime::compat {
inline void CudaProfilerStart() {
#if defined(DSLAUNCH_TORCH_HAS_CUDA)
  (void)cudaProfilerStart();
#endif
}
inline void CudaProfilerStop() {
#if defined(DSLAUNCH_TORCH_HAS_CUDA)
  (void)cudaProfilerStop();
#endif
}
}  // namespace dslaunch::runtime::compat

// The CUDA device kernels and NCCL use when they are not told one is the
// thread's current device. A rank makes its own GPU current once at start-up
// (SetCurrentCudaDevice); code that launches on a tensor's device holds a
// CudaDeviceGuard for it. Both do nothing for CPU devices or CPU builds.
#if defined(DSLAUNCH_TORCH_HAS_CUDA)
#include <c10/cuda/CUDAGuard.h>
#endif
namespace dslaunch::runtime::compat {
inline void SetCurrentCudaDevice(const torch::Device& device) {
#if defined(DSLAUNCH_TORCH_HAS_CUDA)
  if (device.is_cuda()) c10::cuda::set_device(device.index());
#else
  (void)device;
#endif
}

class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(const torch::Device& device) {
#if defined(DSLAUNCH_TORCH_HAS_CUDA)
    if (device.is_cuda()) guard_.set_device(device);
#else
    (void)device;
#endif
  }

 private:
#if defined(DSLAUNCH_TORCH_HAS_CUDA)
  c10::cuda::OptionalCUDAGuard guard_;
#endif
};
}  // namespace dslaunch::runtime::compat

// Note [Comm stream]
// Collectives that should overlap computation (ZeRO-3 gathers and
// reduce-scatters, stage-2 overlap_comm) run on a CommWorker thread, and on
// a GPU that thread must also have a stream of its own: work on one stream
// runs in order, so collectives queued behind backward's kernels on the
// compute stream would wait for them whatever thread queued them. The two
// streams meet at StreamPoints: a task's side-stream work waits for the
// compute stream as it was when the task was submitted, and whoever uses the
// result makes its own stream wait for the point the task ended at. Memory
// the compute stream allocated and the side stream still reads is kept from
// reuse until that read is done (KeepUntilCurrentStreamDone). Everything
// here does nothing for the CPU.
#if defined(DSLAUNCH_TORCH_HAS_CUDA)
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#endif
#include <memory>
#include <optional>
namespace dslaunch::runtime::compat {
class StreamPoint {
 public:
  StreamPoint() = default;
  // The work queued so far on this thread's current stream of `device`.
  static StreamPoint OnCurrentStream(const torch::Device& device) {
    StreamPoint point;
#if defined(DSLAUNCH_TORCH_HAS_CUDA)
    if (device.is_cuda()) {
      point.event_ = std::make_shared<at::cuda::CUDAEvent>();
      point.event_->record(c10::cuda::getCurrentCUDAStream(device.index()));
      point.device_ = device.index();
    }
#else
    (void)device;
#endif
    return point;
  }
  // Work queued after this on this thread's current stream (of the point's
  // device) starts after the point; the host does not wait.
  void BlockCurrentStream() const {
#if defined(DSLAUNCH_TORCH_HAS_CUDA)
    if (event_) event_->block(c10::cuda::getCurrentCUDAStream(device_));
#endif
  }
  // The calling thread waits until the work before the point is done.
  void WaitOnHost() const {
#if defined(DSLAUNCH_TORCH_HAS_CUDA)
    if (event_) event_->synchronize();
#endif
  }

 private:
#if defined(DSLAUNCH_TORCH_HAS_CUDA)
  std::shared_ptr<at::cuda::CUDAEvent> event_;
  c10::DeviceIndex device_ = 0;
#endif
};

// Makes `device` this thread's device and a stream of LibTorch's
// high-priority pool its current stream there (a CommWorker's thread, once).
inline void UseSideStreamOnThisThread(const torch::Device& device) {
#if defined(DSLAUNCH_TORCH_HAS_CUDA)
  if (!device.is_cuda()) return;
  c10::cuda::set_device(device.index());
  c10::cuda::setCurrentCUDAStream(c10::cuda::getStreamFromPool(/*isHighPriority=*/true, device.index()));
#else
  (void)device;
#endif
}

// A stream of LibTorch's pool on `device` for copies that overlap the
// compute stream (Note [Streamed layer weights]); Run queues work on it
// (StreamPoints order it against other streams). On the CPU, Run runs the
// work as it comes.
class SideStream {
 public:
  // `high_priority`: from the pool's high-priority streams (collectives that
  // should start before queued compute kernels take every SM).
  explicit SideStream(const torch::Device& device, bool high_priority = false) {
#if defined(DSLAUNCH_TORCH_HAS_CUDA)
    if (device.is_cuda()) stream_.emplace(c10::cuda::getStreamFromPool(high_priority, device.index()));
#else
    (void)device, (void)high_priority;
#endif
  }
  template <typename Work>
  void Run(Work&& work) const {
#if defined(DSLAUNCH_TORCH_HAS_CUDA)
    if (stream_) {
      c10::cuda::CUDAStreamGuard guard(*stream_);
      work();
      return;
    }
#endif
    work();
  }

 private:
#if defined(DSLAUNCH_TORCH_HAS_CUDA)
  std::optional<c10::cuda::CUDAStream> stream_;
#endif
};

// The caching allocator hands `tensor`'s memory out again only after the work
// queued so far on this thread's current stream is done (record_stream).
inline void KeepUntilCurrentStreamDone(const torch::Tensor& tensor) {
#if defined(DSLAUNCH_TORCH_HAS_CUDA)
  if (tensor.defined() && tensor.is_cuda()) tensor.record_stream(c10::cuda::getCurrentCUDAStream(tensor.device().index()));
#else
  (void)tensor;
#endif
}
}  // namespace dslaunch::runtime::compat

// A CUDA graph of what a function enqueues on the current device (Note
// [Decode graphs]). Only a LibTorch build with CUDA has them; elsewhere
// Capture says so. Graphs made with the same pool share its memory: replay
// them one at a time, on the thread's current stream.
#if defined(DSLAUNCH_TORCH_HAS_CUDA)
#include <ATen/cuda/CUDAGraph.h>
#endif
#include <functional>
#include <utility>
#include "absl/status/statusor.h"
namespace dslaunch::runtime::compat {
inline constexpr bool kHasCudaGraphs =
#if defined(DSLAUNCH_TORCH_HAS_CUDA)
    true;
#else
    false;
#endif

using CudaGraphPool = std::pair<unsigned long long, unsigned long long>;
inline CudaGraphPool NewCudaGraphPool() {
#if defined(DSLAUNCH_TORCH_HAS_CUDA)
  const auto pool = at::cuda::graph_pool_handle();
  return {pool.first, pool.second};
#else
  return {0, 0};
#endif
}

class CudaGraph {
 public:
  // Runs `body` once on a side stream (warm-up: lazy initialisation,
  // library workspaces), then captures what a second call enqueues, without
  // running it. Returns that call's result: a tensor of the graph's memory
  // that every Replay() writes again. `body` must not wait on the host (no
  // item(), no copy from host memory).
  absl::StatusOr<torch::Tensor> Capture(const std::function<torch::Tensor()>& body, CudaGraphPool pool,
                                        const torch::Device& device) {
#if defined(DSLAUNCH_TORCH_HAS_CUDA)
    if (!device.is_cuda()) return absl::FailedPreconditionError("a CUDA graph needs a CUDA device");
    graph_ = std::make_unique<at::cuda::CUDAGraph>();
    c10::cuda::device_synchronize();
    torch::Tensor result;
    {
      c10::cuda::CUDAStreamGuard side(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index()));
      bool capturing = false;
      try {
        body();
#if TORCH_VERSION_MAJOR >= 2
        // Thread-local: another thread's CUDA calls (a server's) go on.
        graph_->capture_begin({pool.first, pool.second}, cudaStreamCaptureModeThreadLocal);
#else
        graph_->capture_begin({pool.first, pool.second});
#endif
        capturing = true;
        result = body();
        capturing = false;
        graph_->capture_end();
      } catch (const c10::Error& e) {
        if (capturing) {
          // End the stream's capture (and the allocator's use of the pool)
          // so that the stream is usable again, as far as CUDA lets it be.
          try {
            graph_->capture_end();
          } catch (const c10::Error&) {
          }
          (void)cudaGetLastError();
        }
        graph_.reset();
        return absl::InternalError(e.what_without_backtrace());
      }
    }
    c10::cuda::device_synchronize();
    return result;
#else
    (void)body;
    (void)pool;
    (void)device;
    return absl::FailedPreconditionError("CUDA graphs need a LibTorch build with CUDA");
#endif
  }
  void Replay() {
#if defined(DSLAUNCH_TORCH_HAS_CUDA)
    graph_->replay();
#endif
  }

 private:
#if defined(DSLAUNCH_TORCH_HAS_CUDA)
  std::unique_ptr<at::cuda::CUDAGraph> graph_;
#endif
};
}  // namespace dslaunch::runtime::compat
