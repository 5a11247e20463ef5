// Note [Constrained output]
// A request may ask that its output take a form: OpenAI's response_format
// {"type": "json_object"} (one JSON object, RFC 8259, and nothing after it),
// a JSON schema (response_format json_schema, vLLM's guided_json: Note [JSON
// schemas for constrained output] in json_schema.h) or vLLM's guided_choice
// (exactly one of the strings given), or a structural tag (free text in
// which triggers open structures of JSON: Note [Structural tags] in
// structural_tag_automaton.h). Each step, the
// tokens whose bytes would take the output out of that form get no
// probability: the logits of every token the form does not allow are set to
// -inf before the request's sampling (greedy, temperature, top-k, top-p all
// choose among the allowed), and the request's stop tokens are allowed only
// once the output is whole. A request whose output is whole and cannot
// grow (the object's closing brace; a choice no longer choice extends) ends
// there, with finish reason "stop", whether or not a stop token follows.
//
// The form is a byte automaton (OutputConstraintState below; JSON's is
// JsonSchemaAutomaton, json_object being the schema {"type": "object"}); the tokens it
// allows come from a walk of the vocabulary's tokens as a trie of their
// bytes (TokenVocabulary), stepping the automaton along each edge and
// pruning where it refuses: a walk touches only the prefixes still allowed.
// The allowed set depends only on the form and the automaton's state, so it
// is kept per (form, state) in the vocabulary's cache, shared by every
// request (a JSON string's body, say, is one state until it closes, and the
// next request's strings meet the same one): a walk of a 32,000-token
// vocabulary costs milliseconds, a cached set tens of microseconds
// (constraint_mask_bench).
//
// A token's bytes are its text in the middle of a text (TokenBytesOf in
// runtime/tokenizer/tokenizer.h); a token whose text alone is not whole
// UTF-8 (a byte-fallback piece of a character) or is empty (a special
// token) is never allowed, so the output is always whole UTF-8 and an
// output the form allows is the text the client receives.
//
// JSON: whitespace between tokens, at most kMaxJsonWhitespaceRun bytes in a
// row (a model must not stall in whitespace, the trap OpenAI's json mode
// documents), nesting at most kMaxJsonDepth deep, numbers of at most
// kMaxJsonNumberBytes bytes with exponents of at most two digits (every
// number reads back finite); strings hold any UTF-8 but control characters,
// with JSON's escapes, and whole UTF-8 (RFC 3629: no overlong forms, no
// surrogates; a \u escape of a surrogate only as half of a pair). A key may
// repeat in an object without properties, as RFC 8259 allows (Python's json
// reads the last). A number takes '.', 'e' or a sign only with room for the
// digit after it.
//
// The log-probabilities a constrained request reports (and best_of ranks
// by) are of the masked distribution, renormalised over the allowed tokens:
// what was sampled from. A request's stop strings are refused with a form
// (a stop string inside the object would cut it), and the chat template's
// stop strings do not cut a constrained answer: it ends when its form is
// whole (a structural tag's answer is free text, which stop strings end as
// any). Tools are refused beside a form (a tool call is text of its own
// shape), unless tool_choice is "none"; tool_choice "required" or a named
// function is a form of its own (Note [Required tool calls] in
// runtime/serve/tool_call_form.h: JSON between fixed texts, before and
// after), as is auto with a strict tool (a structural tag). A request that reaches a state no token continues and
// whose output is not whole ends with finish reason "stop" (its text then is
// not whole: a vocabulary without the bytes the form needs).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "runtime/generate/json_schema_automaton.h"  // the bounds of JSON output
#include "runtime/generate/structural_tag_automaton.h"

namespace dslaunch::runtime {

inline constexpr int kMaxGuidedChoices = 256;
inline constexpr int kMaxGuidedChoiceBytes = 16384;  // all the choices together

// What a request asks of its output (serialisable: it crosses the tensor
// group in serving turns).
struct OutputConstraint {
  enum class Kind { kNone, kJsonObject, kChoice, kJsonSchema, kStructuralTag };
  Kind kind = Kind::kNone;
  std::vector<std::string> choices;  // kChoice: the strings, non-empty, up to kMaxGuidedChoices
  std::string schema;                // kJsonSchema: the schema's JSON text (Note [JSON schemas for constrained output])
  // kJsonSchema: text the output holds before and after the JSON value, as
  // given (a tool call's tags: Note [Required tool calls] in
  // runtime/serve/tool_call_form.h).
  std::string before, after;
  // kJsonSchema: Note [JSON or text] (json_or_text_automaton.h): free text
  // unless the first byte past leading blanks is '{' (not with before/after).
  bool or_text = false;
  // kStructuralTag: Note [Structural tags].
  std::vector<TaggedStructure> structures;
  std::vector<std::string> triggers;
  bool operator==(const OutputConstraint&) const = default;

  static OutputConstraint JsonObject() { return Of(Kind::kJsonObject); }
  static OutputConstraint Choice(std::vector<std::string> choices) {
    OutputConstraint c = Of(Kind::kChoice);
    c.choices = std::move(choices);
    return c;
  }
  static OutputConstraint JsonSchema(std::string schema) {
    OutputConstraint c = Of(Kind::kJsonSchema);
    c.schema = std::move(schema);
    return c;
  }
  static OutputConstraint StructuralTag(std::vector<TaggedStructure> structures, std::vector<std::string> triggers) {
    OutputConstraint c = Of(Kind::kStructuralTag);
    c.structures = std::move(structures);
    c.triggers = std::move(triggers);
    return c;
  }

 private:
  static OutputConstraint Of(Kind kind) {
    OutputConstraint c;
    c.kind = kind;
    return c;
  }
};

// The vocabulary's tokens as a trie of their bytes. token_bytes[id]: the
// token's text mid-text; empty for one constrained output never takes.
class TokenVocabulary {
 public:
  explicit TokenVocabulary(const std::vector<std::string>& token_bytes);
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;  // byte, node
    std::vector<int32_t> tokens;                              // tokens whose bytes end here
  };
  int64_t size() const { return size_; }  // ids 0..size-1
  int64_t longest_token_bytes() const { return longest_; }

  const std::string& bytes(int64_t id) const { return bytes_[static_cast<size_t>(id)]; }
  const std::vector<Node>& nodes() const { return nodes_; }

  // The allowed sets found so far, by (form, state) key; thread-safe (HTTP
  // threads check requests while the engine steps). At most kCachedSets,
  // then emptied.
  static constexpr size_t kCachedSets = 512;
  std::shared_ptr<const std::vector<char>> Cached(const std::string& key) const;
  void Remember(const std::string& key, std::shared_ptr<const std::vector<char>> allowed) const;

 private:
  int64_t size_ = 0;
  int64_t longest_ = 0;
  std::vector<std::string> bytes_;  // by id
  std::vector<Node> nodes_;         // 0: the root (no bytes)
  mutable absl::Mutex mu_;
  mutable std::unordered_map<std::string, std::shared_ptr<const std::vector<char>>> cache_ ABSL_GUARDED_BY(mu_);
};

// One request's progress through its form.
class OutputConstraintState {
 public:
  virtual ~OutputConstraintState() = default;
  // Sets the logits [vocab] of every token the form does not allow next to
  // -inf (in place); `stop_tokens` keep theirs only when Complete(). Returns
  // whether any token is left.
  virtual bool Mask(torch::Tensor& logits, const std::vector<int64_t>& stop_tokens) = 0;
  // The chosen token (one Mask allowed; a stop token changes nothing).
  virtual void Accept(int64_t token) = 0;
  virtual bool Complete() const = 0;  // the output so far is whole
  virtual bool Finished() const = 0;  // whole, and no byte may follow
};

// InvalidArgument naming `field` for a constraint no request may carry (no
// choices, an empty one, too many), or whose first token no token of
// `vocabulary` can be.
absl::StatusOr<std::unique_ptr<OutputConstraintState>> StartOutputConstraint(
    const OutputConstraint& constraint, std::shared_ptr<const TokenVocabulary> vocabulary, const std::string& field);

// For tests: whether `text` is a prefix of the form (true), and whether it
// is whole (`complete`).
bool AllowsPrefix(const OutputConstraint& constraint, const std::string& text, bool* complete);

}  // namespace dslaunch::runtime
