// From the text of a job file, a ds_config or an --override value to one YAML
// tree, refusing what yaml-cpp would accept silently or report badly.
//
// Note [One config document]
// yaml-cpp reads JSON as YAML's flow syntax, which is laxer than JSON, and
// YAML::Load keeps the first document of a stream. So before the tree is
// built, the text is checked for:
//  - a second YAML document ("---" after the first): its keys would be
//    dropped without a word;
//  - in a .json file, a comma before '}' or ']': YAML flow collections allow
//    it, JSON does not (a deleted last entry often leaves one);
//  - nesting deeper than kMaxConfigNestingDepth: yaml-cpp's own guard stops
//    near 500-1000 levels with the message "bad file" and no useful place.
// Each is an InvalidArgument error naming the origin and line (and column).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "yaml-cpp/yaml.h"

namespace dslaunch::runtime {

// Nested mappings and lists, the top-level mapping counting as 1. DeepSpeed's
// deepest key (zero_optimization.offload_optimizer.device) is at 3.
inline constexpr int kMaxConfigNestingDepth = 64;

enum class ConfigSyntax {
  kYaml,  // job files, .yaml ds_configs, --override values
  kJson,  // .json ds_configs: also no trailing commas
};

// Parses `text`; `origin` names it in messages ("ds_config.json",
// "--override 'train.steps=2'"), followed by ":LINE:COLUMN".
absl::StatusOr<YAML::Node> ParseConfigDocument(const std::string& text, const std::string& origin,
                                               ConfigSyntax syntax);

// The syntax of a config file, from its name (".json": JSON).
ConfigSyntax ConfigSyntaxOf(const std::string& path);

}  // namespace dslaunch::runtime
