// The renderer of the syntax tree (jinja_syntax.h): statements run here,
// expressions in jinja_renderer.cc, the filters, tests and global
// functions in jinja_builtins.cc. Internal to runtime/serve.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "runtime/serve/jinja_syntax.h"

namespace dslaunch::runtime {
namespace jinja_syntax {

using Node = JinjaTemplate::Node;
using NodePtr = std::shared_ptr<Node>;

enum class Flow { kNormal, kBreak, kContinue };

// What one render may take: a template from a downloaded folder runs on a
// server's request thread, so a runaway one ends with an error, never a hang
// or an exhausted memory.
constexpr int64_t kMaxSteps = 500'000;  // statements run and expressions evaluated
constexpr size_t kMaxText = size_t{64} << 20;  // bytes of output, and of one string
constexpr int64_t kMaxRange = 1'000'000;  // items of one range()
constexpr int kMaxMacroDepth = 20;  // macros calling macros (a recursive one included)
// Run and Eval inside one another: a few hundred frames for any template
// without macros (blocks and expressions nest 100 deep at most), about 1
// MiB of stack at the limit; a request thread has 8.
constexpr int kMaxRenderNesting = 1000;

class Renderer {
 public:
  Renderer(const std::string& origin, const JinjaValue::Dict& variables) : origin_(origin) {
    scopes_.emplace_back();
    for (const auto& [name, value] : variables) scopes_.back()[name] = value;
  }

  absl::StatusOr<Flow> Run(const Node& node, std::string& out) {
    const Nested nested(this);
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
      case Node::kMacro:  // defined from here on (a later definition of the name wins)
        macros_[node.targets[0]] = &node;
        return Flow::kNormal;
      case Node::kCallBlock: {
        // The macro call reads this frame (Call takes it before anything
        // else): inside the macro, caller() renders the block's body.
        CallerFrame frame{&node, scopes_, caller_};
        pending_caller_ = &frame;
        auto value = Eval(*node.expr, node.line);
        pending_caller_ = nullptr;
        if (!value.ok()) return value.status();
        out += value->Str();
        return Flow::kNormal;
      }
      case Node::kFilterBlock: {
        // The body's names stay inside it; a break or continue in it drops
        // its text, as jinja2's.
        std::string text;
        scopes_.emplace_back();
        auto flow = Run(*node.body, text);
        scopes_.pop_back();
        if (!flow.ok() || *flow != Flow::kNormal) return flow;
        scopes_.push_back({{kFilterBlockSubject, JinjaValue::String(std::move(text))}});
        auto value = Eval(*node.expr, node.line);
        scopes_.pop_back();
        if (!value.ok()) return value.status();
        out += value->Str();
        return Flow::kNormal;
      }
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
    return RunLoop(node, *iterable, /*depth=*/1, out);
  }

  // The loop `node` over `iterable`; a recursive loop's loop(items) runs it
  // again one level deeper (Call).
  absl::StatusOr<Flow> RunLoop(const Node& node, const JinjaValue& iterable, int64_t depth, std::string& out) {
    auto all = Items(iterable, node.line);
    if (!all.ok()) return all.status();
    loops_.push_back({&node, depth});
    auto flow = LoopItems(node, *all, depth, out);
    loops_.pop_back();
    return flow;
  }

  absl::StatusOr<Flow> LoopItems(const Node& node, const std::vector<JinjaValue>& all, int64_t depth,
                                 std::string& out) {
    // The "if" filter runs before the loop: loop.length counts what passes.
    std::vector<JinjaValue> items;
    for (const JinjaValue& item : all) {
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
                               {"depth", JinjaValue::Int(depth)},
                               {"depth0", JinjaValue::Int(depth - 1)},
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
  // The macro's body rendered with its parameters bound (positionally, by
  // name, or from their defaults; any other missing one undefined), seeing
  // the template's top-level names but not the caller's loop variables, as
  // jinja2's macros do.
  // A call block's body and the names it sees (those of its place in the
  // template), for caller() inside the macro it calls.
  struct CallerFrame {
    const Node* block;
    std::vector<std::map<std::string, JinjaValue>> scopes;
    const CallerFrame* outer;  // the caller() of the block's own place
  };
  // `caller`: the call block calling it, or null.
  absl::StatusOr<JinjaValue> CallMacro(const Node& macro, const std::vector<JinjaValue>& args,
                                       const JinjaValue::Dict& kwargs, int line, const CallerFrame* caller);
  // caller(args) inside a macro a call block called: the block's body with
  // its parameters bound, seeing the names of the block's place.
  absl::StatusOr<JinjaValue> CallCaller(const CallerFrame& frame, const std::vector<JinjaValue>& args,
                                        const JinjaValue::Dict& kwargs, int line);
  // Binds `callable`'s parameters (targets after its name, defaults) and
  // renders its body over `scopes` plus them, caller() being `caller`.
  absl::StatusOr<JinjaValue> Invoke(const Node& callable, std::vector<std::map<std::string, JinjaValue>> scopes,
                                    const CallerFrame* caller, const std::vector<JinjaValue>& args,
                                    const JinjaValue::Dict& kwargs, int line);

  // Statements and expressions being run, one inside another (a macro's
  // body inside its call): the stack a render takes is bounded, whatever
  // the template.
  struct Nested {
    explicit Nested(Renderer* renderer) : renderer(renderer) { ++renderer->nesting_; }
    ~Nested() { --renderer->nesting_; }
    Renderer* renderer;
  };

  absl::Status Step(int line, size_t text) {
    if (nesting_ > kMaxRenderNesting) {
      return Error(line, absl::StrCat("statements and expressions nested deeper than ", kMaxRenderNesting,
                                      " while rendering"));
    }
    if (++steps_ > kMaxSteps) return Error(line, absl::StrCat("the template ran over ", kMaxSteps, " steps"));
    if (text > kMaxText) return Error(line, absl::StrCat("the template wrote over ", kMaxText, " bytes"));
    return absl::OkStatus();
  }

  std::string origin_;
  std::vector<std::map<std::string, JinjaValue>> scopes_;
  int64_t steps_ = 0;
  std::map<std::string, const Node*> macros_;  // nodes of the template, which outlives the render
  int macro_depth_ = 0;
  int nesting_ = 0;
  // The loops being run, innermost last (a macro's body starts with none).
  struct LoopFrame {
    const Node* node;
    int64_t depth;
  };
  std::vector<LoopFrame> loops_;
  const CallerFrame* caller_ = nullptr;          // what caller() renders here (inside a macro a call block called)
  const CallerFrame* pending_caller_ = nullptr;  // a call block's, until its macro call takes it
};


}  // namespace jinja_syntax
}  // namespace dslaunch::runtime
