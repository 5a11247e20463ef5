// Integer environment variables of the rank environment (RANK, WORLD_SIZE,
// LOCAL_RANK, DSLAUNCH_ATTEMPT; Note [Rank environment contract] in
// launcher/launch_plan.h): the value, or `fallback` when unset or not an
// integer.
#pragma once

#include <cstdlib>

#include "absl/strings/numbers.h"

namespace dslaunch {

inline int EnvInt(const char* name, int fallback) {
  const char* text = std::getenv(name);
  int value = fallback;
  if (text == nullptr || !absl::SimpleAtoi(text, &value)) return fallback;
  return value;
}

}  // namespace dslaunch
