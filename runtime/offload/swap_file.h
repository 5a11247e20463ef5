// One swap file of NVMe offload (Note [NVMe offload] in swapped_shard.h):
// a 4096-byte header, then the payload (fp32 values, padded to 4096 bytes so
// that O_DIRECT can move it).
//
// Note [Swap file format]: the header holds the magic "DSSWAP01", the
// payload's length in bytes, its element count and the XXH3-64 checksum of
// the payload, each a little-endian 64-bit word. A read checks all of them:
// a file that is short, from another shard, or with a flipped bit is an
// error naming the file, never a wrong tensor (DeepSpeed users meet "buffer
// nbytes != file bytes" and silently worse training).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/offload/swap_sizes.h"

namespace dslaunch::runtime {


// A host fp32 tensor whose storage starts kSwapHeaderBytes into a 4096-byte
// aligned block of SwapFileBytes(elements) bytes (the header in front):
// what a whole swap file reads into and writes from. header() of it is the
// block's start.
struct SwapBuffer {
  static SwapBuffer Allocate(int64_t elements);
  void* block() const { return block_.get(); }
  torch::Tensor values;  // [elements] fp32
  int64_t elements = 0;
  std::shared_ptr<void> block_;
};

// Writes the header of buffer.values (its checksum computed now) into the
// buffer's first 4096 bytes.
void SealSwapBuffer(SwapBuffer& buffer);
// Checks a buffer just read from `file` against its header.
absl::Status CheckSwapBuffer(const SwapBuffer& buffer, const std::string& file);

// `<nvme_path>/dslaunch-swap/<name>`, made afresh (emptied, or created): a
// folder a crashed run left holds values that are not this run's. Through
// fs/file_system.h, not std::filesystem (its Note says why).
absl::StatusOr<std::string> FreshSwapFolder(const std::string& nvme_path, const std::string& name);

// Opens (creating it when `create`) a swap file for reading and writing, with
// O_DIRECT where the file system supports it (*direct says whether it did).
absl::StatusOr<int> OpenSwapFile(const std::string& path, bool create, bool* direct);

}  // namespace dslaunch::runtime
