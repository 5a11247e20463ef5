// JsonSchemaCompiler: a schema's nodes, refs and unions (Note [JSON schemas
// for constrained output] in json_schema.h).
#include "runtime/generate/json_schema_compiler.h"

#include <algorithm>
#include <bitset>
#include <cmath>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/json_quote.h"
#include "runtime/generate/json_schema_automaton.h"  // kMaxJsonNumberBytes

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace dslaunch::runtime {
namespace {


std::string ByteName(int b) {
  if (b >= 0x21 && b < 0x7F) return absl::StrCat("'", std::string(1, static_cast<char>(b)), "'");
  return absl::StrCat("byte ", b);
}

// The bytes a value of a plain node (no union) may begin with.
std::bitset<256> FirstBytesOfPlain(const SchemaNode& node) {
  std::bitset<256> bytes;
  if (node.has_enum) {
    for (int b = 0; b < 256; ++b) bytes[static_cast<size_t>(b)] = node.enum_values.Child(0, static_cast<unsigned char>(b)) >= 0;
    return bytes;
  }
  if (node.types & kJsonObjectBit) bytes['{'] = true;
  if (node.types & kJsonArrayBit) bytes['['] = true;
  if (node.types & kJsonStringBit) bytes['"'] = true;
  if (node.types & (kJsonIntegerBit | kJsonNumberBit)) {
    bytes['-'] = true;
    for (char d = '0'; d <= '9'; ++d) bytes[static_cast<size_t>(d)] = true;
  }
  if (node.types & kJsonBooleanBit) bytes['t'] = bytes['f'] = true;
  if (node.types & kJsonNullBit) bytes['n'] = true;
  return bytes;
}

uint8_t TypeOfValue(const JsonValue& value) {
  switch (value.type()) {
    case JsonValue::Type::kNull: return kJsonNullBit;
    case JsonValue::Type::kBool: return kJsonBooleanBit;
    case JsonValue::Type::kNumber: {
      const double v = value.number_value();
      return std::floor(v) == v ? kJsonIntegerBit | kJsonNumberBit : kJsonNumberBit;
    }
    case JsonValue::Type::kString: return kJsonStringBit;
    case JsonValue::Type::kArray: return kJsonArrayBit;
    case JsonValue::Type::kObject: return kJsonObjectBit;
  }
  return 0;
}

}  // namespace

namespace json_schema_detail {

// Keywords that change nothing about the values a schema accepts.
bool IsAnnotation(const std::string& key) {
  static const std::set<std::string> kAnnotations = {"title",    "description", "default",  "examples",
                                                      "$schema",  "$id",         "$comment", "deprecated",
                                                      "readOnly", "writeOnly"};
  return kAnnotations.count(key) > 0;
}

// A schema that every value meets: true, or only annotations.
bool AcceptsAnything(const JsonValue& schema) {
  if (schema.is_bool()) return schema.bool_value();
  if (!schema.is_object()) return false;
  for (const std::string& key : schema.keys()) {
    if (!IsAnnotation(key)) return false;
  }
  return true;
}

// A name as a JSON Pointer token: '~' as ~0, '/' as ~1.
std::string PointerToken(const std::string& name) {
  std::string token;
  for (char c : name) {
    if (c == '~') {
      token += "~0";
    } else if (c == '/') {
      token += "~1";
    } else {
      token.push_back(c);
    }
  }
  return token;
}

}  // namespace json_schema_detail

using json_schema_detail::AcceptsAnything;
using json_schema_detail::IsAnnotation;
using json_schema_detail::PointerToken;

absl::StatusOr<std::shared_ptr<const CompiledJsonSchema>> JsonSchemaCompiler::Compile() {
  auto compiled = std::make_shared<CompiledJsonSchema>();
  nodes_ = &compiled->nodes_;
  patterns_ = &compiled->patterns_;
  number_bounds_ = &compiled->number_bounds_;
  SchemaNode any;  // node 0: any JSON value
  any.types = kJsonAnyBits;
  any.additional = 0;
  any.items = 0;
  nodes_->push_back(std::move(any));
  const int32_t root = NewNode();
  refs_["#"] = root;
  in_progress_.insert(root);
  auto body = NodeOf(schema_, "schema");
  if (!body.ok()) return body.status();
  if (*body == root) return Fail("schema", "'#' refers only to itself");
  CopyNode(*body, root);
  in_progress_.erase(root);
  compiled->root_ = root;
  std::vector<char> resolved(nodes_->size(), 0);
  for (size_t id = 0; id < nodes_->size(); ++id) {
    if (absl::Status ok = ResolveUnion(static_cast<int32_t>(id), resolved); !ok.ok()) return ok;
  }
  compiled->text_ = SerializeJson(schema_);
  // The allowed-token cache's keys begin with the schema's digest, not
  // its text (a schema of long descriptions would make every key long).
  const XXH128_hash_t digest = XXH3_128bits(compiled->text_.data(), compiled->text_.size());
  compiled->key_prefix_ = "s";
  compiled->key_prefix_.append(reinterpret_cast<const char*>(&digest), sizeof(digest));
  compiled->key_prefix_.append(std::to_string(compiled->text_.size()));
  return std::shared_ptr<const CompiledJsonSchema>(std::move(compiled));
}

absl::StatusOr<int64_t> JsonSchemaCompiler::Count(const JsonValue& value, const std::string& path) const {
  if (!value.is_number() || value.number_value() < 0 || std::floor(value.number_value()) != value.number_value() ||
      value.number_value() > static_cast<double>(kMaxSchemaCount)) {
    return Fail(path, absl::StrCat("expected an integer from 0 to ", kMaxSchemaCount));
  }
  return static_cast<int64_t>(value.number_value());
}

absl::StatusOr<int32_t> JsonSchemaCompiler::NodeOf(const JsonValue& schema, const std::string& path) {
  if (nodes_->size() >= static_cast<size_t>(kMaxSchemaNodes)) {
    return Fail(path, absl::StrCat("the schema is larger than the ", kMaxSchemaNodes, " nodes this decoder takes"));
  }
  if (schema.is_bool()) {
    if (schema.bool_value()) return 0;
    return Fail(path, "false: no value is allowed here");
  }
  if (!schema.is_object()) {
    return Fail(path, absl::StrCat("expected a schema (an object or a boolean), got ",
                                   JsonValue::TypeName(schema.type())));
  }
  // What the schema says besides annotations.
  std::vector<std::string> keywords;
  for (const std::string& key : schema.keys()) {
    if (!IsAnnotation(key) && !(path == "schema" && (key == "$defs" || key == "definitions"))) {
      keywords.push_back(key);
    }
  }
  auto alone = [&](const std::string& keyword) -> absl::Status {
    for (const std::string& other : keywords) {
      if (other != keyword) {
        return Fail(path, absl::StrCat("'", keyword, "' beside '", other,
                                       "' is not supported: give the other keywords inside the ", keyword));
      }
    }
    return absl::OkStatus();
  };
  if (const JsonValue* ref = schema.Find("$ref")) {
    if (absl::Status ok = alone("$ref"); !ok.ok()) return ok;
    if (!ref->is_string()) return Fail(path + "/$ref", "expected a string");
    return RefOf(ref->string_value(), path + "/$ref");
  }
  if (const JsonValue* all = schema.Find("allOf")) {
    if (absl::Status ok = alone("allOf"); !ok.ok()) return ok;
    if (!all->is_array() || all->items().size() != 1) {
      return Fail(path + "/allOf", "only an allOf of one schema is supported");
    }
    return NodeOf(all->items()[0], path + "/allOf/0");
  }
  for (const char* name : {"anyOf", "oneOf"}) {
    if (const JsonValue* any = schema.Find(name)) {
      if (absl::Status ok = alone(name); !ok.ok()) return ok;
      const std::string here = absl::StrCat(path, "/", name);
      if (!any->is_array() || any->items().empty()) return Fail(here, "expected a non-empty array of schemas");
      std::vector<int32_t> alternatives;
      for (size_t i = 0; i < any->items().size(); ++i) {
        auto alternative = NodeOf(any->items()[i], absl::StrCat(here, "/", i));
        if (!alternative.ok()) return alternative.status();
        alternatives.push_back(*alternative);
      }
      const int32_t id = NewNode();
      At(id).is_union = true;
      At(id).one_of = std::string(name) == "oneOf";
      At(id).alternatives = std::move(alternatives);
      union_paths_[id] = here;
      return id;
    }
  }
  return PlainNodeOf(schema, path, keywords);
}

absl::StatusOr<int32_t> JsonSchemaCompiler::PlainNodeOf(const JsonValue& schema, const std::string& path,
                                                        const std::vector<std::string>& keywords) {
  static const std::set<std::string> kObjectWords = {"properties", "required", "additionalProperties",
                                                     "patternProperties", "propertyNames"};
  static const std::set<std::string> kArrayWords = {"items", "minItems", "maxItems"};
  static const std::set<std::string> kStringWords = {"minLength", "maxLength", "pattern", "format"};
  static const std::set<std::string> kNumberWords = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                                                     "multipleOf"};
  uint8_t implied = 0;
  for (const std::string& key : keywords) {
    if (kObjectWords.count(key)) {
      implied |= kJsonObjectBit;
    } else if (kArrayWords.count(key)) {
      implied |= kJsonArrayBit;
    } else if (kStringWords.count(key)) {
      implied |= kJsonStringBit;
    } else if (kNumberWords.count(key)) {
      implied |= kJsonNumberBit;
    } else if (key != "type" && key != "enum" && key != "const") {
      return Fail(path, absl::StrCat("'", key,
                                     "' is not supported by constrained decoding (it reads type, properties, "
                                     "required, additionalProperties, patternProperties, propertyNames, items, minItems, maxItems, "
                                     "minLength, "
                                     "maxLength, pattern, format, minimum, maximum and their exclusive forms, "
                                     "multipleOf, enum, "
                                     "const, anyOf, oneOf, allOf of one, $ref): leave it out"));
    }
  }
  const int32_t id = NewNode();
  uint8_t types = implied == 0 ? static_cast<uint8_t>(kJsonAnyBits) : implied;
  if (const JsonValue* type = schema.Find("type")) {
    std::vector<const JsonValue*> names;
    if (type->is_array()) {
      for (const JsonValue& item : type->items()) names.push_back(&item);
    } else {
      names.push_back(type);
    }
    if (names.empty()) return Fail(path + "/type", "an empty list of types");
    types = 0;
    At(id).typed = true;
    for (const JsonValue* name : names) {
      static const std::map<std::string, uint8_t> kTypes = {
          {"null", kJsonNullBit},     {"boolean", kJsonBooleanBit}, {"integer", kJsonIntegerBit},
          {"number", kJsonNumberBit}, {"string", kJsonStringBit},   {"array", kJsonArrayBit},
          {"object", kJsonObjectBit}};
      auto it = name->is_string() ? kTypes.find(name->string_value()) : kTypes.end();
      if (it == kTypes.end()) {
        return Fail(path + "/type", absl::StrCat("expected null, boolean, integer, number, string, array or "
                                                 "object (or a list of them), got ",
                                                 name->is_string() ? "'" + name->string_value() + "'"
                                                                   : JsonValue::TypeName(name->type())));
      }
      types |= it->second;
    }
  }
  At(id).types = types;
  const JsonValue* enum_values = schema.Find("enum");
  const JsonValue* const_value = schema.Find("const");
  if (enum_values != nullptr || const_value != nullptr) {
    const std::string word = enum_values != nullptr ? "enum" : "const";
    for (const std::string& key : keywords) {
      if (key != "type" && key != word) {
        return Fail(path, absl::StrCat("'", word, "' beside '", key, "' is not supported: list the values only"));
      }
    }
    std::vector<const JsonValue*> values;
    if (enum_values != nullptr) {
      if (!enum_values->is_array() || enum_values->items().empty()) {
        return Fail(path + "/enum", "expected a non-empty array of values");
      }
      for (const JsonValue& value : enum_values->items()) values.push_back(&value);
    } else {
      values.push_back(const_value);
    }
    At(id).has_enum = true;
    At(id).typed = true;
    size_t bytes = 0;
    int kept = 0;
    for (const JsonValue* value : values) {
      if ((TypeOfValue(*value) & types) == 0) continue;  // "type" rules it out
      if (absl::Status exact = ExactNumbers(*value, path + "/" + word); !exact.ok()) return exact;
      const std::string text = SerializeJson(*value);
      bytes += text.size();
      At(id).enum_values.Add(text, static_cast<int32_t>(At(id).enum_texts.size()));
      At(id).enum_texts.push_back(text);
      ++kept;
    }
    if (kept == 0) return Fail(path + "/" + word, "no value of it has the schema's type");
    if (bytes > static_cast<size_t>(kMaxSchemaEnumBytes)) {
      return Fail(path + "/" + word, absl::StrCat(bytes, " bytes of values, more than the ", kMaxSchemaEnumBytes,
                                                 " allowed"));
    }
    return id;
  }
  // Objects.
  if (const JsonValue* properties = schema.Find("properties")) {
    if (!properties->is_object()) return Fail(path + "/properties", "expected an object of schemas");
    if (properties->keys().size() > static_cast<size_t>(kMaxSchemaProperties)) {
      return Fail(path + "/properties", absl::StrCat(properties->keys().size(), " properties, more than the ",
                                                     kMaxSchemaProperties, " allowed"));
    }
    for (size_t i = 0; i < properties->keys().size(); ++i) {
      const std::string& name = properties->keys()[i];
      auto node = NodeOf(properties->items()[i], absl::StrCat(path, "/properties/", PointerToken(name)));
      if (!node.ok()) return node.status();
      const std::string quoted = JsonQuote(name);
      At(id).property_names.Add(quoted.substr(1, quoted.size() - 2), static_cast<int32_t>(i));
      At(id).properties.push_back({name, *node, false});
    }
  }
  if (const JsonValue* required = schema.Find("required")) {
    if (!required->is_array()) return Fail(path + "/required", "expected an array of property names");
    for (size_t i = 0; i < required->items().size(); ++i) {
      const JsonValue& name = required->items()[i];
      const std::string here = absl::StrCat(path, "/required/", i);
      if (!name.is_string()) return Fail(here, "expected a property name");
      auto& properties = At(id).properties;
      auto it = std::find_if(properties.begin(), properties.end(),
                             [&](const SchemaProperty& p) { return p.name == name.string_value(); });
      if (it == properties.end()) {
        return Fail(here, absl::StrCat("'", name.string_value(),
                                       "' is not among the properties (a required key needs its schema there)"));
      }
      it->required = true;
    }
  }
  {
    SchemaNode& node = At(id);
    const auto n = static_cast<int32_t>(node.properties.size());
    node.next_required.assign(static_cast<size_t>(n) + 1, n);
    for (int32_t k = n - 1; k >= 0; --k) {
      node.next_required[static_cast<size_t>(k)] =
          node.properties[static_cast<size_t>(k)].required ? k : node.next_required[static_cast<size_t>(k) + 1];
    }
  }
  // Beside "properties" no other key is generated, whatever
  // additionalProperties says (an output without them validates); it is
  // compiled all the same, so that what it holds is checked.
  if (!At(id).properties.empty()) {
    const JsonValue* additional = schema.Find("additionalProperties");
    if (additional != nullptr && !additional->is_bool()) {
      if (auto node = NodeOf(*additional, path + "/additionalProperties"); !node.ok()) return node.status();
    }
  } else {
    const JsonValue* additional = schema.Find("additionalProperties");
    if (additional == nullptr) {
      At(id).additional = 0;
    } else if (additional->is_bool() && !additional->bool_value()) {
      At(id).additional = -1;
    } else {
      auto node = NodeOf(*additional, path + "/additionalProperties");
      if (!node.ok()) return node.status();
      At(id).additional = *node;
    }
  }
  if (const JsonValue* patterned = schema.Find("patternProperties")) {
    if (absl::Status ok = PatternPropertiesOf(*patterned, schema, path + "/patternProperties", id); !ok.ok()) {
      return ok;
    }
  }
  if (const JsonValue* names = schema.Find("propertyNames")) {
    if (absl::Status ok = PropertyNamesOf(*names, path + "/propertyNames", id); !ok.ok()) return ok;
  }
  // Arrays.
  if (const JsonValue* items = schema.Find("items")) {
    if (items->is_array()) {
      return Fail(path + "/items", "items as a list (the tuple form) is not supported: give one schema");
    }
    auto node = NodeOf(*items, path + "/items");
    if (!node.ok()) return node.status();
    At(id).items = *node;
  }
  for (const auto& [word, target] : {std::pair{"minItems", &SchemaNode::min_items},
                                     std::pair{"maxItems", &SchemaNode::max_items},
                                     std::pair{"minLength", &SchemaNode::min_length},
                                     std::pair{"maxLength", &SchemaNode::max_length}}) {
    if (const JsonValue* value = schema.Find(word)) {
      auto count = Count(*value, absl::StrCat(path, "/", word));
      if (!count.ok()) return count.status();
      At(id).*target = *count;
    }
  }
  if (absl::Status ok = NumberBoundsOf(schema, path, id); !ok.ok()) return ok;
  const SchemaNode& node = At(id);
  if (node.min_items > node.max_items) {
    return Fail(path, absl::StrCat("minItems ", node.min_items, " is above maxItems ", node.max_items));
  }
  if (node.max_length >= 0 && node.min_length > node.max_length) {
    return Fail(path, absl::StrCat("minLength ", node.min_length, " is above maxLength ", node.max_length));
  }
  if (absl::Status ok = StringPatternOf(schema, path, id); !ok.ok()) return ok;
  return id;
}

absl::Status JsonSchemaCompiler::NumberBoundsOf(const JsonValue& schema, const std::string& path, int32_t id) {
  NumberBounds::Limits limits;
  const std::pair<const char*, std::optional<double>*> words[] = {
      {"minimum", &limits.minimum},
      {"exclusiveMinimum", &limits.exclusive_minimum},
      {"maximum", &limits.maximum},
      {"exclusiveMaximum", &limits.exclusive_maximum},
      {"multipleOf", &limits.multiple_of}};
  for (const auto& [word, limit] : words) {
    const JsonValue* value = schema.Find(word);
    if (value == nullptr) continue;
    if (!value->is_number()) {
      return Fail(absl::StrCat(path, "/", word), absl::StrCat("expected a number, got ", JsonValue::TypeName(value->type())));
    }
    *limit = value->number_value();
  }
  if (!limits.any()) return absl::OkStatus();
  SchemaNode& node = At(id);
  if ((node.types & (kJsonNumberBit | kJsonIntegerBit)) == 0) {
    return Fail(path, "minimum, maximum and multipleOf bound numbers: this schema's type takes none");
  }
  const bool integers_only = (node.types & kJsonNumberBit) == 0;
  // Equal bounds share their tables; all of a schema's tables share one
  // budget (a request's schema is compiled on the HTTP thread).
  std::string key = integers_only ? "i" : "n";
  for (const auto& [word, limit] : words) absl::StrAppend(&key, ",", *limit ? absl::StrFormat("%a", **limit) : "-");
  if (auto it = number_bounds_ids_.find(key); it != number_bounds_ids_.end()) {
    node.number_bounds = it->second;
    return absl::OkStatus();
  }
  const size_t bytes = NumberBounds::TableBytes(limits, kMaxJsonNumberBytes);
  if (bytes > number_table_bytes_left_) {
    return Fail(path, absl::StrCat("the schema's number bounds would need more than ", kMaxSchemaNumberTableBytes,
                                   " bytes of tables (a multipleOf m takes ",
                                   NumberBounds::TableBytes({}, kMaxJsonNumberBytes), "·m): use fewer or smaller "
                                   "multipleOf steps"));
  }
  absl::StatusOr<NumberBounds> bounds = NumberBounds::Compile(limits, integers_only, kMaxJsonNumberBytes,
                                                              absl::StrCat(field_, ": ", path));
  if (!bounds.ok()) return bounds.status();
  number_table_bytes_left_ -= bytes;
  node.number_bounds = static_cast<int32_t>(number_bounds_->size());
  number_bounds_ids_[key] = node.number_bounds;
  number_bounds_->push_back(*std::move(bounds));
  return absl::OkStatus();
}

absl::Status JsonSchemaCompiler::ExactNumbers(const JsonValue& value, const std::string& path) const {
  if (value.is_number() && std::floor(value.number_value()) == value.number_value() &&
      std::fabs(value.number_value()) >= 9007199254740992.0) {
    return Fail(path, absl::StrCat("the integer ", SerializeJson(value),
                                   " is 2^53 or past it, where a double no longer holds every integer: give it as a string"));
  }
  for (const JsonValue& item : value.items()) {
    if (absl::Status ok = ExactNumbers(item, path); !ok.ok()) return ok;
  }
  return absl::OkStatus();
}

absl::StatusOr<int32_t> JsonSchemaCompiler::RefOf(const std::string& ref, const std::string& path) {
  if (auto it = refs_.find(ref); it != refs_.end()) {
    return it->second;
  }
  const JsonValue* target = nullptr;
  for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
    if (ref.rfind(prefix, 0) != 0) continue;
    std::string name;  // JSON Pointer: ~1 is '/', ~0 is '~'
    const std::string rest = ref.substr(std::string(prefix).size());
    for (size_t i = 0; i < rest.size(); ++i) {
      if (rest[i] == '~' && i + 1 < rest.size() && (rest[i + 1] == '0' || rest[i + 1] == '1')) {
        name.push_back(rest[++i] == '0' ? '~' : '/');
      } else if (rest[i] == '/') {
        return Fail(path, absl::StrCat("'", ref, "': only refs to a definition (#/$defs/NAME) are read"));
      } else {
        name.push_back(rest[i]);
      }
    }
    const JsonValue* definitions = schema_.Find(std::string(prefix).substr(2, std::string(prefix).size() - 3));
    if (definitions != nullptr) target = definitions->Find(name);
    if (target == nullptr) return Fail(path, absl::StrCat("'", ref, "' names no definition of the schema"));
  }
  if (target == nullptr) {
    return Fail(path, absl::StrCat("'", ref, "': only refs into this schema (#, #/$defs/NAME, "
                                             "#/definitions/NAME) are read"));
  }
  const int32_t id = NewNode();
  refs_[ref] = id;
  in_progress_.insert(id);
  auto body = NodeOf(*target, "schema/" + ref.substr(2));
  if (!body.ok()) return body.status();
  if (*body == id) return Fail(path, absl::StrCat("'", ref, "' refers only to itself"));
  if (in_progress_.count(*body) > 0) {
    // The definition is only a $ref to a schema still being compiled (one
    // that holds this ref): the same node.
    in_progress_.erase(id);
    refs_[ref] = *body;
    return *body;
  }
  CopyNode(*body, id);
  in_progress_.erase(id);
  return id;
}

absl::Status JsonSchemaCompiler::ResolveUnion(int32_t id, std::vector<char>& resolved) {
  if (!At(id).is_union || resolved[static_cast<size_t>(id)] == 2) return absl::OkStatus();
  const std::string path = union_paths_.count(id) ? union_paths_[id] : std::string("schema");
  if (resolved[static_cast<size_t>(id)] == 1) return Fail(path, "an anyOf that holds itself as an alternative");
  resolved[static_cast<size_t>(id)] = 1;
  // Per byte: the leaves that begin with it, and the alternatives they come from.
  std::vector<std::vector<int32_t>> leaves(256);
  std::vector<std::vector<int>> from(256);
  const std::vector<int32_t> alternatives = At(id).alternatives;
  bool typed = true;
  for (size_t a = 0; a < alternatives.size(); ++a) {
    const int32_t alternative = alternatives[a];
    if (absl::Status ok = ResolveUnion(alternative, resolved); !ok.ok()) return ok;
    if (At(id).one_of && !At(alternative).typed) {
      return Fail(path, absl::StrCat("alternative ", a,
                                     " states no \"type\": a schema without one accepts values of every type, so "
                                     "a value of another alternative could match it too, and oneOf wants exactly "
                                     "one; give each alternative its type, or use anyOf"));
    }
    typed = typed && At(alternative).typed;
    for (int b = 0; b < 256; ++b) {
      int32_t leaf = -1;
      if (At(alternative).is_union) {
        leaf = At(alternative).by_first_byte[static_cast<size_t>(b)];
      } else if (FirstBytesOfPlain(At(alternative))[static_cast<size_t>(b)]) {
        leaf = alternative;
      }
      auto& here = leaves[static_cast<size_t>(b)];
      if (leaf < 0) continue;
      if (std::find(here.begin(), here.end(), leaf) != here.end()) {
        if (At(id).one_of) {
          return Fail(path, absl::StrCat("alternative ", a, " holds a schema an earlier alternative holds too: a "
                                                            "value of it matches both, and oneOf wants exactly one"));
        }
        continue;
      }
      here.push_back(leaf);
      from[static_cast<size_t>(b)].push_back(static_cast<int>(a));
    }
  }
  std::vector<int32_t> by_first_byte(256, -1);
  for (int b = 0; b < 256; ++b) {
    const auto& here = leaves[static_cast<size_t>(b)];
    if (here.size() == 1) by_first_byte[static_cast<size_t>(b)] = here[0];
    if (here.size() < 2) continue;
    auto discriminated = b == '{' ? Discriminate(here) : absl::StatusOr<int32_t>(-1);
    if (discriminated.ok() && *discriminated >= 0) {
      by_first_byte[static_cast<size_t>(b)] = *discriminated;
      continue;
    }
    return Fail(path, absl::StrCat(
                          "alternatives ", from[static_cast<size_t>(b)][0], " and ", from[static_cast<size_t>(b)][1],
                          " may both begin with ", ByteName(b),
                          ": constrained decoding needs the first byte of a value to pick its alternative, or, for "
                          "objects, a first property every alternative requires with a const string of its own",
                          discriminated.ok() ? "" : absl::StrCat(" (", discriminated.status().message(), ")")));
  }
  At(id).by_first_byte = std::move(by_first_byte);
  At(id).typed = typed;
  resolved[static_cast<size_t>(id)] = 2;
  return absl::OkStatus();
}

absl::StatusOr<int32_t> JsonSchemaCompiler::Discriminate(const std::vector<int32_t>& objects) {
  std::string name;
  std::vector<std::string> values;
  for (int32_t object : objects) {
    const SchemaNode& node = At(object);
    if (node.is_union || node.has_enum || !(node.types & kJsonObjectBit) || node.properties.empty()) return -1;
    const SchemaProperty& first = node.properties[0];
    if (!first.required) {
      return absl::InvalidArgumentError(absl::StrCat("the first property '", first.name, "' is not required"));
    }
    if (values.empty()) name = first.name;
    if (first.name != name) {
      return absl::InvalidArgumentError(
          absl::StrCat("the first properties '", name, "' and '", first.name, "' differ"));
    }
    const SchemaNode& tag = At(first.node);
    if (tag.is_union || !tag.has_enum || tag.enum_texts.size() != 1 || tag.enum_texts[0].empty() ||
        tag.enum_texts[0][0] != '"') {
      return absl::InvalidArgumentError(absl::StrCat("'", name, "' is not a const string in every alternative"));
    }
    if (std::find(values.begin(), values.end(), tag.enum_texts[0]) != values.end()) {
      return absl::InvalidArgumentError(absl::StrCat("'", name, "' is ", tag.enum_texts[0], " in two of them"));
    }
    values.push_back(tag.enum_texts[0]);
  }
  const int32_t tag = NewNode();
  At(tag).has_enum = true;
  for (size_t k = 0; k < values.size(); ++k) {
    At(tag).enum_values.Add(values[k], static_cast<int32_t>(k));
    At(tag).enum_texts.push_back(values[k]);
  }
  const int32_t id = NewNode();
  SchemaNode& node = At(id);
  node.types = kJsonObjectBit;
  node.typed = true;
  node.properties.push_back({name, tag, true});
  const std::string quoted = JsonQuote(name);
  node.property_names.Add(quoted.substr(1, quoted.size() - 2), 0);
  node.next_required = {0, 1};
  node.additional = -1;
  node.discriminated = objects;
  return id;
}
}  // namespace dslaunch::runtime
