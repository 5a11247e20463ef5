// The byte automaton of JSON held to a compiled schema (Note [Constrained
// output] in output_constraint.h, Note [JSON schemas for constrained output]
// in json_schema.h): RFC 8259 with the bounds of the first note, and each
// value held to its schema node. response_format json_object is the schema
// {"type": "object"}.
//
// A value type: the trie walk copies it at every edge, so the open
// containers live in a fixed array of which only the used part is copied.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>

#include "runtime/generate/json_schema.h"

namespace dslaunch::runtime {

inline constexpr int kMaxJsonDepth = 32;
inline constexpr int kMaxJsonWhitespaceRun = 16;
inline constexpr int kMaxJsonNumberBytes = 40;
// An exponent of at most two digits: with 40 bytes of digits, every number
// reads back as a finite, normal double (a JSON reader refuses 1e999 or
// makes it infinity).
inline constexpr int kMaxJsonExponentDigits = 2;

class JsonSchemaAutomaton {
 public:
  // `schema` outlives the automaton and its copies.
  explicit JsonSchemaAutomaton(const CompiledJsonSchema* schema);
  JsonSchemaAutomaton(const JsonSchemaAutomaton& other) { *this = other; }
  JsonSchemaAutomaton& operator=(const JsonSchemaAutomaton& other);

  // Key() may treat a string's remaining lengths of `horizon` code points
  // and more as one (no token holds that many: the vocabulary's longest
  // token's bytes + 1), so that a string with lengths shares its allowed
  // sets along the way.
  void set_key_horizon(int64_t horizon) { horizon_ = static_cast<uint16_t>(std::clamp<int64_t>(horizon, 1, 65535)); }

  // Whether `b` may come next; if so, the automaton takes it.
  bool Step(unsigned char b);
  bool Complete() const;  // the output so far is a whole value
  bool Finished() const;  // whole, and no byte may follow
  // The state as bytes, the schema's text first: the allowed-token cache's
  // key. Fields the mode does not read are left out, so equal states share one
  // key.
  std::string Key() const;

 private:
  enum Mode : uint8_t {
    kValue,        // a value of value_node is due
    kArrayFirst,   // after '[': a value or ']'
    kObjectFirst,  // after '{': a key or '}'
    kObjectKey,    // after ',' in an object: a key
    kPropertyKey,  // in a key of an object with properties: trie is the position in their names
    kColon,        // after a key; value_node: its value's node
    kAfterValue,   // ',' or the container's close
    kString,       // string_node: the string's node (its lengths)
    kEscape,
    kUnicode,      // count: hex digits due
    kNumMinus,     // count (all number modes): bytes so far
    kNumZero,
    kNumInt,
    kNumDot,
    kNumFrac,
    kNumExp,
    kNumExpSign,
    kNumExpDigits,
    kLiteral,      // literal, count: the next byte's index
    kEnum,         // value_node's enum; trie: the position in its values
    kDone,
  };
  // A \u escape of a surrogate is half a code point: a high one must be
  // followed by a low one, and a low one alone is refused (the strict reader
  // and serde_json refuse lone surrogates; a string's length counts the pair
  // as one code point).
  enum Pair : uint8_t { kNoPair, kHighEscape, kLowDue, kLowEscapeDue, kLowEscape };
  struct Frame {
    uint16_t node;
    uint16_t index;  // an array: its values so far; an object with properties: the next property it may take
    uint8_t object;
  };
  // Everything but the frames.
  struct Scalars {
    Mode mode = kValue;
    bool key = false;      // kString: a key of an object without properties
    bool integer = false;  // number modes: no fraction or exponent
    uint8_t utf8 = 0;
    uint8_t utf8_low = 0x80, utf8_high = 0xBF;
    uint8_t count = 0;
    uint8_t exponent_digits = 0;  // number modes
    uint8_t literal = 0;
    uint8_t whitespace = 0;
    uint8_t first_hex = 0;     // kUnicode: the escape's first digit
    uint8_t pair = 0;          // string modes: where a surrogate pair stands (kPair* below)
    uint8_t depth = 0;
    bool negative = false;  // number modes: after a '-'
    uint16_t chars = 0;   // kString with lengths: code points so far
    NumberBounds::Cursor bounds;  // number modes of a bounded number (Note [Number bounds])
    int32_t number_node = 0;  // number modes: the number's node
    int32_t value_node = 0;
    int32_t string_node = 0;
    int32_t trie = 0;
    // String modes of a value with a pattern (Note [String patterns]): its
    // automaton's state (-1: no pattern), and the code point being read
    // (a UTF-8 sequence's or a \u escape's bits so far).
    int32_t pattern_state = -1;
    uint32_t code_point = 0;
  };

  const SchemaNode& Node(int32_t id) const { return schema_->node(id); }
  Frame& Top() { return frames_[static_cast<size_t>(s_.depth) - 1]; }
  const Frame& Top() const { return frames_[static_cast<size_t>(s_.depth) - 1]; }
  bool IsNumber() const { return s_.mode >= kNumMinus && s_.mode <= kNumExpDigits; }
  bool NumberMayEnd() const;
  // The number's bounds (Note [Number bounds]), or null.
  const NumberBounds* Bounds() const;
  // Whether the number so far is in its bounds, if it has any.
  bool NumberWithinBounds() const;
  bool ContinuesNumber(unsigned char b);
  bool StartValue(unsigned char b, int32_t node);
  bool StartKey(unsigned char b);
  bool PropertyKeyByte(unsigned char b);
  bool StringByte(unsigned char b);
  // A string's code point `code_point` ends: stepped through the string's
  // pattern, if any; false when no match could follow within its lengths.
  bool PatternStep(uint32_t code_point);
  // The pattern's state after `symbol` within the string's lengths, or -1.
  int32_t PatternNext(int symbol) const;
  bool PatternMayTakeOneOf(uint32_t low, uint32_t high) const;
  bool Open(int32_t node, bool object);
  bool CloseObject();
  bool CloseArray();
  bool MayTakeAnotherKey() const;
  void EndValue();
  // An enum's value ends: its index `which` (an alternative, in an object
  // told apart by its first property).
  void EndEnumValue(int32_t which);
  // Object with properties: the property indices the next key may name.
  int32_t WindowHigh() const;

  const CompiledJsonSchema* schema_;
  uint16_t horizon_ = 65535;
  Scalars s_;
  std::array<Frame, kMaxJsonDepth> frames_;  // [0, depth): the open containers, innermost last
};

}  // namespace dslaunch::runtime
