#include "runtime/offload/swap_probe.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dslaunch::runtime {

absl::StatusOr<SwapSpeed> MeasureSwapSpeed(SwappedShardOptions options, int64_t bytes) {
  using Clock = std::chrono::steady_clock;
  const int64_t elements = std::max<int64_t>(1, bytes / 4);
  options.name += "-probe";
  auto shard = SwappedShard::Create(options, {"probe"}, elements);
  if (!shard.ok()) return shard.status();
  torch::NoGradGuard no_grad;
  const torch::Tensor values = torch::rand({elements});
  // Into memory touched before the clock starts: a fresh allocation's first
  // touch (slow on some virtual machines) is not the swap path's cost.
  torch::Tensor read = torch::zeros({elements});
  SwapSpeed speed;
  speed.bytes = (*shard)->FileBytes();
  speed.io = (*shard)->Describe();
  auto start = Clock::now();
  if (absl::Status s = (*shard)->WriteWhole(0, values); !s.ok()) return s;
  const double write_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  start = Clock::now();
  if (absl::Status s = (*shard)->ReadInto(0, read); !s.ok()) return s;
  const double read_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (!torch::equal(read, values)) {
    return absl::DataLossError(absl::StrCat("swap path probe under ", options.nvme_path,
                                            ": the values read back differ from those written"));
  }
  speed.write_gbps = speed.bytes / std::max(write_seconds, 1e-9) / 1e9;
  speed.read_gbps = speed.bytes / std::max(read_seconds, 1e-9) / 1e9;
  return speed;
}

std::string DescribeSwapCost(const SwapSpeed& speed, int64_t step_read_bytes, int64_t step_write_bytes,
                             int64_t serial_read_bytes) {
  const double read = static_cast<double>(step_read_bytes), written = static_cast<double>(step_write_bytes);
  const double serial = static_cast<double>(serial_read_bytes);
  // The step's reads and writes overlap (reading ahead, writing behind), so
  // the drive's share is the longer of the two, not their sum: on the H200
  // host a ~1.2B GPT with both offloads on NVMe took 21 s of host step for
  // reads and writes the sum put at 39 s and the longer at 23 s.
  const double seconds = serial / (speed.read_gbps * 1e9) +
                         std::max(written / (speed.write_gbps * 1e9), read / (speed.read_gbps * 1e9));
  std::string traffic;
  if (serial > 0) {
    traffic = absl::StrFormat("reads %.2f GB (%.2f GB of them during forward and backward) and writes %.2f GB",
                              (read + serial) / 1e9, serial / 1e9, written / 1e9);
  } else if (step_read_bytes == step_write_bytes) {
    traffic = absl::StrFormat("reads and writes %.2f GB", read / 1e9);
  } else {
    traffic = absl::StrFormat("reads %.2f GB and writes %.2f GB", read / 1e9, written / 1e9);
  }
  return absl::StrFormat(
      "probe of %.1f MiB: write %.2f GB/s, read %.2f GB/s; a step %s of swap files: about %.2f s per step from "
      "the drive (reads and writes overlapped)",
      speed.bytes / 1048576.0, speed.write_gbps, speed.read_gbps, traffic, seconds);
}

}  // namespace dslaunch::runtime
