// A Jinja template as transformers renders a chat template.
//
// Note [Chat templates in Jinja]
// A model folder's tokenizer_config.json carries its chat template as Jinja
// source ("chat_template": a string, or a list of {"name", "template"} of
// which "default" is used). transformers renders it with jinja2's sandboxed
// environment, trim_blocks and lstrip_blocks on, the loopcontrols extension,
// and these globals: raise_exception(message), strftime_now(format); the
// variables are messages, add_generation_prompt, tools (none) and the
// tokenizer's special tokens (bos_token, eos_token, ...). This is that
// subset of Jinja, written for what chat templates use:
//  - text, {{ expression }}, {% statement %}, {# comment #}, the "-" and
//    "+" whitespace controls, trim_blocks and lstrip_blocks;
//  - statements if/elif/else, for (with an "if" filter, tuple targets,
//    else, recursive with loop(items), loop.index/index0/revindex/
//    revindex0/first/last/length/previtem/nextitem/depth/depth0), set (a name, a namespace's attribute, or a block set),
//    break, continue, generation (rendered through), macro (parameters
//    with defaults, called positionally or by name; the body sees the
//    template's top-level names and its parameters, as jinja2's; no
//    varargs or kwargs; 20 nested calls at most), call blocks ({% call(a,
//    b=default) macro(...) %}: caller(...) inside the macro renders the
//    block's body, which sees the names of its own place), filter blocks
//    ({% filter f(x) | g %}, their names kept inside);
//  - expressions: None/none, True/true, False/false, numbers, strings,
//    lists, tuples, dicts; attributes, subscripts, slices; the operators
//    + - * / // % ~, comparisons, in / not in, and / or / not, x if c else y;
//    the tests defined, undefined, none, string, number, integer, float,
//    boolean, true, false, mapping, iterable, sequence, even, odd,
//    divisibleby, eq/equalto/==, ne/!=; the filters trim, length/count,
//    upper, lower, title, capitalize, string, int, float, default/d, first,
//    last, join, list, reverse, replace, items, tojson, abs, unique,
//    selectattr, rejectattr, select, reject, map(attribute=); the methods of strings
//    (strip, lstrip, rstrip, startswith, endswith, upper, lower, title,
//    capitalize, split, replace), of dicts (items, keys, values, get) and
//    of lists (append); the functions raise_exception, namespace, range,
//    strftime_now, dict.
// Anything else (includes, imports, other filters or tests) is an error at
// parse time naming it and its line: a template that
// loads renders with the semantics above, or says why it cannot.
// Values follow Python's rules (jinja_value.h); an undefined value renders
// as "", is false, and is an error in arithmetic or as an attribute's owner,
// as jinja2's default Undefined. Integers are 64-bit: a literal or a result
// past that is an error, not a wrap. A template from a downloaded folder runs
// on a server's request thread, so a render has a budget (500,000 steps,
// 64 MiB of text, a million items in a list, nesting 100 deep) and a
// runaway one ends with an error naming the limit (tests/fuzz/
// chat_template_fuzzer.cc).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "runtime/serve/jinja_value.h"

namespace dslaunch::runtime {

class JinjaTemplate {
 public:
  // InvalidArgument naming `origin`, the line and what is wrong.
  static absl::StatusOr<JinjaTemplate> Parse(absl::string_view source, std::string origin);

  // Renders with `variables` as the top-level names. raise_exception's
  // message, a type error or an undefined value used as a value:
  // InvalidArgument naming the origin and line.
  absl::StatusOr<std::string> Render(const JinjaValue::Dict& variables) const;

  struct Node;

 private:
  JinjaTemplate(std::shared_ptr<const Node> root, std::string origin)
      : root_(std::move(root)), origin_(std::move(origin)) {}
  std::shared_ptr<const Node> root_;
  std::string origin_;
};

}  // namespace dslaunch::runtime
