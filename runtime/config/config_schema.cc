#include "runtime/config/config_schema.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <type_traits>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace dslaunch::runtime::config_internal {
namespace {

// Suggesting among more keys than this reads as noise; the unknown-key
// message then only says that the key is unknown.
constexpr size_t kMaxKeysToList = 12;

std::string JoinPath(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : absl::StrCat(prefix, ".", name);
}

const void* FieldAddress(const FieldRef& field) {
  return std::visit(
      [](auto pointer) -> const void* {
        if constexpr (std::is_same_v<decltype(pointer), std::monostate>) {
          return nullptr;
        } else {
          return pointer;
        }
      },
      field);
}

std::string DisplayChoice(const std::string& choice) {
  if (absl::EndsWith(choice, "*"))
    return absl::StrCat(choice.substr(0, choice.size() - 1), "<...>");
  return choice;
}

// The listed spelling that `text` matches, or nullopt.
std::optional<std::string> MatchChoice(const KeySpec& spec, const std::string& text) {
  for (const std::string& choice : spec.one_of) {
    if (absl::EndsWith(choice, "*")) {
      absl::string_view stem(choice.data(), choice.size() - 1);
      if (absl::StartsWith(text, stem) && text.size() > stem.size()) return text;
      continue;
    }
    if (spec.fold_case ? absl::EqualsIgnoreCase(choice, text) : choice == text) return choice;
  }
  return std::nullopt;
}

KeySpec MakeKey(std::string path, ValueKind kind, FieldRef field) {
  KeySpec spec;
  spec.path = std::move(path);
  spec.kind = kind;
  spec.field = field;
  return spec;
}

}  // namespace

std::string Location(const TreeSource& source, const std::string& path, const YAML::Mark& mark) {
  // The last override of a path is the one that counts.
  for (auto it = source.overrides.rbegin(); it != source.overrides.rend(); ++it) {
    const std::string& written = it->path;
    bool wrote_it = path == written || absl::StartsWith(path, absl::StrCat(written, "."));
    bool created_on_the_way =
        mark.is_null() && (path.empty() || absl::StartsWith(written, absl::StrCat(path, ".")));
    if (wrote_it || created_on_the_way) return absl::StrCat("--override '", it->text, "'");
  }
  if (mark.is_null()) return source.file;
  return absl::StrCat(source.file, ":", mark.line + 1);
}

void Problems::AtKey(const TreeSource& source, const std::string& path, const YAML::Mark& mark,
                     absl::string_view what) {
  std::string location = Location(source, path, mark);
  if (path.empty()) {
    lines_.push_back(absl::StrCat(location, ": ", what));
  } else {
    lines_.push_back(absl::StrCat(location, ": ", source.key_prefix, path, ": ", what));
  }
}

void Problems::At(const std::string& location, absl::string_view message) {
  lines_.push_back(absl::StrCat(location, ": ", message));
}

absl::Status Problems::ToStatus() const {
  if (lines_.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrJoin(lines_, "\n"));
}

KeySpec Key(std::string path, bool* field) {
  return MakeKey(std::move(path), ValueKind::kBool, field);
}
KeySpec Key(std::string path, int* field) {
  return MakeKey(std::move(path), ValueKind::kInt, field);
}
KeySpec Key(std::string path, int64_t* field) {
  return MakeKey(std::move(path), ValueKind::kInt, field);
}
KeySpec Key(std::string path, uint64_t* field) {
  return MakeKey(std::move(path), ValueKind::kInt, field).Min(0);
}
KeySpec Key(std::string path, double* field) {
  return MakeKey(std::move(path), ValueKind::kNumber, field);
}
KeySpec Key(std::string path, std::string* field) {
  return MakeKey(std::move(path), ValueKind::kString, field);
}
KeySpec Key(std::string path, std::array<double, 2>* field) {
  return MakeKey(std::move(path), ValueKind::kNumberPair, field);
}
KeySpec Key(std::string path, std::vector<std::string>* field) {
  return MakeKey(std::move(path), ValueKind::kStringList, field);
}
KeySpec Key(std::string path, std::vector<int>* field) {
  return MakeKey(std::move(path), ValueKind::kIntList, field);
}
KeySpec BoolOrAuto(std::string path, std::string* field) {
  return MakeKey(std::move(path), ValueKind::kBoolOrAuto, field);
}
KeySpec Unstored(std::string path, ValueKind kind) {
  return MakeKey(std::move(path), kind, std::monostate());
}

bool KeySpec::IsDeepSpeedDefault(const YAML::Node& node) const {
  if (node.IsNull()) return true;
  if (!node.IsScalar()) return false;
  const std::string& text = node.Scalar();
  bool given_bool = false, default_bool = false;
  if (kind == ValueKind::kBool && ParseBoolText(text, &given_bool) && ParseBoolText(deepspeed_default, &default_bool)) {
    return given_bool == default_bool;
  }
  double given_number = 0, default_number = 0;
  if ((kind == ValueKind::kInt || kind == ValueKind::kNumber) && ParseNumberText(text, &given_number) &&
      ParseNumberText(deepspeed_default, &default_number)) {
    return given_number == default_number;
  }
  return absl::EqualsIgnoreCase(text, deepspeed_default);
}

YAML::Mark WalkResult::MarkOf(const std::string& canonical) const {
  auto it = given.find(canonical);
  return it == given.end() ? YAML::Mark::null_mark() : it->second.mark;
}

std::string WalkResult::WrittenPath(const std::string& canonical) const {
  auto it = given.find(canonical);
  return it == given.end() ? canonical : it->second.path;
}

SchemaWalker::SchemaWalker(std::vector<KeySpec> keys) : keys_(std::move(keys)) {
  for (const KeySpec& spec : keys_) {
    by_path_[spec.path] = &spec;
    std::string section;
    for (absl::string_view part : absl::StrSplit(spec.path, '.')) {
      std::vector<std::string>& names = children_[section];
      if (std::find(names.begin(), names.end(), part) == names.end()) names.emplace_back(part);
      section = JoinPath(section, std::string(part));
      if (section != spec.path) sections_.insert(section);
    }
  }
}

void SchemaWalker::AllowAnyKeysUnder(const std::string& section) {
  open_sections_.insert(section);
  std::string parent;
  for (absl::string_view part : absl::StrSplit(section, '.')) {
    std::vector<std::string>& names = children_[parent];
    if (std::find(names.begin(), names.end(), part) == names.end()) names.emplace_back(part);
    parent = JoinPath(parent, std::string(part));
    sections_.insert(parent);
  }
}

void SchemaWalker::AddMisplacedKey(const std::string& path, std::string why) {
  misplaced_[path] = std::move(why);
}

WalkResult SchemaWalker::Walk(const YAML::Node& root, const TreeSource& source,
                              Problems* problems) {
  source_ = &source;
  problems_ = problems;
  result_ = WalkResult();
  written_by_.clear();
  if (!root.IsDefined() || root.IsNull()) {
    // An empty file: every key keeps its default.
  } else if (!root.IsMap()) {
    Problem("", root.Mark(),
            absl::StrCat("expected a mapping of keys at the top level, got ", DescribeValue(root)));
    result_.invalid.insert("");  // nothing else of this tree is worth checking
  } else {
    WalkMap(root, "");
  }
  for (const KeySpec& spec : keys_) {
    if (!spec.required || result_.Has(spec.canonical_path())) continue;
    // Required within its top-level section: reported when the section is there.
    size_t dot = spec.path.find('.');
    std::string section = dot == std::string::npos ? "" : spec.path.substr(0, dot);
    auto it = result_.given.find(section);
    if (!section.empty() && it == result_.given.end()) continue;
    YAML::Mark mark = it == result_.given.end() ? YAML::Mark::null_mark() : it->second.mark;
    problems_->At(Location(source, spec.path, mark),
                  absl::StrCat(source.key_prefix, spec.path, ": required"));
    result_.invalid.insert(spec.canonical_path());
  }
  return std::move(result_);
}

bool SchemaWalker::IsUnderOpenSection(const std::string& section) const {
  for (const std::string& open : open_sections_) {
    if (section == open || absl::StartsWith(section, absl::StrCat(open, "."))) return true;
  }
  return false;
}

void SchemaWalker::Problem(const std::string& path, const YAML::Mark& mark,
                           absl::string_view what) {
  problems_->AtKey(*source_, path, mark, what);
}

void SchemaWalker::WalkMap(const YAML::Node& map, const std::string& prefix) {
  // Duplicate keys: JSON parsers keep the last, DeepSpeed refuses them.
  std::map<std::string, int> first_line;
  for (auto it = map.begin(); it != map.end(); ++it) {
    // Copies, not references: yaml-cpp's iterator hands out a temporary
    // proxy, so `it->first` dies with the statement (a stack use after scope
    // that ASan found through tests/fuzz/ds_config_fuzzer). A Node is a
    // handle: copying it copies no tree.
    const YAML::Node key = it->first;
    const YAML::Node value = it->second;
    if (!key.IsScalar()) {
      problems_->AtKey(*source_, prefix, key.Mark(),
                       absl::StrCat("keys must be names, got ", DescribeValue(key)));
      continue;
    }
    const std::string& name = key.Scalar();
    std::string path = JoinPath(prefix, name);
    auto [seen, first] = first_line.emplace(name, key.Mark().line + 1);
    if (!first) {
      problems_->AtKey(*source_, path, key.Mark(),
                       absl::StrCat("duplicate key (first at line ", seen->second, ")"));
      continue;
    }

    auto spec_it = by_path_.find(path);
    if (spec_it != by_path_.end()) {
      const KeySpec& spec = *spec_it->second;
      result_.given[spec.canonical_path()] = WalkResult::Given{path, value, key.Mark()};
      CheckValue(spec, path, value, key.Mark());
      continue;
    }
    if (sections_.count(path)) {
      result_.given[path] = WalkResult::Given{path, value, key.Mark()};
      if (value.IsMap()) {
        WalkMap(value, path);  // in an open section, listed keys are still checked
      } else if (!value.IsNull()) {
        Problem(path, key.Mark(), absl::StrCat("expected a mapping, got ", DescribeValue(value)));
        result_.invalid.insert(path);
      }
      continue;
    }
    auto misplaced = misplaced_.find(path);
    if (misplaced != misplaced_.end()) {
      problems_->AtKey(*source_, path, key.Mark(), misplaced->second);
      continue;
    }
    if (IsUnderOpenSection(prefix)) continue;
    ReportUnknown(prefix, name, path, key.Mark());
  }
}

void SchemaWalker::ReportUnknown(const std::string& prefix, const std::string& name,
                                 const std::string& path, const YAML::Mark& mark) {
  const std::vector<std::string>& siblings = children_[prefix];
  std::string message = absl::StrCat("unknown key '", source_->key_prefix, path, "'");
  std::string nearest = NearestName(name, siblings);
  if (!nearest.empty()) {
    absl::StrAppend(&message, " (did you mean '", source_->key_prefix, JoinPath(prefix, nearest),
                    "'?)");
  } else if (!siblings.empty() && siblings.size() <= kMaxKeysToList) {
    absl::StrAppend(&message, " (valid keys", prefix.empty() ? "" : absl::StrCat(" of ", prefix),
                    ": ", absl::StrJoin(siblings, ", "), ")");
  }
  problems_->At(Location(*source_, path, mark), message);
}

void SchemaWalker::CheckValue(const KeySpec& spec, const std::string& path, const YAML::Node& node,
                              const YAML::Mark& mark) {
  const std::string canonical = spec.canonical_path();
  auto refuse = [&](absl::string_view what) {
    Problem(path, mark, what);
    result_.invalid.insert(canonical);
  };
  if (spec.auto_ok && IsAuto(node)) {
    result_.autos.insert(canonical);
    return;
  }
  if (spec.kind == ValueKind::kAny) return;
  if (node.IsNull()) {
    if (!spec.null_ok) refuse("expected a value, got null");
    return;
  }

  // Writes `value` unless another name of the same key already did.
  auto write = [&](auto value) {
    const void* address = FieldAddress(spec.field);
    if (address == nullptr) return;
    auto [it, first] = written_by_.emplace(address, path);
    if (!first) {
      refuse(absl::StrCat("sets the same value as '", source_->key_prefix, it->second,
                          "'; keep one of them"));
      return;
    }
    std::visit(
        [&](auto pointer) {
          using Target = std::remove_pointer_t<decltype(pointer)>;
          if constexpr (std::is_assignable_v<Target&, decltype(value)>) *pointer = value;
        },
        FieldRef(spec.field));
  };
  auto check_range = [&](double value, const std::string& text) -> bool {
    if (spec.min && (value < *spec.min || (spec.min_exclusive && value == *spec.min))) {
      refuse(absl::StrCat(text, " must be ", spec.min_exclusive ? ">" : ">=", " ",
                          FormatNumber(*spec.min)));
      return false;
    }
    if (spec.max && (value > *spec.max || (spec.max_exclusive && value == *spec.max))) {
      refuse(absl::StrCat(text, " must be ", spec.max_exclusive ? "<" : "<=", " ",
                          FormatNumber(*spec.max)));
      return false;
    }
    return true;
  };

  switch (spec.kind) {
    case ValueKind::kBool: {
      bool value = false;
      if (!node.IsScalar() || !ParseBoolText(node.Scalar(), &value)) {
        return refuse(absl::StrCat("expected true or false, got ", DescribeValue(node)));
      }
      return write(value);
    }
    case ValueKind::kBoolOrAuto: {
      bool value = false;
      if (node.IsScalar() && node.Scalar() == "auto") return write(std::string("auto"));
      if (!node.IsScalar() || !ParseBoolText(node.Scalar(), &value)) {
        return refuse(absl::StrCat("expected true, false or auto, got ", DescribeValue(node)));
      }
      return write(std::string(value ? "true" : "false"));
    }
    case ValueKind::kInt: {
      int64_t value = 0;
      if (!node.IsScalar() || !ParseIntegerText(node.Scalar(), &value)) {
        return refuse(absl::StrCat("expected an integer, got ", DescribeValue(node)));
      }
      const std::string& text = node.Scalar();
      if (!spec.one_of.empty()) {
        if (std::find(spec.one_of.begin(), spec.one_of.end(), absl::StrCat(value)) ==
            spec.one_of.end()) {
          return refuse(absl::StrCat(text, " is not one of ", absl::StrJoin(spec.one_of, ", ")));
        }
      }
      if (!check_range(static_cast<double>(value), text)) return;
      if (std::holds_alternative<int*>(spec.field) &&
          (value < std::numeric_limits<int>::min() || value > std::numeric_limits<int>::max())) {
        return refuse(absl::StrCat(text, " is out of range"));
      }
      if (std::holds_alternative<int*>(spec.field)) return write(static_cast<int>(value));
      if (std::holds_alternative<uint64_t*>(spec.field)) return write(static_cast<uint64_t>(value));
      return write(value);
    }
    case ValueKind::kNumber: {
      double value = 0;
      if (!node.IsScalar() || !ParseNumberText(node.Scalar(), &value)) {
        return refuse(absl::StrCat("expected a number, got ", DescribeValue(node)));
      }
      if (!check_range(value, node.Scalar())) return;
      return write(value);
    }
    case ValueKind::kString: {
      if (!node.IsScalar()) {
        return refuse(absl::StrCat("expected a string, got ", DescribeValue(node)));
      }
      std::string value = node.Scalar();
      if (!spec.one_of.empty()) {
        std::optional<std::string> match = MatchChoice(spec, value);
        if (!match) {
          std::vector<std::string> shown;
          for (const std::string& choice : spec.one_of) shown.push_back(DisplayChoice(choice));
          std::string message =
              absl::StrCat("'", value, "' is not one of ", absl::StrJoin(shown, ", "));
          std::string nearest = NearestName(value, spec.one_of);
          if (!nearest.empty()) absl::StrAppend(&message, " (did you mean '", nearest, "'?)");
          return refuse(message);
        }
        value = *match;
      }
      return write(value);
    }
    case ValueKind::kNumberPair: {
      std::array<double, 2> value{};
      if (!node.IsSequence() || node.size() != 2) {
        return refuse(absl::StrCat("expected a list of two numbers, got ", DescribeValue(node)));
      }
      for (size_t i = 0; i < 2; ++i) {
        const YAML::Node& element = node[i];
        if (!element.IsScalar() || !ParseNumberText(element.Scalar(), &value[i])) {
          return refuse(absl::StrCat("expected a list of two numbers, got ", DescribeValue(element),
                                     " as element ", i));
        }
        if (!check_range(value[i], element.Scalar())) return;
      }
      return write(value);
    }
    case ValueKind::kStringList: {
      if (!node.IsSequence()) {
        return refuse(absl::StrCat("expected a list of strings, got ", DescribeValue(node)));
      }
      std::vector<std::string> value;
      for (const YAML::Node& element : node) {
        if (!element.IsScalar()) {
          return refuse(absl::StrCat("expected a list of strings, got ", DescribeValue(element),
                                     " as an element"));
        }
        value.push_back(element.Scalar());
      }
      return write(value);
    }
    case ValueKind::kIntList: {
      if (!node.IsSequence()) {
        return refuse(absl::StrCat("expected a list of integers, got ", DescribeValue(node)));
      }
      std::vector<int> value;
      for (const YAML::Node& element : node) {
        int64_t number = 0;
        if (!element.IsScalar() || !ParseIntegerText(element.Scalar(), &number) ||
            number < std::numeric_limits<int>::min() || number > std::numeric_limits<int>::max()) {
          return refuse(absl::StrCat("expected a list of integers, got ", DescribeValue(element), " as an element"));
        }
        if (!check_range(static_cast<double>(number), element.Scalar())) return;
        value.push_back(static_cast<int>(number));
      }
      return write(value);
    }
    case ValueKind::kAny:
      return;
  }
}

bool ParseBoolText(const std::string& text, bool* value) {
  if (text == "true" || text == "True" || text == "TRUE") {
    *value = true;
    return true;
  }
  if (text == "false" || text == "False" || text == "FALSE") {
    *value = false;
    return true;
  }
  return false;
}

bool ParseNumberText(const std::string& text, double* value) {
  const char* begin = text.data();
  const char* end = begin + text.size();
  if (begin != end && *begin == '+') ++begin;
  double parsed = 0;
  auto [stop, error] = std::from_chars(begin, end, parsed);
  if (error != std::errc() || stop != end || begin == end || !std::isfinite(parsed)) return false;
  *value = parsed;
  return true;
}

bool ParseIntegerText(const std::string& text, int64_t* value) {
  const char* begin = text.data();
  const char* end = begin + text.size();
  if (begin != end && *begin == '+') ++begin;
  int64_t parsed = 0;
  auto [stop, error] = std::from_chars(begin, end, parsed);
  if (error == std::errc() && stop == end && begin != end) {
    *value = parsed;
    return true;
  }
  double number = 0;
  if (!ParseNumberText(text, &number) || number != std::floor(number) ||
      std::fabs(number) >= 9.2e18) {
    return false;
  }
  *value = static_cast<int64_t>(number);
  return true;
}

bool IsAuto(const YAML::Node& node) { return node.IsScalar() && node.Scalar() == "auto"; }

std::string DescribeValue(const YAML::Node& node) {
  if (!node.IsDefined()) return "nothing";
  switch (node.Type()) {
    case YAML::NodeType::Null:
      return "null";
    case YAML::NodeType::Scalar:
      return absl::StrCat("'", node.Scalar(), "'");
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Undefined:
      return "nothing";
  }
  return "nothing";
}

std::string FormatNumber(double value) {
  // The shortest text that reads back as the same double: 0.001, not 0.0010000000000000000208.
  if (value == std::floor(value) && std::fabs(value) < 1e15) {
    return absl::StrCat(static_cast<int64_t>(value));
  }
  char buffer[64];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", precision, value);
    if (std::strtod(buffer, nullptr) == value) break;
  }
  return buffer;
}

}  // namespace dslaunch::runtime::config_internal
