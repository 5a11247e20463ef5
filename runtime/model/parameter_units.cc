#include "runtime/model/parameter_units.h"

namespace dslaunch::runtime {
namespace {

std::vector<ParameterUnit> Side(const std::vector<ParameterUnit>& units, bool frozen, std::vector<int>* index) {
  std::vector<ParameterUnit> side;
  if (index != nullptr) index->assign(units.size(), -1);
  for (size_t u = 0; u < units.size(); ++u) {
    const ParameterUnit& unit = units[u];
    const int64_t count = frozen ? unit.frozen_count : unit.parameter_count;
    if (count == 0) continue;
    if (index != nullptr) (*index)[u] = static_cast<int>(side.size());
    side.push_back(ParameterUnit{frozen ? unit.first_frozen : unit.first_parameter, count, unit.layer});
  }
  return side;
}

}  // namespace

int ParameterUnitList::Add(std::initializer_list<const torch::nn::Module*> modules, bool layer) {
  int64_t trainable = 0, frozen = 0;
  for (const torch::nn::Module* module : modules) {
    if (module == nullptr) continue;
    for (const auto& p : module->parameters()) ++(p.requires_grad() ? trainable : frozen);
  }
  if (trainable == 0 && frozen == 0) return -1;
  units_.push_back(ParameterUnit{next_trainable_, trainable, layer, next_frozen_, frozen});
  next_trainable_ += trainable;
  next_frozen_ += frozen;
  return static_cast<int>(units_.size()) - 1;
}

std::vector<ParameterUnit> TrainableSide(const std::vector<ParameterUnit>& units, std::vector<int>* index) {
  return Side(units, /*frozen=*/false, index);
}

std::vector<ParameterUnit> FrozenSide(const std::vector<ParameterUnit>& units, std::vector<int>* index) {
  return Side(units, /*frozen=*/true, index);
}

std::map<std::string, int> UnitOfEachParameter(const torch::nn::Module& module, const std::vector<ParameterUnit>& units) {
  std::map<std::string, int> unit_of;
  int64_t trainable = 0, frozen = 0;
  for (const auto& item : module.named_parameters()) {
    const bool trains = item.value().requires_grad();
    const int64_t index = trains ? trainable++ : frozen++;
    for (size_t u = 0; u < units.size(); ++u) {
      const int64_t first = trains ? units[u].first_parameter : units[u].first_frozen;
      const int64_t count = trains ? units[u].parameter_count : units[u].frozen_count;
      if (index >= first && index < first + count) {
        unit_of[item.key()] = static_cast<int>(u);
        break;
      }
    }
  }
  return unit_of;
}

}  // namespace dslaunch::runtime
