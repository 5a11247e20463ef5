// Note [Layer weights on NVMe].
#include "runtime/generate/layer_weight_files.h"

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

LayerWeightFiles::LayerWeightFiles(const LayerWeightFilesOptions& options, std::vector<int64_t> layer_bytes)
    : options_(options), layer_bytes_(std::move(layer_bytes)) {
  for (int64_t bytes : layer_bytes_) max_words_ = std::max(max_words_, Words(bytes));
}

absl::StatusOr<std::unique_ptr<LayerWeightFiles>> LayerWeightFiles::Create(const LayerWeightFilesOptions& options,
                                                                          std::vector<int64_t> layer_bytes,
                                                                          bool pinned) {
  if (layer_bytes.empty()) return absl::InvalidArgumentError("layer weights on NVMe: no layer to hold");
  for (int64_t bytes : layer_bytes) {
    if (bytes <= 0) return absl::InvalidArgumentError("layer weights on NVMe: a layer of no bytes");
  }
  if (absl::Status usable = CheckNvmePath("--nvme_path", options.nvme_path, 0); !usable.ok()) return usable;
  std::unique_ptr<LayerWeightFiles> files(new LayerWeightFiles(options, std::move(layer_bytes)));
  // Room for every file: a drive found full mid-load would be worse.
  if (absl::Status room = CheckNvmePath("--nvme_path", options.nvme_path, files->file_bytes()); !room.ok()) {
    return room;
  }
  // A folder left by a crashed run holds another model's layers.
  absl::StatusOr<std::string> folder = FreshSwapFolder(options.nvme_path, options.name);
  if (!folder.ok()) return folder.status();
  files->folder_ = *folder;
  auto io = OpenBlockIo(options.io, &files->io_fallback_reason_);
  if (!io.ok()) return io.status();
  files->io_ = std::move(*io);
  for (int64_t layer = 0; layer < files->layers(); ++layer) {
    bool direct = true;
    auto fd = OpenSwapFile(files->FileOf(layer), /*create=*/true, &direct);
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
  } catch (const c10::Error& e) {
    return absl::ResourceExhaustedError(absl::StrCat("layer weights on NVMe: two ", block,
                                                     "-byte staging buffers: ", e.what_without_backtrace()));
  }
  return files;
}

LayerWeightFiles::~LayerWeightFiles() {
  if (io_) (void)io_->WaitAll();
  io_.reset();
  for (int fd : fds_) ::close(fd);
  if (!folder_.empty()) (void)FileSystem::Default().RemoveTree(folder_);
}

int64_t LayerWeightFiles::file_bytes() const {
  int64_t total = 0;
  for (int64_t bytes : layer_bytes_) total += SwapFileBytes(Words(bytes));
  return total;
}

std::string LayerWeightFiles::FileOf(int64_t layer) const { return absl::StrCat(folder_, "/layer.", layer, ".swp"); }

SwapBuffer LayerWeightFiles::StagingFor(int buffer, int64_t layer) const {
  SwapBuffer view;
  view.elements = Words(layer_bytes_[static_cast<size_t>(layer)]);  // 4-byte words: the format's "values"
  torch::Tensor keep = staging_[buffer];
  view.block_ = std::shared_ptr<void>(keep.data_ptr(), [keep](void*) {});
  return view;
}

absl::Status LayerWeightFiles::Write(int64_t layer, const torch::Tensor& bytes) {
  const int64_t length = layer_bytes_[static_cast<size_t>(layer)];
  if (bytes.scalar_type() != torch::kUInt8 || !bytes.device().is_cpu() || !bytes.is_contiguous() ||
      bytes.numel() != length) {
    return absl::InvalidArgumentError(absl::StrCat("layer weights on NVMe: layer ", layer, " takes ", length,
                                                   " contiguous host bytes, got ", bytes.numel()));
  }
  SwapBuffer buffer = StagingFor(0, layer);
  auto* payload = static_cast<unsigned char*>(buffer.block()) + kSwapHeaderBytes;
  std::memcpy(payload, bytes.data_ptr(), static_cast<size_t>(length));
  std::memset(payload + length, 0, static_cast<size_t>(SwapFileBytes(buffer.elements) - kSwapHeaderBytes - length));
  SealSwapBuffer(buffer);
  const int64_t ticket = io_->Submit({IoRequest{IoRequest::Kind::kWrite, fds_[static_cast<size_t>(layer)], 0,
                                                buffer.block(), SwapFileBytes(buffer.elements), FileOf(layer)}});
  return io_->Wait(ticket);
}

void LayerWeightFiles::StartRead(int64_t layer, int buffer) {
  TORCH_CHECK(pending_[buffer].layer < 0, "layer weights on NVMe: staging buffer ", buffer,
              " already has a read pending (layer ", pending_[buffer].layer, ")");
  const SwapBuffer target = StagingFor(buffer, layer);
  pending_[buffer].layer = layer;
  pending_[buffer].ticket = io_->Submit({IoRequest{IoRequest::Kind::kRead, fds_[static_cast<size_t>(layer)], 0,
                                                   target.block(), SwapFileBytes(target.elements), FileOf(layer)}});
}

absl::StatusOr<torch::Tensor> LayerWeightFiles::FinishRead(int buffer) {
  const Pending pending = pending_[buffer];
  if (pending.layer < 0) {
    return absl::FailedPreconditionError(absl::StrCat("layer weights on NVMe: no read pending into buffer ", buffer));
  }
  pending_[buffer] = Pending{};
  if (absl::Status read = io_->Wait(pending.ticket); !read.ok()) return read;
  if (absl::Status checked = CheckSwapBuffer(StagingFor(buffer, pending.layer), FileOf(pending.layer));
      !checked.ok()) {
    return checked;
  }
  const int64_t length = layer_bytes_[static_cast<size_t>(pending.layer)];
  read_bytes_ += length;
  return staging_[buffer].narrow(0, kSwapHeaderBytes, length);
}

absl::StatusOr<int> RemoveLayerFilesOfEndedProcesses(const std::string& nvme_path, const std::string& prefix) {
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

std::string LayerWeightFiles::Describe() const {
  return absl::StrFormat("%d files under %s (%.2f GB%s), %s%s", layers(), folder_, file_bytes() / 1e9,
                         direct_ ? ", O_DIRECT" : "", io_->Describe(),
                         io_fallback_reason_.empty() ? "" : absl::StrCat(" (", io_fallback_reason_, ")"));
}

}  // namespace dslaunch::runtime
