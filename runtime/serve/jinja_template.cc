#include "runtime/serve/jinja_template.h"

#include <utility>

#include "runtime/serve/jinja_syntax.h"

namespace dslaunch::runtime {

absl::StatusOr<JinjaTemplate> JinjaTemplate::Parse(absl::string_view source, std::string origin) {
  auto root = jinja_syntax::ParseTemplate(source, origin);
  if (!root.ok()) return root.status();
  return JinjaTemplate(*root, std::move(origin));
}

absl::StatusOr<std::string> JinjaTemplate::Render(const JinjaValue::Dict& variables) const {
  return jinja_syntax::RenderTemplate(*root_, origin_, variables);
}

}  // namespace dslaunch::runtime
