#include "runtime/generate/json_schema_automaton.h"

#include <algorithm>

#include "common/utf8.h"

namespace dslaunch::runtime {
namespace {

bool IsJsonWhitespace(unsigned char b) { return b == ' ' || b == '\t' || b == '\n' || b == '\r'; }
bool IsDigit(unsigned char b) { return b >= '0' && b <= '9'; }
bool IsHex(unsigned char b) { return IsDigit(b) || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F'); }
int HexDigitValue(unsigned char b) { return IsDigit(b) ? b - '0' : (b | 0x20) - 'a' + 10; }

constexpr const char* kLiterals[] = {"true", "false", "null"};

}  // namespace

JsonSchemaAutomaton::JsonSchemaAutomaton(const CompiledJsonSchema* schema) : schema_(schema) {
  s_.value_node = schema->root();
}

JsonSchemaAutomaton& JsonSchemaAutomaton::operator=(const JsonSchemaAutomaton& other) {
  schema_ = other.schema_;
  horizon_ = other.horizon_;
  s_ = other.s_;
  std::copy_n(other.frames_.begin(), other.s_.depth, frames_.begin());
  return *this;
}

bool JsonSchemaAutomaton::Step(unsigned char b) {
  // A value that may end before this byte: a number, or an enum value that
  // another of its values extends ("1" and "12").
  if (IsNumber()) {
    if (ContinuesNumber(b)) return true;
    if (!NumberMayEnd() || !NumberWithinBounds()) return false;
    EndValue();  // the byte is read after the number
  } else if (s_.mode == kEnum) {
    const ByteTrie& values = Node(s_.value_node).enum_values;
    const int32_t child = values.Child(s_.trie, b);
    if (child >= 0) {
      s_.trie = child;
      if (values.Terminal(child) >= 0 && !values.HasChildren(child)) EndEnumValue(values.Terminal(child));
      return true;
    }
    if (values.Terminal(s_.trie) < 0) return false;
    EndEnumValue(values.Terminal(s_.trie));
  }
  switch (s_.mode) {
    case kString:
      return StringByte(b);
    case kEscape:
      if (b == 'u') {
        s_.mode = kUnicode;
        s_.count = 4;
        if (s_.pair == kLowEscapeDue) s_.pair = kLowEscape;
        return true;  // '\\' was taken only where some escape's code point steps the pattern
      }
      if (s_.pair == kLowEscapeDue) return false;
      if (b == '"' || b == '\\' || b == '/' || b == 'b' || b == 'f' || b == 'n' || b == 'r' || b == 't') {
        s_.mode = kString;
        const uint32_t decoded = b == 'b' ? '\b' : b == 'f' ? '\f' : b == 'n' ? '\n' : b == 'r' ? '\r' : b == 't' ? '\t' : b;
        return PatternStep(decoded);
      }
      return false;
    case kUnicode: {
      if (!IsHex(b)) return false;
      const bool d = s_.first_hex == 'd' || s_.first_hex == 'D';
      s_.code_point = (s_.count == 4 ? 0 : s_.code_point << 4) | static_cast<uint32_t>(HexDigitValue(b));
      if (s_.count == 4) {
        if (s_.pair == kLowEscape && b != 'd' && b != 'D') return false;
        s_.first_hex = b;
      } else if (s_.count == 3 && d) {
        const bool high = b == '8' || b == '9' || b == 'a' || b == 'b' || b == 'A' || b == 'B';
        const bool low = !IsDigit(b) && !high;  // c-f
        if (s_.pair == kLowEscape ? !low : low) return false;
        if (high) s_.pair = kHighEscape;
      } else if (s_.count == 3 && s_.pair == kLowEscape) {
        return false;
      }
      if (--s_.count == 0) {
        s_.mode = kString;
        // A pair is one code point, stepped at its first half (any one
        // outside the BMP: not ASCII, not a line separator).
        const bool low_half = s_.pair == kLowEscape;
        const uint32_t code_point = s_.pair == kHighEscape ? 0x10000 : s_.code_point;
        s_.pair = s_.pair == kHighEscape ? kLowDue : kNoPair;
        if (!low_half) return PatternStep(code_point);
        return true;
      }
      // The digits so far leave some code point the pattern takes.
      if (s_.pair == kLowEscape) return true;
      const uint32_t shift = 4u * s_.count;
      return PatternMayTakeOneOf(s_.code_point << shift, ((s_.code_point + 1) << shift) - 1);
    }
    case kPropertyKey:
      return PropertyKeyByte(b);
    case kLiteral: {
      const char* literal = kLiterals[s_.literal];
      if (b != static_cast<unsigned char>(literal[s_.count])) return false;
      if (literal[++s_.count] == '\0') EndValue();
      return true;
    }
    case kDone:
      return false;
    default:
      break;
  }
  // Between tokens of the grammar.
  if (IsJsonWhitespace(b)) {
    if (s_.whitespace >= kMaxJsonWhitespaceRun) return false;
    ++s_.whitespace;
    return true;
  }
  s_.whitespace = 0;
  switch (s_.mode) {
    case kValue:
      return StartValue(b, s_.value_node);
    case kArrayFirst: {
      if (b == ']') return CloseArray();
      const SchemaNode& array = Node(Top().node);
      if (array.max_items == 0) return false;
      s_.value_node = array.items;
      return StartValue(b, array.items);
    }
    case kObjectFirst:
      if (b == '}') return CloseObject();
      return StartKey(b);
    case kObjectKey:
      return StartKey(b);
    case kColon:
      if (b != ':') return false;
      s_.mode = kValue;
      return true;
    case kAfterValue:
      if (b == ',') {
        if (Top().object) {
          if (!MayTakeAnotherKey()) return false;
          s_.mode = kObjectKey;
          return true;
        }
        const SchemaNode& array = Node(Top().node);
        if (Top().index >= array.max_items) return false;
        s_.value_node = array.items;
        s_.mode = kValue;
        return true;
      }
      if (b == '}') return Top().object && CloseObject();
      if (b == ']') return !Top().object && CloseArray();
      return false;
    default:
      return false;
  }
}

bool JsonSchemaAutomaton::Complete() const {
  if (s_.mode == kDone) return true;
  if (s_.depth != 0) return false;
  if (IsNumber()) return NumberMayEnd() && NumberWithinBounds();
  return s_.mode == kEnum && Node(s_.value_node).enum_values.Terminal(s_.trie) >= 0;
}

bool JsonSchemaAutomaton::Finished() const { return s_.mode == kDone; }

std::string JsonSchemaAutomaton::Key() const {
  const Mode mode = s_.mode;
  const bool in_string = mode == kString || mode == kEscape || mode == kUnicode;
  const bool lengths = in_string && Node(s_.string_node).bounded_string();
  const bool counting = IsNumber() || mode == kLiteral || mode == kUnicode;
  const bool in_trie = mode == kPropertyKey || mode == kEnum;
  const bool value_due = mode == kValue || mode == kColon || mode == kEnum;
  std::string key = schema_->key_prefix();
  const char scalars[] = {static_cast<char>(mode),
                          static_cast<char>(in_string && s_.key),
                          static_cast<char>(IsNumber() && s_.integer),
                          static_cast<char>(IsNumber() ? s_.exponent_digits : 0),
                          static_cast<char>(IsNumber() && s_.negative),
                          static_cast<char>(in_string ? s_.utf8 : 0),
                          static_cast<char>(in_string ? s_.utf8_low : 0),
                          static_cast<char>(in_string ? s_.utf8_high : 0),
                          static_cast<char>(counting ? s_.count : 0),
                          static_cast<char>(mode == kLiteral ? s_.literal : 0),
                          static_cast<char>(s_.whitespace),
                          static_cast<char>(mode == kUnicode && s_.count == 3 ? s_.first_hex : 0),
                          static_cast<char>(in_string ? s_.pair : 0),
                          static_cast<char>(s_.depth)};
  key.append(scalars, sizeof(scalars));
  // A string's lengths: the code points still due and the room left, each
  // up to the horizon.
  // Beside a pattern, exact: the pattern's fewest and most code points to a
  // match are weighed against them.
  const bool patterned = in_string && s_.pattern_state >= 0;
  const int64_t horizon = patterned ? 65535 : horizon_;
  uint16_t lengths_left[2] = {0, 0};
  if (lengths) {
    const SchemaNode& string = Node(s_.string_node);
    lengths_left[0] = static_cast<uint16_t>(std::min<int64_t>(std::max<int64_t>(string.min_length - s_.chars, 0), horizon));
    lengths_left[1] = string.max_length < 0 ? uint16_t{65535}
                                            : static_cast<uint16_t>(std::min<int64_t>(string.max_length - s_.chars, horizon));
  }
  // A pattern's state, and the bits of a code point it has not seen yet.
  const bool mid_code_point =
      patterned && (s_.utf8 > 0 || (mode == kUnicode && s_.count < 4 && s_.pair != kLowEscape));
  const int32_t pattern[] = {patterned ? s_.string_node : -1, patterned ? s_.pattern_state : -1,
                             mid_code_point ? static_cast<int32_t>(s_.code_point) : 0};
  key.append(reinterpret_cast<const char*>(pattern), sizeof(pattern));
  const bool bounded = IsNumber() && Node(s_.number_node).number_bounds >= 0;
  const int32_t nodes_and_trie[] = {value_due ? s_.value_node : 0, lengths ? s_.string_node : 0,
                                    in_trie ? s_.trie : 0, bounded ? s_.number_node : 0};
  const NumberBounds::Cursor cursor = bounded ? s_.bounds : NumberBounds::Cursor{};
  const char number[] = {static_cast<char>(cursor.phase),       static_cast<char>(cursor.negative),
                         static_cast<char>(cursor.int_digits),  static_cast<char>(cursor.frac_digits),
                         static_cast<char>(cursor.low),         static_cast<char>(cursor.high),
                         static_cast<char>(cursor.remainder & 0xFF), static_cast<char>(cursor.remainder >> 8)};
  key.append(number, sizeof(number));
  key.append(reinterpret_cast<const char*>(lengths_left), sizeof(lengths_left));
  key.append(reinterpret_cast<const char*>(nodes_and_trie), sizeof(nodes_and_trie));
  for (uint8_t d = 0; d < s_.depth; ++d) {
    const Frame& frame = frames_[d];
    // An object's index is the next property it may take; an array's, its
    // items so far, of which only the items still due and the room left
    // matter, each up to the horizon (a token of N bytes ends at most N
    // items), so that a long array's items share their sets.
    uint16_t index = frame.index, room = 0;
    if (!frame.object) {
      const SchemaNode& array = Node(frame.node);
      index = static_cast<uint16_t>(std::min<int64_t>(std::max<int64_t>(array.min_items - frame.index, 0), horizon_));
      room = static_cast<uint16_t>(std::min<int64_t>(array.max_items - frame.index, horizon_));
    }
    const char bytes[] = {static_cast<char>(frame.node & 0xFF), static_cast<char>(frame.node >> 8),
                          static_cast<char>(index & 0xFF),      static_cast<char>(index >> 8),
                          static_cast<char>(room & 0xFF),       static_cast<char>(room >> 8),
                          static_cast<char>(frame.object)};
    key.append(bytes, sizeof(bytes));
  }
  return key;
}

const NumberBounds* JsonSchemaAutomaton::Bounds() const {
  const int32_t id = Node(s_.number_node).number_bounds;
  return id < 0 ? nullptr : &schema_->number_bounds(id);
}

bool JsonSchemaAutomaton::NumberWithinBounds() const {
  const NumberBounds* bounds = Bounds();
  return bounds == nullptr || bounds->MayEnd(s_.bounds);
}

bool JsonSchemaAutomaton::NumberMayEnd() const {
  return s_.mode == kNumZero || s_.mode == kNumInt || s_.mode == kNumFrac || s_.mode == kNumExpDigits;
}

bool JsonSchemaAutomaton::ContinuesNumber(unsigned char b) {
  if (s_.count >= kMaxJsonNumberBytes) return false;
  const Mode mode = s_.mode;
  Mode next = mode;
  switch (mode) {
    case kNumMinus:
      next = b == '0' ? kNumZero : (IsDigit(b) ? kNumInt : mode);
      break;
    case kNumZero:
    case kNumInt:
      if (mode == kNumInt && IsDigit(b)) next = kNumInt;
      if (!s_.integer && b == '.') next = kNumDot;
      if (!s_.integer && (b == 'e' || b == 'E')) next = kNumExp;
      break;
    case kNumDot:
      if (IsDigit(b)) next = kNumFrac;
      break;
    case kNumFrac:
      if (IsDigit(b)) next = kNumFrac;
      if (b == 'e' || b == 'E') next = kNumExp;
      break;
    case kNumExp:
      if (b == '+' || b == '-') next = kNumExpSign;
      if (IsDigit(b)) next = kNumExpDigits;
      break;
    case kNumExpSign:
    case kNumExpDigits:
      if (IsDigit(b)) next = kNumExpDigits;
      break;
    default:
      break;
  }
  // Staying in a mode only reads a digit.
  const bool moved = next != mode || ((mode == kNumInt || mode == kNumFrac || mode == kNumExpDigits) && IsDigit(b));
  if (!moved) return false;
  if (next == kNumExpDigits && s_.exponent_digits >= kMaxJsonExponentDigits) return false;
  // A mode a number cannot end in ('-', '.', 'e', a sign) needs room for a digit after it.
  const bool may_end = next == kNumZero || next == kNumInt || next == kNumFrac || next == kNumExpDigits;
  if (!may_end && s_.count + 1 >= kMaxJsonNumberBytes) return false;
  // A bounded number's byte: only one that leaves a way into the range
  // (and no exponent).
  NumberBounds::Cursor cursor = s_.bounds;
  if (const NumberBounds* bounds = Bounds(); bounds != nullptr && !bounds->Step(cursor, b)) return false;
  if (next == kNumExp) s_.exponent_digits = 0;
  if (next == kNumExpDigits) ++s_.exponent_digits;
  s_.bounds = cursor;
  s_.mode = next;
  ++s_.count;
  return true;
}

bool JsonSchemaAutomaton::StartValue(unsigned char b, int32_t node_id) {
  if (Node(node_id).is_union) {
    node_id = Node(node_id).by_first_byte[b];
    if (node_id < 0) return false;
  }
  const SchemaNode& node = Node(node_id);
  if (node.has_enum) {
    const int32_t child = node.enum_values.Child(0, b);
    if (child < 0) return false;
    s_.mode = kEnum;
    s_.value_node = node_id;
    s_.trie = child;
    if (node.enum_values.Terminal(child) >= 0 && !node.enum_values.HasChildren(child)) {
      EndEnumValue(node.enum_values.Terminal(child));
    }
    return true;
  }
  const bool numbers = (node.types & (kJsonIntegerBit | kJsonNumberBit)) != 0;
  switch (b) {
    case '{':
      return (node.types & kJsonObjectBit) != 0 && Open(node_id, true);
    case '[':
      return (node.types & kJsonArrayBit) != 0 && Open(node_id, false);
    case '"':
      if ((node.types & kJsonStringBit) == 0) return false;
      s_.mode = kString;
      s_.key = false;
      s_.utf8 = 0;
      s_.pair = kNoPair;
      s_.chars = 0;
      s_.string_node = node_id;
      s_.pattern_state = node.pattern >= 0 ? 0 : -1;
      // A string of at most 0 code points is "" only.
      return true;
    case 't':
    case 'f':
    case 'n':
      if ((node.types & (b == 'n' ? kJsonNullBit : kJsonBooleanBit)) == 0) return false;
      s_.mode = kLiteral;
      s_.literal = b == 't' ? 0 : b == 'f' ? 1 : 2;
      s_.count = 1;
      return true;
    default: {
      if (!numbers || !(b == '-' || IsDigit(b))) return false;
      NumberBounds::Cursor cursor;
      if (node.number_bounds >= 0 && !schema_->number_bounds(node.number_bounds).Step(cursor, b)) return false;
      const bool negative = b == '-';
      s_.number_node = node_id;
      s_.integer = (node.types & kJsonNumberBit) == 0;
      s_.negative = negative;
      s_.bounds = cursor;
      s_.mode = negative ? kNumMinus : b == '0' ? kNumZero : kNumInt;
      s_.count = 1;
      return true;
    }
  }
}

bool JsonSchemaAutomaton::MayTakeAnotherKey() const {
  const SchemaNode& object = Node(Top().node);
  if (object.properties.empty()) return object.additional >= 0;
  return Top().index < object.properties.size();
}

int32_t JsonSchemaAutomaton::WindowHigh() const {
  const SchemaNode& object = Node(Top().node);
  const int32_t n = static_cast<int32_t>(object.properties.size());
  return std::min(object.next_required[Top().index], n - 1);
}

bool JsonSchemaAutomaton::StartKey(unsigned char b) {
  if (b != '"') return false;
  const SchemaNode& object = Node(Top().node);
  if (object.properties.empty()) {
    if (object.additional < 0) return false;
    s_.mode = kString;
    s_.key = true;
    s_.utf8 = 0;
    s_.pair = kNoPair;
    s_.chars = 0;
    // A key of any length, or one that patternProperties' patterns match,
    // or that propertyNames accepts (its pattern, if it has one; its lengths).
    s_.string_node = object.key_node >= 0 ? object.key_node : 0;
    s_.pattern_state = Node(s_.string_node).pattern >= 0 ? 0 : -1;
    return true;
  }
  if (Top().index >= object.properties.size()) return false;
  s_.mode = kPropertyKey;
  s_.trie = 0;
  return true;
}

bool JsonSchemaAutomaton::PropertyKeyByte(unsigned char b) {
  const SchemaNode& object = Node(Top().node);
  const int32_t low = Top().index, high = WindowHigh();
  const int32_t child = object.property_names.Child(s_.trie, b);
  if (child >= 0 && object.property_names.HoldsBelow(child, low, high)) {
    s_.trie = child;
    return true;
  }
  // The closing quote: a '"' inside a name is escaped, so a name's own '"'
  // only follows a backslash, where no name ends.
  const int32_t property = object.property_names.Terminal(s_.trie);
  if (b != '"' || property < low || property > high) return false;
  Top().index = static_cast<uint16_t>(property + 1);
  s_.value_node = object.properties[static_cast<size_t>(property)].node;
  s_.mode = kColon;
  return true;
}

bool JsonSchemaAutomaton::StringByte(unsigned char b) {
  if (s_.utf8 > 0) {  // a continuation byte is due (the first within [utf8_low, utf8_high])
    if (b < s_.utf8_low || b > s_.utf8_high) return false;
    s_.utf8_low = 0x80;
    s_.utf8_high = 0xBF;
    s_.code_point = (s_.code_point << 6) | (b & 0x3Fu);
    if (--s_.utf8 == 0) return PatternStep(s_.code_point);
    // Only a line separator (E2 80 A8 or A9) may come: E2 80 so far.
    return s_.pattern_state < 0 || PatternNext(kNonAsciiSymbol) >= 0 || s_.code_point == 0x80;
  }
  if (s_.pair == kLowDue) {  // the second half of a surrogate pair, in the same code point
    if (b != '\\') return false;
    s_.mode = kEscape;
    s_.pair = kLowEscapeDue;
    return true;
  }
  const SchemaNode& node = Node(s_.string_node);
  const bool lengths = node.bounded_string();
  if (b == '"') {
    if (s_.key) {
      if (lengths && s_.chars < node.min_length) return false;  // propertyNames' minLength
      if (s_.pattern_state >= 0 && !schema_->pattern(node.pattern).Matches(s_.pattern_state)) return false;
      s_.mode = kColon;
      s_.value_node = Node(Top().node).additional;
      return true;
    }
    if (lengths && s_.chars < node.min_length) return false;
    if (s_.pattern_state >= 0 && !schema_->pattern(node.pattern).Matches(s_.pattern_state)) return false;
    EndValue();
    return true;
  }
  // A character begins.
  if (lengths && node.max_length >= 0 && s_.chars >= node.max_length) return false;
  if (b == '\\') {
    s_.mode = kEscape;
  } else if (b < 0x20) {
    return false;  // control characters go escaped
  } else if (b >= 0x80) {
    // RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF.
    const Utf8Lead lead = dslaunch::Utf8LeadOf(b);
    if (lead.continuations == 0) return false;  // not a lead byte
    s_.utf8 = lead.continuations;
    s_.utf8_low = lead.low;
    s_.utf8_high = lead.high;
    s_.code_point = b & (0x7Fu >> (lead.continuations + 1));
  }
  if (lengths && s_.chars < UINT16_MAX) ++s_.chars;  // lengths are at most 65535: saturating is exact
  if (b == '\\') return PatternMayTakeOneOf(0, 0xFFFF);
  if (b >= 0x80) return PatternMayTakeOneOf(0x80, 0x10FFFF) && (b == 0xE2 || s_.pattern_state < 0 ||
                                                                 PatternNext(kNonAsciiSymbol) >= 0);
  return PatternStep(b);
}

int32_t JsonSchemaAutomaton::PatternNext(int symbol) const {
  const SchemaNode& node = Node(s_.string_node);
  const StringPattern& pattern = schema_->pattern(node.pattern);
  const int32_t next = pattern.Next(s_.pattern_state, symbol);
  if (next < 0) return -1;
  // The code points still to come fit the string's lengths (chars counts this one).
  if (node.max_length >= 0 && pattern.Fewest(next) > node.max_length - s_.chars) return -1;
  if (pattern.Most(next) != kUnboundedPatternLength && s_.chars + pattern.Most(next) < node.min_length) return -1;
  return next;
}

bool JsonSchemaAutomaton::PatternStep(uint32_t code_point) {
  if (s_.pattern_state < 0) return true;
  const int32_t next = PatternNext(PatternSymbolOf(code_point));
  if (next < 0) return false;
  s_.pattern_state = next;
  return true;
}

// Whether a code point in [low, high] (a \u escape's digits so far) could
// step the pattern: a byte that begins a code point none of whose endings
// the pattern takes would leave the string no way on.
bool JsonSchemaAutomaton::PatternMayTakeOneOf(uint32_t low, uint32_t high) const {
  if (s_.pattern_state < 0) return true;
  for (uint32_t c = low; c <= std::min<uint32_t>(high, 0x7F); ++c) {
    if (PatternNext(static_cast<int>(c)) >= 0) return true;
  }
  if (high >= 0x2028 && low <= 0x2029 && PatternNext(kLineSeparatorSymbol) >= 0) return true;
  if (PatternNext(kNonAsciiSymbol) < 0) return false;
  // A non-ASCII code point in range other than the line separators and
  // the low surrogates (a high one begins a pair: one code point past the BMP).
  for (uint32_t c = std::max<uint32_t>(low, 0x80); c <= high;) {
    if (c == 0x2028 || c == 0x2029) {
      c = 0x202A;
    } else if (c >= 0xDC00 && c <= 0xDFFF) {
      c = 0xE000;
    } else {
      return true;
    }
  }
  return false;
}

bool JsonSchemaAutomaton::Open(int32_t node, bool object) {
  if (s_.depth >= kMaxJsonDepth) return false;
  frames_[s_.depth++] = Frame{static_cast<uint16_t>(node), 0, static_cast<uint8_t>(object)};
  s_.mode = object ? kObjectFirst : kArrayFirst;
  return true;
}

bool JsonSchemaAutomaton::CloseObject() {
  const SchemaNode& object = Node(Top().node);
  if (!object.properties.empty() && object.next_required[Top().index] < static_cast<int32_t>(object.properties.size())) {
    return false;  // a required property is still due
  }
  --s_.depth;
  EndValue();
  return true;
}

bool JsonSchemaAutomaton::CloseArray() {
  if (Top().index < Node(Top().node).min_items) return false;
  --s_.depth;
  EndValue();
  return true;
}

void JsonSchemaAutomaton::EndEnumValue(int32_t which) {
  EndValue();
  if (s_.depth == 0 || !Top().object) return;
  const SchemaNode& object = Node(Top().node);
  if (object.discriminated.empty()) return;
  // The first property's value names the alternative; the object goes on as
  // that one, past its first property.
  Top().node = static_cast<uint16_t>(object.discriminated[static_cast<size_t>(which)]);
  Top().index = 1;
}

void JsonSchemaAutomaton::EndValue() {
  s_.count = 0;
  s_.whitespace = 0;
  if (s_.depth == 0) {
    s_.mode = kDone;
    return;
  }
  s_.mode = kAfterValue;
  if (!Top().object && Top().index < UINT16_MAX) ++Top().index;
}

}  // namespace dslaunch::runtime
