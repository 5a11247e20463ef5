#include "runtime/data/document_split.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace dslaunch::runtime {

absl::StatusOr<DocumentSplit> SplitDocuments(int64_t num_documents, double validation_fraction) {
  if (!(validation_fraction >= 0.0 && validation_fraction < 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "validation_fraction must be in [0, 1), got ", validation_fraction));
  }
  int64_t validation = 0;
  if (validation_fraction > 0.0) {
    if (num_documents < 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("validation_fraction ", validation_fraction, " needs at least 2 documents, the dataset has ",
                       num_documents));
    }
    validation = std::llround(static_cast<double>(num_documents) * validation_fraction);
    validation = std::clamp<int64_t>(validation, 1, num_documents - 1);
  }
  DocumentSplit split;
  split.train_begin = 0;
  split.train_end = num_documents - validation;
  split.validation_begin = split.train_end;
  split.validation_end = num_documents;
  return split;
}

}  // namespace dslaunch::runtime
