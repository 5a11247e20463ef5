#include "runtime/data/prepare_dataset.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "runtime/data/indexed_dataset.h"
#include "runtime/data/model_tokenizer.h"
#include "runtime/data/text_corpus.h"
#include "runtime/tokenizer/tokenizer.h"

namespace dslaunch::runtime {
namespace {

// Text gathered before a round of parallel encoding: big enough to keep the
// workers busy, small enough that a large corpus is never all in memory.
constexpr size_t kBatchTextBytes = 32 << 20;

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

absl::Status CheckOptions(const PrepareOptions& options) {
  if (options.inputs.empty()) return absl::InvalidArgumentError("no --input given");
  if (options.output_prefix.empty()) return absl::InvalidArgumentError("no --output prefix given");
  if (options.tokenizer != "byte" && options.tokenizer != "sentencepiece" && options.tokenizer != "model") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tokenizer ", options.tokenizer, " is unknown (expected byte, sentencepiece or model)"));
  }
  if (options.vocab_size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--vocab_size must not be negative, got ", options.vocab_size));
  }
  if (options.workers < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--workers must be at least 1, got ", options.workers));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> TrainModel(const PrepareOptions& options,
                                       const std::vector<std::string>& files,
                                       std::vector<std::string>* written) {
  int vocab_size = options.vocab_size > 0 ? options.vocab_size : kDefaultSentencePieceVocab;
  DS_RETURN_IF_ERROR(TrainSentencePieceBpe(files, vocab_size, options.output_prefix));
  written->push_back(options.output_prefix + ".model");
  return written->back();
}

// Encodes documents[i] into (*encoded)[i] followed by eos, on up to
// `workers` threads taking documents from a shared counter.
void EncodeAll(const Tokenizer& tokenizer, const std::vector<std::string>& documents, int workers,
               std::vector<std::vector<int32_t>>* encoded) {
  encoded->assign(documents.size(), {});
  std::atomic<size_t> next{0};
  auto work = [&]() {
    for (size_t i = next++; i < documents.size(); i = next++) {
      std::vector<int32_t> ids = tokenizer.Encode(documents[i]);
      ids.push_back(tokenizer.eos_id());
      (*encoded)[i] = std::move(ids);
    }
  };
  size_t threads = std::min<size_t>(static_cast<size_t>(workers), documents.size());
  if (threads <= 1) return work();
  std::vector<std::thread> pool;
  for (size_t t = 0; t < threads; ++t) pool.emplace_back(work);
  for (std::thread& thread : pool) thread.join();
}

}  // namespace

std::string PrepareSummary::ToString() const {
  return absl::StrFormat(
      "%d input file%s, %d documents, %d tokens, vocab %d (%s) -> %s in %.2f s (%.0f tokens/s)",
      input_files, input_files == 1 ? "" : "s", documents, tokens, vocab_size, tokenizer,
      absl::StrJoin(files_written, " "), seconds, tokens_per_second());
}

absl::StatusOr<PrepareSummary> PrepareDataset(const PrepareOptions& options) {
  const Clock::time_point start = Clock::now();
  DS_RETURN_IF_ERROR(CheckOptions(options));
  DS_ASSIGN_OR_RETURN(std::vector<std::string> files, ExpandInputPaths(options.inputs));

  PrepareSummary summary;
  summary.input_files = static_cast<int64_t>(files.size());
  std::string model_path = options.sp_model;
  if (options.tokenizer == "sentencepiece" && model_path.empty()) {
    DS_ASSIGN_OR_RETURN(model_path, TrainModel(options, files, &summary.files_written));
  }
  DS_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer,
                      LoadPreparationTokenizer(options.tokenizer, model_path, options.model_dir));
  summary.tokenizer = tokenizer->name();
  summary.vocab_size = tokenizer->vocab_size();

  const Clock::time_point tokenize_start = Clock::now();
  DS_ASSIGN_OR_RETURN(auto writer,
                      IndexedDatasetWriter::Create(options.output_prefix, tokenizer->vocab_size()));
  const TextCorpusOptions corpus{.split_on_percent_lines = options.split_on_percent_lines};
  std::vector<std::string> batch;
  size_t batch_bytes = 0;
  std::vector<std::vector<int32_t>> encoded;
  auto flush = [&]() -> absl::Status {
    EncodeAll(*tokenizer, batch, options.workers, &encoded);
    for (const std::vector<int32_t>& ids : encoded) DS_RETURN_IF_ERROR(writer->AddDocument(ids));
    batch.clear();
    batch_bytes = 0;
    return absl::OkStatus();
  };
  for (const std::string& file : files) {
    DS_ASSIGN_OR_RETURN(std::vector<std::string> documents, ReadTextDocuments(file, corpus));
    for (std::string& document : documents) {
      batch_bytes += document.size();
      batch.push_back(std::move(document));
    }
    if (batch_bytes >= kBatchTextBytes) DS_RETURN_IF_ERROR(flush());
  }
  DS_RETURN_IF_ERROR(flush());
  summary.documents = writer->num_documents();
  summary.tokens = writer->num_tokens();
  if (summary.documents == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("inputs ", absl::StrJoin(options.inputs, ", "), " hold no text"));
  }
  DS_RETURN_IF_ERROR(writer->Finish());
  summary.files_written.insert(summary.files_written.begin(),
                               {options.output_prefix + ".bin", options.output_prefix + ".idx"});
  summary.tokenize_seconds = SecondsSince(tokenize_start);
  summary.seconds = SecondsSince(start);
  return summary;
}

}  // namespace dslaunch::runtime
