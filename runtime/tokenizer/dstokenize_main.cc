// dstokenize: a model's tokenizer on lines of text, for checking it against
// any other implementation.
//
//   printf 'Hello world\n' | dstokenize --tokenizer models/Llama-3-8B
//   128000 9906 1917
//
// Each line of stdin (without its '\n') becomes one line of space-separated
// ids; an empty line gives an empty line (or just bos). Exit status 1 with
// the file/line named when the tokenizer cannot be loaded or a line is not
// UTF-8, 2 for a bad command line.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/tokenizer/dstokenize_options.h"
#include "runtime/tokenizer/json_value.h"
#include "runtime/tokenizer/model_tokenizer.h"

namespace {

constexpr int kFailure = 1;
constexpr int kUsageError = 2;

void PrintError(const std::string& message) { std::fprintf(stderr, "dstokenize: %s\n", message.c_str()); }

bool IsUtf8(const std::string& text) {
  for (size_t i = 0; i < text.size();) {
    const unsigned char lead = static_cast<unsigned char>(text[i]);
    size_t length = lead < 0x80 ? 1 : (lead >= 0xC2 && lead <= 0xDF) ? 2 : (lead >= 0xE0 && lead <= 0xEF) ? 3
                  : (lead >= 0xF0 && lead <= 0xF4) ? 4 : 0;
    if (length == 0 || i + length > text.size()) return false;
    uint32_t cp = length == 1 ? lead : lead & (0xFF >> (length + 1));
    for (size_t k = 1; k < length; ++k) {
      const unsigned char c = static_cast<unsigned char>(text[i + k]);
      if ((c & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (c & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[length] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += length;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dslaunch::runtime;
  std::vector<std::string> args(argv + 1, argv + argc);
  absl::StatusOr<DstokenizeCommand> command = ParseDstokenizeArgs(args);
  if (!command.ok()) {
    PrintError(std::string(command.status().message()));
    std::fputs(DstokenizeUsage().c_str(), stderr);
    return kUsageError;
  }
  if (command->help) {
    std::fputs(DstokenizeUsage().c_str(), stdout);
    return 0;
  }
  if (command->version) {
    std::printf("%s\n", DstokenizeVersion().c_str());
    return 0;
  }
  const DstokenizeOptions& options = command->options;
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadModelTokenizer(options.tokenizer);
  if (!tokenizer.ok()) {
    PrintError(absl::StrCat("--tokenizer: ", tokenizer.status().message()));
    return kFailure;
  }
  const bool add_bos = options.add_bos.value_or((*tokenizer)->adds_bos());
  const bool add_eos = options.add_eos.value_or((*tokenizer)->adds_eos());
  if (add_bos && (*tokenizer)->bos_id() < 0) {
    PrintError(absl::StrCat("--add_bos: ", options.tokenizer, " has no bos token"));
    return kFailure;
  }
  std::ios::sync_with_stdio(false);
  std::string line;
  for (int64_t number = 1; std::getline(std::cin, line); ++number) {
    std::string text = line;
    if (options.json_lines) {
      absl::StatusOr<JsonValue> value = ParseJson(line, absl::StrCat("stdin:", number));
      if (!value.ok() || !value->is_string()) {
        PrintError(value.ok() ? absl::StrCat("stdin:", number, ": --json_lines expects a JSON string per line")
                              : std::string(value.status().message()));
        return kFailure;
      }
      text = value->string_value();
    }
    if (!IsUtf8(text)) {
      PrintError(absl::StrCat("stdin:", number, ": not valid UTF-8"));
      return kFailure;
    }
    std::vector<int32_t> ids;
    if (add_bos) ids.push_back((*tokenizer)->bos_id());
    std::vector<int32_t> encoded = options.plain_text ? (*tokenizer)->EncodePlainText(text) : (*tokenizer)->Encode(text);
    ids.insert(ids.end(), encoded.begin(), encoded.end());
    if (add_eos) ids.push_back((*tokenizer)->eos_id());
    std::cout << absl::StrJoin(ids, " ") << '\n';
  }
  std::cout.flush();
  if (std::cin.bad() || !std::cout) {
    PrintError(!std::cout ? "cannot write to stdout" : "cannot read stdin");
    return kFailure;
  }
  return 0;
}
