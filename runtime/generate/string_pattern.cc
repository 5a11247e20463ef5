// Note [String patterns].
#include "runtime/generate/string_pattern.h"

#include <algorithm>
#include <bitset>
#include <cctype>
#include <map>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/utf8.h"

namespace dslaunch::runtime {

int PatternSymbolOf(uint32_t code_point) {
  if (code_point < 0x80) return static_cast<int>(code_point);
  return code_point == 0x2028 || code_point == 0x2029 ? kLineSeparatorSymbol : kNonAsciiSymbol;
}

namespace {

// The symbols, and one more bit while parsing: kNonAsciiSpaces, the
// non-ASCII code points \s matches (U+00A0, U+FEFF, the Zs spaces). A set
// holds kNonAsciiSymbol for the automaton only when it holds both kinds of
// non-ASCII code point (NfaEdge): \S alone does not, [\s\S] does.
constexpr size_t kNonAsciiSpaces = kPatternSymbols;
using SymbolSet = std::bitset<kPatternSymbols + 1>;
constexpr size_t kMaxNfaStates = 40000;

SymbolSet Range(int low, int high) {
  SymbolSet set;
  for (int c = low; c <= high; ++c) set.set(static_cast<size_t>(c));
  return set;
}
SymbolSet Digits() { return Range('0', '9'); }
SymbolSet WordCharacters() { return Range('a', 'z') | Range('A', 'Z') | Digits() | Range('_', '_'); }
// ECMA-262's \s: ASCII's spaces, the line separators and the non-ASCII spaces.
SymbolSet Spaces() {
  SymbolSet set = Range('\t', '\r') | Range(' ', ' ');
  set.set(kLineSeparatorSymbol);
  set.set(kNonAsciiSpaces);
  return set;
}
// A parsed set as the automaton reads it.
SymbolSet NfaEdge(SymbolSet set) {
  if (!set.test(kNonAsciiSpaces)) set.reset(kNonAsciiSymbol);
  set.reset(kNonAsciiSpaces);
  return set;
}
SymbolSet Everything() { return SymbolSet().set(); }

struct PatternNode {
  enum Kind { kSet, kConcat, kAlternation, kRepeat } kind = kSet;
  SymbolSet set;
  std::vector<std::unique_ptr<PatternNode>> children;
  int min = 0, max = 0;  // kRepeat; max -1: unbounded
};
using NodePtr = std::unique_ptr<PatternNode>;

NodePtr SetNode(SymbolSet set) {
  auto node = std::make_unique<PatternNode>();
  node->set = set;
  return node;
}
NodePtr Composite(PatternNode::Kind kind, std::vector<NodePtr> children) {
  auto node = std::make_unique<PatternNode>();
  node->kind = kind;
  node->children = std::move(children);
  return node;
}
NodePtr Repeat(NodePtr child, int min, int max) {
  auto node = std::make_unique<PatternNode>();
  node->kind = PatternNode::kRepeat;
  node->min = min;
  node->max = max;
  node->children.push_back(std::move(child));
  return node;
}

bool IsHexDigit(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
int HexValue(char c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; }

}  // namespace

class PatternCompiler {
 public:
  PatternCompiler(const std::string& pattern, const std::string& where) : p_(pattern), where_(where) {}

  absl::StatusOr<StringPattern> Compile() {
    if (p_.size() > static_cast<size_t>(kMaxPatternBytes)) {
      Fail(absl::StrCat(p_.size(), " bytes, more than the ", kMaxPatternBytes, " read"));
      return error_;
    }
    // Top level: alternatives, each anchored or not at its two ends. A
    // match that may go on with anything (no '$') ends in accept_all_,
    // which takes every symbol: a set of states holding it is that state
    // alone, so that what follows a match adds no states.
    const int start = NewState();
    final_ = NewState();
    accept_all_ = NewState();
    states_[static_cast<size_t>(accept_all_)].edges.emplace_back(NfaEdge(Everything()), accept_all_);
    for (;;) {
      const bool anchored_start = Peek('^');
      if (anchored_start) ++at_;
      bool anchored_end = false;
      NodePtr body = Concatenation(/*top=*/true, &anchored_end);
      if (!ok()) return error_;
      std::vector<NodePtr> parts;
      if (!anchored_start) parts.push_back(Repeat(SetNode(Everything()), 0, -1));
      parts.push_back(std::move(body));
      const auto [s, e] = Build(*Composite(PatternNode::kConcat, std::move(parts)));
      if (!ok()) return error_;
      Epsilon(start, s);
      Epsilon(e, anchored_end ? final_ : accept_all_);
      if (at_ >= p_.size()) break;
      if (p_[at_] == ')') {
        Fail("a ')' without its '('");
        return error_;
      }
      ++at_;  // '|'
    }
    return Determinize(start);
  }

 private:
  bool ok() const { return error_.ok(); }
  // The pattern as errors quote it: its first 80 bytes.
  std::string Shown() const { return p_.size() <= 80 ? p_ : p_.substr(0, 80) + "..."; }
  bool Peek(char c) const { return at_ < p_.size() && p_[at_] == c; }
  NodePtr Fail(const std::string& what) {
    if (ok()) error_ = absl::InvalidArgumentError(absl::StrCat(where_, ": pattern '", Shown(), "': ", what));
    return SetNode(SymbolSet());
  }

  NodePtr Alternation() {
    std::vector<NodePtr> alternatives;
    bool unused = false;
    alternatives.push_back(Concatenation(/*top=*/false, &unused));
    while (ok() && Peek('|')) {
      ++at_;
      alternatives.push_back(Concatenation(/*top=*/false, &unused));
    }
    return Composite(PatternNode::kAlternation, std::move(alternatives));
  }

  // Items up to '|', ')' or the end; at the top, a '$' there anchors it.
  NodePtr Concatenation(bool top, bool* anchored_end) {
    std::vector<NodePtr> items;
    while (ok() && at_ < p_.size() && p_[at_] != '|' && p_[at_] != ')') {
      if (p_[at_] == '$') {
        ++at_;
        if (top && (at_ == p_.size() || p_[at_] == '|')) {
          *anchored_end = true;
          break;
        }
        return Fail("'$' inside the pattern (anchors are read at its two ends, or an alternative's)");
      }
      if (p_[at_] == '^') return Fail("'^' inside the pattern (anchors are read at its two ends, or an alternative's)");
      NodePtr atom = Atom();
      if (!ok()) break;
      items.push_back(Quantified(std::move(atom)));
    }
    return Composite(PatternNode::kConcat, std::move(items));
  }

  // {n}, {n,}, {n,m} at at_ (a '{'): its bounds, or false when it is not
  // one (then '{' is a literal, as ECMA-262's web form reads it).
  bool Braces(size_t* end, int* min, int* max) {
    size_t i = at_ + 1;
    auto number = [&](int* out) {
      const size_t first = i;
      int64_t value = 0;
      while (i < p_.size() && p_[i] >= '0' && p_[i] <= '9') value = std::min<int64_t>(value * 10 + (p_[i++] - '0'), 1 << 30);
      *out = static_cast<int>(value);
      return i > first;
    };
    if (!number(min)) return false;
    *max = *min;
    if (i < p_.size() && p_[i] == ',') {
      ++i;
      if (!number(max)) *max = -1;
    }
    if (i >= p_.size() || p_[i] != '}') return false;
    *end = i + 1;
    return true;
  }

  NodePtr Quantified(NodePtr atom) {
    int min = 1, max = 1;
    size_t end = 0;
    if (Peek('*')) {
      min = 0, max = -1, end = at_ + 1;
    } else if (Peek('+')) {
      min = 1, max = -1, end = at_ + 1;
    } else if (Peek('?')) {
      min = 0, max = 1, end = at_ + 1;
    } else if (!(Peek('{') && Braces(&end, &min, &max))) {
      return atom;
    }
    at_ = end;
    if (Peek('?')) ++at_;  // lazy: the same strings
    if (max >= 0 && min > max) return Fail(absl::StrCat("{", min, ",", max, "} counts down"));
    if (min > kMaxPatternRepeat || max > kMaxPatternRepeat) {
      return Fail(absl::StrCat("a count above ", kMaxPatternRepeat, " is not supported"));
    }
    if (Peek('*') || Peek('+') || Peek('?') || (Peek('{') && Braces(&end, &min, &max))) {
      return Fail(absl::StrCat("nothing to repeat at ", at_));
    }
    return Repeat(std::move(atom), min, max);
  }

  NodePtr Atom() {
    const char c = p_[at_++];
    switch (c) {
      case '(': {
        if (++depth_ > kMaxPatternDepth) return Fail(absl::StrCat("groups nested more than ", kMaxPatternDepth, " deep"));
        if (Peek('?')) {
          if (p_.compare(at_, 2, "?:") == 0) {
            at_ += 2;
          } else if (p_.compare(at_, 2, "?<") == 0 && at_ + 2 < p_.size() && p_[at_ + 2] != '=' &&
                     p_[at_ + 2] != '!') {
            const size_t close = p_.find('>', at_);
            if (close == std::string::npos) return Fail("a group name without its '>'");
            at_ = close + 1;
          } else if (p_.compare(at_, 2, "?=") == 0 || p_.compare(at_, 2, "?!") == 0 ||
                     p_.compare(at_, 3, "?<=") == 0 || p_.compare(at_, 3, "?<!") == 0) {
            return Fail("lookarounds ((?=, (?!, (?<=, (?<!) are not supported");
          } else {
            return Fail(absl::StrCat("'(", p_.substr(at_, 2), "' is not ECMA-262's (inline flags and Python's (?P "
                                     "are not read; groups are (...), (?:...) and (?<name>...))"));
          }
        }
        NodePtr inside = Alternation();
        if (!ok()) return inside;
        if (!Peek(')')) return Fail("a '(' without its ')'");
        ++at_;
        --depth_;
        return inside;
      }
      case '[':
        return Class();
      case '.': {
        SymbolSet set = Everything();
        set.reset('\n');
        set.reset('\r');
        set.reset(kLineSeparatorSymbol);
        return SetNode(set);
      }
      case '\\':
        return Escape(/*in_class=*/false, nullptr);
      case '*':
      case '+':
      case '?':
        return Fail(absl::StrCat("nothing to repeat at ", at_ - 1));
      case '{': {
        size_t end = 0;
        int min = 0, max = 0;
        --at_;
        if (Braces(&end, &min, &max)) return Fail(absl::StrCat("nothing to repeat at ", at_));
        ++at_;
        return SetNode(Range('{', '{'));
      }
      default:
        if (static_cast<unsigned char>(c) >= 0x80) return NonAscii();
        return SetNode(Range(c, c));
    }
  }

  NodePtr NonAscii() { return Fail("non-ASCII characters in a pattern are not supported"); }

  // After a '\\'. In a class, `single` gets the code point of a one
  // character escape (-1 for a class escape such as \d); \b is a backspace.
  NodePtr Escape(bool in_class, int* single) {
    if (single != nullptr) *single = -1;
    if (at_ >= p_.size()) return Fail("a '\\' at the end");
    const char c = p_[at_++];
    auto one = [&](int code) {
      if (code >= 0x80) return NonAscii();
      if (single != nullptr) *single = code;
      return SetNode(Range(code, code));
    };
    switch (c) {
      case 'd':
        return SetNode(Digits());
      case 'D':
        return SetNode(~Digits());
      case 'w':
        return SetNode(WordCharacters());
      case 'W':
        return SetNode(~WordCharacters());
      case 's':
        return SetNode(Spaces());
      case 'S':
        return SetNode(~Spaces());
      case 'n':
        return one('\n');
      case 't':
        return one('\t');
      case 'r':
        return one('\r');
      case 'f':
        return one('\f');
      case 'v':
        return one('\v');
      case '0':
        if (at_ < p_.size() && p_[at_] >= '0' && p_[at_] <= '9') return Fail("octal escapes are not supported");
        return one(0);
      case 'b':
        if (in_class) return one('\b');
        return Fail("word boundaries (\\b, \\B) are not supported");
      case 'B':
        return Fail("word boundaries (\\b, \\B) are not supported");
      case 'x':
      case 'u': {
        const size_t digits = c == 'x' ? 2 : 4;
        if (at_ + digits > p_.size() ||
            !std::all_of(p_.begin() + static_cast<std::ptrdiff_t>(at_),
                         p_.begin() + static_cast<std::ptrdiff_t>(at_ + digits), IsHexDigit)) {
          return Fail(absl::StrCat("\\", std::string(1, c), " takes ", digits, " hex digits"));
        }
        int code = 0;
        for (size_t k = 0; k < digits; ++k) code = code * 16 + HexValue(p_[at_ + k]);
        at_ += digits;
        return one(code);
      }
      case 'c': {
        if (at_ >= p_.size() || !std::isalpha(static_cast<unsigned char>(p_[at_]))) return Fail("\\c takes a letter");
        return one(p_[at_++] % 32);
      }
      case 'k':
        return Fail("backreferences are not supported");
      default:
        if (c >= '1' && c <= '9') return Fail("backreferences are not supported");
        if (static_cast<unsigned char>(c) >= 0x80) return NonAscii();
        if (std::isalnum(static_cast<unsigned char>(c))) {
          return Fail(absl::StrCat("'\\", std::string(1, c), "' is not an escape this reads"));
        }
        return one(c);  // escaped punctuation
    }
  }

  NodePtr Class() {
    const bool negated = Peek('^');
    if (negated) ++at_;
    SymbolSet set;
    while (ok()) {  // "[]" matches nothing and "[^]" anything, as in ECMA-262
      if (at_ >= p_.size()) return Fail("a '[' without its ']'");
      if (p_[at_] == ']') {
        ++at_;
        break;
      }
      int low = -1;
      SymbolSet item = Member(&low);
      if (!ok()) return SetNode(SymbolSet());
      // A range: a-b between two single characters.
      if (low >= 0 && Peek('-') && at_ + 1 < p_.size() && p_[at_ + 1] != ']') {
        ++at_;
        int high = -1;
        Member(&high);
        if (!ok()) return SetNode(SymbolSet());
        if (high < 0) return Fail("a range ends with a class escape");
        if (high < low) return Fail("a range goes down");
        item = Range(low, high);
      }
      set |= item;
    }
    if (negated) set = ~set;
    return SetNode(set);
  }

  // One member of a class; `single`: its code point when one character.
  SymbolSet Member(int* single) {
    *single = -1;
    const char c = p_[at_++];
    if (c == '\\') {
      NodePtr escape = Escape(/*in_class=*/true, single);
      return escape->set;
    }
    if (static_cast<unsigned char>(c) >= 0x80) {
      NonAscii();
      return SymbolSet();
    }
    *single = static_cast<unsigned char>(c);
    return Range(c, c);
  }

  // Thompson's construction: a fragment's start and end states.
  std::pair<int, int> Build(const PatternNode& node) {
    if (!ok()) return {0, 0};
    if (states_.size() > kMaxNfaStates) {
      Fail(absl::StrCat("more than ", kMaxNfaStates, " automaton states before determinizing (counts too large)"));
      return {0, 0};
    }
    switch (node.kind) {
      case PatternNode::kSet: {
        const int start = NewState(), end = NewState();
        states_[static_cast<size_t>(start)].edges.emplace_back(NfaEdge(node.set), end);
        return {start, end};
      }
      case PatternNode::kConcat: {
        const int start = NewState();
        int end = start;
        for (const NodePtr& child : node.children) {
          const auto [s, e] = Build(*child);
          Epsilon(end, s);
          end = e;
        }
        return {start, end};
      }
      case PatternNode::kAlternation: {
        const int start = NewState(), end = NewState();
        for (const NodePtr& child : node.children) {
          const auto [s, e] = Build(*child);
          Epsilon(start, s);
          Epsilon(e, end);
        }
        return {start, end};
      }
      case PatternNode::kRepeat: {
        const int start = NewState();
        int end = start;
        for (int k = 0; k < node.min; ++k) {
          const auto [s, e] = Build(*node.children[0]);
          Epsilon(end, s);
          end = e;
        }
        if (node.max < 0) {  // a loop
          const auto [s, e] = Build(*node.children[0]);
          const int after = NewState();
          Epsilon(end, s);
          Epsilon(e, s);
          Epsilon(end, after);
          Epsilon(e, after);
          return {start, after};
        }
        const int after = NewState();
        for (int k = node.min; k < node.max; ++k) {  // optional copies
          const auto [s, e] = Build(*node.children[0]);
          Epsilon(end, s);
          Epsilon(end, after);
          end = e;
        }
        Epsilon(end, after);
        return {start, after};
      }
    }
    return {0, 0};
  }

  int NewState() {
    states_.emplace_back();
    return static_cast<int>(states_.size()) - 1;
  }
  void Epsilon(int from, int to) { states_[static_cast<size_t>(from)].epsilon.push_back(to); }

  std::vector<int> Closure(std::vector<int> set) {
    if (seen_.size() != states_.size()) seen_.assign(states_.size(), 0);
    ++generation_;
    for (int s : set) seen_[static_cast<size_t>(s)] = generation_;
    for (size_t i = 0; i < set.size(); ++i) {
      closure_work_ += 1 + states_[static_cast<size_t>(set[i])].epsilon.size();
      for (int t : states_[static_cast<size_t>(set[i])].epsilon) {
        if (seen_[static_cast<size_t>(t)] != generation_) {
          seen_[static_cast<size_t>(t)] = generation_;
          set.push_back(t);
        }
      }
    }
    if (seen_[static_cast<size_t>(accept_all_)] == generation_) return {accept_all_};
    std::sort(set.begin(), set.end());
    return set;
  }

  // The symbols no edge tells apart share a class: one representative
  // each, so that determinizing looks at classes, not 130 symbols.
  std::vector<int> SymbolClasses(std::vector<int>* representatives) const {
    std::vector<SymbolSet> distinct;
    for (const State& state : states_) {
      for (const auto& [set, target] : state.edges) {
        if (std::find(distinct.begin(), distinct.end(), set) == distinct.end()) distinct.push_back(set);
      }
    }
    std::map<std::vector<bool>, int> by_signature;
    std::vector<int> classes(kPatternSymbols);
    for (int symbol = 0; symbol < kPatternSymbols; ++symbol) {
      std::vector<bool> signature;
      for (const SymbolSet& set : distinct) signature.push_back(set.test(static_cast<size_t>(symbol)));
      auto [it, added] = by_signature.emplace(signature, static_cast<int>(by_signature.size()));
      if (added) representatives->push_back(symbol);
      classes[static_cast<size_t>(symbol)] = it->second;
    }
    return classes;
  }

  absl::StatusOr<StringPattern> Determinize(int start) {
    StringPattern dfa;
    std::vector<int> representatives;
    const std::vector<int> classes = SymbolClasses(&representatives);
    std::map<std::vector<int>, int32_t> ids;
    size_t work = 0;
    std::vector<std::vector<int>> sets = {Closure({start})};
    ids[sets[0]] = 0;
    for (size_t d = 0; d < sets.size(); ++d) {
      if (sets.size() > static_cast<size_t>(kMaxPatternStates)) {
        return absl::InvalidArgumentError(absl::StrCat(where_, ": pattern '", Shown(), "': more than ", kMaxPatternStates,
                                                       " states (simplify it, or bound it less finely)"));
      }
      const std::vector<int> here = sets[d];
      const bool matched = std::binary_search(here.begin(), here.end(), final_) ||
                           std::binary_search(here.begin(), here.end(), accept_all_);
      dfa.accepting_.push_back(matched ? 1 : 0);
      std::vector<int32_t> by_class(representatives.size(), -1);
      std::map<std::vector<int>, int32_t> moved_to;  // classes that move alike close once
      for (size_t k = 0; k < representatives.size(); ++k) {
        const int symbol = representatives[k];
        std::vector<int> moved;
        for (int s : here) {
          for (const auto& [set, target] : states_[static_cast<size_t>(s)].edges) {
            if (set.test(static_cast<size_t>(symbol))) moved.push_back(target);
          }
          work += 1 + states_[static_cast<size_t>(s)].edges.size();
        }
        work += closure_work_;
        closure_work_ = 0;
        // A request's pattern is compiled while it waits: bounded work.
        work_done_ = work;
        if (work > work_budget_) {
          return absl::InvalidArgumentError(absl::StrCat(where_, ": pattern '", p_,
                                                         "': too complex to compile (simplify it, or bound it "
                                                         "less finely)"));
        }
        int32_t id = -1;
        if (auto same = moved_to.find(moved); same != moved_to.end()) {
          by_class[k] = same->second;
          continue;
        }
        const std::vector<int> moved_key = moved;
        if (!moved.empty()) {
          std::vector<int> closed = Closure(std::move(moved));
          work += closed.size();
          auto it = ids.find(closed);
          if (it == ids.end()) {
            id = static_cast<int32_t>(sets.size());
            ids.emplace(closed, id);
            sets.push_back(std::move(closed));
          } else {
            id = it->second;
          }
        }
        by_class[k] = id;
        moved_to.emplace(moved_key, id);
      }
      for (int symbol = 0; symbol < kPatternSymbols; ++symbol) {
        dfa.next_.push_back(by_class[static_cast<size_t>(classes[static_cast<size_t>(symbol)])]);
      }
    }
    // States from which no match can be reached are no way on.
    const size_t n = sets.size();
    std::vector<std::vector<int32_t>> into(n);
    for (size_t s = 0; s < n; ++s) {
      for (int symbol = 0; symbol < kPatternSymbols; ++symbol) {
        const int32_t t = dfa.next_[s * kPatternSymbols + static_cast<size_t>(symbol)];
        if (t >= 0) into[static_cast<size_t>(t)].push_back(static_cast<int32_t>(s));
      }
    }
    dfa.fewest_.assign(n, -1);
    std::vector<int32_t> queue;
    for (size_t s = 0; s < n; ++s) {
      if (dfa.accepting_[s]) {
        dfa.fewest_[s] = 0;
        queue.push_back(static_cast<int32_t>(s));
      }
    }
    for (size_t i = 0; i < queue.size(); ++i) {
      const int32_t t = queue[i];
      for (int32_t s : into[static_cast<size_t>(t)]) {
        if (dfa.fewest_[static_cast<size_t>(s)] < 0) {
          dfa.fewest_[static_cast<size_t>(s)] = dfa.fewest_[static_cast<size_t>(t)] + 1;
          queue.push_back(s);
        }
      }
    }
    if (dfa.fewest_[0] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(where_, ": pattern '", Shown(), "': matches no string"));
    }
    for (int32_t& t : dfa.next_) {
      if (t >= 0 && dfa.fewest_[static_cast<size_t>(t)] < 0) t = -1;
    }
    // The most: unbounded from a state that reaches a loop of live states.
    dfa.most_.assign(n, -2);  // -2: not yet known
    std::vector<char> color(n, 0);  // 0 new, 1 on the stack, 2 done
    std::vector<char> loops(n, 0);
    // Depth-first, iteratively: (state, next symbol to look at).
    for (size_t root = 0; root < n; ++root) {
      if (color[root] != 0 || dfa.fewest_[root] < 0) continue;
      std::vector<std::pair<int32_t, int>> stack = {{static_cast<int32_t>(root), 0}};
      color[root] = 1;
      while (!stack.empty()) {
        auto& [s, symbol] = stack.back();
        if (symbol < kPatternSymbols) {
          const int32_t t = dfa.Next(s, symbol++);
          if (t < 0) continue;
          if (color[static_cast<size_t>(t)] == 1) {
            loops[static_cast<size_t>(t)] = 1;
          } else if (color[static_cast<size_t>(t)] == 0) {
            color[static_cast<size_t>(t)] = 1;
            stack.emplace_back(t, 0);
          }
          continue;
        }
        int32_t most = dfa.accepting_[static_cast<size_t>(s)] ? 0 : -1;
        bool unbounded = loops[static_cast<size_t>(s)] != 0;
        for (int k = 0; k < kPatternSymbols && !unbounded; ++k) {
          const int32_t t = dfa.Next(s, k);
          if (t < 0) continue;
          const int32_t after = dfa.most_[static_cast<size_t>(t)];
          if (after == kUnboundedPatternLength || color[static_cast<size_t>(t)] == 1) {
            unbounded = true;
          } else {
            most = std::max(most, std::min(after + 1, kUnboundedPatternLength));
          }
        }
        dfa.most_[static_cast<size_t>(s)] = unbounded ? kUnboundedPatternLength : most;
        color[static_cast<size_t>(s)] = 2;
        stack.pop_back();
      }
    }
    return dfa;
  }

  struct State {
    std::vector<std::pair<SymbolSet, int>> edges;
    std::vector<int> epsilon;
  };
  const std::string& p_;
  const std::string where_;
  size_t at_ = 0;
  absl::Status error_;
  std::vector<State> states_;
  int final_ = 0, accept_all_ = 0;
  int depth_ = 0;
  std::vector<uint32_t> seen_;  // Closure's marks, by generation
  size_t closure_work_ = 0;    // Closure's steps since Determinize last counted them
  size_t work_budget_ = kMaxPatternWork;
 public:
  size_t work_done() const { return work_done_; }
  void set_work_budget(size_t budget) { work_budget_ = std::min(budget, kMaxPatternWork); }
 private:
  size_t work_done_ = 0;
  uint32_t generation_ = 0;
};

absl::StatusOr<StringPattern> StringPattern::Compile(const std::string& pattern, const std::string& where,
                                                    size_t* work_left) {
  PatternCompiler compiler(pattern, where);
  if (work_left != nullptr) compiler.set_work_budget(*work_left);
  auto compiled = compiler.Compile();
  if (work_left != nullptr) *work_left -= std::min(*work_left, compiler.work_done());
  return compiled;
}

bool StringPattern::MatchesText(const std::string& text) const {
  int32_t state = start();
  for (size_t i = 0; i < text.size();) {
    const size_t length = std::max<size_t>(dslaunch::Utf8SequenceLength(absl::string_view(text).substr(i)), 1);
    uint32_t code_point = static_cast<unsigned char>(text[i]);
    if (length > 1) {
      code_point &= 0x7Fu >> length;
      for (size_t k = 1; k < length; ++k) code_point = (code_point << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3Fu);
    }
    state = Next(state, PatternSymbolOf(code_point));
    if (state < 0) return false;
    i += length;
  }
  return Matches(state);
}

absl::StatusOr<std::string> FormatPattern(const std::string& format, const std::string& where) {
  static const std::string kDate =
      "[1-9][0-9]{3}-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|"
      "02-(0[1-9]|1[0-9]|2[0-8]))";
  static const std::string kTime = "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])";
  // RFC 3339 Appendix A: a unit takes only the next smaller one after it.
  static const std::string kDurationTime = "T([0-9]+H([0-9]+M([0-9]+S)?)?|[0-9]+M([0-9]+S)?|[0-9]+S)";
  static const std::string kLabel = "[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
  static const std::string kAtom = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+";
  static const std::string kOctet = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
  // A hostname (RFC 1123) within 253 bytes: at most four labels of at most
  // 62, the last beginning with a letter (a top-level label is not all
  // digits).
  static const std::string kHostLabel = "[A-Za-z0-9]([A-Za-z0-9-]{0,60}[A-Za-z0-9])?";
  static const std::string kTopLabel = "[A-Za-z]([A-Za-z0-9-]{0,60}[A-Za-z0-9])?";
  // RFC 4291's text forms of eight groups, "::" for one or more of them
  // (no embedded IPv4, no zone).
  static const std::string kGroup = "[0-9a-fA-F]{1,4}";
  static const std::string kIpv6 =
      "((" + kGroup + ":){7}" + kGroup + "|(" + kGroup + ":){1,7}:|(" + kGroup + ":){1,6}:" + kGroup + "|(" + kGroup +
      ":){1,5}(:" + kGroup + "){1,2}|(" + kGroup + ":){1,4}(:" + kGroup + "){1,3}|(" + kGroup + ":){1,3}(:" + kGroup +
      "){1,4}|(" + kGroup + ":){1,2}(:" + kGroup + "){1,5}|" + kGroup + ":(:" + kGroup + "){1,6}|:((:" + kGroup +
      "){1,7}|:))";
  static const std::map<std::string, std::string> kFormats = {
      {"date", "^" + kDate + "$"},
      {"time", "^" + kTime + "$"},
      {"date-time", "^" + kDate + "T" + kTime + "$"},
      {"duration", "^P([0-9]+W|([0-9]+Y([0-9]+M([0-9]+D)?)?|[0-9]+M([0-9]+D)?|[0-9]+D)(" + kDurationTime + ")?|" +
                       kDurationTime + ")$"},
      {"email", "^" + kAtom + "(\\." + kAtom + ")*@" + kLabel + "(\\." + kLabel + ")+$"},
      {"ipv4", "^(" + kOctet + "\\.){3}" + kOctet + "$"},
      {"ipv6", "^" + kIpv6 + "$"},
      {"hostname", "^(" + kHostLabel + "\\.){0,3}" + kTopLabel + "$"},
      {"uuid", "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"},
  };
  auto it = kFormats.find(format);
  if (it == kFormats.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": format '", format,
        "' is not supported (date, time, date-time, duration, email, hostname, ipv4, ipv6 and uuid are): leave it "
        "out"));
  }
  return it->second;
}

}  // namespace dslaunch::runtime
