// EngineCheckpointer::LoadZeroShards (engine_checkpointer.h): a checkpoint
// saved at another layout (pipeline, tensor-, expert- or data-parallel size,
// layer partition or ZeRO stage) re-joined from its saved groups and cut for
// this rank (Note [Tensor-parallel checkpoints], Note [Expert-parallel
// checkpoints], engine_checkpointer.cc).
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "runtime/checkpoint/checkpoint_archive.h"
#include "runtime/checkpoint/checkpoint_files.h"
#include "runtime/checkpoint/engine_checkpointer.h"
#include "runtime/checkpoint/zero_layout.h"
#include "runtime/model/model_interface.h"
#include "runtime/moe/moe_layer.h"
#include "runtime/tensor_parallel/tensor_parallel_layout.h"

namespace dslaunch::runtime {

absl::Status EngineCheckpointer::LoadZeroShards(const std::string& folder) {
  torch::NoGradGuard no_grad;
  // Saved shards are re-joined in host memory (they may come from GPUs this
  // host does not have, and all of them at once would not fit on one).
  torch::serialize::InputArchive first;
  DS_RETURN_IF_ERROR(LoadArchive(fs_, RankFile(folder, 0), torch::Device(torch::kCPU), first));
  // Each tensor slice's ranges were cut into this many parts (its saved
  // data-parallel size for stages 1-3, one for stage 0).
  const int64_t saved_world = ReadInt(first, "zero/shards");
  c10::IValue saved_tp_value, saved_pp_value;
  const int64_t saved_tp = first.try_read("tp/size", saved_tp_value) ? saved_tp_value.toInt() : 1;
  const int64_t saved_pp = first.try_read("pp/size", saved_pp_value) ? saved_pp_value.toInt() : 1;
  const Communicator* tensor = engine_.parallel().tensor();
  const int64_t tp = tensor ? tensor->size() : 1;
  const int64_t tensor_rank = tensor ? tensor->rank() : 0;
  const Communicator* pipeline = engine_.parallel().pipeline();
  const int64_t pp = pipeline ? pipeline->size() : 1;
  const int64_t stage = pipeline ? pipeline->rank() : 0;
  // This rank's trainable parameters, in the flat vector's order.
  std::vector<std::string> my_names;
  for (const auto& item : engine_.model_->named_parameters()) {
    if (item.value().requires_grad()) my_names.push_back(item.key());
  }

  // One saved partition's flat state (master, exp_avg, exp_avg_sq),
  // re-joined from its parts in `files` (a (stage, slice) group's data-
  // parallel ranks; for the experts' partition, an expert group's expert-
  // data-parallel ranks). `prefix` names its keys ("zero/" or "experts/"),
  // `layout` its names and shapes ("layout/" or "experts/").
  struct SliceState {
    torch::Tensor flat[3];
    int64_t step = 0;
    std::vector<std::string> names;
    std::vector<std::vector<int64_t>> shapes;
  };
  auto read_group = [&](const std::string& prefix, const std::string& layout,
                        const std::vector<int>& files) -> absl::StatusOr<SliceState> {
    SliceState state;
    std::vector<torch::Tensor> parts[3];
    std::vector<int64_t> unit_sizes;
    for (size_t r = 0; r < files.size(); ++r) {
      torch::serialize::InputArchive part;
      DS_RETURN_IF_ERROR(LoadArchive(fs_, RankFile(folder, files[r]), torch::Device(torch::kCPU), part));
      const char* keys[3] = {"master", "exp_avg", "exp_avg_sq"};
      for (int k = 0; k < 3; ++k) {
        torch::Tensor value;
        part.read(prefix + keys[k], value);
        parts[k].push_back(value);
      }
      state.step = ReadInt(part, prefix + "step");
      if (r == 0) {
        const int64_t total = ReadInt(part, prefix + "total");
        DS_ASSIGN_OR_RETURN(unit_sizes, SavedUnitSizes(part, total, prefix));
        DS_ASSIGN_OR_RETURN(SavedLayout saved, ReadSavedLayout(part, layout, RankFile(folder, files[r])));
        state.names = std::move(saved.names);
        state.shapes = std::move(saved.shapes);
      }
    }
    for (int k = 0; k < 3; ++k) state.flat[k] = ZeroPartition::Unshard(parts[k], unit_sizes);
    return state;
  };
  // Group p·T + t: files [group·D, (group+1)·D), D the saved data-parallel
  // size; the group's partition is in its first saved_world of them (D, or
  // 1 at ZeRO 0, where every data-parallel rank's file holds it whole).
  const int64_t saved_data = ReadInt(first, "engine/world");
  auto read_slice = [&](int64_t slice) {
    std::vector<int> files;
    for (int64_t r = 0; r < saved_world; ++r) files.push_back(static_cast<int>(slice * saved_data + r));
    return read_group("zero/", "layout/", files);
  };

  // Note [Expert-parallel checkpoints]: the experts' partition.
  c10::IValue saved_ep_value;
  const int64_t saved_ep = first.try_read("experts/ep_size", saved_ep_value) ? saved_ep_value.toInt() : 1;
  const int64_t ep = engine_.parallel().expert() ? engine_.parallel().expert()->size() : 1;
  if (saved_ep > 1 || ep > 1) {
    if (saved_tp > 1 || saved_pp > 1 || tp > 1 || pp > 1) {
      return absl::FailedPreconditionError(absl::StrCat("checkpoint ", folder, ": expert parallelism (saved ", saved_ep,
                                                        ", now ", ep,
                                                        ") with tensor or pipeline parallelism is not yet supported"));
    }
    // Every saved tensor by name: the dense partition's, then each saved
    // expert group's experts.
    std::map<std::string, torch::Tensor> by_name[3];
    auto add = [&](const SliceState& state) {
      for (int k = 0; k < 3; ++k) {
        int64_t offset = 0;
        for (size_t i = 0; i < state.names.size(); ++i) {
          const int64_t numel = c10::multiply_integers(state.shapes[i]);
          by_name[k][state.names[i]] = state.flat[k].narrow(0, offset, numel).view(state.shapes[i]);
          offset += numel;
        }
      }
    };
    DS_ASSIGN_OR_RETURN(SliceState dense, read_slice(0));
    add(dense);
    int64_t expert_step = dense.step;
    if (saved_ep > 1) {
      // Expert rank e's replicas are data-parallel ranks e, e + ep, ...
      // (expert-data-parallel ranks 0, 1, ...); a partition cut into one
      // piece (stage 0) is whole in the first.
      const int64_t expert_shards = ReadInt(first, "experts/shards");
      for (int64_t e = 0; e < saved_ep; ++e) {
        std::vector<int> files;
        for (int64_t j = 0; j < expert_shards; ++j) files.push_back(static_cast<int>(e + j * saved_ep));
        DS_ASSIGN_OR_RETURN(SliceState experts, read_group("experts/", "experts/", files));
        add(experts);
        expert_step = experts.step;
      }
    }
    auto fill = [&](ZeroPartition& partition, ShardAdam& adam, const std::vector<std::string>& names,
                    int64_t step) -> absl::Status {
      torch::Tensor* targets[3] = {&partition.master_shard(), &adam.exp_avg(), &adam.exp_avg_sq()};
      const auto current = engine_.model_->named_parameters();
      for (int k = 0; k < 3; ++k) {
        std::vector<torch::Tensor> mine;
        for (const std::string& name : names) {
          auto it = by_name[k].find(name);
          if (it == by_name[k].end()) {
            return absl::DataLossError(absl::StrCat("checkpoint ", folder, " has no parameter ", name));
          }
          if (!it->second.sizes().equals(current[name].sizes())) {
            return absl::DataLossError(absl::StrCat("checkpoint ", folder, ": parameter ", name, " has shape [",
                                                    absl::StrJoin(it->second.sizes(), ","), "], the model's is [",
                                                    absl::StrJoin(current[name].sizes(), ","), "]"));
          }
          mine.push_back(it->second.reshape({-1}));
        }
        targets[k]->copy_(partition.ShardOf(torch::cat(mine)).to(partition.master_shard().device()));
      }
      adam.set_step(step);
      return absl::OkStatus();
    };
    std::vector<std::string> dense_names;
    for (const std::string& name : my_names) {
      if (!engine_.expert_zero_ || !IsExpertParameter(name)) dense_names.push_back(name);
    }
    DS_RETURN_IF_ERROR(fill(*engine_.zero_, *engine_.shard_adam_, dense_names, dense.step));
    if (engine_.expert_zero_) {
      DS_RETURN_IF_ERROR(fill(*engine_.expert_zero_, *engine_.expert_adam_, engine_.expert_names_, expert_step));
    }
    return absl::OkStatus();
  }

  const torch::Device device = engine_.zero_->master_shard().device();
  torch::Tensor* targets[3] = {&engine_.zero_->master_shard(), &engine_.shard_adam_->exp_avg(),
                               &engine_.shard_adam_->exp_avg_sq()};
  if (saved_tp == tp && saved_pp == pp) {
    // The same groups: this rank's group's files only (any D, any stage),
    // unless a changed layer partition moved parameters between stages.
    DS_ASSIGN_OR_RETURN(SliceState state, read_slice(stage * tp + tensor_rank));
    if (pp == 1 || state.names == my_names) {
      if (state.flat[0].numel() != engine_.zero_->total()) {
        return absl::DataLossError(absl::StrCat("checkpoint ", folder, " holds ", state.flat[0].numel(),
                                                " parameters, the model has ", engine_.zero_->total()));
      }
      for (int k = 0; k < 3; ++k) targets[k]->copy_(engine_.zero_->ShardOf(state.flat[k]).to(device));
      engine_.shard_adam_->set_step(state.step);
      return absl::OkStatus();
    }
  }

  // Another tensor-parallel degree, pipeline degree or partition (Note
  // [Tensor-parallel checkpoints]).
  auto* family = dynamic_cast<const ModelInterface*>(engine_.model_.get());
  if (family == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint ", folder, " was saved with tensor_parallel.tp_size=", saved_tp, " and pipeline.stages=", saved_pp,
        "; re-cutting it for ", tp, " and ", pp, " needs a model family that declares its forms and layers"));
  }
  std::map<std::string, TensorParallelForm> saved_forms, current_forms;
  c10::IValue form_text;
  if (saved_tp > 1) {
    first.read("tp/forms", form_text);
    for (absl::string_view line : absl::StrSplit(form_text.toStringRef(), '\n', absl::SkipEmpty())) {
      auto form = ParseFormLine(std::string(line));
      if (!form.ok()) return absl::DataLossError(absl::StrCat("checkpoint ", folder, ": ", form.status().message()));
      saved_forms[form->parameter] = *form;
    }
  } else {
    // Saved whole: no forms (every parameter is its own single slice).
  }
  for (const TensorParallelForm& form : family->TensorParallelForms()) current_forms[form.parameter] = form;
  // Groups p·T + t.
  std::vector<SliceState> slices;
  for (int64_t g = 0; g < saved_pp * saved_tp; ++g) {
    DS_ASSIGN_OR_RETURN(SliceState state, read_slice(g));
    slices.push_back(std::move(state));
  }
  for (int k = 0; k < 3; ++k) {
    // Each saved group's flat vector as tensors by name.
    std::vector<std::map<std::string, torch::Tensor>> by_name(slices.size());
    for (size_t g = 0; g < slices.size(); ++g) {
      int64_t offset = 0;
      for (size_t i = 0; i < slices[g].names.size(); ++i) {
        const int64_t numel = c10::multiply_integers(slices[g].shapes[i]);
        by_name[g][slices[g].names[i]] = slices[g].flat[k].narrow(0, offset, numel).view(slices[g].shapes[i]);
        offset += numel;
      }
    }
    std::vector<torch::Tensor> mine;
    for (const std::string& name : my_names) {
      // The first saved stage that held it.
      int64_t saved_stage = 0;
      while (saved_stage < saved_pp && by_name[saved_stage * saved_tp].count(name) == 0) ++saved_stage;
      if (saved_stage == saved_pp) {
        return absl::DataLossError(absl::StrCat("checkpoint ", folder, " has no parameter ", name));
      }
      const size_t group = static_cast<size_t>(saved_stage * saved_tp);
      torch::Tensor whole;
      if (auto saved = saved_forms.find(name); saved != saved_forms.end()) {
        std::vector<torch::Tensor> pieces;
        for (int64_t t = 0; t < saved_tp; ++t) pieces.push_back(by_name[group + t].at(name));
        whole = AssembleWhole(pieces, saved->second);
      } else {
        whole = by_name[group].at(name);
        // Saved whole (T = 1) with a padded vocabulary: the padding goes.
        if (auto now = current_forms.find(name); now != current_forms.end() &&
                                                 now->second.split == TensorParallelSplit::kVocab &&
                                                 whole.size(0) > now->second.vocab_size) {
          whole = whole.narrow(0, 0, now->second.vocab_size);
        }
      }
      torch::Tensor local = whole;
      if (auto now = current_forms.find(name); now != current_forms.end()) {
        auto sliced = SliceForRank(whole, now->second, static_cast<int>(tensor_rank), static_cast<int>(tp));
        if (!sliced.ok()) return absl::DataLossError(absl::StrCat("checkpoint ", folder, ": ", sliced.status().message()));
        local = *sliced;
      }
      const torch::Tensor current = engine_.model_->named_parameters()[name];
      if (!local.sizes().equals(current.sizes())) {
        return absl::DataLossError(absl::StrCat("checkpoint ", folder, ": parameter ", name, " re-cut for tensor rank ",
                                                tensor_rank, " of ", tp, " has shape [",
                                                absl::StrJoin(local.sizes(), ","), "], the model's is [",
                                                absl::StrJoin(current.sizes(), ","), "]"));
      }
      mine.push_back(local.reshape({-1}));
    }
    targets[k]->copy_(engine_.zero_->ShardOf(torch::cat(mine)).to(device));
  }
  engine_.shard_adam_->set_step(slices[0].step);
  return absl::OkStatus();
}

}  // namespace dslaunch::runtime
