// Free text in which triggers open structures of JSON between fixed texts:
// vLLM's structural tags, and tool calls under tool_choice auto.
//
// Note [Structural tags]
// A structural tag (vLLM's response_format {"type": "structural_tag",
// "structures": [{"begin", "schema", "end"}], "triggers": [...]}) leaves
// the output free text until one of the triggers appears in it, and from
// there holds it to a structure: the rest of a `begin` that starts with
// the trigger, a JSON value of that structure's `schema` (Note [JSON
// schemas for constrained output]), then its `end`; after the end the
// output is free text again, and the next trigger opens the next
// structure. The output is whole (stop tokens allowed) in free text only: a
// structure, once opened, is finished before the answer ends (or max_tokens
// cuts it). Several structures may share a trigger (begins
// "<function=get_weather>" and "<function=get_time>" after the trigger
// "<function="): the bytes that follow choose among them. A trigger is
// found wherever it ends (the longest one when several end at one byte),
// within a token or across tokens.
//
// Tokens whose bytes are not known alone (TokenBytesOf: a special token
// that prints nothing, a piece of a character spelt in byte-fallback pieces,
// a byte-level token that ends or begins inside a character and may carry
// ASCII beside it) are not allowed, in free text either: such a token could
// hold part of a trigger unseen. Free text is then written with the tokens
// whose text is whole (stop tokens aside, allowed in free text).
//
// Every structure's begin starts with a trigger and every trigger begins a
// structure (a trigger that opened nothing would leave the output in a dead
// end); an empty trigger or one longer than kMaxStructureTriggerBytes, an
// empty begin or end, or a schema that does not compile is refused naming
// it (structures[i].begin, triggers[j], ...).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/generate/framed_json_automaton.h"
#include "runtime/generate/json_schema.h"

namespace dslaunch::runtime {

inline constexpr int kMaxTaggedStructures = 64;
inline constexpr int kMaxStructureTriggers = 16;
inline constexpr int kMaxStructureTagBytes = 1024;  // a begin or end
inline constexpr int kMaxStructureTriggerBytes = 64;

// One structure as a request gives it: the schema as JSON text.
struct TaggedStructure {
  std::string begin, schema, end;
  bool operator==(const TaggedStructure&) const = default;
};

// A structural tag as JSON, vLLM's response_format {"type":
// "structural_tag", "structures": [{"begin", "schema", "end"}], "triggers":
// [...]} (the "type" may be left out: dsgen --structural_tag FILE): its
// structures (each schema compiled once, kept as compact text) and triggers,
// checked as Compile checks them. InvalidArgument naming `field`.structures[i]
// (and the schema's place), `field`.triggers[j] or the unknown field.
struct StructuralTagSpec {
  std::vector<TaggedStructure> structures;
  std::vector<std::string> triggers;
};
absl::StatusOr<StructuralTagSpec> ReadStructuralTag(const JsonValue& format, const std::string& field);

// A structural tag compiled: shared by a request's automata.
class StructuralTagForm {
 public:
  // InvalidArgument naming `field`.structures[i]... or .triggers[j]. JSON
  // strings are keyed with `key_horizon` (JsonSchemaAutomaton::set_key_horizon).
  static absl::StatusOr<std::shared_ptr<const StructuralTagForm>> Compile(
      const std::vector<TaggedStructure>& structures, const std::vector<std::string>& triggers,
      int64_t key_horizon, const std::string& field);

  size_t structures() const { return frames_.size(); }
  // Structure i at its start (nothing of its begin taken yet).
  FramedJsonAutomaton Start(size_t i) const;
  bool IsTrigger(std::string_view text) const;
  bool IsTriggerPrefix(std::string_view text) const;  // a proper prefix of a trigger
  const std::string& key_prefix() const { return key_prefix_; }

 private:
  StructuralTagForm() = default;
  std::vector<std::string> triggers_;
  std::vector<std::unique_ptr<FramedJsonAutomaton::Frame>> frames_;  // stable addresses
  std::vector<std::shared_ptr<const CompiledJsonSchema>> schemas_;
  std::vector<JsonSchemaAutomaton> json_starts_;
  std::string key_prefix_;
};

class StructuralTagAutomaton {
 public:
  // `form` outlives the automaton and its copies.
  explicit StructuralTagAutomaton(const StructuralTagForm* form) : form_(form) {}
  bool Step(unsigned char b);
  bool Complete() const;                   // in free text
  bool Finished() const { return false; }  // free text may always go on
  std::string Key() const;

 private:
  bool StepFree(unsigned char b);
  const StructuralTagForm* form_;
  std::string tail_;  // free text: its longest end that a trigger begins with (a proper prefix)
  // In a structure: the structures the text so far can be, by index.
  std::vector<std::pair<size_t, FramedJsonAutomaton>> inside_;
};

}  // namespace dslaunch::runtime
