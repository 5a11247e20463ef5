// The on-disk layout of a checkpoint and its atomic commit.
//
//   <dir>/<tag>/rank_<r>.pt     what rank r saved
//   <dir>/<tag>/COMPLETE        written last inside the folder
//   <dir>/latest                the last committed tag (one line)
//
// Note [Atomic checkpoint commit]
// Ranks write into <dir>/.<tag>.partial/. After every rank has written and
// fsynced its file (a barrier), rank 0 writes COMPLETE, fsyncs the folder,
// renames it to <dir>/<tag> (replacing an older folder of that tag only after
// the new one is complete), fsyncs <dir>, then writes <dir>/latest through a
// temporary file and a rename. A crash at any point leaves the previous
// `latest` naming a complete checkpoint; a leftover .partial folder is
// ignored and removed by the next save of that tag.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dslaunch::runtime {

std::string PartialDir(const std::string& dir, const std::string& tag);
std::string TagDir(const std::string& dir, const std::string& tag);
std::string RankFile(const std::string& folder, int rank);

// Creates a fresh, empty partial folder (rank 0, before the others write).
absl::Status PreparePartial(const std::string& dir, const std::string& tag);
// fsyncs one file (each rank, after writing its part).
absl::Status SyncFile(const std::string& path);
// Rank 0, after every rank's part is written: the commit steps above. Then
// removes the oldest committed tags beyond `keep` (0: keep all).
absl::Status CommitCheckpoint(const std::string& dir, const std::string& tag, int keep);

// The tag `latest` names; NotFound when there is no committed checkpoint.
absl::StatusOr<std::string> ReadLatestTag(const std::string& dir);
// Committed tags (folders with COMPLETE), oldest first by modification order.
std::vector<std::string> CommittedTags(const std::string& dir);

}  // namespace dslaunch::runtime
