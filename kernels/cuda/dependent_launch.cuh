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
// visible; a kernel launched without the attribute, or on a card before
// Hopper, waits for the whole previous kernel as any launch does, and the
// two instructions are then no-ops.
#pragma once

#include <cuda_runtime.h>

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

// kernel<<<grid, block, shared, stream>>>(args...), allowed to start before
// the previous kernel in `stream` ends (the kernel keeps the rules above).
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
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace dslaunch::kernels::device
