// Generated token ids -> text, a piece at a time, with stop strings.
//
// Note [Streaming text and stop strings]
// A token is not always text on its own: a character may span tokens (byte
// fallback pieces, byte-level BPE), and a SentencePiece word-start piece
// decodes differently at the start of a sequence than after another token.
// So each new piece is found as vLLM does: decode a short window of recent
// tokens with and without the newest ones and take the difference; while
// the window's text ends in an incomplete character (raw bytes, or the
// U+FFFD a decoder writes for them), nothing is released, for at most 16
// tokens (a character spans at most 4: past that the U+FFFD is the model's,
// or the tokens decode to nothing, and the text goes as it is, so the window
// never grows long). The pieces joined are the text Decode gives for all the
// tokens at once.
// Stop strings (OpenAI's "stop"; a chat template's end-of-turn text) are
// looked for in the text, across token boundaries: text that could still
// become the start of a stop string is held back until it cannot, and at a
// match the text ends just before the stop string (which is not returned,
// as OpenAI does).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/tokenizer/tokenizer.h"

namespace dslaunch::runtime {

class TextStreamer {
 public:
  // `tokenizer` must outlive the streamer. `context`: the tokens before the
  // first added (the prompt's last few, DecodingContext): the text is what
  // the tokens add after them, so a SentencePiece word-start piece first
  // keeps its space; empty: none.
  TextStreamer(const Tokenizer& tokenizer, std::vector<std::string> stop_strings,
               const std::vector<int32_t>& context = {});

  // Adds a generated token (not a stop token: those end the request without
  // text); returns the text now released, maybe "". After stopped(), adds
  // nothing.
  std::string Add(int64_t token);
  // The generation ended: releases what was held back (an incomplete
  // character as the decoder writes it).
  std::string Finish();

  // A stop string was found; the request should end.
  bool stopped() const { return stopped_; }
  // Every piece released so far, joined.
  const std::string& text() const { return released_; }

 private:
  // Moves text from pending_ to the result, stopping at a stop string and
  // holding back a possible start of one unless `final`.
  std::string Release(bool final);
  // The window's text without and with its unread tokens.
  std::pair<std::string, std::string> DecodeWindow() const;

  const Tokenizer& tokenizer_;
  std::vector<std::string> stop_strings_;
  std::vector<int32_t> tokens_;
  size_t prefix_offset_ = 0;  // the window's first token
  size_t read_offset_ = 0;    // tokens before this are in the text
  std::string pending_;       // decoded, not yet released
  std::string released_;
  bool stopped_ = false;
};

// Trailing bytes of `text` that start a UTF-8 character but do not finish it.
size_t IncompleteUtf8Tail(const std::string& text);

}  // namespace dslaunch::runtime
