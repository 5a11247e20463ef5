// Note [JSON or text]
// An answer that is free text unless its first byte past leading blanks is
// '{', and then one JSON value held to a schema (OutputConstraint's
// kJsonSchema with or_text). It is how Llama 3's JSON tool calling reads an
// answer under tool_choice auto (Note [Required tool calls] in
// runtime/serve/tool_call_form.h): the llama3_json parser takes the whole
// answer as calls when it begins with '{' and as content otherwise, so a
// strict tool's call is held from its first byte while text stays the
// model's own (a '{' later in the text is text: the parser does not look for
// calls there). One value is generated: the answer is finished when it
// closes (several ';'-separated calls are what the parser also reads, but
// the form holds one). An answer of blanks only is text.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/generate/json_schema_automaton.h"

namespace dslaunch::runtime {

class JsonOrTextAutomaton {
 public:
  // `json` at its start; its schema outlives the automaton and its copies.
  explicit JsonOrTextAutomaton(JsonSchemaAutomaton json) : json_(std::move(json)) {}
  bool Step(unsigned char b);
  bool Complete() const { return mode_ != kJson || json_.Complete(); }
  bool Finished() const { return mode_ == kJson && json_.Finished(); }
  std::string Key() const;

 private:
  enum Mode : uint8_t { kLead, kJson, kText };
  Mode mode_ = kLead;
  JsonSchemaAutomaton json_;
};

}  // namespace dslaunch::runtime
