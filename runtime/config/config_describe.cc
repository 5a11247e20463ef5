// DescribeJobConfig / DescribeDsConfig: the resolved config as YAML, written
// from the same key tables the loader reads with, so every key appears with
// its effective value and the text loads back to the same config.

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "runtime/config/config_loader.h"
#include "runtime/config/config_schema.h"
#include "runtime/config/ds_config_schema.h"
#include "runtime/config/job_config_schema.h"

namespace dslaunch::runtime {
namespace {

using config_internal::DsConfigKeys;
using config_internal::FieldRef;
using config_internal::FormatNumber;
using config_internal::JobConfigKeys;
using config_internal::KeySpec;
using config_internal::ValueKind;

// YAML double-quoted: every string reads back as a string ("1", "true", "").
std::string Quote(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          absl::StrAppend(&out, "\\x", absl::Hex(c, absl::kZeroPad2));
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

std::string FormatValue(const KeySpec& spec) {
  struct Visitor {
    const KeySpec& spec;
    // Integers below their minimum are "not set" sentinels (-1, or 0 for an
    // unresolved batch size): DeepSpeed's None.
    std::string Integer(int64_t value) const {
      if (spec.null_ok && spec.min && static_cast<double>(value) < *spec.min) return "null";
      return absl::StrCat(value);
    }
    std::string operator()(std::monostate) const { return "null"; }
    std::string operator()(bool* v) const { return *v ? "true" : "false"; }
    std::string operator()(int* v) const { return Integer(*v); }
    std::string operator()(int64_t* v) const { return Integer(*v); }
    std::string operator()(uint64_t* v) const { return absl::StrCat(*v); }
    std::string operator()(double* v) const { return FormatNumber(*v); }
    std::string operator()(std::string* v) const {
      if (spec.kind == ValueKind::kBoolOrAuto) return *v;
      if (spec.null_ok && v->empty()) return "null";
      return Quote(*v);
    }
    std::string operator()(std::array<double, 2>* v) const {
      return absl::StrCat("[", FormatNumber((*v)[0]), ", ", FormatNumber((*v)[1]), "]");
    }
    std::string operator()(std::vector<int>* v) const { return absl::StrCat("[", absl::StrJoin(*v, ", "), "]"); }
    std::string operator()(std::vector<std::string>* v) const {
      std::vector<std::string> quoted;
      for (const std::string& s : *v) quoted.push_back(Quote(s));
      return absl::StrCat("[", absl::StrJoin(quoted, ", "), "]");
    }
  };
  return std::visit(Visitor{spec}, spec.field);
}

// An ordered tree of sections and values, rendered as block YAML.
class YamlTree {
 public:
  void Set(const std::string& path, std::string value) {
    YamlTree* node = this;
    for (absl::string_view part : absl::StrSplit(path, '.')) node = node->Child(std::string(part));
    node->value_ = std::move(value);
  }

  void Render(int indent, std::string* out) const {
    for (const auto& [name, child] : children_) {
      absl::StrAppend(out, std::string(indent, ' '), name, ":");
      if (child.children_.empty()) {
        absl::StrAppend(out, " ", child.value_, "\n");
      } else {
        absl::StrAppend(out, "\n");
        child.Render(indent + 2, out);
      }
    }
  }

 private:
  YamlTree* Child(const std::string& name) {
    for (auto& [child_name, child] : children_) {
      if (child_name == name) return &child;
    }
    children_.emplace_back(name, YamlTree());
    return &children_.back().second;
  }

  std::string value_;
  std::vector<std::pair<std::string, YamlTree>> children_;
};

void AddKeys(const std::vector<KeySpec>& keys, const std::string& skip_prefix, YamlTree* tree) {
  for (const KeySpec& spec : keys) {
    if (!spec.canonical.empty()) continue;  // another name of a listed key
    if (std::holds_alternative<std::monostate>(spec.field)) continue;  // not stored
    if (!skip_prefix.empty() && absl::StartsWith(spec.path, skip_prefix)) continue;
    tree->Set(spec.path, FormatValue(spec));
  }
}

std::string RenderDsConfig(const DsConfig& config, int indent) {
  DsConfig copy = config;  // the tables bind to mutable fields; nothing is written
  YamlTree tree;
  // No scheduler: DeepSpeed keeps the optimizer's lr constant.
  AddKeys(DsConfigKeys(&copy, copy.scheduler.type), copy.scheduler.type.empty() ? "scheduler." : "",
          &tree);
  std::string out;
  tree.Render(indent, &out);
  return out;
}

}  // namespace

std::string DescribeDsConfig(const DsConfig& config) { return RenderDsConfig(config, 0); }

std::string DescribeJobConfig(const JobConfig& config) {
  JobConfig copy = config;
  YamlTree tree;
  AddKeys(JobConfigKeys(&copy), "", &tree);
  std::string out = absl::StrCat("# job file: ", config.path, "\n");
  tree.Render(0, &out);
  absl::StrAppend(&out, "ds_config:");
  if (!config.ds_config_path.empty()) absl::StrAppend(&out, "  # from ", config.ds_config_path);
  absl::StrAppend(&out, "\n", RenderDsConfig(config.ds, 2));
  if (!config.not_yet_supported.empty()) {
    absl::StrAppend(&out, "# not yet supported:\n");
    for (const std::string& line : config.not_yet_supported) {
      absl::StrAppend(&out, "#   ", line, "\n");
    }
  }
  return out;
}

}  // namespace dslaunch::runtime
