// Note [Streaming text and stop strings]: pieces joined are the whole decode;
// a character split across tokens waits for its last byte; stop strings are
// found across token boundaries and never returned.
#include "runtime/serve/text_streamer.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/serve/serve_test_tokenizers.h"

namespace dslaunch::runtime {
namespace {

// The byte tokenizer: one token per byte, so "é" (2 bytes) and "🦙" (4) span tokens.
std::vector<int64_t> Bytes(const std::string& text) {
  std::vector<int64_t> ids;
  for (unsigned char c : text) ids.push_back(c);
  return ids;
}

TEST(TextStreamerTest, PiecesJoinedAreTheWholeTextAndNoPieceSplitsACharacter) {
  ByteTokenizer tokenizer;
  const std::string text = "caf\xC3\xA9 \xF0\x9F\xA6\x99 ok";  // "café 🦙 ok"
  TextStreamer streamer(tokenizer, {});
  std::string joined;
  for (int64_t id : Bytes(text)) {
    const std::string piece = streamer.Add(id);
    EXPECT_EQ(IncompleteUtf8Tail(piece), 0u) << "a piece ends inside a character";
    joined += piece;
  }
  joined += streamer.Finish();
  EXPECT_EQ(joined, text);
  EXPECT_EQ(streamer.text(), text);
  EXPECT_FALSE(streamer.stopped());
}

// Bytes that never become a character (the model wrote them) are held
// back at most 16 tokens, then released as they decode: the window stays
// short however many come (each Add decodes it), and the text joined is
// still the whole decode.
TEST(TextStreamerTest, TextThatNeverBecomesACharacterIsReleasedWithinSixteenTokens) {
  ByteTokenizer tokenizer;
  TextStreamer streamer(tokenizer, {});
  std::string joined;
  std::vector<int64_t> ids(200, 0xE2);  // each the first byte of a 3-byte character
  for (size_t i = 0; i < ids.size(); ++i) {
    joined += streamer.Add(ids[i]);
    if (i >= 16) EXPECT_FALSE(joined.empty()) << "nothing released after " << i + 1 << " tokens";
  }
  for (int64_t id : Bytes(" ok")) joined += streamer.Add(id);
  joined += streamer.Finish();
  std::vector<int32_t> all(ids.begin(), ids.end());
  for (int64_t id : Bytes(" ok")) all.push_back(static_cast<int32_t>(id));
  EXPECT_EQ(joined, tokenizer.Decode(all));
}

// Tokens that decode to nothing, then a character across three: the text
// released for being held too long stops before the character, which comes
// whole when its last byte does.
TEST(TextStreamerTest, AReleaseForHoldingTooLongNeverSplitsACharacter) {
  ByteTokenizer tokenizer;
  TextStreamer streamer(tokenizer, {});
  std::vector<int64_t> ids(15, ByteTokenizer::kEosId);  // decodes to nothing
  for (int64_t id : Bytes("\xE2\x82\xAC!")) ids.push_back(id);  // "€!"
  std::string joined;
  for (int64_t id : ids) {
    const std::string piece = streamer.Add(id);
    EXPECT_EQ(IncompleteUtf8Tail(piece), 0u) << "a piece ends inside a character";
    joined += piece;
  }
  joined += streamer.Finish();
  EXPECT_EQ(joined, "\xE2\x82\xAC!");
}

TEST(TextStreamerTest, AStopStringAcrossTokensEndsTheTextBeforeIt) {
  ByteTokenizer tokenizer;
  TextStreamer streamer(tokenizer, {"END", "\n\n"});
  std::string joined;
  for (int64_t id : Bytes("one EN two ENDthree")) {
    joined += streamer.Add(id);
    if (streamer.stopped()) break;
  }
  EXPECT_TRUE(streamer.stopped());
  // "EN" was held back while it could have begun "END", then released.
  EXPECT_EQ(joined, "one EN two ");
  EXPECT_EQ(streamer.Add('x'), "") << "nothing after a stop";
  EXPECT_EQ(streamer.Finish(), "");
}

TEST(TextStreamerTest, HeldBackTextIsReleasedWhenItCannotBeAStopAnymoreOrAtTheEnd) {
  ByteTokenizer tokenizer;
  TextStreamer streamer(tokenizer, {"###"});
  EXPECT_EQ(streamer.Add('a'), "a");
  EXPECT_EQ(streamer.Add('#'), "");
  EXPECT_EQ(streamer.Add('#'), "");
  EXPECT_EQ(streamer.Add('b'), "##b");
  EXPECT_EQ(streamer.Add('#'), "");
  EXPECT_EQ(streamer.Finish(), "#") << "the end: a partial stop string is text";
  EXPECT_FALSE(streamer.stopped());
}

TEST(TextStreamerTest, AnIncompleteCharacterAtTheEndIsReleasedAsTheDecoderWritesIt) {
  ByteTokenizer tokenizer;
  TextStreamer streamer(tokenizer, {});
  EXPECT_EQ(streamer.Add('a'), "a");
  EXPECT_EQ(streamer.Add(0xF0), "");
  EXPECT_EQ(streamer.Add(0x9F), "");
  EXPECT_EQ(streamer.Finish(), "\xF0\x9F");
}

TEST(TextStreamerTest, IncompleteUtf8TailCountsOnlyAnUnfinishedCharacter) {
  EXPECT_EQ(IncompleteUtf8Tail(""), 0u);
  EXPECT_EQ(IncompleteUtf8Tail("abc"), 0u);
  EXPECT_EQ(IncompleteUtf8Tail("a\xC3"), 1u);
  EXPECT_EQ(IncompleteUtf8Tail("a\xC3\xA9"), 0u);
  EXPECT_EQ(IncompleteUtf8Tail("\xF0\x9F\xA6"), 3u);
  EXPECT_EQ(IncompleteUtf8Tail("\xF0\x9F\xA6\x99"), 0u);
}

// Llama 2's decoder: a word-start piece decodes as " a" after another piece
// but "a" first (Strip), and <0xC3><0xA9> are one character between them.
TEST(TextStreamerTest, ALlama2DecoderStreamsTheTextOfTheWholeDecode) {
  auto tokenizer = TinyTokenizer(kTinyLlama2Json);
  //   0 <unk>  1 <s>  2 </s>  3 <0x0A>  4 <0xC3>  5 <0xA9>  6 ▁  7 a  8 b  9 ▁a  10 ab  11 ▁ab
  const std::vector<int32_t> ids = {11, 9, 4, 5, 6, 10, 3, 9};
  TextStreamer streamer(*tokenizer, {});
  std::string joined;
  std::vector<std::string> pieces;
  for (int32_t id : ids) {
    pieces.push_back(streamer.Add(id));
    joined += pieces.back();
  }
  joined += streamer.Finish();
  EXPECT_EQ(joined, tokenizer->Decode(ids));
  EXPECT_EQ(joined, "ab a\xC3\xA9 ab\n a");
  EXPECT_EQ(pieces[2], "") << "half of é";
  EXPECT_EQ(pieces[3], "\xC3\xA9");
}

// After a prompt, the continuation reads as it does there (transformers'
// pipelines, vLLM): the first word-start piece keeps its space.
TEST(TextStreamerTest, AContinuationReadsAsItDoesAfterItsPrompt) {
  auto tokenizer = TinyTokenizer(kTinyLlama2Json);
  //   0 <unk>  1 <s>  2 </s>  3 <0x0A>  4 <0xC3>  5 <0xA9>  6 ▁  7 a  8 b  9 ▁a  10 ab  11 ▁ab
  TextStreamer after_prompt(*tokenizer, {}, DecodingContext({1, 11, 8}));
  std::string joined = after_prompt.Add(9);
  EXPECT_EQ(joined, " a");
  joined += after_prompt.Add(10);
  joined += after_prompt.Finish();
  EXPECT_EQ(joined, DecodeAfter(*tokenizer, {1, 11, 8}, {9, 10}));
  EXPECT_EQ(joined, " aab");
  TextStreamer alone(*tokenizer, {});
  EXPECT_EQ(alone.Add(9), "a") << "no context: the decode of the continuation alone";
}

}  // namespace
}  // namespace dslaunch::runtime
