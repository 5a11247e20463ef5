// The syntax tree (jinja_syntax.h) rendered with Python's semantics: the
// expressions (the statements are jinja_renderer.h's, the filters, tests and
// global functions jinja_builtins.cc's).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/serve/jinja_renderer.h"

namespace dslaunch::runtime {
namespace jinja_syntax {

absl::StatusOr<JinjaValue> Renderer::Index(const JinjaValue& owner, const JinjaValue& key, int line) {
  if (owner.is_undefined()) return Error(line, absl::StrCat("an undefined value has no item ", key.Repr()));
  if (owner.is_dict()) return key.is_string() ? owner.Get(key.string_value()) : JinjaValue();
  if ((owner.is_list() || owner.is_string()) && key.type() == JinjaValue::Type::kInt) {
    const int64_t size = owner.is_list() ? static_cast<int64_t>(owner.list().size())
                                         : static_cast<int64_t>(owner.string_value().size());
    int64_t i = key.int_value();
    if (i < 0) i += size;
    if (i < 0 || i >= size) return JinjaValue();  // jinja2: undefined
    return owner.is_list() ? owner.list()[static_cast<size_t>(i)]
                           : JinjaValue::String(owner.string_value().substr(static_cast<size_t>(i), 1));
  }
  return JinjaValue();
}

absl::StatusOr<bool> Renderer::CompareValues(const std::string& op, const JinjaValue& a, const JinjaValue& b,
                                             int line) {
  if (op == "==") return a.Equals(b);
  if (op == "!=") return !a.Equals(b);
  if (op == "in") {
    if (b.is_string()) {
      if (!a.is_string()) return Error(line, absl::StrCat("'in <string>' needs a string on the left, not ", a.TypeName()));
      return b.string_value().find(a.string_value()) != std::string::npos;
    }
    if (b.is_list()) {
      for (const JinjaValue& item : b.list()) {
        if (item.Equals(a)) return true;
      }
      return false;
    }
    if (b.is_dict()) return a.is_string() && !b.Get(a.string_value()).is_undefined();
    return Error(line, absl::StrCat("'in' needs a string, list or dict on the right, not ", b.TypeName()));
  }
  int order = 0;
  if (a.is_number() && b.is_number()) {
    order = a.number() < b.number() ? -1 : a.number() > b.number() ? 1 : 0;
  } else if (a.is_string() && b.is_string()) {
    order = a.string_value().compare(b.string_value());
  } else {
    return Error(line, absl::StrCat("cannot order ", a.TypeName(), " and ", b.TypeName(), " with ", op));
  }
  if (op == "<") return order < 0;
  if (op == "<=") return order <= 0;
  if (op == ">") return order > 0;
  return order >= 0;
}

absl::StatusOr<JinjaValue> Renderer::Binary(const std::string& op, const JinjaValue& a, const JinjaValue& b,
                                            int line) {
  auto joined = [this, line](std::string text) -> absl::StatusOr<JinjaValue> {
    if (text.size() > kMaxText) return Error(line, absl::StrCat("a string of over ", kMaxText, " bytes"));
    return JinjaValue::String(std::move(text));
  };
  if (op == "~") return joined(a.Str() + b.Str());
  if (a.is_undefined() || b.is_undefined()) {
    return Error(line, absl::StrCat("'", op, "' with an undefined value"));
  }
  const bool ints = (a.type() == JinjaValue::Type::kInt || a.type() == JinjaValue::Type::kBool) &&
                    (b.type() == JinjaValue::Type::kInt || b.type() == JinjaValue::Type::kBool);
  if (op == "+") {
    if (a.is_string() && b.is_string()) return joined(a.string_value() + b.string_value());
    if (a.is_list() && b.is_list()) {
      if (a.list().size() + b.list().size() > static_cast<size_t>(kMaxRange)) {
        return Error(line, absl::StrCat("a list of over ", kMaxRange, " items"));
      }
      JinjaValue::List joined = a.list();
      joined.insert(joined.end(), b.list().begin(), b.list().end());
      return JinjaValue::MakeList(std::move(joined));
    }
  }
  if (op == "*" && (a.is_string() || b.is_string()) && (ints || a.type() == JinjaValue::Type::kInt ||
                                                         b.type() == JinjaValue::Type::kInt)) {
    const JinjaValue& text = a.is_string() ? a : b;
    const JinjaValue& count = a.is_string() ? b : a;
    if (count.type() == JinjaValue::Type::kInt) {
      if (count.int_value() > 0 &&
          static_cast<uint64_t>(count.int_value()) > kMaxText / std::max<size_t>(1, text.string_value().size())) {
        return Error(line, absl::StrCat("a string repeated past ", kMaxText, " bytes"));
      }
      std::string out;
      for (int64_t i = 0; i < count.int_value(); ++i) out += text.string_value();
      return JinjaValue::String(out);
    }
  }
  if (!a.is_number() || !b.is_number()) {
    return Error(line, absl::StrCat("'", op, "' between ", a.TypeName(), " and ", b.TypeName()));
  }
  if (ints && (op == "+" || op == "-" || op == "*")) {
    // Python's integers do not overflow; these do, and say so.
    int64_t result = 0;
    const bool overflow = op == "+"   ? __builtin_add_overflow(a.int_value(), b.int_value(), &result)
                          : op == "-" ? __builtin_sub_overflow(a.int_value(), b.int_value(), &result)
                                      : __builtin_mul_overflow(a.int_value(), b.int_value(), &result);
    if (overflow) return Error(line, absl::StrCat("'", op, "' overflows a 64-bit integer"));
    return JinjaValue::Int(result);
  }
  if (op == "+") return JinjaValue::Float(a.number() + b.number());
  if (op == "-") return JinjaValue::Float(a.number() - b.number());
  if (op == "*") return JinjaValue::Float(a.number() * b.number());
  if (ints && b.int_value() == -1 && a.int_value() == INT64_MIN) {
    return Error(line, absl::StrCat("'", op, "' overflows a 64-bit integer"));
  }
  if (b.number() == 0) return Error(line, absl::StrCat("'", op, "' by zero"));
  if (op == "/") return JinjaValue::Float(a.number() / b.number());
  if (op == "//") {
    if (ints) {
      const int64_t q = a.int_value() / b.int_value();
      return JinjaValue::Int((a.int_value() % b.int_value() != 0 && ((a.int_value() < 0) != (b.int_value() < 0))) ? q - 1 : q);
    }
    return JinjaValue::Float(std::floor(a.number() / b.number()));
  }
  // "%": Python's modulo takes the divisor's sign.
  if (ints) {
    int64_t r = a.int_value() % b.int_value();
    if (r != 0 && ((r < 0) != (b.int_value() < 0))) r += b.int_value();
    return JinjaValue::Int(r);
  }
  double r = std::fmod(a.number(), b.number());
  if (r != 0 && ((r < 0) != (b.number() < 0))) r += b.number();
  return JinjaValue::Float(r);
}

absl::StatusOr<JinjaValue> Renderer::Eval(const Expr& e, int line) {
  const Nested nested(this);
  if (absl::Status within = Step(line, 0); !within.ok()) return within;
  switch (e.kind) {
    case Expr::kLiteral:
      return e.literal;
    case Expr::kName:
      if (e.name == "caller" && caller_ != nullptr && Lookup(e.name).is_undefined()) {
        return JinjaValue::Macro();  // defined and true; called by name (Call)
      }
      return Lookup(e.name);
    case Expr::kList:
    case Expr::kTuple: {
      JinjaValue::List items;
      for (const ExprPtr& item : e.args) {
        auto value = Eval(*item, line);
        if (!value.ok()) return value;
        items.push_back(*value);
      }
      return JinjaValue::MakeList(std::move(items));
    }
    case Expr::kDict: {
      JinjaValue dict = JinjaValue::MakeDict();
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        auto key = Eval(*e.args[i], line);
        if (!key.ok()) return key;
        auto value = Eval(*e.args[i + 1], line);
        if (!value.ok()) return value;
        if (!key->is_string()) return Error(line, "a dict's keys must be strings here");
        dict.Set(key->string_value(), *value);
      }
      return dict;
    }
    case Expr::kAttribute: {
      auto owner = Eval(*e.args[0], line);
      if (!owner.ok()) return owner;
      if (owner->is_undefined()) return Error(line, absl::StrCat("an undefined value has no attribute '", e.name, "'"));
      if (owner->is_dict()) return owner->Get(e.name);
      return JinjaValue();  // methods exist only when called (kCall)
    }
    case Expr::kItem: {
      auto owner = Eval(*e.args[0], line);
      if (!owner.ok()) return owner;
      auto key = Eval(*e.args[1], line);
      if (!key.ok()) return key;
      return Index(*owner, *key, line);
    }
    case Expr::kSlice: {
      auto owner = Eval(*e.args[0], line);
      if (!owner.ok()) return owner;
      std::optional<int64_t> bounds[3];
      for (int b = 0; b < 3; ++b) {
        if (e.args[static_cast<size_t>(b) + 1] == nullptr) continue;
        auto value = Eval(*e.args[static_cast<size_t>(b) + 1], line);
        if (!value.ok()) return value;
        if (value->is_none()) continue;
        if (value->type() != JinjaValue::Type::kInt) return Error(line, "a slice bound must be an integer");
        bounds[b] = value->int_value();
      }
      if (!owner->is_list() && !owner->is_string()) return Error(line, absl::StrCat("cannot slice ", owner->TypeName()));
      auto all = Items(*owner, line);
      if (!all.ok()) return all.status();
      const int64_t n = static_cast<int64_t>(all->size());
      const int64_t step = bounds[2].value_or(1);
      if (step == 0) return Error(line, "a slice step of 0");
      auto clamp = [n, step](std::optional<int64_t> bound, bool start) {
        if (!bound) return step > 0 ? (start ? int64_t{0} : n) : (start ? n - 1 : int64_t{-1});
        int64_t i = *bound < 0 ? *bound + n : *bound;
        return step > 0 ? std::clamp<int64_t>(i, 0, n) : std::clamp<int64_t>(i, -1, n - 1);
      };
      const int64_t start = clamp(bounds[0], true), stop = clamp(bounds[1], false);
      JinjaValue::List out;
      for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
        out.push_back((*all)[static_cast<size_t>(i)]);
        if (__builtin_add_overflow(i, step, &i)) break;
      }
      if (owner->is_string()) {
        std::string text;
        for (const JinjaValue& c : out) text += c.string_value();
        return JinjaValue::String(text);
      }
      return JinjaValue::MakeList(std::move(out));
    }
    case Expr::kCall:
      return Call(e, line);
    case Expr::kFilter:
      return Filter(e, line);
    case Expr::kTest: {
      auto value = Eval(*e.args[0], line);
      if (!value.ok()) return value;
      std::vector<JinjaValue> args;
      for (size_t i = 1; i < e.args.size(); ++i) {
        auto arg = Eval(*e.args[i], line);
        if (!arg.ok()) return arg;
        args.push_back(*arg);
      }
      auto passed = Test(e.name, *value, args, line);
      if (!passed.ok()) return passed.status();
      return JinjaValue::Bool(*passed != e.negated);
    }
    case Expr::kNegate: {
      auto value = Eval(*e.args[0], line);
      if (!value.ok()) return value;
      return Binary("-", JinjaValue::Int(0), *value, line);
    }
    case Expr::kBinary: {
      auto a = Eval(*e.args[0], line);
      if (!a.ok()) return a;
      auto b = Eval(*e.args[1], line);
      if (!b.ok()) return b;
      return Binary(e.name, *a, *b, line);
    }
    case Expr::kCompare: {
      auto a = Eval(*e.args[0], line);
      if (!a.ok()) return a;
      auto b = Eval(*e.args[1], line);
      if (!b.ok()) return b;
      auto result = CompareValues(e.name, *a, *b, line);
      if (!result.ok()) return result.status();
      return JinjaValue::Bool(*result != e.negated);
    }
    case Expr::kAnd:
    case Expr::kOr: {
      // Python's: the deciding operand itself.
      auto a = Eval(*e.args[0], line);
      if (!a.ok()) return a;
      if (a->Truthy() == (e.kind == Expr::kOr)) return a;
      return Eval(*e.args[1], line);
    }
    case Expr::kNot: {
      auto value = Eval(*e.args[0], line);
      if (!value.ok()) return value;
      return JinjaValue::Bool(!value->Truthy());
    }
    case Expr::kTernary: {
      auto condition = Eval(*e.args[1], line);
      if (!condition.ok()) return condition;
      if (condition->Truthy()) return Eval(*e.args[0], line);
      return e.args[2] ? Eval(*e.args[2], line) : JinjaValue();
    }
  }
  return JinjaValue();
}

absl::StatusOr<JinjaValue> Renderer::CallMacro(const Node& macro, const std::vector<JinjaValue>& args,
                                               const JinjaValue::Dict& kwargs, int line, const CallerFrame* caller) {
  // The top-level names, not the caller's loop variables, as jinja2's macros.
  return Invoke(macro, {scopes_.front()}, caller, args, kwargs, line);
}

absl::StatusOr<JinjaValue> Renderer::CallCaller(const CallerFrame& frame, const std::vector<JinjaValue>& args,
                                                const JinjaValue::Dict& kwargs, int line) {
  return Invoke(*frame.block, frame.scopes, frame.outer, args, kwargs, line);
}

absl::StatusOr<JinjaValue> Renderer::Invoke(const Node& callable, std::vector<std::map<std::string, JinjaValue>> scopes,
                                            const CallerFrame* caller, const std::vector<JinjaValue>& args,
                                            const JinjaValue::Dict& kwargs, int line) {
  const std::string what = callable.kind == Node::kMacro ? absl::StrCat("the macro '", callable.targets[0], "'")
                                                         : std::string("caller()");
  const std::vector<std::string> parameters(callable.targets.begin() + 1, callable.targets.end());
  if (args.size() > parameters.size()) {
    return Error(line, absl::StrCat(what, " takes ", parameters.size(), " argument(s), got ", args.size()));
  }
  std::map<std::string, JinjaValue> bound;
  for (size_t i = 0; i < args.size(); ++i) bound[parameters[i]] = args[i];
  for (const auto& [key, value] : kwargs) {
    const auto at = std::find(parameters.begin(), parameters.end(), key);
    if (at == parameters.end()) return Error(line, absl::StrCat(what, " has no parameter '", key, "'"));
    if (static_cast<size_t>(at - parameters.begin()) < args.size()) {
      return Error(line, absl::StrCat(what, " got '", key, "' twice"));
    }
    bound[key] = value;
  }
  if (macro_depth_ >= kMaxMacroDepth) {
    return Error(line, absl::StrCat("macros called within macros deeper than ", kMaxMacroDepth));
  }
  // Defaults see the parameters before them.
  std::vector<std::map<std::string, JinjaValue>> outer_scopes = std::move(scopes_);
  scopes_ = std::move(scopes);
  scopes_.push_back(std::move(bound));
  const CallerFrame* outer_caller = caller_;
  caller_ = caller;
  std::vector<LoopFrame> outer_loops = std::move(loops_);
  loops_.clear();
  ++macro_depth_;
  auto rendered = [&]() -> absl::StatusOr<JinjaValue> {
    for (size_t i = 0; i < parameters.size(); ++i) {
      if (scopes_.back().count(parameters[i]) || callable.defaults[i] == nullptr) continue;
      auto value = Eval(*callable.defaults[i], callable.line);
      if (!value.ok()) return value;
      scopes_.back()[parameters[i]] = *value;
    }
    std::string out;
    auto flow = Run(*callable.body, out);
    if (!flow.ok()) return flow.status();
    return JinjaValue::String(std::move(out));
  }();
  --macro_depth_;
  loops_ = std::move(outer_loops);
  caller_ = outer_caller;
  scopes_ = std::move(outer_scopes);
  return rendered;
}

absl::StatusOr<std::string> RenderTemplate(const Node& root, const std::string& origin,
                                           const JinjaValue::Dict& variables) {
  Renderer renderer(origin, variables);
  std::string out;
  auto flow = renderer.Run(root, out);
  if (!flow.ok()) return flow.status();
  return out;
}

}  // namespace jinja_syntax
}  // namespace dslaunch::runtime
