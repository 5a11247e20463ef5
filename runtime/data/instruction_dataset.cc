#include "runtime/data/instruction_dataset.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace dslaunch::runtime {
namespace {

constexpr int64_t kMaskVocab = 2;

}  // namespace

std::string LossMaskPrefix(const std::string& prefix) { return prefix + ".loss_mask"; }

absl::StatusOr<std::unique_ptr<InstructionDatasetWriter>> InstructionDatasetWriter::Create(
    const std::string& prefix, int64_t vocab_size, FileSystem& fs) {
  DS_ASSIGN_OR_RETURN(auto tokens, IndexedDatasetWriter::Create(prefix, vocab_size, fs));
  DS_ASSIGN_OR_RETURN(auto mask, IndexedDatasetWriter::Create(LossMaskPrefix(prefix), kMaskVocab, fs));
  return std::unique_ptr<InstructionDatasetWriter>(
      new InstructionDatasetWriter(fs, prefix, std::move(tokens), std::move(mask)));
}

InstructionDatasetWriter::InstructionDatasetWriter(FileSystem& fs, std::string prefix,
                                                   std::unique_ptr<IndexedDatasetWriter> tokens,
                                                   std::unique_ptr<IndexedDatasetWriter> mask)
    : fs_(fs), prefix_(std::move(prefix)), tokens_(std::move(tokens)), mask_(std::move(mask)) {}

absl::Status InstructionDatasetWriter::AddRecord(const EncodedRecord& record) {
  if (record.tokens.size() != record.loss_mask.size()) {
    return absl::InvalidArgumentError(absl::StrCat("record ", num_documents(), " has ", record.tokens.size(),
                                                   " tokens but ", record.loss_mask.size(), " mask values"));
  }
  mask_ids_.assign(record.loss_mask.begin(), record.loss_mask.end());
  DS_RETURN_IF_ERROR(tokens_->AddDocument(record.tokens));
  DS_RETURN_IF_ERROR(mask_->AddDocument(mask_ids_));
  for (uint8_t m : record.loss_mask) label_tokens_ += m != 0;
  return absl::OkStatus();
}

absl::Status InstructionDatasetWriter::Finish() {
  // Note [Instruction dataset layout]: no committed pair while they change.
  DS_RETURN_IF_ERROR(fs_.RemoveFile(prefix_ + ".idx"));
  DS_RETURN_IF_ERROR(fs_.SyncDirectory(ParentDirectory(prefix_ + ".idx")));
  DS_RETURN_IF_ERROR(mask_->Finish());
  return tokens_->Finish();
}

absl::StatusOr<std::unique_ptr<InstructionDataset>> InstructionDataset::Open(const std::string& prefix,
                                                                            FileSystem& fs) {
  DS_ASSIGN_OR_RETURN(auto tokens, IndexedDataset::Open(prefix, fs));
  const std::string mask_prefix = LossMaskPrefix(prefix);
  absl::StatusOr<std::unique_ptr<IndexedDataset>> mask = IndexedDataset::Open(mask_prefix, fs);
  if (!mask.ok()) {
    return absl::Status(mask.status().code(),
                        absl::StrCat("instruction dataset ", prefix, ": its loss mask: ", mask.status().message(),
                                     absl::IsNotFound(mask.status())
                                         ? " (was it prepared as text rather than instruction records?)"
                                         : ""));
  }
  auto disagree = [&](const std::string& what) {
    return absl::DataLossError(absl::StrCat("instruction dataset ", prefix, ": tokens ", prefix, ".idx and loss mask ",
                                            mask_prefix, ".idx disagree: ", what,
                                            " (prepare the dataset again)"));
  };
  if ((*mask)->vocab_size() != kMaskVocab) {
    return disagree(absl::StrCat("the mask's vocab_size is ", (*mask)->vocab_size(), ", not ", kMaskVocab));
  }
  if ((*mask)->num_documents() != tokens->num_documents()) {
    return disagree(absl::StrCat(tokens->num_documents(), " documents against ", (*mask)->num_documents()));
  }
  if ((*mask)->num_tokens() != tokens->num_tokens()) {
    return disagree(absl::StrCat(tokens->num_tokens(), " tokens against ", (*mask)->num_tokens()));
  }
  for (int64_t d = 0; d < tokens->num_documents(); ++d) {
    const int64_t a = tokens->DocumentTokens(d, d + 1).size();
    const int64_t b = (*mask)->DocumentTokens(d, d + 1).size();
    if (a != b) return disagree(absl::StrCat("document ", d, " has ", a, " tokens against ", b, " mask values"));
  }
  return std::unique_ptr<InstructionDataset>(new InstructionDataset(prefix, std::move(tokens), std::move(*mask)));
}

bool InstructionDataset::Exists(const std::string& prefix, FileSystem& fs) {
  return IndexedDataset::Exists(prefix, fs) && IndexedDataset::Exists(LossMaskPrefix(prefix), fs);
}

InstructionDataset::InstructionDataset(std::string prefix, std::unique_ptr<IndexedDataset> tokens,
                                       std::unique_ptr<IndexedDataset> mask)
    : prefix_(std::move(prefix)), tokens_(std::move(tokens)), mask_(std::move(mask)) {}

absl::Status InstructionDataset::CopyDocument(int64_t document, int64_t count, int32_t* tokens,
                                              int32_t* loss_mask) const {
  if (document < 0 || document >= num_documents() || count < 0 || count > DocumentLength(document)) {
    return absl::OutOfRangeError(absl::StrCat("instruction dataset ", prefix_, ": document ", document, " (",
                                              count, " tokens) is outside its ", num_documents(), " documents"));
  }
  const int64_t begin = tokens_->DocumentTokens(document, document + 1).begin;
  DS_RETURN_IF_ERROR(tokens_->CopyTokens(begin, count, tokens));
  return mask_->CopyTokens(begin, count, loss_mask);
}

}  // namespace dslaunch::runtime
