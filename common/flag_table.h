// The command-line flags of a dslaunch binary as one table: each flag's name,
// kind, default, bound and one-line doc, driving both parsing and --help
// (STYLE.md 7: one config registry per process).
//
//   FlagTable flags("dsagent", "dsagent --token_file FILE [flags]");
//   flags.Int("--lease_ms", &lease_ms, "MS", "stop a job's ranks after ...", {500, 86400000});
//   absl::Status parsed = flags.Parse(args);   // args without argv[0]
//   if (flags.help_requested()) print(flags.Help());
//
// Rules, the same in every binary:
// - names match exactly ("--device", never a prefix of it); an unknown flag is
//   an error that names it and suggests the nearest name (common/nearest_name.h);
// - a value comes as `--name=value` or `--name value`; an empty value is an
//   error (usually an unset shell variable);
// - a bool flag is `--name`, `--name=true` or `--name=false`;
// - a repeated flag appends each value in order;
// - every argument that does not start with '-' is a positional, and so is
//   everything after "--";
// - `--help` and `--version` are in every table.
// The default shown by --help is the target's value when the flag is added:
// a default is written once, where the target is initialised.
//
// Not thread-safe; parse once in main (or in a parser function).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace dslaunch {

struct IntBounds {
  int64_t min = INT64_MIN;
  int64_t max = INT64_MAX;
};

struct DoubleBounds {
  double min = -1e308;
  double max = 1e308;
  bool min_exclusive = false;  // e.g. "a positive number": (0, max]
};

class FlagTable {
 public:
  // `usage` is the synopsis --help starts with ("dsrank JOB.cfg [flags]").
  FlagTable(std::string program, std::string usage);

  // Each returns *this; `name` starts with "--". `one_of`, when not empty,
  // lists the values a string flag accepts.
  FlagTable& String(std::string name, std::string* target, std::string metavar, std::string doc,
                    std::vector<std::string> one_of = {});
  FlagTable& Int(std::string name, int64_t* target, std::string metavar, std::string doc,
                 IntBounds bounds = {});
  FlagTable& Double(std::string name, double* target, std::string metavar, std::string doc,
                    DoubleBounds bounds = {});
  FlagTable& Bool(std::string name, bool* target, std::string doc);
  FlagTable& Repeated(std::string name, std::vector<std::string>* target, std::string metavar,
                      std::string doc);
  // Positionals: described for --help; Parse collects them.
  FlagTable& Positional(std::string metavar, std::string doc);

  // Parses `args` (without the program name). Stops at the first error,
  // which names the flag. --help and --version end parsing successfully.
  absl::Status Parse(const std::vector<std::string>& args);

  const std::vector<std::string>& positionals() const { return positionals_; }
  bool help_requested() const { return help_; }
  bool version_requested() const { return version_; }

  // The usage line, every positional and every flag with its doc and default.
  std::string Help() const;
  // "dsagent 0.1 (rank environment contract v1)" (common/version.h).
  std::string Version() const;

 private:
  enum class Kind { kString, kInt, kDouble, kBool, kRepeated };
  struct Flag {
    std::string name;
    Kind kind;
    std::string metavar;
    std::string doc;
    std::string default_text;  // empty: none shown
    std::vector<std::string> one_of;
    IntBounds int_bounds;
    DoubleBounds double_bounds;
    std::variant<std::string*, int64_t*, double*, bool*, std::vector<std::string>*> target;
  };

  FlagTable& Add(Flag flag);
  const Flag* Find(absl::string_view name) const;
  absl::Status Unknown(absl::string_view name) const;
  absl::Status Set(const Flag& flag, const std::string& value) const;

  const std::string program_;
  const std::string usage_;
  std::vector<Flag> flags_;
  std::vector<std::pair<std::string, std::string>> positional_docs_;
  std::vector<std::string> positionals_;
  bool help_ = false;
  bool version_ = false;
};

}  // namespace dslaunch
