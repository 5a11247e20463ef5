// Jinja source -> the syntax tree (jinja_syntax.h).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/serve/jinja_syntax.h"

namespace dslaunch::runtime {
namespace jinja_syntax {

// ---------------------------------------------------------------- scanning

// A piece of the source: text, or the code of a {{ }} or {% %} tag.
struct Segment {
  enum Kind { kText, kExpression, kStatement } kind = kText;
  std::string text;
  int line = 1;
};

bool IsBlank(char c) { return c == ' ' || c == '\t'; }

int LineOf(absl::string_view source, size_t at) {
  return 1 + static_cast<int>(std::count(source.begin(), source.begin() + static_cast<std::ptrdiff_t>(at), '\n'));
}

// Splits the source into segments, applying the whitespace rules
// transformers renders with (trim_blocks, lstrip_blocks, "-" and "+").
absl::StatusOr<std::vector<Segment>> Scan(absl::string_view source, const std::string& origin) {
  std::vector<Segment> segments;
  size_t at = 0;
  bool strip_next = false;  // a "-" closed the last tag
  bool trim_newline = false;  // a block or comment tag closed (trim_blocks)
  while (at <= source.size()) {
    size_t open = source.find('{', at);
    while (open != absl::string_view::npos && open + 1 < source.size() && source[open + 1] != '{' &&
           source[open + 1] != '%' && source[open + 1] != '#') {
      open = source.find('{', open + 1);
    }
    if (open != absl::string_view::npos && open + 1 >= source.size()) open = absl::string_view::npos;
    std::string text(source.substr(at, open == absl::string_view::npos ? absl::string_view::npos : open - at));
    if (trim_newline && !text.empty() && text[0] == '\n') text.erase(0, 1);
    if (trim_newline && absl::StartsWith(text, "\r\n")) text.erase(0, 2);
    if (strip_next) text = std::string(absl::StripLeadingAsciiWhitespace(text));
    if (open == absl::string_view::npos) {
      if (!text.empty()) segments.push_back({Segment::kText, text, LineOf(source, at)});
      break;
    }
    const char kind = source[open + 1];
    const bool minus = open + 2 < source.size() && source[open + 2] == '-';
    const bool plus = open + 2 < source.size() && source[open + 2] == '+';
    if (minus) {
      text = std::string(absl::StripTrailingAsciiWhitespace(text));
    } else if ((kind == '%' || kind == '#') && !plus) {
      // lstrip_blocks: the spaces and tabs between the start of the tag's
      // line and the tag, when nothing else is there.
      size_t blank = open;
      while (blank > at && IsBlank(source[blank - 1])) --blank;
      if (blank == 0 || source[blank - 1] == '\n') {
        size_t start = text.size();
        while (start > 0 && IsBlank(text[start - 1])) --start;
        text.erase(start);
      }
    }
    if (!text.empty()) segments.push_back({Segment::kText, text, LineOf(source, at)});
    const int line = LineOf(source, open);
    size_t code_start = open + 2 + ((minus || plus) ? 1 : 0);
    if (kind == '#') {
      const size_t end = source.find("#}", code_start);
      if (end == absl::string_view::npos) {
        return absl::InvalidArgumentError(absl::StrCat(origin, ":", line, ": a comment {# is never closed"));
      }
      strip_next = end > code_start && source[end - 1] == '-';
      trim_newline = !strip_next;
      at = end + 2;
      continue;
    }
    const char close = kind == '{' ? '}' : '%';
    // The tag ends at the first close outside a string and outside
    // brackets ("{{ {'a': {'b': 1}} }}").
    size_t end = code_start;
    char quote = 0;
    int depth = 0;
    for (; end + 1 < source.size(); ++end) {
      const char c = source[end];
      if (quote) {
        if (c == '\\') {
          ++end;
        } else if (c == quote) {
          quote = 0;
        }
        continue;
      }
      if (c == '\'' || c == '"') {
        quote = c;
      } else if (depth == 0 && c == close && source[end + 1] == '}') {
        break;
      } else if (c == '{' || c == '(' || c == '[') {
        ++depth;
      } else if ((c == '}' || c == ')' || c == ']') && depth > 0) {
        --depth;
      }
    }
    if (end + 1 >= source.size()) {
      return absl::InvalidArgumentError(absl::StrCat(origin, ":", line, ": a tag ", kind == '{' ? "{{" : "{%",
                                                     " is never closed"));
    }
    strip_next = end > code_start && source[end - 1] == '-';
    const bool keep_newline = end > code_start && source[end - 1] == '+';  // "+%}": no trim_blocks here
    std::string code(source.substr(code_start, end - code_start - (strip_next || keep_newline ? 1 : 0)));
    segments.push_back({kind == '{' ? Segment::kExpression : Segment::kStatement, code, line});
    trim_newline = kind == '%' && !strip_next && !keep_newline;
    at = end + 2;
  }
  return segments;
}

// ---------------------------------------------------------------- tokens

struct Token {
  enum Kind { kName, kString, kInt, kFloat, kOperator, kEnd } kind = kEnd;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0;
};

absl::StatusOr<std::vector<Token>> Tokenize(const std::string& code, const std::string& where) {
  static const char* kOperators[] = {"//", "==", "!=", "<=", ">=", "**", "(", ")", "[", "]", "{", "}", ",", ":",
                                     ".",  "|",  "+",  "-",  "*",  "/",  "%", "~", "<", ">", "="};
  std::vector<Token> tokens;
  size_t i = 0;
  while (i < code.size()) {
    const char c = code[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < code.size() && (std::isalnum(static_cast<unsigned char>(code[j])) || code[j] == '_')) ++j;
      tokens.push_back({Token::kName, code.substr(i, j - i)});
      i = j;
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      bool is_float = false;
      while (j < code.size() && (std::isdigit(static_cast<unsigned char>(code[j])) || code[j] == '_' ||
                                 (code[j] == '.' && j + 1 < code.size() &&
                                  std::isdigit(static_cast<unsigned char>(code[j + 1]))))) {
        is_float = is_float || code[j] == '.';
        ++j;
      }
      std::string digits = code.substr(i, j - i);
      digits.erase(std::remove(digits.begin(), digits.end(), '_'), digits.end());
      Token token{is_float ? Token::kFloat : Token::kInt, digits};
      const bool read = is_float ? absl::SimpleAtod(digits, &token.float_value) && std::isfinite(token.float_value)
                                 : absl::SimpleAtoi(digits, &token.int_value);
      if (!read) return absl::InvalidArgumentError(absl::StrCat(where, ": the number ", digits, " is out of range"));
      tokens.push_back(token);
      i = j;
      continue;
    }
    if (c == '\'' || c == '"') {
      std::string text;
      size_t j = i + 1;
      for (; j < code.size() && code[j] != c; ++j) {
        if (code[j] != '\\' || j + 1 >= code.size()) {
          text += code[j];
          continue;
        }
        const char e = code[++j];
        switch (e) {
          case 'n':
            text += '\n';
            break;
          case 't':
            text += '\t';
            break;
          case 'r':
            text += '\r';
            break;
          case '\\':
          case '\'':
          case '"':
            text += e;
            break;
          default:
            text += '\\';
            text += e;
        }
      }
      if (j >= code.size()) return absl::InvalidArgumentError(absl::StrCat(where, ": a string is never closed"));
      tokens.push_back({Token::kString, text});
      i = j + 1;
      continue;
    }
    bool matched = false;
    for (const char* op : kOperators) {
      if (code.compare(i, std::strlen(op), op) == 0) {
        tokens.push_back({Token::kOperator, op});
        i += std::strlen(op);
        matched = true;
        break;
      }
    }
    if (!matched) return absl::InvalidArgumentError(absl::StrCat(where, ": unexpected character '", std::string(1, c), "'"));
  }
  tokens.push_back({Token::kEnd, ""});
  return tokens;
}

// ---------------------------------------------------------------- syntax
const std::set<std::string>& KnownFilters() {
  static const std::set<std::string> filters = {
      "trim", "length", "count", "upper", "lower", "title", "capitalize", "string", "int", "float", "default", "d",
      "first", "last", "join", "list", "reverse", "replace", "items", "tojson", "abs", "unique", "selectattr",
      "rejectattr", "map"};
  return filters;
}

const std::set<std::string>& KnownTests() {
  static const std::set<std::string> tests = {
      "defined", "undefined", "none", "string", "number", "integer", "float", "boolean", "true", "false", "mapping",
      "iterable", "sequence", "even", "odd", "divisibleby", "eq", "equalto", "ne", "==", "!=", "in"};
  return tests;
}

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


using Node = JinjaTemplate::Node;
using NodePtr = std::shared_ptr<Node>;

class StatementParser {
 public:
  StatementParser(std::vector<Segment> segments, std::string origin)
      : segments_(std::move(segments)), origin_(std::move(origin)) {}

  // Parses until a statement whose keyword is in `ends` (returned in *end).
  absl::StatusOr<NodePtr> Block(const std::set<std::string>& ends, std::string* end, std::string* end_code) {
    if (++depth_ > ExprParser::kMaxNesting) {
      return absl::InvalidArgumentError(absl::StrCat(origin_, ": blocks nested deeper than ", ExprParser::kMaxNesting));
    }
    auto block = Parse(ends, end, end_code);
    --depth_;
    return block;
  }

 private:
  absl::StatusOr<NodePtr> Parse(const std::set<std::string>& ends, std::string* end, std::string* end_code) {
    auto sequence = std::make_shared<Node>();
    while (at_ < segments_.size()) {
      const Segment& segment = segments_[at_++];
      const std::string where = absl::StrCat(origin_, ":", segment.line);
      if (segment.kind == Segment::kText) {
        auto node = std::make_shared<Node>();
        node->kind = Node::kText;
        node->text = segment.text;
        sequence->children.push_back(node);
        continue;
      }
      auto tokens = Tokenize(segment.text, where);
      if (!tokens.ok()) return tokens.status();
      ExprParser parser(std::move(*tokens), where);
      if (segment.kind == Segment::kExpression) {
        auto expr = parser.ParseAll();
        if (!expr.ok()) return expr.status();
        auto node = std::make_shared<Node>();
        node->kind = Node::kOutput;
        node->line = segment.line;
        node->expr = *expr;
        sequence->children.push_back(node);
        continue;
      }
      if (parser.Peek().kind != Token::kName) return parser.Error("a statement without a keyword").status();
      const std::string keyword = parser.Next().text;
      if (ends.count(keyword)) {
        *end = keyword;
        *end_code = segment.text;
        last_line_ = segment.line;
        return sequence;
      }
      auto node = Statement(keyword, parser, segment, where);
      if (!node.ok()) return node.status();
      if (*node) sequence->children.push_back(*node);
    }
    if (!ends.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(origin_, ": the template ends inside a block: expected {% ",
                                                     absl::StrJoin(ends, " or "), " %}"));
    }
    return sequence;
  }

 private:
  // (a, b=default, ...) of a macro or a call block, into node->targets
  // (after its first) and node->defaults.
  static absl::Status Parameters(ExprParser& parser, Node* node) {
    if (absl::Status s = parser.Expect("("); !s.ok()) return s;
    while (!parser.IsOp(")")) {
      if (parser.Peek().kind != Token::kName) return parser.Error("expected a parameter name").status();
      const std::string name = parser.Next().text;
      if (std::find(node->targets.begin() + 1, node->targets.end(), name) != node->targets.end()) {
        return parser.Error(absl::StrCat("the parameter '", name, "' is named twice")).status();
      }
      node->targets.push_back(name);
      ExprPtr fallback;
      if (parser.Accept("=")) {
        auto value = parser.Expression();
        if (!value.ok()) return value.status();
        fallback = *value;
      } else if (!node->defaults.empty() && node->defaults.back() != nullptr) {
        return parser.Error(absl::StrCat("the parameter '", name, "' without a default follows one with")).status();
      }
      node->defaults.push_back(fallback);
      if (!parser.Accept(",")) break;
    }
    return parser.Expect(")");
  }

  // The rest of a block's head must be empty; then its body, up to `end`.
  absl::StatusOr<NodePtr> WithBody(const ExprParser& parser, NodePtr node, const char* end_keyword) {
    if (!parser.AtEnd()) return parser.Error(absl::StrCat("unexpected '", parser.Peek().text, "'")).status();
    std::string end, code;
    auto body = Block({end_keyword}, &end, &code);
    if (!body.ok()) return body.status();
    node->body = *body;
    return node;
  }

  absl::StatusOr<NodePtr> Statement(const std::string& keyword, ExprParser& parser, const Segment& segment,
                                    const std::string& where) {
    auto node = std::make_shared<Node>();
    node->line = segment.line;
    if (keyword == "if") {
      node->kind = Node::kIf;
      auto condition = parser.ParseAll();
      if (!condition.ok()) return condition.status();
      ExprPtr current = *condition;
      while (true) {
        std::string end, code;
        auto body = Block({"elif", "else", "endif"}, &end, &code);
        if (!body.ok()) return body.status();
        node->branches.emplace_back(current, *body);
        if (end == "endif") break;
        if (end == "else") {
          auto rest = Block({"endif"}, &end, &code);
          if (!rest.ok()) return rest.status();
          node->branches.emplace_back(nullptr, *rest);
          break;
        }
        auto tokens = Tokenize(code, absl::StrCat(origin_, ":", last_line_));
        if (!tokens.ok()) return tokens.status();
        ExprParser elif(std::move(*tokens), absl::StrCat(origin_, ":", last_line_));
        elif.Next();  // "elif"
        auto next = elif.ParseAll();
        if (!next.ok()) return next.status();
        current = *next;
      }
      return node;
    }
    if (keyword == "for") {
      node->kind = Node::kFor;
      while (true) {
        if (parser.Peek().kind != Token::kName) return parser.Error("expected a loop variable").status();
        node->targets.push_back(parser.Next().text);
        if (!parser.Accept(",")) break;
      }
      if (!parser.IsName("in")) return parser.Error("expected 'in' in the for loop").status();
      parser.Next();
      auto iterable = parser.OrExpression();
      if (!iterable.ok()) return iterable.status();
      node->expr = *iterable;
      if (parser.IsName("if")) {
        parser.Next();
        auto filter = parser.OrExpression();
        if (!filter.ok()) return filter.status();
        node->filter = *filter;
      }
      if (parser.IsName("recursive")) {
        parser.Next();
        node->recursive = true;
      }
      if (!parser.AtEnd()) return parser.Error(absl::StrCat("unexpected '", parser.Peek().text, "'")).status();
      std::string end, code;
      auto body = Block({"else", "endfor"}, &end, &code);
      if (!body.ok()) return body.status();
      node->body = *body;
      if (end == "else") {
        auto otherwise = Block({"endfor"}, &end, &code);
        if (!otherwise.ok()) return otherwise.status();
        node->otherwise = *otherwise;
      }
      return node;
    }
    if (keyword == "set") {
      if (parser.Peek().kind != Token::kName) return parser.Error("expected a name after 'set'").status();
      node->targets.push_back(parser.Next().text);
      if (parser.Accept(".")) {
        if (parser.Peek().kind != Token::kName) return parser.Error("expected an attribute name").status();
        node->targets.push_back(parser.Next().text);
      }
      if (parser.AtEnd()) {  // {% set x %}...{% endset %}
        node->kind = Node::kBlockSet;
        std::string end, code;
        auto body = Block({"endset"}, &end, &code);
        if (!body.ok()) return body.status();
        node->body = *body;
        return node;
      }
      if (absl::Status s = parser.Expect("="); !s.ok()) return s;
      node->kind = Node::kSet;
      auto value = parser.ParseAll();
      if (!value.ok()) return value.status();
      node->expr = *value;
      return node;
    }
    if (keyword == "filter") {  // {% filter name(args) | name %}...{% endfilter %}
      node->kind = Node::kFilterBlock;
      auto subject = std::make_shared<Expr>();
      subject->kind = Expr::kName;
      subject->name = kFilterBlockSubject;
      auto chain = parser.FilterChain(subject);
      if (!chain.ok()) return chain.status();
      node->expr = *chain;
      return WithBody(parser, node, "endfilter");
    }
    if (keyword == "call") {  // {% call(a, b=default) name(args) %}...caller(x, y)...{% endcall %}
      node->kind = Node::kCallBlock;
      node->targets.push_back("caller");
      if (parser.IsOp("(")) {
        if (absl::Status s = Parameters(parser, node.get()); !s.ok()) return s;
      }
      auto call = parser.OrExpression();
      if (!call.ok()) return call.status();
      if ((*call)->kind != Expr::kCall || (*call)->args[0]->kind != Expr::kName) {
        return parser.Error("a call block calls a macro: expected name(arguments)").status();
      }
      node->expr = *call;
      return WithBody(parser, node, "endcall");
    }
    if (keyword == "macro") {  // {% macro name(a, b=default) %}...{% endmacro %}
      node->kind = Node::kMacro;
      if (parser.Peek().kind != Token::kName) return parser.Error("expected the macro's name").status();
      node->targets.push_back(parser.Next().text);
      if (absl::Status s = Parameters(parser, node.get()); !s.ok()) return s;
      return WithBody(parser, node, "endmacro");
    }
    if (keyword == "break" || keyword == "continue") {
      node->kind = keyword == "break" ? Node::kBreak : Node::kContinue;
      return node;
    }
    if (keyword == "generation") {  // transformers' assistant-mask marker: its content renders as is
      std::string end, code;
      auto body = Block({"endgeneration"}, &end, &code);
      if (!body.ok()) return body.status();
      return *body;
    }
    return absl::InvalidArgumentError(absl::StrCat(where, ": the statement '", keyword,
                                                   "' is not one dsserve's chat template renderer has"));
  }

  std::vector<Segment> segments_;
  std::string origin_;
  size_t at_ = 0;
  int last_line_ = 1;
  int depth_ = 0;
};
absl::StatusOr<std::shared_ptr<Node>> ParseTemplate(absl::string_view source, const std::string& origin) {
  auto segments = Scan(source, origin);
  if (!segments.ok()) return segments.status();
  StatementParser parser(std::move(*segments), origin);
  std::string end, code;
  return parser.Block({}, &end, &code);
}

}  // namespace jinja_syntax
}  // namespace dslaunch::runtime
