// See Note [SentencePiece and Abseil]: no Abseil header may be included here.
#include "runtime/tokenizer/sentencepiece_bridge.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <exception>
#include <fstream>
#include <string>
#include <unordered_map>

namespace dslaunch::runtime {
namespace {

SpResult FromSp(const sentencepiece::util::Status& status) {
  if (status.ok()) return {};
  return SpResult{static_cast<int>(status.code()), status.message()};
}

constexpr int kInternalCode = 13;  // absl::StatusCode::kInternal

// Runs a sentencepiece call; an exception becomes an error result.
template <typename Call>
SpResult Guarded(const char* what, Call call) {
  try {
    return FromSp(call());
  } catch (const std::exception& e) {
    return SpResult{kInternalCode, std::string(what) + ": " + e.what()};
  }
}

// Feeds the trainer the non-empty lines of each file in order. Using an
// iterator rather than the trainer's comma-separated `input` flag lets file
// names contain commas.
class FileLineIterator : public sentencepiece::SentenceIterator {
 public:
  explicit FileLineIterator(const std::vector<std::string>& files) : files_(files) { Next(); }

  bool done() const override { return done_; }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override { return status_; }

  void Next() override {
    while (true) {
      if (stream_.is_open() && std::getline(stream_, line_)) {
        if (line_.empty()) continue;
        return;
      }
      if (stream_.is_open()) {
        if (stream_.bad()) return Fail("cannot read " + files_[next_file_ - 1]);
        stream_.close();
      }
      if (next_file_ == files_.size()) {
        done_ = true;
        return;
      }
      stream_.open(files_[next_file_++], std::ios::binary);
      if (!stream_.is_open()) return Fail("cannot open " + files_[next_file_ - 1]);
    }
  }

 private:
  void Fail(const std::string& message) {
    status_ = sentencepiece::util::Status(sentencepiece::util::StatusCode::kNotFound, message);
    done_ = true;
  }

  const std::vector<std::string>& files_;
  size_t next_file_ = 0;
  std::ifstream stream_;
  std::string line_;
  bool done_ = false;
  sentencepiece::util::Status status_;
};

// Sentencepiece's only randomness (sentence sampling) is off below; the seed is
// fixed anyway so that no future default can make training vary.
constexpr unsigned int kTrainingSeed = 1234;

}  // namespace

struct SpModel::Impl {
  sentencepiece::SentencePieceProcessor processor;
};

SpModel::SpModel() : impl_(std::make_unique<Impl>()) {}
SpModel::~SpModel() = default;

SpResult SpModel::LoadSerialized(const std::string& model_bytes) {
  return Guarded("loading the model", [&] { return impl_->processor.LoadFromSerializedProto(model_bytes); });
}

SpResult SpModel::Encode(std::string_view text, std::vector<int>* ids) const {
  return Guarded("encoding", [&] { return impl_->processor.Encode(text, ids); });
}

SpResult SpModel::Decode(const std::vector<int>& ids, std::string* text) const {
  return Guarded("decoding", [&] { return impl_->processor.Decode(ids, text); });
}

int SpModel::vocab_size() const { return impl_->processor.GetPieceSize(); }
int SpModel::eos_id() const { return impl_->processor.eos_id(); }
int SpModel::bos_id() const { return impl_->processor.bos_id(); }

// PieceToId answers unk's id for an unknown piece: only a piece that maps
// back to itself is in the model.
int SpModel::PieceToId(std::string_view piece) const {
  const int id = impl_->processor.PieceToId(piece);
  if (id < 0 || id >= impl_->processor.GetPieceSize() || impl_->processor.IdToPiece(id) != piece) return -1;
  return id;
}

// Note [BPE training settings]
// - byte_fallback: the 256 byte pieces are in the vocabulary, so no input is
//   ever <unk>; vocab_size must exceed 259 + the distinct characters kept.
// - normalization_rule_name=identity, remove_extra_whitespaces=false,
//   add_dummy_prefix=false: Decode(Encode(text)) == text byte for byte, and a
//   document is tokenized the same wherever it starts.
// - hard_vocab_limit=false: a small corpus yields a smaller vocabulary instead
//   of an error; the model's real size is what the dataset records.
// - num_threads=1, input_sentence_size=0 (all sentences), no shuffling:
//   the same files give the same model bytes.
// - no model_prefix: the model is returned serialized (see SpTrainBpe).
// - ids: unk 0, bos 1, eos 2, no pad.
SpResult SpTrainBpe(const std::vector<std::string>& text_files, int vocab_size,
                    std::string* model) {
  // No model_prefix: the model comes back serialized, so the caller can write
  // it atomically, and no path is recorded inside it.
  const std::unordered_map<std::string, std::string> args = {
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(vocab_size)},
      {"byte_fallback", "true"},
      {"character_coverage", "0.9995"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"add_dummy_prefix", "false"},
      {"allow_whitespace_only_pieces", "true"},
      {"hard_vocab_limit", "false"},
      {"num_threads", "1"},
      {"input_sentence_size", "0"},
      {"shuffle_input_sentence", "false"},
      {"unk_id", "0"},
      {"bos_id", "1"},
      {"eos_id", "2"},
      {"pad_id", "-1"},
      {"minloglevel", "1"},  // training progress would flood the job's log
  };
  sentencepiece::SetRandomGeneratorSeed(kTrainingSeed);
  FileLineIterator lines(text_files);
  return Guarded("training", [&] { return sentencepiece::SentencePieceTrainer::Train(args, &lines, model); });
}

}  // namespace dslaunch::runtime
