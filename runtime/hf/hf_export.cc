#include "runtime/hf/hf_export.h"

#include <cctype>
#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/json_quote.h"
#include "runtime/hf/hf_model_folder.h"
#include "runtime/hf/safetensors_reader.h"
#include "runtime/hf/safetensors_stream_writer.h"

namespace dslaunch::runtime {

absl::StatusOr<int64_t> ParseShardSize(const std::string& text, const std::string& flag) {
  std::string digits, unit;
  for (char c : text) {
    if (unit.empty() && (std::isdigit(static_cast<unsigned char>(c)) || c == '.')) {
      digits += c;
    } else {
      unit += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    }
  }
  double value = 0;
  double scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  if (unit == "KB") scale = 1e3;
  if (unit == "MB") scale = 1e6;
  if (unit == "GB") scale = 1e9;
  if (unit == "KIB") scale = 1024.0;
  if (unit == "MIB") scale = 1024.0 * 1024;
  if (unit == "GIB") scale = 1024.0 * 1024 * 1024;
  if (scale == 0 || !absl::SimpleAtod(digits, &value) || value * scale < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " '", text, "' is not a size (examples: 5GB, 500MB, 2GiB, 1000000)"));
  }
  return static_cast<int64_t>(value * scale);
}

absl::StatusOr<torch::ScalarType> ParseExportDtype(const std::string& text, const std::string& flag) {
  if (text == "float32" || text == "fp32") return torch::kFloat;
  if (text == "float16" || text == "fp16") return torch::kHalf;
  if (text == "bfloat16" || text == "bf16") return torch::kBFloat16;
  return absl::InvalidArgumentError(absl::StrCat(flag, " '", text, "' is not float32, float16 or bfloat16"));
}

std::string TorchDtypeName(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kHalf: return "float16";
    case torch::kBFloat16: return "bfloat16";
    default: return "float32";
  }
}

absl::Status ExportHfFolder(FileSystem& fs, const HfExportOptions& options, const std::vector<HfTensorSpec>& tensors,
                            const HfTensorSource& source) {
  auto dtype = SafetensorsDtypeOf(options.dtype);
  if (!dtype.ok()) return dtype.status();
  const int64_t element_size = SafetensorsDtypeSize(*dtype);
  // Shards as save_pretrained cuts them.
  std::vector<std::vector<SafetensorsEntryInfo>> shards(1);
  int64_t shard_bytes = 0, total_bytes = 0;
  for (const HfTensorSpec& spec : tensors) {
    SafetensorsEntryInfo entry;
    entry.name = spec.name;
    entry.dtype = *dtype;
    entry.shape = spec.shape;
    const int64_t bytes = entry.elements() * element_size;
    if (!shards.back().empty() && shard_bytes + bytes > options.max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(std::move(entry));
    shard_bytes += bytes;
    total_bytes += bytes;
  }
  // The folder's own name (a trailing '/' would make FOLDER/.partial, and a
  // rename into itself); its partial and old copies beside it, under hidden
  // names of their own, so that a user's FOLDER.old is never touched.
  const std::string name = BaseName(options.folder);
  if (name.empty() || name == "." || name == "..") {
    return absl::InvalidArgumentError(absl::StrCat("export to '", options.folder, "': not a folder name to create"));
  }
  const std::string parent = ParentDirectory(options.folder.substr(0, options.folder.find_last_not_of('/') + 1));
  const std::string folder = JoinPath(parent, name);
  const std::string partial = JoinPath(parent, absl::StrCat(".", name, ".export-partial"));
  const std::string old = JoinPath(parent, absl::StrCat(".", name, ".export-old"));
  if (absl::Status s = fs.RemoveTree(partial); !s.ok()) return s;
  if (absl::Status s = fs.CreateDirectories(partial); !s.ok()) return s;
  auto fail = [&](absl::Status status) {
    (void)fs.RemoveTree(partial);
    return status;
  };

  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  std::vector<std::string> weight_map;
  for (size_t k = 0; k < shards.size(); ++k) {
    const std::string file = shards.size() == 1
                                 ? absl::StrCat(options.weights_stem, ".safetensors")
                                 : absl::StrFormat("%s-%05d-of-%05d.safetensors", options.weights_stem, k + 1, shards.size());
    auto writer = SafetensorsStreamWriter::Create(fs, partial + "/" + file, shards[k], metadata);
    if (!writer.ok()) return fail(writer.status());
    for (const SafetensorsEntryInfo& entry : shards[k]) {
      auto values = source(entry.name);
      if (!values.ok()) return fail(values.status());
      if (absl::Status s = (*writer)->Append(*values); !s.ok()) return fail(s);
      weight_map.push_back(absl::StrCat("    ", JsonQuote(entry.name), ": ", JsonQuote(file)));
    }
    if (absl::Status s = (*writer)->Finish(); !s.ok()) return fail(s);
  }
  if (shards.size() > 1) {
    const std::string index = absl::StrCat("{\n  \"metadata\": {\"total_size\": ", total_bytes,
                                           "},\n  \"weight_map\": {\n", absl::StrJoin(weight_map, ",\n"), "\n  }\n}\n");
    if (absl::Status s = WriteFileAtomically(fs, absl::StrCat(partial, "/", options.weights_stem, ".safetensors.index.json"), index); !s.ok()) return fail(s);
  }
  if (absl::Status s = WriteFileAtomically(fs, partial + "/" + options.config_file, options.config_json); !s.ok()) {
    return fail(s);
  }
  if (!options.tokenizer_from.empty()) {
    for (const char* name : kHfTokenizerFiles) {
      const std::string from = options.tokenizer_from + "/" + name;
      if (!fs.Exists(from)) continue;
      auto content = fs.ReadFile(from);
      if (!content.ok()) return fail(content.status());
      if (absl::Status s = WriteFileAtomically(fs, partial + "/" + name, *content); !s.ok()) return fail(s);
    }
  }
  if (absl::Status s = fs.SyncDirectory(partial); !s.ok()) return fail(s);
  // Into place: an older folder of that name goes only once the new one is
  // whole, and comes back if the new one cannot take its place.
  const bool replacing = fs.Exists(folder);
  if (replacing) {
    if (absl::Status s = fs.RemoveTree(old); !s.ok()) return fail(s);
    if (absl::Status s = fs.Rename(folder, old); !s.ok()) return fail(s);
  }
  if (absl::Status s = fs.Rename(partial, folder); !s.ok()) {
    if (replacing) (void)fs.Rename(old, folder);
    return fail(s);
  }
  if (absl::Status s = fs.SyncDirectory(parent); !s.ok()) return s;
  return fs.RemoveTree(old);
}

}  // namespace dslaunch::runtime
