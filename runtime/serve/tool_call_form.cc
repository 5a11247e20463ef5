// Note [Required tool calls].
#include "runtime/serve/tool_call_form.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/json_quote.h"
#include "runtime/generate/json_schema.h"

namespace dslaunch::runtime {
namespace {

// A tool's parameters schema moves into the call form's schema as the
// definition `tool` ("t0", "t1", ...), its own definitions beside it as
// "t0$NAME" ($defs) and "t0#NAME" (definitions, which may reuse a name):
// its refs are rewritten to match ("#" is the definition itself).
std::string DefinitionName(const std::string& tool, const std::string& word) {
  return tool + (word == "$defs" ? "$" : "#");
}

std::string RewrittenRef(const std::string& ref, const std::string& tool) {
  if (ref == "#") return "#/$defs/" + tool;
  for (const char* word : {"$defs", "definitions"}) {
    const std::string prefix = absl::StrCat("#/", word, "/");
    if (ref.rfind(prefix, 0) == 0) return absl::StrCat("#/$defs/", DefinitionName(tool, word), ref.substr(prefix.size()));
  }
  return ref;  // the compiler refuses it, naming it
}

// Keywords whose values are data, not schemas: copied as they are.
bool HoldsData(const std::string& key) {
  return key == "const" || key == "enum" || key == "default" || key == "examples";
}

void AppendRewritten(const JsonValue& value, const std::string& tool, bool root, std::string* out) {
  if (!value.is_object() && !value.is_array()) {
    out->append(SerializeJson(value));
    return;
  }
  const bool object = value.is_object();
  out->push_back(object ? '{' : '[');
  bool first = true;
  for (size_t i = 0; i < value.items().size(); ++i) {
    if (object && root && (value.keys()[i] == "$defs" || value.keys()[i] == "definitions")) continue;
    if (!first) out->push_back(',');
    first = false;
    if (object) absl::StrAppend(out, JsonQuote(value.keys()[i]), ":");
    if (object && value.keys()[i] == "$ref" && value.items()[i].is_string()) {
      out->append(JsonQuote(RewrittenRef(value.items()[i].string_value(), tool)));
    } else if (object && HoldsData(value.keys()[i])) {
      out->append(SerializeJson(value.items()[i]));
    } else {
      AppendRewritten(value.items()[i], tool, false, out);
    }
  }
  out->push_back(object ? '}' : ']');
}

}  // namespace

namespace {

// The call form; `strict_only`: the arguments of a tool that is not strict
// are any object. Errors name `field`.
absl::StatusOr<OutputConstraint> CallForm(ToolCallFormat format, const JsonValue& tools,
                                          const std::vector<std::string>& callable, bool strict_only,
                                          const std::string& field) {
  const std::string arguments_key = format == ToolCallFormat::kHermes ? "arguments" : "parameters";
  std::vector<std::string> forms;
  std::string definitions;  // "t0": ..., "t0.NAME": ...
  for (size_t i = 0; i < tools.items().size(); ++i) {
    const JsonValue* function = tools.items()[i].Find("function");
    const JsonValue* name = function != nullptr ? function->Find("name") : nullptr;
    if (name == nullptr || !name->is_string()) {
      return absl::InvalidArgumentError(absl::StrCat("tools[", i, "].function: no name"));
    }
    if (std::find(callable.begin(), callable.end(), name->string_value()) == callable.end()) continue;
    const JsonValue* parameters = function->Find("parameters");
    const JsonValue* strict = function->Find("strict");
    const bool held = !strict_only || (strict != nullptr && strict->is_bool() && strict->bool_value());
    std::string arguments = R"({"type":"object","additionalProperties":false})";
    if (!held) {
      arguments = R"({"type":"object"})";  // OpenAI's strict false: the model's best effort
    } else if (parameters != nullptr && !parameters->is_null()) {
      const std::string field = absl::StrCat("tools[", i, "].function.parameters");
      // The arguments are an object (the parser reads nothing else): a
      // schema that says no type and is no reference, alternative or
      // value list is one ({} included).
      bool typed = false;
      for (const char* word : {"type", "$ref", "anyOf", "oneOf", "allOf", "enum", "const"}) {
        typed = typed || parameters->Find(word) != nullptr;
      }
      auto as_object = [typed](std::string text) {
        if (typed || text.size() < 2 || text[0] != '{') return text;
        return absl::StrCat(R"({"type":"object")", text.size() > 2 ? "," : "", text.substr(1));
      };
      // Checked alone first, so that an error names the tool.
      auto compiled = CompileJsonSchemaText(as_object(SerializeJson(*parameters)), field);
      if (!compiled.ok()) return compiled.status();
      const SchemaNode& root = (*compiled)->node((*compiled)->root());
      if (root.is_union || root.has_enum || root.types != kJsonObjectBit) {
        return absl::InvalidArgumentError(absl::StrCat(
            field, ": the arguments of a call are a JSON object, and this schema allows other values: give it "
                   "\"type\": \"object\""));
      }
      const std::string tool = absl::StrCat("t", i);
      std::string rewritten;
      AppendRewritten(*parameters, tool, /*root=*/true, &rewritten);
      absl::StrAppend(&definitions, definitions.empty() ? "" : ",", JsonQuote(tool), ":", as_object(rewritten));
      for (const char* word : {"$defs", "definitions"}) {
        const JsonValue* own = parameters->Find(word);
        if (own == nullptr || !own->is_object()) continue;
        for (size_t d = 0; d < own->keys().size(); ++d) {
          absl::StrAppend(&definitions, ",", JsonQuote(DefinitionName(tool, word) + own->keys()[d]), ":");
          AppendRewritten(own->items()[d], tool, /*root=*/false, &definitions);
        }
      }
      arguments = absl::StrCat(R"({"$ref":)", JsonQuote("#/$defs/" + tool), "}");
    }
    forms.push_back(absl::StrCat(R"({"type":"object","properties":{"name":{"const":)", JsonQuote(name->string_value()),
                                 "},", JsonQuote(arguments_key), ":", arguments, R"(},"required":["name",)",
                                 JsonQuote(arguments_key), R"(],"additionalProperties":false})"));
  }
  if (forms.empty()) return absl::InvalidArgumentError(field + ": no tool to call");
  OutputConstraint constraint;
  constraint.kind = OutputConstraint::Kind::kJsonSchema;
  constraint.schema = absl::StrCat("{", definitions.empty() ? "" : absl::StrCat(R"("$defs":{)", definitions, "},"),
                                   R"("anyOf":[)");
  for (size_t k = 0; k < forms.size(); ++k) absl::StrAppend(&constraint.schema, k ? "," : "", forms[k]);
  constraint.schema += "]}";
  if (format == ToolCallFormat::kHermes) {
    constraint.before = "<tool_call>\n";
    constraint.after = "\n</tool_call>";
  }
  auto whole = CompileJsonSchemaText(constraint.schema, field);
  if (!whole.ok()) return whole.status();
  return constraint;
}

}  // namespace

absl::StatusOr<OutputConstraint> ToolCallConstraint(ToolCallFormat format, const JsonValue& tools,
                                                    const std::vector<std::string>& callable) {
  return CallForm(format, tools, callable, /*strict_only=*/false, "tool_choice");
}

absl::StatusOr<OutputConstraint> ToolCallsInTextConstraint(ToolCallFormat format, const JsonValue& tools,
                                                           const std::vector<std::string>& callable) {
  auto call = CallForm(format, tools, callable, /*strict_only=*/true, "tools");
  if (!call.ok()) return call.status();
  if (format == ToolCallFormat::kLlama3Json) {
    // Note [JSON or text]: the answer is a call when it begins with '{'.
    call->or_text = true;
    return call;
  }
  return OutputConstraint::StructuralTag({{call->before, call->schema, call->after}}, {"<tool_call>"});
}

}  // namespace dslaunch::runtime
