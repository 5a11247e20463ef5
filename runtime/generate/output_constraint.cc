// Note [Constrained output].
#include "runtime/generate/output_constraint.h"

#include <algorithm>
#include <limits>
#include <map>
#include <unordered_map>

#include "absl/strings/str_cat.h"

namespace dslaunch::runtime {

TokenVocabulary::TokenVocabulary(const std::vector<std::string>& token_bytes)
    : size_(static_cast<int64_t>(token_bytes.size())), bytes_(token_bytes), nodes_(1) {
  // Children are found by a map while building, then kept sorted in vectors.
  std::vector<std::map<unsigned char, int32_t>> children(1);
  for (size_t id = 0; id < token_bytes.size(); ++id) {
    if (token_bytes[id].empty()) continue;
    int32_t node = 0;
    for (char c : token_bytes[id]) {
      const auto byte = static_cast<unsigned char>(c);
      auto it = children[static_cast<size_t>(node)].find(byte);
      if (it == children[static_cast<size_t>(node)].end()) {
        const auto next = static_cast<int32_t>(nodes_.size());
        nodes_.emplace_back();
        children.emplace_back();
        children[static_cast<size_t>(node)].emplace(byte, next);
        node = next;
      } else {
        node = it->second;
      }
    }
    nodes_[static_cast<size_t>(node)].tokens.push_back(static_cast<int32_t>(id));
  }
  for (size_t n = 0; n < nodes_.size(); ++n) {
    nodes_[n].children.assign(children[n].begin(), children[n].end());
  }
}

std::shared_ptr<const std::vector<char>> TokenVocabulary::Cached(const std::string& key) const {
  absl::MutexLock lock(&mu_);
  auto it = cache_.find(key);
  return it == cache_.end() ? nullptr : it->second;
}

void TokenVocabulary::Remember(const std::string& key, std::shared_ptr<const std::vector<char>> allowed) const {
  absl::MutexLock lock(&mu_);
  if (cache_.size() >= kCachedSets) cache_.clear();
  cache_[key] = std::move(allowed);
}

namespace {

bool IsJsonWhitespace(unsigned char b) { return b == ' ' || b == '\t' || b == '\n' || b == '\r'; }
bool IsDigit(unsigned char b) { return b >= '0' && b <= '9'; }
bool IsHex(unsigned char b) { return IsDigit(b) || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F'); }

constexpr const char* kLiterals[] = {"true", "false", "null"};

// A UTF-8 lead byte: how many continuation bytes follow, and the range of
// the first (RFC 3629's table). continuations 0: not a lead byte.
struct Utf8Lead {
  uint8_t continuations = 0, low = 0x80, high = 0xBF;
};
Utf8Lead Utf8LeadOf(unsigned char b) {
  if (b >= 0xC2 && b <= 0xDF) return {1, 0x80, 0xBF};
  if (b == 0xE0) return {2, 0xA0, 0xBF};
  if (b == 0xED) return {2, 0x80, 0x9F};
  if (b >= 0xE1 && b <= 0xEF) return {2, 0x80, 0xBF};
  if (b == 0xF0) return {3, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {3, 0x80, 0xBF};
  if (b == 0xF4) return {3, 0x80, 0x8F};
  return {};
}

// RFC 8259 over bytes, one top-level object, with the bounds of Note
// [Constrained output]. A value type: the walk copies it at every edge.
class JsonAutomaton {
 public:
  bool Step(unsigned char b) {
    if (IsNumber()) {
      if (ContinuesNumber(b)) return true;
      if (!NumberMayEnd()) return false;
      mode_ = kAfterValue;  // the number ends; the byte is read after it
      count_ = 0;
    }
    switch (mode_) {
      case kString:
        return StringByte(b);
      case kEscape:
        if (b == 'u') {
          mode_ = kUnicode;
          count_ = 4;
          return true;
        }
        if (b == '"' || b == '\\' || b == '/' || b == 'b' || b == 'f' || b == 'n' || b == 'r' || b == 't') {
          mode_ = kString;
          return true;
        }
        return false;
      case kUnicode:
        if (!IsHex(b)) return false;
        if (--count_ == 0) mode_ = kString;
        return true;
      case kLiteral: {
        const char* literal = kLiterals[literal_];
        if (b != static_cast<unsigned char>(literal[count_])) return false;
        if (literal[++count_] == '\0') EndValue();
        return true;
      }
      case kDone:
        return false;
      default:
        break;
    }
    // Between tokens of the grammar.
    if (IsJsonWhitespace(b)) {
      if (whitespace_ >= kMaxJsonWhitespaceRun) return false;
      ++whitespace_;
      return true;
    }
    whitespace_ = 0;
    switch (mode_) {
      case kStart:
        return b == '{' && Open('{');
      case kValue:
        return StartValue(b);
      case kArrayFirst:
        if (b == ']') return Close('[');
        return StartValue(b);
      case kObjectFirst:
        if (b == '}') return Close('{');
        return StartKey(b);
      case kObjectKey:
        return StartKey(b);
      case kColon:
        if (b != ':') return false;
        mode_ = kValue;
        return true;
      case kAfterValue:
        if (b == ',') {
          mode_ = Top() == '{' ? kObjectKey : kValue;
          return true;
        }
        return Close(b == '}' ? '{' : b == ']' ? '[' : '\0');
      default:
        return false;
    }
  }

  bool Complete() const { return mode_ == kDone; }
  bool Finished() const { return mode_ == kDone; }
  // The state, as bytes: the key of the allowed-token cache.
  // Fields a mode does not read are left out (they may hold an earlier
  // value's leftovers), so that equal states share one cached set.
  std::string Key() const {
    const bool in_string = mode_ == kString || mode_ == kEscape || mode_ == kUnicode;
    const bool counting = IsNumber() || mode_ == kLiteral || mode_ == kUnicode;
    std::string key = {'j',
                       static_cast<char>(mode_),
                       static_cast<char>(in_string && key_),
                       static_cast<char>(in_string ? utf8_ : 0),
                       static_cast<char>(in_string ? utf8_low_ : 0),
                       static_cast<char>(in_string ? utf8_high_ : 0),
                       static_cast<char>(counting ? count_ : 0),
                       static_cast<char>(mode_ == kLiteral ? literal_ : 0),
                       static_cast<char>(whitespace_)};
    key.append(reinterpret_cast<const char*>(&objects_), sizeof(objects_));
    key.push_back(static_cast<char>(depth_));
    return key;
  }

 private:
  enum Mode : uint8_t {
    kStart,        // before the top-level object
    kValue,        // a value is due
    kArrayFirst,   // after '[': a value or ']'
    kObjectFirst,  // after '{': a key or '}'
    kObjectKey,    // after ',' in an object: a key
    kColon,        // after a key
    kAfterValue,   // ',' or the container's close
    kString,
    kEscape,
    kUnicode,      // count_: hex digits due
    kNumMinus,     // count_ (all number modes): bytes so far
    kNumZero,
    kNumInt,
    kNumDot,
    kNumFrac,
    kNumExp,
    kNumExpSign,
    kNumExpDigits,
    kLiteral,      // literal_, count_: the next byte's index
    kDone,
  };

  bool IsNumber() const { return mode_ >= kNumMinus && mode_ <= kNumExpDigits; }
  bool NumberMayEnd() const { return mode_ == kNumZero || mode_ == kNumInt || mode_ == kNumFrac || mode_ == kNumExpDigits; }
  bool ContinuesNumber(unsigned char b) {
    if (count_ >= kMaxJsonNumberBytes) return false;
    Mode next = mode_;
    switch (mode_) {
      case kNumMinus:
        next = b == '0' ? kNumZero : (IsDigit(b) ? kNumInt : mode_);
        break;
      case kNumZero:
      case kNumInt:
        if (mode_ == kNumInt && IsDigit(b)) next = kNumInt;
        if (b == '.') next = kNumDot;
        if (b == 'e' || b == 'E') next = kNumExp;
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
    // Staying in a mode only reads a digit (or, from kNumInt, another digit).
    const bool moved = next != mode_ || ((mode_ == kNumInt || mode_ == kNumFrac || mode_ == kNumExpDigits) && IsDigit(b));
    if (!moved) return false;
    // A mode a number cannot end in ('.', 'e', a sign) needs room for a digit after it.
    const bool may_end = next == kNumZero || next == kNumInt || next == kNumFrac || next == kNumExpDigits;
    if (!may_end && count_ + 1 >= kMaxJsonNumberBytes) return false;
    mode_ = next;
    ++count_;
    return true;
  }

  bool StartValue(unsigned char b) {
    switch (b) {
      case '{':
        return Open('{');
      case '[':
        return Open('[');
      case '"':
        mode_ = kString;
        key_ = false;
        utf8_ = 0;
        return true;
      case '-':
        mode_ = kNumMinus;
        count_ = 1;
        return true;
      case 't':
      case 'f':
      case 'n':
        mode_ = kLiteral;
        literal_ = b == 't' ? 0 : b == 'f' ? 1 : 2;
        count_ = 1;
        return true;
      default:
        if (!IsDigit(b)) return false;
        mode_ = b == '0' ? kNumZero : kNumInt;
        count_ = 1;
        return true;
    }
  }
  bool StartKey(unsigned char b) {
    if (b != '"') return false;
    mode_ = kString;
    key_ = true;
    utf8_ = 0;
    return true;
  }
  bool StringByte(unsigned char b) {
    if (utf8_ > 0) {  // a continuation byte is due (the first within [utf8_low_, utf8_high_])
      if (b < utf8_low_ || b > utf8_high_) return false;
      utf8_low_ = 0x80;
      utf8_high_ = 0xBF;
      --utf8_;
      return true;
    }
    if (b == '"') {
      if (key_) {
        mode_ = kColon;
      } else {
        EndValue();
      }
      return true;
    }
    if (b == '\\') {
      mode_ = kEscape;
      return true;
    }
    if (b < 0x20) return false;  // control characters go escaped
    if (b < 0x80) return true;
    // RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF.
    const Utf8Lead lead = Utf8LeadOf(b);
    if (lead.continuations == 0) return false;  // not a lead byte
    utf8_ = lead.continuations;
    utf8_low_ = lead.low;
    utf8_high_ = lead.high;
    return true;
  }
  bool Open(char container) {
    if (depth_ >= kMaxJsonDepth) return false;
    const uint64_t bit = uint64_t{1} << depth_;
    objects_ = container == '{' ? objects_ | bit : objects_ & ~bit;
    ++depth_;
    mode_ = container == '{' ? kObjectFirst : kArrayFirst;
    return true;
  }
  bool Close(char container) {
    if (container == '\0' || depth_ == 0 || Top() != container) return false;
    --depth_;
    objects_ &= (uint64_t{1} << depth_) - 1;  // the bits above the depth stay zero: one key per state
    EndValue();
    return true;
  }
  void EndValue() {
    mode_ = depth_ == 0 ? kDone : kAfterValue;
    count_ = 0;
    whitespace_ = 0;
  }

  Mode mode_ = kStart;
  bool key_ = false;
  uint8_t utf8_ = 0;
  uint8_t utf8_low_ = 0x80, utf8_high_ = 0xBF;  // the next continuation byte's range
  uint8_t count_ = 0;
  uint8_t literal_ = 0;
  uint8_t whitespace_ = 0;
  // The open containers, innermost last: bit d of objects_ is set when the
  // container at depth d is an object (else an array). Kept in a word, not a
  // string, so that the trie walk copies the automaton for nothing.
  char Top() const { return (objects_ >> (depth_ - 1)) & 1 ? '{' : '['; }
  uint64_t objects_ = 0;
  uint8_t depth_ = 0;
};

// Exactly one of the choices.
class ChoiceAutomaton {
 public:
  explicit ChoiceAutomaton(std::shared_ptr<const std::vector<std::string>> choices) : choices_(std::move(choices)) {}
  bool Step(unsigned char b) {
    prefix_.push_back(static_cast<char>(b));
    for (const std::string& choice : *choices_) {
      if (choice.compare(0, prefix_.size(), prefix_) == 0 && choice.size() >= prefix_.size()) return true;
    }
    prefix_.pop_back();
    return false;
  }
  bool Complete() const {
    return std::find(choices_->begin(), choices_->end(), prefix_) != choices_->end();
  }
  bool Finished() const {
    if (!Complete()) return false;
    for (const std::string& choice : *choices_) {
      if (choice.size() > prefix_.size() && choice.compare(0, prefix_.size(), prefix_) == 0) return false;
    }
    return true;
  }
  // The choices themselves, then the prefix: forms of other choices never meet.
  std::string Key() const {
    std::string key = "choice";
    for (const std::string& choice : *choices_) absl::StrAppend(&key, choice.size(), ":", choice);
    return absl::StrCat(key, "|", prefix_);
  }

 private:
  std::shared_ptr<const std::vector<std::string>> choices_;
  std::string prefix_;
};

template <typename Automaton>
class AutomatonConstraint : public OutputConstraintState {
 public:
  AutomatonConstraint(Automaton start, std::shared_ptr<const TokenVocabulary> vocabulary)
      : state_(std::move(start)), vocabulary_(std::move(vocabulary)) {}

  // The tokens the state allows (one byte each, 1: allowed), kept in the
  // vocabulary's cache.
  std::shared_ptr<const std::vector<char>> Allowed() const {
    const std::string key = state_.Key();
    if (auto cached = vocabulary_->Cached(key)) return cached;
    auto allowed = std::make_shared<std::vector<char>>(static_cast<size_t>(vocabulary_->size()), 0);
    Walk(0, state_, *allowed);
    vocabulary_->Remember(key, allowed);
    return allowed;
  }

  bool Mask(torch::Tensor& logits, const std::vector<int64_t>& stop_tokens) override {
    TORCH_CHECK(logits.dim() == 1 && logits.size(0) >= vocabulary_->size(), "constrained output: logits ",
                logits.sizes(), " for a vocabulary of ", vocabulary_->size());
    std::vector<char> allowed = *Allowed();
    allowed.resize(static_cast<size_t>(logits.size(0)), 0);  // ids past the tokenizer's: never
    for (int64_t stop : stop_tokens) {
      if (stop >= 0 && stop < logits.size(0)) allowed[static_cast<size_t>(stop)] = state_.Complete() ? 1 : 0;
    }
    const bool any = std::any_of(allowed.begin(), allowed.end(), [](char a) { return a != 0; });
    const torch::Tensor keep =
        torch::from_blob(allowed.data(), {logits.size(0)}, torch::kUInt8).to(logits.device()).to(torch::kBool);
    logits.masked_fill_(keep.logical_not(), -std::numeric_limits<double>::infinity());
    return any;
  }

  void Accept(int64_t token) override {
    if (token < 0 || token >= vocabulary_->size()) return;  // a stop token past the vocabulary
    const std::string& bytes = vocabulary_->bytes(token);
    Automaton next = state_;
    for (char c : bytes) {
      if (!next.Step(static_cast<unsigned char>(c))) return;  // a stop token: the form is whole
    }
    state_ = std::move(next);
  }
  bool Complete() const override { return state_.Complete(); }
  bool Finished() const override { return state_.Finished(); }

 private:
  void Walk(int32_t node, const Automaton& at, std::vector<char>& allowed) const {
    const TokenVocabulary::Node& here = vocabulary_->nodes()[static_cast<size_t>(node)];
    for (const auto& [byte, child] : here.children) {
      Automaton next = at;
      if (!next.Step(byte)) continue;
      for (int32_t token : vocabulary_->nodes()[static_cast<size_t>(child)].tokens) {
        allowed[static_cast<size_t>(token)] = 1;
      }
      Walk(child, next, allowed);
    }
  }

  Automaton state_;
  std::shared_ptr<const TokenVocabulary> vocabulary_;
};

template <typename Automaton>
bool AutomatonAllows(Automaton automaton, const std::string& text, bool* complete) {
  for (char c : text) {
    if (!automaton.Step(static_cast<unsigned char>(c))) return false;
  }
  *complete = automaton.Complete();
  return true;
}

absl::Status CheckChoices(const std::vector<std::string>& choices, const std::string& field) {
  if (choices.empty()) return absl::InvalidArgumentError(absl::StrCat(field, ": no choices"));
  if (choices.size() > static_cast<size_t>(kMaxGuidedChoices)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", choices.size(), " choices, more than the ", kMaxGuidedChoices, " allowed"));
  }
  size_t bytes = 0;
  for (size_t i = 0; i < choices.size(); ++i) {
    if (choices[i].empty()) return absl::InvalidArgumentError(absl::StrCat(field, "[", i, "] is empty"));
    bytes += choices[i].size();
  }
  if (bytes > static_cast<size_t>(kMaxGuidedChoiceBytes)) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", bytes, " bytes of choices, more than the ",
                                                   kMaxGuidedChoiceBytes, " allowed"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<OutputConstraintState>> StartOutputConstraint(
    const OutputConstraint& constraint, std::shared_ptr<const TokenVocabulary> vocabulary, const std::string& field) {
  if (vocabulary == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(field, ": constrained output needs the tokenizer's vocabulary, which this engine was not given"));
  }
  std::unique_ptr<OutputConstraintState> state;
  if (constraint.kind == OutputConstraint::Kind::kJsonObject) {
    auto json = std::make_unique<AutomatonConstraint<JsonAutomaton>>(JsonAutomaton(), vocabulary);
    const auto first = json->Allowed();
    if (std::none_of(first->begin(), first->end(), [](char a) { return a != 0; })) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": no token of the vocabulary can begin a JSON object"));
    }
    state = std::move(json);
  } else if (constraint.kind == OutputConstraint::Kind::kChoice) {
    if (absl::Status ok = CheckChoices(constraint.choices, field); !ok.ok()) return ok;
    auto choices = std::make_shared<const std::vector<std::string>>(constraint.choices);
    auto choice = std::make_unique<AutomatonConstraint<ChoiceAutomaton>>(ChoiceAutomaton(choices), vocabulary);
    const auto first = choice->Allowed();
    if (std::none_of(first->begin(), first->end(), [](char a) { return a != 0; })) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": no token of the vocabulary can begin any of the choices"));
    }
    state = std::move(choice);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(field, ": no constraint"));
  }
  return state;
}

bool AllowsPrefix(const OutputConstraint& constraint, const std::string& text, bool* complete) {
  *complete = false;
  if (constraint.kind == OutputConstraint::Kind::kJsonObject) return AutomatonAllows(JsonAutomaton(), text, complete);
  if (constraint.kind == OutputConstraint::Kind::kChoice) {
    return AutomatonAllows(ChoiceAutomaton(std::make_shared<const std::vector<std::string>>(constraint.choices)),
                           text, complete);
  }
  *complete = true;
  return true;
}

}  // namespace dslaunch::runtime
