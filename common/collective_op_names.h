// The names of the collectives, as the runtime's flight recorder and comms
// logger record them (runtime/comm/flight_recorder.h) and as a ds_config's
// comms_logger.prof_ops may write them (DeepSpeed's deepspeed.comm names
// included). Plain C++, for the config layer and the communicators alike.
#pragma once

#include <map>
#include <string>

namespace dslaunch {

// This runtime's name for an op as DeepSpeed or this runtime spells it
// ("all_gather_into_tensor" → "all_gather"); "" when it names no collective.
inline std::string CanonicalCollectiveName(const std::string& name) {
  static const std::map<std::string, std::string>* const kNames = new std::map<std::string, std::string>{
      {"all_reduce", "all_reduce"},
      {"all_reduce_coalesced", "all_reduce"},
      {"inference_all_reduce", "all_reduce"},
      {"all_gather", "all_gather"},
      {"all_gather_into_tensor", "all_gather"},
      {"reduce_scatter", "reduce_scatter"},
      {"reduce_scatter_tensor", "reduce_scatter"},
      {"all_to_all", "all_to_all"},
      {"all_to_all_single", "all_to_all"},
      {"broadcast", "broadcast"},
      {"send", "send"},
      {"isend", "send"},
      {"recv", "recv"},
      {"irecv", "recv"},
      {"send_recv", "send_recv"},
      {"barrier", "barrier"},
  };
  auto it = kNames->find(name);
  return it == kNames->end() ? "" : it->second;
}

}  // namespace dslaunch
