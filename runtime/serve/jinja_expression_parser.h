// Note [Chat templates in Jinja] (jinja_template.h): the expression parser,
// tokens -> an expression tree (jinja_syntax.h), used by the statement parser
// (jinja_parser.cc) for every {{ }} and for the expressions inside {% %}.
// Precedence, low to high: the ternary "x if c else y", or, and, not,
// comparisons (== != < <= > >= in, not in), + -, "~", * / // %, unary - and
// +, then an atom's postfixes (calls, attributes, subscripts and slices) and
// its "|" filters and "is" tests. Unknown filters and tests are refused when
// parsed, naming the template and line.
// Internal to runtime/serve; header-only, included by jinja_parser.cc alone.
#pragma once

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "runtime/serve/jinja_lexer.h"
#include "runtime/serve/jinja_syntax.h"

namespace dslaunch::runtime {
namespace jinja_syntax {

class ExprParser {
 public:
  ExprParser(std::vector<Token> tokens, std::string where) : tokens_(std::move(tokens)), where_(std::move(where)) {}

  // Nesting deeper than this is refused (a template is not a stack-overflow test).
  static constexpr int kMaxNesting = 100;

  absl::StatusOr<ExprPtr> ParseAll() {
    auto expr = Expression();
    if (!expr.ok()) return expr;
    if (Peek().kind != Token::kEnd) return Error(absl::StrCat("unexpected '", Peek().text, "'"));
    return expr;
  }
  absl::StatusOr<ExprPtr> Expression() { return Ternary(); }
  // Without the ternary's "if" (a for loop's iterable, before its filter).
  absl::StatusOr<ExprPtr> OrExpression() { return Or(); }
  // A filter block's head: name(arguments) | name ... applied to `subject`.
  absl::StatusOr<ExprPtr> FilterChain(ExprPtr subject) {
    auto node = OneFilter(std::move(subject));
    while (node.ok() && Accept("|")) node = OneFilter(*node);
    return node;
  }
  const Token& Peek(size_t ahead = 0) const { return tokens_[std::min(at_ + ahead, tokens_.size() - 1)]; }
  bool IsName(const char* name, size_t ahead = 0) const {
    return Peek(ahead).kind == Token::kName && Peek(ahead).text == name;
  }
  bool IsOp(const char* op, size_t ahead = 0) const {
    return Peek(ahead).kind == Token::kOperator && Peek(ahead).text == op;
  }
  Token Next() { return tokens_[std::min(at_++, tokens_.size() - 1)]; }
  bool Accept(const char* op) {
    if (!IsOp(op)) return false;
    ++at_;
    return true;
  }
  absl::Status Expect(const char* op) {
    if (Accept(op)) return absl::OkStatus();
    return Error(absl::StrCat("expected '", op, "', got '", Peek().text, "'")).status();
  }
  absl::StatusOr<ExprPtr> Error(const std::string& message) const {
    return absl::InvalidArgumentError(absl::StrCat(where_, ": ", message));
  }
  bool AtEnd() const { return Peek().kind == Token::kEnd; }

 private:
  static ExprPtr Make(Expr::Kind kind, std::vector<ExprPtr> args, std::string name = "") {
    auto e = std::make_shared<Expr>();
    e->kind = kind;
    e->args = std::move(args);
    e->name = std::move(name);
    return e;
  }

  absl::StatusOr<ExprPtr> Ternary() {
    const Nested nested(this);
    if (depth_ > kMaxNesting) return Error(absl::StrCat("expressions nested deeper than ", kMaxNesting));
    auto value = Or();
    if (!value.ok() || !IsName("if")) return value;
    ++at_;
    auto condition = Or();
    if (!condition.ok()) return condition;
    ExprPtr otherwise;
    if (IsName("else")) {
      ++at_;
      auto parsed = Ternary();
      if (!parsed.ok()) return parsed;
      otherwise = *parsed;
    }
    return Make(Expr::kTernary, {*value, *condition, otherwise});
  }

  absl::StatusOr<ExprPtr> Or() {
    auto left = And();
    while (left.ok() && IsName("or")) {
      ++at_;
      auto right = And();
      if (!right.ok()) return right;
      left = Make(Expr::kOr, {*left, *right});
    }
    return left;
  }

  absl::StatusOr<ExprPtr> And() {
    auto left = Not();
    while (left.ok() && IsName("and")) {
      ++at_;
      auto right = Not();
      if (!right.ok()) return right;
      left = Make(Expr::kAnd, {*left, *right});
    }
    return left;
  }

  absl::StatusOr<ExprPtr> Not() {
    const Nested nested(this);
    if (depth_ > kMaxNesting) return Error(absl::StrCat("expressions nested deeper than ", kMaxNesting));
    if (IsName("not")) {
      ++at_;
      auto operand = Not();
      if (!operand.ok()) return operand;
      return Make(Expr::kNot, {*operand});
    }
    return Compare();
  }

  absl::StatusOr<ExprPtr> Compare() {
    auto left = Sum();
    while (left.ok()) {
      std::string op;
      bool negated = false;
      if (IsOp("==") || IsOp("!=") || IsOp("<") || IsOp("<=") || IsOp(">") || IsOp(">=")) {
        op = Next().text;
      } else if (IsName("in")) {
        ++at_;
        op = "in";
      } else if (IsName("not") && IsName("in", 1)) {
        at_ += 2;
        op = "in";
        negated = true;
      } else {
        break;
      }
      auto right = Sum();
      if (!right.ok()) return right;
      auto e = std::make_shared<Expr>();
      e->kind = Expr::kCompare;
      e->name = op;
      e->negated = negated;
      e->args = {*left, *right};
      left = ExprPtr(e);
    }
    return left;
  }

  absl::StatusOr<ExprPtr> Sum() {
    auto left = Concat();
    while (left.ok() && (IsOp("+") || IsOp("-"))) {
      const std::string op = Next().text;
      auto right = Concat();
      if (!right.ok()) return right;
      left = Make(Expr::kBinary, {*left, *right}, op);
    }
    return left;
  }

  absl::StatusOr<ExprPtr> Concat() {
    auto left = Product();
    while (left.ok() && IsOp("~")) {
      ++at_;
      auto right = Product();
      if (!right.ok()) return right;
      left = Make(Expr::kBinary, {*left, *right}, "~");
    }
    return left;
  }

  absl::StatusOr<ExprPtr> Product() {
    auto left = Unary();
    while (left.ok() && (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%"))) {
      const std::string op = Next().text;
      auto right = Unary();
      if (!right.ok()) return right;
      left = Make(Expr::kBinary, {*left, *right}, op);
    }
    return left;
  }

  absl::StatusOr<ExprPtr> Unary() {
    const Nested nested(this);
    if (depth_ > kMaxNesting) return Error(absl::StrCat("expressions nested deeper than ", kMaxNesting));
    if (IsOp("-")) {
      ++at_;
      auto operand = Unary();
      if (!operand.ok()) return operand;
      return Make(Expr::kNegate, {*operand});
    }
    if (IsOp("+")) ++at_;
    auto primary = Primary();
    if (!primary.ok()) return primary;
    auto postfix = Postfix(*primary);
    if (!postfix.ok()) return postfix;
    return Filters(*postfix);
  }

  absl::StatusOr<std::vector<ExprPtr>> Arguments(std::vector<std::pair<std::string, ExprPtr>>* kwargs) {
    std::vector<ExprPtr> args;
    while (!IsOp(")")) {
      if (Peek().kind == Token::kName && IsOp("=", 1)) {
        const std::string key = Next().text;
        ++at_;
        auto value = Expression();
        if (!value.ok()) return value.status();
        kwargs->emplace_back(key, *value);
      } else {
        auto value = Expression();
        if (!value.ok()) return value.status();
        args.push_back(*value);
      }
      if (!Accept(",")) break;
    }
    if (absl::Status s = Expect(")"); !s.ok()) return s;
    return args;
  }

  absl::StatusOr<ExprPtr> Postfix(ExprPtr node) {
    while (true) {
      if (Accept(".")) {
        if (Peek().kind != Token::kName) return Error("expected an attribute name after '.'");
        node = Make(Expr::kAttribute, {node}, Next().text);
      } else if (Accept("[")) {
        std::vector<ExprPtr> bounds;
        bool slice = false;
        for (int part = 0; part < 3; ++part) {
          if (IsOp(":") || IsOp("]")) {
            bounds.push_back(nullptr);
          } else {
            auto bound = Expression();
            if (!bound.ok()) return bound;
            bounds.push_back(*bound);
          }
          if (!Accept(":")) break;
          slice = true;
        }
        if (absl::Status s = Expect("]"); !s.ok()) return s;
        if (slice) {
          while (bounds.size() < 3) bounds.push_back(nullptr);
          bounds.insert(bounds.begin(), node);
          node = Make(Expr::kSlice, bounds);
        } else {
          if (bounds[0] == nullptr) return Error("an empty subscript []");
          node = Make(Expr::kItem, {node, bounds[0]});
        }
      } else if (Accept("(")) {
        auto call = std::make_shared<Expr>();
        call->kind = Expr::kCall;
        auto args = Arguments(&call->kwargs);
        if (!args.ok()) return args.status();
        call->args = std::move(*args);
        call->args.insert(call->args.begin(), node);
        node = call;
      } else {
        return node;
      }
    }
  }

  // name or name(arguments), applied to `node`.
  absl::StatusOr<ExprPtr> OneFilter(ExprPtr node) {
    if (Peek().kind != Token::kName) return Error("expected a filter name after '|'");
    const std::string name = Next().text;
    if (!KnownFilters().count(name)) {
      return Error(absl::StrCat("the filter '", name, "' is not one dsserve's chat template renderer has"));
    }
    auto filter = std::make_shared<Expr>();
    filter->kind = Expr::kFilter;
    filter->name = name;
    filter->args = {node};
    if (Accept("(")) {
      auto args = Arguments(&filter->kwargs);
      if (!args.ok()) return args.status();
      filter->args.insert(filter->args.end(), args->begin(), args->end());
    }
    return ExprPtr(filter);
  }

  absl::StatusOr<ExprPtr> Filters(ExprPtr node) {
    while (true) {
      if (Accept("|")) {
        auto filtered = OneFilter(node);
        if (!filtered.ok()) return filtered;
        node = *filtered;
      } else if (IsName("is")) {
        ++at_;
        auto test = std::make_shared<Expr>();
        test->kind = Expr::kTest;
        if (IsName("not")) {
          ++at_;
          test->negated = true;
        }
        if (Peek().kind == Token::kName || IsOp("==") || IsOp("!=")) {
          test->name = Next().text;
        } else {
          return Error("expected a test name after 'is'");
        }
        if (!KnownTests().count(test->name)) {
          return Error(absl::StrCat("the test '", test->name, "' is not one dsserve's chat template renderer has"));
        }
        test->args = {node};
        if (Accept("(")) {
          auto args = Arguments(&test->kwargs);
          if (!args.ok()) return args.status();
          test->args.insert(test->args.end(), args->begin(), args->end());
        } else if (!AtEnd() && (Peek().kind == Token::kString || Peek().kind == Token::kInt ||
                                Peek().kind == Token::kFloat ||
                                (Peek().kind == Token::kName && !IsName("and") && !IsName("or") && !IsName("else") &&
                                 !IsName("if") && !IsName("is") && !IsName("in") && !IsName("not")))) {
          auto argument = Primary();  // "is divisibleby 3", "is equalto 'x'"
          if (!argument.ok()) return argument;
          test->args.push_back(*argument);
        }
        node = test;
      } else {
        return node;
      }
    }
  }

  absl::StatusOr<ExprPtr> Primary() {
    const Token token = Next();
    auto literal = [](JinjaValue value) {
      auto e = std::make_shared<Expr>();
      e->kind = Expr::kLiteral;
      e->literal = std::move(value);
      return ExprPtr(e);
    };
    switch (token.kind) {
      case Token::kString: {
        std::string text = token.text;
        while (Peek().kind == Token::kString) text += Next().text;  // adjacent strings join
        return literal(JinjaValue::String(text));
      }
      case Token::kInt:
        return literal(JinjaValue::Int(token.int_value));
      case Token::kFloat:
        return literal(JinjaValue::Float(token.float_value));
      case Token::kName:
        if (token.text == "true" || token.text == "True") return literal(JinjaValue::Bool(true));
        if (token.text == "false" || token.text == "False") return literal(JinjaValue::Bool(false));
        if (token.text == "none" || token.text == "None") return literal(JinjaValue::None());
        return Make(Expr::kName, {}, token.text);
      case Token::kOperator:
        if (token.text == "(") {
          if (Accept(")")) return Make(Expr::kTuple, {});
          auto first = Expression();
          if (!first.ok()) return first;
          if (Accept(")")) return first;
          std::vector<ExprPtr> items = {*first};
          while (Accept(",")) {
            if (IsOp(")")) break;
            auto item = Expression();
            if (!item.ok()) return item;
            items.push_back(*item);
          }
          if (absl::Status s = Expect(")"); !s.ok()) return s;
          return Make(Expr::kTuple, items);
        }
        if (token.text == "[") {
          std::vector<ExprPtr> items;
          while (!IsOp("]")) {
            auto item = Expression();
            if (!item.ok()) return item;
            items.push_back(*item);
            if (!Accept(",")) break;
          }
          if (absl::Status s = Expect("]"); !s.ok()) return s;
          return Make(Expr::kList, items);
        }
        if (token.text == "{") {
          std::vector<ExprPtr> items;  // key, value, key, value, ...
          while (!IsOp("}")) {
            auto key = Expression();
            if (!key.ok()) return key;
            if (absl::Status s = Expect(":"); !s.ok()) return s;
            auto value = Expression();
            if (!value.ok()) return value;
            items.push_back(*key);
            items.push_back(*value);
            if (!Accept(",")) break;
          }
          if (absl::Status s = Expect("}"); !s.ok()) return s;
          return Make(Expr::kDict, items);
        }
        return Error(absl::StrCat("unexpected '", token.text, "'"));
      case Token::kEnd:
        return Error("the expression ends too soon");
    }
    return Error("unexpected token");
  }

  struct Nested {
    explicit Nested(ExprParser* parser) : parser(parser) { ++parser->depth_; }
    ~Nested() { --parser->depth_; }
    ExprParser* parser;
  };

  std::vector<Token> tokens_;
  std::string where_;
  size_t at_ = 0;
  int depth_ = 0;
};

}  // namespace jinja_syntax
}  // namespace dslaunch::runtime
