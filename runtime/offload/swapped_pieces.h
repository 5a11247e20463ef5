// Note [Pieces on NVMe]: pieces of bytes, each in a swap file of its own on a
// local drive instead of in host memory. Two users:
//  - ZeRO-Inference (offload_param.device "nvme" in dsgen and dsserve; Note
//    [Pieces on NVMe], generate/streamed_layer_weights.h): a piece is
//    a decoder layer's weights, written once at load and read before each
//    copy to the device.
//  - ZeRO-3 training with offload_param.device "nvme" (Note [Parameters on
//    NVMe], zero/zero_partition.h): a piece is this rank's share of a unit's
//    16-bit parameters, read when the unit is gathered and written after
//    every optimizer step.
//
//  - Each file is in NVMe offload's swap-file format (Note [Swap file
//    format], swap_file.h): a 4096-byte header with the payload's length and
//    XXH3-64 checksum, then the piece's bytes padded to 4-byte words and to
//    4096 bytes, so O_DIRECT can move them. Every read is checked: a short,
//    foreign or changed file is an error naming it, never wrong values.
//  - The files live under <nvme_path>/dslaunch-swap/<name> (made afresh: a
//    folder a crashed run left holds another run's values), removed with
//    this object. RemoveSwapFoldersOfEndedProcesses sweeps the folders of
//    processes that ended without removing theirs, for names that carry the
//    process id.
//  - Two staging buffers, each as large as the largest piece's file, pinned
//    on a CUDA host so that copies to and from the device run without the
//    host. Reads and writes go through a BlockIo (io_uring, or pread/pwrite
//    threads) in the order asked, so the drive works while the caller
//    computes.
//  - Host memory: the two staging buffers, not the pieces; except that
//    with resident_bytes (offload_param.max_in_cpu) the first pieces whose
//    bytes fit in it stay in host memory (pinned like the staging buffers)
//    and never touch the drive: a read of one is the piece itself, a write
//    a copy into it.
//
// Not thread-safe: one thread at a time (the caller orders them).
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

struct SwappedPiecesOptions {
  std::string nvme_path;  // an existing, writable folder, not on tmpfs, with room for the files
  std::string name;       // the files' folder: <nvme_path>/dslaunch-swap/<name>
  // What errors about nvme_path call it ("--nvme_path", or a ds_config key).
  std::string path_setting = "--nvme_path";
  BlockIoOptions io;
  // Pieces kept in host memory instead of files: in piece order, each one
  // whose bytes still fit in what is left of this (a piece too large is
  // skipped and later ones may fit). 0: every piece on the drive.
  int64_t resident_bytes = 0;
};

class SwappedPieces {
 public:
  // `piece_bytes`: each piece's length in bytes. Checks the folder
  // (CheckNvmePath, naming options.path_setting) and its room, makes the
  // folder and the two staging buffers (pinned when `pinned`).
  static absl::StatusOr<std::unique_ptr<SwappedPieces>> Create(const SwappedPiecesOptions& options,
                                                               std::vector<int64_t> piece_bytes, bool pinned);
  ~SwappedPieces();  // waits for the transfers in flight, closes and removes the files

  // Writes `bytes` (uint8, host, piece_bytes[piece] of them) to the piece's
  // file and waits for it. Uses staging buffer 0: not while anything is
  // pending in it.
  absl::Status Write(int64_t piece, const torch::Tensor& bytes);
  // Streamed writes: Staging(buffer, piece) is the payload of `piece` in
  // staging buffer `buffer` (uint8, piece_bytes[piece] long) for the caller
  // to fill; StartWrite queues its write; FinishWrite(buffer) waits for it.
  // REQUIRES: nothing pending in `buffer`.
  torch::Tensor Staging(int buffer, int64_t piece) const;
  void StartWrite(int64_t piece, int buffer);
  absl::Status FinishWrite(int buffer);
  // Queues the read of `piece`'s file into staging buffer `buffer` (0 or 1).
  // REQUIRES: nothing pending in it, and nothing still copying from it.
  void StartRead(int64_t piece, int buffer);
  // Waits for the read pending into `buffer` and checks it: the piece's
  // bytes, a uint8 view of the staging buffer (valid until the next
  // StartRead or StartWrite into it); for a piece in host memory, the piece
  // itself (valid until the piece is next written: read only).
  absl::StatusOr<torch::Tensor> FinishRead(int buffer);
  // The piece being read into `buffer`; -1: none (or a write is pending).
  int64_t pending(int buffer) const { return pending_[buffer].write ? -1 : pending_[buffer].piece; }

  int64_t pieces() const { return static_cast<int64_t>(piece_bytes_.size()); }
  int64_t piece_bytes(int64_t piece) const { return piece_bytes_[static_cast<size_t>(piece)]; }
  int64_t file_bytes() const;  // on the drive, headers and padding included
  bool resident(int64_t piece) const { return resident_[static_cast<size_t>(piece)].defined(); }
  int64_t resident_bytes() const;  // the pieces kept in host memory
  int64_t staging_bytes() const { return 2 * SwapFileBytes(max_words_); }
  int64_t read_bytes() const { return read_bytes_; }        // so far, from the drive
  int64_t written_bytes() const { return written_bytes_; }  // so far, to the drive
  bool direct_io() const { return direct_; }
  // Note [Registered buffers]: blocks moved through them so far.
  int64_t registered_transfers() const { return io_->registered_transfers(); }
  const SwappedPiecesOptions& options() const { return options_; }
  // "32 files under DIR (12.95 GB, O_DIRECT), io_uring, queue depth 8, ...",
  // then "; 2 pieces (0.40 GB) in host memory" when some are.
  std::string Describe() const;

 private:
  struct Pending {
    int64_t piece = -1;
    int64_t ticket = 0;  // kNoTransfer: a piece in host memory, nothing to wait for
    bool write = false;
  };
  static constexpr int64_t kNoTransfer = -1;
  SwappedPieces(const SwappedPiecesOptions& options, std::vector<int64_t> piece_bytes);
  // The staging buffer `buffer` as a swap buffer of `piece`'s words.
  SwapBuffer StagingFor(int buffer, int64_t piece) const;
  std::string FileOf(int64_t piece) const;
  static int64_t Words(int64_t bytes) { return (bytes + 3) / 4; }

  SwappedPiecesOptions options_;
  std::vector<int64_t> piece_bytes_;
  int64_t max_words_ = 0;
  std::string folder_;
  std::vector<int> fds_;                // -1 for a piece in host memory
  std::vector<torch::Tensor> resident_;  // uint8; undefined for a piece on the drive
  bool direct_ = true;
  std::unique_ptr<BlockIo> io_;
  std::string io_fallback_reason_;
  torch::Tensor staging_[2];  // uint8, 4096-byte aligned views of (pinned) host memory
  Pending pending_[2];
  int64_t read_bytes_ = 0;
  int64_t written_bytes_ = 0;
};

// "<prefix><pid>-..." folders under <nvme_path>/dslaunch-swap whose process
// no longer runs (kill(pid, 0) says ESRCH) are removed; a live process's,
// or one whose name does not parse, is left alone. Ranks may sweep at once
// (each folder is claimed by a rename first). Process ids are this PID
// namespace's: a drive shared with containers of other namespaces needs
// an --nvme_path of its own per namespace. Returns how many went.
absl::StatusOr<int> RemoveSwapFoldersOfEndedProcesses(const std::string& nvme_path, const std::string& prefix);

}  // namespace dslaunch::runtime
