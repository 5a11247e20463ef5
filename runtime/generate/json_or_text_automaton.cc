#include "runtime/generate/json_or_text_automaton.h"

namespace dslaunch::runtime {

namespace {
bool IsBlankByte(unsigned char b) { return b == ' ' || b == '\t' || b == '\n' || b == '\r'; }
}  // namespace

bool JsonOrTextAutomaton::Step(unsigned char b) {
  switch (mode_) {
    case kLead:
      if (IsBlankByte(b)) return true;
      if (b != '{') {
        mode_ = kText;
        return true;
      }
      if (!json_.Step(b)) return false;  // the schema takes no object
      mode_ = kJson;
      return true;
    case kJson:
      if (!json_.Finished()) return json_.Step(b);
      mode_ = kAfterCall;  // the call has closed: what follows it
      [[fallthrough]];
    case kAfterCall:
      if (IsBlankByte(b)) return true;
      if (b != ';') return false;
      mode_ = kNextCall;
      return true;
    case kNextCall: {
      if (IsBlankByte(b)) return true;
      JsonSchemaAutomaton next = start_;
      if (b != '{' || !next.Step(b)) return false;
      json_ = std::move(next);
      mode_ = kJson;
      return true;
    }
    case kText:
      return true;
  }
  return false;
}

std::string JsonOrTextAutomaton::Key() const {
  // Text takes every token whatever the schema; before and in a call, the
  // call's state (its schema's digest first) decides; between calls only
  // the mode (what came before does not change what may follow).
  switch (mode_) {
    case kText:
      return "jt-text";
    case kAfterCall:
      return "jt-after" + start_.Key();
    case kNextCall:
      return "jt-next" + start_.Key();
    case kJson:
      if (json_.Finished()) return "jt-after" + start_.Key();
      return "jt-json" + json_.Key();
    case kLead:
      break;
  }
  return "jt-lead" + json_.Key();
}

}  // namespace dslaunch::runtime
