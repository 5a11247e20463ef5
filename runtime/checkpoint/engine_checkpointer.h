// Saving an Engine's state as a sharded checkpoint and loading it back: what
// each rank writes, and the commit protocol of checkpoint_files.h around it
// (Note [Atomic checkpoint commit], Note [Resuming from a verified
// checkpoint]).
//
//   EngineCheckpointer checkpointer(*engine);            // FileSystem::Default()
//   DS_RETURN_IF_ERROR(checkpointer.Save(dir, "global_step100", {{"consumed_samples", n}}));
//   DS_ASSIGN_OR_RETURN(ClientState client, checkpointer.Load(dir));  // the tag `latest` names
//
// The checkpointer depends on the engine, never the other way round: the
// engine knows nothing of files. It reads the engine's training state through
// the friendship Engine grants it (the counters, loss scaler, optimizer and
// ZeRO shards are the engine's private state, and this is the one place
// outside it that needs all of them).
//
// Every file is written and read through `fs` (runtime/fs/file_system.h), so
// a test can fail or hold a save at any step with a FaultInjectingFileSystem.
// Save and Load are collectives over the engine's data-parallel group: every
// rank calls them. Not thread-safe.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/checkpoint/checkpoint_files.h"
#include "runtime/checkpoint/checksummed_file.h"
#include "runtime/engine/engine.h"
#include "runtime/fs/file_system.h"
#include "runtime/hf/hf_export.h"

namespace dslaunch::runtime {

class EngineCheckpointer {
 public:
  // `engine` and `fs` must outlive the checkpointer.
  explicit EngineCheckpointer(Engine& engine, FileSystem& fs = FileSystem::Default());

  // Writes <dir>/<tag> and points `latest` at it; then removes the oldest
  // checkpoints of earlier steps beyond `keep` (0: keep all). A failure (or a
  // crash) at any point leaves the previous checkpoint and `latest` intact
  // and no partial folder (rank 0 removes it); the error names the file and
  // the errno, or, on the other ranks, says that a peer failed. A removal
  // that fails leaves the new checkpoint committed (OK) and a line in notes().
  absl::Status Save(const std::string& dir, const std::string& tag, const ClientState& client_state, int keep = 0);
  // Loads `tag` ("" = the one `latest` names) once it verifies, every rank
  // checking its share of the files (Note [Resuming together]). NotFound when
  // there is none; a failure leaves the engine as it was, on every rank.
  absl::StatusOr<ClientState> Load(const std::string& dir, const std::string& tag = "");

  // Note [Resuming together]: the resume of a job. Rank 0 first finishes a
  // save of an existing tag that was cut short (Note [Replacing a tag]);
  // then every rank lists the candidates (ResumeCandidates), the ranks check
  // that they list the same ones, and each candidate in turn is verified
  // with every rank hashing its share of the files (rank k the files k,
  // k + N, ... of the commit record: each file is read once, not once per
  // rank), and is taken only when every rank's share verified: so all ranks
  // take the same checkpoint, whatever one of them fails to read. The first
  // taken is loaded. `preferred` is the controller's committed tag ("" for
  // none). An error (a rank lists other checkpoints: a folder not shared by
  // every host) is the same on every rank.
  struct Resumed {
    ResumeChoice choice;  // choice.tag empty: nothing verified (or nothing there)
    ClientState client;   // the loaded checkpoint's
  };
  absl::StatusOr<Resumed> Resume(const std::string& dir, const std::string& preferred);

  // What the last Save or Resume found worth a line beyond its status, on
  // this rank (a rotation that failed, a replacement finished).
  const std::vector<std::string>& notes() const { return notes_; }

  // The model as a Hugging Face folder (runtime/hf/hf_export.h): every rank
  // gathers the parameters (ZeRO-3: one unit at a time, Note [Streamed
  // export at ZeRO-3]), rank 0 writes them, one tensor at a time, in
  // options.dtype. The values are the module's (the 16-bit ones
  // with fp16/bf16: what the model computes with). A collective; the error of
  // a failed write is rank 0's. LoRA adapters (runtime/model/lora.h) are
  // merged into the weights they adapt: the folder is the fine-tuned model.
  absl::Status ExportHuggingFace(const HfExportOptions& options);
  // The LoRA adapters alone as a PEFT adapter folder (adapter_config.json
  // from options.config_json, adapter_model.safetensors with PEFT's names),
  // in options.dtype; options.folder is where. A collective, as above.
  absl::Status ExportPeftAdapter(const HfExportOptions& options);

 private:
  // Runs `write_on_rank0(make_whole)` on world rank 0, which calls
  // make_whole(name) before it reads parameter `name`, in the order `reads`
  // lists them; the parameters are released again after. Note [Streamed
  // export at ZeRO-3]: at stage 3 that gathers one unit at a time, every rank
  // the same sequence (the others, and a writer that stopped early, walk the
  // rest of `reads`), so no rank holds the whole model at once. Otherwise
  // the parameters are gathered first, unless `gathered` (a model-parallel
  // export gathered what it writes itself). A collective.
  using MakeWhole = std::function<absl::Status(const std::string& parameter)>;
  absl::Status ExportGathered(const std::vector<std::string>& reads, bool gathered,
                              const std::function<absl::Status(const MakeWhole&)>& write_on_rank0);
  // This rank's part, written and hashed as LibTorch's archive streams it.
  absl::StatusOr<FileDigest> WriteRankFile(const std::string& path, const ClientState& client_state, int rank);
  // ZeRO-3 with stage3_gather_16bit_weights_on_model_save: the whole model
  // into `folder`/Engine::kGatheredWeightsFile (rank 0 writes; every rank gathers).
  absl::Status SaveGatheredWeights(const std::string& folder);
  // ZeRO: this rank's ranges from a checkpoint of any data-parallel size.
  absl::Status LoadZeroShards(const std::string& folder);
  // Note [NVMe offload]: the swapped master and moments read into memory for
  // a save or a load, and dropped again (after a load written back to the
  // swap files and into the parameters first). No-ops without NVMe offload.
  std::vector<std::pair<ZeroPartition*, ShardAdam*>> SwappedPartitions() const;
  // `read`: the swap files' values (a save); otherwise zeros of their shape
  // for a load to overwrite whole, so that a damaged swap file never stands
  // between a run and its checkpoint.
  absl::Status StageSwappedState(bool read);
  absl::Status UnstageSwappedState(bool write_back);

  // This rank's file of a checkpoint: index (p·T + t)·D + d of P·T·D files
  // (Note [Tensor-parallel checkpoints]).
  struct RankFileIndex {
    int index = 0;
    int files = 1;
  };
  RankFileIndex FileIndex() const;
  // Whether every rank of the job passed the same `text` as rank 0 (a collective).
  absl::StatusOr<bool> SameOnEveryRank(const std::string& text);
  // Every rank verifies its share of `tag` (VerifyCheckpointShare); the
  // number of ranks whose share failed, this rank's failure in `own`.
  absl::StatusOr<int> VerifyTogether(const std::string& dir, const std::string& tag, absl::Status* own,
                                     bool* legacy);
  // Load once verified: what each rank reads on its own is agreed on before
  // the gathers, and the outcome after them.
  absl::StatusOr<ClientState> LoadVerified(const std::string& dir, const std::string& tag);
  // `own` on every rank when it failed here; else a peer failure when another
  // rank's failed; else OK (a collective).
  absl::Status Agree(absl::Status own, const std::string& what);

  Engine& engine_;
  FileSystem& fs_;
  std::vector<std::string> notes_;
};

}  // namespace dslaunch::runtime
