// The syntax tree of a Jinja template (Note [Chat templates in Jinja],
// jinja_template.h), between its parser (jinja_parser.cc) and its renderer
// (jinja_renderer.cc). Internal to runtime/serve.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "runtime/serve/jinja_template.h"
#include "runtime/serve/jinja_value.h"

namespace dslaunch::runtime {
namespace jinja_syntax {

struct Expr;
using ExprPtr = std::shared_ptr<const Expr>;

struct Expr {
  enum Kind {
    kLiteral, kName, kList, kTuple, kDict, kAttribute, kItem, kSlice, kCall, kFilter, kTest,
    kNegate, kBinary, kCompare, kAnd, kOr, kNot, kTernary
  } kind = kLiteral;
  JinjaValue literal;
  std::string name;               // name, attribute, filter, test, operator
  std::vector<ExprPtr> args;      // operands, items, arguments (null: an omitted slice bound)
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  bool negated = false;           // is not, not in
};

// The filters and tests the renderer has: a template naming another is
// refused at parse time.
const std::set<std::string>& KnownFilters();
// The name a filter block's filters read its rendered body from: no
// template can write it (it starts with a space).
inline constexpr char kFilterBlockSubject[] = " filter block";
const std::set<std::string>& KnownTests();

}  // namespace jinja_syntax

struct JinjaTemplate::Node {
  using ExprPtr = jinja_syntax::ExprPtr;
  enum Kind {
    kText, kOutput, kIf, kFor, kSet, kBlockSet, kBreak, kContinue, kMacro, kCallBlock, kFilterBlock, kSequence
  } kind = kSequence;
  int line = 1;
  std::string text;  // kText
  // kOutput, kSet's value, kFor's iterable; kCallBlock: the macro's call;
  // kFilterBlock: the filters applied to the name kFilterBlockSubject.
  ExprPtr expr;
  ExprPtr filter;  // kFor's "if"
  bool recursive = false;  // kFor: loop(items) renders the body again for items
  // kFor's names; kSet: name (and attribute); kMacro: name, parameters;
  // kCallBlock: "caller", the caller's parameters.
  std::vector<std::string> targets;
  std::vector<ExprPtr> defaults;  // kMacro, kCallBlock: each parameter's default (null: none)
  std::vector<std::pair<ExprPtr, std::shared_ptr<Node>>> branches;  // kIf (null condition: else)
  std::vector<std::shared_ptr<Node>> children;                      // kSequence
  // kFor, kBlockSet, kMacro, kFilterBlock; kCallBlock: what caller() renders.
  std::shared_ptr<Node> body, otherwise;
};

namespace jinja_syntax {

// The source as a tree; InvalidArgument naming `origin`, the line and what is wrong.
absl::StatusOr<std::shared_ptr<JinjaTemplate::Node>> ParseTemplate(absl::string_view source, const std::string& origin);
// The tree rendered with `variables` as the top-level names.
absl::StatusOr<std::string> RenderTemplate(const JinjaTemplate::Node& root, const std::string& origin,
                                           const JinjaValue::Dict& variables);

}  // namespace jinja_syntax
}  // namespace dslaunch::runtime
