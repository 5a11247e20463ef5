// Note [JSON schemas for constrained output]: what the compiler refuses (named
// at its place in the schema), what the automaton allows byte by byte, and a
// differential check: thousands of outputs drawn at random from the
// automaton, each read by the strict JSON reader and validated against the
// schema by an independent validator (below, written from JSON Schema's
// rules, not from the automaton).
#include "runtime/generate/json_schema.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <regex>

#include "absl/strings/match.h"
#include "common/json_quote.h"
#include "runtime/generate/json_schema_automaton.h"
#include "runtime/generate/output_constraint.h"
#include "runtime/generate/string_pattern.h"
#include "torch/torch.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;

OutputConstraint Schema(const std::string& text) {
  OutputConstraint constraint;
  constraint.kind = OutputConstraint::Kind::kJsonSchema;
  constraint.schema = text;
  return constraint;
}

// 1: whole; 0: a prefix of an output the schema allows; -1: not.
int Judge(const std::string& schema, const std::string& text) {
  bool complete = false;
  if (!AllowsPrefix(Schema(schema), text, &complete)) return -1;
  return complete ? 1 : 0;
}

std::string CompileError(const std::string& schema) {
  auto compiled = CompileJsonSchemaText(schema, "response_format.json_schema");
  return compiled.ok() ? "compiled" : std::string(compiled.status().message());
}

TEST(JsonSchemaTest, WhatTheDecoderCannotHoldOutputToIsRefusedAtItsPlace) {
  struct Case {
    std::string schema, error;
  };
  for (const Case& c : std::vector<Case>{
           {R"js({"type": "string", "pattern": "^a+(?=b)"})js", "schema/pattern: pattern '^a+(?=b)': lookarounds"},
           {R"({"properties": {"host": {"type": "string", "format": "uri"}}})",
            "schema/properties/host/format: format 'uri' is not supported"},
           {R"({"type": "string", "pattern": "^a", "format": "email"})",
            "schema: 'pattern' beside 'format' is not supported"},
           {R"({"type": "integer", "format": "int32"})", "schema/format: 'format' is read on strings"},
           {R"({"type": "string", "pattern": "^a{5}$", "maxLength": 4})",
            "schema: the pattern's shortest match is 5 code points, above maxLength 4"},
           {R"({"type": "string", "format": "date", "minLength": 11})",
            "schema: the format's longest match is 10 code points, below minLength 11"},
           {R"({"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 2.5}}})",
            "schema/properties/n/multipleOf: 2.5 is not held: only a whole number from 1 to 1000 is"},
           {R"({"type": "object", "minProperties": 1})", "schema: 'minProperties' is not supported"},
           // Note [Property names]: string schemas of pattern, format and lengths only.
           {R"({"propertyNames": {"enum": ["a"]}})", "schema/propertyNames/enum: 'enum' is not read in propertyNames"},
           {R"({"propertyNames": {"type": "integer"}})", "schema/propertyNames/type: 'type' is not read"},
           {R"({"propertyNames": false})", "schema/propertyNames: expected a schema of strings"},
           {R"({"properties": {"ab": {}}, "propertyNames": {"maxLength": 1}})",
            "schema/propertyNames: the property 'ab' is not a name it accepts"},
           {R"({"properties": {"café": {}}, "propertyNames": {"pattern": "^c"}})",
            "schema/propertyNames: whether the property 'café' matches its pattern is not told beyond ASCII"},
           {R"({"patternProperties": {"^a": {}}, "propertyNames": {"maxLength": 3}})",
            "schema/propertyNames: propertyNames beside patternProperties is not supported"},
           // Note [Pattern properties]: what one held schema per value cannot keep.
           {R"({"patternProperties": {"^a": {"type": "integer"}, "b$": {"type": "string"}}})",
            "schema/patternProperties: the patterns '^a' and 'b$' have different schemas"},
           {R"({"properties": {"ab": {"type": "string"}}, "patternProperties": {"^a": {"type": "integer"}}})",
            "schema/patternProperties/^a: the pattern matches the property 'ab', whose value would have to meet "
            "both its schemas"},
           // \S matches é in ECMA-262, not in the automaton: a name beyond ASCII counts as matched.
           {R"({"properties": {"café": {"type": "string"}}, "patternProperties": {"^\\S+$": {"type": "integer"}}})",
            "schema/patternProperties/^\\S+$: the pattern may match (beyond ASCII this is not told) the property 'café'"},
           {R"js({"patternProperties": {"^a/(?=b)": {}}})js", "schema/patternProperties/^a~1(?=b): pattern '^a/(?=b)': lookarounds"},
           {R"({"patternProperties": {"^a": {"format": "uri"}}})", "schema/patternProperties/^a/format: format 'uri'"},
           {R"({"patternProperties": ["^a"]})", "schema/patternProperties: expected an object of schemas by pattern"},
           {R"({"type": "string", "minimum": 0})",
            "schema: minimum, maximum and multipleOf bound numbers: this schema's type takes none"},
           {R"({"type": "integer", "minimum": 1.5, "maximum": 1.9})", "schema: no integer lies within its minimum and maximum"},
           {R"({"minimum": 2, "exclusiveMaximum": 2})", "schema: no number lies within its minimum and maximum"},
           {R"({"type": "number", "minimum": "0"})", "schema/minimum: expected a number"},
           {R"({"type": "integer", "maximum": 1e300})", "schema/maximum: expected a number below 2^53"},
           {R"({"type": "strin"})", "schema/type: expected null, boolean, integer, number, string, array or object"},
           {R"({"type": []})", "schema/type: an empty list of types"},
           {R"({"properties": {"a": {}}, "required": ["b"]})", "schema/required/0: 'b' is not among the properties"},
           {R"({"type": "array", "minItems": 3, "maxItems": 2})", "minItems 3 is above maxItems 2"},
           {R"({"type": "string", "minLength": 5, "maxLength": 4})", "minLength 5 is above maxLength 4"},
           {R"({"type": "string", "maxLength": -1})", "schema/maxLength: expected an integer from 0 to 65535"},
           {R"({"type": "array", "items": [{}, {}]})", "schema/items: items as a list (the tuple form)"},
           {R"({"anyOf": [{"type": "object"}, {"properties": {"a": {}}}]})",
            "schema/anyOf: alternatives 0 and 1 may both begin with '{'"},
           {R"({"anyOf": [{"properties": {"t": {"const": "a"}}, "required": ["t"]},
                          {"properties": {"t": {"const": "a"}, "x": {}}, "required": ["t"]}]})",
            "may both begin with '{': constrained decoding needs the first byte of a value to pick its alternative, "
            "or, for objects, a first property every alternative requires with a const string of its own ('t' is "
            "\"a\" in two of them)"},
           {R"({"anyOf": [{"properties": {"t": {"const": "a"}}, "required": ["t"]},
                          {"properties": {"t": {"const": "b"}}}]})", "(the first property 't' is not required)"},
           {R"({"oneOf": [{"properties": {"t": {"const": "a"}}, "required": ["t"]}, {"type": "string"}]})",
            "schema/oneOf: alternative 0 states no \"type\""},
           {R"({"anyOf": [{"properties": {"t": {"const": "a"}}, "required": ["t"]},
                          {"properties": {"u": {"const": "b"}}, "required": ["u"]}]})",
            "(the first properties 't' and 'u' differ)"},
           {R"({"anyOf": [{"properties": {"t": {"const": "a"}}, "required": ["t"]},
                          {"properties": {"t": {"const": 2}}, "required": ["t"]}]})",
            "('t' is not a const string in every alternative)"},
           {R"({"oneOf": [{"type": "string"}, {"anyOf": [{"$ref": "#/$defs/s"}, {"type": "null"}]}, {"$ref": "#/$defs/s"}],
                "$defs": {"s": {"type": "string"}}})", "schema/oneOf: alternative 2 holds a schema an earlier"},
           {R"({"oneOf": [true, {"type": "null"}]})", "schema/oneOf: alternative 0 states no \"type\""},
           {R"({"properties": {"a/b~": {"pattern": "\\bx"}}})", "schema/properties/a~1b~0/pattern: pattern '\\bx'"},
           {R"({"properties": {"a": {}}, "additionalProperties": {"format": "uri"}})",
            "schema/additionalProperties/format: format 'uri' is not supported"},
           {R"({"const": 9007199254740993})", "schema/const: the integer 9007199254740992 is 2^53 or past it"},
           {R"({"anyOf": [{"enum": ["a", 1]}, {"type": "string"}]})",
            "schema/anyOf: alternatives 0 and 1 may both begin with '\"'"},
           {R"({"oneOf": []})", "schema/oneOf: expected a non-empty array"},
           {R"({"allOf": [{}, {}]})", "schema/allOf: only an allOf of one schema"},
           {R"({"$ref": "#/$defs/missing"})", "schema/$ref: '#/$defs/missing' names no definition"},
           {R"({"$ref": "http://example.com/s.json"})", "only refs into this schema"},
           {R"({"$ref": "#"})", "'#' refers only to itself"},
           {R"({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"})",
            "'#/$defs/a' refers only to itself"},
           {R"({"anyOf": [{"$ref": "#"}, {"type": "null"}]})", "holds itself as an alternative"},
           {R"({"$ref": "#/$defs/a", "type": "object", "$defs": {"a": {}}})", "'$ref' beside 'type' is not supported"},
           {R"({"enum": ["a"], "minLength": 2})", "'enum' beside 'minLength' is not supported"},
           {R"({"type": "integer", "enum": ["a", "b"]})", "schema/enum: no value of it has the schema's type"},
           {R"({"properties": {"a": false}})", "schema/properties/a: false: no value is allowed here"},
           {R"({"properties": {"a": 3}})", "schema/properties/a: expected a schema (an object or a boolean), got a number"},
           {R"({"type": "object",)", "response_format.json_schema:1:"},
       }) {
    SCOPED_TRACE(c.schema);
    const std::string error = CompileError(c.schema);
    EXPECT_THAT(error, HasSubstr(c.error));
    if (c.error.rfind("response_format", 0) != 0) {
      EXPECT_THAT(error, HasSubstr("response_format.json_schema: "));
    }
  }
  // Annotations change nothing and are read past.
  EXPECT_EQ(CompileError(R"({"title": "T", "description": "d", "$schema": "x", "default": 1, "examples": [],
                             "type": "object", "properties": {"a": {"description": "the a", "type": "string"}}})"),
            "compiled");
}

TEST(JsonSchemaTest, PropertiesComeInTheSchemasOrderEachOnceRequiredOnesNeverSkipped) {
  const std::string schema = R"({"type": "object", "properties": {
      "name": {"type": "string"}, "age": {"type": "integer"}, "email": {"type": "string"}, "tags": {"type": "array",
      "items": {"type": "string"}}}, "required": ["name", "email"], "additionalProperties": false})";
  EXPECT_EQ(Judge(schema, R"({"name": "Ann", "age": 41, "email": "a@b", "tags": ["x", "y"]})"), 1);
  EXPECT_EQ(Judge(schema, R"({"name":"Ann","email":"a@b"})"), 1);  // age and tags are optional
  EXPECT_EQ(Judge(schema, R"( {"name" : "", "email" : "" } )"), -1);  // nothing after the value
  EXPECT_EQ(Judge(schema, R"( {"name" : "", "email" : "" })"), 1);
  EXPECT_EQ(Judge(schema, R"({"email")"), -1);                        // name is required first
  EXPECT_EQ(Judge(schema, R"({"name": "A", "tags")"), -1);            // email may not be skipped
  EXPECT_EQ(Judge(schema, R"({"name": "A", "age": 1, "age")"), -1);   // once only
  EXPECT_EQ(Judge(schema, R"({"name": "A", "email": "e", "age")"), -1);  // in order
  EXPECT_EQ(Judge(schema, R"({"name": "A"})"), -1);                   // email is still due
  EXPECT_EQ(Judge(schema, R"({"name": "A", "age": 1.5)"), -1);        // an integer
  EXPECT_EQ(Judge(schema, R"({"name": "A", "age": 1e3)"), -1);
  EXPECT_EQ(Judge(schema, R"({"name": "A", "age": -12, "email": "e", "tags": [1]})"), -1);
  EXPECT_EQ(Judge(schema, R"({"nam": 1})"), -1);  // no such key
  EXPECT_EQ(Judge(schema, R"({"name": "A", "email": "e", "other": 1})"), -1);
  EXPECT_EQ(Judge(schema, R"({"name": "A", "email": "e",)"), 0);      // tags may still come
  EXPECT_EQ(Judge(schema, R"({"name": "A", "email": "e", "tags": [],)"), -1);  // nothing may follow tags
}

TEST(JsonSchemaTest, KeysAreSpelledAsTheOutputQuotesThem) {
  const std::string schema = R"({"properties": {"say \"hi\"\\": {"const": true}, "caf\u00e9": {"type": "null"}}})";
  EXPECT_EQ(Judge(schema, "{\"say \\\"hi\\\"\\\\\": true, \"caf\xC3\xA9\": null}"), 1);
  EXPECT_EQ(Judge(schema, "{\"say \\\"hi\\\"\\\\\": false"), -1);
  EXPECT_EQ(Judge(schema, "{\"say \""), -1);  // the quote inside the name is escaped
}

TEST(JsonSchemaTest, EnumsConstsAndTypeListsHoldExactValues) {
  EXPECT_EQ(Judge(R"({"enum": ["red", "green", 12, 1, null, {"a": [1]}]})", R"("green")"), 1);
  EXPECT_EQ(Judge(R"({"enum": ["red", "green", 12, 1, null, {"a": [1]}]})", R"({"a":[1]})"), 1);
  EXPECT_EQ(Judge(R"({"enum": ["red", "green", 12, 1, null, {"a": [1]}]})", R"({"a": [1]})"), -1);  // compact
  EXPECT_EQ(Judge(R"({"enum": ["red", "green", 12, 1, null, {"a": [1]}]})", R"("gre)"), 0);
  EXPECT_EQ(Judge(R"({"enum": ["red", "green", 12, 1, null, {"a": [1]}]})", R"("blue")"), -1);
  EXPECT_EQ(Judge(R"({"enum": ["red", "green", 12, 1, null, {"a": [1]}]})", "1"), 1);   // 1 and 12: whole at 1
  EXPECT_EQ(Judge(R"({"enum": ["red", "green", 12, 1, null, {"a": [1]}]})", "12"), 1);
  EXPECT_EQ(Judge(R"({"enum": ["red", "green", 12, 1, null, {"a": [1]}]})", "13"), -1);
  EXPECT_EQ(Judge(R"({"type": "array", "items": {"enum": [1, 12]}})", "[1,12, 1]"), 1);
  EXPECT_EQ(Judge(R"({"type": "array", "items": {"enum": [1, 12]}})", "[123"), -1);
  EXPECT_EQ(Judge(R"({"const": "only"})", R"("only")"), 1);
  EXPECT_EQ(Judge(R"({"type": "integer", "const": 1e5})", "100000"), 1);  // an integer's digits, not 1e+05
  EXPECT_EQ(Judge(R"({"enum": [0.1, -2.5e-7]})", "-2.5e-07"), 1);
  EXPECT_EQ(Judge(R"({"type": "string", "enum": ["a", 1]})", "1"), -1);  // the type rules 1 out
  EXPECT_EQ(Judge(R"({"type": ["string", "null"]})", "null"), 1);
  EXPECT_EQ(Judge(R"({"type": ["string", "null"]})", R"("x")"), 1);
  EXPECT_EQ(Judge(R"({"type": ["string", "null"]})", "1"), -1);
  EXPECT_EQ(Judge(R"({"type": "number"})", "-0.5e-3"), 1);
  EXPECT_EQ(Judge(R"({"type": "number"})", "1E+99"), 1);
  EXPECT_EQ(Judge(R"({"type": "number"})", "1e100"), -1);  // every number reads back finite
  EXPECT_EQ(Judge(R"({"type": "boolean"})", "null"), -1);
  EXPECT_EQ(Judge(R"({"type": "boolean"})", "false"), 1);
}

TEST(JsonSchemaTest, LengthsAndItemCountsAreHeldInCodePointsAndItems) {
  const std::string name = R"({"type": "string", "minLength": 2, "maxLength": 3})";
  EXPECT_EQ(Judge(name, R"("ab")"), 1);
  EXPECT_EQ(Judge(name, "\"\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\""), 1);  // three code points, nine bytes
  EXPECT_EQ(Judge(name, R"("\n\u00e9")"), 1);                               // an escape is one
  EXPECT_EQ(Judge(name, R"("a")"), -1);
  EXPECT_EQ(Judge(name, R"("abcd)"), -1);
  EXPECT_EQ(Judge(name, R"("a\ud83d\ude00")"), 1);  // a surrogate pair is one code point
  EXPECT_EQ(Judge(name, R"("a\ud83d")"), -1);         // half of one is none
  EXPECT_EQ(Judge(name, R"("a\ude00)"), -1);
  EXPECT_EQ(Judge(R"({"type": "string", "maxLength": 0})", R"("")"), 1);
  EXPECT_EQ(Judge(R"({"type": "string", "maxLength": 0})", R"("a)"), -1);
  const std::string pair = R"({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2})";
  EXPECT_EQ(Judge(pair, "[]"), -1);
  EXPECT_EQ(Judge(pair, "[1]"), 1);
  EXPECT_EQ(Judge(pair, "[1, 2]"), 1);
  EXPECT_EQ(Judge(pair, "[1, 2,"), -1);
  EXPECT_EQ(Judge(R"({"type": "array", "maxItems": 0})", "[]"), 1);
  EXPECT_EQ(Judge(R"({"type": "array", "maxItems": 0})", "[1"), -1);
}

TEST(JsonSchemaTest, IntegerBoundsRefuseADigitThatLeavesNoWayIntoTheRange) {
  const std::string range = R"({"type": "integer", "minimum": 10, "maximum": 200})";
  EXPECT_EQ(Judge(range, "5"), 0);  // 50-59 are in range
  EXPECT_EQ(Judge(range, "50"), 1);
  EXPECT_EQ(Judge(range, "200"), 1);
  EXPECT_EQ(Judge(range, "201"), -1);
  EXPECT_EQ(Judge(range, "2000"), -1);
  EXPECT_EQ(Judge(range, "30"), 1);
  EXPECT_EQ(Judge(range, "300"), -1);
  EXPECT_EQ(Judge(range, "0"), -1);
  EXPECT_EQ(Judge(range, "-"), -1);
  const std::string open = R"({"type": "integer", "exclusiveMinimum": -3, "exclusiveMaximum": 3})";
  EXPECT_EQ(Judge(open, "-2"), 1);
  EXPECT_EQ(Judge(open, "-0"), 1);
  EXPECT_EQ(Judge(open, "-3"), -1);
  EXPECT_EQ(Judge(open, "3"), -1);
  EXPECT_EQ(Judge(open, "-"), 0);
  EXPECT_EQ(Judge(R"({"type": "integer", "minimum": -5})", "-5"), 1);
  EXPECT_EQ(Judge(R"({"type": "integer", "minimum": -5})", "-50"), -1);
  EXPECT_EQ(Judge(R"({"type": "integer", "minimum": -5})", "123456789012"), 1);
  EXPECT_EQ(Judge(R"({"type": "integer", "maximum": -10})", "-9"), 0);  // -90 and beyond
  EXPECT_EQ(Judge(R"({"type": "integer", "maximum": -10})", "1"), -1);
  // A fraction is an integer's no more (the type is integer), but the bound
  // may be one: 1.5 is held as 2.
  EXPECT_EQ(Judge(R"({"type": "integer", "minimum": 1.5})", "1"), 0);  // 10-19
  EXPECT_EQ(Judge(R"({"type": "integer", "minimum": 1.5})", "1."), -1);
  EXPECT_EQ(Judge(R"({"type": "integer", "minimum": 1.5, "maximum": 3})", "2"), 1);
  EXPECT_EQ(Judge(R"({"type": "integer", "minimum": 1.5, "maximum": 3})", "1"), -1);
  // Inside an object: the number ends at the next byte, which must find it in range.
  const std::string object = R"({"properties": {"n": {"type": "integer", "minimum": 100}}, "required": ["n"]})";
  EXPECT_EQ(Judge(object, R"({"n": 99)"), 0);  // 990 is still to come
  EXPECT_EQ(Judge(object, R"({"n": 99})"), -1);
  EXPECT_EQ(Judge(object, R"({"n": 100})"), 1);
}

// Note [Number bounds]: numbers with a fraction, held digit by digit and
// written without an exponent.
// Equal bounds share their tables; all of a schema's tables share one budget
// (a multipleOf of 1000 takes 756 KB), refused past it naming the place.
TEST(JsonSchemaTest, NumberTablesShareOneBudget) {
  auto schema_of = [](const std::vector<int>& steps) {
    std::string properties;
    for (size_t i = 0; i < steps.size(); ++i) {
      absl::StrAppend(&properties, i ? "," : "", "\"p", i, "\": {\"type\": \"integer\", \"multipleOf\": ", steps[i], "}");
    }
    return absl::StrCat("{\"type\": \"object\", \"properties\": {", properties, "}}");
  };
  auto same = CompileJsonSchemaText(schema_of(std::vector<int>(200, 1000)), "schema");
  ASSERT_TRUE(same.ok()) << same.status();
  std::vector<int> different;
  for (int m = 1000; m > 980; --m) different.push_back(m);
  auto many = CompileJsonSchemaText(schema_of(different), "schema");
  ASSERT_FALSE(many.ok());
  EXPECT_THAT(std::string(many.status().message()),
              HasSubstr("schema/properties/p11: the schema's number bounds would need more than 8388608 bytes"));
}

TEST(JsonSchemaTest, NumberBoundsHoldFractionsAsTheyCome) {
  const std::string unit = R"({"type": "number", "minimum": 0, "exclusiveMaximum": 1})";
  EXPECT_EQ(Judge(unit, "0"), 1);
  EXPECT_EQ(Judge(unit, "0.999"), 1);
  EXPECT_EQ(Judge(unit, "1"), -1);
  EXPECT_EQ(Judge(unit, "-"), 0);  // "-0" is 0
  EXPECT_EQ(Judge(unit, "-0.1"), -1);
  EXPECT_EQ(Judge(unit, "0.5e"), -1);  // no exponent beside bounds
  const std::string temperature = R"({"type": "number", "minimum": -273.15, "maximum": 1e4})";
  EXPECT_EQ(Judge(temperature, "-273.15"), 1);
  EXPECT_EQ(Judge(temperature, "-273.151"), -1);
  EXPECT_EQ(Judge(temperature, "-27"), 1);
  EXPECT_EQ(Judge(temperature, "-2731"), -1);
  EXPECT_EQ(Judge(temperature, "10000.0"), 1);
  EXPECT_EQ(Judge(temperature, "10000.01"), -1);
  // exclusiveMinimum 0: anything above zero; "0" may still become "0.1".
  const std::string positive = R"({"type": "number", "exclusiveMinimum": 0})";
  EXPECT_EQ(Judge(positive, "0"), 0);
  EXPECT_EQ(Judge(positive, "0.0001"), 1);
  EXPECT_EQ(Judge(positive, "-"), -1);
  // Without "type", the bounds imply a number.
  EXPECT_EQ(Judge(R"({"minimum": 0.25, "maximum": 0.5})", "0.3"), 1);
  EXPECT_EQ(Judge(R"({"minimum": 0.25, "maximum": 0.5})", "0.2"), 0);  // 0.25-0.29...
  EXPECT_EQ(Judge(R"({"minimum": 0.25, "maximum": 0.5})", "0.6"), -1);
  const std::string object =
      R"({"properties": {"p": {"type": "number", "minimum": 0.5, "maximum": 0.75}}, "required": ["p"]})";
  EXPECT_EQ(Judge(object, R"({"p": 0.7})"), 1);
  EXPECT_EQ(Judge(object, R"({"p": 0.76})"), -1);
  EXPECT_EQ(Judge(object, R"({"p": 0.5})"), 1);
  EXPECT_EQ(Judge(object, R"({"p": 0.4)"), -1);
}

TEST(JsonSchemaTest, AlternativesRefsAndRecursionHold) {
  const std::string tree = R"({"$defs": {"node": {"type": "object", "properties": {
      "value": {"type": "integer"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
      "required": ["value"]}}, "$ref": "#/$defs/node"})";
  EXPECT_EQ(Judge(tree, R"({"value": 1, "children": [{"value": 2}, {"value": 3, "children": [{"value": 4}]}]})"), 1);
  EXPECT_EQ(Judge(tree, R"({"value": 1, "children": [{"children": [])"), -1);
  // A definition that is only a $ref to one still being compiled is that one.
  const std::string alias = R"({"$defs": {"A": {"type": "object", "properties": {"b": {"$ref": "#/$defs/B"}}},
      "B": {"$ref": "#/$defs/A"}}, "$ref": "#/$defs/A"})";
  EXPECT_EQ(Judge(alias, R"({"b": {"b": {}}})"), 1);
  EXPECT_EQ(Judge(R"({"properties": {"self": {"$ref": "#/$defs/S"}}, "$defs": {"S": {"$ref": "#"}}})",
                  R"({"self": {"self": {}}})"),
            1);
  const std::string optional = R"({"type": "object", "properties": {"note": {"anyOf": [{"type": "string"},
      {"type": "null"}]}, "point": {"oneOf": [{"type": "array", "items": {"type": "number"}},
      {"definitions_ref": {"$ref": "#/definitions/xy"}, "$ref": "#/definitions/xy"}]}},
      "definitions": {"xy": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}}})";
  EXPECT_THAT(CompileError(optional), HasSubstr("'$ref' beside 'definitions_ref'"));
  const std::string nullable = R"({"type": "object", "properties": {"note": {"anyOf": [{"type": "string"},
      {"type": "null"}]}, "point": {"oneOf": [{"type": "array", "items": {"type": "number"}},
      {"$ref": "#/definitions/xy"}]}}, "required": ["note", "point"],
      "definitions": {"xy": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}}})";
  EXPECT_EQ(Judge(nullable, R"({"note": null, "point": [1, 2.5]})"), 1);
  EXPECT_EQ(Judge(nullable, R"({"note": "n", "point": {"x": -1}})"), 1);
  EXPECT_EQ(Judge(nullable, R"({"note": 1)"), -1);
  EXPECT_EQ(Judge(nullable, R"({"note": null, "point": {"y")"), -1);
  // A map: no properties, values of additionalProperties; any keys, repeats allowed as RFC 8259 does.
  const std::string map = R"({"type": "object", "additionalProperties": {"type": "integer"}})";
  EXPECT_EQ(Judge(map, R"({"a": 1, "b": 2, "a": 3})"), 1);
  EXPECT_EQ(Judge(map, R"({"a": "x")"), -1);
  EXPECT_EQ(Judge(R"({"type": "object", "additionalProperties": false})", "{}"), 1);
  EXPECT_EQ(Judge(R"({"type": "object", "additionalProperties": false})", R"({")"), -1);
  // Note [Pattern properties]: keys that a pattern matches, values of its
  // schema; a key that leaves every pattern is refused as it comes.
  const std::string env = R"({"type": "object", "patternProperties": {"^[A-Z_]+$": {"type": "string"}},
      "additionalProperties": false})";
  EXPECT_EQ(Judge(env, R"({"PATH": "/bin", "HOME": "/root"})"), 1);
  EXPECT_EQ(Judge(env, R"({"PATH": 1)"), -1);
  EXPECT_EQ(Judge(env, R"({"Pa)"), -1);
  EXPECT_EQ(Judge(env, R"({"")"), -1) << "the empty key matches no pattern";
  EXPECT_EQ(Judge(env, R"({"PATH")"), 0);
  // Unanchored, as ECMA-262 searches; two patterns of one schema.
  const std::string two = R"({"patternProperties": {"id$": {"type": "integer"}, "^n_": {"type": "integer"}}})";
  EXPECT_EQ(Judge(two, R"({"user_id": 1, "n_x": 2, "n_id": 3})"), 1);
  EXPECT_EQ(Judge(two, R"({"user": 1})"), -1);
  // Beside "properties": the listed names only; a pattern may match one
  // when its schema accepts anything.
  const std::string listed = R"({"type": "object", "properties": {"x_a": {"type": "integer"}},
      "patternProperties": {"^x_": {"description": "any"}}, "required": ["x_a"]})";
  EXPECT_EQ(Judge(listed, R"({"x_a": 3})"), 1);
  EXPECT_EQ(Judge(listed, R"({"x_b")"), -1);
  EXPECT_EQ(CompileError(R"({"properties": {"cafe": {"type": "string"}}, "patternProperties": {"^\\d": {"type": "integer"}}})"),
            "compiled")
      << "a pattern that matches no listed name binds none";
  // Note [Property names]: keys the names' schema accepts, held as they
  // come; beside "properties", listed names that meet it.
  const std::string codes = R"({"type": "object", "propertyNames": {"pattern": "^[A-Z]{2}$"},
      "additionalProperties": {"type": "integer"}})";
  EXPECT_EQ(Judge(codes, R"({"NO": 5, "SE": 10})"), 1);
  EXPECT_EQ(Judge(codes, R"({"NOR)"), -1);
  EXPECT_EQ(Judge(codes, R"({"N)"), 0);
  EXPECT_EQ(Judge(codes, R"({"N")"), -1) << "a key the pattern does not match ends";
  const std::string short_keys = R"({"propertyNames": {"minLength": 2, "maxLength": 3}})";
  EXPECT_EQ(Judge(short_keys, R"({"ab": 1, "abc": [2]})"), 1);
  EXPECT_EQ(Judge(short_keys, R"({"a": 1})"), -1) << "a key shorter than minLength";
  EXPECT_EQ(Judge(short_keys, R"({"abcd)"), -1);
  EXPECT_EQ(Judge(R"({"properties": {"ab": {"type": "integer"}}, "propertyNames": {"maxLength": 2}})", R"({"ab": 1})"),
            1);
  // No type: what the keywords imply; nothing: any value.
  EXPECT_EQ(Judge(R"({"properties": {"a": {}}})", R"("text")"), -1);
  EXPECT_EQ(Judge(R"({})", R"("text")"), 1);
  EXPECT_EQ(Judge(R"(true)", R"([1, {"a": null}])"), 1);
}

TEST(JsonSchemaTest, ObjectsToldApartByTheirFirstPropertyShareAnAnyOf) {
  // Tool calls: the name picks the arguments' schema.
  const std::string calls = R"({"anyOf": [
      {"type": "object", "properties": {"name": {"const": "get_weather"}, "arguments": {"type": "object",
       "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": false}},
       "required": ["name", "arguments"], "additionalProperties": false},
      {"type": "object", "properties": {"name": {"const": "get_time"}, "arguments": {"type": "object",
       "properties": {"zone": {"enum": ["utc", "local"]}}, "required": ["zone"]}},
       "required": ["name", "arguments"]},
      {"type": "null"}]})";
  EXPECT_EQ(Judge(calls, R"({"name": "get_weather", "arguments": {"city": "Paris"}})"), 1);
  EXPECT_EQ(Judge(calls, R"({"name": "get_time", "arguments": {"zone": "utc"}})"), 1);
  EXPECT_EQ(Judge(calls, "null"), 1);
  EXPECT_EQ(Judge(calls, R"({"name": "get_weather", "arguments": {"zone")"), -1);  // get_time's argument
  EXPECT_EQ(Judge(calls, R"({"name": "get_time", "arguments": {"city")"), -1);
  EXPECT_EQ(Judge(calls, R"({"name": "get_t)"), 0);
  EXPECT_EQ(Judge(calls, R"({"name": "get_x)"), -1);
  EXPECT_EQ(Judge(calls, R"({"arguments")"), -1);  // the name first
  EXPECT_EQ(Judge(calls, R"({"name": "get_time"})"), -1);  // arguments are required
}

// An independent validator of the keywords the compiler reads (JSON Schema
// 2020-12's meaning, not the automaton's choices), with the property-order
// rule of the Note checked apart.
class Validator {
 public:
  explicit Validator(const JsonValue& root) : root_(root) {}
  bool Valid(const JsonValue& value, const JsonValue& schema) const {
    if (schema.is_bool()) return schema.bool_value();
    if (const JsonValue* ref = schema.Find("$ref")) return Valid(value, Resolve(ref->string_value()));
    if (const JsonValue* all = schema.Find("allOf")) {
      for (const JsonValue& s : all->items()) {
        if (!Valid(value, s)) return false;
      }
    }
    if (const JsonValue* any = schema.Find("anyOf")) {
      bool one = false;
      for (const JsonValue& s : any->items()) one = one || Valid(value, s);
      if (!one) return false;
    }
    if (const JsonValue* one_of = schema.Find("oneOf")) {
      int matches = 0;
      for (const JsonValue& s : one_of->items()) matches += Valid(value, s) ? 1 : 0;
      if (matches != 1) return false;
    }
    if (const JsonValue* type = schema.Find("type")) {
      bool any = false;
      if (type->is_string()) {
        any = HasType(value, type->string_value());
      } else {
        for (const JsonValue& t : type->items()) any = any || HasType(value, t.string_value());
      }
      if (!any) return false;
    }
    if (const JsonValue* values = schema.Find("enum")) {
      bool found = false;
      for (const JsonValue& v : values->items()) found = found || SerializeJson(v) == SerializeJson(value);
      if (!found) return false;
    }
    if (const JsonValue* c = schema.Find("const"); c != nullptr && SerializeJson(*c) != SerializeJson(value)) {
      return false;
    }
    if (value.is_number()) {
      const double v = value.number_value();
      if (const JsonValue* m = schema.Find("minimum"); m != nullptr && v < m->number_value()) return false;
      if (const JsonValue* m = schema.Find("maximum"); m != nullptr && v > m->number_value()) return false;
      if (const JsonValue* m = schema.Find("exclusiveMinimum"); m != nullptr && v <= m->number_value()) return false;
      if (const JsonValue* m = schema.Find("exclusiveMaximum"); m != nullptr && v >= m->number_value()) return false;
      if (const JsonValue* m = schema.Find("multipleOf"); m != nullptr && std::fmod(v, m->number_value()) != 0) return false;
    }
    if (value.is_string()) {
      for (const char* word : {"pattern", "format"}) {
        const JsonValue* pattern = schema.Find(word);
        if (pattern == nullptr) continue;
        const std::string text = *word == 'p' ? pattern->string_value()
                                              : *FormatPattern(pattern->string_value(), "format");
        if (!std::regex_search(value.string_value(), Regex(text))) return false;
      }
      const int64_t points = CodePoints(value.string_value());
      if (const JsonValue* m = schema.Find("minLength"); m != nullptr && points < m->number_value()) return false;
      if (const JsonValue* m = schema.Find("maxLength"); m != nullptr && points > m->number_value()) return false;
    }
    if (value.is_array()) {
      const double n = static_cast<double>(value.items().size());
      if (const JsonValue* m = schema.Find("minItems"); m != nullptr && n < m->number_value()) return false;
      if (const JsonValue* m = schema.Find("maxItems"); m != nullptr && n > m->number_value()) return false;
      if (const JsonValue* items = schema.Find("items")) {
        for (const JsonValue& item : value.items()) {
          if (!Valid(item, *items)) return false;
        }
      }
    }
    if (value.is_object()) {
      const JsonValue* properties = schema.Find("properties");
      const JsonValue* patterned = schema.Find("patternProperties");
      const JsonValue* additional = schema.Find("additionalProperties");
      const JsonValue* names = schema.Find("propertyNames");
      for (size_t i = 0; i < value.keys().size(); ++i) {
        const std::string& key = value.keys()[i];
        if (names != nullptr && !Valid(*ParseJson(JsonQuote(key), "a key"), *names)) return false;
        const JsonValue* own = properties != nullptr ? properties->Find(key) : nullptr;
        if (own != nullptr && !Valid(value.items()[i], *own)) return false;
        // Every pattern that matches the key binds its value too.
        bool matched = false;
        for (size_t k = 0; patterned != nullptr && k < patterned->keys().size(); ++k) {
          if (!std::regex_search(key, Regex(patterned->keys()[k]))) continue;
          matched = true;
          if (!Valid(value.items()[i], patterned->items()[k])) return false;
        }
        if (own == nullptr && !matched && additional != nullptr && !Valid(value.items()[i], *additional)) {
          return false;
        }
      }
      if (const JsonValue* required = schema.Find("required")) {
        for (const JsonValue& name : required->items()) {
          if (value.Find(name.string_value()) == nullptr) return false;
        }
      }
    }
    return true;
  }

 private:
  // std::regex compiles slowly: once per pattern.
  const std::regex& Regex(const std::string& pattern) const {
    auto it = regexes_.find(pattern);
    if (it == regexes_.end()) it = regexes_.emplace(pattern, std::regex(pattern, std::regex::ECMAScript)).first;
    return it->second;
  }
  static bool HasType(const JsonValue& value, const std::string& type) {
    if (type == "null") return value.is_null();
    if (type == "boolean") return value.is_bool();
    if (type == "number") return value.is_number();
    if (type == "integer") return value.is_number() && std::floor(value.number_value()) == value.number_value();
    if (type == "string") return value.is_string();
    if (type == "array") return value.is_array();
    return value.is_object();
  }
  static int64_t CodePoints(const std::string& text) {
    int64_t n = 0;
    for (char c : text) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80 ? 1 : 0;
    return n;
  }
  const JsonValue& Resolve(const std::string& ref) const {
    if (ref == "#") return root_;
    const size_t slash = ref.rfind('/');
    return *root_.Find(ref.substr(2, slash - 2))->Find(ref.substr(slash + 1));
  }
  const JsonValue& root_;
  mutable std::map<std::string, std::regex> regexes_;
};

// An output drawn from the automaton at random: each step takes a byte it
// allows, a closing one (a quote, a bracket) often, so outputs end.
std::string RandomOutput(const CompiledJsonSchema& schema, std::mt19937& random, bool* whole) {
  JsonSchemaAutomaton automaton(&schema);
  std::string out;
  std::vector<unsigned char> allowed;
  while (out.size() < 20000) {
    if (automaton.Finished() || (automaton.Complete() && random() % 4 == 0)) break;
    allowed.clear();
    for (int b = 0; b < 256; ++b) {
      JsonSchemaAutomaton next = automaton;
      if (next.Step(static_cast<unsigned char>(b))) allowed.push_back(static_cast<unsigned char>(b));
    }
    if (allowed.empty()) break;
    unsigned char pick = allowed[random() % allowed.size()];
    if (random() % 3 == 0) {
      for (unsigned char closing : {'"', '}', ']', ','}) {
        if (std::find(allowed.begin(), allowed.end(), closing) != allowed.end() && random() % 2 == 0) pick = closing;
      }
    }
    EXPECT_TRUE(automaton.Step(pick));
    out.push_back(static_cast<char>(pick));
  }
  *whole = automaton.Complete();
  return out;
}

TEST(JsonSchemaTest, EveryOutputTheAutomatonAllowsValidatesAgainstTheSchema) {
  const std::vector<std::string> schemas = {
      R"({"type": "object"})",
      R"({"type": "object", "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 8},
          "age": {"type": "integer"}, "score": {"type": "number"}, "ok": {"type": "boolean"},
          "tags": {"type": "array", "items": {"enum": ["a", "b", 3]}, "minItems": 1, "maxItems": 3},
          "note": {"anyOf": [{"type": "string", "maxLength": 4}, {"type": "null"}]}},
          "required": ["name", "tags", "note"], "additionalProperties": false})",
      R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
          "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}}, "required": ["v"]}},
          "$ref": "#/$defs/node"})",
      R"({"type": "array", "items": {"oneOf": [{"type": "object", "additionalProperties": {"type": "null"}},
          {"type": ["integer", "string"]}, {"const": [true]}]}})",
      R"({"anyOf": [{"type": "number"}, {"enum": ["x", {"k": "v"}]}]})",
      R"({"type": "array", "items": {"oneOf": [
          {"type": "object", "properties": {"kind": {"const": "circle"}, "r": {"type": "number"}},
           "required": ["kind", "r"], "additionalProperties": false},
          {"type": "object", "properties": {"kind": {"const": "square"}, "side": {"type": "integer"}, "tag": {"type": "string",
           "maxLength": 3}}, "required": ["kind"], "additionalProperties": false},
          {"type": "string", "minLength": 1}]}, "minItems": 1})",
      // Note [String patterns]: patterns and formats (the validator reads
      // them with std::regex; '.' and negated classes only under
      // repetition, which bytes and code points alike satisfy).
      R"({"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{2}-\\d{2,4}$"},
          "when": {"type": "string", "format": "date-time"}, "mail": {"type": "string", "format": "email",
          "maxLength": 12}, "free": {"type": "string", "pattern": "^x.*[^a]*$", "minLength": 3, "maxLength": 9},
          "any": {"type": "string", "pattern": "b|c\\s"}, "id": {"type": "string", "format": "uuid"}},
          "required": ["code", "when", "mail", "free", "any", "id"], "additionalProperties": false})",
      R"({"type": "array", "items": {"anyOf": [{"type": "integer", "minimum": -20, "maximum": 5000},
          {"type": "object", "properties": {"n": {"type": "integer", "exclusiveMinimum": 7.5,
          "exclusiveMaximum": 12}}, "required": ["n"]}]}})",
      R"({"type": "object", "properties": {"p": {"type": "number", "minimum": 0, "maximum": 1},
          "t": {"type": "number", "exclusiveMinimum": -273.15, "exclusiveMaximum": 0.001},
          "x": {"type": ["number", "null"], "minimum": 0.1, "maximum": 0.1000001},
          "n": {"type": "number", "maximum": -1e-5}, "k": {"type": "integer", "multipleOf": 7, "minimum": -30},
          "q": {"type": "number", "multipleOf": 25, "exclusiveMaximum": 1000}}, "required": ["p", "t", "x", "n", "k", "q"],
          "additionalProperties": false})",
      // Note [Pattern properties]: keys that the patterns match (the
      // validator searches each with std::regex), values of their schema.
      R"({"type": "object", "patternProperties": {"^[a-c][a-z]{2,5}$": {"type": "integer", "minimum": 0, "maximum": 9},
          "[0-9]$": {"type": "integer", "minimum": 0, "maximum": 9}}, "additionalProperties": false})",
      R"({"type": "array", "items": {"type": "object", "properties": {"k1": {"type": "boolean"}, "z": {"type": "null"}},
          "patternProperties": {"^k\\d$": {"type": "boolean"}, "q": true}, "required": ["k1"]}, "maxItems": 3})",
      // Note [Property names]: keys of the names' pattern and lengths.
      R"({"type": "object", "propertyNames": {"type": "string", "pattern": "^[a-z]+_?[0-9]?$", "minLength": 2,
          "maxLength": 6}, "additionalProperties": {"type": "integer", "minimum": -9, "maximum": 9}})",
      R"({"type": "object", "propertyNames": {"format": "date"}, "additionalProperties": {"type": "boolean"}})",
  };
  std::mt19937 random(20261207);
  for (const std::string& text : schemas) {
    SCOPED_TRACE(text);
    auto parsed = ParseJson(text, "schema");
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    auto schema = CompileJsonSchema(*parsed, "schema");
    ASSERT_TRUE(schema.ok()) << schema.status();
    const Validator validator(*parsed);
    int whole_outputs = 0;
    for (int i = 0; i < 300; ++i) {
      bool whole = false;
      const std::string out = RandomOutput(**schema, random, &whole);
      if (!whole) continue;  // the length cap (long strings) or the depth bound of a recursive schema
      auto value = ParseJson(out, "output");
      // A key given twice in an object of any keys: RFC 8259 allows it (the
      // Note), the strict reader does not.
      if (!value.ok() && absl::StrContains(value.status().message(), "duplicate key")) continue;
      ++whole_outputs;
      ASSERT_TRUE(value.ok()) << out << ": " << value.status();
      ASSERT_TRUE(validator.Valid(*value, *parsed)) << out;
    }
    EXPECT_GT(whole_outputs, 240) << text;
  }
}

// The allowed-token cache is keyed by the automaton's state (Key()): a key
// that left out something the state's future depends on would hand one
// state another's tokens. Along random generations through a shared cache,
// every mask equals the mask of a fresh vocabulary (no cache) at the same
// text.
TEST(JsonSchemaTest, CachedMasksEqualFreshWalksAlongRandomGenerations) {
  std::mt19937 random(7);
  // Tokens of 1-4 bytes from JSON's alphabet and two-byte characters.
  const std::vector<std::string> alphabet = {"{", "}", "[", "]", "\"", ":", ",", " ", "a", "b", "1", "0", "-", ".",
                                             "e", "\\", "u", "d", "8", "n", "null", "true", "\xC3\xA9"};
  std::vector<std::string> tokens(alphabet.begin(), alphabet.end());
  while (tokens.size() < 400) {
    std::string token;
    for (int n = 1 + static_cast<int>(random() % 4); n > 0; --n) token += alphabet[random() % alphabet.size()];
    tokens.push_back(token);
  }
  const std::vector<std::string> schemas = {
      R"({"type": "array", "items": {"anyOf": [{"type": "string", "minLength": 2,
      "maxLength": 5}, {"type": "object", "properties": {"ab": {"type": "number"}, "b": {"enum": ["a", 10, 1]}},
      "required": ["b"]}, {"type": "null"}]}, "minItems": 2, "maxItems": 20})",
      // Note [String patterns]: a pattern's state and the code point being
      // read are in the key.
      R"({"type": "array", "items": {"anyOf": [{"type": "string", "pattern": "^(ab|1)+0?$", "maxLength": 7},
      {"type": "object", "properties": {"b": {"type": "string", "pattern": "^.(b|\\d)+$", "minLength": 2,
      "maxLength": 4}}, "required": ["b"]}, {"type": "null"}]}, "maxItems": 20})",
      // Note [Number bounds]: the number's comparisons with its bounds are in the key.
      R"({"type": "array", "items": {"type": "number", "minimum": -1.5, "maximum": 10.25}, "maxItems": 20})",
      R"({"type": "array", "items": {"type": "integer", "multipleOf": 3, "maximum": 100}, "maxItems": 20})",
      // Note [Pattern properties]: a key's pattern state, as a value's.
      R"({"type": "array", "items": {"patternProperties": {"^(ab|1)+0?$": {"type": "string", "pattern": "^a?b$"}}},
          "maxItems": 6})"};
  auto shared = std::make_shared<const TokenVocabulary>(tokens);
  const int64_t vocab = static_cast<int64_t>(tokens.size());
  int compared = 0;
  for (int run = 0; run < 96; ++run) {
    const std::string& schema = schemas[static_cast<size_t>(run % 4)];
    auto state = StartOutputConstraint(Schema(schema), shared, "t");
    ASSERT_TRUE(state.ok()) << state.status();
    std::vector<int64_t> accepted;
    for (int step = 0; step < 100 && !(*state)->Finished(); ++step) {
      torch::Tensor cached = torch::zeros({vocab});
      if (!(*state)->Mask(cached, {})) break;
      auto fresh_state = StartOutputConstraint(Schema(schema), std::make_shared<const TokenVocabulary>(tokens), "t");
      ASSERT_TRUE(fresh_state.ok());
      for (int64_t token : accepted) (*fresh_state)->Accept(token);
      torch::Tensor fresh = torch::zeros({vocab});
      (*fresh_state)->Mask(fresh, {});
      ASSERT_TRUE(torch::equal(torch::isinf(cached), torch::isinf(fresh))) << "run " << run << " step " << step;
      ++compared;
      const torch::Tensor allowed = torch::nonzero(torch::isinf(cached).logical_not()).flatten();
      const int64_t token = allowed[static_cast<int64_t>(random() % static_cast<uint32_t>(allowed.size(0)))].item<int64_t>();
      (*state)->Accept(token);
      accepted.push_back(token);
    }
  }
  EXPECT_GT(compared, 600);
}

// An array's items share their masks up to the horizon, never past it: a
// state near maxItems must not take a set cached far from it.
TEST(JsonSchemaTest, CachedMasksOfAnArrayTellTheRoomLeftApart) {
  const std::vector<std::string> tokens = {"[", "1", ",1", ",1,1", "]"};
  auto shared = std::make_shared<const TokenVocabulary>(tokens);
  auto allowed_after = [&](const std::vector<int64_t>& text, std::shared_ptr<const TokenVocabulary> vocabulary) {
    auto state = StartOutputConstraint(Schema(R"({"type": "array", "items": {"type": "integer"}, "maxItems": 5})"),
                                       vocabulary, "t");
    EXPECT_TRUE(state.ok()) << state.status();
    for (int64_t token : text) (*state)->Accept(token);
    torch::Tensor logits = torch::zeros({5});
    (*state)->Mask(logits, {});
    return torch::isinf(logits).logical_not();
  };
  // "[1": four more items fit; "[1,1,1,1": one more.
  EXPECT_TRUE(allowed_after({0, 1}, shared)[3].item<bool>());
  EXPECT_FALSE(allowed_after({0, 1, 2, 2, 2}, shared)[3].item<bool>());
  EXPECT_TRUE(allowed_after({0, 1, 2, 2, 2}, shared)[2].item<bool>());
}

// The validator is not vacuous: it refuses what the schemas refuse.
TEST(JsonSchemaTest, TheValidatorRefusesInvalidValues) {
  auto schema = ParseJson(R"({"type": "object", "properties": {"a": {"type": "integer", "maxLength": 1},
      "b": {"oneOf": [{"type": "string", "minLength": 2}, {"type": "null"}]}}, "required": ["b"]})", "s");
  ASSERT_TRUE(schema.ok());
  const Validator validator(*schema);
  for (const std::string bad : {R"({"a": 1})", R"({"a": 1.5, "b": null})", R"({"b": "x"})", R"({"b": 1})", "[]"}) {
    EXPECT_FALSE(validator.Valid(*ParseJson(bad, "v"), *schema)) << bad;
  }
  EXPECT_TRUE(validator.Valid(*ParseJson(R"({"a": 1, "b": "xy"})", "v"), *schema));
  auto strings = ParseJson(R"({"properties": {"c": {"pattern": "^a"}, "d": {"format": "date"}}})", "s");
  ASSERT_TRUE(strings.ok());
  EXPECT_FALSE(validator.Valid(*ParseJson(R"({"c": "ba"})", "v"), *strings));
  EXPECT_FALSE(validator.Valid(*ParseJson(R"({"d": "2026-02-30"})", "v"), *strings));
  EXPECT_TRUE(validator.Valid(*ParseJson(R"({"c": "ab", "d": "2026-02-28"})", "v"), *strings));
}

// Note [String patterns]: a pattern reads a string's code points, its JSON
// escapes undone, and is kept beside its lengths as characters come.
TEST(JsonSchemaTest, PatternsHoldTheDecodedStringAsItComes) {
  const std::string date = R"({"type": "string", "format": "date"})";
  EXPECT_EQ(Judge(date, R"("2026-12-07")"), 1);
  EXPECT_EQ(Judge(date, R"("2026-1)"), 0);
  EXPECT_EQ(Judge(date, R"("2026-13)"), -1) << "a month past 12, refused as it comes";
  EXPECT_EQ(Judge(date, R"("2026-12-07 )"), -1);
  EXPECT_EQ(Judge(date, R"("2026-12-0")"), -1) << "the closing quote only on a match";
  // Escapes are undone before the pattern reads them.
  const std::string lines = R"({"type": "string", "pattern": "^a\\nb\\u0041$"})";
  EXPECT_EQ(Judge(lines, R"("a\nbA")"), 1);
  EXPECT_EQ(Judge(lines, R"("a\u000ab\u0041")"), 1);
  EXPECT_EQ(Judge(lines, R"("a\u000Ab\u0042)"), -1);
  EXPECT_EQ(Judge(lines, R"("a\t)"), -1);
  // One code point, however it is written; line separators are not '.'.
  const std::string one = R"({"type": "string", "pattern": "^.$"})";
  EXPECT_EQ(Judge(one, "\"\xC3\xA9\""), 1);
  EXPECT_EQ(Judge(one, R"("\u00e9")"), 1);
  EXPECT_EQ(Judge(one, R"("\ud83d\ude00")"), 1);
  EXPECT_EQ(Judge(one, "\"\xE2\x80\xA8"), -1);
  EXPECT_EQ(Judge(one, R"("\u2028)"), -1);
  EXPECT_EQ(Judge(one, R"("ab)"), -1);
  // Lengths beside a pattern: a character that leaves the pattern no room is refused.
  const std::string code = R"({"type": "string", "pattern": "^[a-z]+[0-9]{2}$", "maxLength": 5})";
  EXPECT_EQ(Judge(code, R"("abc12")"), 1);
  EXPECT_EQ(Judge(code, R"("abcd)"), -1) << "four letters leave no room for the two digits";
  const std::string longer = R"({"type": "string", "pattern": "^a*b?$", "minLength": 3})";
  EXPECT_EQ(Judge(longer, R"("ab)"), -1) << "after b the match ends short of 3";
  EXPECT_EQ(Judge(longer, R"("aab")"), 1);
  // Keys of an object without properties are not held to a pattern beside them.
  EXPECT_EQ(Judge(R"({"type": ["object", "string"], "pattern": "^z$", "additionalProperties": {"type": "null"}})",
                  R"({"key": null})"),
            1);
}

}  // namespace
}  // namespace dslaunch::runtime
