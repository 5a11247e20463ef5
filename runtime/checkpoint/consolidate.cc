#include "runtime/checkpoint/consolidate.h"

#include <torch/torch.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "runtime/checkpoint/checkpoint_files.h"
#include "runtime/checkpoint/safetensors_writer.h"
#include "runtime/checkpoint/zero_layout.h"

namespace dslaunch::runtime {
namespace {

bool Has(torch::serialize::InputArchive& archive, const std::string& key) {
  c10::IValue ignored;
  return archive.try_read(key, ignored);
}

}  // namespace

absl::StatusOr<ConsolidateSummary> ConsolidateCheckpoint(const std::string& dir, const std::string& tag,
                                                         const std::string& output,
                                                         const ConsolidateOptions& options) {
  ConsolidateSummary summary;
  summary.tag = tag;
  if (summary.tag.empty()) {
    auto latest = ReadLatestTag(FileSystem::Default(), dir);
    if (!latest.ok()) return latest.status();
    summary.tag = *latest;
  }
  const std::string folder = TagDir(dir, summary.tag);
  if (auto verified = VerifyCheckpoint(FileSystem::Default(), dir, summary.tag); !verified.ok()) return verified.status();
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
    c10::IValue names_value, shapes_value, world_value;
    if (!first.try_read("layout/names", names_value) || !first.try_read("layout/shapes", shapes_value)) {
      return absl::FailedPreconditionError(absl::StrCat(folder, " has no parameter layout (written by an older dsrank)"));
    }
    first.read("engine/world", world_value);
    if (c10::IValue pp; first.try_read("pp/size", pp) && pp.toInt() > 1) {
      return absl::UnimplementedError(absl::StrCat(
          folder, " was saved with pipeline.stages=", pp.toInt(),
          ": consolidating a pipelined checkpoint is not yet supported (resume it at pipeline.stages 1 and save "
          "again: checkpoints load at any pipeline degree)"));
    }
    if (c10::IValue tp; first.try_read("tp/size", tp) && tp.toInt() > 1) {
      return absl::UnimplementedError(absl::StrCat(
          folder, " was saved with tensor_parallel.tp_size=", tp.toInt(),
          ": consolidating split parameters is not yet supported (resume it at tp_size 1 and save again)"));
    }
    std::vector<std::string> names = absl::StrSplit(names_value.toStringRef(), '\n', absl::SkipEmpty());
    std::vector<std::string> shapes = absl::StrSplit(shapes_value.toStringRef(), ';');
    if (names.size() != shapes.size()) {
      return absl::DataLossError(absl::StrCat(folder, ": layout has ", names.size(), " names and ",
                                              shapes.size(), " shapes"));
    }
    std::vector<SafetensorsEntry> entries;
    for (size_t i = 0; i < names.size(); ++i) {
      SafetensorsEntry entry{names[i], {}};
      for (absl::string_view d : absl::StrSplit(shapes[i], ',', absl::SkipEmpty())) {
        int64_t size = 0;
        if (!absl::SimpleAtoi(d, &size)) return absl::DataLossError(absl::StrCat(folder, ": bad shape ", shapes[i]));
        entry.shape.push_back(size);
      }
      entries.push_back(entry);
    }
    auto writer = SafetensorsWriter::Create(output, entries);
    if (!writer.ok()) return writer.status();
    summary.tensors = static_cast<int64_t>(entries.size());

    if (Has(first, "zero/total")) {
      c10::IValue total_value;
      first.read("zero/total", total_value);
      auto unit_sizes = SavedUnitSizes(first, total_value.toInt());
      if (!unit_sizes.ok()) return unit_sizes.status();
      c10::IValue shards_value;
      first.read("zero/shards", shards_value);
      const int64_t world = shards_value.toInt();
      for (int64_t r = 0; r < world; ++r) {
        torch::Tensor shard;
        if (r == 0) {
          first.read("zero/master", shard);
        } else {
          // One rank's file at a time.
          torch::serialize::InputArchive part;
          part.load_from(RankFile(folder, static_cast<int>(r)), torch::Device(torch::kCPU));
          part.read("zero/master", shard);
        }
        shard = shard.to(torch::kFloat).contiguous();
        if (absl::Status finite = check_finite(shard, RankFileName(static_cast<int>(r))); !finite.ok()) return finite;
        // Piece r of every unit (Note [ZeRO partitioning]) goes to its place.
        int64_t unit_offset = 0, in_shard = 0;
        for (int64_t numel : *unit_sizes) {
          const int64_t piece = (numel + world - 1) / world;
          const int64_t begin = std::min(numel, r * piece);
          const int64_t take = std::min(piece, numel - begin);
          if (take > 0) {
            absl::Status written = (*writer)->WriteAt(unit_offset + begin, shard.data_ptr<float>() + in_shard, take);
            if (!written.ok()) return written;
            summary.elements += take;
          }
          unit_offset += numel;
          in_shard += piece;
        }
        ++summary.ranks_read;
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

}  // namespace dslaunch::runtime
