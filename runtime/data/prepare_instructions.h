// Instruction records (JSON / JSON Lines) -> tokenizer -> an instruction
// dataset (Note [Instruction dataset layout]): what `dsprep --format alpaca|
// prompt_response|chat` does, as a library call so the runtime can prepare
// `data.prepared` on first use.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/data/instruction_format.h"
#include "runtime/data/instruction_policies.h"

namespace dslaunch::runtime {

struct InstructionPrepareOptions {
  std::vector<std::string> records;  // files, directories or globs (ExpandInputPaths)
  std::string output_prefix;         // writes P.bin, P.idx, P.loss_mask.bin, P.loss_mask.idx
  RecordFormatOptions format;
  std::string tokenizer = "byte";    // byte | sentencepiece (sp_model) | model (model_dir)
  std::string sp_model;
  std::string model_dir;             // a Hugging Face folder (LoadModelTokenizer, runtime/tokenizer/model_tokenizer.h)
  int sequence_length = 0;           // > 0: the long-record policy is applied against it
  BadRecordPolicy on_bad_record = BadRecordPolicy::kRefuse;
  LongRecordPolicy on_long_record = LongRecordPolicy::kRefuse;
  int workers = 1;                   // parsing and tokenizing threads
};

struct InstructionPrepareSummary {
  int64_t input_files = 0;
  int64_t records_read = 0;
  int64_t records_written = 0;
  int64_t bad_records_skipped = 0;
  int64_t long_records_skipped = 0;
  int64_t long_records_truncated = 0;
  int64_t tokens = 0;                // bos and eos included
  int64_t label_tokens = 0;          // tokens in the loss
  int64_t longest_record = 0;        // tokens, after truncation
  int64_t vocab_size = 0;
  std::string tokenizer;
  std::vector<std::string> files_written;
  // The first few skipped records, "file:line: why", for the user to look at.
  std::vector<std::string> skipped_examples;
  double seconds = 0;

  // One line: "alpaca: 1 input file, 52002 records -> 52002 written (0 bad, 3 long skipped), ...".
  std::string ToString() const;
};

// Reads every record file in order, renders each record (RenderRecord),
// encodes it (EncodeRecord) on `workers` threads, applies the bad- and
// long-record policies and writes the dataset atomically. On refusal nothing
// is written (an earlier dataset at the prefix stays). The output does not
// depend on `workers`. Errors name the file, line and field at fault.
absl::StatusOr<InstructionPrepareSummary> PrepareInstructionDataset(const InstructionPrepareOptions& options);

}  // namespace dslaunch::runtime
