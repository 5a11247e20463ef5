// Note [Checkpoint commit record]
// A committed checkpoint folder holds COMPLETE, written last, fsynced, before
// the folder is renamed into place. It is the commit record: what the
// checkpoint is and every file that belongs to it, with its size and hash.
//
//   dslaunch-checkpoint 1
//   tag global_step20
//   step 20
//   ranks 2
//   file rank_0.pt 88128 9f3c0a51d2e6b7a4
//   file rank_1.pt 88080 03b1c2d4e5f60718
//   end
//
// `ranks` is the data-parallel size that saved it; rank_0.pt .. rank_<ranks-1>.pt
// must all be listed. `end` marks a record written whole. A checkpoint is
// used only after every listed file has the recorded size and hash
// (VerifyCheckpoint, checkpoint_files.h).
//
// A COMPLETE of one line (the tag) comes from dslaunch before this record
// existed: such a checkpoint is loaded without verification, and says so.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/checkpoint/checksummed_file.h"

namespace dslaunch::runtime {

struct CheckpointManifest {
  struct File {
    std::string name;  // relative to the checkpoint folder
    FileDigest digest;
  };
  std::string tag;
  int64_t step = -1;  // the engine's global step; -1 when unknown (legacy)
  int ranks = 0;
  std::vector<File> files;
  bool legacy = false;  // a one-line COMPLETE: nothing to verify against

  std::string Serialize() const;
  // `path` names the record in errors ("…/COMPLETE:3: …").
  static absl::StatusOr<CheckpointManifest> Parse(const std::string& text, const std::string& path);
  const File* Find(const std::string& name) const;
};

}  // namespace dslaunch::runtime
