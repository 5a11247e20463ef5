// Reading a rank file of a checkpoint (a LibTorch archive): through the
// FileSystem seam, so a test can fail or cut the read, and the scalar values
// the engine stores beside its tensors.
#pragma once

#include <cstdint>
#include <string>

#include <torch/torch.h>

#include "absl/status/status.h"
#include "runtime/fs/file_system.h"

namespace dslaunch::runtime {

int64_t ReadInt(torch::serialize::InputArchive& archive, const std::string& key);
double ReadDouble(torch::serialize::InputArchive& archive, const std::string& key);

// Reads a LibTorch archive through `fs`, at the offsets its zip index names.
// A failed read is the error (LibTorch's own message only says it is short).
absl::Status LoadArchive(FileSystem& fs, const std::string& path, torch::Device device,
                         torch::serialize::InputArchive& archive);

}  // namespace dslaunch::runtime
