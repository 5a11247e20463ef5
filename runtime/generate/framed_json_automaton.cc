#include "runtime/generate/framed_json_automaton.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace dslaunch::runtime {

FramedJsonAutomaton::FramedJsonAutomaton(const Frame* frame, JsonSchemaAutomaton json)
    : frame_(frame), json_(std::move(json)), phase_(frame->before.empty() ? kJson : kBefore) {}

bool FramedJsonAutomaton::Step(unsigned char b) {
  if (phase_ == kBefore) {
    if (b != static_cast<unsigned char>(frame_->before[at_])) return false;
    if (++at_ == frame_->before.size()) {
      phase_ = kJson;
      at_ = 0;
    }
    return true;
  }
  if (phase_ == kJson) {
    if (!json_.Complete()) return json_.Step(b);
    if (!json_.Finished()) {  // a number that may go on
      JsonSchemaAutomaton next = json_;
      if (next.Step(b)) {
        json_ = next;
        return true;
      }
    }
    phase_ = kAfter;
    at_ = 0;
  }
  if (at_ >= frame_->after.size() || b != static_cast<unsigned char>(frame_->after[at_])) return false;
  ++at_;
  return true;
}

bool FramedJsonAutomaton::Complete() const {
  if (frame_->after.empty()) return phase_ == kJson && json_.Complete();
  return phase_ == kAfter && at_ == frame_->after.size();
}

bool FramedJsonAutomaton::Finished() const {
  if (frame_->after.empty()) return phase_ == kJson && json_.Finished();
  return Complete();
}

std::string FramedJsonAutomaton::Key() const {
  std::string key = absl::StrCat("framed", frame_->before.size(), ":", frame_->before, frame_->after.size(), ":",
                                 frame_->after, "|", static_cast<int>(phase_), ":", at_, "|");
  return key + json_.Key();
}

}  // namespace dslaunch::runtime
