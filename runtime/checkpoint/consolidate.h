// Merging a checkpoint of any ZeRO stage into one fp32 safetensors file that
// Python tools read (`safetensors.torch.load_file`).
//
// ZeRO checkpoints hold the fp32 masters as contiguous ranges of one flat
// vector, rank after rank, in the order of the model's parameters; the
// safetensors data section is exactly that vector (tensors stored back to back
// in the same order), so consolidation streams one rank's range at a time:
// memory stays at one shard, never the model. Stage-0 checkpoints hold the
// whole model in rank 0's file and are copied from it.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "runtime/fs/file_system.h"

namespace dslaunch::runtime {

struct ConsolidateSummary {
  std::string tag;
  int64_t tensors = 0;
  int64_t elements = 0;
  int ranks_read = 0;
};

struct ConsolidateOptions {
  // Export NaN or infinite values instead of refusing (a diverged run, kept
  // for inspection).
  bool allow_nonfinite = false;
  // Where the checkpoint is verified and the output written (tests pass a
  // FaultInjectingFileSystem).
  FileSystem* fs = &FileSystem::Default();
};

// `tag` empty: the one `latest` names. The checkpoint is verified first
// (VerifyCheckpoint); a value that is not finite fails the export, naming the
// rank file, unless options.allow_nonfinite. The output appears whole or not
// at all.
absl::StatusOr<ConsolidateSummary> ConsolidateCheckpoint(const std::string& dir, const std::string& tag,
                                                         const std::string& output,
                                                         const ConsolidateOptions& options = {});

// The same values without a file: the checkpoint's parameters in host memory
// as fp32 tensors (views into one buffer), named and ordered as
// ConsolidateCheckpoint writes them. What generation reads a training
// checkpoint with (no conversion step). `summary` may be null.
absl::StatusOr<std::vector<std::pair<std::string, torch::Tensor>>> ConsolidateCheckpointInMemory(
    const std::string& dir, const std::string& tag, const ConsolidateOptions& options = {},
    ConsolidateSummary* summary = nullptr);

}  // namespace dslaunch::runtime
