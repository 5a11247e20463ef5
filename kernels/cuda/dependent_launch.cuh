// Note [Dependent launch]
// A decode step is some 300 kernels back to back, most of them a few
// microseconds long: between two of them the card drains the first and
// ramps up the second, and at batch 1 those gaps are a tenth of the step.
// Programmatic dependent launch (Hopper; CUDA 12.3+ also inside graphs)
// lets a kernel launched with LaunchDependent start before the kernel ahead
// of it in the stream has finished: its blocks take the multiprocessors the
// earlier kernel leaves in its last wave, and wait (WaitForPreviousKernel)
// before they touch anything that kernel or any earlier one may write.
//
// The rules every kernel launched this way keeps:
//   - WaitForPreviousKernel before reading what an earlier kernel may write
//     and before any global write (the memory it writes may be what the
//     earlier kernel is still reading: LibTorch's allocator reuses memory in
//     stream order);
//   - LetNextKernelStart only after its own WaitForPreviousKernel, so a
//     kernel that starts early finds every kernel before its predecessor
//     finished: what it reads before its own wait (a decode product's
//     weights, DecodeLinearArgs::weights_constant) was written before then.
// The wait returns once the previous kernel has finished and its writes are
// visible. The attribute is set only where the kernels were built for Hopper
// or later (DSLAUNCH_CUDA_MIN_ARCH, from CMAKE_CUDA_ARCHITECTURES: code built
// for an older card has no wait in it), the device is one (compute
// capability 9 or more) and the runtime captures such launches into graphs
// (CUDA 12.3 or later); elsewhere a kernel starts after the whole previous
// one, as any launch does, and the two instructions are no-ops.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <utility>

namespace dslaunch::kernels::device {

__device__ __forceinline__ void WaitForPreviousKernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void LetNextKernelStart() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Whether launches on the current device may start early (above).
inline bool DependentLaunchAllowed() {
#if defined(DSLAUNCH_CUDA_MIN_ARCH) && DSLAUNCH_CUDA_MIN_ARCH >= 90 && CUDART_VERSION >= 12030
  constexpr int kDevices = 64;
  static std::atomic<int> known[kDevices] = {};  // 0: not asked yet, 1: Hopper or later, 2: older
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kDevices) return false;
  int answer = known[device].load(std::memory_order_relaxed);
  if (answer == 0) {
    int major = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) return false;
    answer = major >= 9 ? 1 : 2;
    known[device].store(answer, std::memory_order_relaxed);
  }
  return answer == 1;
#else
  return false;
#endif
}

// kernel<<<grid, block, shared, stream>>>(args...), allowed to start before
// the previous kernel in `stream` ends where DependentLaunchAllowed (the
// kernel keeps the rules above).
template <typename... Params, typename... Args>
cudaError_t LaunchDependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared, cudaStream_t stream,
                            Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = DependentLaunchAllowed() ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace dslaunch::kernels::device
