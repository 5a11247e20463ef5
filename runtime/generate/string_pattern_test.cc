// Note [String patterns]: patterns read as ECMA-262 reads them (checked
// against std::regex's ECMAScript grammar on random patterns and strings),
// the constructs refused by name, lengths to a match, and the formats.
#include "runtime/generate/string_pattern.h"

#include <arpa/inet.h>

#include <algorithm>
#include <random>
#include <regex>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;

StringPattern Compiled(const std::string& pattern) {
  auto compiled = StringPattern::Compile(pattern, "schema/pattern");
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  return compiled.ok() ? *std::move(compiled) : *StringPattern::Compile("", "x");
}

TEST(StringPatternTest, PatternsMatchAnywhereUnlessAnchored) {
  EXPECT_TRUE(Compiled("b").MatchesText("abc"));
  EXPECT_FALSE(Compiled("^b").MatchesText("abc"));
  EXPECT_TRUE(Compiled("^[a-z]+$").MatchesText("abc"));
  EXPECT_FALSE(Compiled("^[a-z]+$").MatchesText("ab1"));
  EXPECT_FALSE(Compiled("^[a-z]+$").MatchesText(""));
  EXPECT_TRUE(Compiled("").MatchesText("anything"));
  // Anchors belong to the top-level alternative they end.
  const StringPattern either = Compiled("^a|b$");
  EXPECT_TRUE(either.MatchesText("ax"));
  EXPECT_TRUE(either.MatchesText("xb"));
  EXPECT_FALSE(either.MatchesText("xa"));
  EXPECT_TRUE(Compiled("^(a|b)$").MatchesText("b"));
  EXPECT_FALSE(Compiled("^(a|b)$").MatchesText("ab"));
  EXPECT_TRUE(Compiled("^a{2,3}$").MatchesText("aaa"));
  EXPECT_FALSE(Compiled("^a{2,3}$").MatchesText("aaaa"));
  EXPECT_TRUE(Compiled("^(?:ab)+?$").MatchesText("abab"));
  EXPECT_TRUE(Compiled("^(?<year>\\d{4})-\\d\\d$").MatchesText("2026-12"));
  EXPECT_TRUE(Compiled("^a{,2}$").MatchesText("a{,2}")) << "not a count: literal braces";
  EXPECT_TRUE(Compiled("^\\x41\\u0042\\.\\cJ$").MatchesText("AB.\n"));
}

TEST(StringPatternTest, NonAsciiCodePointsPassWhereTheClassHoldsThemAll) {
  const std::string e_acute = "\xC3\xA9", line_separator = "\xE2\x80\xA8", nbsp = "\xC2\xA0";
  EXPECT_TRUE(Compiled("^.$").MatchesText(e_acute));
  EXPECT_FALSE(Compiled("^.$").MatchesText(line_separator)) << "'.' stops at line terminators";
  EXPECT_FALSE(Compiled("^.$").MatchesText("\n"));
  EXPECT_TRUE(Compiled("^[^a]$").MatchesText(e_acute));
  EXPECT_TRUE(Compiled("^[^a]$").MatchesText(line_separator));
  EXPECT_TRUE(Compiled("^\\W\\D$").MatchesText(e_acute + e_acute));
  EXPECT_TRUE(Compiled("^\\s$").MatchesText(line_separator));
  // \s holds Unicode spaces (no-break space among them) this alphabet does
  // not tell apart: \S and classes with \s take no non-ASCII code point.
  EXPECT_FALSE(Compiled("^\\S$").MatchesText(e_acute));
  EXPECT_FALSE(Compiled("^[^\\s]$").MatchesText(nbsp));
  EXPECT_FALSE(Compiled("^[\\S]$").MatchesText(e_acute));
  EXPECT_TRUE(Compiled("^\\S$").MatchesText("x"));
  // ... while [\s\S], all of them, takes any.
  EXPECT_TRUE(Compiled("^[\\s\\S]$").MatchesText(e_acute));
  EXPECT_TRUE(Compiled("^[^\\s\\S]|x$").MatchesText("x"));
}

TEST(StringPatternTest, ConstructsNotReadAreRefusedByName) {
  auto refused = [](const std::string& pattern) {
    return std::string(StringPattern::Compile(pattern, "schema/properties/id").status().message());
  };
  EXPECT_THAT(refused("a(?=b)"), HasSubstr("schema/properties/id: pattern 'a(?=b)': lookarounds"));
  EXPECT_THAT(refused("(?<!a)b"), HasSubstr("lookarounds"));
  EXPECT_THAT(refused("(?i)a"), HasSubstr("'(?i' is not ECMA-262's"));
  EXPECT_THAT(refused("(?P<n>a)"), HasSubstr("'(?P' is not ECMA-262's"));
  EXPECT_THAT(refused(std::string(100, '(') + "a" + std::string(100, ')')), HasSubstr("groups nested more than 64"));
  EXPECT_THAT(refused(std::string(5000, 'a')), HasSubstr("5000 bytes, more than the 4096 read"));
  // A pattern whose closures are long and many: refused by the work bound,
  // not compiled for minutes (a request waits on it).
  std::string classes = "^z";
  for (int c = 1; c < 128; ++c) classes += "\\x" + std::string(1, "0123456789abcdef"[c / 16]) + "0123456789abcdef"[c % 16];
  EXPECT_THAT(refused("^a{0,999}[^a](?:b?){1000}(?:b?){1000}(?:b?){1000}(?:b?){1000}|" + classes),
              HasSubstr("too complex"));
  EXPECT_THAT(refused("(a)\\1"), HasSubstr("backreferences"));
  EXPECT_THAT(refused("\\bword"), HasSubstr("word boundaries"));
  EXPECT_THAT(refused("a^"), HasSubstr("'^' inside the pattern"));
  EXPECT_THAT(refused("a$b"), HasSubstr("'$' inside the pattern"));
  EXPECT_THAT(refused("(a$)"), HasSubstr("'$' inside the pattern"));
  EXPECT_THAT(refused("caf\xC3\xA9"), HasSubstr("non-ASCII characters in a pattern are not supported"));
  EXPECT_THAT(refused("\\u00e9"), HasSubstr("non-ASCII"));
  EXPECT_THAT(refused("a{1001}"), HasSubstr("a count above 1000"));
  EXPECT_THAT(refused("a{3,2}"), HasSubstr("counts down"));
  EXPECT_THAT(refused("(a"), HasSubstr("a '(' without its ')'"));
  EXPECT_THAT(refused("a)"), HasSubstr("a ')' without its '('"));
  EXPECT_THAT(refused("*a"), HasSubstr("nothing to repeat"));
  EXPECT_THAT(refused("a**"), HasSubstr("nothing to repeat"));
  EXPECT_THAT(refused("[ab"), HasSubstr("a '[' without its ']'"));
  EXPECT_THAT(refused("[z-a]"), HasSubstr("a range goes down"));
  EXPECT_THAT(refused("\\q"), HasSubstr("'\\q' is not an escape"));
  EXPECT_THAT(refused("^[]$"), HasSubstr("matches no string"));
  EXPECT_THAT(refused("^(a{1,1000}){1,1000}$"), HasSubstr("states"));
}

TEST(StringPatternTest, EachStateKnowsTheFewestAndMostCodePointsToAMatch) {
  const StringPattern bounded = Compiled("^a{2,4}$");
  EXPECT_EQ(bounded.Fewest(bounded.start()), 2);
  EXPECT_EQ(bounded.Most(bounded.start()), 4);
  const int32_t one = bounded.Next(bounded.start(), 'a');
  EXPECT_EQ(bounded.Fewest(one), 1);
  EXPECT_EQ(bounded.Most(one), 3);
  EXPECT_EQ(bounded.Next(bounded.start(), 'b'), -1);
  const StringPattern loop = Compiled("^ab+$");
  EXPECT_EQ(loop.Fewest(loop.start()), 2);
  EXPECT_EQ(loop.Most(loop.start()), kUnboundedPatternLength);
  // A state with no way to a match is no state: "^ab" after "b" is refused.
  const StringPattern prefix = Compiled("^ab");
  EXPECT_EQ(prefix.Next(prefix.start(), 'b'), -1);
}

// A random pattern over a, b and c with the constructs read.
std::string RandomPattern(std::mt19937& random, int depth) {
  auto pick = [&](int n) { return static_cast<int>(random() % static_cast<uint32_t>(n)); };
  std::string out;
  const int items = 1 + pick(3);
  for (int i = 0; i < items; ++i) {
    std::string atom;
    switch (depth > 2 ? pick(5) : pick(7)) {
      case 0: atom = std::string(1, "abc"[pick(3)]); break;
      case 1: atom = "."; break;
      case 2: atom = pick(2) ? "[ab]" : "[^a\\n]"; break;
      case 3: atom = pick(2) ? "\\w" : "\\S"; break;
      case 4: atom = pick(2) ? "[a-b]" : "\\s"; break;
      case 5: atom = "(" + RandomPattern(random, depth + 1) + ")"; break;
      default: atom = "(?:" + RandomPattern(random, depth + 1) + "|" + RandomPattern(random, depth + 1) + ")"; break;
    }
    // Groups take no unbounded repetition: std::regex loops forever on a
    // repeated group that can match nothing, such as (a*)*.
    static const char* kQuantifiers[] = {"", "?", "{2}", "{1,3}", "*", "+", "{0,}", "*?", ""};
    const bool group = atom[0] == '(';
    out += atom + kQuantifiers[pick(group ? 4 : 9)];
  }
  return out;
}

TEST(StringPatternTest, RandomPatternsAgreeWithStdRegexOnRandomStrings) {
  std::mt19937 random(20261207);
  int matched = 0, checked = 0, too_large = 0;
  for (int p = 0; p < 300; ++p) {
    std::string pattern = RandomPattern(random, 0);
    if (random() % 2) pattern = "^" + pattern;
    if (random() % 2) pattern += "$";
    auto compiled = StringPattern::Compile(pattern, "pattern");
    if (!compiled.ok() && (absl::StrContains(compiled.status().message(), "states") ||
                           absl::StrContains(compiled.status().message(), "too complex"))) {
      ++too_large;  // counts in counts: refused, as the note says
      continue;
    }
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    const std::regex reference(pattern, std::regex::ECMAScript);
    for (int s = 0; s < 40; ++s) {
      std::string text;
      const int length = static_cast<int>(random() % 7);
      for (int k = 0; k < length; ++k) text.push_back("abcx \n"[random() % 6]);
      const bool expected = std::regex_search(text, reference);
      ASSERT_EQ(compiled->MatchesText(text), expected) << "pattern '" << pattern << "' on '" << text << "'";
      matched += expected ? 1 : 0;
      ++checked;
    }
  }
  EXPECT_LT(too_large, 15);
  EXPECT_GT(matched, checked / 10);
  EXPECT_LT(matched, checked - checked / 10);
}

// What the automaton of a format lets through, drawn at random, read by an
// independent reader of the form: inet_pton for IPv6, RFC 1123's rules for
// a hostname.
bool IsHostname(const std::string& text) {
  if (text.empty() || text.size() > 253) return false;
  std::vector<std::string> labels = absl::StrSplit(text, '.');
  for (const std::string& label : labels) {
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') return false;
    for (char c : label) {
      if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-') return false;
    }
  }
  const std::string& top = labels.back();
  return std::any_of(top.begin(), top.end(), [](char c) { return absl::ascii_isalpha(static_cast<unsigned char>(c)); });
}

TEST(StringPatternTest, RandomHostnamesAndIpv6AddressesReadBack) {
  std::mt19937 random(20261207);
  for (const std::string name : {"ipv6", "hostname"}) {
    auto text = FormatPattern(name, "format");
    ASSERT_TRUE(text.ok()) << text.status();
    const StringPattern pattern = Compiled(*text);
    int drawn = 0;
    for (int i = 0; i < 2000; ++i) {
      std::string out;
      int32_t state = pattern.start();
      // Each step a random ASCII symbol that keeps a match ahead; stop at a
      // match with probability 1/8 (or when nothing may follow).
      while (true) {
        std::vector<int> next;
        for (int symbol = 0; symbol < 128; ++symbol) {
          if (pattern.Next(state, symbol) >= 0) next.push_back(symbol);
        }
        if (pattern.Matches(state) && (next.empty() || random() % 8 == 0)) break;
        ASSERT_FALSE(next.empty()) << name << ": a dead end after '" << out << "'";
        const int symbol = next[random() % next.size()];
        out.push_back(static_cast<char>(symbol));
        state = pattern.Next(state, symbol);
      }
      ++drawn;
      if (name == "ipv6") {
        in6_addr address;
        EXPECT_EQ(inet_pton(AF_INET6, out.c_str(), &address), 1) << out;
      } else {
        EXPECT_TRUE(IsHostname(out)) << out;
      }
    }
    EXPECT_EQ(drawn, 2000);
  }
}

TEST(StringPatternTest, FormatsArePatternsOfTheirForms) {
  auto format = [](const std::string& name) {
    auto pattern = FormatPattern(name, "schema/format");
    EXPECT_TRUE(pattern.ok()) << pattern.status();
    return Compiled(pattern.ok() ? *pattern : "");
  };
  struct Case {
    std::string format;
    std::vector<std::string> valid, invalid;
  };
  for (const Case& c : std::vector<Case>{
           {"date", {"2026-12-07", "2024-02-28", "1999-11-30"}, {"2026-02-30", "2026-13-01", "26-12-07", "2026-04-31"}},
           {"time", {"23:59:59Z", "00:00:00.123+01:30"}, {"24:00:00Z", "12:00:00", "12:60:00Z"}},
           {"date-time", {"2026-12-07T14:03:26Z", "2026-01-31T00:00:00.5-08:00"}, {"2026-12-07 14:03:26Z"}},
           {"duration", {"P3Y6M4DT12H30M5S", "PT1H", "P2W", "P1D"}, {"P", "PT", "P1H", "3D", "P1Y1D", "PT1H5S"}},
           {"email", {"a.b+c@example.com", "x@y.io"}, {"@example.com", "a@b", "a..b@example.com", "a b@c.io"}},
           {"ipv4", {"192.168.0.1", "255.255.255.255", "0.0.0.0"}, {"256.1.1.1", "1.2.3", "01.2.3.4"}},
           {"uuid", {"123e4567-e89b-12d3-a456-426614174000"}, {"123e4567e89b12d3a456426614174000"}},
           {"ipv6", {"::", "::1", "1::", "2001:db8::8a2e:370:7334", "1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7::", "fE80::1"},
            {":", "1:2:3:4:5:6:7:8:9", "1::2::3", "12345::", "1:2:3:4:5:6:7", "::ffff:1.2.3.4", "g::1"}},
           {"hostname", {"localhost", "example.com", "a-b.c1.io", "x1.y"}, {"-a.com", "a-.com", "a..com", "1.2.3.4",
                                                                            "a.b.c.d.e", std::string(63, 'a') + ".io",
                                                                            "example.com."}},
       }) {
    const StringPattern pattern = format(c.format);
    for (const std::string& text : c.valid) EXPECT_TRUE(pattern.MatchesText(text)) << c.format << ": " << text;
    for (const std::string& text : c.invalid) EXPECT_FALSE(pattern.MatchesText(text)) << c.format << ": " << text;
  }
  EXPECT_THAT(FormatPattern("uri", "schema/format").status().message(),
              HasSubstr("schema/format: format 'uri' is not supported"));
}

}  // namespace
}  // namespace dslaunch::runtime
