// Note [NVMe offload]
// ZeRO-Infinity's optimizer offload (offload_optimizer.device: nvme): a
// rank's fp32 master shard and its Adam moments live in swap files under
// nvme_path, not in memory. The shard is cut into sub-groups of
// zero_optimization.sub_group_size elements; each stream (master, exp_avg,
// exp_avg_sq) of each sub-group is one swap file (swap_file.h: length and
// checksum checked at every read). The optimizer step visits the sub-groups
// in order (ForEachGroup): while one is stepped, the next one is read and
// the previous one written (three buffer sets, the reads and writes queued in
// order on a BlockIo, block_io.h), so the disk works while the CPU does.
// Host memory: 3 sets x 3 streams x one sub-group, instead of 12 bytes for
// every element of the shard.
//
// The swap folder is made fresh (a stale one from a crashed run is removed
// and rebuilt from the values given) and removed when the shard is destroyed.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/offload/block_io.h"
#include "runtime/offload/swap_file.h"

namespace dslaunch::runtime {

// Note [Sub-groups on NVMe]: the pipeline holds three buffer sets of every
// stream's sub-group, 36 bytes per element for Adam's three fp32 streams, so
// kMaxSwapSubGroupElements: runtime/offload/swap_sizes.h.

struct SwappedShardOptions {
  std::string nvme_path;  // must exist, be writable, not be tmpfs, and hold the files
  std::string name;       // this shard's folder: <nvme_path>/dslaunch-swap/<name> (removed at the end)
  int64_t sub_group_elements = 1'000'000'000;
  BlockIoOptions io;
};

class SwappedShard {
 public:
  // `streams`: their names (file names); every stream has `elements` values,
  // zeros until written.
  static absl::StatusOr<std::unique_ptr<SwappedShard>> Create(const SwappedShardOptions& options,
                                                              std::vector<std::string> streams, int64_t elements);
  ~SwappedShard();

  const SwappedShardOptions& options() const { return options_; }
  int64_t elements() const { return elements_; }
  int groups() const { return static_cast<int>(group_offsets_.size()); }
  int64_t group_elements() const { return group_elements_; }
  // Host memory held for the swap, and bytes on disk.
  int64_t HostBufferBytes() const;
  int64_t FileBytes() const;
  // "3 swap files per sub-group of N elements under DIR: io_uring, ...".
  std::string Describe() const;
  // Why io_uring is not used (empty when it is) and whether O_DIRECT is.
  const std::string& io_fallback_reason() const { return io_fallback_reason_; }
  bool direct_io() const { return direct_; }
  // Note [Registered buffers]: blocks moved through them so far.
  int64_t registered_transfers() const { return io_->registered_transfers(); }

  // The whole stream, through the files (for checkpoints).
  absl::StatusOr<torch::Tensor> ReadWhole(int stream);
  // The same into `whole` ([elements] fp32, contiguous, host).
  absl::Status ReadInto(int stream, torch::Tensor& whole);
  absl::Status WriteWhole(int stream, const torch::Tensor& values);

  // fn(offset, values) for every sub-group in order, values[s] being stream
  // s's [n] fp32 values of elements [offset, offset + n) read from the
  // files; what fn leaves in them is written back. Reading ahead and writing
  // behind overlap fn (Note [NVMe offload]).
  using GroupFunction = std::function<absl::Status(int64_t offset, std::vector<torch::Tensor>& values)>;
  absl::Status ForEachGroup(const GroupFunction& fn);

 private:
  SwappedShard(const SwappedShardOptions& options, std::vector<std::string> streams, int64_t elements);
  std::string FileOf(int stream, int group) const;
  SwapBuffer& BufferOf(int group, int set, int stream);
  const SwapBuffer& BufferOf(int group, int set, int stream) const;
  int64_t GroupSize(int group) const;
  // Read or write every stream of `group` through buffer set `set`.
  int64_t SubmitGroup(IoRequest::Kind kind, int group, int set);
  absl::Status CheckGroup(int group, int set) const;

  const SwappedShardOptions options_;
  const std::vector<std::string> streams_;
  const int64_t elements_;
  std::string folder_;
  int64_t group_elements_ = 0;
  std::vector<int64_t> group_offsets_;
  std::vector<std::vector<int>> fds_;  // [stream][group]
  // [set][stream]: buffers of group_elements_ values (a shorter last group
  // uses a prefix; its files are sized to it).
  std::vector<std::vector<SwapBuffer>> sets_;
  std::vector<std::vector<SwapBuffer>> last_;  // [set][stream] for a shorter last group
  std::unique_ptr<BlockIo> io_;
  std::string io_fallback_reason_;
  bool direct_ = true;
};

}  // namespace dslaunch::runtime
