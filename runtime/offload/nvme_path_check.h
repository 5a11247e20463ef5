// Whether a folder can hold NVMe offload's swap files (Note [NVMe offload] in
// swapped_shard.h). Plain C++: dslaunch --validate checks a local job's
// nvme_path with it before any rank starts, and every rank again at start.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace dslaunch::runtime {

// Ok when `path` is an existing folder this process can write, not on tmpfs
// (swapping to memory saves none), with at least `bytes` free (bytes <= 0:
// not checked). Errors name `key` (the config key), the path and the bytes.
absl::Status CheckNvmePath(const std::string& key, const std::string& path, int64_t bytes);

}  // namespace dslaunch::runtime
