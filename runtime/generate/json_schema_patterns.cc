// JsonSchemaCompiler's string side: pattern and format (Note [String
// patterns] in string_pattern.h), the lengths they leave, and
// patternProperties.
#include <algorithm>

#include "runtime/generate/json_schema_compiler.h"

namespace dslaunch::runtime {

using json_schema_detail::AcceptsAnything;
using json_schema_detail::IsAnnotation;
using json_schema_detail::PointerToken;

absl::Status JsonSchemaCompiler::StringPatternOf(const JsonValue& schema, const std::string& path, int32_t id) {
  const JsonValue* pattern = schema.Find("pattern");
  const JsonValue* format = schema.Find("format");
  if (pattern == nullptr && format == nullptr) return absl::OkStatus();
  if (pattern != nullptr && format != nullptr) {
    return Fail(path, "'pattern' beside 'format' is not supported: give one");
  }
  const std::string word = pattern != nullptr ? "pattern" : "format";
  const JsonValue& value = pattern != nullptr ? *pattern : *format;
  if (!value.is_string()) return Fail(path + "/" + word, "expected a string");
  if ((At(id).types & kJsonStringBit) == 0) {
    return Fail(path + "/" + word, absl::StrCat("'", word, "' is read on strings, and this schema takes none"));
  }
  std::string text = value.string_value();
  if (format != nullptr) {
    auto of_format = FormatPattern(text, field_ + ": " + path + "/format");
    if (!of_format.ok()) return of_format.status();
    text = *of_format;
  }
  auto compiled = PatternId(text, path + "/" + word);
  if (!compiled.ok()) return compiled.status();
  At(id).pattern = *compiled;
  return LengthsFitPattern(path, word, id);
}

absl::StatusOr<int32_t> JsonSchemaCompiler::PatternId(const std::string& text, const std::string& where) {
  if (auto same = pattern_ids_.find(text); same != pattern_ids_.end()) return same->second;
  auto compiled = StringPattern::Compile(text, absl::StrCat(field_, ": ", where), &pattern_work_left_);
  if (!compiled.ok()) return compiled.status();
  pattern_states_ += compiled->states();
  if (pattern_states_ > static_cast<size_t>(kMaxSchemaPatternStates)) {
    return Fail(where, absl::StrCat("the schema's patterns need more than ", kMaxSchemaPatternStates,
                                    " automaton states together"));
  }
  const auto id = static_cast<int32_t>(patterns_->size());
  pattern_ids_.emplace(text, id);
  patterns_->push_back(*std::move(compiled));
  return id;
}

// Note [Pattern properties]: patternProperties {PATTERN: SCHEMA, ...}: a
// key that PATTERN matches (anywhere in it, as ECMA-262's search does) has
// a value SCHEMA validates, every matching pattern's; additionalProperties
// is for the keys that no pattern (and no listed property) matches.
//  - Beside "properties" no other key is generated (as before), so the
//    patterns bind only the listed names they match: each such name's
//    value would have to meet its own schema and the pattern's, and only
//    one schema is held, so the pattern's must accept anything (true, {})
//    or be the property's own (compared as written); otherwise the schema
//    is refused, naming both. Whether a pattern matches a name is the
//    automaton's reading, sure for ASCII names; a name beyond ASCII counts
//    as matched (the automaton's \S, say, matches fewer code points than
//    ECMA-262's).
//  - Without "properties" the keys generated are the strings some pattern
//    matches (the patterns as one alternation, held as a key's characters
//    come: Note [String patterns]), each with a value of the patterns'
//    schema. Patterns of different schemas (compared as written) are
//    refused: a key two of them
//    match would need both, and which a key matches is known only at its
//    end. Keys no pattern matches are not generated, whatever
//    additionalProperties says (an output without them validates), and
//    an additionalProperties schema is compiled all the same, so that what
//    it holds is checked.
absl::Status JsonSchemaCompiler::PatternPropertiesOf(const JsonValue& patterned, const JsonValue& schema,
                                                     const std::string& path, int32_t id) {
  if (!patterned.is_object()) return Fail(path, "expected an object of schemas by pattern");
  if (patterned.keys().empty()) return absl::OkStatus();
  std::vector<int32_t> patterns, values;
  for (size_t i = 0; i < patterned.keys().size(); ++i) {
    const std::string here = absl::StrCat(path, "/", PointerToken(patterned.keys()[i]));
    auto pattern = PatternId(patterned.keys()[i], here);
    if (!pattern.ok()) return pattern.status();
    auto value = NodeOf(patterned.items()[i], here);
    if (!value.ok()) return value.status();
    patterns.push_back(*pattern);
    values.push_back(*value);
  }
  if (const JsonValue* properties = schema.Find("properties"); properties != nullptr && properties->is_object() &&
                                                               !properties->keys().empty()) {
    for (size_t p = 0; p < properties->keys().size(); ++p) {
      const std::string& name = properties->keys()[p];
      for (size_t i = 0; i < patterns.size(); ++i) {
        const JsonValue& pattern_schema = patterned.items()[i];
        if (AcceptsAnything(pattern_schema) || SerializeJson(pattern_schema) == SerializeJson(properties->items()[p])) {
          continue;
        }
        // The automaton matches a subset of what ECMA-262 matches outside
        // ASCII (\S matches no non-ASCII code point there: Note [String
        // patterns]), so its "no match" is sure for ASCII names only; a
        // name with other code points counts as matched.
        const bool ascii = std::all_of(name.begin(), name.end(), [](char c) { return (c & 0x80) == 0; });
        if (ascii && !(*patterns_)[static_cast<size_t>(patterns[i])].MatchesText(name)) continue;
        return Fail(absl::StrCat(path, "/", PointerToken(patterned.keys()[i])),
                    absl::StrCat("the pattern ", ascii ? "matches" : "may match (beyond ASCII this is not told)",
                                 " the property '", name,
                                 "', whose value would have to meet both its schemas, and only one is held: "
                                 "give that property one schema, or a pattern that does not match it"));
      }
    }
    return absl::OkStatus();
  }
  for (size_t i = 1; i < patterns.size(); ++i) {
    if (SerializeJson(patterned.items()[i]) != SerializeJson(patterned.items()[0])) {
      return Fail(path, absl::StrCat("the patterns '", patterned.keys()[0], "' and '", patterned.keys()[i],
                                     "' have different schemas: a key both match would need both, which is "
                                     "not supported: give one pattern, or the same schema to each"));
    }
  }
  std::string alternation;
  for (size_t i = 0; i < patterned.keys().size(); ++i) {
    absl::StrAppend(&alternation, i > 0 ? "|" : "", patterned.keys()[i]);
  }
  auto keys = PatternId(alternation, path);
  if (!keys.ok()) return keys.status();
  const int32_t key_node = NewNode();
  At(key_node).types = kJsonStringBit;
  At(key_node).typed = true;
  At(key_node).pattern = *keys;
  At(id).key_node = key_node;
  At(id).additional = values[0];
  return absl::OkStatus();
}

absl::Status JsonSchemaCompiler::LengthsFitPattern(const std::string& path, const std::string& word, int32_t id) {
  const StringPattern* compiled = &(*patterns_)[static_cast<size_t>(At(id).pattern)];
  const SchemaNode& node = At(id);
  if (node.max_length >= 0 && compiled->Fewest(compiled->start()) > node.max_length) {
    return Fail(path, absl::StrCat("the ", word, "'s shortest match is ", compiled->Fewest(compiled->start()),
                                   " code points, above maxLength ", node.max_length));
  }
  const int32_t most = compiled->Most(compiled->start());
  if (most != kUnboundedPatternLength && most < node.min_length) {
    return Fail(path, absl::StrCat("the ", word, "'s longest match is ", most, " code points, below minLength ",
                                   node.min_length));
  }
  return absl::OkStatus();
}
// Note [Property names]: propertyNames SCHEMA holds every key of the object
// to a string schema: here pattern or format, minLength and maxLength (with
// "type": "string" and annotations beside them; anything else is refused
// naming it).
//  - Without "properties" the keys generated are the strings it accepts, held
//    as a key's characters come, as patternProperties' keys are (Note
//    [Pattern properties]); the two together are refused: one automaton
//    reads a key.
//  - Beside "properties" only the listed names are generated, so each must
//    meet it: checked here, a name that does not is refused naming it (a name
//    beyond ASCII against a pattern counts as not told, and is refused).
absl::Status JsonSchemaCompiler::PropertyNamesOf(const JsonValue& names, const std::string& path, int32_t id) {
  if (AcceptsAnything(names)) return absl::OkStatus();
  if (!names.is_object()) {
    return Fail(path, "expected a schema of strings (pattern, format, minLength, maxLength): a false one allows only "
                      "{}, which is not supported");
  }
  for (const std::string& key : names.keys()) {
    if (key == "pattern" || key == "format" || key == "minLength" || key == "maxLength" || IsAnnotation(key)) continue;
    if (const JsonValue* type = names.Find("type"); key == "type" && type->is_string() && type->string_value() == "string") {
      continue;
    }
    return Fail(absl::StrCat(path, "/", PointerToken(key)),
                absl::StrCat("'", key, "' is not read in propertyNames (pattern, format, minLength, maxLength and "
                                       "\"type\": \"string\" are)"));
  }
  auto compiled = NodeOf(names, path);
  if (!compiled.ok()) return compiled.status();
  const SchemaNode keys = At(*compiled);
  if (!At(id).properties.empty()) {
    for (const SchemaProperty& property : At(id).properties) {
      int64_t length = 0;
      for (char c : property.name) length += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
      bool meets = length >= keys.min_length && (keys.max_length < 0 || length <= keys.max_length);
      const bool ascii =
          std::all_of(property.name.begin(), property.name.end(), [](char c) { return (c & 0x80) == 0; });
      if (meets && keys.pattern >= 0) {
        if (!ascii) {
          return Fail(path, absl::StrCat("whether the property '", property.name, "' matches its pattern is not told "
                                         "beyond ASCII: leave propertyNames out, or rename the property"));
        }
        meets = (*patterns_)[static_cast<size_t>(keys.pattern)].MatchesText(property.name);
      }
      if (!meets) {
        return Fail(path, absl::StrCat("the property '", property.name, "' is not a name it accepts"));
      }
    }
    return absl::OkStatus();
  }
  if (At(id).key_node >= 0) {
    return Fail(path, "propertyNames beside patternProperties is not supported: one automaton reads a key; fold the "
                      "names into the patterns");
  }
  At(id).key_node = *compiled;
  return absl::OkStatus();
}

}  // namespace dslaunch::runtime
