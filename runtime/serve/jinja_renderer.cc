// The syntax tree (jinja_syntax.h) rendered with Python's semantics.
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
#include "runtime/serve/jinja_syntax.h"

namespace dslaunch::runtime {
namespace jinja_syntax {

using Node = JinjaTemplate::Node;
using NodePtr = std::shared_ptr<Node>;

// ---------------------------------------------------------------- rendering

enum class Flow { kNormal, kBreak, kContinue };

// What one render may take: a template from a downloaded folder runs on a
// server's request thread, so a runaway one ends with an error, never a hang
// or an exhausted memory.
constexpr int64_t kMaxSteps = 500'000;  // statements run and expressions evaluated
constexpr size_t kMaxText = size_t{64} << 20;  // bytes of output, and of one string
constexpr int64_t kMaxRange = 1'000'000;  // items of one range()

class Renderer {
 public:
  Renderer(const std::string& origin, const JinjaValue::Dict& variables) : origin_(origin) {
    scopes_.emplace_back();
    for (const auto& [name, value] : variables) scopes_.back()[name] = value;
  }

  absl::StatusOr<Flow> Run(const Node& node, std::string& out) {
    if (absl::Status within = Step(node.line, out.size()); !within.ok()) return within;
    switch (node.kind) {
      case Node::kText:
        out += node.text;
        return Flow::kNormal;
      case Node::kOutput: {
        auto value = Eval(*node.expr, node.line);
        if (!value.ok()) return value.status();
        out += value->Str();
        return Flow::kNormal;
      }
      case Node::kSequence:
        for (const NodePtr& child : node.children) {
          auto flow = Run(*child, out);
          if (!flow.ok() || *flow != Flow::kNormal) return flow;
        }
        return Flow::kNormal;
      case Node::kIf:
        for (const auto& [condition, body] : node.branches) {
          if (condition != nullptr) {
            auto value = Eval(*condition, node.line);
            if (!value.ok()) return value.status();
            if (!value->Truthy()) continue;
          }
          return Run(*body, out);
        }
        return Flow::kNormal;
      case Node::kSet:
      case Node::kBlockSet: {
        JinjaValue value;
        if (node.kind == Node::kSet) {
          auto evaluated = Eval(*node.expr, node.line);
          if (!evaluated.ok()) return evaluated.status();
          value = *evaluated;
        } else {
          std::string text;
          auto flow = Run(*node.body, text);
          if (!flow.ok()) return flow.status();
          value = JinjaValue::String(text);
        }
        if (node.targets.size() == 1) {
          scopes_.back()[node.targets[0]] = value;
        } else {
          const JinjaValue owner = Lookup(node.targets[0]);
          if (!owner.is_namespace()) {
            return Error(node.line, absl::StrCat("set ", node.targets[0], ".", node.targets[1], ": ", node.targets[0],
                                                 " is ", owner.TypeName(), ", not a namespace"));
          }
          owner.Set(node.targets[1], value);
        }
        return Flow::kNormal;
      }
      case Node::kFor:
        return RunFor(node, out);
      case Node::kBreak:
        return Flow::kBreak;
      case Node::kContinue:
        return Flow::kContinue;
    }
    return Flow::kNormal;
  }

 private:
  absl::Status Error(int line, const std::string& message) const {
    return absl::InvalidArgumentError(absl::StrCat(origin_, ":", line, ": ", message));
  }

  JinjaValue Lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto found = it->find(name);
      if (found != it->end()) return found->second;
    }
    return JinjaValue();
  }

  absl::StatusOr<std::vector<JinjaValue>> Items(const JinjaValue& value, int line) const {
    if (value.is_list()) return value.list();
    if (value.is_dict()) {
      std::vector<JinjaValue> keys;
      for (const auto& [key, item] : value.dict()) keys.push_back(JinjaValue::String(key));
      return keys;
    }
    if (value.is_string()) {
      std::vector<JinjaValue> characters;
      const std::string& text = value.string_value();
      for (size_t i = 0; i < text.size();) {
        size_t length = 1;
        const unsigned char c = static_cast<unsigned char>(text[i]);
        if (c >= 0xF0) {
          length = 4;
        } else if (c >= 0xE0) {
          length = 3;
        } else if (c >= 0xC0) {
          length = 2;
        }
        characters.push_back(JinjaValue::String(text.substr(i, length)));
        i += length;
      }
      return characters;
    }
    if (value.is_undefined()) return std::vector<JinjaValue>{};  // jinja2 iterates an undefined as empty
    return Error(line, absl::StrCat("cannot iterate over ", value.TypeName()));
  }

  absl::StatusOr<Flow> RunFor(const Node& node, std::string& out) {
    auto iterable = Eval(*node.expr, node.line);
    if (!iterable.ok()) return iterable.status();
    auto all = Items(*iterable, node.line);
    if (!all.ok()) return all.status();
    // The "if" filter runs before the loop: loop.length counts what passes.
    std::vector<JinjaValue> items;
    for (const JinjaValue& item : *all) {
      if (node.filter != nullptr) {
        scopes_.emplace_back();
        absl::Status bound = Bind(node, item);
        auto keep = bound.ok() ? Eval(*node.filter, node.line) : absl::StatusOr<JinjaValue>(bound);
        scopes_.pop_back();
        if (!keep.ok()) return keep.status();
        if (!keep->Truthy()) continue;
      }
      items.push_back(item);
    }
    if (items.empty()) return node.otherwise ? Run(*node.otherwise, out) : Flow::kNormal;
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      scopes_.emplace_back();
      if (absl::Status bound = Bind(node, items[static_cast<size_t>(i)]); !bound.ok()) return bound;
      JinjaValue::Dict loop = {{"index", JinjaValue::Int(i + 1)},
                               {"index0", JinjaValue::Int(i)},
                               {"revindex", JinjaValue::Int(n - i)},
                               {"revindex0", JinjaValue::Int(n - i - 1)},
                               {"first", JinjaValue::Bool(i == 0)},
                               {"last", JinjaValue::Bool(i == n - 1)},
                               {"length", JinjaValue::Int(n)},
                               {"previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : JinjaValue()},
                               {"nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)] : JinjaValue()}};
      scopes_.back()["loop"] = JinjaValue::MakeDict(std::move(loop));
      auto flow = Run(*node.body, out);
      scopes_.pop_back();
      if (!flow.ok()) return flow;
      if (*flow == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  absl::Status Bind(const Node& node, const JinjaValue& item) {
    if (node.targets.size() == 1) {
      scopes_.back()[node.targets[0]] = item;
      return absl::OkStatus();
    }
    if (!item.is_list() || item.list().size() != node.targets.size()) {
      return Error(node.line, absl::StrCat("cannot unpack ", item.Repr(), " into ", node.targets.size(), " names"));
    }
    for (size_t t = 0; t < node.targets.size(); ++t) scopes_.back()[node.targets[t]] = item.list()[t];
    return absl::OkStatus();
  }

  absl::StatusOr<JinjaValue> Eval(const Expr& e, int line);
  absl::StatusOr<JinjaValue> Binary(const std::string& op, const JinjaValue& a, const JinjaValue& b, int line);
  absl::StatusOr<bool> CompareValues(const std::string& op, const JinjaValue& a, const JinjaValue& b, int line);
  absl::StatusOr<JinjaValue> Call(const Expr& e, int line);
  absl::StatusOr<JinjaValue> Filter(const Expr& e, int line);
  absl::StatusOr<bool> Test(const std::string& name, const JinjaValue& value, const std::vector<JinjaValue>& args,
                            int line);
  absl::StatusOr<JinjaValue> Index(const JinjaValue& owner, const JinjaValue& key, int line);

  absl::Status Step(int line, size_t text) {
    if (++steps_ > kMaxSteps) return Error(line, absl::StrCat("the template ran over ", kMaxSteps, " steps"));
    if (text > kMaxText) return Error(line, absl::StrCat("the template wrote over ", kMaxText, " bytes"));
    return absl::OkStatus();
  }

  std::string origin_;
  std::vector<std::map<std::string, JinjaValue>> scopes_;
  int64_t steps_ = 0;
};

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

absl::StatusOr<JinjaValue> Renderer::Eval(const Expr& e, int line) {
  if (absl::Status within = Step(line, 0); !within.ok()) return within;
  switch (e.kind) {
    case Expr::kLiteral:
      return e.literal;
    case Expr::kName:
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
  return Error(line, absl::StrCat("the filter '", name, "' of ", v.TypeName()));
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
