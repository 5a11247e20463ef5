// Note [Layer weights on NVMe] (ZeRO-Inference with offload_param.device
// "nvme"): the decoder layers' bytes live in files on a local drive, not in
// host memory, for a model larger than the host's memory as well as the
// GPU's. Streamed layer weights (Note [Streamed layer weights]) read each
// layer back before its copy to the device.
//
//  - One file per layer, in NVMe offload's swap-file format (Note [Swap file
//    format], offload/swap_file.h): a 4096-byte header with the payload's
//    length and XXH3-64 checksum, then the layer's bytes padded to 4-byte
//    words and to 4096 bytes, so O_DIRECT can move them. Every read is
//    checked: a short, foreign or changed file is an error naming it, never
//    a wrong weight.
//  - The files are written once, when the streamer is installed, under
//    <nvme_path>/dslaunch-swap/<name> (made afresh), and removed with this
//    object. Names carry the process id (two runs may share a drive); the
//    folders of processes that ended without removing theirs (killed,
//    crashed) are removed by RemoveLayerFilesOfEndedProcesses.
//  - Two staging buffers, each as large as the largest layer's file, pinned
//    on a CUDA host so that the copy to the device runs without the host.
//    Reads are queued on a BlockIo (io_uring, or pread/pwrite threads) in
//    the order asked, so the drive works while the GPU computes.
//  - Host memory: the two staging buffers, not the layers. The model is
//    still read into host memory once at load (a layer at a time is written
//    out and released), so the host must hold the model while it loads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/offload/block_io.h"
#include "runtime/offload/swap_file.h"

namespace dslaunch::runtime {

struct LayerWeightFilesOptions {
  std::string nvme_path;  // an existing, writable folder, not on tmpfs, with room for the files
  std::string name;       // the files' folder: <nvme_path>/dslaunch-swap/<name>
  BlockIoOptions io;
};

class LayerWeightFiles {
 public:
  // `layer_bytes`: each layer's length in bytes. Checks the folder
  // (CheckNvmePath, naming --nvme_path) and its room, makes the folder and
  // the two staging buffers (pinned when `pinned`).
  static absl::StatusOr<std::unique_ptr<LayerWeightFiles>> Create(const LayerWeightFilesOptions& options,
                                                                  std::vector<int64_t> layer_bytes, bool pinned);
  ~LayerWeightFiles();  // waits for the reads in flight, closes and removes the files

  // Writes `bytes` (uint8, host, layer_bytes[layer] of them) to the layer's
  // file and waits for it. Uses staging buffer 0: not while a read is pending.
  absl::Status Write(int64_t layer, const torch::Tensor& bytes);
  // Queues the read of `layer`'s file into staging buffer `buffer` (0 or 1).
  // REQUIRES: no read pending into it, and nothing still copying from it.
  void StartRead(int64_t layer, int buffer);
  // Waits for the read pending into `buffer` and checks it: the layer's
  // bytes, a uint8 view of the staging buffer (valid until the next
  // StartRead into it).
  absl::StatusOr<torch::Tensor> FinishRead(int buffer);
  // The layer being read into `buffer`; -1: none.
  int64_t pending(int buffer) const { return pending_[buffer].layer; }

  int64_t layers() const { return static_cast<int64_t>(layer_bytes_.size()); }
  int64_t file_bytes() const;  // on the drive, headers and padding included
  int64_t staging_bytes() const { return 2 * SwapFileBytes(max_words_); }
  int64_t read_bytes() const { return read_bytes_; }  // so far
  bool direct_io() const { return direct_; }
  // "32 files under DIR (12.95 GB, O_DIRECT), io_uring, queue depth 8, ...".
  std::string Describe() const;

 private:
  struct Pending {
    int64_t layer = -1;
    int64_t ticket = 0;
  };
  LayerWeightFiles(const LayerWeightFilesOptions& options, std::vector<int64_t> layer_bytes);
  // The staging buffer `buffer` as a swap buffer of `layer`'s words.
  SwapBuffer StagingFor(int buffer, int64_t layer) const;
  std::string FileOf(int64_t layer) const;
  static int64_t Words(int64_t bytes) { return (bytes + 3) / 4; }

  LayerWeightFilesOptions options_;
  std::vector<int64_t> layer_bytes_;
  int64_t max_words_ = 0;
  std::string folder_;
  std::vector<int> fds_;
  bool direct_ = true;
  std::unique_ptr<BlockIo> io_;
  std::string io_fallback_reason_;
  torch::Tensor staging_[2];  // uint8, 4096-byte aligned views of (pinned) host memory
  Pending pending_[2];
  int64_t read_bytes_ = 0;
};

// "<prefix><pid>-..." folders under <nvme_path>/dslaunch-swap whose process
// no longer runs (kill(pid, 0) says ESRCH) are removed; a live process's,
// or one whose name does not parse, is left alone. Ranks may sweep at once
// (each folder is claimed by a rename first). Process ids are this PID
// namespace's: a drive shared with containers of other namespaces needs
// an --nvme_path of its own per namespace. Returns how many went.
absl::StatusOr<int> RemoveLayerFilesOfEndedProcesses(const std::string& nvme_path, const std::string& prefix);

}  // namespace dslaunch::runtime
