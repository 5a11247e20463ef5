#include "runtime/offload/swapped_shard.h"

#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/fs/file_system.h"
#include "runtime/offload/nvme_path_check.h"

namespace dslaunch::runtime {
namespace {

std::string GiB(int64_t bytes) { return absl::StrFormat("%.2f GiB", static_cast<double>(bytes) / (1 << 30)); }

}  // namespace

SwappedShard::SwappedShard(const SwappedShardOptions& options, std::vector<std::string> streams, int64_t elements)
    : options_(options), streams_(std::move(streams)), elements_(elements) {}

absl::StatusOr<std::unique_ptr<SwappedShard>> SwappedShard::Create(const SwappedShardOptions& options,
                                                                   std::vector<std::string> streams,
                                                                   int64_t elements) {
  if (elements <= 0 || streams.empty()) return absl::InvalidArgumentError("NVMe offload: an empty shard");
  if (options.sub_group_elements <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("zero_optimization.sub_group_size=", options.sub_group_elements, ": must be positive"));
  }
  const std::string& path = options.nvme_path;
  if (absl::Status usable = CheckNvmePath("offload_optimizer.nvme_path", path, 0); !usable.ok()) return usable;
  std::unique_ptr<SwappedShard> shard(new SwappedShard(options, std::move(streams), elements));
  shard->group_elements_ = std::min(options.sub_group_elements, elements);
  for (int64_t offset = 0; offset < elements; offset += shard->group_elements_) shard->group_offsets_.push_back(offset);
  // Room for every file (a full disk found mid-step would be worse).
  if (absl::Status room = CheckNvmePath("offload_optimizer.nvme_path", path, shard->FileBytes()); !room.ok()) {
    return room;
  }
  absl::StatusOr<std::string> folder = FreshSwapFolder(path, options.name);
  if (!folder.ok()) return folder.status();
  shard->folder_ = *folder;
  auto io = OpenBlockIo(options.io, &shard->io_fallback_reason_);
  if (!io.ok()) return io.status();
  shard->io_ = std::move(*io);

  const int sets = std::min(kSwapBufferSets, shard->groups());
  const int64_t last = elements - shard->group_offsets_.back();
  shard->sets_.resize(sets);
  if (last != shard->group_elements_) shard->last_.resize(sets);
  for (int set = 0; set < sets; ++set) {
    for (size_t s = 0; s < shard->streams_.size(); ++s) {
      shard->sets_[set].push_back(SwapBuffer::Allocate(shard->group_elements_));
      if (!shard->last_.empty()) shard->last_[set].push_back(SwapBuffer::Allocate(last));
    }
  }
  // Note [Registered buffers]: every buffer set, once, before any transfer.
  std::vector<BlockIo::Buffer> registered;
  for (const auto* sets : {&shard->sets_, &shard->last_}) {
    for (const std::vector<SwapBuffer>& set : *sets) {
      for (const SwapBuffer& buffer : set) registered.push_back({buffer.block(), SwapFileBytes(buffer.elements)});
    }
  }
  shard->io_->RegisterBuffers(registered);
  shard->fds_.resize(shard->streams_.size());
  for (size_t s = 0; s < shard->streams_.size(); ++s) {
    for (int g = 0; g < shard->groups(); ++g) {
      bool direct = true;
      auto fd = OpenSwapFile(shard->FileOf(static_cast<int>(s), g), /*create=*/true, &direct);
      if (!fd.ok()) return fd.status();
      shard->fds_[s].push_back(*fd);
      shard->direct_ = shard->direct_ && direct;
    }
  }
  // Every file holds zeros until a stream is written.
  for (size_t s = 0; s < shard->streams_.size(); ++s) {
    if (absl::Status written = shard->WriteWhole(static_cast<int>(s), torch::zeros({elements})); !written.ok()) {
      return written;
    }
  }
  return shard;
}

SwappedShard::~SwappedShard() {
  if (io_) (void)io_->WaitAll();
  io_.reset();
  for (const auto& stream : fds_) {
    for (int fd : stream) ::close(fd);
  }
  if (!folder_.empty()) (void)FileSystem::Default().RemoveTree(folder_);
}

std::string SwappedShard::FileOf(int stream, int group) const {
  return absl::StrCat(folder_, "/", streams_[stream], ".", group, ".swp");
}

int64_t SwappedShard::GroupSize(int group) const {
  return std::min(group_elements_, elements_ - group_offsets_[group]);
}

SwapBuffer& SwappedShard::BufferOf(int group, int set, int stream) {
  return GroupSize(group) == group_elements_ ? sets_[set][stream] : last_[set][stream];
}

const SwapBuffer& SwappedShard::BufferOf(int group, int set, int stream) const {
  return GroupSize(group) == group_elements_ ? sets_[set][stream] : last_[set][stream];
}

int64_t SwappedShard::HostBufferBytes() const {
  int64_t bytes = 0;
  for (const auto* sets : {&sets_, &last_}) {
    for (const auto& set : *sets) {
      for (const SwapBuffer& buffer : set) bytes += SwapFileBytes(buffer.elements);
    }
  }
  return bytes;
}

int64_t SwappedShard::FileBytes() const {
  int64_t bytes = 0;
  for (int g = 0; g < groups(); ++g) bytes += SwapFileBytes(GroupSize(g));
  return bytes * static_cast<int64_t>(streams_.size());
}

std::string SwappedShard::Describe() const {
  return absl::StrCat(streams_.size(), " swap files per sub-group of ", group_elements_, " elements (", groups(),
                      " sub-group(s), ", GiB(FileBytes()), ") under ", folder_, ": ", io_->Describe(),
                      direct_ ? ", O_DIRECT" : ", buffered (the file system refuses O_DIRECT)",
                      io_fallback_reason_.empty() ? "" : absl::StrCat(" (", io_fallback_reason_, ")"),
                      "; host buffers ", GiB(HostBufferBytes()));
}

int64_t SwappedShard::SubmitGroup(IoRequest::Kind kind, int group, int set) {
  std::vector<IoRequest> requests;
  for (size_t s = 0; s < streams_.size(); ++s) {
    SwapBuffer& buffer = BufferOf(group, set, static_cast<int>(s));
    requests.push_back(IoRequest{kind, fds_[s][group], 0, buffer.block(), SwapFileBytes(buffer.elements),
                                 FileOf(static_cast<int>(s), group)});
  }
  return io_->Submit(std::move(requests));
}

absl::Status SwappedShard::CheckGroup(int group, int set) const {
  for (size_t s = 0; s < streams_.size(); ++s) {
    absl::Status checked = CheckSwapBuffer(BufferOf(group, set, static_cast<int>(s)), FileOf(static_cast<int>(s), group));
    if (!checked.ok()) return checked;
  }
  return absl::OkStatus();
}

absl::StatusOr<torch::Tensor> SwappedShard::ReadWhole(int stream) {
  torch::Tensor whole = torch::empty({elements_}, torch::kFloat);
  if (absl::Status s = ReadInto(stream, whole); !s.ok()) return s;
  return whole;
}

absl::Status SwappedShard::ReadInto(int stream, torch::Tensor& whole) {
  if (whole.numel() != elements_ || whole.scalar_type() != torch::kFloat || !whole.is_contiguous()) {
    return absl::InvalidArgumentError(absl::StrCat("NVMe offload: reading a stream of ", elements_,
                                                   " fp32 values into ", whole.numel()));
  }
  if (absl::Status s = io_->WaitAll(); !s.ok()) return s;
  // Group g + 1 is read while group g is checked and copied out (the buffer
  // sets alternate; a set is free again once its copy is done).
  const int sets = static_cast<int>(sets_.size());
  auto submit = [&](int g) {
    SwapBuffer& buffer = BufferOf(g, g % sets, stream);
    return io_->Submit({IoRequest{IoRequest::Kind::kRead, fds_[stream][g], 0, buffer.block(),
                                  SwapFileBytes(buffer.elements), FileOf(stream, g)}});
  };
  int64_t ticket = submit(0);
  for (int g = 0; g < groups(); ++g) {
    if (absl::Status s = io_->Wait(ticket); !s.ok()) return s;
    if (g + 1 < groups()) ticket = submit(g + 1);
    const SwapBuffer& buffer = BufferOf(g, g % sets, stream);
    absl::Status checked = CheckSwapBuffer(buffer, FileOf(stream, g));
    if (checked.ok()) whole.narrow(0, group_offsets_[g], buffer.elements).copy_(buffer.values);
    if (!checked.ok()) {
      (void)io_->WaitAll();
      return checked;
    }
  }
  return absl::OkStatus();
}

absl::Status SwappedShard::WriteWhole(int stream, const torch::Tensor& values) {
  if (values.numel() != elements_) {
    return absl::InvalidArgumentError(
        absl::StrCat("NVMe offload: ", values.numel(), " values for a stream of ", elements_));
  }
  if (absl::Status s = io_->WaitAll(); !s.ok()) return s;
  torch::Tensor flat = values.detach().reshape({-1}).to(torch::kCPU, torch::kFloat);
  for (int g = 0; g < groups(); ++g) {
    SwapBuffer& buffer = BufferOf(g, 0, stream);
    buffer.values.copy_(flat.narrow(0, group_offsets_[g], buffer.elements));
    SealSwapBuffer(buffer);
    const int64_t ticket = io_->Submit({IoRequest{IoRequest::Kind::kWrite, fds_[stream][g], 0, buffer.block(),
                                                  SwapFileBytes(buffer.elements), FileOf(stream, g)}});
    if (absl::Status s = io_->Wait(ticket); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status SwappedShard::ForEachGroup(const GroupFunction& fn) {
  if (absl::Status s = io_->WaitAll(); !s.ok()) return s;
  const int sets = static_cast<int>(sets_.size());
  std::vector<int64_t> read_tickets(groups());
  read_tickets[0] = SubmitGroup(IoRequest::Kind::kRead, 0, 0);
  for (int g = 0; g < groups(); ++g) {
    const int set = g % sets;
    if (absl::Status s = io_->Wait(read_tickets[g]); !s.ok()) return s;
    if (absl::Status s = CheckGroup(g, set); !s.ok()) return s;
    // The set of group g + 1 was last written for group g - 2, whose write
    // was queued before group g's read: done by now (the queue keeps order).
    if (g + 1 < groups()) read_tickets[g + 1] = SubmitGroup(IoRequest::Kind::kRead, g + 1, (g + 1) % sets);
    std::vector<torch::Tensor> values;
    for (size_t s = 0; s < streams_.size(); ++s) values.push_back(BufferOf(g, set, static_cast<int>(s)).values);
    if (absl::Status s = fn(group_offsets_[g], values); !s.ok()) {
      (void)io_->WaitAll();
      return s;
    }
    for (size_t s = 0; s < streams_.size(); ++s) SealSwapBuffer(BufferOf(g, set, static_cast<int>(s)));
    SubmitGroup(IoRequest::Kind::kWrite, g, set);
  }
  return io_->WaitAll();
}

}  // namespace dslaunch::runtime
