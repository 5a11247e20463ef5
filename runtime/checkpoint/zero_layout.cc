#include "runtime/checkpoint/zero_layout.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace dslaunch::runtime {

absl::StatusOr<std::vector<int64_t>> SavedUnitSizes(torch::serialize::InputArchive& archive, int64_t total,
                                                    const std::string& prefix) {
  c10::IValue value;
  if (!archive.try_read(prefix + "unit_sizes", value)) return std::vector<int64_t>{total};
  std::vector<int64_t> sizes;
  int64_t sum = 0;
  for (absl::string_view part : absl::StrSplit(value.toStringRef(), ',', absl::SkipEmpty())) {
    int64_t size = 0;
    if (!absl::SimpleAtoi(part, &size) || size <= 0) {
      return absl::DataLossError(absl::StrCat(prefix, "unit_sizes: bad entry '", part, "'"));
    }
    sizes.push_back(size);
    sum += size;
  }
  if (sum != total) {
    return absl::DataLossError(absl::StrCat("zero/unit_sizes add up to ", sum, ", not ", total));
  }
  return sizes;
}

absl::StatusOr<SavedLayout> ReadSavedLayout(torch::serialize::InputArchive& archive, const std::string& prefix,
                                            const std::string& file) {
  c10::IValue names, shapes;
  if (!archive.try_read(prefix + "names", names) || !archive.try_read(prefix + "shapes", shapes)) {
    return absl::DataLossError(absl::StrCat(file, " has no parameter layout (", prefix, "names, ", prefix, "shapes)"));
  }
  SavedLayout layout;
  for (absl::string_view name : absl::StrSplit(names.toStringRef(), '\n', absl::SkipEmpty())) {
    layout.names.emplace_back(name);
  }
  const std::string& shape_text = shapes.toStringRef();
  if (!layout.names.empty() || !shape_text.empty()) {
    for (absl::string_view shape : absl::StrSplit(shape_text, ';')) {
      std::vector<int64_t> dims;
      for (absl::string_view dim : absl::StrSplit(shape, ',', absl::SkipEmpty())) {
        int64_t size = 0;
        if (!absl::SimpleAtoi(dim, &size) || size < 0) {
          return absl::DataLossError(absl::StrCat(file, ": bad shape '", shape, "' in ", prefix, "shapes"));
        }
        dims.push_back(size);
      }
      layout.shapes.push_back(std::move(dims));
    }
  }
  if (layout.shapes.size() != layout.names.size()) {
    return absl::DataLossError(absl::StrCat(file, ": ", prefix, "names has ", layout.names.size(), " entries and ",
                                            prefix, "shapes ", layout.shapes.size()));
  }
  return layout;
}

}  // namespace dslaunch::runtime
