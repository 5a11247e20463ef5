#include "runtime/tokenizer/json_value.h"

#include <charconv>
#include <cmath>
#include <cstdlib>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/json_quote.h"

namespace dslaunch::runtime {

const JsonValue* JsonValue::Find(absl::string_view key) const {
  if (type_ != Type::kObject) return nullptr;
  for (size_t i = 0; i < keys_.size(); ++i) {
    if (keys_[i] == key) return &items_[i];
  }
  return nullptr;
}

const char* JsonValue::TypeName(Type type) {
  switch (type) {
    case Type::kNull: return "null";
    case Type::kBool: return "a bool";
    case Type::kNumber: return "a number";
    case Type::kString: return "a string";
    case Type::kArray: return "an array";
    case Type::kObject: return "an object";
  }
  return "?";
}

namespace {

void AppendJson(const JsonValue& value, std::string* out) {
  switch (value.type()) {
    case JsonValue::Type::kNull:
      out->append("null");
      return;
    case JsonValue::Type::kBool:
      out->append(value.bool_value() ? "true" : "false");
      return;
    case JsonValue::Type::kNumber: {
      // Integers in plain digits below 2^53, where a double holds them all (100000,
      // not to_chars' shortest 1e+05); other numbers in their shortest form.
      char buffer[40];
      const double number = value.number_value();
      const bool integer = std::floor(number) == number && std::fabs(number) < 9007199254740992.0;
      const auto written = integer ? std::to_chars(buffer, buffer + sizeof(buffer), number, std::chars_format::fixed, 0)
                                   : std::to_chars(buffer, buffer + sizeof(buffer), number);
      out->append(buffer, written.ptr);
      return;
    }
    case JsonValue::Type::kString:
      out->append(JsonQuote(value.string_value()));
      return;
    case JsonValue::Type::kArray:
    case JsonValue::Type::kObject: {
      const bool object = value.is_object();
      out->push_back(object ? '{' : '[');
      for (size_t i = 0; i < value.items().size(); ++i) {
        if (i > 0) out->push_back(',');
        if (object) {
          out->append(JsonQuote(value.keys()[i]));
          out->push_back(':');
        }
        AppendJson(value.items()[i], out);
      }
      out->push_back(object ? '}' : ']');
      return;
    }
  }
}

}  // namespace

std::string SerializeJson(const JsonValue& value) {
  std::string out;
  AppendJson(value, &out);
  return out;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// A recursive-descent parser over the whole text. Not thread-safe; one per
// ParseJson call.
class JsonParser {
 public:
  JsonParser(absl::string_view text, absl::string_view source, bool last_key_wins = false)
      : text_(text), source_(source), last_key_wins_(last_key_wins) {}

  absl::StatusOr<JsonValue> ParseDocument() {
    JsonValue value;
    SkipSpace();
    if (!ParseValue(&value, 0)) return error_;
    SkipSpace();
    if (pos_ != text_.size()) {
      Fail("text after the JSON value");
      return error_;
    }
    return value;
  }

 private:
  static constexpr int kMaxDepth = 256;
  // Objects with more members than this check duplicates with a hash set.
  static constexpr size_t kLinearDuplicateCheck = 16;

  // Records the first error at the current position; returns false.
  bool Fail(absl::string_view problem) {
    if (!error_.ok()) return false;
    int line = 1, column = 1;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else if ((static_cast<unsigned char>(text_[i]) & 0xC0) != 0x80) {
        ++column;
      }
    }
    error_ = absl::InvalidArgumentError(absl::StrCat(source_, ":", line, ":", column, ": ", problem));
    return false;
  }

  void SkipSpace() {
    while (pos_ < text_.size()) {
      char c = text_[pos_];
      if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
      ++pos_;
    }
  }

  bool Consume(absl::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  bool ParseValue(JsonValue* value, int depth) {
    if (depth > kMaxDepth) return Fail("nested deeper than 256 levels");
    if (pos_ >= text_.size()) return Fail("unexpected end of input, expected a value");
    char c = text_[pos_];
    switch (c) {
      case '{': return ParseObject(value, depth);
      case '[': return ParseArray(value, depth);
      case '"':
        value->type_ = JsonValue::Type::kString;
        return ParseString(&value->text_);
      case 't':
      case 'f':
      case 'n':
        if (Consume("true")) {
          value->type_ = JsonValue::Type::kBool;
          value->number_ = 1;
          return true;
        }
        if (Consume("false")) {
          value->type_ = JsonValue::Type::kBool;
          return true;
        }
        if (Consume("null")) return true;
        return Fail("invalid literal");
      default:
        if (c == '-' || (c >= '0' && c <= '9')) return ParseNumber(value);
        return Fail(absl::StrCat("unexpected character '", absl::string_view(&text_[pos_], 1), "'"));
    }
  }

  bool ParseObject(JsonValue* value, int depth) {
    value->type_ = JsonValue::Type::kObject;
    ++pos_;  // '{'
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == '}') {
      ++pos_;
      return true;
    }
    // Small objects check duplicates by scanning their keys; large ones
    // (a vocabulary) through a set of copies.
    absl::flat_hash_map<std::string, size_t> seen;  // key -> its member's index
    while (true) {
      SkipSpace();
      if (pos_ >= text_.size() || text_[pos_] != '"') return Fail("expected a string key");
      const size_t key_pos = pos_;
      std::string key;
      if (!ParseString(&key)) return false;
      bool duplicate = false;
      size_t member = value->keys_.size();
      if (value->keys_.size() < kLinearDuplicateCheck) {
        for (size_t k = 0; k < value->keys_.size() && !duplicate; ++k) {
          duplicate = value->keys_[k] == key;
          member = duplicate ? k : member;
        }
      } else {
        if (seen.empty()) {
          for (size_t k = 0; k < value->keys_.size(); ++k) seen.emplace(value->keys_[k], k);
        }
        auto [it, added] = seen.emplace(key, value->keys_.size());
        duplicate = !added;
        member = it->second;
      }
      if (duplicate && !last_key_wins_) {
        pos_ = key_pos;
        return Fail(absl::StrCat("duplicate key \"", key, "\""));
      }
      if (!duplicate) {
        value->keys_.push_back(std::move(key));
        value->items_.emplace_back();
      }
      SkipSpace();
      if (pos_ >= text_.size() || text_[pos_] != ':') return Fail("expected ':' after the key");
      ++pos_;
      SkipSpace();
      value->items_[member] = JsonValue();  // a repeated key's last value, in its first place
      if (!ParseValue(&value->items_[member], depth + 1)) return false;
      SkipSpace();
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < text_.size() && text_[pos_] == '}') {
        ++pos_;
        return true;
      }
      return Fail("expected ',' or '}' in an object");
    }
  }

  bool ParseArray(JsonValue* value, int depth) {
    value->type_ = JsonValue::Type::kArray;
    ++pos_;  // '['
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == ']') {
      ++pos_;
      return true;
    }
    while (true) {
      SkipSpace();
      value->items_.emplace_back();
      if (!ParseValue(&value->items_.back(), depth + 1)) return false;
      SkipSpace();
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < text_.size() && text_[pos_] == ']') {
        ++pos_;
        return true;
      }
      return Fail("expected ',' or ']' in an array");
    }
  }

  bool ParseHex4(uint32_t* out) {
    if (pos_ + 4 > text_.size()) return Fail("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      char c = text_[pos_ + i];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= c - '0';
      else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
      else return Fail("invalid \\u escape (four hex digits expected)");
    }
    pos_ += 4;
    *out = v;
    return true;
  }

  // One UTF-8 sequence of raw text, validated (no overlong forms, no
  // surrogates, nothing past U+10FFFF).
  bool CopyUtf8Sequence(std::string* out) {
    const unsigned char lead = static_cast<unsigned char>(text_[pos_]);
    int length = 0;
    uint32_t cp = 0, min = 0;
    if (lead >= 0xC2 && lead <= 0xDF) length = 2, cp = lead & 0x1F, min = 0x80;
    else if (lead >= 0xE0 && lead <= 0xEF) length = 3, cp = lead & 0x0F, min = 0x800;
    else if (lead >= 0xF0 && lead <= 0xF4) length = 4, cp = lead & 0x07, min = 0x10000;
    else return Fail("invalid UTF-8");
    if (pos_ + length > text_.size()) return Fail("truncated UTF-8 sequence");
    for (int i = 1; i < length; ++i) {
      const unsigned char c = static_cast<unsigned char>(text_[pos_ + i]);
      if ((c & 0xC0) != 0x80) return Fail("invalid UTF-8");
      cp = (cp << 6) | (c & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return Fail("invalid UTF-8");
    out->append(text_.data() + pos_, length);
    pos_ += length;
    return true;
  }

  bool ParseString(std::string* out) {
    ++pos_;  // '"'
    while (true) {
      // The common case: a run of plain ASCII copied at once.
      size_t run = pos_;
      while (run < text_.size()) {
        const unsigned char c = static_cast<unsigned char>(text_[run]);
        if (c == '"' || c == '\\' || c < 0x20 || c >= 0x80) break;
        ++run;
      }
      out->append(text_.data() + pos_, run - pos_);
      pos_ = run;
      if (pos_ >= text_.size()) return Fail("unterminated string");
      const unsigned char c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') {
        ++pos_;
        return true;
      }
      if (c < 0x20) return Fail("raw control character in a string (escape it)");
      if (c >= 0x80) {
        if (!CopyUtf8Sequence(out)) return false;
        continue;
      }
      // A backslash escape.
      ++pos_;
      if (pos_ >= text_.size()) return Fail("unterminated string");
      const char e = text_[pos_++];
      switch (e) {
        case '"': out->push_back('"'); break;
        case '\\': out->push_back('\\'); break;
        case '/': out->push_back('/'); break;
        case 'b': out->push_back('\b'); break;
        case 'f': out->push_back('\f'); break;
        case 'n': out->push_back('\n'); break;
        case 'r': out->push_back('\r'); break;
        case 't': out->push_back('\t'); break;
        case 'u': {
          uint32_t cp = 0;
          if (!ParseHex4(&cp)) return false;
          if (cp >= 0xDC00 && cp <= 0xDFFF) {
            pos_ -= 6;
            return Fail("lone low surrogate in a \\u escape");
          }
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            uint32_t low = 0;
            if (!Consume("\\u") || !ParseHex4(&low) || low < 0xDC00 || low > 0xDFFF) {
              return Fail("a high surrogate \\u escape must be followed by a low one");
            }
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          AppendUtf8(cp, out);
          break;
        }
        default:
          --pos_;
          return Fail("invalid escape in a string");
      }
    }
  }

  bool ParseNumber(JsonValue* value) {
    const size_t start = pos_;
    if (text_[pos_] == '-') ++pos_;
    auto digits = [&] {
      size_t n = 0;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_, ++n;
      return n;
    };
    if (pos_ < text_.size() && text_[pos_] == '0') {
      ++pos_;
    } else if (digits() == 0) {
      return Fail("invalid number");
    }
    if (pos_ < text_.size() && text_[pos_] == '.') {
      ++pos_;
      if (digits() == 0) return Fail("invalid number (digits expected after '.')");
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      if (digits() == 0) return Fail("invalid number (digits expected in the exponent)");
    }
    const std::string literal(text_.substr(start, pos_ - start));
    value->type_ = JsonValue::Type::kNumber;
    value->number_ = std::strtod(literal.c_str(), nullptr);
    if (!std::isfinite(value->number_)) {
      pos_ = start;
      return Fail("number out of range");
    }
    return true;
  }

  const absl::string_view text_;
  const absl::string_view source_;
  const bool last_key_wins_;
  size_t pos_ = 0;
  absl::Status error_;
};

absl::StatusOr<JsonValue> ParseJson(absl::string_view text, absl::string_view source) {
  return JsonParser(text, source).ParseDocument();
}

absl::StatusOr<JsonValue> ParseJsonLastKeyWins(absl::string_view text, absl::string_view source) {
  return JsonParser(text, source, /*last_key_wins=*/true).ParseDocument();
}

}  // namespace dslaunch::runtime
