// Note [JSON schemas for constrained output]
// A request may hold its output to a JSON schema (OpenAI's response_format
// {"type": "json_schema", "json_schema": {"schema": ...}}, vLLM's
// guided_json, dsgen --json_schema FILE). The schema is compiled once into a
// graph of nodes (CompiledJsonSchema below), which the JSON automaton of
// Note [Constrained output] walks: every output it allows is valid JSON that
// validates against the schema. What it generates is a subset of what the
// schema accepts, chosen the way OpenAI's structured outputs and xgrammar
// choose it:
//  - an object's properties come in the order the schema lists them, each at
//    most once; a required one is never skipped; one with "properties" takes
//    no other key (additionalProperties false, or left out: the output then
//    validates whether or not the schema allows more keys);
//  - an object without "properties" takes any keys, with values of its
//    additionalProperties schema (any JSON when it is left out or true);
//    with patternProperties, the keys its patterns match, with values of
//    their schema (Note [Pattern properties] in json_schema_patterns.cc: one schema
//    for all patterns; beside "properties" a pattern may match a listed
//    name only with a schema that accepts anything or is the name's own);
//  - a schema without "type" takes the types its keywords imply ("properties"
//    an object, "items" an array, "minLength" a string; none: any value);
//  - anyOf and oneOf take alternatives that begin with different bytes (a
//    string or null, an object or an array, one object shape or a number):
//    the first byte of a value picks its alternative, so a value matches one
//    alternative only; under oneOf each alternative states its "type" (or is
//    an enum), so that "exactly one" holds too. Objects may share the
//    first byte when they are told apart by their first property: each
//    requires it, under one name, as a const string of its own (a tagged
//    union, {"name": {"const": "get_weather"}, "arguments": ...}, the form
//    of a tool call); its value picks the alternative.
// Read: type (a name or a list), properties, required,
// additionalProperties (false, true or a schema), patternProperties, items, minItems, maxItems,
// minLength, maxLength (code points, as JSON Schema counts), pattern and
// format on strings (Note [String patterns] in string_pattern.h; format on
// other types, such as OpenAPI's int32, is refused), minimum,
// maximum, exclusiveMinimum and exclusiveMaximum on numbers and integers
// (Note [Number bounds] in number_bounds.h: a digit that leaves no way into
// the range is refused as it comes; a bounded number has no exponent), enum, const,
// anyOf, oneOf, allOf of one schema, $ref to "#", "#/$defs/NAME" or
// "#/definitions/NAME" (recursion included), $defs and definitions; the
// annotations title, description, default, examples, $schema, $id,
// $comment, deprecated, readOnly and writeOnly change nothing; propertyNames
// of a pattern or format and lengths holds the keys (Note [Property names] in
// json_schema_patterns.cc). Any other
// keyword (minProperties, uniqueItems, ...) is an error naming it and its
// place in the schema: the output would not be held to it, and a schema
// half held is worse than one refused.
//
// A value's place in the output is written in JSON Pointer style in errors
// ("schema/properties/age: ...").
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/generate/number_bounds.h"
#include "runtime/generate/string_pattern.h"
#include "runtime/tokenizer/json_value.h"

namespace dslaunch::runtime {

inline constexpr int kMaxSchemaNodes = 4096;
inline constexpr int kMaxSchemaProperties = 1024;   // in one object
inline constexpr int64_t kMaxSchemaCount = 65535;   // minItems, maxItems, minLength, maxLength
inline constexpr int kMaxSchemaEnumBytes = 16384;   // one enum's values, serialised
inline constexpr int kMaxSchemaPatternStates = 16384;  // all its patterns' automata together
inline constexpr size_t kMaxSchemaNumberTableBytes = size_t{8} << 20;  // all its number bounds' tables together
inline constexpr size_t kRecentCompiledSchemas = 64;   // CompileJsonSchemaText keeps these

// A set of byte strings as a trie (property names as the output spells them,
// an enum's values serialised): node 0 is the root.
class ByteTrie {
 public:
  ByteTrie();
  // Adds `text`; `value` is what its last node holds (Terminal()).
  void Add(const std::string& text, int32_t value);
  // The child of `node` by `byte`, or -1.
  int32_t Child(int32_t node, unsigned char byte) const;
  bool HasChildren(int32_t node) const { return !nodes_[static_cast<size_t>(node)].children.empty(); }
  int32_t Terminal(int32_t node) const { return nodes_[static_cast<size_t>(node)].terminal; }  // -1: none
  // Whether some text below `node` (itself included) holds a value in
  // [low, high].
  bool HoldsBelow(int32_t node, int32_t low, int32_t high) const;

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;
    int32_t terminal = -1;
    std::vector<int32_t> values_below;  // sorted
  };
  std::vector<Node> nodes_;
};

enum JsonTypeBit : uint8_t {
  kJsonNullBit = 1,
  kJsonBooleanBit = 2,
  kJsonIntegerBit = 4,  // a number without fraction or exponent
  kJsonNumberBit = 8,   // any number (integers included)
  kJsonStringBit = 16,
  kJsonArrayBit = 32,
  kJsonObjectBit = 64,
  kJsonAnyBits = 127,
};

struct SchemaProperty {
  std::string name;
  int32_t node = 0;
  bool required = false;
};

struct SchemaNode {
  // A union (anyOf/oneOf): the alternative each first byte picks, -1 none;
  // the other fields are unused.
  bool is_union = false;
  bool one_of = false;  // a oneOf: a value must match one alternative only
  std::vector<int32_t> alternatives;
  std::vector<int32_t> by_first_byte;  // 256 entries, node ids, when is_union

  uint8_t types = kJsonAnyBits;
  // Whether `types` is all the schema accepts: "type" given, or an enum (a
  // schema without "type" accepts values of every type, whatever its
  // keywords imply for generation). A union: all its alternatives are.
  bool typed = false;
  // enum / const: the output is one of these values, serialised compactly
  // (the trie's terminals hold their index in enum_texts); `types` then is
  // unused.
  bool has_enum = false;
  ByteTrie enum_values;
  std::vector<std::string> enum_texts;

  // Objects.
  std::vector<SchemaProperty> properties;  // in the schema's order
  ByteTrie property_names;                 // spelled as in the output (JSON-escaped, no quotes); terminal: index
  std::vector<int32_t> next_required;      // [k]: the first required index >= k, or properties.size()
  int32_t additional = -1;                 // the node of any other key's value; -1: no other key
  // patternProperties (Note [Pattern properties] in json_schema_patterns.cc): the
  // string node whose pattern the other keys match; -1: any key.
  int32_t key_node = -1;
  // Objects that begin alike (an anyOf's), told apart by their first
  // property's const: this node reads that property, whose enum's value k
  // makes the object discriminated[k] from there on.
  std::vector<int32_t> discriminated;
  // Arrays.
  int32_t items = 0;
  int64_t min_items = 0, max_items = kMaxSchemaCount;
  // Strings.
  int64_t min_length = 0, max_length = -1;  // -1: unbounded
  int32_t pattern = -1;  // pattern or format: the schema's pattern (Note [String patterns]); -1: none
  // Numbers: minimum, maximum, exclusiveMinimum, exclusiveMaximum and
  // multipleOf (Note [Number bounds]): their index in the schema's
  // number_bounds() (equal ones share one); -1: none.
  int32_t number_bounds = -1;
  bool bounded_string() const { return min_length > 0 || max_length >= 0; }
};

// A schema as nodes. Node 0 is any JSON value; root() is the schema's.
class CompiledJsonSchema {
 public:
  const SchemaNode& node(int32_t id) const { return nodes_[static_cast<size_t>(id)]; }
  const StringPattern& pattern(int32_t id) const { return patterns_[static_cast<size_t>(id)]; }
  const NumberBounds& number_bounds(int32_t id) const { return number_bounds_[static_cast<size_t>(id)]; }
  int32_t root() const { return root_; }
  // The schema's text, compact (what crosses to other ranks).
  const std::string& text() const { return text_; }
  // The start of every allowed-token cache key of this schema: a 128-bit
  // digest of the text, and its length.
  const std::string& key_prefix() const { return key_prefix_; }

 private:
  friend class JsonSchemaCompiler;
  std::vector<SchemaNode> nodes_;
  std::vector<StringPattern> patterns_;
  std::vector<NumberBounds> number_bounds_;
  int32_t root_ = 0;
  std::string text_;
  std::string key_prefix_;
};

// Compiles `schema` (Note above). InvalidArgument naming `field` and the
// place in the schema for a schema this decoder cannot hold output to.
absl::StatusOr<std::shared_ptr<const CompiledJsonSchema>> CompileJsonSchema(const JsonValue& schema,
                                                                           const std::string& field);
// The same from text (a file, a serving turn).
absl::StatusOr<std::shared_ptr<const CompiledJsonSchema>> CompileJsonSchemaText(const std::string& text,
                                                                               const std::string& field);

// The schema of response_format json_object: any JSON object.
std::shared_ptr<const CompiledJsonSchema> AnyJsonObjectSchema();

}  // namespace dslaunch::runtime
