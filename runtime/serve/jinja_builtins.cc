// The filters, tests and global functions a chat template may call
// (Note [Chat templates in Jinja], jinja_template.h): Python's and jinja2's
// semantics, anything else refused by name.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <ctime>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "runtime/serve/jinja_renderer.h"

namespace dslaunch::runtime {
namespace jinja_syntax {

absl::StatusOr<bool> Renderer::Test(const std::string& name, const JinjaValue& v, const std::vector<JinjaValue>& args,
                                    int line) {
  using T = JinjaValue::Type;
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.type() == T::kInt || v.type() == T::kFloat;
  if (name == "integer") return v.type() == T::kInt;
  if (name == "float") return v.type() == T::kFloat;
  if (name == "boolean") return v.type() == T::kBool;
  if (name == "true") return v.type() == T::kBool && v.bool_value();
  if (name == "false") return v.type() == T::kBool && !v.bool_value();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") return v.is_list() || v.is_dict() || v.is_string();
  if (name == "sequence") return v.is_list() || v.is_dict() || v.is_string();
  if (name == "even" || name == "odd") {
    if (v.type() != T::kInt) return Error(line, absl::StrCat("'is ", name, "' of ", v.TypeName()));
    return (v.int_value() % 2 == 0) == (name == "even");
  }
  if (args.size() != 1) return Error(line, absl::StrCat("the test '", name, "' takes one argument"));
  if (name == "divisibleby") {
    if (v.type() != T::kInt || args[0].type() != T::kInt || args[0].int_value() == 0) {
      return Error(line, "'is divisibleby' needs integers");
    }
    return v.int_value() % args[0].int_value() == 0;
  }
  if (name == "in") return CompareValues("in", v, args[0], line);
  const bool equal = v.Equals(args[0]);
  return name == "ne" || name == "!=" ? !equal : equal;
}


std::string StripChars(const std::string& text, const std::string& chars, bool left, bool right) {
  auto strip = [&chars](char c) {
    return chars.empty() ? std::isspace(static_cast<unsigned char>(c)) != 0 : chars.find(c) != std::string::npos;
  };
  size_t begin = 0, end = text.size();
  while (left && begin < end && strip(text[begin])) ++begin;
  while (right && end > begin && strip(text[end - 1])) --end;
  return text.substr(begin, end - begin);
}

std::string Title(const std::string& text) {
  std::string out = text;
  bool start = true;
  for (char& c : out) {
    if (std::isalpha(static_cast<unsigned char>(c))) {
      c = start ? absl::ascii_toupper(c) : absl::ascii_tolower(c);
      start = false;
    } else {
      start = true;
    }
  }
  return out;
}

std::string Capitalize(const std::string& text) {
  std::string out = absl::AsciiStrToLower(text);
  if (!out.empty()) out[0] = absl::ascii_toupper(out[0]);
  return out;
}

std::string ReplaceAll(const std::string& text, const std::string& from, const std::string& to) {
  if (from.empty()) return text;
  std::string out;
  size_t at = 0;
  for (size_t found; (found = text.find(from, at)) != std::string::npos; at = found + from.size()) {
    out += text.substr(at, found - at);
    out += to;
  }
  return out + text.substr(at);
}

absl::StatusOr<JinjaValue> Renderer::Call(const Expr& e, int line) {
  // A call block's frame is for this call only, not for calls among its arguments.
  const CallerFrame* block = std::exchange(pending_caller_, nullptr);
  std::vector<JinjaValue> args;
  for (size_t i = 1; i < e.args.size(); ++i) {
    auto arg = Eval(*e.args[i], line);
    if (!arg.ok()) return arg;
    args.push_back(*arg);
  }
  JinjaValue::Dict kwargs;
  for (const auto& [key, expr] : e.kwargs) {
    auto value = Eval(*expr, line);
    if (!value.ok()) return value;
    kwargs.emplace_back(key, *value);
  }
  auto string_arg = [&](size_t i, const char* what) -> absl::StatusOr<std::string> {
    if (i >= args.size() || !args[i].is_string()) return Error(line, absl::StrCat(what, " takes a string"));
    return args[i].string_value();
  };
  const Expr& callee = *e.args[0];
  if (callee.kind == Expr::kName) {
    const std::string& name = callee.name;
    if (name == "caller" && caller_ != nullptr && block == nullptr) return CallCaller(*caller_, args, kwargs, line);
    if (name == "loop" && block == nullptr && !loops_.empty() && Lookup("loop").is_dict()) {
      const LoopFrame frame = loops_.back();
      if (!frame.node->recursive) return Error(line, "loop(...) is called in a loop that is not recursive");
      if (args.size() != 1 || !kwargs.empty()) return Error(line, "loop(...) takes the items to loop over");
      std::string text;
      auto flow = RunLoop(*frame.node, args[0], frame.depth + 1, text);
      if (!flow.ok()) return flow.status();
      return JinjaValue::String(std::move(text));
    }
    if (auto macro = macros_.find(name); macro != macros_.end()) {
      return CallMacro(*macro->second, args, kwargs, line, block);
    }
    if (block != nullptr) return Error(line, absl::StrCat("a call block calls a macro; '", name, "' is not one"));
    if (name == "raise_exception") {
      return Error(line, absl::StrCat("the template raised: ", args.empty() ? std::string() : args[0].Str()));
    }
    if (name == "namespace" || name == "dict") return JinjaValue::MakeDict(kwargs, name == "namespace");
    if (name == "range") {
      int64_t start = 0, stop = 0, step = 1;
      for (const JinjaValue& arg : args) {
        if (arg.type() != JinjaValue::Type::kInt) return Error(line, "range takes integers");
      }
      if (args.size() == 1) {
        stop = args[0].int_value();
      } else if (args.size() >= 2) {
        start = args[0].int_value();
        stop = args[1].int_value();
        if (args.size() == 3) step = args[2].int_value();
      }
      if (step == 0 || args.empty() || args.size() > 3) return Error(line, "range takes 1 to 3 integers, a step not 0");
      const double items = (static_cast<double>(stop) - static_cast<double>(start)) / static_cast<double>(step);
      if (items > static_cast<double>(kMaxRange)) return Error(line, absl::StrCat("range of over ", kMaxRange, " items"));
      JinjaValue::List out;
      for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
        out.push_back(JinjaValue::Int(i));
        if (__builtin_add_overflow(i, step, &i)) break;
      }
      return JinjaValue::MakeList(std::move(out));
    }
    if (name == "strftime_now") {
      auto format = string_arg(0, "strftime_now");
      if (!format.ok()) return format.status();
      const std::time_t now = std::time(nullptr);
      std::tm local{};
      localtime_r(&now, &local);
      char buffer[256];
      const size_t length = std::strftime(buffer, sizeof(buffer), format->c_str(), &local);
      return JinjaValue::String(std::string(buffer, length));
    }
    return Error(line, absl::StrCat("'", name, "' is not a function dsserve's chat template renderer has"));
  }
  if (callee.kind != Expr::kAttribute) return Error(line, "only functions and methods can be called");
  auto owner = Eval(*callee.args[0], line);
  if (!owner.ok()) return owner;
  const std::string& method = callee.name;
  if (owner->is_dict()) {
    const JinjaValue field = owner->Get(method);
    if (!field.is_undefined()) return Error(line, absl::StrCat("'", method, "' is not callable"));
    if (method == "items" || method == "keys" || method == "values") {
      JinjaValue::List out;
      for (const auto& [key, value] : owner->dict()) {
        if (method == "items") {
          out.push_back(JinjaValue::MakeList({JinjaValue::String(key), value}));
        } else {
          out.push_back(method == "keys" ? JinjaValue::String(key) : value);
        }
      }
      return JinjaValue::MakeList(std::move(out));
    }
    if (method == "get") {
      auto key = string_arg(0, "get");
      if (!key.ok()) return key.status();
      const JinjaValue found = owner->Get(*key);
      return found.is_undefined() ? (args.size() > 1 ? args[1] : JinjaValue::None()) : found;
    }
  } else if (owner->is_string()) {
    const std::string& text = owner->string_value();
    const std::string chars = !args.empty() && args[0].is_string() ? args[0].string_value() : "";
    if (method == "strip") return JinjaValue::String(StripChars(text, chars, true, true));
    if (method == "lstrip") return JinjaValue::String(StripChars(text, chars, true, false));
    if (method == "rstrip") return JinjaValue::String(StripChars(text, chars, false, true));
    if (method == "upper") return JinjaValue::String(absl::AsciiStrToUpper(text));
    if (method == "lower") return JinjaValue::String(absl::AsciiStrToLower(text));
    if (method == "title") return JinjaValue::String(Title(text));
    if (method == "capitalize") return JinjaValue::String(Capitalize(text));
    if (method == "startswith" || method == "endswith") {
      auto affix = string_arg(0, method.c_str());
      if (!affix.ok()) return affix.status();
      return JinjaValue::Bool(method == "startswith" ? absl::StartsWith(text, *affix) : absl::EndsWith(text, *affix));
    }
    if (method == "split") {
      JinjaValue::List out;
      if (args.empty() || args[0].is_none()) {
        for (absl::string_view part : absl::StrSplit(text, absl::ByAnyChar(" \t\n\r\f\v"), absl::SkipEmpty())) {
          out.push_back(JinjaValue::String(std::string(part)));
        }
      } else {
        auto separator = string_arg(0, "split");
        if (!separator.ok()) return separator.status();
        if (separator->empty()) return Error(line, "split: an empty separator");
        for (absl::string_view part : absl::StrSplit(text, *separator)) out.push_back(JinjaValue::String(std::string(part)));
      }
      return JinjaValue::MakeList(std::move(out));
    }
    if (method == "replace") {
      auto from = string_arg(0, "replace");
      auto to = string_arg(1, "replace");
      if (!from.ok() || !to.ok()) return Error(line, "replace takes two strings");
      return JinjaValue::String(ReplaceAll(text, *from, *to));
    }
  } else if (owner->is_list()) {
    if (method == "append" && args.size() == 1) {
      if (owner->list().size() >= static_cast<size_t>(kMaxRange)) {
        return Error(line, absl::StrCat("a list of over ", kMaxRange, " items"));
      }
      owner->list().push_back(args[0]);
      return JinjaValue::None();
    }
  } else if (owner->is_undefined()) {
    return Error(line, absl::StrCat("an undefined value has no method '", method, "'"));
  }
  return Error(line, absl::StrCat(owner->TypeName(), " has no method '", method,
                                  "' in dsserve's chat template renderer"));
}

absl::StatusOr<JinjaValue> Renderer::Filter(const Expr& e, int line) {
  auto subject = Eval(*e.args[0], line);
  if (!subject.ok()) return subject;
  const JinjaValue& v = *subject;
  std::vector<JinjaValue> args;
  for (size_t i = 1; i < e.args.size(); ++i) {
    auto arg = Eval(*e.args[i], line);
    if (!arg.ok()) return arg;
    args.push_back(*arg);
  }
  auto kwarg = [&](const char* key) -> std::optional<JinjaValue> {
    for (const auto& [name, expr] : e.kwargs) {
      if (name != key) continue;
      auto value = Eval(*expr, line);
      if (value.ok()) return *value;
    }
    return std::nullopt;
  };
  const std::string& name = e.name;
  if (name == "default" || name == "d") {
    const bool boolean = args.size() > 1 && args[1].Truthy();
    const bool use_default = boolean ? !v.Truthy() : v.is_undefined();
    return use_default ? (args.empty() ? JinjaValue::String("") : args[0]) : v;
  }
  if (name == "string") return JinjaValue::String(v.Str());
  if (name == "tojson") {
    std::optional<JinjaValue> indent = kwarg("indent");
    if (!indent && !args.empty()) indent = args[0];
    auto json = v.Json(indent && indent->type() == JinjaValue::Type::kInt ? static_cast<int>(indent->int_value()) : -1);
    if (!json.ok()) return Error(line, std::string(json.status().message()));
    return JinjaValue::String(*json);
  }
  if (name == "length" || name == "count") {
    if (v.is_string()) {
      auto characters = Items(v, line);
      return JinjaValue::Int(static_cast<int64_t>(characters->size()));
    }
    if (v.is_list()) return JinjaValue::Int(static_cast<int64_t>(v.list().size()));
    if (v.is_dict()) return JinjaValue::Int(static_cast<int64_t>(v.dict().size()));
    if (v.is_undefined()) return JinjaValue::Int(0);
    return Error(line, absl::StrCat("length of ", v.TypeName()));
  }
  if (name == "int") {
    if (v.type() == JinjaValue::Type::kFloat && !(std::fabs(v.number()) < 9.2e18)) {
      return Error(line, "int of a float outside a 64-bit integer's range");
    }
    if (v.is_number()) return JinjaValue::Int(v.type() == JinjaValue::Type::kFloat ? static_cast<int64_t>(v.number())
                                                                                   : v.int_value());
    if (v.is_string()) {
      try {
        return JinjaValue::Int(std::stoll(v.string_value()));
      } catch (...) {
        return args.empty() ? JinjaValue::Int(0) : args[0];
      }
    }
    return JinjaValue::Int(0);
  }
  if (name == "float") {
    if (v.is_number()) return JinjaValue::Float(v.number());
    if (v.is_string()) {
      try {
        return JinjaValue::Float(std::stod(v.string_value()));
      } catch (...) {
        return JinjaValue::Float(0);
      }
    }
    return JinjaValue::Float(0);
  }
  if (name == "abs") {
    if (v.type() == JinjaValue::Type::kInt) {
      if (v.int_value() == INT64_MIN) return Error(line, "abs overflows a 64-bit integer");
      return JinjaValue::Int(std::llabs(v.int_value()));
    }
    if (v.is_number()) return JinjaValue::Float(std::fabs(v.number()));
    return Error(line, absl::StrCat("abs of ", v.TypeName()));
  }
  if (name == "items") {
    if (!v.is_dict()) return Error(line, absl::StrCat("items of ", v.TypeName()));
    JinjaValue::List out;
    for (const auto& [key, value] : v.dict()) out.push_back(JinjaValue::MakeList({JinjaValue::String(key), value}));
    return JinjaValue::MakeList(std::move(out));
  }
  static const std::set<std::string> kStringFilters = {"trim", "upper", "lower", "title", "capitalize", "replace"};
  if (kStringFilters.count(name)) {
    if (!v.is_string()) {
      if (v.is_undefined()) return Error(line, absl::StrCat("the filter '", name, "' of an undefined value"));
      return Error(line, absl::StrCat("the filter '", name, "' takes a string, not ", v.TypeName()));
    }
    const std::string& text = v.string_value();
    if (name == "trim") return JinjaValue::String(StripChars(text, "", true, true));
    if (name == "upper") return JinjaValue::String(absl::AsciiStrToUpper(text));
    if (name == "lower") return JinjaValue::String(absl::AsciiStrToLower(text));
    if (name == "title") return JinjaValue::String(Title(text));
    if (name == "capitalize") return JinjaValue::String(Capitalize(text));
    if (args.size() < 2 || !args[0].is_string() || !args[1].is_string()) return Error(line, "replace takes two strings");
    return JinjaValue::String(ReplaceAll(text, args[0].string_value(), args[1].string_value()));
  }
  auto items = Items(v, line);
  if (!items.ok()) return items.status();
  if (name == "first" || name == "last") {
    if (items->empty()) return JinjaValue();
    return name == "first" ? items->front() : items->back();
  }
  if (name == "list") return JinjaValue::MakeList(*items);
  if (name == "reverse") {
    JinjaValue::List out(items->rbegin(), items->rend());
    if (v.is_string()) {
      std::string text;
      for (const JinjaValue& c : out) text += c.string_value();
      return JinjaValue::String(text);
    }
    return JinjaValue::MakeList(std::move(out));
  }
  if (name == "join") {
    const std::string separator = !args.empty() ? args[0].Str() : "";
    std::optional<JinjaValue> attribute = kwarg("attribute");
    std::vector<std::string> parts;
    for (const JinjaValue& item : *items) parts.push_back(attribute ? item.Get(attribute->Str()).Str() : item.Str());
    return JinjaValue::String(absl::StrJoin(parts, separator));
  }
  if (name == "unique") {
    JinjaValue::List out;
    for (const JinjaValue& item : *items) {
      if (std::none_of(out.begin(), out.end(), [&item](const JinjaValue& seen) { return seen.Equals(item); })) {
        out.push_back(item);
      }
    }
    return JinjaValue::MakeList(std::move(out));
  }
  if (name == "map") {
    std::optional<JinjaValue> attribute = kwarg("attribute");
    if (!attribute) return Error(line, "map: only map(attribute=...) is supported");
    JinjaValue::List out;
    for (const JinjaValue& item : *items) out.push_back(item.Get(attribute->Str()));
    return JinjaValue::MakeList(std::move(out));
  }
  if (name == "selectattr" || name == "rejectattr") {
    if (args.empty() || !args[0].is_string()) return Error(line, absl::StrCat(name, " takes an attribute name"));
    JinjaValue::List out;
    for (const JinjaValue& item : *items) {
      const JinjaValue field = item.Get(args[0].string_value());
      bool passed = field.Truthy();
      if (args.size() > 1) {
        if (!args[1].is_string() || !KnownTests().count(args[1].string_value())) {
          return Error(line, absl::StrCat(name, ": the test must be one the renderer has"));
        }
        auto tested = Test(args[1].string_value(), field, std::vector<JinjaValue>(args.begin() + 2, args.end()), line);
        if (!tested.ok()) return tested.status();
        passed = *tested;
      }
      if (passed == (name == "selectattr")) out.push_back(item);
    }
    return JinjaValue::MakeList(std::move(out));
  }
  if (name == "select" || name == "reject") {
    // The items themselves tested (Llama 3.1's template: builtin_tools |
    // reject('equalto', 'code_interpreter')); without a test, their truth.
    if (!args.empty() && (!args[0].is_string() || !KnownTests().count(args[0].string_value()))) {
      return Error(line, absl::StrCat(name, ": the test must be one the renderer has"));
    }
    JinjaValue::List out;
    for (const JinjaValue& item : *items) {
      bool passed = item.Truthy();
      if (!args.empty()) {
        auto tested = Test(args[0].string_value(), item, std::vector<JinjaValue>(args.begin() + 1, args.end()), line);
        if (!tested.ok()) return tested.status();
        passed = *tested;
      }
      if (passed == (name == "select")) out.push_back(item);
    }
    return JinjaValue::MakeList(std::move(out));
  }
  return Error(line, absl::StrCat("the filter '", name, "' of ", v.TypeName()));
}


}  // namespace jinja_syntax
}  // namespace dslaunch::runtime
