#include "runtime/generate/number_bounds.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;

// A plain decimal (no exponent) as its sign and digits: the integer part
// without leading zeros, the fraction without trailing zeros.
struct DecimalDigits {
  bool negative = false;
  std::string_view whole, fraction;
};

DecimalDigits SplitDecimal(std::string_view s) {
  DecimalDigits d;
  d.negative = !s.empty() && s[0] == '-';
  if (d.negative) s.remove_prefix(1);
  const size_t dot = s.find('.');
  d.whole = s.substr(0, dot);
  d.fraction = dot == std::string_view::npos ? std::string_view() : s.substr(dot + 1);
  while (!d.whole.empty() && d.whole[0] == '0') d.whole.remove_prefix(1);
  while (!d.fraction.empty() && d.fraction.back() == '0') d.fraction.remove_suffix(1);
  if (d.whole.empty() && d.fraction.empty()) d.negative = false;
  return d;
}

// The exact values of two plain decimals, by their digits: -1, 0 or 1.
int CompareDecimalDigits(const DecimalDigits& a, const DecimalDigits& b) {
  if (a.negative != b.negative) return a.negative ? -1 : 1;
  int c = 0;
  if (a.whole.size() != b.whole.size()) {
    c = a.whole.size() < b.whole.size() ? -1 : 1;
  } else if (const int w = a.whole.compare(b.whole); w != 0) {
    c = w < 0 ? -1 : 1;
  } else if (const int f = a.fraction.compare(b.fraction); f != 0) {
    c = f < 0 ? -1 : 1;  // without trailing zeros, fractions compare as strings
  }
  return a.negative ? -c : c;
}

int CompareDecimalText(std::string_view a, std::string_view b) {
  return CompareDecimalDigits(SplitDecimal(a), SplitDecimal(b));
}

std::string Shortest(double v) {
  char text[512];
  const auto [end, error] = std::to_chars(text, text + sizeof(text), v, std::chars_format::fixed);
  return std::string(text, end);
}

struct Case {
  NumberBounds::Limits limits;
  bool integers_only = false;
  int max_bytes = 5;
  std::string name;
};

// Walks every number of the grammar (an optional '-', "0" or digits without
// a leading zero, an optional '.' and digits) of at most max_bytes bytes,
// with the cursor beside it, and checks: a number the cursor lets end is
// one of the range's (its double against the bounds, as a validator
// compares it, and its digits against the inclusive decimal ends of Note
// [Number bounds]); every number of the range is let through; and every
// prefix the cursor takes leads on to some number it lets end.
class Walk {
 public:
  Walk(const NumberBounds& bounds, const Case& c) : bounds_(bounds), case_(c) {
    const auto& l = c.limits;
    if (l.minimum) low_ = Shortest(*l.minimum);
    if (l.exclusive_minimum) {
      const std::string e = Shortest(std::nextafter(*l.exclusive_minimum, INFINITY));
      if (low_.empty() || CompareDecimalText(e, low_) > 0) low_ = e;
    }
    if (l.maximum) high_ = Shortest(*l.maximum);
    if (l.exclusive_maximum) {
      const std::string e = Shortest(std::nextafter(*l.exclusive_maximum, -INFINITY));
      if (high_.empty() || CompareDecimalText(e, high_) < 0) high_ = e;
    }
  }

  // Returns whether some number the cursor lets end extends `text`.
  bool Visit(std::string& text, bool alive, const NumberBounds::Cursor& cursor) {
    const bool signed_number = !text.empty() && text[0] == '-';
    const size_t body = text.size() - (signed_number ? 1 : 0);
    const bool has_dot = text.find('.') != std::string::npos;
    const bool grammar_complete = body > 0 && text.back() != '.';
    const bool ends = alive && bounds_.MayEnd(cursor);
    if (grammar_complete) {
      ++numbers_;
      const DecimalDigits value = SplitDecimal(text);
      const auto& multiple_of = case_.limits.multiple_of;
      const bool in_range = (low_.empty() || CompareDecimalDigits(value, SplitDecimal(low_)) >= 0) &&
                            (high_.empty() || CompareDecimalDigits(value, SplitDecimal(high_)) <= 0) &&
                            !((case_.integers_only || multiple_of) && has_dot) &&
                            !(multiple_of && std::strtoll(text.c_str(), nullptr, 10) % static_cast<int64_t>(*multiple_of) != 0);
      if (ends != in_range) ADD_FAILURE() << case_.name << ": " << text << (ends ? " ends" : " does not end");
      if (ends) {
        ++in_range_;
        const double v = std::strtod(text.c_str(), nullptr);
        const auto& l = case_.limits;
        if ((l.minimum && v < *l.minimum) || (l.exclusive_minimum && v <= *l.exclusive_minimum) ||
            (l.maximum && v > *l.maximum) || (l.exclusive_maximum && v >= *l.exclusive_maximum)) {
          ADD_FAILURE() << case_.name << ": " << text << " reads as a double out of range";
        }
      }
    } else if (ends) {
      ADD_FAILURE() << case_.name << ": '" << text << "' is not a number, yet ends";
    }
    bool leads_on = ends;
    if (static_cast<int>(text.size()) < case_.max_bytes) {
      const bool leading_zero = body == 1 && text.back() == '0';  // "0" or "-0": no digit follows
      for (unsigned char b : std::string_view("-0123456789.")) {
        if (b == '-' ? !text.empty() : b == '.' ? (body == 0 || has_dot) : leading_zero) continue;
        NumberBounds::Cursor next = cursor;
        const bool taken = alive && bounds_.Step(next, b);
        if (!taken && alive && next.phase != cursor.phase) ADD_FAILURE() << "a refused byte moved the cursor";
        text.push_back(static_cast<char>(b));
        leads_on = Visit(text, taken, taken ? next : cursor) || leads_on;
        text.pop_back();
      }
    }
    if (alive && !leads_on) ADD_FAILURE() << case_.name << ": the cursor took '" << text << "', which leads nowhere";
    return leads_on && alive;
  }

  int numbers() const { return numbers_; }
  int in_range() const { return in_range_; }

 private:
  const NumberBounds& bounds_;
  const Case& case_;
  std::string low_, high_;
  int numbers_ = 0, in_range_ = 0;
};

void CheckEveryShortNumber(const Case& c) {
  SCOPED_TRACE(c.name);
  auto bounds = NumberBounds::Compile(c.limits, c.integers_only, c.max_bytes, "schema");
  ASSERT_TRUE(bounds.ok()) << bounds.status();
  Walk walk(*bounds, c);
  std::string text;
  walk.Visit(text, true, NumberBounds::Cursor{});
  EXPECT_GT(walk.numbers(), 10000);
  EXPECT_GT(walk.in_range(), 0);
}

Case Named(std::string name, std::optional<double> minimum, std::optional<double> exclusive_minimum,
           std::optional<double> maximum, std::optional<double> exclusive_maximum, bool integers_only = false,
           int max_bytes = 5, std::optional<double> multiple_of = std::nullopt) {
  Case c;
  c.max_bytes = max_bytes;
  c.limits = {minimum, exclusive_minimum, maximum, exclusive_maximum, multiple_of};
  c.integers_only = integers_only;
  c.name = std::move(name);
  return c;
}

TEST(NumberBoundsTest, EveryShortNumberIsLetThroughExactlyWhenInRange) {
  const std::optional<double> none;
  const std::vector<Case> cases = {
      Named("none", none, none, none, none),
      Named("minimum 0", 0.0, none, none, none),
      Named("exclusiveMinimum 0", none, 0.0, none, none),
      Named("maximum 0", none, none, 0.0, none),
      Named("exclusiveMaximum 0", none, none, none, 0.0),
      Named("[-1.5, 2.25]", -1.5, none, 2.25, none),
      Named("[0.1, 0.3]", 0.1, none, 0.3, none),
      Named("(0.1, 0.2)", none, 0.1, none, 0.2),
      Named("[12.5, 12.5]", 12.5, none, 12.5, none),
      Named("[0.19, 0.2]", 0.19, none, 0.2, none),
      Named("[-0.001, 0.001]", -0.001, none, 0.001, none),
      Named("minimum 99.9", 99.9, none, none, none),
      Named("maximum -99.95", none, none, -99.95, none, false, 6),
      Named("[12345, 99999]", 12345.0, none, 99999.0, none),
      Named("[0.0999, 0.1001]", 0.0999, none, 0.1001, none),
      Named("[3.99, 4.01]", 3.99, none, 4.01, none),
      Named("minimum 1e-7", 1e-7, none, none, none),
      Named("[25, 30] (not 1, 10-19, 100-199)", 25.0, none, 30.0, none),
      Named("integers [1.5, 9.5]", 1.5, none, 9.5, none, true),
      Named("integers (-3, 3)", none, -3.0, none, 3.0, true),
      Named("integers minimum 0.999", 0.999, none, none, none, true),
      Named("integers [10, 200]", 10.0, none, 200.0, none, true),
      Named("integers maximum -10", none, none, -10.0, none, true),
      Named("multipleOf 3", none, none, none, none, true, 5, 3.0),
      Named("numbers multipleOf 1", none, none, none, none, false, 5, 1.0),
      Named("[10, 200] multipleOf 7", 10.0, none, 200.0, none, true, 5, 7.0),
      Named("[-50, 50] multipleOf 25", -50.0, none, 50.0, none, true, 5, 25.0),
      Named("numbers (0, 100) multipleOf 10", none, 0.0, none, 100.0, false, 5, 10.0),
      Named("numbers [0.5, 1000.5] multipleOf 1000", 0.5, none, 1000.5, none, false, 5, 1000.0),
      Named("multipleOf 1000", none, none, none, none, true, 5, 1000.0),
      Named("[-7.5, 13.5] multipleOf 13", -7.5, none, 13.5, none, true, 5, 13.0),
  };
  for (const Case& c : cases) CheckEveryShortNumber(c);
}

TEST(NumberBoundsTest, RandomBoundsHoldAlike) {
  std::mt19937 random(20261207);
  auto random_bound = [&]() {
    const int whole = static_cast<int>(random() % 1000);
    const int digits = static_cast<int>(random() % 4);
    double v = whole / std::pow(10.0, static_cast<int>(random() % 3));
    v += static_cast<double>(random() % 1000) / std::pow(10.0, digits + 3);
    return random() % 2 == 0 ? -v : v;
  };
  for (int i = 0; i < 40; ++i) {
    Case c;
    c.max_bytes = 5;
    c.integers_only = random() % 4 == 0;
    double a = random_bound(), b = random_bound();
    if (a > b) std::swap(a, b);
    if (random() % 3 != 0) (random() % 2 ? c.limits.minimum : c.limits.exclusive_minimum) = a;
    if (random() % 3 != 0) (random() % 2 ? c.limits.maximum : c.limits.exclusive_maximum) = b;
    if (random() % 3 == 0) c.limits.multiple_of = std::vector<double>{2, 3, 7, 10, 97}[random() % 5];
    c.name = absl::StrCat("random ", i, ": ", a, " .. ", b, c.integers_only ? " (integers)" : "",
                          c.limits.multiple_of ? absl::StrCat(" multipleOf ", *c.limits.multiple_of) : "");
    auto bounds = NumberBounds::Compile(c.limits, c.integers_only, c.max_bytes, "schema");
    if (!bounds.ok()) {
      // Only a range that holds nothing of at most 5 bytes is refused.
      EXPECT_THAT(std::string(bounds.status().message()), HasSubstr("lies within its minimum and maximum")) << c.name;
      continue;
    }
    CheckEveryShortNumber(c);
  }
}

TEST(NumberBoundsTest, TheJsonAutomatonsBytesReachTinyAndExactBounds) {
  // With the automaton's 40 bytes, exclusiveMinimum 0 is the next double
  // above 0 (5e-324, 324 fraction digits): "0.1" is above it, "0" and "0.0"
  // are not.
  auto positive = NumberBounds::Compile({.exclusive_minimum = 0.0}, false, 40, "schema");
  ASSERT_TRUE(positive.ok()) << positive.status();
  auto run = [](const NumberBounds& bounds, const std::string& text) {
    NumberBounds::Cursor cursor;
    for (unsigned char b : text) {
      if (!bounds.Step(cursor, b)) return -1;
    }
    return bounds.MayEnd(cursor) ? 1 : 0;
  };
  EXPECT_EQ(run(*positive, "0.1"), 1);
  EXPECT_EQ(run(*positive, "0"), 0);  // "0.1" is still to come
  EXPECT_EQ(run(*positive, "0.0"), 0);
  EXPECT_EQ(run(*positive, "0.000000000000000000000000000000000001"), 1);
  EXPECT_EQ(run(*positive, "-"), -1);
  EXPECT_EQ(run(*positive, "7"), 1);
  // 0.1 is the shortest decimal of the double 0.1: it is its own minimum.
  auto tenth = NumberBounds::Compile({.minimum = 0.1, .maximum = 0.1}, false, 40, "schema");
  ASSERT_TRUE(tenth.ok()) << tenth.status();
  EXPECT_EQ(run(*tenth, "0.1"), 1);
  EXPECT_EQ(run(*tenth, "0.10000"), 1);
  EXPECT_EQ(run(*tenth, "0.100001"), -1);
  EXPECT_EQ(tenth->lowest(), "0.1");
  // An exclusive bound next to a double: above 2.5, the next double's digits.
  auto above = NumberBounds::Compile({.exclusive_minimum = 2.5}, false, 40, "schema");
  ASSERT_TRUE(above.ok()) << above.status();
  EXPECT_EQ(above->lowest(), "2.5000000000000004");
  EXPECT_EQ(run(*above, "2.5"), 0);
  EXPECT_EQ(run(*above, "2.51"), 1);
  EXPECT_EQ(run(*above, "3"), 1);
}

TEST(NumberBoundsTest, BoundsNoNumberMeetsAreRefusedByName) {
  auto refused = [](const NumberBounds::Limits& limits, bool integers_only) {
    auto bounds = NumberBounds::Compile(limits, integers_only, 40, "schema/properties/n");
    return bounds.ok() ? std::string("compiled") : std::string(bounds.status().message());
  };
  EXPECT_THAT(refused({.minimum = 1.5, .maximum = 1.9}, true),
              HasSubstr("schema/properties/n: no integer lies within its minimum and maximum"));
  EXPECT_EQ(refused({.minimum = 1.5, .maximum = 1.9}, false), "compiled");
  EXPECT_THAT(refused({.minimum = 2, .maximum = 1}, false), HasSubstr("no number lies within"));
  EXPECT_THAT(refused({.exclusive_minimum = 1, .exclusive_maximum = 1}, false), HasSubstr("no number lies within"));
  EXPECT_THAT(refused({.maximum = 1e300}, false), HasSubstr("schema/properties/n/maximum: expected a number below 2^53"));
  EXPECT_THAT(refused({.minimum = NAN}, false), HasSubstr("schema/properties/n/minimum: expected a number"));
  EXPECT_THAT(refused({.multiple_of = 0.5}, false),
              HasSubstr("schema/properties/n/multipleOf: 0.5 is not held: only a whole number from 1 to 1000 is"));
  EXPECT_THAT(refused({.multiple_of = 1001}, true), HasSubstr("multipleOf: 1001 is not held"));
  EXPECT_THAT(refused({.multiple_of = 0}, true), HasSubstr("multipleOf: 0 is not held"));
  EXPECT_THAT(refused({.minimum = 8, .maximum = 13, .multiple_of = 7}, true),
              HasSubstr("schema/properties/n: no multiple of 7 lies within its minimum and maximum"));
  EXPECT_EQ(refused({.minimum = 8, .maximum = 14, .multiple_of = 7}, true), "compiled");
}

}  // namespace
}  // namespace dslaunch::runtime
