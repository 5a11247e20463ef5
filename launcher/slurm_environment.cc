#include "launcher/slurm_environment.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace dslaunch {
namespace {

absl::Status Bad(const std::string& what, const std::string& text, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(what, "='", text, "': ", why));
}

// The names one hostlist item stands for ("r[1-2]n[3,5]"): every bracket
// group, left to right, multiplies the names so far.
absl::StatusOr<std::vector<std::string>> ExpandItem(const std::string& item, const std::string& what,
                                                    const std::string& whole) {
  std::vector<std::string> names = {""};
  size_t at = 0;
  while (at < item.size()) {
    const size_t open = item.find('[', at);
    const std::string plain = item.substr(at, open == std::string::npos ? std::string::npos : open - at);
    if (plain.find(']') != std::string::npos) return Bad(what, whole, absl::StrCat("']' without '[' in '", item, "'"));
    for (std::string& name : names) name += plain;
    if (open == std::string::npos) break;
    const size_t close = item.find(']', open);
    if (close == std::string::npos) return Bad(what, whole, absl::StrCat("'[' without ']' in '", item, "'"));
    std::vector<std::string> suffixes;
    for (absl::string_view range : absl::StrSplit(item.substr(open + 1, close - open - 1), ',')) {
      const size_t dash = range.find('-');
      const absl::string_view first_text = range.substr(0, dash);
      const absl::string_view last_text = dash == absl::string_view::npos ? first_text : range.substr(dash + 1);
      int64_t first = 0, last = 0;
      if (first_text.empty() || !absl::SimpleAtoi(first_text, &first) || !absl::SimpleAtoi(last_text, &last) ||
          first < 0 || last < first || last - first > 100000) {
        return Bad(what, whole, absl::StrCat("'", range, "' in '", item, "' is not a number or a range a-b"));
      }
      const size_t width = first_text.size();  // "01-03": leading zeros keep the width
      for (int64_t n = first; n <= last; ++n) {
        std::string digits = absl::StrCat(n);
        if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
        suffixes.push_back(digits);
      }
    }
    std::vector<std::string> grown;
    for (const std::string& name : names) {
      for (const std::string& suffix : suffixes) grown.push_back(name + suffix);
    }
    names = std::move(grown);
    at = close + 1;
  }
  return names;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ExpandSlurmHostlist(const std::string& hostlist, const std::string& what) {
  const std::string text(absl::StripAsciiWhitespace(hostlist));
  if (text.empty()) return Bad(what, hostlist, "no host");
  std::vector<std::string> hosts;
  // Items are separated by commas outside brackets.
  size_t start = 0;
  int depth = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i < text.size() && text[i] == '[') ++depth;
    if (i < text.size() && text[i] == ']') --depth;
    if (i < text.size() && (text[i] != ',' || depth > 0)) continue;
    const std::string item = text.substr(start, i - start);
    if (item.empty()) return Bad(what, hostlist, "an empty host name");
    auto names = ExpandItem(item, what, hostlist);
    if (!names.ok()) return names.status();
    hosts.insert(hosts.end(), names->begin(), names->end());
    start = i + 1;
  }
  return hosts;
}

absl::StatusOr<int> SlurmGpusPerNode(const std::string& gpus_on_node, const std::string& gpus_per_node) {
  int gpus = 0;
  if (!gpus_on_node.empty()) {
    if (!absl::SimpleAtoi(gpus_on_node, &gpus) || gpus < 0) {
      return Bad("SLURM_GPUS_ON_NODE", gpus_on_node, "not a count");
    }
    return gpus;
  }
  if (gpus_per_node.empty()) return 0;
  // "8", "gpu:8", "gpu:h100:8", or several types "gpu:a100:2,gpu:v100:1":
  // each entry's count is its last field, and the node has their sum.
  for (absl::string_view entry : absl::StrSplit(gpus_per_node, ',')) {
    const std::vector<std::string> fields = absl::StrSplit(entry, ':');
    int count = 0;
    if (!absl::SimpleAtoi(fields.back(), &count) || count < 0) {
      return Bad("SLURM_GPUS_PER_NODE", gpus_per_node, "expected N, gpu:N or gpu:TYPE:N (comma-separated)");
    }
    gpus += count;
  }
  return gpus;
}

}  // namespace dslaunch
