#include "runtime/generate/json_or_text_automaton.h"

namespace dslaunch::runtime {

bool JsonOrTextAutomaton::Step(unsigned char b) {
  switch (mode_) {
    case kLead:
      if (b == ' ' || b == '\t' || b == '\n' || b == '\r') return true;
      if (b != '{') {
        mode_ = kText;
        return true;
      }
      if (!json_.Step(b)) return false;  // the schema takes no object
      mode_ = kJson;
      return true;
    case kJson:
      return json_.Step(b);
    case kText:
      return true;
  }
  return false;
}

std::string JsonOrTextAutomaton::Key() const {
  // Text takes every token whatever the schema; before and in the value,
  // the value's state (its schema's digest first) decides.
  if (mode_ == kText) return "jt-text";
  return std::string(mode_ == kLead ? "jt-lead" : "jt-json") + json_.Key();
}

}  // namespace dslaunch::runtime
