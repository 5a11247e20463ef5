#include "runtime/checkpoint/consolidate.h"

#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <set>

#include <torch/torch.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "runtime/checkpoint/checkpoint_files.h"
#include "runtime/checkpoint/safetensors_writer.h"
#include "runtime/checkpoint/zero_layout.h"
#include "runtime/tensor_parallel/tensor_parallel_layout.h"
#include "runtime/zero/zero_partition.h"

namespace dslaunch::runtime {
namespace {

bool Has(torch::serialize::InputArchive& archive, const std::string& key) {
  c10::IValue ignored;
  return archive.try_read(key, ignored);
}

// Where consolidated values go: a safetensors file, or host memory. Offsets
// count fp32 elements of the whole output, tensors back to back.
class ConsolidationSink {
 public:
  virtual ~ConsolidationSink() = default;
  virtual absl::Status WriteAt(int64_t element, const float* data, int64_t count) = 0;
  virtual absl::Status Append(const float* data, int64_t count) = 0;
  virtual absl::Status Finish() = 0;
};
using MakeSink = std::function<absl::StatusOr<std::unique_ptr<ConsolidationSink>>(
    const std::vector<SafetensorsEntry>& entries, int64_t elements)>;

class FileSink final : public ConsolidationSink {
 public:
  explicit FileSink(std::unique_ptr<SafetensorsWriter> writer) : writer_(std::move(writer)) {}
  absl::Status WriteAt(int64_t element, const float* data, int64_t count) override {
    return writer_->WriteAt(element, data, count);
  }
  absl::Status Append(const float* data, int64_t count) override { return writer_->Append(data, count); }
  absl::Status Finish() override { return writer_->Finish(); }

 private:
  std::unique_ptr<SafetensorsWriter> writer_;
};

class MemorySink final : public ConsolidationSink {
 public:
  explicit MemorySink(torch::Tensor flat) : flat_(std::move(flat)) {}
  absl::Status WriteAt(int64_t element, const float* data, int64_t count) override {
    std::memcpy(flat_.data_ptr<float>() + element, data, static_cast<size_t>(count) * sizeof(float));
    return absl::OkStatus();
  }
  absl::Status Append(const float* data, int64_t count) override {
    absl::Status s = WriteAt(appended_, data, count);
    appended_ += count;
    return s;
  }
  absl::Status Finish() override { return absl::OkStatus(); }

 private:
  torch::Tensor flat_;
  int64_t appended_ = 0;
};

using CheckFinite = std::function<absl::Status(const torch::Tensor&, const std::string&)>;

// One saved partition: its parameters' names in order and their values.
struct SavedGroup {
  std::vector<std::string> names;
  std::map<std::string, torch::Tensor> by_name;
};

// The partition whose parts are `files` (its data-parallel ranks, in order),
// re-joined (ZeroPartition::Unshard): `prefix` names its keys ("zero/" or
// "experts/"), `layout` its names and shapes ("layout/" or "experts/").
absl::StatusOr<SavedGroup> ReadSavedGroup(torch::serialize::InputArchive& first, const std::string& folder,
                                          const std::vector<int>& files, const std::string& prefix,
                                          const std::string& layout, const CheckFinite& check_finite) {
  SavedGroup group;
  std::vector<torch::Tensor> parts;
  std::vector<int64_t> unit_sizes;
  SavedLayout saved;
  for (size_t r = 0; r < files.size(); ++r) {
    torch::serialize::InputArchive own;
    torch::serialize::InputArchive& part = files[r] == 0 ? first : own;
    if (files[r] != 0) part.load_from(RankFile(folder, files[r]), torch::Device(torch::kCPU));
    torch::Tensor shard;
    part.read(prefix + "master", shard);
    shard = shard.to(torch::kFloat).contiguous();
    if (absl::Status finite = check_finite(shard, RankFileName(files[r])); !finite.ok()) return finite;
    parts.push_back(shard);
    if (r > 0) continue;
    c10::IValue total;
    part.read(prefix + "total", total);
    auto sizes = SavedUnitSizes(part, total.toInt(), prefix);
    if (!sizes.ok()) return sizes.status();
    unit_sizes = *sizes;
    auto read = ReadSavedLayout(part, layout, RankFile(folder, files[r]));
    if (!read.ok()) return read.status();
    saved = std::move(*read);
    group.names = saved.names;
  }
  const torch::Tensor flat = ZeroPartition::Unshard(parts, unit_sizes);
  int64_t offset = 0;
  for (size_t i = 0; i < group.names.size(); ++i) {
    const int64_t numel = c10::multiply_integers(saved.shapes[i]);
    if (offset + numel > flat.numel()) {
      return absl::DataLossError(absl::StrCat(folder, ": ", RankFileName(files[0]), "'s ", layout,
                                              " layout is larger than its ", flat.numel(), " saved values"));
    }
    group.by_name[group.names[i]] = flat.narrow(0, offset, numel).view(saved.shapes[i]);
    offset += numel;
  }
  return group;
}

// `tensors`, in order, into the sink.
absl::Status WriteAssembled(const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                            const MakeSink& make_sink, ConsolidateSummary& summary) {
  std::vector<SafetensorsEntry> entries;
  int64_t elements = 0;
  for (const auto& [name, value] : tensors) {
    entries.push_back(SafetensorsEntry{name, value.sizes().vec()});
    elements += value.numel();
  }
  auto sink = make_sink(entries, elements);
  if (!sink.ok()) return sink.status();
  summary.tensors = static_cast<int64_t>(entries.size());
  for (const auto& [name, value] : tensors) {
    if (absl::Status appended = (*sink)->Append(value.data_ptr<float>(), value.numel()); !appended.ok()) {
      return appended;
    }
    summary.elements += value.numel();
  }
  return (*sink)->Finish();
}

// Note [Tensor-parallel checkpoints] (engine_checkpointer.cc): with
// tensor_parallel.tp_size T > 1, the D files of group p·T + t (stage p,
// tensor rank t) hold that group's flat state cut over its data-parallel
// ranks, and "tp/forms" how each split parameter was cut. Each group's
// masters are re-joined and every parameter is assembled whole from its T
// slices by its saved form (AssembleWhole: fused q/k/v parts, rows, and a
// padded vocabulary trimmed), taken from the first stage that held it. In
// host memory: the model's fp32 size, where the other checkpoints stream
// one shard at a time.
absl::Status ConsolidateTensorParallel(torch::serialize::InputArchive& first, const std::string& folder,
                                       int64_t tensor_parallel, int64_t stages, int64_t data_parallel,
                                       const CheckFinite& check_finite, const MakeSink& make_sink,
                                       ConsolidateSummary& summary) {
  std::map<std::string, TensorParallelForm> forms;
  c10::IValue form_text;
  if (!first.try_read("tp/forms", form_text)) {
    return absl::DataLossError(absl::StrCat(folder, ": a tensor-parallel checkpoint without its forms (tp/forms)"));
  }
  for (absl::string_view line : absl::StrSplit(form_text.toStringRef(), '\n', absl::SkipEmpty())) {
    auto form = ParseFormLine(std::string(line));
    if (!form.ok()) return absl::DataLossError(absl::StrCat(folder, ": ", form.status().message()));
    forms[form->parameter] = *form;
  }
  // Group g's files are g·D .. g·D + D - 1; its partition is cut into
  // "zero/shards" pieces (D, or 1 at ZeRO 0: the group's first file).
  c10::IValue shards;
  first.read("zero/shards", shards);
  const int64_t count = stages * tensor_parallel;
  std::vector<SavedGroup> groups;
  for (int64_t g = 0; g < count; ++g) {
    std::vector<int> files;
    for (int64_t r = 0; r < shards.toInt(); ++r) files.push_back(static_cast<int>(g * data_parallel + r));
    auto group = ReadSavedGroup(first, folder, files, "zero/", "layout/", check_finite);
    if (!group.ok()) return group.status();
    groups.push_back(std::move(*group));
    summary.ranks_read += static_cast<int>(files.size());
  }
  // Each parameter once, whole, in stage order.
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  std::set<std::string> placed;
  for (int64_t stage = 0; stage < stages; ++stage) {
    const size_t head = static_cast<size_t>(stage * tensor_parallel);
    for (const std::string& name : groups[head].names) {
      if (!placed.insert(name).second) continue;
      torch::Tensor whole = groups[head].by_name.at(name);
      if (auto form = forms.find(name); form != forms.end()) {
        std::vector<torch::Tensor> slices;
        for (int64_t t = 0; t < tensor_parallel; ++t) {
          auto slice = groups[head + t].by_name.find(name);
          if (slice == groups[head + t].by_name.end()) {
            return absl::DataLossError(
                absl::StrCat(folder, ": tensor rank ", t, " of stage ", stage, " holds no slice of ", name));
          }
          slices.push_back(slice->second);
        }
        whole = AssembleWhole(slices, form->second);
      }
      tensors.emplace_back(name, whole.contiguous());
    }
  }
  return WriteAssembled(tensors, make_sink, summary);
}

// Note [Expert-parallel checkpoints] (engine_checkpointer.cc): with
// expert-parallel size E > 1, every file holds its share of the dense
// partition ("zero/", cut over all D ranks) and of its expert group's
// partition ("experts/": expert rank e's replicas are files e, e + E, ...,
// its experts named by their global index). The output holds the dense
// parameters, then each expert group's experts, in host memory.
absl::Status ConsolidateExpertParallel(torch::serialize::InputArchive& first, const std::string& folder,
                                       int64_t experts_parallel, const CheckFinite& check_finite,
                                       const MakeSink& make_sink, ConsolidateSummary& summary) {
  // The dense partition's pieces are files 0 .. "zero/shards" - 1.
  c10::IValue dense_shards;
  first.read("zero/shards", dense_shards);
  std::vector<int> dense_files;
  for (int64_t r = 0; r < dense_shards.toInt(); ++r) dense_files.push_back(static_cast<int>(r));
  std::vector<SavedGroup> groups;
  auto dense = ReadSavedGroup(first, folder, dense_files, "zero/", "layout/", check_finite);
  if (!dense.ok()) return dense.status();
  groups.push_back(std::move(*dense));
  summary.ranks_read = static_cast<int>(dense_files.size());
  c10::IValue shards;
  if (!first.try_read("experts/shards", shards)) {
    return absl::DataLossError(absl::StrCat(folder, ": an expert-parallel checkpoint without experts/shards"));
  }
  for (int64_t e = 0; e < experts_parallel; ++e) {
    std::vector<int> files;
    for (int64_t j = 0; j < shards.toInt(); ++j) files.push_back(static_cast<int>(e + j * experts_parallel));
    auto experts = ReadSavedGroup(first, folder, files, "experts/", "experts/", check_finite);
    if (!experts.ok()) return experts.status();
    groups.push_back(std::move(*experts));
  }
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  std::set<std::string> placed;
  for (const SavedGroup& group : groups) {
    for (const std::string& name : group.names) {
      if (!placed.insert(name).second) {
        return absl::DataLossError(absl::StrCat(folder, ": parameter ", name, " is saved twice"));
      }
      tensors.emplace_back(name, group.by_name.at(name).contiguous());
    }
  }
  return WriteAssembled(tensors, make_sink, summary);
}

absl::StatusOr<ConsolidateSummary> Consolidate(const std::string& dir, const std::string& tag,
                                               const ConsolidateOptions& options, const MakeSink& make_sink) {
  ConsolidateSummary summary;
  summary.tag = tag;
  if (summary.tag.empty()) {
    auto latest = ReadLatestTag(*options.fs, dir);
    if (!latest.ok()) return latest.status();
    summary.tag = *latest;
  }
  const std::string folder = TagDir(dir, summary.tag);
  if (auto verified = VerifyCheckpoint(*options.fs, dir, summary.tag); !verified.ok()) return verified.status();
  // Values from a diverged run are refused unless asked for.
  auto check_finite = [&](const torch::Tensor& values, const std::string& where) -> absl::Status {
    if (options.allow_nonfinite) return absl::OkStatus();
    const int64_t bad = torch::logical_not(torch::isfinite(values)).sum().item<int64_t>();
    if (bad == 0) return absl::OkStatus();
    return absl::DataLossError(absl::StrCat("consolidate ", folder, ": ", bad, " of ", values.numel(), " values in ",
                                            where, " are not finite (NaN or infinite); refusing to export them "
                                            "(--allow_nonfinite exports them anyway)"));
  };
  try {
    // Into host memory, whatever device wrote it: consolidation runs on any
    // machine, GPUs or not.
    torch::serialize::InputArchive first;
    first.load_from(RankFile(folder, 0), torch::Device(torch::kCPU));
    c10::IValue world_value;
    if (!Has(first, "layout/names") || !Has(first, "layout/shapes")) {
      return absl::FailedPreconditionError(absl::StrCat(folder, " has no parameter layout (written by an older dsrank)"));
    }
    first.read("engine/world", world_value);
    c10::IValue tp_value;
    const int64_t tensor_parallel = first.try_read("tp/size", tp_value) ? tp_value.toInt() : 1;
    c10::IValue ep_value;
    const int64_t experts_parallel = first.try_read("experts/ep_size", ep_value) ? ep_value.toInt() : 1;
    if (experts_parallel > 1 && tensor_parallel > 1) {
      return absl::UnimplementedError(absl::StrCat(folder, " was saved with expert parallelism (", experts_parallel,
                                                   ") and tensor parallelism (", tensor_parallel,
                                                   "): not yet supported together"));
    }
    // Note [Tensor-parallel checkpoints]: with pipeline stages each stage's
    // files hold its own parameters; the output holds each parameter once,
    // from the first stage that held it (a tied copy is the same on every
    // stage), in stage order.
    c10::IValue pp_value;
    const int64_t stages = first.try_read("pp/size", pp_value) ? pp_value.toInt() : 1;
    // Files go (stage, slice) group after group, D (the data-parallel size)
    // to a group, whether each holds a piece (ZeRO 1-3) or the whole vector
    // (ZeRO 0: "zero/shards" is 1, and the group's first file is read).
    const int64_t files_per_stage = world_value.toInt();
    if ((stages > 1 || tensor_parallel > 1 || experts_parallel > 1) && !Has(first, "zero/total")) {
      return absl::DataLossError(
          absl::StrCat(folder, ": a pipelined, tensor- or expert-parallel checkpoint without its flat state"));
    }
    if (tensor_parallel > 1 || experts_parallel > 1) {
      if (experts_parallel > 1 && stages > 1) {
        return absl::UnimplementedError(
            absl::StrCat(folder, " was saved with expert parallelism and pipeline stages: not yet supported together"));
      }
      absl::Status joined =
          tensor_parallel > 1
              ? ConsolidateTensorParallel(first, folder, tensor_parallel, stages, files_per_stage, check_finite,
                                          make_sink, summary)
              : ConsolidateExpertParallel(first, folder, experts_parallel, check_finite, make_sink, summary);
      if (!joined.ok()) return joined;
      return summary;
    }
    struct StageLayout {
      std::vector<std::string> names;
      std::vector<std::vector<int64_t>> shapes;
      std::vector<int64_t> offsets;  // of each parameter in the stage's flat vector
      std::vector<int64_t> output;   // where each goes in the output, or -1: an earlier stage's copy
    };
    std::vector<StageLayout> layouts(stages);
    std::map<std::string, int64_t> placed;  // name -> offset in the output
    std::vector<SafetensorsEntry> entries;
    int64_t output_size = 0;
    for (int64_t stage = 0; stage < stages; ++stage) {
      const int head_file = static_cast<int>(stage * files_per_stage);
      torch::serialize::InputArchive head;
      if (stage > 0) head.load_from(RankFile(folder, head_file), torch::Device(torch::kCPU));
      auto saved = ReadSavedLayout(stage > 0 ? head : first, "layout/", RankFile(folder, head_file));
      if (!saved.ok()) return saved.status();
      const std::vector<std::string>& names = saved->names;
      StageLayout& layout = layouts[stage];
      int64_t offset = 0;
      for (size_t i = 0; i < names.size(); ++i) {
        const std::vector<int64_t>& shape = saved->shapes[i];
        const int64_t numel = c10::multiply_integers(shape);
        layout.names.push_back(names[i]);
        layout.shapes.push_back(shape);
        layout.offsets.push_back(offset);
        offset += numel;
        if (placed.count(names[i])) {
          layout.output.push_back(-1);
          continue;
        }
        placed[names[i]] = output_size;
        layout.output.push_back(output_size);
        output_size += numel;
        entries.push_back(SafetensorsEntry{names[i], shape});
      }
    }
    auto writer = make_sink(entries, output_size);
    if (!writer.ok()) return writer.status();
    summary.tensors = static_cast<int64_t>(entries.size());

    if (Has(first, "zero/total")) {
      for (int64_t stage = 0; stage < stages; ++stage) {
        const StageLayout& layout = layouts[stage];
        torch::serialize::InputArchive stage_first;
        torch::serialize::InputArchive* head = &first;
        if (stage > 0) {
          stage_first.load_from(RankFile(folder, static_cast<int>(stage * files_per_stage)), torch::Device(torch::kCPU));
          head = &stage_first;
        }
        c10::IValue total_value;
        head->read("zero/total", total_value);
        auto unit_sizes = SavedUnitSizes(*head, total_value.toInt());
        if (!unit_sizes.ok()) return unit_sizes.status();
        c10::IValue shards_value;
        head->read("zero/shards", shards_value);
        const int64_t world = shards_value.toInt();
        // Writes the stage's flat range [begin, begin + count) where its
        // parameters go in the output (an earlier stage's copy is skipped).
        auto write_range = [&](int64_t begin, const float* values, int64_t count) -> absl::Status {
          for (size_t i = 0; i < layout.names.size() && count > 0; ++i) {
            const int64_t p_begin = layout.offsets[i];
            const int64_t p_end = i + 1 < layout.names.size() ? layout.offsets[i + 1] : total_value.toInt();
            const int64_t from = std::max(begin, p_begin), to = std::min(begin + count, p_end);
            if (from >= to || layout.output[i] < 0) continue;
            if (absl::Status s = (*writer)->WriteAt(layout.output[i] + (from - p_begin), values + (from - begin), to - from);
                !s.ok()) {
              return s;
            }
            summary.elements += to - from;
          }
          return absl::OkStatus();
        };
        for (int64_t r = 0; r < world; ++r) {
          const int file = static_cast<int>(stage * files_per_stage + r);
          torch::Tensor shard;
          if (file == 0) {
            first.read("zero/master", shard);
          } else {
            // One rank's file at a time.
            torch::serialize::InputArchive part;
            part.load_from(RankFile(folder, file), torch::Device(torch::kCPU));
            part.read("zero/master", shard);
          }
          shard = shard.to(torch::kFloat).contiguous();
          if (absl::Status finite = check_finite(shard, RankFileName(file)); !finite.ok()) return finite;
          // Piece r of every unit (Note [ZeRO partitioning]) goes to its place.
          int64_t unit_offset = 0, in_shard = 0;
          for (int64_t numel : *unit_sizes) {
            const int64_t piece = (numel + world - 1) / world;
            const int64_t begin = std::min(numel, r * piece);
            const int64_t take = std::min(piece, numel - begin);
            if (take > 0) {
              if (absl::Status s = write_range(unit_offset + begin, shard.data_ptr<float>() + in_shard, take); !s.ok()) {
                return s;
              }
            }
            unit_offset += numel;
            in_shard += piece;
          }
          ++summary.ranks_read;
        }
      }
    } else {
      // Stage 0: rank 0 holds the fp32 masters (mixed precision) or the fp32 model.
      const bool mixed = Has(first, "master/0");
      for (size_t i = 0; i < entries.size(); ++i) {
        torch::Tensor value;
        first.read(mixed ? absl::StrCat("master/", i) : "model/" + entries[i].name, value);
        value = value.to(torch::kFloat).contiguous();
        if (absl::Status finite = check_finite(value, absl::StrCat(RankFileName(0), " (", entries[i].name, ")"));
            !finite.ok()) {
          return finite;
        }
        absl::Status appended = (*writer)->Append(value.data_ptr<float>(), value.numel());
        if (!appended.ok()) return appended;
        summary.elements += value.numel();
      }
      summary.ranks_read = 1;
    }
    absl::Status finished = (*writer)->Finish();
    if (!finished.ok()) return finished;
  } catch (const c10::Error& e) {
    return absl::DataLossError(absl::StrCat("consolidate ", folder, ": ", e.what_without_backtrace()));
  }
  return summary;
}

}  // namespace

absl::StatusOr<ConsolidateSummary> ConsolidateCheckpoint(const std::string& dir, const std::string& tag,
                                                         const std::string& output,
                                                         const ConsolidateOptions& options) {
  return Consolidate(dir, tag, options,
                     [&](const std::vector<SafetensorsEntry>& entries,
                         int64_t) -> absl::StatusOr<std::unique_ptr<ConsolidationSink>> {
                       auto writer = SafetensorsWriter::Create(*options.fs, output, entries);
                       if (!writer.ok()) return writer.status();
                       return std::unique_ptr<ConsolidationSink>(new FileSink(std::move(*writer)));
                     });
}

absl::StatusOr<std::vector<std::pair<std::string, torch::Tensor>>> ConsolidateCheckpointInMemory(
    const std::string& dir, const std::string& tag, const ConsolidateOptions& options, ConsolidateSummary* summary) {
  torch::Tensor flat;
  std::vector<SafetensorsEntry> layout;
  auto done = Consolidate(dir, tag, options,
                          [&](const std::vector<SafetensorsEntry>& entries,
                              int64_t elements) -> absl::StatusOr<std::unique_ptr<ConsolidationSink>> {
                            layout = entries;
                            try {
                              flat = torch::empty({elements}, torch::kFloat);
                            } catch (const c10::Error& e) {
                              return absl::ResourceExhaustedError(absl::StrCat(
                                  "consolidating ", dir, " in memory: ", elements, " fp32 values: ",
                                  e.what_without_backtrace()));
                            }
                            return std::unique_ptr<ConsolidationSink>(new MemorySink(flat));
                          });
  if (!done.ok()) return done.status();
  if (summary != nullptr) *summary = *done;
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  int64_t offset = 0;
  for (const SafetensorsEntry& entry : layout) {
    int64_t numel = 1;
    for (int64_t d : entry.shape) numel *= d;
    tensors.emplace_back(entry.name, flat.narrow(0, offset, numel).view(entry.shape));
    offset += numel;
  }
  return tensors;
}

}  // namespace dslaunch::runtime
