#include "runtime/generate/number_bounds.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace dslaunch::runtime {
namespace {

// A signed decimal: a magnitude's digits (Magnitude's form) and a sign (0 is
// not negative).
struct BoundDecimal {
  bool negative = false;
  std::string int_digits, frac_digits;
};

// The shortest decimal that reads back as `v` (finite).
BoundDecimal ShortestBoundDecimal(double v) {
  char text[512];
  const auto [end, error] = std::to_chars(text, text + sizeof(text), v, std::chars_format::fixed);
  std::string s(text, error == std::errc() ? end : text);
  BoundDecimal d;
  if (!s.empty() && s[0] == '-') {
    d.negative = true;
    s.erase(0, 1);
  }
  const size_t dot = s.find('.');
  d.int_digits = s.substr(0, dot);
  if (dot != std::string::npos) d.frac_digits = s.substr(dot + 1);
  d.int_digits.erase(0, std::min(d.int_digits.find_first_not_of('0'), d.int_digits.size()));
  while (!d.frac_digits.empty() && d.frac_digits.back() == '0') d.frac_digits.pop_back();
  if (d.int_digits.empty() && d.frac_digits.empty()) d.negative = false;
  return d;
}

int CompareMagnitudeDigits(const std::string& a_int, const std::string& a_frac, const std::string& b_int,
                      const std::string& b_frac) {
  if (a_int.size() != b_int.size()) return a_int.size() < b_int.size() ? -1 : 1;
  if (const int c = a_int.compare(b_int); c != 0) return c < 0 ? -1 : 1;
  // Without trailing zeros, the fractions compare as strings.
  if (const int c = a_frac.compare(b_frac); c != 0) return c < 0 ? -1 : 1;
  return 0;
}

int CompareBoundDecimals(const BoundDecimal& a, const BoundDecimal& b) {
  if (a.negative != b.negative) return a.negative ? -1 : 1;
  const int c = CompareMagnitudeDigits(a.int_digits, a.frac_digits, b.int_digits, b.frac_digits);
  return a.negative ? -c : c;
}

std::string BoundDecimalText(const BoundDecimal& d) {
  std::string s = d.negative ? "-" : "";
  s += d.int_digits.empty() ? "0" : d.int_digits;
  if (!d.frac_digits.empty()) absl::StrAppend(&s, ".", d.frac_digits);
  return s;
}

NumberBounds::Relation CompareWithBoundDigit(unsigned char digit, char bound) {
  return digit < static_cast<unsigned char>(bound) ? NumberBounds::kBelow
         : digit > static_cast<unsigned char>(bound) ? NumberBounds::kAbove
                                                      : NumberBounds::kEqual;
}

bool IsDecimalDigitByte(unsigned char b) { return b >= '0' && b <= '9'; }

}  // namespace

// The comparisons with one end `m` of a side, as digits come.
namespace {

template <typename M>
uint8_t AfterIntDigit(const M& m, uint8_t relation, int position, unsigned char digit) {
  if (m.infinite) return NumberBounds::kBelow;
  if (position + 1 > static_cast<int>(m.int_digits.size())) return NumberBounds::kAbove;
  if (relation != NumberBounds::kEqual) return relation;
  return CompareWithBoundDigit(digit, m.int_digits[static_cast<size_t>(position)]);
}

// The integer part of `digits` digits closes: longer is above, shorter below.
template <typename M>
uint8_t AtIntClose(const M& m, uint8_t relation, int digits) {
  if (m.infinite) return NumberBounds::kBelow;
  const int size = static_cast<int>(m.int_digits.size());
  return digits < size ? NumberBounds::kBelow : digits > size ? NumberBounds::kAbove : relation;
}

template <typename M>
uint8_t AfterFracDigit(const M& m, uint8_t relation, int position, unsigned char digit) {
  if (m.infinite) return NumberBounds::kBelow;
  if (relation != NumberBounds::kEqual) return relation;
  const bool within = position < static_cast<int>(m.frac_digits.size());
  return CompareWithBoundDigit(digit, within ? m.frac_digits[static_cast<size_t>(position)] : '0');
}

// The number ends after `digits` fraction digits: equal so far, with more
// of the bound's digits to come, is below it.
template <typename M>
uint8_t AtFracEnd(const M& m, uint8_t relation, int digits) {
  if (m.infinite) return NumberBounds::kBelow;
  if (relation == NumberBounds::kEqual && digits < static_cast<int>(m.frac_digits.size())) return NumberBounds::kBelow;
  return relation;
}

// The number ends with its integer part of `digits` digits: compared as
// a fraction of no digits after it.
template <typename M>
uint8_t AtIntEnd(const M& m, uint8_t relation, int digits) {
  return AtFracEnd(m, AtIntClose(m, relation, digits), 0);
}

bool BothEndsHold(uint8_t low, uint8_t high) { return low != NumberBounds::kBelow && high != NumberBounds::kAbove; }

}  // namespace

absl::StatusOr<NumberBounds> NumberBounds::Compile(const Limits& limits, bool integers_only, int max_bytes,
                                                   const std::string& where) {
  std::optional<BoundDecimal> lowest, highest;
  const std::pair<const char*, const std::optional<double>*> words[] = {
      {"minimum", &limits.minimum},
      {"exclusiveMinimum", &limits.exclusive_minimum},
      {"maximum", &limits.maximum},
      {"exclusiveMaximum", &limits.exclusive_maximum}};
  for (const auto& [word, value] : words) {
    if (!value->has_value()) continue;
    const double v = **value;
    if (!std::isfinite(v) || std::fabs(v) >= 9007199254740992.0) {
      return absl::InvalidArgumentError(absl::StrCat(where, "/", word, ": expected a number below 2^53 in magnitude"));
    }
    const std::string w = word;
    if (w == "minimum" || w == "exclusiveMinimum") {
      const BoundDecimal d = ShortestBoundDecimal(w == "minimum" ? v : std::nextafter(v, INFINITY));
      if (!lowest || CompareBoundDecimals(d, *lowest) > 0) lowest = d;
    } else {
      const BoundDecimal d = ShortestBoundDecimal(w == "maximum" ? v : std::nextafter(v, -INFINITY));
      if (!highest || CompareBoundDecimals(d, *highest) < 0) highest = d;
    }
  }
  NumberBounds bounds;
  bounds.integers_only_ = integers_only;
  if (limits.multiple_of) {
    const double m = *limits.multiple_of;
    if (!(m >= 1 && m <= kMaxMultipleOf && std::floor(m) == m)) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "/multipleOf: ", m, " is not held: only a whole number from 1 to ", kMaxMultipleOf,
          " is (validators divide by a fractional step in doubles, so no output passes them all)"));
    }
    bounds.modulus_ = static_cast<int>(m);
    bounds.integers_only_ = true;  // a multiple of a whole number is one
    // Within 2^53, where a double holds every integer: a JavaScript
    // validator reads a longer one rounded, a multiple no more.
    const BoundDecimal top{false, "9007199254740991", ""}, bottom{true, "9007199254740991", ""};
    if (!highest || CompareBoundDecimals(top, *highest) < 0) highest = top;
    if (!lowest || CompareBoundDecimals(bottom, *lowest) > 0) lowest = bottom;
  }
  if (lowest) bounds.lowest_ = BoundDecimalText(*lowest);
  if (highest) bounds.highest_ = BoundDecimalText(*highest);
  // Without '-': magnitudes [max(lowest, 0), highest]; with it:
  // [max(-highest, 0), -lowest]. A side is empty when its far end has the
  // other sign (a zero end is neither).
  auto digits_of = [](const BoundDecimal& d) { return Magnitude{d.int_digits, d.frac_digits}; };
  auto is_zero = [](const BoundDecimal& d) { return d.int_digits.empty() && d.frac_digits.empty(); };
  Side& plus = bounds.sides_[0];
  plus.empty = highest && highest->negative;
  if (lowest && !lowest->negative) plus.low = digits_of(*lowest);
  plus.high = highest ? digits_of(*highest) : Magnitude{.infinite = true};
  Side& minus = bounds.sides_[1];
  minus.empty = lowest && !lowest->negative && !is_zero(*lowest);
  if (highest && highest->negative) minus.low = digits_of(*highest);
  minus.high = lowest ? digits_of(*lowest) : Magnitude{.infinite = true};
  for (int sign = 0; sign < 2; ++sign) {
    Side& side = bounds.sides_[sign];
    side.max_digits = max_bytes - sign;
    if (!side.empty && !side.high.infinite &&
        CompareMagnitudeDigits(side.low.int_digits, side.low.frac_digits, side.high.int_digits, side.high.frac_digits) > 0) {
      side.empty = true;
    }
    if (!side.empty) bounds.BuildTables(side);
  }
  if (!bounds.sides_[0].start_feasible && !bounds.sides_[1].start_feasible) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": no ",
        bounds.modulus_ > 1 ? absl::StrCat("multiple of ", bounds.modulus_) : integers_only ? "integer" : "number",
        " lies within its minimum and maximum"));
  }
  return bounds;
}

size_t NumberBounds::TableBytes(const Limits& limits, int max_bytes) {
  double m = limits.multiple_of.value_or(1.0);
  if (!(m >= 1 && m <= kMaxMultipleOf)) m = 1;  // refused by Compile
  return 2 * static_cast<size_t>(max_bytes + 2) * 9 * static_cast<size_t>(m);
}

void NumberBounds::BuildTables(Side& side) const {
  const Magnitude& low = side.low;
  const Magnitude& high = side.high;
  // The fraction digits after f that reach `low` from equal: its own
  // digits, or up to the first of them below 9, raised.
  const int low_frac = static_cast<int>(low.frac_digits.size());
  side.low_needed.assign(static_cast<size_t>(low_frac) + 1, 0);
  int first_below_nine = -1;  // from f on
  for (int f = low_frac - 1; f >= 0; --f) {
    if (low.frac_digits[static_cast<size_t>(f)] != '9') first_below_nine = f;
    int need = low_frac - f;
    if (first_below_nine >= 0) need = std::min(need, first_below_nine - f + 1);
    side.low_needed[static_cast<size_t>(f)] = static_cast<uint16_t>(need);
  }
  // Both ends equal so far (their integer parts alike, and their fractions
  // up to f): the shortest fraction between them is the lower end's own
  // digits, or one digit past where the two first differ (the lower one's
  // raised by one, at most the upper one's).
  side.both_needed.clear();
  if (!high.infinite && low.int_digits == high.int_digits) {
    const int high_frac = static_cast<int>(high.frac_digits.size());
    const int span = std::max(low_frac, high_frac);
    side.both_needed.assign(static_cast<size_t>(span) + 1, 0);
    int first_difference = -1;  // from f on
    for (int f = span - 1; f >= 0; --f) {
      const char a = f < low_frac ? low.frac_digits[static_cast<size_t>(f)] : '0';
      const char b = f < high_frac ? high.frac_digits[static_cast<size_t>(f)] : '0';
      if (a != b) first_difference = f;
      int need = std::max(low_frac - f, 0);
      if (first_difference >= 0) need = std::min(need, first_difference - f + 1);
      side.both_needed[static_cast<size_t>(f)] = static_cast<uint16_t>(need);
    }
  }
  // The integer part, from its longest down (with multipleOf, at each
  // remainder).
  const int max_k = side.max_digits;
  const int m = modulus_;
  side.int_feasible.assign(static_cast<size_t>(max_k + 2) * 9 * static_cast<size_t>(m), 0);
  auto at = [&](int k, uint8_t l, uint8_t h, int r) -> uint8_t& {
    return side.int_feasible[((static_cast<size_t>(k) * 3 + l) * 3 + h) * static_cast<size_t>(m) +
                             static_cast<size_t>(r)];
  };
  for (int k = max_k; k >= 1; --k) {
    const int left = max_k - k;
    for (uint8_t l = 0; l < 3; ++l) {
      for (uint8_t h = 0; h < 3; ++h) {
        const uint8_t closed_low = AtIntClose(low, l, k), closed_high = AtIntClose(high, h, k);
        const bool ends = BothEndsHold(AtIntEnd(low, l, k), AtIntEnd(high, h, k));
        const bool fraction = !integers_only_ && left >= 2 &&
                              FracFeasible(side, closed_low, closed_high, 0, left - 1, /*need_digit=*/true);
        for (int r = 0; r < m; ++r) {
          bool feasible = (ends && r == 0) || fraction;
          for (unsigned char c = '0'; !feasible && left >= 1 && c <= '9'; ++c) {
            feasible = at(k + 1, AfterIntDigit(low, l, k, c), AfterIntDigit(high, h, k, c), (r * 10 + (c - '0')) % m) != 0;
          }
          at(k, l, h, r) = feasible ? 1 : 0;
        }
      }
    }
  }
  bool start = max_k >= 1 && ZeroFeasible(side);
  for (unsigned char c = '1'; !start && max_k >= 1 && c <= '9'; ++c) {
    start = at(1, AfterIntDigit(low, kEqual, 0, c), AfterIntDigit(high, kEqual, 0, c), (c - '0') % m) != 0;
  }
  side.start_feasible = start;
}

bool NumberBounds::FracFeasible(const Side& side, uint8_t low, uint8_t high, int frac_digits, int digits_left,
                                bool need_digit) const {
  if (low == kBelow || high == kAbove) return false;
  int need = need_digit ? 1 : 0;
  const size_t f = static_cast<size_t>(frac_digits);
  if (low == kEqual && high == kEqual) {
    need = std::max<int>(need, f < side.both_needed.size() ? side.both_needed[f] : 0);
  } else if (low == kEqual) {
    need = std::max<int>(need, f < side.low_needed.size() ? side.low_needed[f] : 0);
  }
  return need <= digits_left;
}

bool NumberBounds::ZeroFeasible(const Side& side) const {
  if (BothEndsHold(AtIntEnd(side.low, kEqual, 0), AtIntEnd(side.high, kEqual, 0))) return true;
  const uint8_t low = AtIntClose(side.low, kEqual, 0), high = AtIntClose(side.high, kEqual, 0);
  const int left = side.max_digits - 1;
  return !integers_only_ && left >= 2 && FracFeasible(side, low, high, 0, left - 1, /*need_digit=*/true);
}

bool NumberBounds::Feasible(const Side& side, const Cursor& cursor) const {
  const int int_bytes = cursor.int_digits == 0 ? 1 : cursor.int_digits;
  switch (cursor.phase) {
    case kStart:
      return side.start_feasible;
    case kZero:
      return ZeroFeasible(side);
    case kInt:
      return cursor.int_digits <= side.max_digits &&
             side.int_feasible[((static_cast<size_t>(cursor.int_digits) * 3 + cursor.low) * 3 + cursor.high) *
                                   static_cast<size_t>(modulus_) +
                               cursor.remainder] != 0;
    case kDot:
      return FracFeasible(side, cursor.low, cursor.high, 0, side.max_digits - int_bytes - 1, /*need_digit=*/true);
    case kFrac:
      return FracFeasible(side, cursor.low, cursor.high, cursor.frac_digits,
                          side.max_digits - int_bytes - 1 - cursor.frac_digits, /*need_digit=*/false);
  }
  return false;
}

bool NumberBounds::Step(Cursor& cursor, unsigned char b) const {
  Cursor next = cursor;
  const Side& side = sides_[cursor.negative ? 1 : 0];
  switch (cursor.phase) {
    case kStart:
      if (b == '-' && !cursor.negative) {
        next.negative = true;
      } else if (b == '0') {
        next.phase = kZero;
      } else if (IsDecimalDigitByte(b)) {
        next.phase = kInt;
        next.int_digits = 1;
        next.remainder = static_cast<uint16_t>((b - '0') % modulus_);
        next.low = AfterIntDigit(side.low, kEqual, 0, b);
        next.high = AfterIntDigit(side.high, kEqual, 0, b);
      } else {
        return false;
      }
      break;
    case kZero:
    case kInt: {
      const int k = cursor.phase == kZero ? 0 : cursor.int_digits;
      if (b == '.' && !integers_only_) {
        next.phase = kDot;
        next.low = AtIntClose(side.low, cursor.low, k);
        next.high = AtIntClose(side.high, cursor.high, k);
      } else if (cursor.phase == kInt && IsDecimalDigitByte(b)) {
        next.int_digits = static_cast<uint8_t>(k + 1);
        next.remainder = static_cast<uint16_t>((cursor.remainder * 10 + (b - '0')) % modulus_);
        next.low = AfterIntDigit(side.low, cursor.low, k, b);
        next.high = AfterIntDigit(side.high, cursor.high, k, b);
      } else {
        return false;
      }
      break;
    }
    case kDot:
    case kFrac:
      if (!IsDecimalDigitByte(b)) return false;
      next.phase = kFrac;
      next.frac_digits = static_cast<uint8_t>(cursor.frac_digits + 1);
      next.low = AfterFracDigit(side.low, cursor.low, cursor.frac_digits, b);
      next.high = AfterFracDigit(side.high, cursor.high, cursor.frac_digits, b);
      break;
  }
  const Side& next_side = sides_[next.negative ? 1 : 0];
  if (next_side.empty || !Feasible(next_side, next)) return false;
  cursor = next;
  return true;
}

bool NumberBounds::MayEnd(const Cursor& cursor) const {
  const Side& side = sides_[cursor.negative ? 1 : 0];
  if (side.empty) return false;
  switch (cursor.phase) {
    case kZero:
      return BothEndsHold(AtIntEnd(side.low, kEqual, 0), AtIntEnd(side.high, kEqual, 0));
    case kInt:
      return cursor.remainder == 0 && BothEndsHold(AtIntEnd(side.low, cursor.low, cursor.int_digits),
                                                   AtIntEnd(side.high, cursor.high, cursor.int_digits));
    case kFrac:
      return BothEndsHold(AtFracEnd(side.low, cursor.low, cursor.frac_digits),
                     AtFracEnd(side.high, cursor.high, cursor.frac_digits));
    default:
      return false;
  }
}

}  // namespace dslaunch::runtime
