// Note [JSON schemas for constrained output].
#include "runtime/generate/json_schema.h"

#include <algorithm>
#include <map>

#include "absl/synchronization/mutex.h"
#include "runtime/generate/json_schema_compiler.h"

namespace dslaunch::runtime {

ByteTrie::ByteTrie() : nodes_(1) {}

void ByteTrie::Add(const std::string& text, int32_t value) {
  int32_t node = 0;
  auto note = [&](int32_t at) {
    auto& below = nodes_[static_cast<size_t>(at)].values_below;
    below.insert(std::upper_bound(below.begin(), below.end(), value), value);
  };
  note(0);
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    int32_t next = Child(node, byte);
    if (next < 0) {
      next = static_cast<int32_t>(nodes_.size());
      nodes_.emplace_back();
      auto& children = nodes_[static_cast<size_t>(node)].children;
      children.insert(std::upper_bound(children.begin(), children.end(), std::make_pair(byte, int32_t{-1})),
                      {byte, next});
    }
    node = next;
    note(node);
  }
  if (nodes_[static_cast<size_t>(node)].terminal < 0) nodes_[static_cast<size_t>(node)].terminal = value;
}

int32_t ByteTrie::Child(int32_t node, unsigned char byte) const {
  for (const auto& [b, child] : nodes_[static_cast<size_t>(node)].children) {
    if (b == byte) return child;
    if (b > byte) break;
  }
  return -1;
}

bool ByteTrie::HoldsBelow(int32_t node, int32_t low, int32_t high) const {
  const auto& below = nodes_[static_cast<size_t>(node)].values_below;
  auto it = std::lower_bound(below.begin(), below.end(), low);
  return it != below.end() && *it <= high;
}


absl::StatusOr<std::shared_ptr<const CompiledJsonSchema>> CompileJsonSchema(const JsonValue& schema,
                                                                           const std::string& field) {
  return JsonSchemaCompiler(schema, field).Compile();
}

absl::StatusOr<std::shared_ptr<const CompiledJsonSchema>> CompileJsonSchemaText(const std::string& text,
                                                                               const std::string& field) {
  // A request's schema is compiled where it is read and again on each rank
  // that runs it: the last ones compiled are kept by their text.
  static absl::Mutex mu(absl::kConstInit);
  static auto* recent = new std::map<std::string, std::shared_ptr<const CompiledJsonSchema>>();
  {
    absl::MutexLock lock(&mu);
    if (auto it = recent->find(text); it != recent->end()) return it->second;
  }
  auto schema = ParseJson(text, field);
  if (!schema.ok()) return absl::InvalidArgumentError(schema.status().message());
  auto compiled = CompileJsonSchema(*schema, field);
  if (!compiled.ok()) return compiled;
  absl::MutexLock lock(&mu);
  if (recent->size() >= kRecentCompiledSchemas) recent->clear();
  recent->emplace(text, *compiled);
  return compiled;
}

std::shared_ptr<const CompiledJsonSchema> AnyJsonObjectSchema() {
  static const std::shared_ptr<const CompiledJsonSchema> schema = [] {
    auto parsed = ParseJson(R"({"type":"object"})", "json_object");
    return *CompileJsonSchema(*parsed, "json_object");
  }();
  return schema;
}

}  // namespace dslaunch::runtime
