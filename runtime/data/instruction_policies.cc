#include "runtime/data/instruction_policies.h"

#include "absl/strings/str_cat.h"

namespace dslaunch::runtime {

absl::StatusOr<BadRecordPolicy> ParseBadRecordPolicy(absl::string_view name) {
  if (name == "refuse") return BadRecordPolicy::kRefuse;
  if (name == "skip") return BadRecordPolicy::kSkip;
  return absl::InvalidArgumentError(
      absl::StrCat("bad-record policy '", name, "' is unknown (expected refuse or skip)"));
}

absl::StatusOr<LongRecordPolicy> ParseLongRecordPolicy(absl::string_view name) {
  if (name == "refuse") return LongRecordPolicy::kRefuse;
  if (name == "skip") return LongRecordPolicy::kSkip;
  if (name == "truncate") return LongRecordPolicy::kTruncate;
  return absl::InvalidArgumentError(
      absl::StrCat("long-record policy '", name, "' is unknown (expected refuse, skip or truncate)"));
}

absl::string_view LongRecordPolicyName(LongRecordPolicy policy) {
  switch (policy) {
    case LongRecordPolicy::kRefuse: return "refuse";
    case LongRecordPolicy::kSkip: return "skip";
    case LongRecordPolicy::kTruncate: return "truncate";
  }
  return "?";
}

}  // namespace dslaunch::runtime
