// Text files -> tokenizer -> indexed dataset: what `dsprep` does, as a library
// call so the runtime can prepare `data.prepared` on first use.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dslaunch::runtime {

inline constexpr int kDefaultSentencePieceVocab = 8000;

struct PrepareOptions {
  std::vector<std::string> inputs;   // files, directories or globs (ExpandInputPaths)
  std::string output_prefix;         // writes <prefix>.bin, <prefix>.idx (and <prefix>.model)
  std::string tokenizer = "byte";    // byte | sentencepiece | model (model_dir's: LoadModelTokenizer)
  int vocab_size = 0;                // sentencepiece training; 0: kDefaultSentencePieceVocab
  std::string sp_model;              // sentencepiece: use this model instead of training one
  std::string model_dir;             // model: a Hugging Face model folder
  bool split_on_percent_lines = false;  // fortune files (TextCorpusOptions)
  int workers = 1;                   // tokenizing threads
};

struct PrepareSummary {
  int64_t input_files = 0;
  int64_t documents = 0;
  int64_t tokens = 0;                // eos included
  int64_t vocab_size = 0;
  std::string tokenizer;
  std::vector<std::string> files_written;
  double seconds = 0;                // the whole preparation
  double tokenize_seconds = 0;       // reading, encoding and writing (no training)

  double tokens_per_second() const { return tokenize_seconds > 0 ? tokens / tokenize_seconds : 0; }
  // One line: "12 files, 345 documents, 67890 tokens, vocab 257 (byte) -> a.bin a.idx in 0.1 s (678900 tokens/s)".
  std::string ToString() const;
};

// Expands the inputs, trains a sentencepiece model to <prefix>.model first
// when asked for one without sp_model, then reads every document, encodes it
// on `workers` threads, appends eos and writes the dataset (atomically: see
// IndexedDatasetWriter). The output does not depend on `workers`. Errors name
// the input, option or file at fault. Not safe to run twice at once on one
// prefix (the runtime lets only rank 0 prepare).
absl::StatusOr<PrepareSummary> PrepareDataset(const PrepareOptions& options);

}  // namespace dslaunch::runtime
