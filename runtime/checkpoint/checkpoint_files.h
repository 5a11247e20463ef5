// The on-disk layout of a checkpoint, its atomic commit, its verification and
// the choice of the checkpoint to resume from.
//
//   <dir>/<tag>/rank_<r>.pt     what rank r saved
//   <dir>/<tag>/COMPLETE        the commit record, written last (Note [Checkpoint commit record])
//   <dir>/latest                the last committed tag (one line)
//
// Note [Atomic checkpoint commit]
// Ranks write into <dir>/.<tag>.partial/, each hashing its file as it writes
// and recording the digest beside it (rank_<r>.digest). After every rank has
// written and fsynced its file (a collective), rank 0 writes COMPLETE, which
// lists every file with its size and hash, fsyncs the folder, renames it to
// <dir>/<tag> (replacing an older folder of that tag only after the new one
// is complete), fsyncs <dir>, then writes <dir>/latest through a temporary
// file and a rename. Every write, fsync, close and rename is checked; a
// failure before the rename removes the partial folder and leaves `latest`
// and every older checkpoint as they were. A crash at any point leaves the
// previous `latest` naming a complete checkpoint; a leftover .partial folder
// is ignored and removed by the next save of that tag.
//
// Note [Replacing a tag]
// A save of a tag that exists (a fixed tag, a run that did not resume from
// it) cannot rename over a folder: the old folder moves to <dir>/.<tag>.old,
// the new one is renamed in, <dir> is fsynced, and only then does the old one
// go. A crash between the two renames leaves no <tag> folder, and `latest`
// may name it: RecoverInterruptedReplace, run before a resume chooses, puts
// the new folder in place when it holds its commit record (written before
// either rename) and the old one back otherwise, so the tag is never lost.
//
// Rotation (checkpoint.keep) removes a checkpoint's commit record first and
// fsyncs its folder before deleting the rest: a deletion cut short leaves a
// folder that is no longer a committed checkpoint, never one whose record
// outlived its files. A rotation that fails leaves the new checkpoint
// committed (EngineCheckpointer::Save says so and goes on).
//
// Every function does its I/O through the FileSystem it is given
// (runtime/fs/file_system.h): FileSystem::Default() in a job, a
// FaultInjectingFileSystem in the tests that fail or interrupt a save at each
// of the steps above.
//
// Note [Resuming from a verified checkpoint]
// Nothing is loaded before it verifies (every listed file present, of its
// size and hash). The checkpoint to resume from is the one the controller
// recorded as committed or, without one, the one `latest` names; when that
// one is unreadable or fails verification, it is named in one line and the
// newest committed checkpoint that verifies is used instead. Only when none
// verifies does training start fresh, and it says so. Rotation
// (checkpoint.keep) deletes only checkpoints of earlier steps than the one
// just committed, so a fresh start never deletes the checkpoints it skipped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/checkpoint/checkpoint_manifest.h"
#include "runtime/checkpoint/checksummed_file.h"
#include "runtime/fs/file_system.h"

namespace dslaunch::runtime {

std::string PartialDir(const std::string& dir, const std::string& tag);
std::string TagDir(const std::string& dir, const std::string& tag);
// Where a tag's committed folder waits while a save of the same tag replaces it.
std::string OldDir(const std::string& dir, const std::string& tag);
std::string RankFileName(int rank);  // rank_<r>.pt
std::string RankFile(const std::string& folder, int rank);

// A tag is one plain folder name inside the checkpoint folder: not empty, at
// most 200 bytes, no '/', no leading '.', no control characters, not
// `latest` (or its temporary). `latest` naming anything else
// (`../other/global_step30`) is refused.
absl::Status CheckTag(const std::string& tag);

// Creates a fresh, empty partial folder (rank 0, before the others write).
absl::Status PreparePartial(FileSystem& fs, const std::string& dir, const std::string& tag);
// Each rank, once its file is written and fsynced: its digest for the record.
absl::Status RecordRankFile(FileSystem& fs, const std::string& partial_folder, int rank, const FileDigest& digest);
// Rank 0, after every rank has recorded its file: the commit steps above.
// `ranks` is the number of rank files there must be.
absl::Status CommitCheckpoint(FileSystem& fs, const std::string& dir, const std::string& tag, int64_t step, int ranks);
// Rank 0, once `tag` (of `step`) is committed: removes the oldest committed
// checkpoints of earlier steps beyond `keep` (0: keep all), each by its
// commit record first. A failure here leaves `tag` committed.
absl::Status RotateCheckpoints(FileSystem& fs, const std::string& dir, const std::string& tag, int64_t step, int keep);
// Note [Replacing a tag]: finishes or undoes a save of an existing tag that
// was cut short while its old folder was aside (<dir>/.<tag>.old), so that
// the tag's folder exists again; one line for each. Run by one process
// before a resume chooses (EngineCheckpointer::Resume: rank 0).
absl::StatusOr<std::vector<std::string>> RecoverInterruptedReplace(FileSystem& fs, const std::string& dir);
// Removes a partial folder (a save that failed).
absl::Status RemovePartial(FileSystem& fs, const std::string& dir, const std::string& tag);

// The tag `latest` names. NotFound when there is no `latest`; DataLoss when it
// is unreadable, empty, not a tag inside `dir`, or names no committed folder.
absl::StatusOr<std::string> ReadLatestTag(FileSystem& fs, const std::string& dir);
// The commit record of <dir>/<tag>, parsed, not verified.
absl::StatusOr<CheckpointManifest> ReadManifest(FileSystem& fs, const std::string& dir, const std::string& tag);
// The record, once every file it lists has its recorded size and hash (and
// every rank file is listed). DataLoss naming the file otherwise.
absl::StatusOr<CheckpointManifest> VerifyCheckpoint(FileSystem& fs, const std::string& dir, const std::string& tag);
// The same for one share of the listed files (the ones at indexes share,
// share + shares, ...: Note [Resuming together]); the record's own checks
// are made in every share.
absl::StatusOr<CheckpointManifest> VerifyCheckpointShare(FileSystem& fs, const std::string& dir,
                                                         const std::string& tag, int share, int shares);
// Committed tags (folders with COMPLETE), oldest first: by recorded step,
// then by the record's modification time.
std::vector<std::string> CommittedTags(FileSystem& fs, const std::string& dir);

struct ResumeChoice {
  std::string tag;                 // empty: nothing verifies (or nothing there)
  std::vector<std::string> notes;  // one line per checkpoint skipped and why
  int skipped = 0;
  bool legacy = false;  // chosen from before commit records: not verified
};
// Note [Resuming from a verified checkpoint]: the tags to try, in order:
// `preferred` (the controller's committed tag, "" for none) or the one
// `latest` names, then the committed ones, newest first (none newer than
// `preferred`). Why `latest` is not used goes to `notes`.
std::vector<std::string> ResumeCandidates(FileSystem& fs, const std::string& dir, const std::string& preferred,
                                          std::vector<std::string>* notes);
// The first of them that verifies, in one process (EngineCheckpointer::Resume
// is the collective one).
ResumeChoice ChooseResumeCheckpoint(FileSystem& fs, const std::string& dir, const std::string& preferred);

}  // namespace dslaunch::runtime
