// The values a chat template computes with (Note [Chat templates in Jinja],
// jinja_template.h): Python's as Jinja sees them. Lists, dicts and
// namespaces are shared, as Python's objects are: a namespace set inside a
// loop is seen after it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/tokenizer/json_value.h"

namespace dslaunch::runtime {

class JinjaValue {
 public:
  enum class Type { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kMacro };
  using List = std::vector<JinjaValue>;
  using Dict = std::vector<std::pair<std::string, JinjaValue>>;  // in insertion order

  JinjaValue() = default;  // undefined
  static JinjaValue None();
  static JinjaValue Bool(bool value);
  static JinjaValue Int(int64_t value);
  static JinjaValue Float(double value);
  static JinjaValue String(std::string value);
  static JinjaValue MakeList(List items = {});
  static JinjaValue MakeDict(Dict items = {}, bool is_namespace = false);
  // A call block's caller read as a value (it is called by name, Note [Chat
  // templates in Jinja]): defined, true, printed as jinja2 prints it.
  static JinjaValue Macro();

  Type type() const { return type_; }
  bool is_undefined() const { return type_ == Type::kUndefined; }
  bool is_none() const { return type_ == Type::kNone; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_number() const { return type_ == Type::kInt || type_ == Type::kFloat || type_ == Type::kBool; }
  bool is_list() const { return type_ == Type::kList; }
  bool is_dict() const { return type_ == Type::kDict; }
  bool is_namespace() const { return type_ == Type::kDict && namespace_; }

  bool bool_value() const { return bool_; }
  int64_t int_value() const { return type_ == Type::kBool ? (bool_ ? 1 : 0) : int_; }
  double number() const { return type_ == Type::kFloat ? float_ : static_cast<double>(int_value()); }
  const std::string& string_value() const { return string_; }
  List& list() const { return *list_; }
  Dict& dict() const { return *dict_; }

  // A dict's value for `key`, or undefined.
  JinjaValue Get(const std::string& key) const;
  void Set(const std::string& key, JinjaValue value) const;  // dicts and namespaces

  // Python's truth: empty strings, lists and dicts, 0, none and undefined are false.
  bool Truthy() const;
  // str(value) as Python prints it ('' for undefined).
  std::string Str() const;
  // repr(value) (strings quoted): how a list prints its items.
  std::string Repr() const;
  // json.dumps(value, ensure_ascii=False) with `indent` (< 0: one line).
  absl::StatusOr<std::string> Json(int indent, int depth = 0) const;
  // ==, as Python compares (1 == 1.0 == True).
  bool Equals(const JinjaValue& other) const;
  // The type as an error names it ("a string", "a list", "undefined").
  const char* TypeName() const;

 private:
  Type type_ = Type::kUndefined;
  bool bool_ = false;
  int64_t int_ = 0;
  double float_ = 0;
  std::string string_;
  std::shared_ptr<List> list_;
  std::shared_ptr<Dict> dict_;
  bool namespace_ = false;
};

// A JSON value as Python's json.loads gives it (integral numbers as ints).
JinjaValue JinjaValueFromJson(const JsonValue& json);

}  // namespace dslaunch::runtime
