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
  // the errno, or, on the other ranks, says that a peer failed.
  absl::Status Save(const std::string& dir, const std::string& tag, const ClientState& client_state, int keep = 0);
  // Loads `tag` ("" = the one `latest` names) once it verifies. NotFound when
  // there is none; a failure leaves the engine as it was.
  absl::StatusOr<ClientState> Load(const std::string& dir, const std::string& tag = "");

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

  Engine& engine_;
  FileSystem& fs_;
};

}  // namespace dslaunch::runtime
