#include "runtime/serve/openai_response.h"

#include "absl/strings/str_cat.h"
#include "common/json_quote.h"

namespace dslaunch::runtime {
namespace {

std::string Head(const ResponseHeader& header, const char* object) {
  return absl::StrCat("{\"id\":", JsonQuote(header.id), ",\"object\":\"", object, "\",\"created\":", header.created,
                      ",\"model\":", JsonQuote(header.model));
}

std::string FinishReasonJson(const std::string& reason) { return reason.empty() ? "null" : JsonQuote(reason); }

std::string Usage(const TokenUsage& usage) {
  return absl::StrCat("{\"prompt_tokens\":", usage.prompt_tokens, ",\"completion_tokens\":", usage.completion_tokens,
                      ",\"total_tokens\":", usage.prompt_tokens + usage.completion_tokens, "}");
}

}  // namespace

std::string ErrorJson(const ApiError& error) {
  return absl::StrCat("{\"error\":{\"message\":", JsonQuote(error.message), ",\"type\":", JsonQuote(error.type),
                      ",\"param\":", error.param.empty() ? "null" : JsonQuote(error.param),
                      ",\"code\":", error.code.empty() ? "null" : JsonQuote(error.code), "}}");
}

std::string CompletionJson(const ResponseHeader& header, const std::string& text, const std::string& finish_reason,
                           const TokenUsage& usage) {
  return absl::StrCat(Head(header, "text_completion"), ",\"choices\":[{\"index\":0,\"text\":", JsonQuote(text),
                      ",\"logprobs\":null,\"finish_reason\":", FinishReasonJson(finish_reason), "}],\"usage\":",
                      Usage(usage), "}");
}

std::string CompletionChunkJson(const ResponseHeader& header, const std::string& text,
                                const std::string& finish_reason) {
  return absl::StrCat(Head(header, "text_completion"), ",\"choices\":[{\"index\":0,\"text\":", JsonQuote(text),
                      ",\"logprobs\":null,\"finish_reason\":", FinishReasonJson(finish_reason), "}]}");
}

std::string ChatCompletionJson(const ResponseHeader& header, const std::string& content,
                               const std::string& finish_reason, const TokenUsage& usage) {
  return absl::StrCat(Head(header, "chat.completion"),
                      ",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":", JsonQuote(content),
                      "},\"logprobs\":null,\"finish_reason\":", FinishReasonJson(finish_reason), "}],\"usage\":",
                      Usage(usage), "}");
}

std::string ChatChunkJson(const ResponseHeader& header, const std::optional<std::string>& role,
                          const std::optional<std::string>& content, const std::string& finish_reason) {
  std::string delta = "{";
  if (role) absl::StrAppend(&delta, "\"role\":", JsonQuote(*role));
  if (content) absl::StrAppend(&delta, role ? "," : "", "\"content\":", JsonQuote(*content));
  delta += "}";
  return absl::StrCat(Head(header, "chat.completion.chunk"), ",\"choices\":[{\"index\":0,\"delta\":", delta,
                      ",\"logprobs\":null,\"finish_reason\":", FinishReasonJson(finish_reason), "}]}");
}

std::string UsageChunkJson(const ResponseHeader& header, const char* object, const TokenUsage& usage) {
  return absl::StrCat(Head(header, object), ",\"choices\":[],\"usage\":", Usage(usage), "}");
}

std::string ServerSentEvent(const std::string& json) { return absl::StrCat("data: ", json, "\n\n"); }

}  // namespace dslaunch::runtime
