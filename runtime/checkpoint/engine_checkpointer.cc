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
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "runtime/checkpoint/checkpoint_archive.h"
#include "runtime/checkpoint/checkpoint_files.h"
#include "runtime/checkpoint/safetensors_writer.h"
#include "runtime/checkpoint/zero_layout.h"
#include "runtime/comm/peer_failure.h"
#include "runtime/model/lora.h"
#include "runtime/model/model_interface.h"
#include "runtime/moe/moe_layer.h"
#include "runtime/tensor_parallel/tensor_parallel_layout.h"

namespace dslaunch::runtime {
namespace {


// What has no tensor-parallel form yet, refused naming it.
absl::Status RefuseTensorParallel(const Engine& engine, const std::string& what) {
  if (engine.parallel().tensor() == nullptr) return absl::OkStatus();
  return absl::UnimplementedError(absl::StrCat(what, " of a tensor-parallel run (tensor_parallel.tp_size=",
                                               engine.parallel().tensor()->size(), ") is not yet supported"));
}

// Every member's `held` tensors (name -> whole tensor) into member 0's map,
// over `pipeline` (a pipeline's stages, an expert group's ranks; each member
// calls it; the others send theirs and keep their map). Per member: a
// header (text bytes, elements), then the names and shapes as text and
// every tensor flat in fp32 (exact for 16-bit values).
absl::Status GatherOnFirstMember(Communicator& pipeline, torch::Device device,
                                 std::map<std::string, torch::Tensor>& held) {
  const auto long_options = torch::TensorOptions().dtype(torch::kLong).device(device);
  if (pipeline.rank() != 0) {
    std::string text;
    std::vector<torch::Tensor> flat;
    for (const auto& [name, value] : held) {
      absl::StrAppend(&text, name, "\t", absl::StrJoin(value.sizes(), ","), "\n");
      flat.push_back(value.to(device, torch::kFloat).reshape({-1}));
    }
    torch::Tensor values = flat.empty() ? torch::zeros({0}, long_options.dtype(torch::kFloat)) : torch::cat(flat);
    torch::Tensor header = torch::tensor({static_cast<int64_t>(text.size()), values.numel()}, torch::kLong).to(device);
    torch::Tensor bytes = torch::from_blob(text.data(), {static_cast<int64_t>(text.size())}, torch::kUInt8).to(device);
    std::vector<PeerTransfer> first{{PeerTransfer::Kind::kSend, header, 0}};
    if (absl::Status s = pipeline.SendRecv(first); !s.ok()) return s;
    std::vector<PeerTransfer> rest{{PeerTransfer::Kind::kSend, bytes.contiguous(), 0},
                                   {PeerTransfer::Kind::kSend, values.contiguous(), 0}};
    return pipeline.SendRecv(rest);
  }
  for (int stage = 1; stage < pipeline.size(); ++stage) {
    torch::Tensor header = torch::zeros({2}, long_options);
    std::vector<PeerTransfer> first{{PeerTransfer::Kind::kRecv, header, stage}};
    if (absl::Status s = pipeline.SendRecv(first); !s.ok()) return s;
    torch::Tensor sizes = header.to(torch::kCPU);
    torch::Tensor bytes = torch::empty({sizes[0].item<int64_t>()}, long_options.dtype(torch::kUInt8));
    torch::Tensor values = torch::empty({sizes[1].item<int64_t>()}, long_options.dtype(torch::kFloat));
    std::vector<PeerTransfer> rest{{PeerTransfer::Kind::kRecv, bytes, stage}, {PeerTransfer::Kind::kRecv, values, stage}};
    if (absl::Status s = pipeline.SendRecv(rest); !s.ok()) return s;
    torch::Tensor text_bytes = bytes.to(torch::kCPU);
    const std::string text(reinterpret_cast<const char*>(text_bytes.data_ptr<uint8_t>()), text_bytes.numel());
    int64_t offset = 0;
    for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
      std::vector<std::string> parts = absl::StrSplit(line, '\t');
      std::vector<int64_t> shape;
      for (absl::string_view d : absl::StrSplit(parts.size() == 2 ? parts[1] : "", ',', absl::SkipEmpty())) {
        int64_t size = 0;
        if (!absl::SimpleAtoi(d, &size)) return absl::DataLossError(absl::StrCat("stage ", stage, " sent shape ", line));
        shape.push_back(size);
      }
      const int64_t numel = c10::multiply_integers(shape);
      if (parts.size() != 2 || offset + numel > values.numel()) {
        return absl::DataLossError(absl::StrCat("stage ", stage, " sent a malformed parameter list at '", line, "'"));
      }
      held[parts[0]] = values.narrow(0, offset, numel).view(shape);
      offset += numel;
    }
  }
  return absl::OkStatus();
}

// "<layer>.experts.<e>.<rest>" as its three parts (Note [Mixture of
// experts]: experts are named by their global index on every rank).
struct ExpertParameterName {
  std::string layer;  // through ".experts."
  int64_t expert = 0;
  std::string rest;
};
std::optional<ExpertParameterName> SplitExpertParameterName(const std::string& name) {
  const std::string marker = absl::StrCat(".", kExpertsModule, ".");
  const size_t at = name.find(marker);
  if (at == std::string::npos) return std::nullopt;
  const size_t begin = at + marker.size();
  const size_t dot = name.find('.', begin);
  ExpertParameterName split;
  if (dot == std::string::npos || !absl::SimpleAtoi(name.substr(begin, dot - begin), &split.expert)) return std::nullopt;
  split.layer = name.substr(0, begin);
  split.rest = name.substr(dot + 1);
  return split;
}

// The names an export writes, in the module's order: `local` (this rank's
// merged names) with, where a layer's experts start, every expert of that
// layer that `whole` holds (the other expert ranks' gathered), in expert
// order. Without gathered values, `local` itself.
std::vector<std::string> ExportedParameterNames(const std::vector<std::string>& local,
                                                const std::map<std::string, torch::Tensor>& whole) {
  std::vector<std::string> names;
  std::set<std::string> layers_done;
  for (const std::string& name : local) {
    const std::optional<ExpertParameterName> split = SplitExpertParameterName(name);
    if (whole.empty() || !split) {
      names.push_back(name);
      continue;
    }
    if (!layers_done.insert(split->layer).second) continue;
    // One expert's tensors in the module's order, then every expert's.
    std::vector<std::string> rests;
    for (const std::string& other : local) {
      const std::optional<ExpertParameterName> o = SplitExpertParameterName(other);
      if (o && o->layer == split->layer && o->expert == split->expert) rests.push_back(o->rest);
    }
    std::set<int64_t> experts;
    for (const auto& [other, value] : whole) {
      const std::optional<ExpertParameterName> o = SplitExpertParameterName(other);
      if (o && o->layer == split->layer) experts.insert(o->expert);
    }
    for (int64_t expert : experts) {
      for (const std::string& rest : rests) names.push_back(absl::StrCat(split->layer, expert, ".", rest));
    }
  }
  return names;
}

// Note [Tensor-parallel checkpoints]
// A checkpoint holds one file per rank: rank_<(p·T + t)·D + d>.pt for
// pipeline stage p of P, tensor rank t of T and data-parallel rank d of D
// (with P = T = 1 the data-parallel rank, as before). The D files of one
// (stage, slice) group hold that group's flat ZeRO state cut over its D
// ranks, its parameters' names and local shapes, and the model's tensor-
// parallel forms ("tp/forms"). With the same P, T and layer partition the
// state loads as before (any D, any stage); otherwise every saved group's
// state is re-joined and each parameter this rank now holds is taken by
// name from the first saved stage that held it (a tied copy is the same on
// every stage), assembled whole from its slices by its saved form
// (AssembleWhole) and cut by the current form (SliceForRank): so P, T, D,
// the partition and the ZeRO stage may all change (Note [Pipeline stages]).
//
// Note [Expert-parallel checkpoints]
// With expert parallelism (Note [Mixture of experts]) each rank's file also
// holds its share of the experts' partition under "experts/": the flat state
// cut over the expert-data-parallel group, the experts' names (global
// indices) and shapes, and the expert-parallel size. Loading at any expert-
// parallel and data-parallel size (1 included, where the experts join the
// dense partition) re-joins every saved expert group, takes each parameter
// this rank holds by name, and cuts it for its partition.

}  // namespace

EngineCheckpointer::RankFileIndex EngineCheckpointer::FileIndex() const {
  const Engine& engine = engine_;
  const Communicator* data = engine.data_parallel();
  const Communicator* tensor = engine.parallel().tensor();
  const Communicator* pipeline = engine.parallel().pipeline();
  const int d = data ? data->rank() : 0, dp = data ? data->size() : 1;
  const int t = tensor ? tensor->rank() : 0, tp = tensor ? tensor->size() : 1;
  const int p = pipeline ? pipeline->rank() : 0, pp = pipeline ? pipeline->size() : 1;
  return RankFileIndex{(p * tp + t) * dp + d, pp * tp * dp};
}

EngineCheckpointer::EngineCheckpointer(Engine& engine, FileSystem& fs) : engine_(engine), fs_(fs) {}

absl::Status EngineCheckpointer::Save(const std::string& dir, const std::string& tag,
                                    const ClientState& client_state, int keep) {
  // Note [Delayed parameter update]: the checkpoint holds step N whole (a
  // collective: every rank saves at the same step).
  notes_.clear();
  if (absl::Status applied = engine_.ApplyPendingUpdate(); !applied.ok()) return applied;
  // Note [Tensor-parallel checkpoints]: one file per rank of the job.
  const int rank = FileIndex().index;
  const int ranks = FileIndex().files;
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
  // Note [Parameters on NVMe]: never a checkpoint of a failed step's half.
  if (started.ok() && engine_.zero_) started = engine_.zero_->CheckParametersCurrent();
  // Note [NVMe offload]: the swapped state in memory while it is saved.
  if (started.ok()) started = StageSwappedState(/*read=*/true);
  absl::Cleanup unstage = [this] { (void)UnstageSwappedState(/*write_back=*/false); };
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
    absl::Status gathered = RefuseTensorParallel(engine_, "stage3_gather_16bit_weights_on_model_save");
    if (gathered.ok()) gathered = SaveGatheredWeights(PartialDir(dir, tag));
    DS_ASSIGN_OR_RETURN(failed, engine_.CountFailedRanks(!gathered.ok()));
    if (failed > 0) return abandon(gathered, failed);
  }
  absl::Status committed = rank == 0 ? CommitCheckpoint(fs_, dir, tag, engine_.global_steps_, ranks) : absl::OkStatus();
  // Nobody moves on (and maybe reads `latest`) before the commit.
  DS_ASSIGN_OR_RETURN(failed, engine_.CountFailedRanks(!committed.ok()));
  if (failed > 0) {
    if (!committed.ok()) return committed;
    return PeerFailureError(absl::StrCat("checkpoint ", TagDir(dir, tag), " not committed: rank 0 failed to commit it"));
  }
  // Note [Replacing a tag]: a rotation that fails leaves the checkpoint
  // committed, and says so.
  if (rank == 0) {
    if (absl::Status rotated = RotateCheckpoints(fs_, dir, tag, engine_.global_steps_, keep); !rotated.ok()) {
      notes_.push_back(absl::StrCat("checkpoint ", TagDir(dir, tag), " is committed, but removing older ones (keep ",
                                    keep, ") failed: ", rotated.message()));
    }
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
      // With expert parallelism the experts are a partition of their own
      // (Note [Expert-parallel checkpoints]).
      const bool experts_apart = engine_.expert_zero_ != nullptr;
      std::vector<std::string> expert_shapes;
      for (const auto& item : engine_.model_->named_parameters()) {
        if (!item.value().requires_grad()) continue;
        if (experts_apart && IsExpertParameter(item.key())) {
          expert_shapes.push_back(absl::StrJoin(item.value().sizes(), ","));
          continue;
        }
        names.push_back(item.key());
        shapes.push_back(absl::StrJoin(item.value().sizes(), ","));
      }
      archive.write("layout/names", c10::IValue(absl::StrJoin(names, "\n")));
      archive.write("layout/shapes", c10::IValue(absl::StrJoin(shapes, ";")));
      if (experts_apart) {
        const ParallelState& parallel = engine_.parallel();
        archive.write("experts/names", c10::IValue(absl::StrJoin(engine_.expert_names_, "\n")));
        archive.write("experts/shapes", c10::IValue(absl::StrJoin(expert_shapes, ";")));
        archive.write("experts/ep_size", c10::IValue(static_cast<int64_t>(parallel.expert()->size())));
        archive.write("experts/ep_rank", c10::IValue(static_cast<int64_t>(parallel.expert()->rank())));
        archive.write("experts/data_size", c10::IValue(static_cast<int64_t>(parallel.data()->size())));
        archive.write("experts/master", engine_.expert_zero_->master_shard().detach().cpu());
        archive.write("experts/exp_avg", engine_.expert_adam_->exp_avg().cpu());
        archive.write("experts/exp_avg_sq", engine_.expert_adam_->exp_avg_sq().cpu());
        archive.write("experts/step", c10::IValue(engine_.expert_adam_->step()));
        archive.write("experts/total", c10::IValue(engine_.expert_zero_->total()));
        archive.write("experts/shards", c10::IValue(static_cast<int64_t>(engine_.expert_zero_->shards())));
        archive.write("experts/unit_sizes", c10::IValue(absl::StrJoin(engine_.expert_zero_->UnitSizes(), ",")));
      }
    }
    if (const Communicator* pipeline = engine_.parallel().pipeline()) {
      // Note [Tensor-parallel checkpoints]: this file's stage.
      archive.write("pp/size", c10::IValue(static_cast<int64_t>(pipeline->size())));
      archive.write("pp/stage", c10::IValue(static_cast<int64_t>(pipeline->rank())));
    }
    if (const Communicator* tensor = engine_.parallel().tensor()) {
      // Note [Tensor-parallel checkpoints].
      std::vector<std::string> forms;
      if (const auto* family = dynamic_cast<const ModelInterface*>(engine_.model_.get())) {
        for (const TensorParallelForm& form : family->TensorParallelForms()) forms.push_back(FormLine(form));
      }
      archive.write("tp/size", c10::IValue(static_cast<int64_t>(tensor->size())));
      archive.write("tp/rank", c10::IValue(static_cast<int64_t>(tensor->rank())));
      archive.write("tp/forms", c10::IValue(absl::StrJoin(forms, "\n")));
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
  // A collective: every rank gathers (one unit at a time, Note [Streamed
  // export at ZeRO-3]), rank 0 writes. The file is part of the checkpoint
  // folder, so it is committed (or not) with the shards.
  std::vector<SafetensorsEntry> entries;
  std::vector<std::string> reads;
  for (const auto& item : engine_.model_->named_parameters()) {
    if (!item.value().requires_grad()) continue;
    entries.push_back(SafetensorsEntry{item.key(), item.value().sizes().vec()});
    reads.push_back(item.key());
  }
  return ExportGathered(reads, /*gathered=*/false, [&](const MakeWhole& make_whole) -> absl::Status {
    auto writer = SafetensorsWriter::Create(fs_, folder + "/" + Engine::kGatheredWeightsFile, entries);
    if (!writer.ok()) return writer.status();
    const auto parameters = engine_.model_->named_parameters();
    for (const std::string& name : reads) {
      if (absl::Status s = make_whole(name); !s.ok()) return s;
      // The 16-bit values, widened to fp32 exactly (the writer stores F32).
      torch::Tensor wide = parameters[name].detach().to(torch::kCPU, torch::kFloat).contiguous();
      if (absl::Status s = (*writer)->Append(wide.data_ptr<float>(), wide.numel()); !s.ok()) return s;
    }
    return (*writer)->Finish();
  });
}

absl::Status EngineCheckpointer::ExportHuggingFace(const HfExportOptions& options) {
  if (absl::Status applied = engine_.ApplyPendingUpdate(); !applied.ok()) return applied;
  // Split over a tensor group or cut into stages: every parameter gathered
  // whole onto world rank 0, which writes. Over the tensor group a
  // collective (in the same order on every rank); then each stage's data
  // rank 0, tensor rank 0 sends what it holds to the first stage's.
  // With expert parallelism each rank holds its experts only (Note
  // [Mixture of experts]): every member of an expert group sends them to
  // the group's first rank.
  std::map<std::string, torch::Tensor> whole;
  const Communicator* tensor = engine_.parallel().tensor();
  Communicator* pipeline = engine_.parallel().pipeline();
  Communicator* experts = engine_.experts_split_ ? engine_.parallel().expert() : nullptr;
  if (tensor != nullptr || pipeline != nullptr || experts != nullptr) {
    if (absl::Status gathered = engine_.GatherFullParameters(); !gathered.ok()) return gathered;
    const auto* family = dynamic_cast<const ModelInterface*>(engine_.model_.get());
    if (family == nullptr) return absl::FailedPreconditionError("Hugging Face export: the model declares no forms");
    std::map<std::string, TensorParallelForm> forms;
    for (const TensorParallelForm& form : family->TensorParallelForms()) forms[form.parameter] = form;
    const Communicator* data = engine_.data_parallel();
    const bool sender = (data == nullptr || data->rank() == 0) && (tensor == nullptr || tensor->rank() == 0);
    std::map<std::string, torch::Tensor> held;
    try {
      torch::NoGradGuard no_grad;
      const torch::nn::Module& module = *engine_.model_;
      const auto parameters = module.named_parameters();
      // Each rank's slice of the merged weight (Note [LoRA under tensor
      // parallelism]: the adapters are split with their projections), gathered.
      for (const std::string& name : MergedParameterNames(module)) {
        // Note [Pipeline stages]: another stage's parameter is empty here.
        if (pipeline != nullptr && parameters[name].numel() == 0) continue;
        torch::Tensor value = MergedParameter(module, name);
        if (auto it = forms.find(name); it != forms.end() && tensor != nullptr) {
          const TensorParallelGroup group{engine_.parallel().tensor(), tensor->rank(), tensor->size()};
          auto gathered = GatherWhole(value, it->second, group);
          if (!gathered.ok()) return gathered.status();
          value = *gathered;
        }
        if (sender) held[name] = value;
      }
      if (pipeline != nullptr && sender) {
        if (absl::Status s = GatherOnFirstMember(*pipeline, engine_.device_, held); !s.ok()) return s;
      }
      if (experts != nullptr) {
        std::map<std::string, torch::Tensor> expert_values;
        for (const std::string& name : MergedParameterNames(module)) {
          if (SplitExpertParameterName(name)) expert_values[name] = MergedParameter(module, name);
        }
        if (absl::Status s = GatherOnFirstMember(*experts, engine_.device_, expert_values); !s.ok()) return s;
        if (sender) held.merge(expert_values);
      }
    } catch (const c10::Error& e) {
      return absl::InternalError(absl::StrCat("Hugging Face export: ", e.what_without_backtrace()));
    }
    if (FileIndex().index == 0) {
      for (auto& [name, value] : held) whole[name] = value.to(torch::kCPU);
    }
  }
  const bool gathered = tensor != nullptr || pipeline != nullptr || experts != nullptr;
  const torch::nn::Module& module = *engine_.model_;
  std::vector<HfTensorSpec> tensors;
  std::vector<std::string> reads;
  for (const std::string& name : ExportedParameterNames(MergedParameterNames(module), whole)) {
    tensors.push_back({name, whole.empty() ? module.named_parameters()[name].sizes().vec() : whole.at(name).sizes().vec()});
    reads.push_back(name);
  }
  return ExportGathered(reads, gathered, [&](const MakeWhole& make_whole) -> absl::Status {
    return ExportHfFolder(fs_, options, tensors, [&](const std::string& name) -> absl::StatusOr<torch::Tensor> {
      if (!whole.empty()) return whole.at(name);
      if (absl::Status s = make_whole(name); !s.ok()) return s;
      return MergedParameter(module, name);
    });
  });
}

absl::Status EngineCheckpointer::ExportPeftAdapter(const HfExportOptions& options) {
  // Under tensor parallelism the split factors are gathered whole (Note
  // [LoRA under tensor parallelism]) on every rank of the tensor group; with
  // a pipeline each stage's data rank 0, tensor rank 0 sends its adapters to
  // the first stage's. With expert parallelism an expert's adapters are its
  // rank's only (runtime/model/mixtral_expert.h): every member of an expert
  // group sends them to the group's first rank, as ExportHuggingFace does
  // the experts' weights.
  std::map<std::string, torch::Tensor> whole;
  const Communicator* tensor = engine_.parallel().tensor();
  Communicator* pipeline = engine_.parallel().pipeline();
  Communicator* experts = engine_.experts_split_ ? engine_.parallel().expert() : nullptr;
  const bool gathered = tensor != nullptr || pipeline != nullptr || experts != nullptr;
  if (gathered) {
    // The adapters only: the frozen base stays partitioned.
    if (absl::Status s = engine_.GatherFullParameters(/*frozen_too=*/false); !s.ok()) return s;
    const auto* family = dynamic_cast<const ModelInterface*>(engine_.model_.get());
    if (family == nullptr) return absl::FailedPreconditionError("PEFT adapter export: the model declares no forms");
    const Communicator* data = engine_.data_parallel();
    const bool sender = (data == nullptr || data->rank() == 0) && (tensor == nullptr || tensor->rank() == 0);
    std::map<std::string, TensorParallelForm> forms;
    std::map<std::string, torch::Tensor> held;
    try {
      for (const TensorParallelForm& form : family->TensorParallelForms()) forms[form.parameter] = form;
      torch::NoGradGuard no_grad;
      for (const auto& item : engine_.model_->named_parameters()) {
        if (!IsLoraParameterName(item.key())) continue;
        // Note [Pipeline stages]: another stage's adapter is empty here.
        if (pipeline != nullptr && item.value().numel() == 0) continue;
        torch::Tensor value = item.value().detach();
        if (auto it = forms.find(item.key()); it != forms.end() && tensor != nullptr) {
          const TensorParallelGroup group{engine_.parallel().tensor(), tensor->rank(), tensor->size()};
          auto gathered_whole = GatherWhole(value, it->second, group);
          if (!gathered_whole.ok()) return gathered_whole.status();
          value = *gathered_whole;
        }
        held[item.key()] = value;
      }
      if (pipeline != nullptr && sender) {
        if (absl::Status s = GatherOnFirstMember(*pipeline, engine_.device_, held); !s.ok()) return s;
      }
      if (experts != nullptr) {
        std::map<std::string, torch::Tensor> expert_values;
        for (const auto& [name, value] : held) {
          if (SplitExpertParameterName(name)) expert_values[name] = value;
        }
        if (absl::Status s = GatherOnFirstMember(*experts, engine_.device_, expert_values); !s.ok()) return s;
        held.merge(expert_values);
      }
    } catch (const c10::Error& e) {
      return absl::InternalError(absl::StrCat("PEFT adapter export: ", e.what_without_backtrace()));
    }
    if (FileIndex().index == 0) {
      for (auto& [name, value] : held) whole[name] = value.to(torch::kCPU);
    }
  }
  auto parameters = engine_.model_->named_parameters();
  auto value_of = [&](const std::string& key) { return whole.empty() ? parameters[key].detach() : whole.at(key); };
  std::vector<std::string> local;
  for (const auto& item : parameters) {
    if (IsLoraParameterName(item.key())) local.push_back(item.key());
  }
  std::vector<HfTensorSpec> tensors;
  std::vector<std::string> reads;
  for (const std::string& name : ExportedParameterNames(local, whole)) {
    tensors.push_back({kPeftKeyPrefix + name, value_of(name).sizes().vec()});
    reads.push_back(name);
  }
  if (tensors.empty()) return absl::FailedPreconditionError("the model has no LoRA adapter to export");
  return ExportGathered(reads, gathered, [&](const MakeWhole& make_whole) -> absl::Status {
    HfExportOptions adapter = options;
    adapter.weights_stem = "adapter_model";
    adapter.config_file = kPeftConfigFile;
    adapter.max_shard_bytes = std::numeric_limits<int64_t>::max();  // PEFT reads one file
    return ExportHfFolder(fs_, adapter, tensors, [&](const std::string& name) -> absl::StatusOr<torch::Tensor> {
      const std::string key = name.substr(std::strlen(kPeftKeyPrefix));
      if (whole.empty()) {
        if (absl::Status s = make_whole(key); !s.ok()) return s;
      }
      return value_of(key);
    });
  });
}

absl::Status EngineCheckpointer::ExportGathered(const std::vector<std::string>& reads, bool gathered,
                                               const std::function<absl::Status(const MakeWhole&)>& write_on_rank0) {
  if (absl::Status applied = engine_.ApplyPendingUpdate(); !applied.ok()) return applied;
  // Note [Streamed export at ZeRO-3].
  Stage3Runner* runner = engine_.zero_ && engine_.zero_->stage() == 3 ? engine_.stage3_.get() : nullptr;
  const bool streamed = runner != nullptr && !gathered;
  std::vector<int> sequence;  // the unit of each read
  // Reads of trainable parameters only (the adapters, the gathered-weights
  // file) leave the frozen side partitioned.
  bool frozen_read = false;
  {
    const auto parameters = engine_.model_->named_parameters();
    for (const std::string& name : reads) {
      const torch::Tensor* p = parameters.find(name);
      frozen_read = frozen_read || p == nullptr || !p->requires_grad();
    }
  }
  if (streamed) {
    const auto* partitioned = dynamic_cast<const PartitionedModel*>(engine_.model_.get());
    if (partitioned == nullptr) return absl::InternalError("export at ZeRO-3: the model names no units");
    const std::map<std::string, int> unit_of = UnitOfEachParameter(*engine_.model_, partitioned->ParameterUnits());
    for (const std::string& name : reads) {
      auto it = unit_of.find(name);
      if (it == unit_of.end()) return absl::InternalError(absl::StrCat("export: parameter ", name, " is in no unit"));
      sequence.push_back(it->second);
    }
  } else if (!gathered) {
    if (absl::Status s = engine_.GatherFullParameters(frozen_read); !s.ok()) return s;
  }
  size_t next = 0;
  int current = -1;
  absl::Status collective = absl::OkStatus();
  auto advance = [&] {
    const int unit = sequence[next++];
    if (unit == current) return;
    if (current >= 0) runner->ReleaseUnit(current);
    current = unit;
    collective = runner->GatherUnit(unit, frozen_read);
  };
  const MakeWhole make_whole = [&](const std::string& name) -> absl::Status {
    if (!streamed) return absl::OkStatus();
    if (next >= reads.size() || reads[next] != name) {
      return absl::InternalError(absl::StrCat("export: parameter ", name, " read out of the announced order"));
    }
    advance();
    return collective;
  };
  // World rank 0 writes (with tensor parallelism several ranks are
  // data-parallel rank 0).
  absl::Status written = absl::OkStatus();
  if (FileIndex().index == 0) {
    try {
      written = write_on_rank0(make_whole);
    } catch (const c10::Error& e) {
      written = absl::InternalError(absl::StrCat("export: ", e.what_without_backtrace()));
    }
  }
  // The other ranks, and a writer that stopped early, gather the rest of the
  // sequence, so that every rank's collectives match.
  try {
    while (streamed && collective.ok() && next < sequence.size()) advance();
    if (current >= 0) runner->ReleaseUnit(current);
  } catch (const c10::Error& e) {
    collective = absl::InternalError(absl::StrCat("export: gathering a unit: ", e.what_without_backtrace()));
  }
  if (written.ok()) written = collective;
  if (engine_.stage3_) {
    absl::Status released = engine_.stage3_->FinishBackward();
    if (written.ok()) written = released;
  }
  return written;
}

// The dense partition and, with expert parallelism, the experts' one.
std::vector<std::pair<ZeroPartition*, ShardAdam*>> EngineCheckpointer::SwappedPartitions() const {
  std::vector<std::pair<ZeroPartition*, ShardAdam*>> swapped;
  if (engine_.zero_ && engine_.zero_->swapped() != nullptr) {
    swapped.emplace_back(engine_.zero_.get(), engine_.shard_adam_.get());
  }
  if (engine_.expert_zero_ && engine_.expert_zero_->swapped() != nullptr) {
    swapped.emplace_back(engine_.expert_zero_.get(), engine_.expert_adam_.get());
  }
  return swapped;
}

absl::Status EngineCheckpointer::StageSwappedState(bool read) {
  for (auto [zero, adam] : SwappedPartitions()) {
    DS_RETURN_IF_ERROR(zero->StageSwappedMaster(read));
    DS_RETURN_IF_ERROR(adam->StageSwappedMoments(*zero->swapped(), read));
  }
  return absl::OkStatus();
}

absl::Status EngineCheckpointer::UnstageSwappedState(bool write_back) {
  absl::Status first;
  for (auto [zero, adam] : SwappedPartitions()) {
    absl::Status master = zero->UnstageSwappedMaster(write_back);
    absl::Status moments = adam->UnstageSwappedMoments(*zero->swapped(), write_back);
    if (first.ok()) first = master.ok() ? moments : master;
  }
  return first;
}

}  // namespace dslaunch::runtime
