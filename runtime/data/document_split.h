// Holding out documents for evaluation: the last documents of a dataset form
// the validation set, so train and validation never share a document and the
// split does not depend on the sampling seed.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"

namespace dslaunch::runtime {

// Document index ranges [train_begin, train_end) and [validation_begin, validation_end).
struct DocumentSplit {
  int64_t train_begin = 0;
  int64_t train_end = 0;
  int64_t validation_begin = 0;
  int64_t validation_end = 0;
};

// validation_fraction in [0, 1). The validation set is round(n * fraction)
// documents, but at least one when the fraction is positive, and never all:
// with fewer than 2 documents and a positive fraction it is an error.
absl::StatusOr<DocumentSplit> SplitDocuments(int64_t num_documents, double validation_fraction);

}  // namespace dslaunch::runtime
