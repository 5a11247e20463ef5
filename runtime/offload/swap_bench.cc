// Sequential write and read speed of NVMe offload's swap path (SwappedShard:
// io_uring or pread/pwrite, O_DIRECT, checksums), for scripts/nvme-bench.sh
// to set against fio on the same folder with the same block size and queue
// depth.
//
//   swap_bench --dir DIR [--gib 2] [--block_size 1048576] [--queue_depth 8] [--posix]
//
// Prints "write_gbps=X read_gbps=Y io=..." (Note [Swap path probe]).
#include <cstdio>
#include <string>

#include "absl/strings/numbers.h"
#include "runtime/offload/swap_probe.h"

int main(int argc, char** argv) {
  using namespace dslaunch::runtime;
  std::string dir;
  double gib = 2;
  SwappedShardOptions options;
  options.name = "swap-bench";
  options.io.block_bytes = 1 << 20;
  options.io.queue_depth = 8;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const char* value = i + 1 < argc ? argv[i + 1] : "";
    bool ok = true;
    if (arg == "--dir") {
      dir = value;
      ++i;
    } else if (arg == "--gib") {
      ok = absl::SimpleAtod(value, &gib);
      ++i;
    } else if (arg == "--block_size") {
      ok = absl::SimpleAtoi(value, &options.io.block_bytes);
      ++i;
    } else if (arg == "--queue_depth") {
      ok = absl::SimpleAtoi(value, &options.io.queue_depth);
      ++i;
    } else if (arg == "--posix") {
      options.io.use_io_uring = false;
    } else {
      ok = false;
    }
    if (!ok) {
      std::fprintf(stderr, "swap_bench: bad argument %s\nusage: swap_bench --dir DIR [--gib G] [--block_size B] "
                           "[--queue_depth Q] [--posix]\n", arg.c_str());
      return 2;
    }
  }
  if (dir.empty()) {
    std::fprintf(stderr, "swap_bench: --dir DIR is required\n");
    return 2;
  }
  options.nvme_path = dir;
  options.sub_group_elements = int64_t{64} << 20;  // 256 MiB files
  auto speed = MeasureSwapSpeed(options, static_cast<int64_t>(gib * (1 << 30)));
  if (!speed.ok()) {
    std::fprintf(stderr, "swap_bench: %s\n", std::string(speed.status().message()).c_str());
    return 1;
  }
  std::printf("write_gbps=%.3f read_gbps=%.3f bytes=%lld io=%s\n", speed->write_gbps, speed->read_gbps,
              static_cast<long long>(speed->bytes), speed->io.c_str());
  return 0;
}
