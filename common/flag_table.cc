#include "common/flag_table.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/nearest_name.h"
#include "common/version.h"

namespace dslaunch {
namespace {

absl::Status BadValue(absl::string_view flag, absl::string_view value, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(flag, " '", value, "': ", why));
}

std::string ShortestDouble(double value) { return absl::StrCat(value); }

}  // namespace

FlagTable::FlagTable(std::string program, std::string usage)
    : program_(std::move(program)), usage_(std::move(usage)) {
  Add(Flag{"--help", Kind::kBool, "", "print this help and exit", "", {}, {}, {}, &help_});
  Add(Flag{"--version", Kind::kBool, "", "print the version and exit", "", {}, {}, {}, &version_});
}

FlagTable& FlagTable::Add(Flag flag) {
  flags_.push_back(std::move(flag));
  return *this;
}

FlagTable& FlagTable::String(std::string name, std::string* target, std::string metavar,
                             std::string doc, std::vector<std::string> one_of) {
  std::string shown = target->empty() ? "" : *target;
  if (!one_of.empty()) metavar = absl::StrJoin(one_of, "|");
  return Add(Flag{std::move(name), Kind::kString, std::move(metavar), std::move(doc), shown,
                  std::move(one_of), {}, {}, target});
}

FlagTable& FlagTable::Int(std::string name, int64_t* target, std::string metavar, std::string doc,
                          IntBounds bounds) {
  return Add(Flag{std::move(name), Kind::kInt, std::move(metavar), std::move(doc),
                  absl::StrCat(*target), {}, bounds, {}, target});
}

FlagTable& FlagTable::Double(std::string name, double* target, std::string metavar,
                             std::string doc, DoubleBounds bounds) {
  return Add(Flag{std::move(name), Kind::kDouble, std::move(metavar), std::move(doc),
                  ShortestDouble(*target), {}, {}, bounds, target});
}

FlagTable& FlagTable::Bool(std::string name, bool* target, std::string doc) {
  return Add(Flag{std::move(name), Kind::kBool, "", std::move(doc), *target ? "true" : "", {}, {},
                  {}, target});
}

FlagTable& FlagTable::Repeated(std::string name, std::vector<std::string>* target,
                               std::string metavar, std::string doc) {
  return Add(Flag{std::move(name), Kind::kRepeated, std::move(metavar),
                  absl::StrCat(doc, " (repeatable)"), "", {}, {}, {}, target});
}

FlagTable& FlagTable::Positional(std::string metavar, std::string doc) {
  positional_docs_.emplace_back(std::move(metavar), std::move(doc));
  return *this;
}

const FlagTable::Flag* FlagTable::Find(absl::string_view name) const {
  for (const Flag& flag : flags_) {
    if (flag.name == name) return &flag;
  }
  return nullptr;
}

absl::Status FlagTable::Unknown(absl::string_view name) const {
  std::vector<std::string> names;
  for (const Flag& flag : flags_) names.push_back(flag.name);
  // "-device" and "--device" differ by one edit, so a single dash gets a
  // suggestion too.
  std::string nearest = NearestName(name, names);
  if (!nearest.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown flag ", name, "; did you mean ", nearest, "?"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown flag ", name, "; ", program_, " --help lists the flags"));
}

absl::Status FlagTable::Set(const Flag& flag, const std::string& value) const {
  switch (flag.kind) {
    case Kind::kBool: {
      const std::string lower = absl::AsciiStrToLower(value);
      if (lower != "true" && lower != "false") return BadValue(flag.name, value, "expected true or false");
      *std::get<bool*>(flag.target) = lower == "true";
      return absl::OkStatus();
    }
    case Kind::kString:
      if (!flag.one_of.empty() &&
          std::find(flag.one_of.begin(), flag.one_of.end(), value) == flag.one_of.end()) {
        std::string message = absl::StrCat("expected one of ", absl::StrJoin(flag.one_of, ", "));
        std::string nearest = NearestName(value, flag.one_of);
        if (!nearest.empty()) absl::StrAppend(&message, " (did you mean ", nearest, "?)");
        return BadValue(flag.name, value, message);
      }
      *std::get<std::string*>(flag.target) = value;
      return absl::OkStatus();
    case Kind::kRepeated:
      std::get<std::vector<std::string>*>(flag.target)->push_back(value);
      return absl::OkStatus();
    case Kind::kInt: {
      // Only an optional '-' and digits: SimpleAtoi alone would take "+3" and " 3".
      absl::string_view digits = absl::string_view(value).substr(value[0] == '-' ? 1 : 0);
      int64_t parsed = 0;
      if (digits.empty() || !std::all_of(digits.begin(), digits.end(), absl::ascii_isdigit)) {
        return BadValue(flag.name, value, "not an integer");
      }
      const IntBounds& b = flag.int_bounds;
      if (!absl::SimpleAtoi(value, &parsed) || parsed < b.min || parsed > b.max) {
        if (b.min != INT64_MIN && b.max != INT64_MAX) {
          return BadValue(flag.name, value, absl::StrCat("must be in ", b.min, "..", b.max));
        }
        if (b.min != INT64_MIN) return BadValue(flag.name, value, absl::StrCat("must be at least ", b.min));
        return BadValue(flag.name, value, absl::StrCat("must be at most ", b.max));
      }
      *std::get<int64_t*>(flag.target) = parsed;
      return absl::OkStatus();
    }
    case Kind::kDouble: {
      double parsed = 0;
      const DoubleBounds& b = flag.double_bounds;
      if (!absl::SimpleAtod(value, &parsed) || parsed != parsed) {
        return BadValue(flag.name, value, "not a number");
      }
      if (parsed > b.max || parsed < b.min || (b.min_exclusive && parsed == b.min)) {
        return BadValue(flag.name, value,
                        absl::StrCat("must be in ", b.min_exclusive ? "(" : "[", ShortestDouble(b.min),
                                     ", ", ShortestDouble(b.max), "]"));
      }
      *std::get<double*>(flag.target) = parsed;
      return absl::OkStatus();
    }
  }
  return absl::InternalError("unreachable");
}

absl::Status FlagTable::Parse(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      positionals_.insert(positionals_.end(), args.begin() + i + 1, args.end());
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') {
      positionals_.push_back(arg);
      continue;
    }
    absl::string_view name = arg;
    std::optional<std::string> value;
    if (size_t equals = arg.find('='); equals != std::string::npos) {
      name = absl::string_view(arg).substr(0, equals);
      value = arg.substr(equals + 1);
    }
    const Flag* flag = Find(name);
    if (flag == nullptr) return Unknown(name);
    if (flag->kind == Kind::kBool && !value.has_value()) value = "true";
    if (!value.has_value()) {
      // "--loss_log --device cpu" forgot the path.
      if (i + 1 == args.size() || (absl::StartsWith(args[i + 1], "--") && args[i + 1].size() > 2)) {
        return absl::InvalidArgumentError(absl::StrCat(
            flag->name, " needs a value", flag->metavar.empty() ? "" : " (", flag->metavar,
            flag->metavar.empty() ? "" : ")"));
      }
      value = args[++i];
    }
    if (value->empty()) {
      return absl::InvalidArgumentError(absl::StrCat(flag->name, " needs a non-empty value"));
    }
    if (absl::Status set = Set(*flag, *value); !set.ok()) return set;
    if (help_ || version_) return absl::OkStatus();
  }
  return absl::OkStatus();
}

std::string FlagTable::Help() const {
  auto left_column = [](const Flag& flag) {
    return flag.metavar.empty() || flag.kind == Kind::kBool ? absl::StrCat("  ", flag.name)
                                                             : absl::StrCat("  ", flag.name, " ", flag.metavar);
  };
  size_t width = 0;
  for (const Flag& flag : flags_) width = std::max(width, left_column(flag).size());
  for (const auto& [metavar, doc] : positional_docs_) width = std::max(width, metavar.size() + 2);
  std::string help = absl::StrCat("usage: ", usage_, "\n");
  if (!positional_docs_.empty()) absl::StrAppend(&help, "\narguments:\n");
  for (const auto& [metavar, doc] : positional_docs_) {
    absl::StrAppend(&help, "  ", metavar, std::string(width - metavar.size(), ' '), doc, "\n");
  }
  absl::StrAppend(&help, "\nflags (--name=value or --name value):\n");
  for (const Flag& flag : flags_) {
    std::string left = left_column(flag);
    absl::StrAppend(&help, left, std::string(width + 2 - left.size(), ' '), flag.doc);
    if (!flag.default_text.empty()) absl::StrAppend(&help, " (default ", flag.default_text, ")");
    if (flag.kind == Kind::kInt && (flag.int_bounds.min != INT64_MIN || flag.int_bounds.max != INT64_MAX)) {
      absl::StrAppend(&help, " [", flag.int_bounds.min == INT64_MIN ? "" : absl::StrCat(flag.int_bounds.min),
                      "..", flag.int_bounds.max == INT64_MAX ? "" : absl::StrCat(flag.int_bounds.max), "]");
    }
    absl::StrAppend(&help, "\n");
  }
  return help;
}

std::string FlagTable::Version() const { return VersionLine(program_); }

}  // namespace dslaunch
