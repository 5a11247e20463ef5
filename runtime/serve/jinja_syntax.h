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
const std::set<std::string>& KnownTests();

}  // namespace jinja_syntax

struct JinjaTemplate::Node {
  using ExprPtr = jinja_syntax::ExprPtr;
  enum Kind { kText, kOutput, kIf, kFor, kSet, kBlockSet, kBreak, kContinue, kMacro, kSequence } kind = kSequence;
  int line = 1;
  std::string text;                  // kText
  ExprPtr expr;                      // kOutput, kSet value, kFor iterable
  ExprPtr filter;                    // kFor's "if"
  std::vector<std::string> targets;  // kFor's names; kSet: name (and attribute); kMacro: name, parameters
  std::vector<ExprPtr> defaults;     // kMacro: each parameter's default (null: none)
  std::vector<std::pair<ExprPtr, std::shared_ptr<Node>>> branches;  // kIf (null condition: else)
  std::vector<std::shared_ptr<Node>> children;                      // kSequence
  std::shared_ptr<Node> body, otherwise;                            // kFor, kBlockSet, kMacro
};

namespace jinja_syntax {

// The source as a tree; InvalidArgument naming `origin`, the line and what is wrong.
absl::StatusOr<std::shared_ptr<JinjaTemplate::Node>> ParseTemplate(absl::string_view source, const std::string& origin);
// The tree rendered with `variables` as the top-level names.
absl::StatusOr<std::string> RenderTemplate(const JinjaTemplate::Node& root, const std::string& origin,
                                           const JinjaValue::Dict& variables);

}  // namespace jinja_syntax
}  // namespace dslaunch::runtime
