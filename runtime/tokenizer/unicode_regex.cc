#include "runtime/tokenizer/unicode_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace dslaunch::runtime {
namespace {

pcre2_code* Code(void* code) { return static_cast<pcre2_code*>(code); }

std::string ErrorMessage(int error) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(error, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

// Per-thread match state: PCRE2's match data and a JIT stack large enough
// for long runs of one class (the 32 KiB default gives up on a few thousand
// letters in a row).
struct MatchState {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 << 10, 8 << 20, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  MatchState() { pcre2_jit_stack_assign(context, nullptr, stack); }
  ~MatchState() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(data);
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<UnicodeRegex>> UnicodeRegex::Compile(const std::string& pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
  if (code == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("regex \"", pattern, "\" does not compile at offset ", offset, ": ", ErrorMessage(error)));
  }
  // Without JIT (an unsupported CPU) matching is slower but the same.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return std::unique_ptr<UnicodeRegex>(new UnicodeRegex(pattern, code));
}

UnicodeRegex::~UnicodeRegex() { pcre2_code_free(Code(code_)); }

std::vector<std::pair<size_t, size_t>> UnicodeRegex::FindAll(absl::string_view text) const {
  thread_local MatchState state;
  std::vector<std::pair<size_t, size_t>> matches;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start <= text.size()) {
    int rc = pcre2_match(Code(code_), subject, text.size(), start, 0, state.data, state.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      // Only a resource limit can get here (the patterns are compiled, the
      // text may be any bytes); a silent partial split would change the
      // tokens, so this is a crash with the reason rather than a guess.
      std::fprintf(stderr, "UnicodeRegex: matching \"%s\" failed: %s\n", pattern_.c_str(), ErrorMessage(rc).c_str());
      std::abort();
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
    size_t begin = ovector[0], end = ovector[1];
    if (end == begin) {
      // Empty match: step over one whole UTF-8 character.
      size_t next = begin + 1;
      while (next < text.size() && (static_cast<unsigned char>(text[next]) & 0xC0) == 0x80) ++next;
      start = next;
      continue;
    }
    matches.emplace_back(begin, end);
    start = end;
  }
  return matches;
}

}  // namespace dslaunch::runtime
