// The form of a required tool call, for constrained output.
//
// Note [Required tool calls]
// With tool_choice "required" or a named function (OpenAI's {"type":
// "function", "function": {"name": ...}}), the answer must be a call: it is
// held (Note [Constrained output]) to the text the server's
// --tool_call_parser reads back as a call (Note [Tool calls]), with the
// arguments held to the tool's parameters schema (Note [JSON schemas for
// constrained output]):
//  - hermes: <tool_call>\n{"name": NAME, "arguments": {...}}\n</tool_call>;
//  - llama3_json: {"name": NAME, "parameters": {...}}.
// "required" with several tools is an anyOf of one call form per tool, told
// apart by the name (its first property), so each name's arguments follow
// their own schema; a named function is that tool's form alone. One call is
// generated (a parallel call would be a second form after the first). A
// tool without parameters takes {} as its arguments; a parameters schema
// without "type" is an object's, and one that allows other values than an
// object is refused (the parser reads objects only). A parameters schema
// constrained decoding cannot hold output to is a 400 naming the tool
// (tools[i].function.parameters: schema/...).
//
// Under tool_choice auto the answer may be text or calls. When a tool is
// strict (OpenAI's "strict": true: its arguments follow its schema), the
// answer is free text in which each call is held, a structural tag (Note
// [Structural tags] in runtime/generate/structural_tag_automaton.h) whose
// trigger is "<tool_call>": the text is the model's own until it writes
// <tool_call>, and from there the call's form as above, then text again
// (parallel calls each held), the arguments of a strict tool to its schema
// and those of another tool to any object. In llama3_json a call is the
// whole answer, which the parser reads as calls when it begins with '{':
// the answer is then free text unless its first byte past blanks is '{',
// and from there calls held as above, ';'-separated as the parser splits
// them (Note [JSON or text] in runtime/generate/json_or_text_automaton.h).
// Without a strict tool, calls under auto are not held (OpenAI's strict
// false: the arguments are the model's best effort).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/generate/output_constraint.h"
#include "runtime/serve/tool_call_parser.h"
#include "runtime/tokenizer/json_value.h"

namespace dslaunch::runtime {

// The constraint of an answer that calls one of `tools` (the request's
// tools array) whose names are in `callable`, in `format`'s text.
absl::StatusOr<OutputConstraint> ToolCallConstraint(ToolCallFormat format, const JsonValue& tools,
                                                    const std::vector<std::string>& callable);

// The constraint of an answer of text in which each call, to one of
// `callable`, is held to its form (tool_choice auto with strict tools): a
// structural tag in hermes, a JSON value or text in llama3_json.
absl::StatusOr<OutputConstraint> ToolCallsInTextConstraint(ToolCallFormat format, const JsonValue& tools,
                                                           const std::vector<std::string>& callable);

}  // namespace dslaunch::runtime
