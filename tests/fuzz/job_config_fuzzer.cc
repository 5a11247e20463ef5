// libFuzzer target: a train.cfg job file (YAML, with its ds_config inline),
// through the same loader dslaunch --validate and dsrank use
// (runtime/config/config_loader.h). Every input is a config or an error.
#include <cstddef>
#include <cstdint>

#include "runtime/config/config_loader.h"
#include "tests/fuzz/fuzz_input_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = dslaunch::fuzz::WriteInputFile(data, size, ".cfg");
  for (int world : {1, 4}) {
    dslaunch::runtime::WorldShape shape;
    shape.world_size = world;
    auto job = dslaunch::runtime::LoadJobConfig(path, {}, shape);
    if (job.ok()) (void)dslaunch::runtime::DescribeJobConfig(*job);
  }
  return 0;
}
