// The job file's instruction-data keys (`data.format` other than text) ->
// the options of the data module's preparation and samples. Plain C++: the
// trainer prepares with PrepareInstructionDataset and reads batches from
// InstructionSamples (Note [Instruction sample layout]).
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "runtime/config/job_config.h"
#include "runtime/data/instruction_samples.h"
#include "runtime/data/prepare_instructions.h"

namespace dslaunch::runtime {

// REQUIRES: job.data.instruction(). The records of data.records into
// data.prepared, tokenized with data.tokenizer (model: model.from's folder)
// and the long-record policy applied against model.sequence_length.
absl::StatusOr<InstructionPrepareOptions> InstructionPrepareOptionsFor(const JobConfig& job);

// REQUIRES: job.data.instruction(). Samples of model.sequence_length over
// documents [first_document, end_document) (-1: to the end), padded with
// `pad_id` (the tokenizer's pad, else its eos), shuffled with train.seed.
absl::StatusOr<InstructionSamplesOptions> InstructionSamplesOptionsFor(const JobConfig& job, int32_t pad_id,
                                                                      int64_t first_document = 0,
                                                                      int64_t end_document = -1);

}  // namespace dslaunch::runtime
