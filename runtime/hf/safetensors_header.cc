#include "runtime/hf/safetensors_header.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include <yaml-cpp/yaml.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/json_quote.h"

namespace dslaunch::runtime {
namespace {

struct DtypeRow {
  SafetensorsDtype dtype;
  const char* name;
  int64_t size;
};
constexpr DtypeRow kDtypes[] = {
    {SafetensorsDtype::kF32, "F32", 4}, {SafetensorsDtype::kF16, "F16", 2},   {SafetensorsDtype::kBF16, "BF16", 2},
    {SafetensorsDtype::kF64, "F64", 8}, {SafetensorsDtype::kI64, "I64", 8},   {SafetensorsDtype::kI32, "I32", 4},
    {SafetensorsDtype::kI16, "I16", 2}, {SafetensorsDtype::kI8, "I8", 1},     {SafetensorsDtype::kU8, "U8", 1},
    {SafetensorsDtype::kBool, "BOOL", 1},
};

absl::Status Lie(const std::string& path, const std::string& what) {
  return absl::DataLossError(absl::StrCat(path, ": ", what));
}

}  // namespace

const char* SafetensorsDtypeName(SafetensorsDtype dtype) {
  for (const DtypeRow& row : kDtypes) {
    if (row.dtype == dtype) return row.name;
  }
  return "unknown";
}

SafetensorsDtype SafetensorsDtypeFromName(const std::string& name) {
  for (const DtypeRow& row : kDtypes) {
    if (name == row.name) return row.dtype;
  }
  return SafetensorsDtype::kUnknown;
}

int64_t SafetensorsDtypeSize(SafetensorsDtype dtype) {
  for (const DtypeRow& row : kDtypes) {
    if (row.dtype == dtype) return row.size;
  }
  return 0;
}

int64_t SafetensorsEntryInfo::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}


absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(const uint8_t* file, int64_t available, int64_t file_size,
                                                         const std::string& path) {
  if (file_size < 8 || available < 8) {
    return Lie(path, absl::StrCat("truncated: ", file_size, " bytes, shorter than the 8-byte header length"));
  }
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | file[i];
  if (length > static_cast<uint64_t>(kMaxSafetensorsHeaderBytes)) {
    return Lie(path, absl::StrCat("the header claims ", length, " bytes (at most ", kMaxSafetensorsHeaderBytes,
                                  "): not a safetensors file, or a corrupt one"));
  }
  if (static_cast<int64_t>(length) > file_size - 8) {
    return Lie(path, absl::StrCat("truncated: the header claims ", length, " bytes but the file has ",
                                  file_size - 8, " after the length"));
  }
  if (static_cast<int64_t>(length) > available - 8) {
    return absl::InternalError(absl::StrCat(path, ": the caller passed less than the header"));
  }
  SafetensorsHeader header;
  header.data_start = 8 + static_cast<int64_t>(length);
  const int64_t data_size = file_size - header.data_start;
  YAML::Node root;
  try {
    root = YAML::Load(std::string(reinterpret_cast<const char*>(file) + 8, length));
  } catch (const YAML::Exception& e) {
    return Lie(path, absl::StrCat("the header is not valid JSON: ", e.msg));
  }
  if (!root.IsMap()) return Lie(path, "the header is not a JSON object");
  try {
    for (const auto& item : root) {
      const std::string name = item.first.Scalar();
      const YAML::Node& value = item.second;
      if (name == "__metadata__") {
        if (!value.IsMap()) return Lie(path, "__metadata__ is not an object of strings");
        for (const auto& field : value) header.metadata[field.first.Scalar()] = field.second.Scalar();
        continue;
      }
      auto bad = [&](const std::string& what) { return Lie(path, absl::StrCat("tensor '", name, "': ", what)); };
      if (!value.IsMap() || !value["dtype"] || !value["shape"] || !value["data_offsets"]) {
        return bad("expected {dtype, shape, data_offsets}");
      }
      SafetensorsEntryInfo entry;
      entry.name = name;
      entry.dtype_name = value["dtype"].Scalar();
      entry.dtype = SafetensorsDtypeFromName(entry.dtype_name);
      if (!value["shape"].IsSequence()) return bad("shape is not a list");
      int64_t elements = 1;
      for (const auto& d : value["shape"]) {
        const int64_t size = d.as<int64_t>();
        if (size < 0) return bad(absl::StrCat("negative dimension ", size));
        if (size > 0 && elements > std::numeric_limits<int64_t>::max() / 16 / size) return bad("shape too large");
        elements *= size;
        entry.shape.push_back(size);
      }
      const YAML::Node& offsets = value["data_offsets"];
      if (!offsets.IsSequence() || offsets.size() != 2) return bad("data_offsets is not [begin, end]");
      entry.begin = offsets[0].as<int64_t>();
      entry.end = offsets[1].as<int64_t>();
      if (entry.begin < 0 || entry.end < entry.begin) {
        return bad(absl::StrCat("data_offsets [", entry.begin, ", ", entry.end, "] are not a range"));
      }
      if (entry.end > data_size) {
        return bad(absl::StrCat("data_offsets end at byte ", entry.end, " but the file has ", data_size,
                                " bytes of data (truncated?)"));
      }
      const int64_t element_size = SafetensorsDtypeSize(entry.dtype);
      if (element_size > 0 && entry.end - entry.begin != elements * element_size) {
        return bad(absl::StrCat(entry.end - entry.begin, " bytes for shape [", absl::StrJoin(entry.shape, ", "),
                                "] of ", entry.dtype_name, " (", elements * element_size, " expected)"));
      }
      header.entries.push_back(std::move(entry));
    }
  } catch (const YAML::Exception& e) {
    return Lie(path, absl::StrCat("the header has a value of the wrong type: ", e.msg));
  }
  std::sort(header.entries.begin(), header.entries.end(),
            [](const SafetensorsEntryInfo& a, const SafetensorsEntryInfo& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  for (size_t i = 1; i < header.entries.size(); ++i) {
    const SafetensorsEntryInfo& before = header.entries[i - 1];
    if (header.entries[i].begin < before.end) {
      return Lie(path, absl::StrCat("tensors '", before.name, "' and '", header.entries[i].name,
                                    "' overlap in the data"));
    }
  }
  return header;
}

std::string BuildSafetensorsHeader(std::vector<SafetensorsEntryInfo>& entries,
                                   const std::map<std::string, std::string>& metadata) {
  std::vector<std::string> fields;
  if (!metadata.empty()) {
    std::vector<std::string> pairs;
    for (const auto& [key, value] : metadata) pairs.push_back(absl::StrCat(JsonQuote(key), ":", JsonQuote(value)));
    fields.push_back(absl::StrCat("\"__metadata__\":{", absl::StrJoin(pairs, ","), "}"));
  }
  int64_t offset = 0;
  for (SafetensorsEntryInfo& entry : entries) {
    entry.dtype_name = SafetensorsDtypeName(entry.dtype);
    entry.begin = offset;
    entry.end = offset + entry.elements() * SafetensorsDtypeSize(entry.dtype);
    offset = entry.end;
    fields.push_back(absl::StrCat(JsonQuote(entry.name), ":{\"dtype\":\"", entry.dtype_name, "\",\"shape\":[",
                                  absl::StrJoin(entry.shape, ","), "],\"data_offsets\":[", entry.begin, ",",
                                  entry.end, "]}"));
  }
  std::string json = absl::StrCat("{", absl::StrJoin(fields, ","), "}");
  while ((json.size() + 8) % 8 != 0) json += ' ';
  std::string out(8, '\0');
  uint64_t length = json.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  return out + json;
}

}  // namespace dslaunch::runtime
