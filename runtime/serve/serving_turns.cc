#include "runtime/serve/serving_turns.h"

#include <bit>
#include <map>

#include "absl/strings/str_cat.h"

namespace dslaunch::runtime {
namespace {

int64_t Bits(double value) { return std::bit_cast<int64_t>(value); }
double Double(int64_t bits) { return std::bit_cast<double>(bits); }

// Reads words in order; any read past the end marks the reader bad.
class WordReader {
 public:
  explicit WordReader(const std::vector<int64_t>& words) : words_(words) {}
  int64_t Next() {
    if (at_ >= words_.size()) {
      ok_ = false;
      return 0;
    }
    return words_[at_++];
  }
  // A count that the remaining words can hold.
  int64_t Count() {
    const int64_t n = Next();
    if (n < 0 || static_cast<size_t>(n) > words_.size() - std::min(at_, words_.size())) ok_ = false;
    return ok_ ? n : 0;
  }
  bool ok() const { return ok_; }
  bool done() const { return at_ == words_.size(); }
  void Fail() { ok_ = false; }

 private:
  const std::vector<int64_t>& words_;
  size_t at_ = 0;
  bool ok_ = true;
};

constexpr int64_t kTurnMagic = 0x64737475726e3036;  // "dsturn06"

// A string as its length, then its bytes eight to a word.
void PutString(const std::string& text, std::vector<int64_t>* w) {
  w->push_back(static_cast<int64_t>(text.size()));
  for (size_t i = 0; i < text.size(); i += 8) {
    uint64_t word = 0;
    for (size_t k = 0; k < 8 && i + k < text.size(); ++k) {
      word |= static_cast<uint64_t>(static_cast<unsigned char>(text[i + k])) << (8 * k);
    }
    w->push_back(static_cast<int64_t>(word));
  }
}

std::string GetString(WordReader& r) {
  const int64_t length = r.Next();
  std::string text;
  if (length < 0 || length > (int64_t{1} << 24)) {
    r.Fail();
    return text;
  }
  for (int64_t i = 0; i < length && r.ok(); i += 8) {
    const auto word = static_cast<uint64_t>(r.Next());
    for (int64_t k = 0; k < 8 && i + k < length; ++k) text.push_back(static_cast<char>((word >> (8 * k)) & 0xFF));
  }
  return text;
}

// The turn through the group: its length, then its words, from rank 0.
absl::Status BroadcastWords(Communicator& group, torch::Device device, std::vector<int64_t>* words) {
  torch::Tensor length = torch::tensor({static_cast<int64_t>(words->size())}, torch::kLong).to(device);
  if (absl::Status s = group.Broadcast(length, 0); !s.ok()) return s;
  const int64_t n = length.to(torch::kCPU).item<int64_t>();
  torch::Tensor payload = group.rank() == 0 ? torch::tensor(*words, torch::kLong).to(device)
                                            : torch::empty({n}, torch::TensorOptions(torch::kLong).device(device));
  if (absl::Status s = group.Broadcast(payload, 0); !s.ok()) return s;
  if (group.rank() != 0) {
    const torch::Tensor host = payload.to(torch::kCPU).contiguous();
    words->assign(host.data_ptr<int64_t>(), host.data_ptr<int64_t>() + n);
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<int64_t> EncodeTurn(const ServingTurn& turn) {
  std::vector<int64_t> w = {kTurnMagic, turn.stop ? 1 : 0, static_cast<int64_t>(turn.submitted.size())};
  for (const auto& [key, request] : turn.submitted) {
    w.push_back(key);
    w.push_back(static_cast<int64_t>(request.prompt.size()));
    w.insert(w.end(), request.prompt.begin(), request.prompt.end());
    w.push_back(request.max_new_tokens);
    const SamplingOptions& s = request.sampling;
    w.insert(w.end(), {s.greedy ? 1 : 0, Bits(s.temperature), s.top_k, Bits(s.top_p), Bits(s.repetition_penalty),
                       static_cast<int64_t>(s.seed), s.top_logprobs});
    w.push_back(static_cast<int64_t>(request.stop_tokens.size()));
    w.insert(w.end(), request.stop_tokens.begin(), request.stop_tokens.end());
    w.push_back(request.prompt_logprobs ? 1 : 0);
    w.push_back(static_cast<int64_t>(request.constraint.kind));
    w.push_back(static_cast<int64_t>(request.constraint.choices.size()));
    for (const std::string& choice : request.constraint.choices) PutString(choice, &w);
    PutString(request.constraint.schema, &w);
    PutString(request.constraint.before, &w);
    PutString(request.constraint.after, &w);
    w.push_back(request.constraint.or_text ? 1 : 0);
    w.push_back(static_cast<int64_t>(request.constraint.structures.size()));
    for (const TaggedStructure& structure : request.constraint.structures) {
      PutString(structure.begin, &w);
      PutString(structure.schema, &w);
      PutString(structure.end, &w);
    }
    w.push_back(static_cast<int64_t>(request.constraint.triggers.size()));
    for (const std::string& trigger : request.constraint.triggers) PutString(trigger, &w);
  }
  w.push_back(static_cast<int64_t>(turn.cancelled.size()));
  w.insert(w.end(), turn.cancelled.begin(), turn.cancelled.end());
  return w;
}

absl::StatusOr<ServingTurn> DecodeTurn(const std::vector<int64_t>& words) {
  WordReader r(words);
  if (r.Next() != kTurnMagic) return absl::DataLossError("a serving turn without its magic word");
  ServingTurn turn;
  turn.stop = r.Next() != 0;
  const int64_t submitted = r.Count();
  for (int64_t i = 0; i < submitted && r.ok(); ++i) {
    GenerationRequest request;
    const int64_t key = r.Next();
    const int64_t prompt = r.Count();
    for (int64_t t = 0; t < prompt; ++t) request.prompt.push_back(r.Next());
    request.max_new_tokens = r.Next();
    SamplingOptions& s = request.sampling;
    s.greedy = r.Next() != 0;
    s.temperature = Double(r.Next());
    s.top_k = r.Next();
    s.top_p = Double(r.Next());
    s.repetition_penalty = Double(r.Next());
    s.seed = static_cast<uint64_t>(r.Next());
    s.top_logprobs = r.Next();
    const int64_t stops = r.Count();
    for (int64_t t = 0; t < stops; ++t) request.stop_tokens.push_back(r.Next());
    request.prompt_logprobs = r.Next() != 0;
    const int64_t kind = r.Next();
    if (kind < static_cast<int64_t>(OutputConstraint::Kind::kNone) ||
        kind > static_cast<int64_t>(OutputConstraint::Kind::kStructuralTag)) {
      return absl::DataLossError(absl::StrCat("a serving turn with an unknown output constraint ", kind));
    }
    request.constraint.kind = static_cast<OutputConstraint::Kind>(kind);
    const int64_t choices = r.Count();
    for (int64_t c = 0; c < choices && r.ok(); ++c) request.constraint.choices.push_back(GetString(r));
    request.constraint.schema = GetString(r);
    request.constraint.before = GetString(r);
    request.constraint.after = GetString(r);
    request.constraint.or_text = r.Next() != 0;
    const int64_t structures = r.Count();
    for (int64_t k = 0; k < structures && r.ok(); ++k) {
      TaggedStructure& structure = request.constraint.structures.emplace_back();
      structure.begin = GetString(r);
      structure.schema = GetString(r);
      structure.end = GetString(r);
    }
    const int64_t triggers = r.Count();
    for (int64_t k = 0; k < triggers && r.ok(); ++k) request.constraint.triggers.push_back(GetString(r));
    turn.submitted.emplace_back(key, std::move(request));
  }
  const int64_t cancelled = r.Count();
  for (int64_t i = 0; i < cancelled; ++i) turn.cancelled.push_back(r.Next());
  if (!r.ok() || !r.done()) {
    return absl::DataLossError(absl::StrCat("a serving turn of ", words.size(), " words is cut short or too long"));
  }
  return turn;
}

absl::Status TurnPublisher::Publish(const ServingTurn& turn) {
  std::vector<int64_t> words = EncodeTurn(turn);
  return BroadcastWords(*group_, device_, &words);
}

absl::Status FollowServingTurns(GenerationEngine& engine, Communicator& group, torch::Device device) {
  std::map<int64_t, int64_t> ids;   // stream key -> engine id
  std::map<int64_t, int64_t> keys;  // engine id -> stream key
  while (true) {
    std::vector<int64_t> words;
    if (absl::Status s = BroadcastWords(group, device, &words); !s.ok()) return s;
    auto turn = DecodeTurn(words);
    if (!turn.ok()) return turn.status();
    if (turn->stop) return absl::OkStatus();
    // The order rank 0's loop keeps: submissions, cancellations, a step.
    for (auto& [key, request] : turn->submitted) {
      auto id = engine.Submit(std::move(request));
      if (!id.ok()) continue;  // refused on rank 0 alike (the same checks on the same state)
      ids[key] = *id;
      keys[*id] = key;
    }
    for (int64_t key : turn->cancelled) {
      auto it = ids.find(key);
      if (it == ids.end()) continue;
      (void)engine.Cancel(it->second);
      (void)engine.TakeResult(it->second);
      keys.erase(it->second);
      ids.erase(it);
    }
    if (engine.Idle()) continue;
    auto step = engine.Step();
    if (!step.ok()) return step.status();
    for (const GeneratedToken& token : *step) {
      if (token.finished == FinishReason::kNone) continue;
      (void)engine.TakeResult(token.request);
      auto it = keys.find(token.request);
      if (it != keys.end()) {
        ids.erase(it->second);
        keys.erase(it);
      }
    }
  }
}

}  // namespace dslaunch::runtime
