// The ds_config keys of DeepSpeed features this runtime does not build
// (DeepSpeed 0.19: autotuning, elasticity, comet, ZenFlow, compression
// training, data efficiency, ...), so that each is a known key with its
// meaning here (Note [Keys without effect here], config_schema.h) instead of
// an "unknown key": a feature's switch is refused when it turns the feature
// on, its parameters are inert, and a speed knob is accepted with a warning.
// tests/config/deepspeed_0_19_keys.txt lists every key DeepSpeed reads; a
// test walks it. Internal to runtime/config.
#pragma once

#include <string>
#include <vector>

#include "runtime/config/config_schema.h"

namespace dslaunch::runtime::config_internal {

// Appends the keys (none of them stored).
void AddKeysOfFeaturesNotBuilt(std::vector<KeySpec>* keys);

// Sections whose contents DeepSpeed passes through unchecked, each with the
// feature it configures: any key under it is accepted, and any `enabled:
// true` at any depth under it is refused naming that feature.
struct OpenFeatureSection {
  std::string section;
  std::string feature;
};
const std::vector<OpenFeatureSection>& OpenSectionsOfFeaturesNotBuilt();

}  // namespace dslaunch::runtime::config_internal
