// UTF-8 as RFC 3629 has it: the sequence lengths JSON quoting and
// constrained output (runtime/generate/output_constraint.h) check text by.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace dslaunch {

// What a UTF-8 lead byte starts: how many continuation bytes follow, and
// the range the first of them must fall in (RFC 3629's table; the others are
// 0x80-0xBF). continuations 0: not a lead byte (ASCII included).
struct Utf8Lead {
  uint8_t continuations = 0, low = 0x80, high = 0xBF;
};
Utf8Lead Utf8LeadOf(unsigned char byte);

// Length of the valid UTF-8 sequence at the start of `text`, or 0 when it is
// not one (RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF).
// An ASCII byte is a sequence of 1; an empty `text`, 0.
size_t Utf8SequenceLength(absl::string_view text);

}  // namespace dslaunch
