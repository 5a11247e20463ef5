// What instruction-data preparation and sampling do with records that cannot
// be used as they are (job keys data.on_bad_record and data.on_long_record).
//
// Note [Long records]
// A record of n tokens (bos and eos included) fills n - 1 positions of a
// sample: its last token, eos, is only ever a target (as in GptSamples, where
// a sample is sequence_length + 1 tokens). It fits when n - 1 <=
// sequence_length. One that does not is never cut silently:
//   refuse    (default) preparation stops, naming the record's file and line
//             (or, when samples are made, the document);
//   skip      the record is left out, and counted;
//   truncate  its first sequence_length + 1 tokens are kept, and counted.
// Hugging Face's `truncation=True` (and Stanford Alpaca's script) truncate
// without a word; that cuts the response and its eos, so the model learns
// not to stop. Hence the default refuses, and truncate is there for those
// who want Hugging Face's behaviour, reported.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dslaunch::runtime {

// A malformed record: refuse (default) stops preparation with the record's
// file, line and field; skip leaves it out, counted and reported.
enum class BadRecordPolicy { kRefuse, kSkip };
enum class LongRecordPolicy { kRefuse, kSkip, kTruncate };  // Note [Long records]

absl::StatusOr<BadRecordPolicy> ParseBadRecordPolicy(absl::string_view name);    // refuse | skip
absl::StatusOr<LongRecordPolicy> ParseLongRecordPolicy(absl::string_view name);  // refuse | skip | truncate
absl::string_view LongRecordPolicyName(LongRecordPolicy policy);

// The sample positions a record of `tokens` tokens fills (Note [Long records]).
inline int64_t RecordPositions(int64_t tokens) { return tokens - 1; }

}  // namespace dslaunch::runtime
