#include "runtime/tokenizer/hf_text_pipeline.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "runtime/tokenizer/byte_level_alphabet.h"

namespace dslaunch::runtime {
namespace {

using Scheme = HfPreTokenizerStep::PrependScheme;

// Split's "Isolated" behavior: each match is a piece, and so is the text
// between matches.
void SplitIsolated(const UnicodeRegex& regex, absl::string_view text, std::vector<std::string>* pieces) {
  size_t last = 0;
  for (const auto& [begin, end] : regex.FindAll(text)) {
    if (begin > last) pieces->emplace_back(text.substr(last, begin - last));
    pieces->emplace_back(text.substr(begin, end - begin));
    last = end;
  }
  if (last < text.size()) pieces->emplace_back(text.substr(last));
}

// Split's "MergedWithNext" on a literal: each delimiter starts a piece.
void SplitBeforeEach(absl::string_view delimiter, absl::string_view text, std::vector<std::string>* pieces) {
  size_t start = 0;
  for (size_t found = text.find(delimiter, 1); found != absl::string_view::npos;
       found = text.find(delimiter, found + delimiter.size())) {
    if (found > start) pieces->emplace_back(text.substr(start, found - start));
    start = found;
  }
  if (start < text.size()) pieces->emplace_back(text.substr(start));
}

void ApplyPreTokenizer(const HfPreTokenizerStep& step, std::string piece, bool first_of_text,
                       std::vector<std::string>* out) {
  switch (step.kind) {
    case HfPreTokenizerStep::Kind::kSplit:
      SplitIsolated(*step.regex, piece, out);
      return;
    case HfPreTokenizerStep::Kind::kByteLevel: {
      if (step.add_prefix_space && !absl::StartsWith(piece, " ")) piece.insert(0, " ");
      std::vector<std::string> words;
      if (step.regex != nullptr) {
        SplitIsolated(*step.regex, piece, &words);
      } else {
        words.push_back(std::move(piece));
      }
      for (const std::string& word : words) out->push_back(BytesToByteLevel(word));
      return;
    }
    case HfPreTokenizerStep::Kind::kMetaspace: {
      piece = absl::StrReplaceAll(piece, {{" ", step.replacement}});
      const bool prepend = step.prepend_scheme == Scheme::kAlways ||
                           (step.prepend_scheme == Scheme::kFirst && first_of_text);
      if (prepend && !absl::StartsWith(piece, step.replacement)) piece.insert(0, step.replacement);
      if (step.split) {
        SplitBeforeEach(step.replacement, piece, out);
      } else {
        out->push_back(std::move(piece));
      }
      return;
    }
  }
}

bool IsByteFallbackToken(absl::string_view token, uint8_t* byte) {
  if (token.size() != 6 || !absl::StartsWith(token, "<0x") || token[5] != '>') return false;
  int value = 0;
  for (char c : token.substr(3, 2)) {
    value <<= 4;
    if (c >= '0' && c <= '9') value |= c - '0';
    else if (c >= 'A' && c <= 'F') value |= c - 'A' + 10;
    else return false;
  }
  *byte = static_cast<uint8_t>(value);
  return true;
}

// Decodes the UTF-8 character at text[*pos] (an invalid byte as itself) and advances.
uint32_t NextCodePoint(absl::string_view text, size_t* pos) {
  const unsigned char lead = static_cast<unsigned char>(text[*pos]);
  int length = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
  if (*pos + length > text.size()) length = 1;
  uint32_t cp = length == 1 ? lead : length == 2 ? (lead & 0x1F) : length == 3 ? (lead & 0x0F) : (lead & 0x07);
  for (int i = 1; i < length; ++i) cp = (cp << 6) | (static_cast<unsigned char>(text[*pos + i]) & 0x3F);
  *pos += length;
  return cp;
}

std::vector<std::string> ApplyDecoder(const HfDecoderStep& step, std::vector<std::string> tokens) {
  using Kind = HfDecoderStep::Kind;
  std::vector<std::string> out;
  switch (step.kind) {
    case Kind::kByteLevel: {
      // A token with a character outside the alphabet (an added token)
      // passes as its own UTF-8, as in tokenizers.
      std::string bytes;
      for (const std::string& token : tokens) {
        std::string mapped;
        bool all_mapped = true;
        for (size_t pos = 0; pos < token.size() && all_mapped;) {
          std::optional<uint8_t> b = ByteLevelByte(NextCodePoint(token, &pos));
          if (b.has_value()) mapped.push_back(static_cast<char>(*b));
          all_mapped = b.has_value();
        }
        bytes += all_mapped ? mapped : token;
      }
      out.push_back(std::move(bytes));
      return out;
    }
    case Kind::kReplace:
      for (std::string& token : tokens) out.push_back(absl::StrReplaceAll(token, {{step.pattern, step.content}}));
      return out;
    case Kind::kByteFallback: {
      std::string run;
      bool in_run = false;
      for (std::string& token : tokens) {
        uint8_t b = 0;
        if (IsByteFallbackToken(token, &b)) {
          run.push_back(static_cast<char>(b));
          in_run = true;
          continue;
        }
        if (in_run) out.push_back(std::move(run));
        run.clear();
        in_run = false;
        out.push_back(std::move(token));
      }
      if (in_run) out.push_back(std::move(run));
      return out;
    }
    case Kind::kFuse:
      out.push_back(absl::StrJoin(tokens, ""));
      return out;
    case Kind::kStrip:
      for (std::string& token : tokens) {
        absl::string_view view = token;
        for (int i = 0; i < step.start && absl::StartsWith(view, step.content); ++i) view.remove_prefix(step.content.size());
        for (int i = 0; i < step.stop && absl::EndsWith(view, step.content); ++i) view.remove_suffix(step.content.size());
        out.emplace_back(view);
      }
      return out;
    case Kind::kMetaspace:
      // tokenizers drops every replacement character of the first token
      // (unless prepend_scheme is "never") and turns the others into spaces.
      for (size_t i = 0; i < tokens.size(); ++i) {
        const bool drop = i == 0 && step.prepend_scheme != Scheme::kNever;
        out.push_back(absl::StrReplaceAll(tokens[i], {{step.content, drop ? "" : " "}}));
      }
      return out;
  }
  return out;
}

}  // namespace

std::string Normalize(const std::vector<HfNormalizerStep>& steps, absl::string_view text) {
  std::string normalized(text);
  for (const HfNormalizerStep& step : steps) {
    switch (step.kind) {
      case HfNormalizerStep::Kind::kPrepend:
        if (!normalized.empty()) normalized.insert(0, step.content);
        break;
      case HfNormalizerStep::Kind::kReplace:
        normalized = absl::StrReplaceAll(normalized, {{step.pattern, step.content}});
        break;
    }
  }
  return normalized;
}

std::vector<std::string> PreTokenize(const std::vector<HfPreTokenizerStep>& steps, std::string text,
                                     bool at_text_start) {
  std::vector<std::string> pieces;
  if (text.empty()) return pieces;
  pieces.push_back(std::move(text));
  for (const HfPreTokenizerStep& step : steps) {
    std::vector<std::string> next;
    for (size_t i = 0; i < pieces.size(); ++i) {
      ApplyPreTokenizer(step, std::move(pieces[i]), at_text_start && i == 0, &next);
    }
    pieces = std::move(next);
  }
  return pieces;
}

std::string DecodeTokens(const std::vector<HfDecoderStep>& steps, std::vector<std::string> tokens) {
  for (const HfDecoderStep& step : steps) tokens = ApplyDecoder(step, std::move(tokens));
  return absl::StrJoin(tokens, "");
}

}  // namespace dslaunch::runtime
