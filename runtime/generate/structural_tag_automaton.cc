// Note [Structural tags].
#include "runtime/generate/structural_tag_automaton.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "runtime/tokenizer/json_value.h"
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace dslaunch::runtime {
namespace {

absl::Status CheckTagText(const std::string& text, const std::string& field) {
  if (text.empty()) return absl::InvalidArgumentError(absl::StrCat(field, ": empty"));
  if (text.size() > static_cast<size_t>(kMaxStructureTagBytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", text.size(), " bytes, more than the ", kMaxStructureTagBytes, " allowed"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<StructuralTagSpec> ReadStructuralTag(const JsonValue& format, const std::string& field) {
  auto fail = [](const std::string& what) { return absl::InvalidArgumentError(what); };
  if (!format.is_object()) {
    return fail(absl::StrCat(field, ": expected an object with structures and triggers, got ",
                             JsonValue::TypeName(format.type())));
  }
  auto read_string = [](const JsonValue& value, const std::string& name, std::string* out) -> absl::Status {
    if (!value.is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": expected a string, got ", JsonValue::TypeName(value.type())));
    }
    *out = value.string_value();
    return absl::OkStatus();
  };
  StructuralTagSpec spec;
  bool structures_given = false, triggers_given = false;
  for (size_t i = 0; i < format.keys().size(); ++i) {
    const std::string& key = format.keys()[i];
    const JsonValue& item = format.items()[i];
    const std::string at = absl::StrCat(field, ".", key);
    if (key == "type") {
      if (!item.is_string() || item.string_value() != "structural_tag") {
        return fail(absl::StrCat(at, ": expected \"structural_tag\""));
      }
      continue;
    }
    if (key != "structures" && key != "triggers") {
      return fail(absl::StrCat(field, ": unknown field '", key, "' (a structural_tag reads structures and triggers)"));
    }
    if (!item.is_array()) return fail(absl::StrCat(at, ": expected an array, got ", JsonValue::TypeName(item.type())));
    if (key == "triggers") {
      triggers_given = true;
      for (size_t j = 0; j < item.items().size(); ++j) {
        std::string trigger;
        if (absl::Status ok = read_string(item.items()[j], absl::StrCat(at, "[", j, "]"), &trigger); !ok.ok()) return ok;
        spec.triggers.push_back(std::move(trigger));
      }
      continue;
    }
    structures_given = true;
    for (size_t j = 0; j < item.items().size(); ++j) {
      const JsonValue& structure = item.items()[j];
      const std::string here = absl::StrCat(at, "[", j, "]");
      if (!structure.is_object()) {
        return fail(absl::StrCat(here, ": expected an object with begin, schema and end, got ",
                                 JsonValue::TypeName(structure.type())));
      }
      TaggedStructure& tagged = spec.structures.emplace_back();
      const JsonValue* schema = nullptr;
      for (size_t k = 0; k < structure.keys().size(); ++k) {
        const std::string& part = structure.keys()[k];
        const std::string named = absl::StrCat(here, ".", part);
        absl::Status ok;
        if (part == "begin") {
          ok = read_string(structure.items()[k], named, &tagged.begin);
        } else if (part == "end") {
          ok = read_string(structure.items()[k], named, &tagged.end);
        } else if (part == "schema") {
          schema = &structure.items()[k];
        } else {
          return fail(absl::StrCat(here, ": unknown field '", part, "' (begin, schema and end are read)"));
        }
        if (!ok.ok()) return ok;
      }
      if (schema == nullptr) return fail(absl::StrCat(here, ": no schema"));
      auto compiled = CompileJsonSchema(*schema, here + ".schema");
      if (!compiled.ok()) return compiled.status();
      tagged.schema = (*compiled)->text();
    }
  }
  if (!structures_given) return fail(absl::StrCat(field, ": a structural_tag needs its structures"));
  if (!triggers_given) return fail(absl::StrCat(field, ": a structural_tag needs its triggers"));
  auto form = StructuralTagForm::Compile(spec.structures, spec.triggers, /*key_horizon=*/1, field);
  if (!form.ok()) return form.status();
  return spec;
}

absl::StatusOr<std::shared_ptr<const StructuralTagForm>> StructuralTagForm::Compile(
    const std::vector<TaggedStructure>& structures, const std::vector<std::string>& triggers, int64_t key_horizon,
    const std::string& field) {
  if (structures.empty()) return absl::InvalidArgumentError(absl::StrCat(field, ".structures: none given"));
  if (structures.size() > static_cast<size_t>(kMaxTaggedStructures)) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".structures: ", structures.size(),
                                                   ", more than the ", kMaxTaggedStructures, " allowed"));
  }
  if (triggers.empty()) return absl::InvalidArgumentError(absl::StrCat(field, ".triggers: none given"));
  if (triggers.size() > static_cast<size_t>(kMaxStructureTriggers)) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".triggers: ", triggers.size(), ", more than the ",
                                                   kMaxStructureTriggers, " allowed"));
  }
  std::shared_ptr<StructuralTagForm> form(new StructuralTagForm());
  std::string identity;  // what the key prefix digests
  for (size_t j = 0; j < triggers.size(); ++j) {
    const std::string at = absl::StrCat(field, ".triggers[", j, "]");
    if (absl::Status ok = CheckTagText(triggers[j], at); !ok.ok()) return ok;
    if (triggers[j].size() > static_cast<size_t>(kMaxStructureTriggerBytes)) {
      return absl::InvalidArgumentError(absl::StrCat(at, ": ", triggers[j].size(), " bytes, more than the ",
                                                     kMaxStructureTriggerBytes, " allowed"));
    }
    const bool begins_one = std::any_of(structures.begin(), structures.end(), [&](const TaggedStructure& s) {
      return s.begin.compare(0, triggers[j].size(), triggers[j]) == 0;
    });
    if (!begins_one) {
      return absl::InvalidArgumentError(absl::StrCat(at, ": '", triggers[j],
                                                     "' begins no structure's begin (the output would have "
                                                     "nowhere to go after it)"));
    }
    absl::StrAppend(&identity, "t", triggers[j].size(), ":", triggers[j]);
  }
  for (size_t i = 0; i < structures.size(); ++i) {
    const TaggedStructure& s = structures[i];
    const std::string at = absl::StrCat(field, ".structures[", i, "]");
    if (absl::Status ok = CheckTagText(s.begin, at + ".begin"); !ok.ok()) return ok;
    if (absl::Status ok = CheckTagText(s.end, at + ".end"); !ok.ok()) return ok;
    const bool triggered = std::any_of(triggers.begin(), triggers.end(), [&](const std::string& t) {
      return s.begin.compare(0, t.size(), t) == 0;
    });
    if (!triggered) {
      return absl::InvalidArgumentError(
          absl::StrCat(at, ".begin: '", s.begin, "' starts with none of the triggers (it could never open)"));
    }
    auto schema = CompileJsonSchemaText(s.schema, at + ".schema");
    if (!schema.ok()) return schema.status();
    form->frames_.push_back(std::make_unique<FramedJsonAutomaton::Frame>(FramedJsonAutomaton::Frame{s.begin, s.end}));
    JsonSchemaAutomaton start(schema->get());
    start.set_key_horizon(key_horizon);
    form->json_starts_.push_back(std::move(start));
    absl::StrAppend(&identity, "s", s.begin.size(), ":", s.begin, s.end.size(), ":", s.end, (*schema)->key_prefix());
    form->schemas_.push_back(*std::move(schema));
  }
  form->triggers_ = triggers;
  const XXH128_hash_t digest = XXH3_128bits(identity.data(), identity.size());
  form->key_prefix_ = "tag";
  form->key_prefix_.append(reinterpret_cast<const char*>(&digest), sizeof(digest));
  form->key_prefix_.append(std::to_string(identity.size()));
  return std::shared_ptr<const StructuralTagForm>(std::move(form));
}

FramedJsonAutomaton StructuralTagForm::Start(size_t i) const {
  return FramedJsonAutomaton(frames_[i].get(), json_starts_[i]);
}

bool StructuralTagForm::IsTrigger(std::string_view text) const {
  return std::find(triggers_.begin(), triggers_.end(), text) != triggers_.end();
}

bool StructuralTagForm::IsTriggerPrefix(std::string_view text) const {
  return std::any_of(triggers_.begin(), triggers_.end(), [text](const std::string& t) {
    return t.size() > text.size() && t.compare(0, text.size(), text) == 0;
  });
}

bool StructuralTagAutomaton::Step(unsigned char b) {
  if (inside_.empty()) return StepFree(b);
  std::vector<std::pair<size_t, FramedJsonAutomaton>> next;
  for (const auto& [i, at] : inside_) {
    FramedJsonAutomaton stepped = at;
    if (stepped.Step(b)) next.emplace_back(i, std::move(stepped));
  }
  if (next.empty()) return false;
  for (const auto& [i, at] : next) {
    if (at.Finished()) {  // its end: free text again
      inside_.clear();
      return true;
    }
  }
  inside_ = std::move(next);
  return true;
}

bool StructuralTagAutomaton::StepFree(unsigned char b) {
  tail_.push_back(static_cast<char>(b));
  const std::string_view tail(tail_);
  for (size_t from = 0; from < tail.size(); ++from) {  // the longest trigger first
    const std::string_view trigger = tail.substr(from);
    if (!form_->IsTrigger(trigger)) continue;
    std::vector<std::pair<size_t, FramedJsonAutomaton>> opened;
    for (size_t i = 0; i < form_->structures(); ++i) {
      FramedJsonAutomaton start = form_->Start(i);
      if (std::all_of(trigger.begin(), trigger.end(), [&start](char c) { return start.Step(static_cast<unsigned char>(c)); })) {
        opened.emplace_back(i, std::move(start));
      }
    }
    if (opened.empty()) return false;  // Compile refuses such a trigger
    tail_.clear();
    inside_ = std::move(opened);
    return true;
  }
  for (size_t from = 0; from < tail.size(); ++from) {
    if (form_->IsTriggerPrefix(tail.substr(from))) {
      tail_.erase(0, from);
      return true;
    }
  }
  tail_.clear();
  return true;
}

bool StructuralTagAutomaton::Complete() const {
  return inside_.empty();
}

std::string StructuralTagAutomaton::Key() const {
  if (inside_.empty()) return absl::StrCat(form_->key_prefix(), "|free", tail_.size(), ":", tail_);
  std::string key = absl::StrCat(form_->key_prefix(), "|in");
  for (const auto& [i, at] : inside_) absl::StrAppend(&key, "|", i, ":", at.Key());
  return key;
}

}  // namespace dslaunch::runtime
