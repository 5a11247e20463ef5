// Note [Swap path probe]
// How fast nvme_path moves a swap file, measured the way a step moves them:
// a SwappedShard of its own (the job's block size, queue depth, io_uring or
// pread/pwrite, O_DIRECT, checksums) writes random values and reads them
// back, checked, then removes its folder. dsrank runs it at start with NVMe
// offload and prints what a step's swap traffic will cost at that speed
// (issue 19's self-benchmark); swap_bench (scripts/nvme-bench.sh) reports the
// same figures beside fio's.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/offload/swapped_shard.h"

namespace dslaunch::runtime {

struct SwapSpeed {
  double write_gbps = 0;
  double read_gbps = 0;
  int64_t bytes = 0;  // of swap files written and read (payload and headers)
  std::string io;     // SwappedShard::Describe() of the probe
};

// `bytes` of fp32 values (at least one element) through `options` under the
// folder name `options.name` + "-probe". Errors name the file (a value read
// back wrong is DataLoss).
absl::StatusOr<SwapSpeed> MeasureSwapSpeed(SwappedShardOptions options, int64_t bytes);

// "probe of 64.0 MiB: write 1.47 GB/s, read 1.02 GB/s; a step reads and
// writes 15.8 GB of swap files: about 15.5 s per step from the drive (reads
// and writes overlapped)": the step's own reads and writes overlap (the
// longer of the two at the probe's speeds), and `serial_read_bytes` (the
// parameters' reads during forward and backward, Note [Parameters on NVMe])
// come before them: "reads 12.0 GB (8.0 GB of them during forward and
// backward) and writes 6.0 GB".
std::string DescribeSwapCost(const SwapSpeed& speed, int64_t step_read_bytes, int64_t step_write_bytes,
                             int64_t serial_read_bytes = 0);

}  // namespace dslaunch::runtime
