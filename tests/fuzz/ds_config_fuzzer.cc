// libFuzzer target: a DeepSpeed ds_config.json through LoadDsConfig
// (runtime/config/config_loader.h): every key walked, batch sizes resolved,
// "auto" resolved. Every input is a config or an error.
#include <cstddef>
#include <cstdint>

#include "runtime/config/config_loader.h"
#include "tests/fuzz/fuzz_input_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = dslaunch::fuzz::WriteInputFile(data, size, ".json");
  for (int world : {1, 3, 8}) {
    dslaunch::runtime::WorldShape shape;
    shape.world_size = world;
    std::vector<std::string> not_yet_supported, without_effect;
    auto config = dslaunch::runtime::LoadDsConfig(path, {}, shape, &not_yet_supported, &without_effect);
    if (config.ok()) (void)dslaunch::runtime::DescribeDsConfig(*config);
  }
  return 0;
}
