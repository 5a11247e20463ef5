// dsconsolidate: one fp32 safetensors file from a dslaunch checkpoint of any
// ZeRO stage, streamed shard by shard; or a check of a checkpoint folder.
//
//   dsconsolidate CHECKPOINT_DIR [--tag TAG] --output model.safetensors [--allow_nonfinite]
//   dsconsolidate CHECKPOINT_DIR [--tag TAG] --format hf --hf_from MODEL_DIR --output OUT_DIR
//                 [--dtype bfloat16] [--max_shard_size 5GB] [--lora_alpha A [--use_rslora]]
//   dsconsolidate --verify CHECKPOINT_DIR [--tag TAG]
// --format hf writes a Hugging Face model folder from a checkpoint of a job
// that started from MODEL_DIR (model.from): its config.json (torch_dtype set
// to --dtype) and tokenizer files, and the checkpoint's fp32 master weights
// in --dtype, sharded. Streamed: the masters are consolidated into a
// temporary file, which the export reads one tensor at a time. A LoRA job's
// checkpoint (adapters only) is merged into MODEL_DIR's weights, which
// needs the job's lora_alpha (Note [LoRA checkpoints to Hugging Face]).
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/flag_table.h"

#include "runtime/checkpoint/checkpoint_files.h"
#include "runtime/checkpoint/consolidate.h"
#include "runtime/checkpoint/lora_merge.h"
#include "runtime/fs/file_system.h"
#include "runtime/hf/hf_export.h"
#include "runtime/hf/hf_model_folder.h"
#include "runtime/hf/safetensors_reader.h"
#include "runtime/model/llama_hf_config.h"

namespace {

using namespace dslaunch::runtime;

// One line per checkpoint (or the one tag): verified or why not, and what
// `latest` says. 0 when everything verifies.
int Verify(const std::string& dir, const std::string& tag) {
  FileSystem& fs = FileSystem::Default();
  if (!fs.IsDirectory(dir)) {
    std::fprintf(stderr, "dsconsolidate: %s is not a folder\n", dir.c_str());
    return 1;
  }
  int failures = 0;
  std::vector<std::string> tags;
  if (!tag.empty()) {
    tags.push_back(tag);
  } else {
    tags = CommittedTags(fs, dir);
    // Folders that look like checkpoints but were never committed.
    for (const std::string& name : fs.ListDirectory(dir).value_or(std::vector<std::string>{})) {
      if (!CheckTag(name).ok() || !fs.IsDirectory(TagDir(dir, name))) continue;
      if (!fs.Exists(TagDir(dir, name) + "/COMPLETE")) {
        std::printf("uncommitted %s: no commit record (COMPLETE)\n", TagDir(dir, name).c_str());
      }
    }
    auto latest = ReadLatestTag(fs, dir);
    if (latest.ok()) {
      std::printf("latest      %s\n", latest->c_str());
    } else if (absl::IsNotFound(latest.status()) && tags.empty()) {
      std::printf("latest      none (no checkpoint)\n");
    } else {
      std::printf("BAD latest  %s\n", std::string(latest.status().message()).c_str());
      ++failures;
    }
  }
  for (const std::string& name : tags) {
    auto manifest = VerifyCheckpoint(fs, dir, name);
    if (!manifest.ok()) {
      std::printf("FAILED      %s\n", std::string(manifest.status().message()).c_str());
      ++failures;
    } else if (manifest->legacy) {
      std::printf("unverified  %s: written before commit records had checksums\n", TagDir(dir, name).c_str());
    } else {
      int64_t bytes = 0;
      for (const auto& file : manifest->files) bytes += file.digest.size;
      std::printf("ok          %s: step %ld, %d rank(s), %zu file(s), %ld bytes verified\n", TagDir(dir, name).c_str(),
                  static_cast<long>(manifest->step), manifest->ranks, manifest->files.size(), static_cast<long>(bytes));
    }
  }
  return failures == 0 ? 0 : 1;
}

struct HfFormat {
  std::string from;
  std::string dtype = "bfloat16";
  std::string max_shard_size = "5GB";
  LoraMergeSettings lora;  // alpha 0: not given
};

// The checkpoint as a Hugging Face folder at `output`.
absl::Status ExportHf(const std::string& dir, const std::string& tag, const std::string& output,
                      const ConsolidateOptions& options, const HfFormat& format) {
  FileSystem& fs = FileSystem::Default();
  auto dtype = ParseExportDtype(format.dtype, "--dtype");
  if (!dtype.ok()) return dtype.status();
  auto shard = ParseShardSize(format.max_shard_size, "--max_shard_size");
  if (!shard.ok()) return shard.status();
  const std::string config_path = format.from + "/config.json";
  auto text = fs.ReadFile(config_path, 64 << 20);
  if (!text.ok()) return absl::NotFoundError(absl::StrCat("--hf_from: ", text.status().message()));
  auto config = ParseLlamaHfConfig(*text, config_path);
  if (!config.ok()) return config.status();
  const std::string masters = output + ".fp32.safetensors";
  auto summary = ConsolidateCheckpoint(dir, tag, masters, options);
  if (!summary.ok()) return summary.status();
  absl::Status status = [&]() -> absl::Status {
    auto reader = SafetensorsReader::Open(fs, masters);
    if (!reader.ok()) return reader.status();
    std::vector<HfTensorSpec> tensors;
    std::vector<std::string> names;
    for (const SafetensorsEntryInfo& entry : (*reader)->entries()) {
      tensors.push_back({entry.name, entry.shape});
      names.push_back(entry.name);
    }
    auto adapted = LoraAdaptedProjections(names);
    if (!adapted.ok()) return absl::InvalidArgumentError(absl::StrCat(dir, ": ", adapted.status().message()));
    if (adapted->empty() && (format.lora.alpha != 0 || format.lora.use_rslora)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--lora_alpha/--use_rslora: ", dir, "/", summary->tag, " holds no LoRA adapters (a full fine-tune's "
          "checkpoint holds every weight; leave them out)"));
    }
    HfTensorSource source = [&](const std::string& name) { return (*reader)->View(name); };
    std::unique_ptr<HfModelFolder> base;
    if (!adapted->empty()) {
      // Note [LoRA checkpoints to Hugging Face]: the base folder's tensors,
      // the adapted projections merged.
      if (!(format.lora.alpha > 0)) {
        return absl::InvalidArgumentError(absl::StrCat(
            dir, "/", summary->tag, " holds the LoRA adapters of ", adapted->size(),
            " projections and not the frozen base weights: give --lora_alpha (the job's lora.lora_alpha, and "
            "--use_rslora if it set use_rslora) to merge them into --hf_from's weights (or export them from the "
            "job with export.hf_dir / export.adapter_dir)"));
      }
      auto opened = HfModelFolder::Open(fs, format.from);
      if (!opened.ok()) return opened.status();
      base = std::move(*opened);
      tensors.clear();
      for (const std::string& name : base->TensorNames()) tensors.push_back({name, base->Find(name)->shape});
      for (const std::string& prefix : *adapted) {
        if (base->Find(prefix + ".weight") == nullptr) {
          return absl::InvalidArgumentError(absl::StrCat(dir, ": the adapter of ", prefix, " has no ", prefix,
                                                         ".weight in ", format.from));
        }
      }
      source = [&](const std::string& name) -> absl::StatusOr<torch::Tensor> {
        const std::string suffix = ".weight";
        const std::string prefix = name.size() > suffix.size() ? name.substr(0, name.size() - suffix.size()) : "";
        if (name.size() > suffix.size() && name.compare(prefix.size(), suffix.size(), suffix) == 0 &&
            adapted->count(prefix)) {
          auto weight = base->View(name);
          if (!weight.ok()) return weight.status();
          auto a = (*reader)->View(prefix + ".lora_A.weight");
          if (!a.ok()) return a.status();
          auto b = (*reader)->View(prefix + ".lora_B.weight");
          if (!b.ok()) return b.status();
          return MergeLoraWeight(prefix, *weight, *a, *b, format.lora);
        }
        // A tensor the job trained besides the adapters comes from the checkpoint.
        if ((*reader)->Find(name) != nullptr) return (*reader)->View(name);
        return base->View(name);
      };
    }
    HfExportOptions export_options;
    export_options.folder = output;
    export_options.dtype = *dtype;
    export_options.max_shard_bytes = *shard;
    export_options.config_json = LlamaHfConfigJson(*config, TorchDtypeName(*dtype));
    export_options.tokenizer_from = format.from;
    absl::Status exported = ExportHfFolder(fs, export_options, tensors, source);
    if (exported.ok()) {
      std::printf("dsconsolidate: %s/%s -> %s: a Hugging Face folder, %zu tensors in %s%s\n", dir.c_str(),
                  summary->tag.c_str(), output.c_str(), tensors.size(), format.dtype.c_str(),
                  adapted->empty() ? ""
                                   : absl::StrCat(", the LoRA adapters of ", adapted->size(),
                                                  " projections merged into ", format.from, "'s weights")
                                         .c_str());
    }
    return exported;
  }();
  (void)fs.RemoveFile(masters);
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  std::string tag, output;
  bool verify = false;
  ConsolidateOptions options;
  std::string format = "safetensors";
  HfFormat hf;
  dslaunch::FlagTable flags("dsconsolidate",
                            "dsconsolidate CHECKPOINT_DIR [--tag TAG] --output FILE.safetensors "
                            "[--allow_nonfinite]\n       dsconsolidate --verify CHECKPOINT_DIR [--tag TAG]");
  flags.Positional("CHECKPOINT_DIR", "the checkpoint folder (the one with `latest`)")
      .String("--tag", &tag, "TAG", "the checkpoint to read (default: the one `latest` names)")
      .String("--output", &output, "FILE", "the safetensors file to write")
      .Bool("--verify", &verify, "check every checkpoint (or the one tag) against its commit record")
      .Bool("--allow_nonfinite", &options.allow_nonfinite, "write NaN/Inf values instead of refusing")
      .String("--format", &format, "FORMAT",
              "safetensors: one fp32 file; hf: a Hugging Face model folder (--output names the folder)",
              {"safetensors", "hf"})
      .String("--hf_from", &hf.from, "MODEL_DIR",
              "--format hf: the Hugging Face folder the job started from (config.json, tokenizer files)")
      .String("--dtype", &hf.dtype, "DTYPE", "--format hf: the weights' dtype", {"float32", "float16", "bfloat16"})
      .String("--max_shard_size", &hf.max_shard_size, "SIZE", "--format hf: largest shard (5GB, 500MB, ...)")
      .Double("--lora_alpha", &hf.lora.alpha, "ALPHA",
              "--format hf of a LoRA job's checkpoint: the job's lora.lora_alpha (the adapters are merged into "
              "--hf_from's weights)")
      .Bool("--use_rslora", &hf.lora.use_rslora, "--format hf of a LoRA job's checkpoint: the job set use_rslora");
  if (absl::Status parsed = flags.Parse(std::vector<std::string>(argv + 1, argv + argc)); !parsed.ok()) {
    std::fprintf(stderr, "dsconsolidate: %s\n(dsconsolidate --help lists the flags)\n",
                 std::string(parsed.message()).c_str());
    return 2;
  }
  if (flags.help_requested()) {
    std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  if (flags.version_requested()) {
    std::printf("%s\n", flags.Version().c_str());
    return 0;
  }
  if (flags.positionals().size() != 1 || (verify == !output.empty())) {
    std::fputs(flags.Help().c_str(), stderr);
    return 2;
  }
  const std::string dir = flags.positionals()[0];
  if (verify) return Verify(dir, tag);
  if ((format == "hf") != !hf.from.empty()) {
    std::fprintf(stderr, "dsconsolidate: --format hf and --hf_from go together\n");
    return 2;
  }
  if (format != "hf" && (hf.lora.alpha != 0 || hf.lora.use_rslora)) {
    std::fprintf(stderr, "dsconsolidate: --lora_alpha and --use_rslora are for --format hf\n");
    return 2;
  }
  if (format == "hf") {
    absl::Status status = ExportHf(dir, tag, output, options, hf);
    if (!status.ok()) {
      std::fprintf(stderr, "dsconsolidate: %s\n", std::string(status.message()).c_str());
      return 1;
    }
    return 0;
  }
  auto summary = ConsolidateCheckpoint(dir, tag, output, options);
  if (!summary.ok()) {
    std::fprintf(stderr, "dsconsolidate: %s\n", std::string(summary.status().message()).c_str());
    return 1;
  }
  std::printf("dsconsolidate: %s/%s -> %s: %ld tensors, %ld fp32 values, %d rank file(s) read one at a time\n",
              dir.c_str(), summary->tag.c_str(), output.c_str(), static_cast<long>(summary->tensors),
              static_cast<long>(summary->elements), summary->ranks_read);
  return 0;
}
