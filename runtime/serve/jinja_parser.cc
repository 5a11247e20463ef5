// Jinja source -> the syntax tree (jinja_syntax.h): the statements and
// blocks, over the lexer (jinja_lexer.h) and the expression parser
// (jinja_expression_parser.h).
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/serve/jinja_expression_parser.h"
#include "runtime/serve/jinja_lexer.h"
#include "runtime/serve/jinja_syntax.h"

namespace dslaunch::runtime {
namespace jinja_syntax {

const std::set<std::string>& KnownFilters() {
  static const std::set<std::string> filters = {
      "trim", "length", "count", "upper", "lower", "title", "capitalize", "string", "int", "float", "default", "d",
      "first", "last", "join", "list", "reverse", "replace", "items", "tojson", "abs", "unique", "selectattr",
      "rejectattr", "select", "reject", "map"};
  return filters;
}

const std::set<std::string>& KnownTests() {
  static const std::set<std::string> tests = {
      "defined", "undefined", "none", "string", "number", "integer", "float", "boolean", "true", "false", "mapping",
      "iterable", "sequence", "even", "odd", "divisibleby", "eq", "equalto", "ne", "==", "!=", "in"};
  return tests;
}

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
