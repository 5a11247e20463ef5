// JSON Schema's "pattern" and string "format"s as automata over a string's
// code points, for constrained output.
//
// Note [String patterns]
// A schema's "pattern" (an ECMA-262 regular expression, which matches
// anywhere in the string unless anchored) is compiled to a deterministic
// automaton over the string's decoded code points (JSON escapes undone),
// which the JSON automaton steps as each code point ends: a character that
// leaves no way to a match is refused as it comes, and the closing quote
// only where the string matches. The alphabet is the 128 ASCII code points,
// one symbol for every other code point (kNonAsciiSymbol) and one for the
// line separators U+2028 and U+2029 (kLineSeparatorSymbol, which '.' does
// not match). So a pattern's own characters are ASCII (a non-ASCII literal,
// range or escape is refused), while '.', a negated class, \D, \W and
// [\s\S] let any code point through. \d and \w are ASCII's, as in ECMA-262;
// \s matches ASCII's spaces, the line separators and Unicode's other spaces,
// which kNonAsciiSymbol does not tell apart from other code points: so \S,
// and a class that holds some non-ASCII code points but not all, match no
// non-ASCII code point (a subset of what the schema accepts, as constrained
// output generates throughout: Note [JSON schemas for constrained output]).
//
// Read: literals and escapes (\n \t \r \f \v \0 \xHH \uHHHH \cX and escaped
// punctuation), '.', classes with ranges and negation, \d \D \w \W \s \S,
// groups (capturing, (?:...) and (?<name>...)), alternation, the
// quantifiers * + ? {n} {n,} {n,m} (lazy or not: the same strings), and ^
// and $ at the two ends of the pattern or of a top-level alternative.
// Refused, naming the construct: lookarounds, backreferences, word
// boundaries, anchors elsewhere, inline flags, counts above
// kMaxPatternRepeat, groups nested past kMaxPatternDepth, patterns longer
// than kMaxPatternBytes, and a pattern whose automaton would pass
// kMaxPatternStates states or take more work than a request may wait for
// (a schema's patterns share one such budget: CompileJsonSchema).
//
// Lengths: the automaton knows, from each state, the fewest and the most
// code points to a match, so that minLength and maxLength beside a pattern
// are kept as characters come; a pattern whose matches skip lengths
// (^(aa)+$ with an odd bound) can still leave a string no way on, where the
// request then ends unfinished (Note [Constrained output]).
//
// "format" (JSON Schema's, as OpenAI's structured outputs enforce it): date,
// time, date-time, duration, email, hostname, ipv4, ipv6 and uuid are
// patterns of their RFC forms (FormatPattern), narrowed where a validator's
// reading is stricter than the form (years 1000-9999, February's 28 days,
// no leap second, an email's dot-atom with hostname labels, a hostname of at
// most four labels of 62 whose last begins with a letter, IPv6 without an
// embedded IPv4 or a zone); any other format on a string (uri, iri, ...) is
// refused naming it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dslaunch::runtime {

inline constexpr int kPatternSymbols = 130;
inline constexpr int kNonAsciiSymbol = 128;
inline constexpr int kLineSeparatorSymbol = 129;
inline constexpr int kMaxPatternStates = 4096;
inline constexpr int kMaxPatternRepeat = 1000;
inline constexpr int kMaxPatternBytes = 4096;
inline constexpr int kMaxPatternDepth = 64;  // nested groups
inline constexpr int32_t kUnboundedPatternLength = 65535;
inline constexpr size_t kMaxPatternWork = 30'000'000;  // refused in 0.17 s (constraint_mask_bench)

// The symbol of a code point.
int PatternSymbolOf(uint32_t code_point);

class StringPattern {
 public:
  // InvalidArgument "`where`: pattern '...': ..." for a pattern not read.
  // `work_left`: a budget several patterns share (steps of determinizing),
  // lowered by what this one takes; each pattern has kMaxPatternWork at most.
  static absl::StatusOr<StringPattern> Compile(const std::string& pattern, const std::string& where,
                                               size_t* work_left = nullptr);

  int32_t start() const { return 0; }
  // The state after `symbol`, or -1 when no match can follow.
  int32_t Next(int32_t state, int symbol) const {
    return next_[static_cast<size_t>(state) * kPatternSymbols + static_cast<size_t>(symbol)];
  }
  bool Matches(int32_t state) const { return accepting_[static_cast<size_t>(state)] != 0; }
  // The fewest and most code points from `state` to a match (the most at
  // kUnboundedPatternLength when a loop lies on the way).
  int32_t Fewest(int32_t state) const { return fewest_[static_cast<size_t>(state)]; }
  int32_t Most(int32_t state) const { return most_[static_cast<size_t>(state)]; }
  size_t states() const { return accepting_.size(); }
  // Whether the whole `text` (UTF-8) matches, as the automaton reads it
  // (beyond ASCII a subset of ECMA-262's matches: the Note).
  bool MatchesText(const std::string& text) const;

 private:
  std::vector<int32_t> next_;  // states x kPatternSymbols
  std::vector<char> accepting_;
  std::vector<int32_t> fewest_, most_;
  friend class PatternCompiler;
};

// The pattern of a string format, or InvalidArgument naming it.
absl::StatusOr<std::string> FormatPattern(const std::string& format, const std::string& where);

}  // namespace dslaunch::runtime
