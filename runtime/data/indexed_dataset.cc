#include "runtime/data/indexed_dataset.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace dslaunch::runtime {
namespace {

std::string BinPath(const std::string& prefix) { return prefix + ".bin"; }
std::string IdxPath(const std::string& prefix) { return prefix + ".idx"; }
std::string TempPath(const std::string& path) { return path + ".tmp"; }

}  // namespace

absl::StatusOr<std::unique_ptr<IndexedDatasetWriter>> IndexedDatasetWriter::Create(
    const std::string& prefix, int64_t vocab_size, FileSystem& fs) {
  if (vocab_size <= 0 || vocab_size > (int64_t{1} << 31)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dataset ", prefix, ": vocab_size must be in [1, 2^31], got ", vocab_size));
  }
  DS_ASSIGN_OR_RETURN(auto bin, fs.NewWritableFile(TempPath(BinPath(prefix))));
  return std::unique_ptr<IndexedDatasetWriter>(new IndexedDatasetWriter(fs, prefix, vocab_size, std::move(bin)));
}

IndexedDatasetWriter::IndexedDatasetWriter(FileSystem& fs, std::string prefix, int64_t vocab_size,
                                           std::unique_ptr<WritableFile> bin)
    : fs_(fs),
      prefix_(std::move(prefix)),
      vocab_size_(vocab_size),
      token_bytes_(TokenBytesForVocab(vocab_size)),
      bin_(std::move(bin)) {}

IndexedDatasetWriter::~IndexedDatasetWriter() {
  if (finished_) return;
  bin_.reset();
  fs_.RemoveFile(TempPath(BinPath(prefix_))).IgnoreError();
  fs_.RemoveFile(TempPath(IdxPath(prefix_))).IgnoreError();
}

absl::Status IndexedDatasetWriter::AddDocument(absl::Span<const int32_t> tokens) {
  if (finished_) return absl::FailedPreconditionError("AddDocument after Finish");
  encoded_.resize(tokens.size() * token_bytes_);
  for (size_t i = 0; i < tokens.size(); ++i) {
    int32_t id = tokens[i];
    if (id < 0 || id >= vocab_size_) {
      return absl::InvalidArgumentError(absl::StrCat("document ", num_documents(), " token ", i,
                                                     " is id ", id, ", outside the vocabulary [0, ",
                                                     vocab_size_, ")"));
    }
    if (token_bytes_ == 2) {
      uint16_t narrow = static_cast<uint16_t>(id);
      std::memcpy(&encoded_[i * 2], &narrow, 2);
    } else {
      uint32_t wide = static_cast<uint32_t>(id);
      std::memcpy(&encoded_[i * 4], &wide, 4);
    }
  }
  DS_RETURN_IF_ERROR(bin_->Append(encoded_));
  offsets_.push_back(offsets_.back() + static_cast<int64_t>(tokens.size()));
  return absl::OkStatus();
}

absl::Status IndexedDatasetWriter::Finish() {
  if (finished_) return absl::FailedPreconditionError("Finish called twice");
  const std::string bin_path = BinPath(prefix_);
  const std::string idx_path = IdxPath(prefix_);
  DS_RETURN_IF_ERROR(bin_->Sync());
  DS_RETURN_IF_ERROR(bin_->Close());

  IndexHeader header;
  header.token_bytes = token_bytes_;
  header.vocab_size = vocab_size_;
  header.document_count = num_documents();
  header.token_count = num_tokens();
  DS_ASSIGN_OR_RETURN(auto idx, fs_.NewWritableFile(TempPath(idx_path)));
  std::string head = EncodeIndexHeader(header);
  DS_RETURN_IF_ERROR(idx->Append(head));
  DS_RETURN_IF_ERROR(idx->Append(absl::string_view(reinterpret_cast<const char*>(offsets_.data()),
                                                  offsets_.size() * sizeof(int64_t))));
  DS_RETURN_IF_ERROR(idx->Sync());
  DS_RETURN_IF_ERROR(idx->Close());

  // The old .idx goes first: between the two renames an old index must not
  // describe the new tokens.
  DS_RETURN_IF_ERROR(fs_.RemoveFile(idx_path));
  DS_RETURN_IF_ERROR(fs_.Rename(TempPath(bin_path), bin_path));
  DS_RETURN_IF_ERROR(fs_.Rename(TempPath(idx_path), idx_path));
  DS_RETURN_IF_ERROR(fs_.SyncDirectory(ParentDirectory(idx_path)));
  finished_ = true;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<IndexedDataset>> IndexedDataset::Open(const std::string& prefix, FileSystem& fs) {
  const std::string idx_path = IdxPath(prefix);
  const std::string bin_path = BinPath(prefix);
  if (!fs.Exists(idx_path)) {
    std::string hint = fs.Exists(TempPath(idx_path)) || fs.Exists(TempPath(bin_path))
                           ? " (only temporary files exist: its preparation did not finish)"
                           : "";
    return absl::NotFoundError(
        absl::StrCat("dataset ", prefix, ": index file ", idx_path, " does not exist", hint));
  }
  DS_ASSIGN_OR_RETURN(auto idx, fs.MapReadOnly(idx_path));
  const int64_t* offsets = nullptr;
  DS_ASSIGN_OR_RETURN(IndexHeader header,
                      ParseIndex(idx_path, idx->data(), idx->size(), &offsets));
  DS_ASSIGN_OR_RETURN(auto bin, fs.MapReadOnly(bin_path));
  uint64_t expected = static_cast<uint64_t>(header.token_count) * header.token_bytes;
  if (bin->size() != expected) {
    return absl::DataLossError(absl::StrCat("token file ", bin_path, " has ", bin->size(),
                                            " bytes but its index ", idx_path, " describes ",
                                            header.token_count, " tokens of ", header.token_bytes,
                                            " bytes (", expected, " bytes)"));
  }
  return std::unique_ptr<IndexedDataset>(
      new IndexedDataset(std::move(idx), std::move(bin), header, offsets));
}

bool IndexedDataset::Exists(const std::string& prefix, FileSystem& fs) { return fs.Exists(IdxPath(prefix)); }

IndexedDataset::IndexedDataset(std::unique_ptr<ReadOnlyMemoryRegion> idx, std::unique_ptr<ReadOnlyMemoryRegion> bin,
                               IndexHeader header, const int64_t* offsets)
    : idx_(std::move(idx)), bin_(std::move(bin)), header_(header), offsets_(offsets) {}

IndexedDataset::~IndexedDataset() = default;

absl::Status IndexedDataset::CopyTokens(int64_t offset, int64_t count, int32_t* out) const {
  if (offset < 0 || count < 0 || offset > header_.token_count - count) {
    return absl::OutOfRangeError(absl::StrCat("tokens [", offset, ", ", offset + count,
                                              ") are outside the dataset's ", header_.token_count,
                                              " tokens"));
  }
  const uint8_t* base = bin_->data();
  if (header_.token_bytes == 2) {
    for (int64_t i = 0; i < count; ++i) {
      uint16_t id;
      std::memcpy(&id, base + (offset + i) * 2, 2);
      out[i] = id;
    }
  } else {
    for (int64_t i = 0; i < count; ++i) {
      uint32_t id;
      std::memcpy(&id, base + (offset + i) * 4, 4);
      out[i] = static_cast<int32_t>(id);
    }
  }
  return absl::OkStatus();
}

}  // namespace dslaunch::runtime
