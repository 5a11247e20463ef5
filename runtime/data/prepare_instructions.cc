#include "runtime/data/prepare_instructions.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "runtime/data/instruction_dataset.h"
#include "runtime/data/instruction_encoding.h"
#include "runtime/data/json_text.h"
#include "runtime/data/model_tokenizer.h"
#include "runtime/data/text_corpus.h"
#include "runtime/fs/file_system.h"

namespace dslaunch::runtime {
namespace {

// A records file is read whole; Alpaca's is 22 MB.
constexpr int64_t kMaxRecordsFileBytes = int64_t{4} << 30;
// Records parsed and encoded per round of the workers.
constexpr size_t kBatchRecords = 4096;
// Skipped records quoted in the summary.
constexpr size_t kSkippedExamples = 5;

using Clock = std::chrono::steady_clock;

absl::Status CheckOptions(const InstructionPrepareOptions& options) {
  if (options.records.empty()) return absl::InvalidArgumentError("no records file given (--records)");
  if (options.output_prefix.empty()) return absl::InvalidArgumentError("no --output prefix given");
  if (options.sequence_length < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--sequence_length must not be negative, got ", options.sequence_length));
  }
  if (options.workers < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--workers must be at least 1, got ", options.workers));
  }
  return absl::OkStatus();
}

// One record through parse -> render -> encode. Errors carry no location.
absl::StatusOr<EncodedRecord> EncodeOne(const RecordText& text, const RecordFormatOptions& format,
                                        const Tokenizer& tokenizer) {
  DS_ASSIGN_OR_RETURN(YAML::Node node, ParseJsonValue(text.text));
  DS_ASSIGN_OR_RETURN(std::vector<TextSegment> segments, RenderRecord(node, format));
  return EncodeRecord(tokenizer, segments);
}

// Encodes records[i] into (*out)[i] on up to `workers` threads.
void EncodeBatch(const std::vector<RecordText>& records, size_t begin, size_t end,
                 const InstructionPrepareOptions& options, const Tokenizer& tokenizer,
                 std::vector<absl::StatusOr<EncodedRecord>>* out) {
  out->assign(end - begin, absl::UnknownError("not encoded"));
  std::atomic<size_t> next{begin};
  auto work = [&]() {
    for (size_t i = next++; i < end; i = next++) (*out)[i - begin] = EncodeOne(records[i], options.format, tokenizer);
  };
  const size_t threads = std::min<size_t>(static_cast<size_t>(options.workers), end - begin);
  if (threads <= 1) return work();
  std::vector<std::thread> pool;
  for (size_t t = 0; t < threads; ++t) pool.emplace_back(work);
  for (std::thread& thread : pool) thread.join();
}

int64_t LabelCount(const EncodedRecord& record) {
  return std::count_if(record.loss_mask.begin(), record.loss_mask.end(), [](uint8_t m) { return m != 0; });
}

// The policies applied to one encoded record, in order; writes or skips it.
class RecordSink {
 public:
  RecordSink(const InstructionPrepareOptions& options, InstructionDatasetWriter& writer,
             InstructionPrepareSummary& summary)
      : options_(options), writer_(writer), summary_(summary) {}

  absl::Status Add(const std::string& where, absl::StatusOr<EncodedRecord> record) {
    ++summary_.records_read;
    if (!record.ok()) {
      if (options_.on_bad_record == BadRecordPolicy::kRefuse) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": bad ", RecordFormatName(options_.format.format),
                                                       " record: ", record.status().message(),
                                                       " (data.on_bad_record / --on_bad_record skip leaves "
                                                       "such records out)"));
      }
      ++summary_.bad_records_skipped;
      Quote(where, record.status().message());
      return absl::OkStatus();
    }
    const int64_t length = options_.sequence_length;
    const int64_t tokens = static_cast<int64_t>(record->tokens.size());
    if (length > 0 && RecordPositions(tokens) > length) {
      const std::string what = absl::StrCat("the record has ", tokens, " tokens; it needs sequence_length ",
                                            RecordPositions(tokens), ", more than ", length);
      switch (options_.on_long_record) {
        case LongRecordPolicy::kRefuse:
          return absl::InvalidArgumentError(
              absl::StrCat(where, ": ", what, " (data.on_long_record / --on_long_record skip or truncate)"));
        case LongRecordPolicy::kSkip:
          ++summary_.long_records_skipped;
          Quote(where, what);
          return absl::OkStatus();
        case LongRecordPolicy::kTruncate:
          record->tokens.resize(length + 1);
          record->loss_mask.resize(length + 1);
          // The first token is never a target (Note [Instruction sample layout]).
          if (LabelCount(*record) - record->loss_mask[0] == 0) {
            ++summary_.long_records_skipped;
            Quote(where, absl::StrCat(what, ", and its first ", length + 1, " tokens hold no response"));
            return absl::OkStatus();
          }
          ++summary_.long_records_truncated;
          break;
      }
    }
    summary_.longest_record = std::max<int64_t>(summary_.longest_record, record->tokens.size());
    return writer_.AddRecord(*record);
  }

 private:
  void Quote(const std::string& where, absl::string_view why) {
    if (summary_.skipped_examples.size() < kSkippedExamples) {
      summary_.skipped_examples.push_back(absl::StrCat(where, ": ", why));
    }
  }

  const InstructionPrepareOptions& options_;
  InstructionDatasetWriter& writer_;
  InstructionPrepareSummary& summary_;
};

}  // namespace

std::string InstructionPrepareSummary::ToString() const {
  return absl::StrFormat(
      "%d input file%s, %d records -> %d written (%d bad skipped, %d long skipped, %d long truncated), %d tokens "
      "(%d in the loss, longest record %d), vocab %d (%s) -> %s in %.2f s",
      input_files, input_files == 1 ? "" : "s", records_read, records_written, bad_records_skipped,
      long_records_skipped, long_records_truncated, tokens, label_tokens, longest_record, vocab_size, tokenizer,
      absl::StrJoin(files_written, " "), seconds);
}

absl::StatusOr<InstructionPrepareSummary> PrepareInstructionDataset(const InstructionPrepareOptions& options) {
  const Clock::time_point start = Clock::now();
  DS_RETURN_IF_ERROR(CheckOptions(options));
  DS_ASSIGN_OR_RETURN(std::vector<std::string> files, ExpandInputPaths(options.records));
  DS_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer,
                      LoadPreparationTokenizer(options.tokenizer, options.sp_model, options.model_dir));
  InstructionPrepareSummary summary;
  summary.input_files = static_cast<int64_t>(files.size());
  summary.tokenizer = tokenizer->name();
  summary.vocab_size = tokenizer->vocab_size();

  DS_ASSIGN_OR_RETURN(auto writer, InstructionDatasetWriter::Create(options.output_prefix, tokenizer->vocab_size()));
  RecordSink sink(options, *writer, summary);
  std::vector<absl::StatusOr<EncodedRecord>> encoded;
  for (const std::string& file : files) {
    DS_ASSIGN_OR_RETURN(std::string contents, FileSystem::Default().ReadFile(file, kMaxRecordsFileBytes));
    absl::StatusOr<std::vector<RecordText>> records = SplitRecords(contents);
    if (!records.ok()) return absl::InvalidArgumentError(absl::StrCat(file, ": ", records.status().message()));
    std::string().swap(contents);  // the records hold their own text
    for (size_t begin = 0; begin < records->size(); begin += kBatchRecords) {
      const size_t end = std::min(records->size(), begin + kBatchRecords);
      EncodeBatch(*records, begin, end, options, *tokenizer, &encoded);
      for (size_t i = begin; i < end; ++i) {
        DS_RETURN_IF_ERROR(sink.Add(absl::StrCat(file, ":", (*records)[i].line), std::move(encoded[i - begin])));
      }
    }
  }
  summary.records_written = writer->num_documents();
  summary.tokens = writer->num_tokens();
  summary.label_tokens = writer->num_label_tokens();
  if (summary.records_written == 0) {
    return absl::InvalidArgumentError(absl::StrCat("records ", absl::StrJoin(options.records, ", "), ": no usable record (",
                                                   summary.records_read, " read, ", summary.bad_records_skipped,
                                                   " bad, ", summary.long_records_skipped, " too long)"));
  }
  DS_RETURN_IF_ERROR(writer->Finish());
  const std::string mask = LossMaskPrefix(options.output_prefix);
  summary.files_written = {options.output_prefix + ".bin", options.output_prefix + ".idx", mask + ".bin",
                           mask + ".idx"};
  summary.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return summary;
}

}  // namespace dslaunch::runtime
