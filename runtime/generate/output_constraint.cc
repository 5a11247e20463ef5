// Note [Constrained output].
#include "runtime/generate/output_constraint.h"

#include <algorithm>
#include <limits>
#include <map>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "runtime/generate/framed_json_automaton.h"
#include "runtime/generate/json_or_text_automaton.h"
#include "runtime/generate/json_schema_automaton.h"

namespace dslaunch::runtime {

TokenVocabulary::TokenVocabulary(const std::vector<std::string>& token_bytes)
    : size_(static_cast<int64_t>(token_bytes.size())), bytes_(token_bytes), nodes_(1) {
  // Children are found by a map while building, then kept sorted in vectors.
  std::vector<std::map<unsigned char, int32_t>> children(1);
  for (size_t id = 0; id < token_bytes.size(); ++id) {
    if (token_bytes[id].empty()) continue;
    longest_ = std::max<int64_t>(longest_, static_cast<int64_t>(token_bytes[id].size()));
    int32_t node = 0;
    for (char c : token_bytes[id]) {
      const auto byte = static_cast<unsigned char>(c);
      auto it = children[static_cast<size_t>(node)].find(byte);
      if (it == children[static_cast<size_t>(node)].end()) {
        const auto next = static_cast<int32_t>(nodes_.size());
        nodes_.emplace_back();
        children.emplace_back();
        children[static_cast<size_t>(node)].emplace(byte, next);
        node = next;
      } else {
        node = it->second;
      }
    }
    nodes_[static_cast<size_t>(node)].tokens.push_back(static_cast<int32_t>(id));
  }
  for (size_t n = 0; n < nodes_.size(); ++n) {
    nodes_[n].children.assign(children[n].begin(), children[n].end());
  }
}

std::shared_ptr<const std::vector<char>> TokenVocabulary::Cached(const std::string& key) const {
  absl::MutexLock lock(&mu_);
  auto it = cache_.find(key);
  return it == cache_.end() ? nullptr : it->second;
}

void TokenVocabulary::Remember(const std::string& key, std::shared_ptr<const std::vector<char>> allowed) const {
  absl::MutexLock lock(&mu_);
  if (cache_.size() >= kCachedSets) cache_.clear();
  cache_[key] = std::move(allowed);
}

namespace {

// Exactly one of the choices.
class ChoiceAutomaton {
 public:
  explicit ChoiceAutomaton(std::shared_ptr<const std::vector<std::string>> choices) : choices_(std::move(choices)) {}
  bool Step(unsigned char b) {
    prefix_.push_back(static_cast<char>(b));
    for (const std::string& choice : *choices_) {
      if (choice.compare(0, prefix_.size(), prefix_) == 0 && choice.size() >= prefix_.size()) return true;
    }
    prefix_.pop_back();
    return false;
  }
  bool Complete() const {
    return std::find(choices_->begin(), choices_->end(), prefix_) != choices_->end();
  }
  bool Finished() const {
    if (!Complete()) return false;
    for (const std::string& choice : *choices_) {
      if (choice.size() > prefix_.size() && choice.compare(0, prefix_.size(), prefix_) == 0) return false;
    }
    return true;
  }
  // The choices themselves, then the prefix: forms of other choices never meet.
  std::string Key() const {
    std::string key = "choice";
    for (const std::string& choice : *choices_) absl::StrAppend(&key, choice.size(), ":", choice);
    return absl::StrCat(key, "|", prefix_);
  }

 private:
  std::shared_ptr<const std::vector<std::string>> choices_;
  std::string prefix_;
};

template <typename Automaton>
class AutomatonConstraint : public OutputConstraintState {
 public:
  // `keep_alive`: what the automaton points to (a compiled schema).
  AutomatonConstraint(Automaton start, std::shared_ptr<const TokenVocabulary> vocabulary,
                      std::shared_ptr<const void> keep_alive = nullptr)
      : keep_alive_(std::move(keep_alive)), state_(std::move(start)), vocabulary_(std::move(vocabulary)) {}

  // The tokens the state allows (one byte each, 1: allowed), kept in the
  // vocabulary's cache.
  std::shared_ptr<const std::vector<char>> Allowed() const {
    const std::string key = state_.Key();
    if (auto cached = vocabulary_->Cached(key)) return cached;
    auto allowed = std::make_shared<std::vector<char>>(static_cast<size_t>(vocabulary_->size()), 0);
    Walk(0, state_, *allowed);
    vocabulary_->Remember(key, allowed);
    return allowed;
  }

  bool Mask(torch::Tensor& logits, const std::vector<int64_t>& stop_tokens) override {
    TORCH_CHECK(logits.dim() == 1 && logits.size(0) >= vocabulary_->size(), "constrained output: logits ",
                logits.sizes(), " for a vocabulary of ", vocabulary_->size());
    std::vector<char> allowed = *Allowed();
    allowed.resize(static_cast<size_t>(logits.size(0)), 0);  // ids past the tokenizer's: never
    for (int64_t stop : stop_tokens) {
      if (stop >= 0 && stop < logits.size(0)) allowed[static_cast<size_t>(stop)] = state_.Complete() ? 1 : 0;
    }
    const bool any = std::any_of(allowed.begin(), allowed.end(), [](char a) { return a != 0; });
    const torch::Tensor keep =
        torch::from_blob(allowed.data(), {logits.size(0)}, torch::kUInt8).to(logits.device()).to(torch::kBool);
    logits.masked_fill_(keep.logical_not(), -std::numeric_limits<double>::infinity());
    return any;
  }

  void Accept(int64_t token) override {
    if (token < 0 || token >= vocabulary_->size()) return;  // a stop token past the vocabulary
    const std::string& bytes = vocabulary_->bytes(token);
    Automaton next = state_;
    for (char c : bytes) {
      if (!next.Step(static_cast<unsigned char>(c))) return;  // a stop token: the form is whole
    }
    state_ = std::move(next);
  }
  bool Complete() const override { return state_.Complete(); }
  bool Finished() const override { return state_.Finished(); }

 private:
  void Walk(int32_t node, const Automaton& at, std::vector<char>& allowed) const {
    const TokenVocabulary::Node& here = vocabulary_->nodes()[static_cast<size_t>(node)];
    for (const auto& [byte, child] : here.children) {
      Automaton next = at;
      if (!next.Step(byte)) continue;
      for (int32_t token : vocabulary_->nodes()[static_cast<size_t>(child)].tokens) {
        allowed[static_cast<size_t>(token)] = 1;
      }
      Walk(child, next, allowed);
    }
  }

  std::shared_ptr<const void> keep_alive_;
  Automaton state_;
  std::shared_ptr<const TokenVocabulary> vocabulary_;
};

template <typename Automaton>
bool AutomatonAllows(Automaton automaton, const std::string& text, bool* complete) {
  for (char c : text) {
    if (!automaton.Step(static_cast<unsigned char>(c))) return false;
  }
  *complete = automaton.Complete();
  return true;
}

absl::Status CheckChoices(const std::vector<std::string>& choices, const std::string& field) {
  if (choices.empty()) return absl::InvalidArgumentError(absl::StrCat(field, ": no choices"));
  if (choices.size() > static_cast<size_t>(kMaxGuidedChoices)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", choices.size(), " choices, more than the ", kMaxGuidedChoices, " allowed"));
  }
  size_t bytes = 0;
  for (size_t i = 0; i < choices.size(); ++i) {
    if (choices[i].empty()) return absl::InvalidArgumentError(absl::StrCat(field, "[", i, "] is empty"));
    bytes += choices[i].size();
  }
  if (bytes > static_cast<size_t>(kMaxGuidedChoiceBytes)) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", bytes, " bytes of choices, more than the ",
                                                   kMaxGuidedChoiceBytes, " allowed"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<OutputConstraintState>> StartOutputConstraint(
    const OutputConstraint& constraint, std::shared_ptr<const TokenVocabulary> vocabulary, const std::string& field) {
  if (vocabulary == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(field, ": constrained output needs the tokenizer's vocabulary, which this engine was not given"));
  }
  std::unique_ptr<OutputConstraintState> state;
  if (constraint.kind == OutputConstraint::Kind::kJsonObject || constraint.kind == OutputConstraint::Kind::kJsonSchema) {
    std::shared_ptr<const CompiledJsonSchema> schema = AnyJsonObjectSchema();
    if (constraint.kind == OutputConstraint::Kind::kJsonSchema) {
      auto compiled = CompileJsonSchemaText(constraint.schema, field);
      if (!compiled.ok()) return compiled.status();
      schema = std::move(*compiled);
    }
    JsonSchemaAutomaton start(schema.get());
    start.set_key_horizon(vocabulary->longest_token_bytes() + 1);
    std::unique_ptr<OutputConstraintState> json;
    std::vector<char> first;
    if (constraint.or_text) {
      // Note [JSON or text]: text may always begin.
      if (!constraint.before.empty() || !constraint.after.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(field, ": a JSON value or text has no text around it"));
      }
      return std::unique_ptr<OutputConstraintState>(
          std::make_unique<AutomatonConstraint<JsonOrTextAutomaton>>(JsonOrTextAutomaton(start), vocabulary, schema));
    }
    if (constraint.before.empty() && constraint.after.empty()) {
      auto plain = std::make_unique<AutomatonConstraint<JsonSchemaAutomaton>>(start, vocabulary, schema);
      first = *plain->Allowed();
      json = std::move(plain);
    } else {
      struct Kept {
        std::shared_ptr<const CompiledJsonSchema> schema;
        FramedJsonAutomaton::Frame frame;
      };
      auto kept = std::make_shared<Kept>(Kept{schema, {constraint.before, constraint.after}});
      auto framed = std::make_unique<AutomatonConstraint<FramedJsonAutomaton>>(
          FramedJsonAutomaton(&kept->frame, start), vocabulary, kept);
      first = *framed->Allowed();
      json = std::move(framed);
    }
    if (std::none_of(first.begin(), first.end(), [](char a) { return a != 0; })) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": no token of the vocabulary can begin ",
          constraint.kind == OutputConstraint::Kind::kJsonObject ? "a JSON object" : "a value of the schema"));
    }
    state = std::move(json);
  } else if (constraint.kind == OutputConstraint::Kind::kChoice) {
    if (absl::Status ok = CheckChoices(constraint.choices, field); !ok.ok()) return ok;
    auto choices = std::make_shared<const std::vector<std::string>>(constraint.choices);
    auto choice = std::make_unique<AutomatonConstraint<ChoiceAutomaton>>(ChoiceAutomaton(choices), vocabulary);
    const auto first = choice->Allowed();
    if (std::none_of(first->begin(), first->end(), [](char a) { return a != 0; })) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": no token of the vocabulary can begin any of the choices"));
    }
    state = std::move(choice);
  } else if (constraint.kind == OutputConstraint::Kind::kStructuralTag) {
    auto form = StructuralTagForm::Compile(constraint.structures, constraint.triggers,
                                           vocabulary->longest_token_bytes() + 1, field);
    if (!form.ok()) return form.status();
    StructuralTagAutomaton start(form->get());
    state = std::make_unique<AutomatonConstraint<StructuralTagAutomaton>>(start, vocabulary, *form);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(field, ": no constraint"));
  }
  return state;
}

bool AllowsPrefix(const OutputConstraint& constraint, const std::string& text, bool* complete) {
  *complete = false;
  if (constraint.kind == OutputConstraint::Kind::kJsonObject) {
    return AutomatonAllows(JsonSchemaAutomaton(AnyJsonObjectSchema().get()), text, complete);
  }
  if (constraint.kind == OutputConstraint::Kind::kJsonSchema) {
    auto schema = CompileJsonSchemaText(constraint.schema, "schema");
    if (!schema.ok()) return false;
    if (constraint.or_text) return AutomatonAllows(JsonOrTextAutomaton(JsonSchemaAutomaton(schema->get())), text, complete);
    const FramedJsonAutomaton::Frame frame{constraint.before, constraint.after};
    return AutomatonAllows(FramedJsonAutomaton(&frame, JsonSchemaAutomaton(schema->get())), text, complete);
  }
  if (constraint.kind == OutputConstraint::Kind::kStructuralTag) {
    auto form = StructuralTagForm::Compile(constraint.structures, constraint.triggers, 65535, "structural_tag");
    if (!form.ok()) return false;
    return AutomatonAllows(StructuralTagAutomaton(form->get()), text, complete);
  }
  if (constraint.kind == OutputConstraint::Kind::kChoice) {
    return AutomatonAllows(ChoiceAutomaton(std::make_shared<const std::vector<std::string>>(constraint.choices)),
                           text, complete);
  }
  *complete = true;
  return true;
}

}  // namespace dslaunch::runtime
