#include "runtime/serve/openai_request.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/generate/json_schema.h"
#include "runtime/generate/sampling.h"
#include "runtime/tokenizer/json_value.h"

namespace dslaunch::runtime {
namespace {

constexpr int kMaxStopStrings = 4;
// A stop string is matched against the text of every choice as it streams:
// longer ones are no stop sequence a client means, and cost n copies.
constexpr size_t kMaxStopStringBytes = 1024;

// Reads fields of one request object, stopping at the first problem.
class FieldReader {
 public:
  explicit FieldReader(ApiError* error) : error_(error) {}

  bool ok() const { return ok_; }
  // The top-level field being read: errors inside it name it as "param"
  // (their message gives the whole path, "stop[2]").
  void set_field(const std::string& field) { field_ = field; }

  bool Fail(const std::string& param, const std::string& message) {
    if (ok_) {
      error_->http_status = 400;
      error_->type = "invalid_request_error";
      error_->param = field_.empty() ? param : field_;
      error_->message = message;
      ok_ = false;
    }
    return false;
  }

  bool Number(const JsonValue& value, const std::string& name, double low, double high, double* out) {
    if (!value.is_number()) return Fail(name, absl::StrCat(name, ": expected a number, got ", JsonValue::TypeName(value.type())));
    const double v = value.number_value();
    if (!(v >= low && v <= high)) return Fail(name, absl::StrCat(name, ": ", v, " is not in [", low, ", ", high, "]"));
    *out = v;
    return true;
  }

  bool Integer(const JsonValue& value, const std::string& name, int64_t low, int64_t high, int64_t* out) {
    if (!value.is_number() || value.number_value() != std::floor(value.number_value())) {
      return Fail(name, absl::StrCat(name, ": expected an integer, got ",
                                     value.is_number() ? absl::StrCat(value.number_value())
                                                       : std::string(JsonValue::TypeName(value.type()))));
    }
    const double v = value.number_value();
    if (v < static_cast<double>(low) || v > static_cast<double>(high)) {
      return Fail(name, absl::StrCat(name, ": ", static_cast<int64_t>(v), " is not in [", low, ", ", high, "]"));
    }
    *out = static_cast<int64_t>(v);
    return true;
  }

  bool Bool(const JsonValue& value, const std::string& name, bool* out) {
    if (!value.is_bool()) return Fail(name, absl::StrCat(name, ": expected true or false, got ", JsonValue::TypeName(value.type())));
    *out = value.bool_value();
    return true;
  }

  bool String(const JsonValue& value, const std::string& name, std::string* out) {
    if (!value.is_string()) return Fail(name, absl::StrCat(name, ": expected a string, got ", JsonValue::TypeName(value.type())));
    *out = value.string_value();
    return true;
  }

  // A field this server does not do, accepted at its neutral value only.
  bool Neutral(const JsonValue& value, const std::string& name, const std::function<bool(const JsonValue&)>& neutral,
               const std::string& what) {
    if (value.is_null() || neutral(value)) return true;
    return Fail(name, absl::StrCat(name, ": this server ", what));
  }

 private:
  ApiError* error_;
  std::string field_;
  bool ok_ = true;
};

bool IsNumber(const JsonValue& v, double x) { return v.is_number() && v.number_value() == x; }

// The fields of tool calling (Note [Tool calls]): the chat request reads
// them; the completions request refuses them.
bool IsToolsField(const std::string& key) {
  return key == "tools" || key == "tool_choice" || key == "parallel_tool_calls";
}

// Note [Constrained output]: one form per request, named by the field that
// gave it.
bool SetConstraint(FieldReader& reader, GenerationParameters* p, OutputConstraint constraint, const std::string& field) {
  if (p->constraint.kind != OutputConstraint::Kind::kNone) {
    return reader.Fail(field, absl::StrCat(p->constraint_field, " and ", field,
                                           " both hold the answer to a form: give one"));
  }
  p->constraint = std::move(constraint);
  p->constraint_field = field;
  return true;
}

// A JSON schema, checked here so that a schema constrained decoding cannot
// hold output to is a 400 naming its place (Note [JSON schemas for
// constrained output]).
bool SetSchemaConstraint(FieldReader& reader, GenerationParameters* p, const JsonValue& schema,
                         const std::string& field, const std::string& name) {
  auto compiled = CompileJsonSchema(schema, name);
  if (!compiled.ok()) return reader.Fail(field, std::string(compiled.status().message()));
  return SetConstraint(reader, p, OutputConstraint::JsonSchema((*compiled)->text()),
                       field);
}

// vLLM's response_format {"type": "structural_tag", "structures": [{"begin",
// "schema", "end"}], "triggers": [...]} (Note [Structural tags]), checked
// here so that a form the engine would refuse is a 400 naming its place.
bool SetStructuralTagConstraint(FieldReader& reader, GenerationParameters* p, const JsonValue& format,
                                const std::string& key) {
  absl::StatusOr<StructuralTagSpec> spec = ReadStructuralTag(format, "response_format");
  if (!spec.ok()) return reader.Fail(key, std::string(spec.status().message()));
  return SetConstraint(reader, p, OutputConstraint::StructuralTag(std::move(spec->structures), std::move(spec->triggers)),
                       key);
}

// The shared fields; returns false (error filled) on a problem, and sets
// *handled for a key it read. `chat`: the fields of /v1/chat/completions
// where the two endpoints differ.
bool ReadParameter(FieldReader& reader, const std::string& key, const JsonValue& value, bool chat,
                   GenerationParameters* p, bool* handled) {
  *handled = true;
  if (key == "max_tokens" || key == "max_completion_tokens") {
    if (value.is_null()) return true;
    int64_t n = 0;
    if (!reader.Integer(value, key, 1, int64_t{1} << 31, &n)) return false;
    p->max_tokens = n;
    return true;
  }
  if (key == "temperature") return value.is_null() || reader.Number(value, key, 0, 2, &p->temperature);
  if (key == "top_p") {
    if (value.is_null()) return true;
    if (!reader.Number(value, key, 0, 1, &p->top_p)) return false;
    if (p->top_p <= 0) return reader.Fail(key, "top_p: must be > 0");
    return true;
  }
  if (key == "top_k") {
    if (value.is_null()) return true;
    if (!reader.Integer(value, key, -1, int64_t{1} << 31, &p->top_k)) return false;
    if (p->top_k < 0) p->top_k = 0;  // vLLM's -1: every token
    return true;
  }
  if (key == "repetition_penalty") {
    if (value.is_null()) return true;
    if (!reader.Number(value, key, 0, 100, &p->repetition_penalty)) return false;
    if (p->repetition_penalty <= 0) return reader.Fail(key, "repetition_penalty: must be > 0");
    return true;
  }
  if (key == "seed") {
    if (value.is_null()) return true;
    int64_t seed = 0;
    if (!reader.Integer(value, key, INT64_MIN / 2, INT64_MAX / 2, &seed)) return false;
    p->seed = static_cast<uint64_t>(seed);
    return true;
  }
  if (key == "stop") {
    if (value.is_null()) return true;
    if (value.is_string()) {
      if (value.string_value().empty()) return reader.Fail(key, "stop: an empty string");
      if (value.string_value().size() > kMaxStopStringBytes) {
        return reader.Fail(key, absl::StrCat("stop: longer than ", kMaxStopStringBytes, " bytes"));
      }
      p->stop = {value.string_value()};
      return true;
    }
    if (!value.is_array()) return reader.Fail(key, absl::StrCat("stop: expected a string or an array of strings, got ",
                                                                JsonValue::TypeName(value.type())));
    if (value.items().size() > kMaxStopStrings) {
      return reader.Fail(key, absl::StrCat("stop: at most ", kMaxStopStrings, " strings (got ", value.items().size(), ")"));
    }
    for (size_t i = 0; i < value.items().size(); ++i) {
      const std::string name = absl::StrCat("stop[", i, "]");
      std::string text;
      if (!reader.String(value.items()[i], name, &text)) return false;
      if (text.empty()) return reader.Fail(key, absl::StrCat(name, ": an empty string"));
      if (text.size() > kMaxStopStringBytes) {
        return reader.Fail(key, absl::StrCat(name, ": longer than ", kMaxStopStringBytes, " bytes"));
      }
      p->stop.push_back(std::move(text));
    }
    return true;
  }
  if (key == "stream") return value.is_null() || reader.Bool(value, key, &p->stream);
  if (key == "ignore_eos") return value.is_null() || reader.Bool(value, key, &p->ignore_eos);
  if (key == "stream_options") {
    if (value.is_null()) return true;
    if (!value.is_object()) return reader.Fail(key, absl::StrCat("stream_options: expected an object, got ",
                                                                 JsonValue::TypeName(value.type())));
    for (size_t i = 0; i < value.keys().size(); ++i) {
      if (value.keys()[i] != "include_usage") {
        return reader.Fail("stream_options", absl::StrCat("stream_options: unknown field '", value.keys()[i], "'"));
      }
      if (!reader.Bool(value.items()[i], "stream_options.include_usage", &p->include_usage)) return false;
    }
    return true;
  }
  if (key == "n") return value.is_null() || reader.Integer(value, key, 1, kMaxChoices, &p->n);
  if (key == "best_of" && !chat) return value.is_null() || reader.Integer(value, key, 1, kMaxChoices, &p->best_of);
  if (key == "echo" && !chat) return value.is_null() || reader.Bool(value, key, &p->echo);
  if (key == "logprobs") {
    if (value.is_null()) return true;
    if (chat) return reader.Bool(value, key, &p->logprobs);
    // Completions: the number of alternatives per token.
    p->logprobs = true;
    return reader.Integer(value, key, 0, kMaxTopLogprobs, &p->top_logprobs);
  }
  if (key == "top_logprobs" && chat) {
    return value.is_null() || reader.Integer(value, key, 0, kMaxTopLogprobs, &p->top_logprobs);
  }
  // OpenAI's fields this server does not do: their neutral value only.
  if (key == "best_of") {
    return reader.Neutral(value, key, [](const JsonValue& v) { return IsNumber(v, 1); },
                          "takes best_of on /v1/completions only: give 1 or leave it out");
  }
  if (key == "echo") {
    return reader.Neutral(value, key, [](const JsonValue& v) { return v.is_bool() && !v.bool_value(); },
                          "echoes the prompt on /v1/completions only: give false or leave it out");
  }
  if (key == "top_logprobs") {
    return reader.Neutral(value, key, [](const JsonValue& v) { return IsNumber(v, 0); },
                          "takes top_logprobs on /v1/chat/completions; on /v1/completions logprobs is the number "
                          "of alternatives per token");
  }
  if (key == "frequency_penalty" || key == "presence_penalty") {
    return reader.Neutral(value, key, [](const JsonValue& v) { return IsNumber(v, 0); },
                          "does not apply OpenAI's frequency or presence penalties: give 0 or leave it out "
                          "(repetition_penalty is supported)");
  }
  if (key == "logit_bias") {
    return reader.Neutral(value, key, [](const JsonValue& v) { return v.is_object() && v.keys().empty(); },
                          "does not apply a logit bias: leave it out");
  }
  if (key == "suffix") {
    return reader.Neutral(value, key, [](const JsonValue&) { return false; }, "does not insert text: leave it out");
  }
  if (IsToolsField(key)) {
    if (chat) {
      *handled = false;  // the chat request's own (ReadToolsField)
      return true;
    }
    return reader.Neutral(value, key, [](const JsonValue& v) { return v.is_null(); },
                          "takes tools on /v1/chat/completions only: leave it out");
  }
  if (key == "functions" || key == "function_call") {
    return reader.Neutral(value, key, [](const JsonValue& v) { return v.is_null(); },
                          "reads the tools field, not the deprecated functions and function_call: give tools");
  }
  if (key == "response_format") {  // Note [Constrained output]
    if (value.is_null()) return true;
    if (!value.is_object()) {
      return reader.Fail(key, absl::StrCat("response_format: expected an object, got ",
                                           JsonValue::TypeName(value.type())));
    }
    std::string type;
    const JsonValue* json_schema = nullptr;
    const JsonValue* type_value = value.Find("type");
    if (type_value != nullptr && type_value->is_string() && type_value->string_value() == "structural_tag") {
      return SetStructuralTagConstraint(reader, p, value, key);
    }
    for (size_t i = 0; i < value.keys().size(); ++i) {
      if (value.keys()[i] == "json_schema") {
        json_schema = &value.items()[i];
      } else if (value.keys()[i] != "type") {
        return reader.Fail(key, absl::StrCat("response_format: unknown field '", value.keys()[i],
                                             "' (type is read: json_object, json_schema with its json_schema, "
                                             "structural_tag with its structures and triggers, or text)"));
      } else if (!reader.String(value.items()[i], "response_format.type", &type)) {
        return false;
      }
    }
    if (json_schema != nullptr && type != "json_schema") {
      return reader.Fail(key, absl::StrCat("response_format.json_schema goes with type json_schema, not '", type, "'"));
    }
    if (type == "json_object") return SetConstraint(reader, p, OutputConstraint::JsonObject(), key);
    if (type == "json_schema") {
      // OpenAI's {"name", "description", "schema", "strict"}: the output is
      // held to the schema whether or not strict is true.
      if (json_schema == nullptr || !json_schema->is_object()) {
        return reader.Fail(key, "response_format json_schema: expected a json_schema object with the schema in it");
      }
      const JsonValue* schema = nullptr;
      for (size_t i = 0; i < json_schema->keys().size(); ++i) {
        const std::string& field = json_schema->keys()[i];
        const JsonValue& item = json_schema->items()[i];
        std::string ignored;
        if (field == "schema") {
          schema = &item;
        } else if (field == "name" || field == "description") {
          if (!reader.String(item, "response_format.json_schema." + field, &ignored)) return false;
        } else if (field == "strict") {
          if (!item.is_null() && !item.is_bool()) {
            return reader.Fail(key, "response_format.json_schema.strict: expected true or false");
          }
        } else {
          return reader.Fail(key, absl::StrCat("response_format.json_schema: unknown field '", field,
                                               "' (name, description, schema and strict are read)"));
        }
      }
      if (schema == nullptr) return reader.Fail(key, "response_format.json_schema: no schema");
      return SetSchemaConstraint(reader, p, *schema, key, "response_format.json_schema");
    }
    if (type == "text") return true;
    return reader.Fail(key, absl::StrCat("response_format.type '", type,
                                         "': expected json_object, json_schema, structural_tag or text"));
  }
  if (key == "guided_json") {  // vLLM's: a schema, or its text
    if (value.is_null()) return true;
    if (value.is_string()) {
      auto parsed = ParseJson(value.string_value(), "guided_json");
      if (!parsed.ok()) return reader.Fail(key, std::string(parsed.status().message()));
      return SetSchemaConstraint(reader, p, *parsed, key, "guided_json");
    }
    return SetSchemaConstraint(reader, p, value, key, "guided_json");
  }
  if (key == "guided_choice") {  // vLLM's
    if (value.is_null()) return true;
    if (!value.is_array()) {
      return reader.Fail(key, absl::StrCat("guided_choice: expected an array of strings, got ",
                                           JsonValue::TypeName(value.type())));
    }
    if (value.items().empty() || value.items().size() > static_cast<size_t>(kMaxGuidedChoices)) {
      return reader.Fail(key, absl::StrCat("guided_choice: 1 to ", kMaxGuidedChoices, " strings (got ",
                                           value.items().size(), ")"));
    }
    OutputConstraint choice = OutputConstraint::Choice({});
    for (size_t i = 0; i < value.items().size(); ++i) {
      const std::string name = absl::StrCat("guided_choice[", i, "]");
      std::string text;
      if (!reader.String(value.items()[i], name, &text)) return false;
      if (text.empty()) return reader.Fail(key, absl::StrCat(name, ": an empty string"));
      choice.choices.push_back(std::move(text));
    }
    return SetConstraint(reader, p, std::move(choice), key);
  }
  if (key == "user") {
    std::string ignored;
    return value.is_null() || reader.String(value, key, &ignored);
  }
  *handled = false;
  return true;
}

std::optional<JsonValue> ParseBody(absl::string_view body, ApiError* error) {
  auto parsed = ParseJson(body, "the request body");
  if (!parsed.ok()) {
    *error = ApiError{400, "invalid_request_error", "", std::string(parsed.status().message()), ""};
    return std::nullopt;
  }
  if (!parsed->is_object()) {
    *error = ApiError{400, "invalid_request_error", "",
                      absl::StrCat("the request body must be a JSON object, got ", JsonValue::TypeName(parsed->type())), ""};
    return std::nullopt;
  }
  return std::move(*parsed);
}

bool ReadTokenIds(FieldReader& reader, const JsonValue& ids, const std::string& where, std::vector<int64_t>* out) {
  if (ids.items().empty()) return reader.Fail("prompt", absl::StrCat(where, ": no token ids"));
  for (size_t i = 0; i < ids.items().size(); ++i) {
    int64_t id = 0;
    if (!reader.Integer(ids.items()[i], absl::StrCat(where, "[", i, "]"), 0, int64_t{1} << 31, &id)) return false;
    out->push_back(id);
  }
  return true;
}

bool ReadPrompt(FieldReader& reader, const JsonValue& value, CompletionRequest* request) {
  const std::string name = "prompt";
  if (value.is_string()) {
    request->prompts.push_back(CompletionPrompt{value.string_value(), {}});
    return true;
  }
  if (!value.is_array() || value.items().empty()) {
    return reader.Fail(name, absl::StrCat("prompt: expected a string, an array of token ids or an array of either, "
                                          "got ", value.is_array() ? "an empty array" : JsonValue::TypeName(value.type())));
  }
  if (!value.items()[0].is_string() && !value.items()[0].is_array()) {  // one prompt of token ids
    CompletionPrompt prompt;
    if (!ReadTokenIds(reader, value, "prompt", &prompt.ids)) return false;
    request->prompts.push_back(std::move(prompt));
    return true;
  }
  if (value.items().size() > static_cast<size_t>(kMaxChoices)) {
    return reader.Fail(name, absl::StrCat("prompt: at most ", kMaxChoices, " prompts per request (got ",
                                          value.items().size(), ")"));
  }
  const bool text = value.items()[0].is_string();
  for (size_t i = 0; i < value.items().size(); ++i) {
    const JsonValue& item = value.items()[i];
    const std::string where = absl::StrCat("prompt[", i, "]");
    CompletionPrompt prompt;
    if (text) {
      if (!reader.String(item, where, &prompt.text.emplace())) return false;
    } else if (!item.is_array()) {
      return reader.Fail(name, absl::StrCat(where, ": expected an array of token ids (as prompt[0]), got ",
                                            JsonValue::TypeName(item.type())));
    } else if (!ReadTokenIds(reader, item, where, &prompt.ids)) {
      return false;
    }
    request->prompts.push_back(std::move(prompt));
  }
  return true;
}

// An assistant message's tool_calls: [{"id", "type": "function", "function":
// {"name", "arguments": JSON text of an object}}].
bool ReadMessageToolCalls(FieldReader& reader, const JsonValue& value, const std::string& where,
                          std::vector<ChatToolCall>* calls) {
  if (!value.is_array()) {
    return reader.Fail("messages", absl::StrCat(where, ": expected an array, got ", JsonValue::TypeName(value.type())));
  }
  for (size_t i = 0; i < value.items().size(); ++i) {
    const JsonValue& item = value.items()[i];
    const std::string at = absl::StrCat(where, "[", i, "]");
    const JsonValue* id = item.Find("id");
    const JsonValue* type = item.Find("type");
    const JsonValue* function = item.Find("function");
    if (!item.is_object() || id == nullptr || !id->is_string() || function == nullptr || !function->is_object() ||
        (type != nullptr && !(type->is_string() && type->string_value() == "function"))) {
      return reader.Fail("messages", absl::StrCat(at, ": expected {\"id\": ..., \"type\": \"function\", "
                                                      "\"function\": {\"name\": ..., \"arguments\": ...}}"));
    }
    for (const auto& [object, allowed] : {std::pair{&item, std::vector<std::string>{"id", "type", "function"}},
                                          std::pair{function, std::vector<std::string>{"name", "arguments"}}}) {
      for (const std::string& key : object->keys()) {
        if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
          return reader.Fail("messages", absl::StrCat(at, object == function ? ".function" : "", ": unknown field '",
                                                      key, "'"));
        }
      }
    }
    const JsonValue* name = function->Find("name");
    const JsonValue* arguments = function->Find("arguments");
    if (name == nullptr || !name->is_string() || arguments == nullptr || !arguments->is_string()) {
      return reader.Fail("messages", absl::StrCat(at, ".function: needs a name and its arguments as a JSON string"));
    }
    auto parsed = ParseJson(arguments->string_value(), absl::StrCat(at, ".function.arguments"));
    if (!parsed.ok() || !parsed->is_object()) {
      return reader.Fail("messages", absl::StrCat(at, ".function.arguments: not the JSON text of an object",
                                                  parsed.ok() ? "" : absl::StrCat(" (", parsed.status().message(), ")")));
    }
    calls->push_back(ChatToolCall{id->string_value(), name->string_value(), arguments->string_value()});
  }
  return true;
}

// A tool's name: what OpenAI allows (letters, digits, '_' and '-', up to 64).
bool ToolNameAllowed(const std::string& name) {
  return !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}

// tools, tool_choice and parallel_tool_calls (Note [Tool calls]).
bool ReadToolsField(FieldReader& reader, const std::string& key, const JsonValue& value, ChatRequest* request) {
  if (key == "parallel_tool_calls") return value.is_null() || reader.Bool(value, key, &request->parallel_tool_calls);
  if (key == "tool_choice") {
    if (value.is_null()) return true;
    request->tool_choice_given = true;
    if (value.is_string()) {
      const std::string& choice = value.string_value();
      if (choice != "auto" && choice != "none" && choice != "required") {
        return reader.Fail(key, absl::StrCat("tool_choice: '", choice, "' is not one of auto, none, required"));
      }
      request->tool_choice = choice;
      return true;
    }
    // {"type": "function", "function": {"name": "..."}}
    const JsonValue* type = value.Find("type");
    const JsonValue* function = value.Find("function");
    const JsonValue* name = function != nullptr ? function->Find("name") : nullptr;
    if (!value.is_object() || value.keys().size() != 2 || type == nullptr || !type->is_string() ||
        type->string_value() != "function" || function == nullptr || !function->is_object() ||
        function->keys().size() != 1 || name == nullptr || !name->is_string()) {
      return reader.Fail(key, "tool_choice: expected auto, none, required or {\"type\": \"function\", \"function\": "
                              "{\"name\": ...}}");
    }
    request->tool_choice = "function";
    request->tool_choice_function = name->string_value();
    return true;
  }
  // tools
  if (value.is_null()) return true;
  if (!value.is_array() || value.items().empty()) {
    return reader.Fail(key, absl::StrCat("tools: expected an array of tools, got ",
                                         value.is_array() ? "an empty one (leave it out)"
                                                          : JsonValue::TypeName(value.type())));
  }
  for (size_t i = 0; i < value.items().size(); ++i) {
    const JsonValue& tool = value.items()[i];
    const std::string where = absl::StrCat("tools[", i, "]");
    const JsonValue* type = tool.Find("type");
    const JsonValue* function = tool.Find("function");
    if (!tool.is_object() || type == nullptr || !type->is_string() || type->string_value() != "function" ||
        function == nullptr || !function->is_object()) {
      return reader.Fail(key, absl::StrCat(where, ": expected {\"type\": \"function\", \"function\": {...}}"));
    }
    for (size_t k = 0; k < tool.keys().size(); ++k) {
      if (tool.keys()[k] != "type" && tool.keys()[k] != "function") {
        return reader.Fail(key, absl::StrCat(where, ": unknown field '", tool.keys()[k], "'"));
      }
    }
    std::string name;
    for (size_t k = 0; k < function->keys().size(); ++k) {
      const std::string& field = function->keys()[k];
      const JsonValue& item = function->items()[k];
      const std::string at = absl::StrCat(where, ".function.", field);
      if (field == "name") {
        if (!reader.String(item, at, &name)) return false;
        if (!ToolNameAllowed(name)) {
          return reader.Fail(key, absl::StrCat(at, ": '", name, "' is not 1 to 64 letters, digits, '_' or '-'"));
        }
      } else if (field == "description") {
        std::string ignored;
        if (!item.is_null() && !reader.String(item, at, &ignored)) return false;
      } else if (field == "parameters") {
        if (!item.is_null() && !item.is_object()) {
          return reader.Fail(key, absl::StrCat(at, ": expected a JSON schema object, got ",
                                               JsonValue::TypeName(item.type())));
        }
      } else if (field == "strict") {
        bool strict = false;
        if (!item.is_null() && !reader.Bool(item, at, &strict)) return false;
        request->strict_tools = request->strict_tools || strict;
      } else {
        return reader.Fail(key, absl::StrCat(where, ".function: unknown field '", field, "'"));
      }
    }
    if (name.empty()) return reader.Fail(key, absl::StrCat(where, ".function: no name"));
    if (std::find(request->tool_names.begin(), request->tool_names.end(), name) != request->tool_names.end()) {
      return reader.Fail(key, absl::StrCat(where, ".function.name: '", name, "' is given twice"));
    }
    request->tool_names.push_back(name);
  }
  if (!request->tool_names.empty()) request->tools = value;
  return true;
}

bool ReadMessages(FieldReader& reader, const JsonValue& value, ChatRequest* request) {
  if (!value.is_array() || value.items().empty()) {
    return reader.Fail("messages", absl::StrCat("messages: expected a non-empty array of messages, got ",
                                                value.is_array() ? "an empty array" : JsonValue::TypeName(value.type())));
  }
  for (size_t i = 0; i < value.items().size(); ++i) {
    const JsonValue& item = value.items()[i];
    const std::string where = absl::StrCat("messages[", i, "]");
    if (!item.is_object()) return reader.Fail("messages", absl::StrCat(where, ": expected an object"));
    ChatMessage message;
    bool has_role = false, has_content = false;
    for (size_t k = 0; k < item.keys().size(); ++k) {
      const std::string& key = item.keys()[k];
      const JsonValue& field = item.items()[k];
      if (key == "role") {
        if (!reader.String(field, where + ".role", &message.role)) return false;
        if (message.role != "system" && message.role != "user" && message.role != "assistant" &&
            message.role != "tool") {
          return reader.Fail("messages", absl::StrCat(where, ".role: '", message.role,
                                                      "' is not one of system, user, assistant, tool"));
        }
        has_role = true;
      } else if (key == "content") {
        has_content = true;
        if (field.is_null()) {
          has_content = false;  // an assistant's message of tool calls only
          message.content_null = true;
        } else if (field.is_string()) {
          message.content = field.string_value();
        } else if (field.is_array()) {
          // Content parts: text only.
          for (size_t p = 0; p < field.items().size(); ++p) {
            const JsonValue& part = field.items()[p];
            const std::string part_where = absl::StrCat(where, ".content[", p, "]");
            const JsonValue* type = part.Find("type");
            const JsonValue* text = part.Find("text");
            if (!part.is_object() || type == nullptr || !type->is_string() || type->string_value() != "text" ||
                text == nullptr || !text->is_string()) {
              return reader.Fail("messages", absl::StrCat(part_where, ": only {\"type\": \"text\", \"text\": ...} "
                                                          "parts are supported"));
            }
            message.content += text->string_value();
          }
        } else {
          return reader.Fail("messages", absl::StrCat(where, ".content: expected a string or an array of text parts, got ",
                                                      JsonValue::TypeName(field.type())));
        }
      } else if (key == "name") {
        if (!reader.String(field, where + ".name", &message.name)) return false;
      } else if (key == "tool_call_id") {
        if (!reader.String(field, where + ".tool_call_id", &message.tool_call_id)) return false;
      } else if (key == "tool_calls") {
        if (!ReadMessageToolCalls(reader, field, where + ".tool_calls", &message.tool_calls)) return false;
      } else {
        return reader.Fail("messages", absl::StrCat(where, ": unknown field '", key, "'"));
      }
    }
    if (!has_role) return reader.Fail("messages", absl::StrCat(where, ": no role"));
    if (!has_content) message.content_null = true;
    if (!has_content && (message.role != "assistant" || message.tool_calls.empty())) {
      return reader.Fail("messages", absl::StrCat(where, ": no content"));
    }
    if (!message.tool_calls.empty() && message.role != "assistant") {
      return reader.Fail("messages", absl::StrCat(where, ".tool_calls: only an assistant's message makes tool calls"));
    }
    if ((message.role == "tool") != !message.tool_call_id.empty()) {
      return reader.Fail("messages", message.role == "tool"
                                         ? absl::StrCat(where, ": a tool's message needs the tool_call_id it answers")
                                         : absl::StrCat(where, ".tool_call_id: only a tool's message answers a call"));
    }
    request->messages.push_back(std::move(message));
  }
  return true;
}

// What the fields say together.
void CheckTogether(FieldReader& reader, const GenerationParameters& p) {
  if (p.top_logprobs > 0 && !p.logprobs) {
    reader.Fail("top_logprobs", "top_logprobs: needs \"logprobs\": true");
  } else if (p.best_of != 0 && p.best_of < p.n) {
    reader.Fail("best_of", absl::StrCat("best_of: ", p.best_of, " is less than n (", p.n, ")"));
  } else if (p.best_of > p.n && p.stream) {
    reader.Fail("best_of", "best_of: the best choices are known only at the end, so best_of > n cannot be streamed");
  }
}

// The fields both endpoints share (model and the generation parameters),
// then `read_input` for the endpoint's own input field (`input`: "prompt"
// or "messages"); `other` is the other endpoint's input, refused by name.
template <typename Request>
std::optional<Request> ParseRequest(
    absl::string_view body, ApiError* error, const std::string& input, const std::string& other,
    const std::string& other_hint, const std::function<bool(FieldReader&, const JsonValue&, Request*)>& read_input,
    const std::function<bool(FieldReader&, const std::string&, const JsonValue&, Request*)>& read_own = nullptr) {
  std::optional<JsonValue> root = ParseBody(body, error);
  if (!root) return std::nullopt;
  FieldReader reader(error);
  Request request;
  bool has_input = false;
  for (size_t i = 0; i < root->keys().size() && reader.ok(); ++i) {
    const std::string& key = root->keys()[i];
    const JsonValue& value = root->items()[i];
    reader.set_field(key);
    bool handled = false;
    if (!ReadParameter(reader, key, value, input == "messages", &request.parameters, &handled) || handled) continue;
    if (key == "model") {
      reader.String(value, key, &request.model);
    } else if (key == input) {
      has_input = true;
      read_input(reader, value, &request);
    } else if (key == other) {
      reader.Fail(key, other_hint);
    } else if (read_own && IsToolsField(key)) {
      read_own(reader, key, value, &request);
    } else {
      reader.Fail(key, absl::StrCat("unknown field '", key, "'"));
    }
  }
  reader.set_field("");
  if (reader.ok() && !has_input) reader.Fail(input, absl::StrCat(input, ": missing"));
  if (reader.ok()) CheckTogether(reader, request.parameters);
  if (!reader.ok()) return std::nullopt;
  return request;
}

}  // namespace

std::optional<CompletionRequest> ParseCompletionRequest(absl::string_view body, ApiError* error) {
  return ParseRequest<CompletionRequest>(
      body, error, "prompt", "messages",
      "messages: /v1/completions takes a prompt; messages go to /v1/chat/completions", ReadPrompt);
}

std::optional<ChatRequest> ParseChatRequest(absl::string_view body, ApiError* error) {
  std::optional<ChatRequest> request = ParseRequest<ChatRequest>(
      body, error, "messages", "prompt",
      "prompt: /v1/chat/completions takes messages; a prompt goes to /v1/completions", ReadMessages, ReadToolsField);
  if (!request) return request;
  const std::string& choice = request->tool_choice;
  if (request->tool_choice_given && choice != "none" && !request->tools) {
    *error = ApiError{400, "invalid_request_error", "tool_choice",
                      absl::StrCat("tool_choice: ", choice == "function" ? "a named function" : "\"" + choice + "\"",
                                   " needs tools"),
                      ""};
    return std::nullopt;
  }
  if (choice == "function" && std::find(request->tool_names.begin(), request->tool_names.end(),
                                        request->tool_choice_function) == request->tool_names.end()) {
    *error = ApiError{400, "invalid_request_error", "tool_choice",
                      absl::StrCat("tool_choice: the function '", request->tool_choice_function,
                                   "' is not among the tools (", absl::StrJoin(request->tool_names, ", "), ")"),
                      ""};
    return std::nullopt;
  }
  return request;
}

}  // namespace dslaunch::runtime
