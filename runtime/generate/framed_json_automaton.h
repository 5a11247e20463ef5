// JSON held to a schema between two fixed texts (Note [Constrained output]).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/generate/json_schema_automaton.h"

namespace dslaunch::runtime {

// `before`, a JSON value of the schema, then `after`; the value is whole
// before `after` begins (a number that could go on ends where `after`'s
// first byte comes).
class FramedJsonAutomaton {
 public:
  struct Frame {
    std::string before, after;
  };
  // `frame` outlives the automaton and its copies.
  FramedJsonAutomaton(const Frame* frame, JsonSchemaAutomaton json);
  bool Step(unsigned char b);
  bool Complete() const;
  bool Finished() const;
  std::string Key() const;  // the frame's texts, the phase, then the JSON's key

 private:
  enum Phase : uint8_t { kBefore, kJson, kAfter };
  const Frame* frame_;
  JsonSchemaAutomaton json_;
  Phase phase_;
  size_t at_ = 0;
};

}  // namespace dslaunch::runtime
