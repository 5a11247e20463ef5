// EngineCheckpointer (engine_checkpointer.h): what each rank writes, and the
// commit protocol of checkpoint_files.h around it.
//
// With data parallelism (ZeRO stage 0) model, master weights and optimizer
// state are identical on every rank, so rank 0 writes them once; every rank
// writes its own counters, RNG state and client state (the sampler's
// position), so a resumed run continues exactly where it stopped.
#include "runtime/checkpoint/engine_checkpointer.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cstring>
#include <functional>
#include <limits>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "runtime/checkpoint/checkpoint_files.h"
#include "runtime/checkpoint/safetensors_writer.h"
#include "runtime/checkpoint/zero_layout.h"
#include "runtime/comm/peer_failure.h"
#include "runtime/model/lora.h"

namespace dslaunch::runtime {
namespace {


int64_t ReadInt(torch::serialize::InputArchive& archive, const std::string& key) {
  c10::IValue value;
  archive.read(key, value);
  return value.toInt();
}

double ReadDouble(torch::serialize::InputArchive& archive, const std::string& key) {
  c10::IValue value;
  archive.read(key, value);
  return value.toDouble();
}

// Reads a LibTorch archive through `fs`, at the offsets its zip index names.
// A failed read is the error (LibTorch's own message only says it is short).
absl::Status LoadArchive(FileSystem& fs, const std::string& path, torch::Device device,
                         torch::serialize::InputArchive& archive) {
  DS_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file, fs.NewRandomAccessFile(path));
  absl::Status read_error;
  auto read = [&](uint64_t offset, void* buffer, size_t size) -> size_t {
    absl::StatusOr<size_t> n = file->Read(offset, static_cast<char*>(buffer), size);
    if (!n.ok()) {
      if (read_error.ok()) read_error = n.status();
      return 0;
    }
    return *n;
  };
  try {
    archive.load_from(read, [&]() -> size_t { return static_cast<size_t>(file->size()); }, device);
  } catch (const c10::Error& e) {
    if (!read_error.ok()) return read_error;
    return absl::DataLossError(absl::StrCat("load ", path, ": ", e.what_without_backtrace()));
  } catch (const std::exception& e) {  // TorchScript archive errors are not c10::Errors
    if (!read_error.ok()) return read_error;
    return absl::DataLossError(absl::StrCat("load ", path, ": ", e.what()));
  }
  return read_error;
}

// Checkpoint files are named by data-parallel rank; the ranks of a tensor
// group would overwrite each other's slices.
absl::Status RefuseTensorParallel(const Engine& engine, const std::string& what) {
  if (engine.parallel().tensor() == nullptr) return absl::OkStatus();
  return absl::UnimplementedError(absl::StrCat(
      what, ": checkpoints of a tensor-parallel run (tensor_parallel.tp_size=", engine.parallel().tensor()->size(),
      ") are not yet supported"));
}

}  // namespace

EngineCheckpointer::EngineCheckpointer(Engine& engine, FileSystem& fs) : engine_(engine), fs_(fs) {}

absl::Status EngineCheckpointer::Save(const std::string& dir, const std::string& tag,
                                    const ClientState& client_state, int keep) {
  if (absl::Status refused = RefuseTensorParallel(engine_, "save checkpoint " + TagDir(dir, tag)); !refused.ok()) {
    return refused;
  }
  const int rank = engine_.data_parallel_ ? engine_.data_parallel_->rank() : 0;
  const int ranks = engine_.data_parallel_ ? engine_.data_parallel_->size() : 1;
  // Note [Atomic checkpoint commit]: the ranks agree after every phase
  // (CountFailedRanks), so a failure anywhere stops the save on every rank,
  // and rank 0 removes the partial folder.
  auto abandon = [&](absl::Status own, int failed) -> absl::Status {
    if (rank == 0) (void)RemovePartial(fs_, dir, tag);
    if (!own.ok()) return own;
    return PeerFailureError(absl::StrCat("checkpoint ", TagDir(dir, tag), " not saved: ", failed,
                                         " other rank(s) failed to save their part (their errors say why)"));
  };
  absl::Status started = rank == 0 ? PreparePartial(fs_, dir, tag) : CheckTag(tag);
  // Never a checkpoint of non-finite parameters (Note [Non-finite guard]).
  if (started.ok()) started = engine_.CheckFinite(absl::StrCat("checkpoint ", TagDir(dir, tag)));
  DS_ASSIGN_OR_RETURN(int failed, engine_.CountFailedRanks(!started.ok()));
  if (failed > 0) return abandon(started, failed);
  absl::StatusOr<FileDigest> digest = WriteRankFile(RankFile(PartialDir(dir, tag), rank), client_state, rank);
  absl::Status written =
      digest.ok() ? RecordRankFile(fs_, PartialDir(dir, tag), rank, *digest) : digest.status();
  // Every part is on disk before rank 0 commits.
  DS_ASSIGN_OR_RETURN(failed, engine_.CountFailedRanks(!written.ok()));
  if (failed > 0) return abandon(written, failed);
  if (engine_.zero_ && engine_.zero_->stage() == 3 && engine_.config_.zero_optimization.stage3_gather_16bit_weights_on_model_save) {
    absl::Status gathered = SaveGatheredWeights(PartialDir(dir, tag));
    DS_ASSIGN_OR_RETURN(failed, engine_.CountFailedRanks(!gathered.ok()));
    if (failed > 0) return abandon(gathered, failed);
  }
  absl::Status committed = rank == 0 ? CommitCheckpoint(fs_, dir, tag, engine_.global_steps_, ranks, keep) : absl::OkStatus();
  // Nobody moves on (and maybe reads `latest`) before the commit.
  DS_ASSIGN_OR_RETURN(failed, engine_.CountFailedRanks(!committed.ok()));
  if (failed > 0) {
    if (!committed.ok()) return committed;
    return PeerFailureError(absl::StrCat("checkpoint ", TagDir(dir, tag), " not committed: rank 0 failed to commit it"));
  }
  return absl::OkStatus();
}

absl::StatusOr<FileDigest> EngineCheckpointer::WriteRankFile(const std::string& path,
                                                             const ClientState& client_state, int rank) {
  DS_ASSIGN_OR_RETURN(std::unique_ptr<ChecksummedFileWriter> writer, ChecksummedFileWriter::Create(fs_, path));
  try {
    torch::NoGradGuard no_grad;
    torch::serialize::OutputArchive archive;
    archive.write("engine/micro_steps", c10::IValue(engine_.micro_steps_));
    archive.write("engine/global_steps", c10::IValue(engine_.global_steps_));
    archive.write("engine/skipped_steps", c10::IValue(engine_.skipped_steps_));
    archive.write("engine/successful_steps", c10::IValue(engine_.successful_steps_));
    archive.write("engine/world", c10::IValue(static_cast<int64_t>(engine_.data_parallel_ ? engine_.data_parallel_->size() : 1)));
    if (engine_.scaler_) {
      LossScaler::State s = engine_.scaler_->state();
      archive.write("scaler/scale", c10::IValue(s.scale));
      archive.write("scaler/hysteresis", c10::IValue(static_cast<int64_t>(s.hysteresis)));
      archive.write("scaler/last_overflow_iteration", c10::IValue(s.last_overflow_iteration));
      archive.write("scaler/iteration", c10::IValue(s.iteration));
      archive.write("scaler/skipped_steps", c10::IValue(s.skipped_steps));
      archive.write("scaler/overflows_at_min_scale", c10::IValue(s.overflows_at_min_scale));
    }
    {
      auto generator = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(generator.mutex());
      archive.write("rng/cpu", generator.get_state());
    }
    std::vector<std::string> keys;
    for (const auto& [key, value] : client_state) {
      keys.push_back(key);
      archive.write("client/" + key, c10::IValue(value));
    }
    archive.write("client/__keys", c10::IValue(absl::StrJoin(keys, "\n")));
    {
      // The flat parameter layout, for consolidation (checkpoint/consolidate.h).
      std::vector<std::string> names, shapes;
      for (const auto& item : engine_.model_->named_parameters()) {
        if (!item.value().requires_grad()) continue;
        names.push_back(item.key());
        shapes.push_back(absl::StrJoin(item.value().sizes(), ","));
      }
      archive.write("layout/names", c10::IValue(absl::StrJoin(names, "\n")));
      archive.write("layout/shapes", c10::IValue(absl::StrJoin(shapes, ";")));
    }
    if (engine_.zero_) {
      // Note [ZeRO partitioning]: every rank owns its range of the masters
      // and optimizer state; the layout (Ψ, world) lets a different world
      // size re-cut them at load time.
      archive.write("zero/master", engine_.zero_->master_shard().detach().cpu());
      archive.write("zero/exp_avg", engine_.shard_adam_->exp_avg().cpu());
      archive.write("zero/exp_avg_sq", engine_.shard_adam_->exp_avg_sq().cpu());
      archive.write("zero/step", c10::IValue(engine_.shard_adam_->step()));
      archive.write("zero/total", c10::IValue(engine_.zero_->total()));
      archive.write("zero/shards", c10::IValue(static_cast<int64_t>(engine_.zero_->shards())));
      // How the flat vector is cut into units (one unit before stage 3).
      archive.write("zero/unit_sizes", c10::IValue(absl::StrJoin(engine_.zero_->UnitSizes(), ",")));
    }
    if (rank == 0) {
      // With ZeRO the parameters are rebuilt from the master shards at load
      // time, so no rank holds a whole copy on disk (or in memory when the
      // checkpoint is consolidated).
      for (const auto& item : engine_.model_->named_parameters()) {
        if (engine_.zero_) break;
        archive.write("model/" + item.key(), item.value().detach().cpu());
      }
      for (const auto& item : engine_.model_->named_buffers()) {
        archive.write("model/" + item.key(), item.value().detach().cpu(), /*is_buffer=*/true);
      }
      if (engine_.compute_dtype_ != torch::kFloat) {
        for (size_t i = 0; i < engine_.master_params_.size(); ++i) {
          archive.write(absl::StrCat("master/", i), engine_.master_params_[i].detach().cpu());
        }
      }
      if (engine_.optimizer_) {
        torch::serialize::OutputArchive optimizer;
        engine_.optimizer_->save(optimizer);
        archive.write("optimizer", optimizer);
      }
    }
    // Through our writer: every write checked and hashed as it goes.
    ChecksummedFileWriter* out = writer.get();
    // After a failed write the rest is dropped, but reported as written:
    // LibTorch's zip writer throws from its destructor on a short write,
    // which ends the process; the error is the writer's (Finish below).
    archive.save_to([out](const void* data, size_t size) -> size_t {
      (void)out->Write(data, size);
      return size;
    });
  } catch (const c10::Error& e) {
    // A failed write makes the archive throw: the errno is the cause.
    if (!writer->status().ok()) return writer->status();
    return absl::InternalError(absl::StrCat("save ", path, ": ", e.what_without_backtrace()));
  }
  return writer->Finish();
}

absl::Status EngineCheckpointer::SaveGatheredWeights(const std::string& folder) {
  // A collective: every rank gathers, rank 0 writes. The file is part of the
  // checkpoint folder, so it is committed (or not) with the shards.
  if (absl::Status gathered = engine_.GatherFullParameters(); !gathered.ok()) return gathered;
  const int rank = engine_.data_parallel_ ? engine_.data_parallel_->rank() : 0;
  absl::Status written = absl::OkStatus();
  if (rank == 0) {
    try {
      std::vector<SafetensorsEntry> entries;
      std::vector<torch::Tensor> values;
      for (const auto& item : engine_.model_->named_parameters()) {
        if (!item.value().requires_grad()) continue;
        entries.push_back(SafetensorsEntry{item.key(), item.value().sizes().vec()});
        values.push_back(item.value());
      }
      auto writer = SafetensorsWriter::Create(folder + "/" + Engine::kGatheredWeightsFile, entries);
      if (!writer.ok()) return writer.status();
      for (const torch::Tensor& value : values) {
        // The 16-bit values, widened to fp32 exactly (the writer stores F32).
        torch::Tensor wide = value.detach().to(torch::kCPU, torch::kFloat).contiguous();
        written = (*writer)->Append(wide.data_ptr<float>(), wide.numel());
        if (!written.ok()) break;
      }
      if (written.ok()) written = (*writer)->Finish();
    } catch (const c10::Error& e) {
      written = absl::InternalError(absl::StrCat("gathered weights: ", e.what_without_backtrace()));
    }
  }
  // The gathered units go again; the next step gathers what it uses.
  if (engine_.stage3_) {
    absl::Status released = engine_.stage3_->FinishBackward();
    if (written.ok()) written = released;
  }
  return written;
}

absl::Status EngineCheckpointer::ExportHuggingFace(const HfExportOptions& options) {
  if (absl::Status refused = RefuseTensorParallel(engine_, "Hugging Face export"); !refused.ok()) return refused;
  return ExportGathered([&]() -> absl::Status {
    const torch::nn::Module& module = *engine_.model_;
    std::vector<HfTensorSpec> tensors;
    for (const std::string& name : MergedParameterNames(module)) {
      tensors.push_back({name, module.named_parameters()[name].sizes().vec()});
    }
    return ExportHfFolder(fs_, options, tensors, [&](const std::string& name) -> absl::StatusOr<torch::Tensor> {
      return MergedParameter(module, name);
    });
  });
}

absl::Status EngineCheckpointer::ExportPeftAdapter(const HfExportOptions& options) {
  if (absl::Status refused = RefuseTensorParallel(engine_, "PEFT adapter export"); !refused.ok()) return refused;
  return ExportGathered([&]() -> absl::Status {
    auto parameters = engine_.model_->named_parameters();
    std::vector<HfTensorSpec> tensors;
    for (const auto& item : parameters) {
      if (IsLoraParameterName(item.key())) {
        tensors.push_back({kPeftKeyPrefix + item.key(), item.value().sizes().vec()});
      }
    }
    if (tensors.empty()) return absl::FailedPreconditionError("the model has no LoRA adapter to export");
    HfExportOptions adapter = options;
    adapter.weights_stem = "adapter_model";
    adapter.config_file = kPeftConfigFile;
    adapter.max_shard_bytes = std::numeric_limits<int64_t>::max();  // PEFT reads one file
    return ExportHfFolder(fs_, adapter, tensors, [&](const std::string& name) -> absl::StatusOr<torch::Tensor> {
      return parameters[name.substr(std::strlen(kPeftKeyPrefix))].detach();
    });
  });
}

absl::Status EngineCheckpointer::ExportGathered(const std::function<absl::Status()>& write_on_rank0) {
  if (absl::Status gathered = engine_.GatherFullParameters(); !gathered.ok()) return gathered;
  const int rank = engine_.data_parallel_ ? engine_.data_parallel_->rank() : 0;
  absl::Status written = absl::OkStatus();
  if (rank == 0) {
    try {
      written = write_on_rank0();
    } catch (const c10::Error& e) {
      written = absl::InternalError(absl::StrCat("export: ", e.what_without_backtrace()));
    }
  }
  if (engine_.stage3_) {
    absl::Status released = engine_.stage3_->FinishBackward();
    if (written.ok()) written = released;
  }
  return written;
}

absl::Status EngineCheckpointer::LoadZeroShards(const std::string& folder) {
  torch::NoGradGuard no_grad;
  // Saved shards are re-joined in host memory (they may come from GPUs this
  // host does not have, and all of them at once would not fit on one).
  torch::serialize::InputArchive first;
  DS_RETURN_IF_ERROR(LoadArchive(fs_, RankFile(folder, 0), torch::Device(torch::kCPU), first));
  // The ranges were cut into this many parts (the saved data-parallel size
  // for stages 1-2, one for stage 0).
  const int64_t saved_world = ReadInt(first, "zero/shards");
  if (ReadInt(first, "zero/total") != engine_.zero_->total()) {
    return absl::DataLossError(absl::StrCat("checkpoint ", folder, " holds ", ReadInt(first, "zero/total"),
                                            " parameters, the model has ", engine_.zero_->total()));
  }
  // Re-join every saved rank's ranges, then cut ours: the same code serves an
  // unchanged and a changed data-parallel size.
  std::vector<torch::Tensor> master, exp_avg, exp_avg_sq;
  int64_t step = 0;
  for (int64_t r = 0; r < saved_world; ++r) {
    torch::serialize::InputArchive part;
    DS_RETURN_IF_ERROR(LoadArchive(fs_, RankFile(folder, static_cast<int>(r)), torch::Device(torch::kCPU), part));
    torch::Tensor m, a, v;
    part.read("zero/master", m);
    part.read("zero/exp_avg", a);
    part.read("zero/exp_avg_sq", v);
    master.push_back(m);
    exp_avg.push_back(a);
    exp_avg_sq.push_back(v);
    step = ReadInt(part, "zero/step");
  }
  auto unit_sizes = SavedUnitSizes(first, engine_.zero_->total());
  if (!unit_sizes.ok()) return unit_sizes.status();
  const torch::Device device = engine_.zero_->master_shard().device();
  auto recut = [&](const std::vector<torch::Tensor>& pieces) {
    return engine_.zero_->ShardOf(ZeroPartition::Unshard(pieces, *unit_sizes)).to(device);
  };
  engine_.zero_->master_shard().copy_(recut(master));
  engine_.shard_adam_->exp_avg().copy_(recut(exp_avg));
  engine_.shard_adam_->exp_avg_sq().copy_(recut(exp_avg_sq));
  engine_.shard_adam_->set_step(step);
  return absl::OkStatus();
}

absl::StatusOr<ClientState> EngineCheckpointer::Load(const std::string& dir, const std::string& tag) {
  if (absl::Status refused = RefuseTensorParallel(engine_, "load checkpoint " + TagDir(dir, tag)); !refused.ok()) {
    return refused;
  }
  std::string chosen = tag;
  if (chosen.empty()) {
    auto latest = ReadLatestTag(fs_, dir);
    if (!latest.ok()) return latest.status();
    chosen = *latest;
  }
  // Note [Resuming from a verified checkpoint]: nothing is read before every
  // file has its recorded size and hash; a failure leaves the engine as it was.
  auto manifest = VerifyCheckpoint(fs_, dir, chosen);
  if (!manifest.ok()) return manifest.status();
  const std::string folder = TagDir(dir, chosen);
  const int rank = engine_.data_parallel_ ? engine_.data_parallel_->rank() : 0;
  ClientState client;
  try {
    torch::NoGradGuard no_grad;
    // Tensors remember the device they were saved from (rank 0's cuda:0).
    // The per-parameter optimizer state (fp32 at stage 0, no flat shard) is
    // used as loaded, so it goes onto this rank's device; everything else is
    // copied into place, and the flat shards' copies in these files are
    // never read here, so they stay in host memory (12 bytes per parameter).
    const torch::Device load_device = engine_.zero_ ? torch::Device(torch::kCPU) : engine_.device_;
    torch::serialize::InputArchive shared;
    DS_RETURN_IF_ERROR(LoadArchive(fs_, RankFile(folder, 0), load_device, shared));
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
          describe(engine_.zero_ != nullptr), "; resume with the precision and ZeRO stage it was saved with, or start a "
          "new checkpoint.dir"));
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
      absl::Status loaded = LoadZeroShards(folder);
      if (!loaded.ok()) return loaded;
      absl::Status gathered = engine_.zero_->GatherParameters();
      if (!gathered.ok()) return gathered;
    }

    // This rank's own part; a rank that did not exist when the checkpoint was
    // written continues with rank 0's counters and client state.
    const std::string own_path = RankFile(folder, rank);
    const bool has_own = fs_.Exists(own_path);
    torch::serialize::InputArchive own;
    if (has_own && rank != 0) DS_RETURN_IF_ERROR(LoadArchive(fs_, own_path, load_device, own));
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
  } catch (const c10::Error& e) {
    return absl::DataLossError(
        absl::StrCat("load checkpoint ", folder, ": ", e.what_without_backtrace()));
  } catch (const std::exception& e) {  // TorchScript archive errors are not c10::Errors
    return absl::DataLossError(absl::StrCat("load checkpoint ", folder, ": ", e.what()));
  }
  engine_.ApplyLrAndMomentum(engine_.schedule_->LrAt(engine_.successful_steps_));
  return client;
}

}  // namespace dslaunch::runtime
