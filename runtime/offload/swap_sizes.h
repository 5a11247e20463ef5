// The sizes of NVMe offload's swap files and buffers (Note [Swap file
// format] in swap_file.h, Note [NVMe offload] in swapped_shard.h), with no
// LibTorch: the swap code and `dslaunch estimate` (runtime/estimate) size
// them by the same numbers.
#pragma once

#include <cstdint>

namespace dslaunch::runtime {

inline constexpr int64_t kSwapAlignment = 4096;
inline constexpr int64_t kSwapHeaderBytes = kSwapAlignment;

// Header plus the payload of `elements` fp32 values, padded to kSwapAlignment.
inline constexpr int64_t SwapFileBytes(int64_t elements) {
  const int64_t bytes = elements * 4;
  return kSwapHeaderBytes + (bytes + kSwapAlignment - 1) / kSwapAlignment * kSwapAlignment;
}

// DeepSpeed's default sub_group_size (1e9) would hold 36 GB of host buffers:
// on the H200 host a ~1.2B GPT with the optimizer on NVMe held 27 GiB of
// buffers (2 sub-groups; the rank's host peak 37 GB, more than CPU
// offload's whole optimizer state). The engine cuts the swap's sub-groups at
// this many elements (3.6 GB of buffers) and says so at start; the step's
// arithmetic is elementwise, so the cut changes nothing but the memory.
inline constexpr int64_t kMaxSwapSubGroupElements = 100'000'000;

// Buffer sets an NVMe-offloaded shard keeps (one read ahead, one stepping,
// one written back), each with one buffer per stream.
inline constexpr int kSwapBufferSets = 3;

}  // namespace dslaunch::runtime
