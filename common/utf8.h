// UTF-8 as RFC 3629 has it: the sequence lengths JSON quoting and
// constrained output (runtime/generate/output_constraint.h) check text by.
#pragma once

#include <cstddef>

#include "absl/strings/string_view.h"

namespace dslaunch {

// Length of the valid UTF-8 sequence at the start of `text`, or 0 when it is
// not one (RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF).
// An ASCII byte is a sequence of 1; an empty `text`, 0.
size_t Utf8SequenceLength(absl::string_view text);

}  // namespace dslaunch
