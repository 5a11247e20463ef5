// Note [JSON or text]
// An answer that is free text unless its first byte past leading blanks is
// '{', and then JSON values held to a schema, separated by ';'
// (OutputConstraint's kJsonSchema with or_text). It is how Llama 3's JSON
// tool calling reads an answer under tool_choice auto (Note [Required tool
// calls] in runtime/serve/tool_call_form.h): the llama3_json parser takes
// the whole answer as calls when it begins with '{' (several calls split at
// ';') and as content otherwise, so a strict tool's call is held from its
// first byte while text stays the model's own (a '{' later in the text is
// text: the parser does not look for calls there). After a call closes the
// answer may end, take blanks, or take ';' and then (past blanks) the next
// call, held as the first; it never ends just after a ';' (the parser would
// read the whole answer as content). An answer of blanks only is text.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/generate/json_schema_automaton.h"

namespace dslaunch::runtime {

class JsonOrTextAutomaton {
 public:
  // `json` at its start; its schema outlives the automaton and its copies.
  explicit JsonOrTextAutomaton(JsonSchemaAutomaton json) : start_(json), json_(std::move(json)) {}
  bool Step(unsigned char b);
  bool Complete() const { return mode_ == kJson ? json_.Complete() : mode_ != kNextCall; }
  // Never: after a call another may follow (the answer ends with the model's
  // end of text).
  bool Finished() const { return false; }
  std::string Key() const;

 private:
  // kAfterCall: a call has closed; kNextCall: past the ';' after one.
  enum Mode : uint8_t { kLead, kJson, kAfterCall, kNextCall, kText };
  Mode mode_ = kLead;
  JsonSchemaAutomaton start_;  // each call's start
  JsonSchemaAutomaton json_;
};

}  // namespace dslaunch::runtime
