// The machinery behind Note [Config strictness]: a table of keys (KeySpec), a
// walker that checks a YAML tree against the table and writes each value into
// the config struct, and the list of problems found on the way. Internal to
// runtime/config; the tables themselves live in ds_config_schema.cc and
// job_config_schema.cc.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "yaml-cpp/yaml.h"
#include "common/nearest_name.h"

namespace dslaunch::runtime::config_internal {

// One `--override` applied to a tree; `path` is relative to that tree's root.
struct AppliedOverride {
  std::string path;
  std::string text;  // as the user wrote it: "ds_config.zero_optimization.stage=1"
};

// Where a tree came from, so that a problem can name its file and line, or the
// `--override` that put the value there.
struct TreeSource {
  std::string file;        // as shown in messages
  std::string key_prefix;  // before key paths in messages: "ds_config." when inline in a job file
  std::vector<AppliedOverride> overrides;
};

// "<file>:<line>" for the node at `path`, or "--override '<text>'" when an
// override wrote it (or, for a node without a mark, created it on the way).
std::string Location(const TreeSource& source, const std::string& path, const YAML::Mark& mark);

// Every problem of a load, in the order found; one line each.
class Problems {
 public:
  // "<location>: <prefix><path>: <what>"; `path` is relative to the source's tree.
  void AtKey(const TreeSource& source, const std::string& path, const YAML::Mark& mark,
             absl::string_view what);
  // "<location>: <message>" for messages that name their keys themselves.
  void At(const std::string& location, absl::string_view message);
  // A line that names its location itself.
  void Add(std::string line) { lines_.push_back(std::move(line)); }

  bool empty() const { return lines_.empty(); }
  const std::vector<std::string>& lines() const { return lines_; }
  // OK when empty, else InvalidArgument with one problem per line.
  absl::Status ToStatus() const;

 private:
  std::vector<std::string> lines_;
};

// What a key holds. Most kinds follow from the field's type (see Key()).
enum class ValueKind {
  kBool,
  kInt,
  kNumber,
  kString,
  kNumberPair,  // [a, b], e.g. Adam's betas
  kStringList,
  kIntList,     // [1, 3, 2], each element checked against min/max
  kBoolOrAuto,  // true | false | auto, kept as that text (pipeline.pipe_partitioned)
  kAny,         // anything: checked by the caller (ds_config in a job file)
};

// Where a value goes; monostate for keys that are accepted and checked but
// that nothing reads (DeepSpeed knobs of features not built here).
using FieldRef = std::variant<std::monostate, bool*, int*, int64_t*, uint64_t*, double*,
                              std::string*, std::array<double, 2>*, std::vector<std::string>*, std::vector<int>*>;

// One row of a schema table: a key path ("zero_optimization.stage"), what it
// holds, where it goes and what values are possible.
struct KeySpec {
  std::string path;
  ValueKind kind = ValueKind::kAny;
  FieldRef field;
  std::optional<double> min, max;
  bool min_exclusive = false;
  bool max_exclusive = false;
  // kString: the allowed values ("type:*" admits any value starting with "type:");
  // kInt: the allowed numbers as text.
  std::vector<std::string> one_of;
  bool fold_case = false;  // one_of matched ignoring case; the listed spelling is stored
  bool auto_ok = false;    // "auto" accepted (Note ["auto"]); the field is left for the resolver
  bool null_ok = false;    // null accepted: the default stays (DeepSpeed's None)
  std::string canonical;   // for another name of the same key: the listed key's path
  bool required = false;   // must be present whenever its top-level section is

  // Note [Keys without effect here]
  // A key DeepSpeed reads that nothing here stores (Unstored) says what a
  // value other than DeepSpeed's default means here, so that no setting is
  // silently ignored:
  //   kRefused  - it would change what is computed: "not yet supported";
  //   kIgnored  - it tunes DeepSpeed's speed or memory only, or has an
  //               equivalent here: accepted, with a warning naming it;
  //   kInert    - a parameter of a feature another key turns on (and that
  //               key is refused when it does): nothing to say;
  //   kRead     - the loader reads it from the walk itself (its own check).
  // A value equal to `deepspeed_default` (compared as a bool, a number or
  // text, as the key's kind says; null counts as the default) says nothing.
  enum class Unbuilt { kNone, kRefused, kIgnored, kInert, kRead };
  Unbuilt unbuilt = Unbuilt::kNone;
  std::string deepspeed_default;
  std::string unbuilt_what;  // kRefused: the feature; kIgnored: why it has no effect here

  KeySpec& Min(double v) { min = v; return *this; }
  KeySpec& Above(double v) { min = v; min_exclusive = true; return *this; }
  KeySpec& Max(double v) { max = v; return *this; }
  KeySpec& Below(double v) { max = v; max_exclusive = true; return *this; }
  KeySpec& OneOf(std::vector<std::string> values) { one_of = std::move(values); return *this; }
  KeySpec& FoldCase() { fold_case = true; return *this; }
  KeySpec& Auto() { auto_ok = true; return *this; }
  KeySpec& Nullable() { null_ok = true; return *this; }
  KeySpec& AliasOf(std::string path_) { canonical = std::move(path_); return *this; }
  KeySpec& Required() { required = true; return *this; }
  KeySpec& RefusedUnless(std::string default_value, std::string feature) {
    unbuilt = Unbuilt::kRefused;
    deepspeed_default = std::move(default_value);
    unbuilt_what = std::move(feature);
    return *this;
  }
  KeySpec& IgnoredUnless(std::string default_value, std::string why) {
    unbuilt = Unbuilt::kIgnored;
    deepspeed_default = std::move(default_value);
    unbuilt_what = std::move(why);
    return *this;
  }
  KeySpec& Inert() { unbuilt = Unbuilt::kInert; return *this; }
  KeySpec& ReadByLoader() { unbuilt = Unbuilt::kRead; return *this; }
  // Whether `node` (this key's given value) is DeepSpeed's default.
  bool IsDeepSpeedDefault(const YAML::Node& node) const;

  const std::string& canonical_path() const { return canonical.empty() ? path : canonical; }
};

KeySpec Key(std::string path, bool* field);
KeySpec Key(std::string path, int* field);
KeySpec Key(std::string path, int64_t* field);
KeySpec Key(std::string path, uint64_t* field);
KeySpec Key(std::string path, double* field);
KeySpec Key(std::string path, std::string* field);
KeySpec Key(std::string path, std::array<double, 2>* field);
KeySpec Key(std::string path, std::vector<std::string>* field);
KeySpec Key(std::string path, std::vector<int>* field);
KeySpec BoolOrAuto(std::string path, std::string* field);
// Accepted and checked, not stored.
KeySpec Unstored(std::string path, ValueKind kind);

// What a walk saw, keyed by canonical path (an alias's row names its key).
struct WalkResult {
  struct Given {
    std::string path;  // as written (may be an alias)
    YAML::Node node;   // the value
    YAML::Mark mark;   // the key's: where a setting's problems point
  };
  std::map<std::string, Given> given;  // every key present: leaves and sections
  std::set<std::string> autos;         // keys written "auto": their fields are untouched
  std::set<std::string> invalid;       // keys whose value was refused; "": the whole tree

  bool Has(const std::string& canonical) const { return given.count(canonical) > 0; }
  bool IsAuto(const std::string& canonical) const { return autos.count(canonical) > 0; }
  // A key given with a usable, non-"auto" value.
  bool HasValue(const std::string& canonical) const {
    return Has(canonical) && !IsAuto(canonical) && !invalid.count(canonical) &&
           !given.at(canonical).node.IsNull();
  }
  // The mark of a given key (null mark when absent).
  YAML::Mark MarkOf(const std::string& canonical) const;
  // The path as written, or `canonical` when absent.
  std::string WrittenPath(const std::string& canonical) const;
};

// Checks a YAML tree against a table and writes the values into the fields.
// Not thread-safe; one walker per load.
class SchemaWalker {
 public:
  explicit SchemaWalker(std::vector<KeySpec> keys);

  // Keys below `section` that the table does not list are accepted unchecked
  // (DeepSpeed passes them through, e.g. amp's parameters to apex).
  void AllowAnyKeysUnder(const std::string& section);
  // A key the table does not list here but that is valid in another setting
  // (a OneCycle parameter under a WarmupLR scheduler): `why` replaces the
  // unknown-key message.
  void AddMisplacedKey(const std::string& path, std::string why);

  WalkResult Walk(const YAML::Node& root, const TreeSource& source, Problems* problems);

  const std::vector<KeySpec>& keys() const { return keys_; }

 private:
  void WalkMap(const YAML::Node& map, const std::string& prefix);
  void CheckValue(const KeySpec& spec, const std::string& path, const YAML::Node& node,
                  const YAML::Mark& mark);
  bool IsUnderOpenSection(const std::string& section) const;
  void ReportUnknown(const std::string& prefix, const std::string& name, const std::string& path,
                     const YAML::Mark& mark);
  void Problem(const std::string& path, const YAML::Mark& mark, absl::string_view what);

  std::vector<KeySpec> keys_;
  std::map<std::string, const KeySpec*> by_path_;
  std::map<std::string, std::vector<std::string>> children_;  // section -> key names, table order
  std::set<std::string> sections_;
  std::set<std::string> open_sections_;
  std::map<std::string, std::string> misplaced_;

  // State of the current walk.
  const TreeSource* source_ = nullptr;
  Problems* problems_ = nullptr;
  WalkResult result_;
  std::map<const void*, std::string> written_by_;  // field -> path that set it
};

// Parsers for YAML scalars, shared with the override parser and the tests.
bool ParseBoolText(const std::string& text, bool* value);
// Integers, also written as floats without a fraction (5e8, 1.0e9), as
// DeepSpeed users do for bucket sizes.
bool ParseIntegerText(const std::string& text, int64_t* value);
bool ParseNumberText(const std::string& text, double* value);  // finite only
bool IsAuto(const YAML::Node& node);
// "'two'", "a list", "a mapping", "null": how a value is named in messages.
std::string DescribeValue(const YAML::Node& node);

// The shortest text that reads back as `value` (1e-08, 0.001, 500000000).
std::string FormatNumber(double value);

// Typo suggestions for keys and enum values: dslaunch::NearestName
// (common/nearest_name.h), the one rule of every "did you mean".
using ::dslaunch::EditDistance;
using ::dslaunch::NearestName;

}  // namespace dslaunch::runtime::config_internal
