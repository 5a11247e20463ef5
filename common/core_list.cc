#include "common/core_list.h"

#include <algorithm>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace dslaunch {

absl::StatusOr<std::vector<int>> ParseCoreList(const std::string& text, const std::string& what) {
  constexpr int kMaxCore = 1 << 16;  // CPU_SETSIZE is 1024; kernels allow more, never this many
  std::set<int> cores;
  for (absl::string_view part : absl::StrSplit(absl::StripAsciiWhitespace(text), ',')) {
    part = absl::StripAsciiWhitespace(part);
    const size_t dash = part.find('-');
    int first = 0, last = 0;
    const bool ok = dash == absl::string_view::npos
                        ? absl::SimpleAtoi(part, &first) && (last = first, true)
                        : absl::SimpleAtoi(part.substr(0, dash), &first) && absl::SimpleAtoi(part.substr(dash + 1), &last);
    if (!ok || first < 0 || last < first || last >= kMaxCore) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": '", part, "' in '", text,
                                                     "' is not a core or a range of cores (e.g. 1,3-5,7)"));
    }
    for (int core = first; core <= last; ++core) cores.insert(core);
  }
  return std::vector<int>(cores.begin(), cores.end());
}

std::string FormatCoreList(const std::vector<int>& cores) {
  std::string out;
  for (size_t i = 0; i < cores.size();) {
    size_t j = i;
    while (j + 1 < cores.size() && cores[j + 1] == cores[j] + 1) ++j;
    absl::StrAppend(&out, out.empty() ? "" : ",", cores[i]);
    if (j > i) absl::StrAppend(&out, "-", cores[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace dslaunch
