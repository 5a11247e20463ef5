// A JSON Schema's minimum, maximum, exclusiveMinimum and exclusiveMaximum,
// held on a number as its bytes come, for constrained output.
//
// Note [Number bounds]
// Validators compare a number with its bounds as doubles (Python's
// jsonschema reads "2.5" as a float, JavaScript's every number), and an
// integer's exactly against the bound's double (Python compares an int with
// a float exactly). Constrained output (Note [JSON schemas for constrained
// output]) generates a number that passes under both readings, written
// without an exponent:
//  - each bound becomes an inclusive bound in decimal: minimum m is the
//    shortest decimal that reads back as m (what std::to_chars writes), so a
//    number at or above it reads as at or above m, rounding being monotone;
//    exclusiveMinimum e is the shortest decimal of the next double above e,
//    so a number at or above it reads as above e (and maximum alike,
//    downwards). An integer at or above the shortest decimal of m is at or
//    above m itself: no double lies between m and its shortest decimal, and
//    every integer below 2^53 is a double. So the subset given up is only
//    the numbers between e and the next double after it.
//  - the number's sign picks a range of magnitudes ([max(min, 0), max] for
//    a number without '-', [max(-max, 0), -min] for one with it: "-0" is 0),
//    and its digits are compared with the range's two ends as they come: the
//    integer digits with the same count of the bound's leading ones, then,
//    once the integer part closes (at '.' or at the end), by their count,
//    then the fraction digit by digit.
//  - a byte is taken only when some way on (within the JSON automaton's
//    bytes for a number, kMaxJsonNumberBytes) still ends in the range: for
//    the integer part, a table over (digits so far, the two comparisons)
//    worked out when the schema is compiled; for the fraction, the fewest
//    digits that reach the lower end (writing it out, or raising its first
//    digit below 9), and, when both ends share the digits so far, the
//    fewest that land between them.
// So every number the automaton lets end is in range, and every number in
// range with at most that many bytes and no exponent can be generated
// (number_bounds_test checks both by enumerating every short number).
// Bounds are finite and below 2^53 in magnitude (a bound past it would be
// compared with integers the double does not hold); "type": "integer" keeps
// the fraction out.
//
// multipleOf m, a whole number from 1 to kMaxMultipleOf, is held beside
// them: the number is an integer (no fraction: a multiple of a whole number
// is one), and the cursor keeps its magnitude modulo m as digits come, the
// integer table then running over (digits so far, the two comparisons, the
// remainder), so a digit is taken only when some way on ends in range at a
// remainder of 0, within ±(2^53-1) (a longer integer reads back rounded in
// JavaScript, a multiple no more). A fractional multipleOf is refused:
// validators divide in doubles (Python's jsonschema finds 0.07 no multiple
// of 0.01), so no output would pass them all.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dslaunch::runtime {

inline constexpr int kMaxMultipleOf = 1000;

class NumberBounds {
 public:
  struct Limits {
    std::optional<double> minimum, exclusive_minimum, maximum, exclusive_maximum;
    std::optional<double> multiple_of;
    bool any() const { return minimum || exclusive_minimum || maximum || exclusive_maximum || multiple_of; }
  };
  enum Relation : uint8_t { kBelow, kEqual, kAbove };
  enum Phase : uint8_t { kStart, kZero, kInt, kDot, kFrac };
  // Where a number's bytes stand (a value type: the mask's trie walk copies
  // it); a number starts at Cursor{}.
  struct Cursor {
    uint8_t phase = kStart;
    bool negative = false;
    uint8_t int_digits = 0;   // kInt: the integer part's digits; 0 after "0"
    uint8_t frac_digits = 0;  // kFrac
    // The digits so far against the lower and the upper end of the
    // magnitudes of the number's sign (Note above).
    uint8_t low = kEqual, high = kEqual;
    uint16_t remainder = 0;  // multipleOf: the integer digits so far, modulo it
  };

  // InvalidArgument "`where`: ..." for a bound that is not finite or is
  // 2^53 or past it, a multipleOf that is not a whole number from 1 to
  // kMaxMultipleOf, and bounds no number (integer, multiple) of at most
  // `max_bytes` bytes lies within.
  static absl::StatusOr<NumberBounds> Compile(const Limits& limits, bool integers_only, int max_bytes,
                                              const std::string& where);

  // The bytes of the tables Compile builds for `limits` (a schema's bounds
  // share a budget: CompileJsonSchema).
  static size_t TableBytes(const Limits& limits, int max_bytes);

  // Whether `b` may come next ('-' first, digits, one '.'); if so, the
  // cursor takes it. Anything else (an exponent, a byte after the number)
  // is false, and leaves the cursor as it was.
  bool Step(Cursor& cursor, unsigned char b) const;
  // Whether the number so far is whole and in range.
  bool MayEnd(const Cursor& cursor) const;

  // The inclusive ends as decimals ("" for none), for messages and tests.
  const std::string& lowest() const { return lowest_; }
  const std::string& highest() const { return highest_; }

 private:
  // A magnitude's decimal digits: the integer part without leading zeros
  // ("" for 0), the fraction without trailing zeros; or no bound at all.
  struct Magnitude {
    std::string int_digits, frac_digits;
    bool infinite = false;
  };
  // The magnitudes of one sign.
  struct Side {
    bool empty = true;
    int max_digits = 0;  // the bytes a number of this sign has for digits and '.'
    Magnitude low, high;
    // [((k * 3 + low) * 3 + high) * modulus + remainder], k integer digits so far, k >= 1
    std::vector<uint8_t> int_feasible;
    std::vector<uint16_t> low_needed;   // [f]: the fraction digits after f that reach `low`, from equal
    std::vector<uint16_t> both_needed;  // [f]: the fraction digits after f that land between both ends
    bool start_feasible = false;
  };

  bool FracFeasible(const Side& side, uint8_t low, uint8_t high, int frac_digits, int digits_left,
                    bool need_digit) const;
  bool ZeroFeasible(const Side& side) const;
  bool Feasible(const Side& side, const Cursor& cursor) const;
  void BuildTables(Side& side) const;

  bool integers_only_ = false;
  int modulus_ = 1;  // multipleOf, or 1
  Side sides_[2];  // [0]: without '-', [1]: with it
  std::string lowest_, highest_;
};

}  // namespace dslaunch::runtime
