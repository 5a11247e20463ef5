#include "runtime/serve/jinja_value.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/json_quote.h"

namespace dslaunch::runtime {

JinjaValue JinjaValue::None() {
  JinjaValue v;
  v.type_ = Type::kNone;
  return v;
}

JinjaValue JinjaValue::Bool(bool value) {
  JinjaValue v;
  v.type_ = Type::kBool;
  v.bool_ = value;
  return v;
}

JinjaValue JinjaValue::Int(int64_t value) {
  JinjaValue v;
  v.type_ = Type::kInt;
  v.int_ = value;
  return v;
}

JinjaValue JinjaValue::Float(double value) {
  JinjaValue v;
  v.type_ = Type::kFloat;
  v.float_ = value;
  return v;
}

JinjaValue JinjaValue::String(std::string value) {
  JinjaValue v;
  v.type_ = Type::kString;
  v.string_ = std::move(value);
  return v;
}

JinjaValue JinjaValue::MakeList(List items) {
  JinjaValue v;
  v.type_ = Type::kList;
  v.list_ = std::make_shared<List>(std::move(items));
  return v;
}

JinjaValue JinjaValue::MakeDict(Dict items, bool is_namespace) {
  JinjaValue v;
  v.type_ = Type::kDict;
  v.dict_ = std::make_shared<Dict>(std::move(items));
  v.namespace_ = is_namespace;
  return v;
}

JinjaValue JinjaValue::Get(const std::string& key) const {
  if (type_ != Type::kDict) return JinjaValue();
  for (const auto& [k, value] : *dict_) {
    if (k == key) return value;
  }
  return JinjaValue();
}

void JinjaValue::Set(const std::string& key, JinjaValue value) const {
  for (auto& [k, existing] : *dict_) {
    if (k == key) {
      existing = std::move(value);
      return;
    }
  }
  dict_->emplace_back(key, std::move(value));
}

JinjaValue JinjaValue::Macro() {
  JinjaValue v;
  v.type_ = Type::kMacro;
  return v;
}

bool JinjaValue::Truthy() const {
  switch (type_) {
    case Type::kUndefined:
    case Type::kNone:
      return false;
    case Type::kBool:
      return bool_;
    case Type::kInt:
      return int_ != 0;
    case Type::kFloat:
      return float_ != 0;
    case Type::kString:
      return !string_.empty();
    case Type::kList:
      return !list_->empty();
    case Type::kDict:
      return namespace_ || !dict_->empty();
    case Type::kMacro:
      return true;
  }
  return false;
}

namespace {

std::string PythonFloat(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  if (value == std::floor(value) && std::fabs(value) < 1e16) return absl::StrFormat("%.1f", value);
  std::string text = absl::StrFormat("%.17g", value);
  // The shortest that reads back, as Python's repr.
  for (int digits = 1; digits <= 17; ++digits) {
    std::string shorter = absl::StrFormat("%.*g", digits, value);
    if (std::stod(shorter) == value) return shorter;
  }
  return text;
}

std::string PythonStringRepr(const std::string& text) {
  const char quote = text.find('\'') != std::string::npos && text.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, quote);
  for (char c : text) {
    if (c == quote || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else {
      out += c;
    }
  }
  out += quote;
  return out;
}

}  // namespace

std::string JinjaValue::Str() const {
  switch (type_) {
    case Type::kUndefined:
      return "";
    case Type::kNone:
      return "None";
    case Type::kBool:
      return bool_ ? "True" : "False";
    case Type::kInt:
      return absl::StrCat(int_);
    case Type::kFloat:
      return PythonFloat(float_);
    case Type::kString:
      return string_;
    case Type::kList:
    case Type::kDict:
      return Repr();
    case Type::kMacro:
      return "<Macro anonymous>";
  }
  return "";
}

std::string JinjaValue::Repr() const {
  if (type_ == Type::kString) return PythonStringRepr(string_);
  if (type_ == Type::kList) {
    std::string out = "[";
    for (size_t i = 0; i < list_->size(); ++i) absl::StrAppend(&out, i ? ", " : "", (*list_)[i].Repr());
    return out + "]";
  }
  if (type_ == Type::kDict) {
    if (namespace_) return "<Namespace>";
    std::string out = "{";
    for (size_t i = 0; i < dict_->size(); ++i) {
      absl::StrAppend(&out, i ? ", " : "", PythonStringRepr((*dict_)[i].first), ": ", (*dict_)[i].second.Repr());
    }
    return out + "}";
  }
  return Str();
}

absl::StatusOr<std::string> JinjaValue::Json(int indent, int depth) const {
  const std::string inner = indent < 0 ? "" : "\n" + std::string(static_cast<size_t>(indent * (depth + 1)), ' ');
  const std::string outer = indent < 0 ? "" : "\n" + std::string(static_cast<size_t>(indent * depth), ' ');
  const char* comma = indent < 0 ? ", " : ",";
  switch (type_) {
    case Type::kUndefined:
      return absl::InvalidArgumentError("tojson: an undefined value");
    case Type::kNone:
      return std::string("null");
    case Type::kBool:
      return std::string(bool_ ? "true" : "false");
    case Type::kInt:
      return absl::StrCat(int_);
    case Type::kFloat:
      return PythonFloat(float_);
    case Type::kString:
      return JsonQuote(string_);
    case Type::kList: {
      if (list_->empty()) return std::string("[]");
      std::string out = "[";
      for (size_t i = 0; i < list_->size(); ++i) {
        auto item = (*list_)[i].Json(indent, depth + 1);
        if (!item.ok()) return item.status();
        absl::StrAppend(&out, i ? comma : "", inner, *item);
      }
      return absl::StrCat(out, outer, "]");
    }
    case Type::kDict: {
      if (dict_->empty()) return std::string("{}");
      std::string out = "{";
      for (size_t i = 0; i < dict_->size(); ++i) {
        auto item = (*dict_)[i].second.Json(indent, depth + 1);
        if (!item.ok()) return item.status();
        absl::StrAppend(&out, i ? comma : "", inner, JsonQuote((*dict_)[i].first), ": ", *item);
      }
      return absl::StrCat(out, outer, "}");
    }
    case Type::kMacro:
      return absl::InvalidArgumentError("tojson: a macro");
  }
  return std::string("null");
}

bool JinjaValue::Equals(const JinjaValue& other) const {
  if (is_number() && other.is_number()) {
    if (type_ == Type::kFloat || other.type_ == Type::kFloat) return number() == other.number();
    return int_value() == other.int_value();
  }
  if (type_ != other.type_) return false;
  switch (type_) {
    case Type::kUndefined:
    case Type::kNone:
      return true;
    case Type::kString:
      return string_ == other.string_;
    case Type::kList: {
      if (list_->size() != other.list_->size()) return false;
      for (size_t i = 0; i < list_->size(); ++i) {
        if (!(*list_)[i].Equals((*other.list_)[i])) return false;
      }
      return true;
    }
    case Type::kDict:
      if (namespace_ || other.namespace_) return dict_ == other.dict_;
      if (dict_->size() != other.dict_->size()) return false;
      for (const auto& [key, value] : *dict_) {
        if (!value.Equals(other.Get(key))) return false;
      }
      return true;
    default:
      return false;
  }
}

const char* JinjaValue::TypeName() const {
  switch (type_) {
    case Type::kUndefined:
      return "undefined";
    case Type::kNone:
      return "none";
    case Type::kBool:
      return "a boolean";
    case Type::kInt:
      return "an integer";
    case Type::kFloat:
      return "a float";
    case Type::kString:
      return "a string";
    case Type::kList:
      return "a list";
    case Type::kDict:
      return namespace_ ? "a namespace" : "a dict";
    case Type::kMacro:
      return "a macro";
  }
  return "?";
}

JinjaValue JinjaValueFromJson(const JsonValue& json) {
  switch (json.type()) {
    case JsonValue::Type::kNull:
      return JinjaValue::None();
    case JsonValue::Type::kBool:
      return JinjaValue::Bool(json.bool_value());
    case JsonValue::Type::kNumber: {
      const double v = json.number_value();
      if (v == std::floor(v) && std::fabs(v) < 9e15) return JinjaValue::Int(static_cast<int64_t>(v));
      return JinjaValue::Float(v);
    }
    case JsonValue::Type::kString:
      return JinjaValue::String(json.string_value());
    case JsonValue::Type::kArray: {
      JinjaValue::List items;
      for (const JsonValue& item : json.items()) items.push_back(JinjaValueFromJson(item));
      return JinjaValue::MakeList(std::move(items));
    }
    case JsonValue::Type::kObject: {
      JinjaValue::Dict fields;
      for (size_t i = 0; i < json.keys().size(); ++i) fields.emplace_back(json.keys()[i], JinjaValueFromJson(json.items()[i]));
      return JinjaValue::MakeDict(std::move(fields));
    }
  }
  return JinjaValue::None();
}

}  // namespace dslaunch::runtime
