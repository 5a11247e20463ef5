#include "runtime/tokenizer/sentencepiece_model.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "common/test_temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/tokenizer/hf_tokenizer.h"
#include "runtime/tokenizer/sentencepiece_bridge.h"
#include "runtime/tokenizer/tokenizer.h"

namespace dslaunch::runtime {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A ModelProto written field by field (sentencepiece_model.proto's numbers).
std::string Varint(uint64_t v) {
  std::string out;
  do {
    uint8_t b = v & 0x7F;
    v >>= 7;
    if (v) b |= 0x80;
    out.push_back(static_cast<char>(b));
  } while (v);
  return out;
}
std::string Tag(int field, int wire) { return Varint((field << 3) | wire); }
std::string IntField(int field, int64_t v) { return Tag(field, 0) + Varint(static_cast<uint64_t>(v)); }
std::string BytesField(int field, const std::string& b) { return Tag(field, 2) + Varint(b.size()) + b; }
std::string FloatField(int field, float v) {
  std::string b(4, '\0');
  std::memcpy(b.data(), &v, 4);
  return Tag(field, 5) + b;
}

enum Type { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kByte = 6 };
struct P {
  std::string piece;
  float score;
  int type;
};

std::string Model(const std::vector<P>& pieces, int model_type = 2, const std::string& normalizer = "identity",
                  bool add_dummy_prefix = true) {
  std::string out;
  for (const P& p : pieces) {
    out += BytesField(1, BytesField(1, p.piece) + FloatField(2, p.score) + IntField(3, p.type));
  }
  out += BytesField(2, IntField(3, model_type) + IntField(35, 1) + IntField(40, 0) + IntField(41, 1) +
                           IntField(42, 2) + IntField(43, -1));
  out += BytesField(3, BytesField(1, normalizer) + IntField(3, add_dummy_prefix) + IntField(4, 0) + IntField(5, 1));
  return out;
}

const std::string kSp = "\xE2\x96\x81";  // ▁

std::vector<P> TinyPieces() {
  return {{"<unk>", 0, kUnknown}, {"<s>", 0, kControl}, {"</s>", 0, kControl},
          {"<0xC3>", 0, kByte},   {"<0xA9>", 0, kByte},  {kSp, -10, kNormal},
          {"a", -11, kNormal},    {"b", -12, kNormal},   {"c", -13, kNormal},
          {"x", -14, kNormal},    {"y", -15, kNormal},   {"z", -16, kNormal},
          {kSp + "a", -1, kNormal}, {"ab", -0.5f, kNormal}, {"bc", -0.2f, kNormal},
          {kSp + "ab", -0.1f, kNormal}, {"xy", -3, kNormal}, {"yz", -3, kNormal}};
}

std::unique_ptr<Tokenizer> Load(const std::string& bytes) {
  auto parsed = ParseSentencePieceModel(bytes, "tok.model");
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  if (!parsed.ok()) return nullptr;
  auto spec = HfTokenizerSpecFromSentencePiece(*parsed, "tok.model");
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (!spec.ok()) return nullptr;
  HfSequenceTokens sequence{*spec->template_bos, *spec->template_eos, true, false};
  return std::make_unique<HfTokenizer>(std::move(*spec), sequence);
}

TEST(SentencePieceModelTest, MergesTheHighestScoringPairFirstAndTiesLeftToRight) {
  std::unique_ptr<Tokenizer> tokenizer = Load(Model(TinyPieces()));
  ASSERT_NE(tokenizer, nullptr);
  // "▁abc": bc (-0.2) beats ab (-0.5) and ▁a (-1); then ▁a: [▁a, bc] (left
  // to right would make ▁a, then ▁ab: [▁ab, c]).
  EXPECT_THAT(tokenizer->Encode("abc"), ElementsAre(12, 14));
  // "▁ab": ab (-0.5) before ▁a (-1), then ▁ab (-0.1).
  EXPECT_THAT(tokenizer->Encode("ab"), ElementsAre(15));
  // "▁xyz": xy and yz score alike: the left one merges first.
  EXPECT_THAT(tokenizer->Encode("xyz"), ElementsAre(5, 16, 11));
  // é is no piece: its UTF-8 bytes; q has no byte piece: <unk>, a run fused.
  EXPECT_THAT(tokenizer->Encode("a\xC3\xA9"), ElementsAre(12, 3, 4));
  EXPECT_THAT(tokenizer->Encode("qq a"), ElementsAre(5, 0, 12));
  EXPECT_EQ(tokenizer->bos_id(), 1);
  EXPECT_EQ(tokenizer->eos_id(), 2);
  EXPECT_EQ(tokenizer->Decode({1, 12, 14, 5, 16, 11, 12, 3, 4, 2}), "abc xyz a\xC3\xA9");
}

TEST(SentencePieceModelTest, ControlPiecesInTextAreSpecialOnlyInEncode) {
  std::unique_ptr<Tokenizer> tokenizer = Load(Model(TinyPieces()));
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_THAT(tokenizer->Encode("<s>a"), ElementsAre(1, 12));
  std::vector<int32_t> plain = tokenizer->EncodePlainText("<s>a");
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 1), 0);
  EXPECT_EQ(tokenizer->TokenId("</s>"), 2);
}

TEST(SentencePieceModelTest, WithoutDummyPrefixNothingIsPrependedOrStripped) {
  std::unique_ptr<Tokenizer> tokenizer = Load(Model(TinyPieces(), 2, "identity", /*add_dummy_prefix=*/false));
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_THAT(tokenizer->Encode("ab a"), ElementsAre(13, 12));
  EXPECT_EQ(tokenizer->Decode({13, 12}), "ab a");
}

// The real thing: libsentencepiece (this test's process loads no LibTorch)
// and our reader agree on a model libsentencepiece trained, with and without
// the dummy prefix, on text it has and has not seen.
TEST(SentencePieceModelTest, AgreesWithLibsentencepieceOnATrainedModel) {
  TestTempDir dir;
  std::string corpus;
  int compared = 0;
  // Words of syllables in a fixed pseudo-random order: many merges that
  // compete for the same characters.
  const char* syllables[] = {"ka", "an", "na", "ta", "at", "ra", "ar", "st", "ts", "e", "o", "ré", "ße"};
  uint32_t state = 12345;
  for (int line = 0; line < 400; ++line) {
    for (int word = 0; word < 12; ++word) {
      const int length = 1 + static_cast<int>((state = state * 1103515245u + 12345u) >> 16) % 4;
      for (int k = 0; k < length; ++k) corpus += syllables[((state = state * 1103515245u + 12345u) >> 16) % 13];
      corpus += ' ';
    }
    corpus += "The quick brown fox, " + std::to_string(line * 7919 % 1000) + " times; naïve café déjà vu\n";
  }
  ASSERT_TRUE(TrainSentencePieceBpe({dir.Write("corpus.txt", corpus)}, 700, dir.File("m")).ok());
  std::string bytes;
  {
    std::ifstream in(dir.File("m.model"), std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const std::vector<std::string> texts = {
      "The quick brown fox", "jumps over the lazy dog, 123 times", "  leading and   inner  spaces ",
      "naïve café déjà vu", "über straße", "unseen: 日本語 ελληνικά 🙂", "", " ", "a", "tabs\tand\nnewlines",
      "foxfoxfox dogdog", "<s> is text to sentencepiece", "0123456789", "kanatarast straßeré kaanna",
      "tatatata ararat stts ananas", "ostera karanta ressé", "natsarkaanstre tanka"};
  // A second normalizer_spec message merges into the first (protobuf): the
  // dummy prefix on, as Llama 2's model has it.
  for (const std::string& model : {bytes, bytes + BytesField(3, IntField(3, 1))}) {
    SpModel reference;
    ASSERT_TRUE(reference.LoadSerialized(model).ok());
    auto parsed = ParseSentencePieceModel(model, "m.model");
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    auto spec = HfTokenizerSpecFromSentencePiece(*parsed, "m.model");
    ASSERT_TRUE(spec.ok()) << spec.status();
    HfTokenizer ours(std::move(*spec), HfSequenceTokens{1, 2, false, false});
    for (const std::string& text : texts) {
      std::vector<int> expected;
      ASSERT_TRUE(reference.Encode(text, &expected).ok());
      std::vector<int32_t> got = ours.EncodePlainText(text);
      EXPECT_EQ(std::vector<int>(got.begin(), got.end()), expected) << "\"" << text << "\"";
      compared += static_cast<int>(expected.size());
      std::string decoded;
      ASSERT_TRUE(reference.Decode(expected, &decoded).ok());
      EXPECT_EQ(ours.Decode(got), decoded) << "\"" << text << "\"";
    }
  }
  EXPECT_GT(compared, 200);
}

TEST(SentencePieceModelTest, RefusalsNameTheFileAndField) {
  auto error = [](const std::string& bytes) {
    auto parsed = ParseSentencePieceModel(bytes, "tok.model");
    if (!parsed.ok()) return std::string(parsed.status().message());
    auto spec = HfTokenizerSpecFromSentencePiece(*parsed, "tok.model");
    return spec.ok() ? std::string("ok") : std::string(spec.status().message());
  };
  const std::string good = Model(TinyPieces());
  EXPECT_EQ(error(good), "ok");
  EXPECT_THAT(error(good.substr(0, good.size() - 3)), HasSubstr("tok.model: not a SentencePiece model: at byte"));
  EXPECT_THAT(error("not a model at all"), HasSubstr("tok.model: not a SentencePiece model"));
  EXPECT_THAT(error(Model(TinyPieces(), 1)), HasSubstr("tok.model: trainer_spec.model_type: UNIGRAM (1) is not supported"));
  EXPECT_THAT(error(Model(TinyPieces(), 2, "nmt_nfkc")),
              HasSubstr("tok.model: normalizer_spec.name: \"nmt_nfkc\" is not supported"));
  std::vector<P> user_defined = TinyPieces();
  user_defined.push_back({"<tool>", 0, kUserDefined});
  EXPECT_THAT(error(Model(user_defined)),
              HasSubstr("tok.model: pieces[18] \"<tool>\": type USER_DEFINED is not supported"));
  std::vector<P> twice = TinyPieces();
  twice.push_back({"ab", -9, kNormal});
  EXPECT_THAT(error(Model(twice)), HasSubstr("pieces[18] \"ab\": appears twice"));
}

}  // namespace
}  // namespace dslaunch::runtime
