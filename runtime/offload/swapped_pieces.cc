// Note [Pieces on NVMe].
#include "runtime/offload/swapped_pieces.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/fs/file_system.h"
#include "runtime/offload/nvme_path_check.h"

namespace dslaunch::runtime {

SwappedPieces::SwappedPieces(const SwappedPiecesOptions& options, std::vector<int64_t> piece_bytes)
    : options_(options), piece_bytes_(std::move(piece_bytes)) {
  for (int64_t bytes : piece_bytes_) max_words_ = std::max(max_words_, Words(bytes));
}

absl::StatusOr<std::unique_ptr<SwappedPieces>> SwappedPieces::Create(const SwappedPiecesOptions& options,
                                                                          std::vector<int64_t> piece_bytes,
                                                                          bool pinned) {
  if (piece_bytes.empty()) return absl::InvalidArgumentError("pieces on NVMe: nothing to hold");
  for (int64_t bytes : piece_bytes) {
    if (bytes <= 0) return absl::InvalidArgumentError("pieces on NVMe: a piece of no bytes");
  }
  if (absl::Status usable = CheckNvmePath(options.path_setting, options.nvme_path, 0); !usable.ok()) return usable;
  if (options.resident_bytes < 0) return absl::InvalidArgumentError("pieces on NVMe: negative resident_bytes");
  std::unique_ptr<SwappedPieces> files(new SwappedPieces(options, std::move(piece_bytes)));
  int64_t room_in_memory = options.resident_bytes;
  try {
    for (int64_t bytes : files->piece_bytes_) {
      torch::Tensor piece;
      if (bytes <= room_in_memory) {
        piece = torch::empty({bytes}, torch::TensorOptions().dtype(torch::kUInt8).pinned_memory(pinned));
        room_in_memory -= bytes;
      }
      files->resident_.push_back(piece);
    }
  } catch (const c10::Error& e) {
    return absl::ResourceExhaustedError(absl::StrCat("pieces on NVMe: ", options.resident_bytes - room_in_memory,
                                                     " bytes of pieces kept in host memory (resident_bytes): ",
                                                     e.what_without_backtrace()));
  }
  // Room for every file: a drive found full mid-load would be worse.
  if (absl::Status room = CheckNvmePath(options.path_setting, options.nvme_path, files->file_bytes()); !room.ok()) {
    return room;
  }
  // A folder left by a crashed run holds another run's values.
  absl::StatusOr<std::string> folder = FreshSwapFolder(options.nvme_path, options.name);
  if (!folder.ok()) return folder.status();
  files->folder_ = *folder;
  auto io = OpenBlockIo(options.io, &files->io_fallback_reason_);
  if (!io.ok()) return io.status();
  files->io_ = std::move(*io);
  for (int64_t piece = 0; piece < files->pieces(); ++piece) {
    if (files->resident(piece)) {
      files->fds_.push_back(-1);
      continue;
    }
    bool direct = true;
    auto fd = OpenSwapFile(files->FileOf(piece), /*create=*/true, &direct);
    if (!fd.ok()) return fd.status();
    files->fds_.push_back(*fd);
    files->direct_ = files->direct_ && direct;
  }
  const int64_t block = SwapFileBytes(files->max_words_);
  try {
    for (torch::Tensor& staging : files->staging_) {
      // O_DIRECT wants 4096-byte aligned buffers; LibTorch's allocators promise less.
      torch::Tensor memory = torch::zeros({block + kSwapAlignment}, torch::TensorOptions().dtype(torch::kUInt8).pinned_memory(pinned));
      const auto address = reinterpret_cast<uintptr_t>(memory.data_ptr());
      const int64_t skip = static_cast<int64_t>((kSwapAlignment - address % kSwapAlignment) % kSwapAlignment);
      staging = memory.narrow(0, skip, block);
    }
    // Note [Registered buffers].
    files->io_->RegisterBuffers({{files->staging_[0].data_ptr(), block}, {files->staging_[1].data_ptr(), block}});
  } catch (const c10::Error& e) {
    return absl::ResourceExhaustedError(absl::StrCat("pieces on NVMe: two ", block,
                                                     "-byte staging buffers: ", e.what_without_backtrace()));
  }
  return files;
}

SwappedPieces::~SwappedPieces() {
  if (io_) (void)io_->WaitAll();
  io_.reset();
  for (int fd : fds_) {
    if (fd >= 0) ::close(fd);
  }
  if (!folder_.empty()) (void)FileSystem::Default().RemoveTree(folder_);
}

int64_t SwappedPieces::file_bytes() const {
  int64_t total = 0;
  for (int64_t piece = 0; piece < pieces(); ++piece) {
    if (!resident(piece)) total += SwapFileBytes(Words(piece_bytes(piece)));
  }
  return total;
}

int64_t SwappedPieces::resident_bytes() const {
  int64_t total = 0;
  for (const torch::Tensor& piece : resident_) total += piece.defined() ? piece.numel() : 0;
  return total;
}

std::string SwappedPieces::FileOf(int64_t piece) const { return absl::StrCat(folder_, "/piece.", piece, ".swp"); }

SwapBuffer SwappedPieces::StagingFor(int buffer, int64_t piece) const {
  SwapBuffer view;
  view.elements = Words(piece_bytes_[static_cast<size_t>(piece)]);  // 4-byte words: the format's "values"
  torch::Tensor keep = staging_[buffer];
  view.block_ = std::shared_ptr<void>(keep.data_ptr(), [keep](void*) {});
  return view;
}

torch::Tensor SwappedPieces::Staging(int buffer, int64_t piece) const {
  TORCH_CHECK(pending_[buffer].piece < 0, "pieces on NVMe: staging buffer ", buffer, " is still in use (piece ",
              pending_[buffer].piece, ")");
  return staging_[buffer].narrow(0, kSwapHeaderBytes, piece_bytes_[static_cast<size_t>(piece)]);
}

void SwappedPieces::StartWrite(int64_t piece, int buffer) {
  TORCH_CHECK(pending_[buffer].piece < 0, "pieces on NVMe: staging buffer ", buffer, " is still in use (piece ",
              pending_[buffer].piece, ")");
  if (resident(piece)) {  // a copy into host memory, done when this returns
    resident_[static_cast<size_t>(piece)].copy_(Staging(buffer, piece));
    pending_[buffer] = Pending{piece, kNoTransfer, /*write=*/true};
    return;
  }
  SwapBuffer staged = StagingFor(buffer, piece);
  const int64_t length = piece_bytes_[static_cast<size_t>(piece)];
  auto* payload = static_cast<unsigned char*>(staged.block()) + kSwapHeaderBytes;
  std::memset(payload + length, 0, static_cast<size_t>(SwapFileBytes(staged.elements) - kSwapHeaderBytes - length));
  SealSwapBuffer(staged);
  pending_[buffer] = Pending{piece, io_->Submit({IoRequest{IoRequest::Kind::kWrite, fds_[static_cast<size_t>(piece)], 0,
                                                          staged.block(), SwapFileBytes(staged.elements), FileOf(piece)}}),
                             /*write=*/true};
}

absl::Status SwappedPieces::FinishWrite(int buffer) {
  const Pending pending = pending_[buffer];
  if (pending.piece < 0 || !pending.write) {
    return absl::FailedPreconditionError(absl::StrCat("pieces on NVMe: no write pending from buffer ", buffer));
  }
  pending_[buffer] = Pending{};
  if (pending.ticket == kNoTransfer) return absl::OkStatus();
  if (absl::Status written = io_->Wait(pending.ticket); !written.ok()) return written;
  written_bytes_ += piece_bytes_[static_cast<size_t>(pending.piece)];
  return absl::OkStatus();
}

absl::Status SwappedPieces::Write(int64_t piece, const torch::Tensor& bytes) {
  const int64_t length = piece_bytes_[static_cast<size_t>(piece)];
  if (bytes.scalar_type() != torch::kUInt8 || !bytes.device().is_cpu() || !bytes.is_contiguous() ||
      bytes.numel() != length) {
    return absl::InvalidArgumentError(absl::StrCat("pieces on NVMe: piece ", piece, " takes ", length,
                                                   " contiguous host bytes, got ", bytes.numel()));
  }
  if (resident(piece)) {
    resident_[static_cast<size_t>(piece)].copy_(bytes);
    return absl::OkStatus();
  }
  Staging(0, piece).copy_(bytes);
  StartWrite(piece, 0);
  return FinishWrite(0);
}

void SwappedPieces::StartRead(int64_t piece, int buffer) {
  TORCH_CHECK(pending_[buffer].piece < 0, "pieces on NVMe: staging buffer ", buffer, " is still in use (piece ",
              pending_[buffer].piece, ")");
  if (resident(piece)) {
    pending_[buffer] = Pending{piece, kNoTransfer, /*write=*/false};
    return;
  }
  const SwapBuffer target = StagingFor(buffer, piece);
  pending_[buffer] = Pending{piece, io_->Submit({IoRequest{IoRequest::Kind::kRead, fds_[static_cast<size_t>(piece)], 0,
                                                          target.block(), SwapFileBytes(target.elements), FileOf(piece)}}),
                             /*write=*/false};
}

absl::StatusOr<torch::Tensor> SwappedPieces::FinishRead(int buffer) {
  const Pending pending = pending_[buffer];
  if (pending.piece < 0 || pending.write) {
    return absl::FailedPreconditionError(absl::StrCat("pieces on NVMe: no read pending into buffer ", buffer));
  }
  pending_[buffer] = Pending{};
  if (pending.ticket == kNoTransfer) return resident_[static_cast<size_t>(pending.piece)];
  if (absl::Status read = io_->Wait(pending.ticket); !read.ok()) return read;
  if (absl::Status checked = CheckSwapBuffer(StagingFor(buffer, pending.piece), FileOf(pending.piece));
      !checked.ok()) {
    return checked;
  }
  const int64_t length = piece_bytes_[static_cast<size_t>(pending.piece)];
  read_bytes_ += length;
  return staging_[buffer].narrow(0, kSwapHeaderBytes, length);
}

absl::StatusOr<int> RemoveSwapFoldersOfEndedProcesses(const std::string& nvme_path, const std::string& prefix) {
  FileSystem& fs = FileSystem::Default();
  const std::string swap = absl::StrCat(nvme_path, "/dslaunch-swap");
  if (!fs.IsDirectory(swap)) return 0;
  auto entries = fs.ListDirectory(swap);
  if (!entries.ok()) return entries.status();
  int removed = 0;
  for (const std::string& entry : *entries) {
    if (entry.rfind(prefix, 0) != 0) continue;
    const std::string rest = entry.substr(prefix.size());
    int64_t pid = 0;
    if (!absl::SimpleAtoi(rest.substr(0, rest.find('-')), &pid) || pid <= 0) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to judge
    // Several ranks of the next run sweep at once: the one whose rename
    // takes the folder removes it; the others find it gone and go on.
    const std::string claimed = absl::StrCat(swap, "/.removing-", ::getpid(), "-", entry);
    if (!fs.Rename(absl::StrCat(swap, "/", entry), claimed).ok()) continue;
    if (absl::Status gone = fs.RemoveTree(claimed); !gone.ok()) return gone;
    ++removed;
  }
  return removed;
}

std::string SwappedPieces::Describe() const {
  int64_t in_memory = 0;
  for (int64_t piece = 0; piece < pieces(); ++piece) in_memory += resident(piece) ? 1 : 0;
  return absl::StrFormat("%d files under %s (%.2f GB%s), %s%s%s", pieces() - in_memory, folder_, file_bytes() / 1e9,
                         direct_ ? ", O_DIRECT" : "", io_->Describe(),
                         io_fallback_reason_.empty() ? "" : absl::StrCat(" (", io_fallback_reason_, ")"),
                         in_memory == 0 ? ""
                                        : absl::StrFormat("; %d pieces (%.2f GB) in host memory", in_memory,
                                                          resident_bytes() / 1e9));
}

}  // namespace dslaunch::runtime
