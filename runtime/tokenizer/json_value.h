// A strict JSON reader (RFC 8259) for tokenizer files: tokenizer.json and
// tokenizer_config.json.
//
// Note [A JSON reader for tokenizer.json]
// The project reads its other JSON (safetensors headers, config.json) with
// yaml-cpp, which is not enough here (measured on the 7 MB Llama-3
// tokenizer.json of tests/tokenizer/: 128K vocabulary entries, 280K merges):
//  - speed and memory: yaml-cpp's YAML::Load took 2.6 s of CPU and 550 MB;
//    dstokenize reads, checks and builds the whole tokenizer with this reader
//    in about 1 s of CPU and 150 MB;
//  - escapes: a tokenizer.json saved by Python's json (ensure_ascii) writes
//    characters outside the BMP (emoji) as surrogate pairs \uD83E\uDD99;
//    yaml-cpp throws on them ("invalid unicode: 55358");
//  - strictness: a duplicate key, a lone surrogate, a raw control character,
//    invalid UTF-8 or text after the value is an error here (serde_json,
//    which Hugging Face's tokenizers uses, refuses the same), never a silent
//    pick.
// Errors read "<source>:<line>:<column>: <problem>".
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dslaunch::runtime {

// An immutable JSON value. Objects keep their members in file order.
class JsonValue {
 public:
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };

  JsonValue() = default;  // null

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_number() const { return type_ == Type::kNumber; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_object() const { return type_ == Type::kObject; }

  // REQUIRES: the matching type.
  bool bool_value() const { return number_ != 0; }
  double number_value() const { return number_; }
  const std::string& string_value() const { return text_; }
  const std::vector<JsonValue>& items() const { return items_; }     // array elements or object values
  const std::vector<std::string>& keys() const { return keys_; }     // object keys, parallel to items()

  // The member named `key` of an object, or nullptr (also for non-objects).
  const JsonValue* Find(absl::string_view key) const;

  // "null", "a bool", "a number", "a string", "an array", "an object".
  static const char* TypeName(Type type);

 private:
  friend class JsonParser;

  Type type_ = Type::kNull;
  double number_ = 0;
  std::string text_;
  std::vector<JsonValue> items_;
  std::vector<std::string> keys_;
};

// Parses `text` whole. `source` names the input in errors (a file path).
// Nesting deeper than 256 levels is refused.
absl::StatusOr<JsonValue> ParseJson(absl::string_view text, absl::string_view source);
// The same, but a key an object repeats is not an error: its last value
// stands in its first place, as Python's json.loads and JavaScript's
// JSON.parse read it (RFC 8259 leaves it to the reader). For text a model
// wrote, such as a tool call's arguments.
absl::StatusOr<JsonValue> ParseJsonLastKeyWins(absl::string_view text, absl::string_view source);

// `value` as compact JSON text: no whitespace, members in their order,
// strings as JsonQuote writes them, integers below 2^53 in plain digits
// (100000), other numbers in their shortest form that reads back to the
// same double (0.1, 1e+21). ParseJson of the text gives back an equal value.
std::string SerializeJson(const JsonValue& value);

// Appends the UTF-8 encoding of `code_point` (REQUIRES: a Unicode scalar value).
void AppendUtf8(uint32_t code_point, std::string* out);

}  // namespace dslaunch::runtime
