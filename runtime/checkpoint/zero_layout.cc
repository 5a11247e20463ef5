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

}  // namespace dslaunch::runtime
