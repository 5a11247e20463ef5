#include "runtime/serve/text_streamer.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"

namespace dslaunch::runtime {
namespace {

constexpr char kReplacementCharacter[] = "\xEF\xBF\xBD";  // U+FFFD
// A character spans at most 4 byte tokens: text held back longer than this
// is what the tokens decode to (U+FFFD the model wrote, tokens that decode
// to nothing), released as it is, so the window stays short.
constexpr size_t kMaxHeldTokens = 16;

}  // namespace

size_t IncompleteUtf8Tail(const std::string& text) {
  // Look back over at most 3 continuation bytes for the lead byte.
  const size_t n = text.size();
  for (size_t back = 1; back <= std::min<size_t>(4, n); ++back) {
    const unsigned char c = static_cast<unsigned char>(text[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte
    size_t length = 1;
    if ((c & 0xE0) == 0xC0) {
      length = 2;
    } else if ((c & 0xF0) == 0xE0) {
      length = 3;
    } else if ((c & 0xF8) == 0xF0) {
      length = 4;
    }
    return back < length ? back : 0;
  }
  return 0;
}

TextStreamer::TextStreamer(const Tokenizer& tokenizer, std::vector<std::string> stop_strings,
                           const std::vector<int32_t>& context)
    : tokenizer_(tokenizer), stop_strings_(std::move(stop_strings)), tokens_(context), read_offset_(context.size()) {}

std::string TextStreamer::Add(int64_t token) {
  if (stopped_) return "";
  tokens_.push_back(static_cast<int32_t>(token));
  const auto [prefix_text, new_text] = DecodeWindow();
  auto whole = [](const std::string& text) {
    return !absl::EndsWith(text, kReplacementCharacter) && IncompleteUtf8Tail(text) == 0;
  };
  if (new_text.size() > prefix_text.size() && whole(new_text)) {
    // The window's text begins with the text of its older tokens (a decoder
    // is a left-to-right function of its pieces); anything else is taken
    // from where the two first differ.
    pending_ += TextPastCommonPrefix(prefix_text, new_text);
    prefix_offset_ = read_offset_;
    read_offset_ = tokens_.size();
  } else if (tokens_.size() - read_offset_ >= kMaxHeldTokens) {
    // Held too long: released up to the last token after which the text is
    // whole (a character still coming stays held), or all of it.
    size_t cut = tokens_.size();
    std::string cut_text = new_text;
    const auto first = tokens_.begin() + static_cast<std::ptrdiff_t>(prefix_offset_);
    for (size_t c = tokens_.size() - 1; c > read_offset_; --c) {
      std::string text = tokenizer_.Decode(std::vector<int32_t>(first, tokens_.begin() + static_cast<std::ptrdiff_t>(c)));
      if (whole(text)) {
        cut = c;
        cut_text = std::move(text);
        break;
      }
    }
    pending_ += TextPastCommonPrefix(prefix_text, cut_text);
    prefix_offset_ = read_offset_;
    read_offset_ = cut;
  }
  return Release(/*final=*/false);
}

std::pair<std::string, std::string> TextStreamer::DecodeWindow() const {
  const auto first = tokens_.begin() + static_cast<std::ptrdiff_t>(prefix_offset_);
  return {tokenizer_.Decode(std::vector<int32_t>(first, tokens_.begin() + static_cast<std::ptrdiff_t>(read_offset_))),
          tokenizer_.Decode(std::vector<int32_t>(first, tokens_.end()))};
}

std::string TextStreamer::Finish() {
  if (stopped_) return "";
  if (read_offset_ < tokens_.size()) {
    const auto [prefix_text, new_text] = DecodeWindow();
    pending_ += TextPastCommonPrefix(prefix_text, new_text);
    read_offset_ = tokens_.size();
  }
  return Release(/*final=*/true);
}

std::string TextStreamer::Release(bool final) {
  // The earliest stop string in what is pending (released text never holds
  // the start of one).
  size_t stop_at = std::string::npos;
  for (const std::string& stop : stop_strings_) stop_at = std::min(stop_at, pending_.find(stop));
  std::string out;
  if (stop_at != std::string::npos) {
    out = pending_.substr(0, stop_at);
    pending_.clear();
    stopped_ = true;
  } else {
    size_t hold = 0;
    if (!final) {
      // The longest end of pending_ that a stop string begins with.
      for (const std::string& stop : stop_strings_) {
        for (size_t k = std::min(stop.size() - 1, pending_.size()); k > hold; --k) {
          if (pending_.compare(pending_.size() - k, k, stop, 0, k) == 0) {
            hold = k;
            break;
          }
        }
      }
    }
    out = pending_.substr(0, pending_.size() - hold);
    pending_.erase(0, pending_.size() - hold);
  }
  released_ += out;
  return out;
}

}  // namespace dslaunch::runtime
