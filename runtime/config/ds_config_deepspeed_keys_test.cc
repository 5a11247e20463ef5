// The ds_config schema against DeepSpeed's own key list
// (tests/config/deepspeed_0_19_keys.txt): every key DeepSpeed reads is known
// here and says what it means here (Note [Keys without effect here]).
#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/config/config_loader.h"
#include "runtime/config/config_test_util.h"
#include "runtime/config/ds_config_schema.h"

namespace dslaunch::runtime {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

std::vector<std::string> DeepSpeedKeys() {
  std::ifstream in(std::string(DSLAUNCH_SOURCE_DIR) + "/tests/config/deepspeed_0_19_keys.txt");
  std::vector<std::string> keys;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    keys.emplace_back(absl::StripAsciiWhitespace(line.substr(0, line.find('#'))));
  }
  return keys;
}

TEST(DeepSpeedKeys, EveryKeyDeepSpeedReadsIsKnownHere) {
  const std::vector<std::string> keys = DeepSpeedKeys();
  ASSERT_GT(keys.size(), 350u) << "the key list did not load";
  DsConfig config;
  // An empty scheduler type lists every schedule's parameters.
  const std::vector<config_internal::KeySpec> specs = config_internal::DsConfigKeys(&config, "");
  const std::vector<std::string> open = config_internal::DsConfigOpenSections();
  auto under = [](const std::string& path, const std::string& section) {
    return path == section || absl::StartsWith(path, section + ".");
  };
  std::vector<std::string> unknown;
  for (const std::string& key : keys) {
    const bool block = absl::EndsWith(key, ".*");
    const std::string path = block ? key.substr(0, key.size() - 2) : key;
    bool known = std::any_of(open.begin(), open.end(), [&](const std::string& s) { return under(path, s); });
    for (const config_internal::KeySpec& spec : specs) {
      // A listed key; a key inside a block taken whole (kAny); for a block,
      // a section the table lists keys of.
      if (spec.path == path || (spec.kind == config_internal::ValueKind::kAny && under(path, spec.path)) ||
          (block && absl::StartsWith(spec.path, path + "."))) {
        known = true;
      }
    }
    if (!known) unknown.push_back(key);
  }
  EXPECT_THAT(unknown, IsEmpty()) << "DeepSpeed reads these ds_config keys; dslaunch calls them unknown";
}

class DeepSpeedFeaturesTest : public ConfigFileTest {};

// Keys of features not built here: a switch that turns one on is refused, a
// speed knob warned about, a parameter of a feature left off says nothing.
TEST_F(DeepSpeedFeaturesTest, FeaturesNotBuiltAreRefusedWhenTurnedOn) {
  const std::string path = Write("ds.json", R"({"train_batch_size": 8,
      "gradient_allreduce_op": "SUM",
      "comms_logger": {"enabled": false, "verbose": true, "prof_ops": ["all_reduce"]},
      "elasticity": {"enabled": true, "max_train_batch_size": 64},
      "timers": {"throughput": {"enabled": false}},
      "compression_training": {"weight_quantization": {"shared_parameters": {"enabled": true, "quantizer_kernel": false}},
                               "sparse_pruning": {"shared_parameters": {"enabled": false}}},
      "zero_optimization": {"stage": 2, "zenflow": {"topk_ratio": 0.1}},
      "data_efficiency": {"enabled": false, "data_sampling": {"num_workers": 2}}})");
  std::vector<std::string> refused, warned;
  auto config = LoadDsConfig(path, {}, WorldShape{1}, &refused, &warned);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_THAT(refused, UnorderedElementsAre(
                           HasSubstr("gradient_allreduce_op=SUM: summing gradients"),
                           HasSubstr("elasticity.enabled=true: DeepSpeed elasticity"),
                           HasSubstr("compression_training.weight_quantization.shared_parameters.enabled=true: "
                                     "DeepSpeed's compression training"),
                           HasSubstr("zero_optimization.zenflow=...: ZenFlow")));
  EXPECT_THAT(warned, UnorderedElementsAre(AllOf(HasSubstr("timers.throughput.enabled=false has no effect here"),
                                                 HasSubstr("tokens/s"))));
}

}  // namespace
}  // namespace dslaunch::runtime
