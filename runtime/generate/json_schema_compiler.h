// The compiler of a JSON schema into CompiledJsonSchema's nodes (Note [JSON
// schemas for constrained output] in json_schema.h): private to
// runtime/generate; its string side (patterns, formats, patternProperties)
// is in json_schema_patterns.cc, the rest in json_schema_compiler.cc.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "runtime/generate/json_schema.h"

namespace dslaunch::runtime {
namespace json_schema_detail {

// Keywords that change nothing about the values a schema accepts.
bool IsAnnotation(const std::string& key);
// A schema that every value meets: true, or only annotations.
bool AcceptsAnything(const JsonValue& schema);
// A name as a JSON Pointer token: '~' as ~0, '/' as ~1.
std::string PointerToken(const std::string& name);

}  // namespace json_schema_detail

class JsonSchemaCompiler {
 public:
  JsonSchemaCompiler(const JsonValue& schema, std::string field) : schema_(schema), field_(std::move(field)) {}

  absl::StatusOr<std::shared_ptr<const CompiledJsonSchema>> Compile();

 private:
  absl::Status Fail(const std::string& path, const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(field_, ": ", path, ": ", what));
  }
  int32_t NewNode() {
    nodes_->emplace_back();
    return static_cast<int32_t>(nodes_->size() - 1);
  }
  SchemaNode& At(int32_t id) { return (*nodes_)[static_cast<size_t>(id)]; }
  // A placeholder (a ref's, the root's) takes the node its schema compiled to.
  void CopyNode(int32_t from, int32_t to) {
    At(to) = At(from);
    if (auto it = union_paths_.find(from); it != union_paths_.end()) union_paths_[to] = it->second;
  }
  absl::StatusOr<int64_t> Count(const JsonValue& value, const std::string& path) const;
  absl::StatusOr<int32_t> NodeOf(const JsonValue& schema, const std::string& path);
  absl::StatusOr<int32_t> PlainNodeOf(const JsonValue& schema, const std::string& path,
                                      const std::vector<std::string>& keywords);
  // pattern or format: the node's automaton over its strings' code points
  // (Note [String patterns]), its lengths checked against minLength and
  // maxLength.
  absl::Status StringPatternOf(const JsonValue& schema, const std::string& path, int32_t id);
  // The index of `text`'s automaton in the schema's patterns: one compile
  // per distinct pattern, all of a schema's within one budget (a request's
  // schema is compiled while it waits). `where`: the place errors name.
  absl::StatusOr<int32_t> PatternId(const std::string& text, const std::string& where);
  // patternProperties: Note [Pattern properties] in json_schema_patterns.cc.
  absl::Status PatternPropertiesOf(const JsonValue& patterned, const JsonValue& schema, const std::string& path,
                                   int32_t id);
  // propertyNames: Note [Property names] in json_schema_patterns.cc.
  absl::Status PropertyNamesOf(const JsonValue& names, const std::string& path, int32_t id);
  // minLength and maxLength leave room for some match of the node's pattern.
  absl::Status LengthsFitPattern(const std::string& path, const std::string& word, int32_t id);
  // minimum, maximum, exclusiveMinimum, exclusiveMaximum and multipleOf
  // (Note [Number bounds]), on a node of numbers or integers.
  absl::Status NumberBoundsOf(const JsonValue& schema, const std::string& path, int32_t id);
  // An enum's numbers are written back as the output's text: an integer
  // past 2^53 would not read back as itself.
  absl::Status ExactNumbers(const JsonValue& value, const std::string& path) const;
  absl::StatusOr<int32_t> RefOf(const std::string& ref, const std::string& path);
  // Fills a union's by_first_byte (its alternatives' leaves), refusing two
  // alternatives that begin with one byte, unless they are objects told
  // apart by their first property (Discriminate). resolved: 0 not yet, 1 in
  // progress, 2 done.
  absl::Status ResolveUnion(int32_t id, std::vector<char>& resolved);
  // Objects that begin alike, told apart by their first property: each
  // requires it, with the same name, and its schema is a const string of
  // its own ({"name": {"const": "get_weather"}, ...}, how tool calls and
  // tagged unions are written). Returns a node that reads that property's
  // value, one of the consts, and then is the alternative it names
  // (SchemaNode::discriminated); -1 when they are not such objects (the
  // status says why, when a reason is worth telling).
  absl::StatusOr<int32_t> Discriminate(const std::vector<int32_t>& objects);

  const JsonValue& schema_;
  std::string field_;
  std::vector<SchemaNode>* nodes_ = nullptr;
  std::vector<StringPattern>* patterns_ = nullptr;
  std::vector<NumberBounds>* number_bounds_ = nullptr;
  std::map<std::string, int32_t> number_bounds_ids_;  // by the bounds, as text
  size_t number_table_bytes_left_ = kMaxSchemaNumberTableBytes;
  std::map<std::string, int32_t> pattern_ids_;  // by the pattern's text
  size_t pattern_work_left_ = 2 * kMaxPatternWork;
  size_t pattern_states_ = 0;
  std::map<std::string, int32_t> refs_;
  std::set<int32_t> in_progress_;
  std::map<int32_t, std::string> union_paths_;
};

}  // namespace dslaunch::runtime
