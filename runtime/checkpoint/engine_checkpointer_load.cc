// EngineCheckpointer's loads: Load, and the resume of a job that every rank
// agrees on (Note [Resuming together] in engine_checkpointer.h).
#include <ATen/CPUGeneratorImpl.h>

#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "runtime/checkpoint/checkpoint_archive.h"
#include "runtime/checkpoint/checkpoint_files.h"
#include "runtime/checkpoint/engine_checkpointer.h"
#include "runtime/comm/peer_failure.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace dslaunch::runtime {

absl::StatusOr<bool> EngineCheckpointer::SameOnEveryRank(const std::string& text) {
  Communicator* everyone = engine_.parallel_->world();
  if (everyone == nullptr || everyone->size() == 1) return true;
  const auto digest = static_cast<int64_t>(XXH3_64bits(text.data(), text.size()));
  bool differs = false;
  try {
    torch::Tensor first =
        torch::full({1}, digest, torch::TensorOptions().dtype(torch::kLong).device(engine_.device_));
    DS_RETURN_IF_ERROR(everyone->Broadcast(first, 0));
    differs = first.item<int64_t>() != digest;
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("comparing the ranks' views: ", e.what_without_backtrace()));
  }
  DS_ASSIGN_OR_RETURN(int failed, engine_.CountFailedRanks(differs));
  return failed == 0;
}

absl::StatusOr<int> EngineCheckpointer::VerifyTogether(const std::string& dir, const std::string& tag,
                                                       absl::Status* own, bool* legacy) {
  const RankFileIndex file = FileIndex();
  absl::StatusOr<CheckpointManifest> verified = VerifyCheckpointShare(fs_, dir, tag, file.index, file.files);
  *own = verified.status();
  if (legacy != nullptr) *legacy = verified.ok() && verified->legacy;
  return engine_.CountFailedRanks(!verified.ok());
}

absl::StatusOr<ClientState> EngineCheckpointer::Load(const std::string& dir, const std::string& tag) {
  // Note [Delayed parameter update]: no host step may still write the shard
  // the load replaces.
  if (absl::Status applied = engine_.ApplyPendingUpdate(); !applied.ok()) return applied;
  absl::StatusOr<std::string> chosen = tag;
  if (tag.empty()) chosen = ReadLatestTag(fs_, dir);
  // Every rank the same tag, or the same failure on every rank.
  const std::string read = chosen.ok() ? *chosen : absl::StrCat("\n", chosen.status().ToString());
  DS_ASSIGN_OR_RETURN(bool same, SameOnEveryRank(read));
  if (!chosen.ok()) return chosen.status();
  if (!same) {
    return absl::FailedPreconditionError(absl::StrCat(
        "load checkpoint from ", dir, ": the ranks read different tags from its 'latest' (is the folder shared by "
        "every host, and unchanged while the job loads?)"));
  }
  // Note [Resuming from a verified checkpoint]: nothing is read before every
  // file has its recorded size and hash; a failure leaves the engine as it was.
  absl::Status own;
  DS_ASSIGN_OR_RETURN(int failed, VerifyTogether(dir, *chosen, &own, nullptr));
  if (!own.ok()) return own;
  if (failed > 0) {
    return absl::DataLossError(absl::StrCat("checkpoint ", TagDir(dir, *chosen), " does not verify: ", failed,
                                            " other rank(s) found a file of it that does not (their errors name it)"));
  }
  return LoadVerified(dir, *chosen);
}

absl::StatusOr<EngineCheckpointer::Resumed> EngineCheckpointer::Resume(const std::string& dir,
                                                                     const std::string& preferred) {
  notes_.clear();
  if (absl::Status applied = engine_.ApplyPendingUpdate(); !applied.ok()) return applied;
  const bool first = FileIndex().index == 0;
  Resumed resumed;
  // Note [Replacing a tag]: one process repairs, before anyone lists.
  absl::StatusOr<std::vector<std::string>> repaired = std::vector<std::string>{};
  if (first) repaired = RecoverInterruptedReplace(fs_, dir);
  DS_ASSIGN_OR_RETURN(int failed, engine_.CountFailedRanks(!repaired.ok()));
  if (!repaired.ok()) return repaired.status();
  if (failed > 0) {
    return PeerFailureError(absl::StrCat("resume from ", dir, ": rank 0 could not finish a save that was cut short"));
  }
  resumed.choice.notes = *repaired;
  std::vector<std::string> listed_notes;
  const std::vector<std::string> candidates = ResumeCandidates(fs_, dir, preferred, &listed_notes);
  if (first) resumed.choice.notes.insert(resumed.choice.notes.end(), listed_notes.begin(), listed_notes.end());
  DS_ASSIGN_OR_RETURN(bool same, SameOnEveryRank(absl::StrJoin(candidates, "\n")));
  if (!same) {
    return absl::FailedPreconditionError(absl::StrCat(
        "resume from ", dir, ": the ranks find different committed checkpoints there (", candidates.size(),
        " on this one: ", candidates.empty() ? "none" : absl::StrJoin(candidates, ", "),
        "): is checkpoint.dir a folder every host shares, unchanged while the job starts?"));
  }
  for (const std::string& candidate : candidates) {
    absl::Status own;
    bool legacy = false;
    DS_ASSIGN_OR_RETURN(int failed_shares, VerifyTogether(dir, candidate, &own, &legacy));
    if (failed_shares == 0) {
      resumed.choice.tag = candidate;
      resumed.choice.legacy = legacy;
      if (legacy && first) {
        resumed.choice.notes.push_back(absl::StrCat("checkpoint ", TagDir(dir, candidate),
                                                    " was written before commit records had checksums: loaded "
                                                    "unverified"));
      }
      DS_ASSIGN_OR_RETURN(resumed.client, LoadVerified(dir, candidate));
      return resumed;
    }
    ++resumed.choice.skipped;
    if (!own.ok()) {
      resumed.choice.notes.push_back(absl::StrCat("checkpoint skipped: ", own.message()));
    } else if (first) {
      resumed.choice.notes.push_back(absl::StrCat("checkpoint skipped: ", TagDir(dir, candidate), ": ",
                                                  failed_shares,
                                                  " other rank(s) found a file of it that does not verify (their "
                                                  "lines name it)"));
    }
  }
  return resumed;
}

absl::Status EngineCheckpointer::Agree(absl::Status own, const std::string& what) {
  DS_ASSIGN_OR_RETURN(int failed, engine_.CountFailedRanks(!own.ok()));
  if (!own.ok()) return own;
  if (failed > 0) return PeerFailureError(absl::StrCat(what, ": ", failed, " other rank(s) failed (their errors say why)"));
  return absl::OkStatus();
}

namespace {

// `step`, with LibTorch's and TorchScript's exceptions as DataLoss naming the folder.
absl::Status Guarded(const std::string& folder, const std::function<absl::Status()>& step) {
  try {
    return step();
  } catch (const c10::Error& e) {
    return absl::DataLossError(absl::StrCat("load checkpoint ", folder, ": ", e.what_without_backtrace()));
  } catch (const std::exception& e) {  // TorchScript archive errors are not c10::Errors
    return absl::DataLossError(absl::StrCat("load checkpoint ", folder, ": ", e.what()));
  }
}

}  // namespace

absl::StatusOr<ClientState> EngineCheckpointer::LoadVerified(const std::string& dir, const std::string& chosen) {
  const std::string folder = TagDir(dir, chosen);
  const int rank = FileIndex().index;
  ClientState client;
  torch::NoGradGuard no_grad;
  // Tensors remember the device they were saved from (rank 0's cuda:0).
  // The per-parameter optimizer state (fp32 at stage 0, no flat shard) is
  // used as loaded, so it goes onto this rank's device; everything else is
  // copied into place, and the flat shards' copies in these files are
  // never read here, so they stay in host memory (12 bytes per parameter).
  const torch::Device load_device = engine_.zero_ ? torch::Device(torch::kCPU) : engine_.device_;
  torch::serialize::InputArchive shared, own;
  // This rank's own part; a rank that did not exist when the checkpoint was
  // written continues with rank 0's counters and client state.
  const std::string own_path = RankFile(folder, rank);
  const bool has_own = fs_.Exists(own_path);
  // Note [Resuming together]: what each rank reads on its own, agreed on
  // before the collectives (a rank that failed to read never leaves the
  // others waiting in a gather).
  absl::Status read = Guarded(folder, [&]() -> absl::Status {
    DS_RETURN_IF_ERROR(LoadArchive(fs_, RankFile(folder, 0), load_device, shared));
    if (has_own && rank != 0) DS_RETURN_IF_ERROR(LoadArchive(fs_, own_path, load_device, own));
    // The optimizer state is either one flat fp32 vector cut into ranges (any
    // ZeRO stage or mixed precision) or per-parameter (fp32 at stage 0): a
    // checkpoint loads only into an engine that keeps it the same way.
    c10::IValue probe;
    const bool saved_flat = shared.try_read("zero/shards", probe);
    if (saved_flat != (engine_.zero_ != nullptr)) {
      auto describe = [](bool flat) {
        return flat ? "a flat fp32 master and optimizer state (mixed precision, or ZeRO stage 1-3)"
                    : "per-parameter fp32 optimizer state (fp32 training at ZeRO stage 0)";
      };
      return absl::FailedPreconditionError(absl::StrCat(
          "load checkpoint ", folder, ": it holds ", describe(saved_flat), ", but this job keeps ",
          describe(engine_.zero_ != nullptr), "; resume with the precision and ZeRO stage it was saved with, or "
          "start a new checkpoint.dir"));
    }
    for (auto& item : engine_.model_->named_parameters()) {
      if (engine_.zero_) break;  // rebuilt from the shards below
      torch::Tensor value;
      shared.read("model/" + item.key(), value);
      item.value().copy_(value);
    }
    for (auto& item : engine_.model_->named_buffers()) {
      torch::Tensor value;
      shared.read("model/" + item.key(), value, /*is_buffer=*/true);
      item.value().copy_(value);
    }
    if (engine_.compute_dtype_ != torch::kFloat) {
      for (size_t i = 0; i < engine_.master_params_.size(); ++i) {
        torch::Tensor value;
        shared.read(absl::StrCat("master/", i), value);
        engine_.master_params_[i].copy_(value);
      }
    }
    if (engine_.optimizer_) {
      torch::serialize::InputArchive optimizer;
      shared.read("optimizer", optimizer);
      engine_.optimizer_->load(optimizer);
    }
    if (engine_.zero_) {
      // Note [NVMe offload]: loaded into memory, then into the swap files.
      DS_RETURN_IF_ERROR(StageSwappedState(/*read=*/false));
      absl::Status loaded = LoadZeroShards(folder);
      absl::Status unstaged = UnstageSwappedState(/*write_back=*/loaded.ok());
      if (!loaded.ok()) return loaded;
      if (!unstaged.ok()) return unstaged;
    }
    return absl::OkStatus();
  });
  DS_RETURN_IF_ERROR(Agree(read, absl::StrCat("load checkpoint ", folder)));
  absl::Status restored = Guarded(folder, [&]() -> absl::Status {
    if (engine_.zero_) {
      DS_RETURN_IF_ERROR(engine_.zero_->GatherParameters());
      if (engine_.expert_zero_) DS_RETURN_IF_ERROR(engine_.expert_zero_->GatherParameters());
    }
    torch::serialize::InputArchive& mine = (has_own && rank != 0) ? own : shared;
    engine_.micro_steps_ = ReadInt(mine, "engine/micro_steps");
    engine_.global_steps_ = ReadInt(mine, "engine/global_steps");
    engine_.skipped_steps_ = ReadInt(mine, "engine/skipped_steps");
    engine_.successful_steps_ = ReadInt(mine, "engine/successful_steps");
    if (engine_.scaler_) {
      LossScaler::State s;
      s.scale = ReadDouble(mine, "scaler/scale");
      s.hysteresis = static_cast<int>(ReadInt(mine, "scaler/hysteresis"));
      s.last_overflow_iteration = ReadInt(mine, "scaler/last_overflow_iteration");
      s.iteration = ReadInt(mine, "scaler/iteration");
      s.skipped_steps = ReadInt(mine, "scaler/skipped_steps");
      s.overflows_at_min_scale = ReadInt(mine, "scaler/overflows_at_min_scale");
      engine_.scaler_->Restore(s);
    }
    if (has_own) {
      torch::Tensor state;
      mine.read("rng/cpu", state);
      state = state.to(torch::kCPU);  // the archive may have been loaded onto the device
      auto generator = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(generator.mutex());
      generator.set_state(state);
    }
    c10::IValue keys;
    mine.read("client/__keys", keys);
    for (absl::string_view key : absl::StrSplit(keys.toStringRef(), '\n', absl::SkipEmpty())) {
      client[std::string(key)] = ReadInt(mine, absl::StrCat("client/", key));
    }
    return absl::OkStatus();
  });
  DS_RETURN_IF_ERROR(Agree(restored, absl::StrCat("load checkpoint ", folder)));
  engine_.ApplyLrAndMomentum(engine_.schedule_->LrAt(engine_.successful_steps_));
  return client;
}

}  // namespace dslaunch::runtime
