// The process grid of a job: which global rank holds which pipeline stage,
// data-parallel replica and tensor (model) slice. The same mapping as
// DeepSpeed's PipeModelDataParallelTopology (deepspeed/runtime/pipe/topology.py),
// so a rank computes the same groups, in the same order, as a DeepSpeed rank.
//
// Note [Topology layout]
// Axes in the order (pipe, data, model), row-major, model fastest-varying:
//
//   rank = (pipe * data_size + data) * model_size + model
//
// Tensor-parallel peers get adjacent ranks (one node, fast links); pipeline
// stages are the farthest apart (point-to-point traffic only). Example,
// pipe=2 data=2 model=2:
//
//   rank : 0 1 2 3 4 5 6 7
//   pipe : 0 0 0 0 1 1 1 1
//   data : 0 0 1 1 0 0 1 1
//   model: 0 1 0 1 0 1 0 1
//
// Groups along an axis hold the ranks whose other two coordinates agree. They
// are listed as DeepSpeed's get_axis_comm_lists(axis) lists them: ordered by the
// other coordinates in axis order (row-major), each group by its own axis
// index, which also makes every group sorted ascending.
//
// Pure value type; thread-safe for concurrent const use.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dslaunch::runtime {

enum class Axis { kPipe, kData, kModel };

// "pipe", "data", "model" (DeepSpeed's axis names).
const char* AxisName(Axis axis);

struct ProcessCoord {
  int pipe = 0;
  int data = 0;
  int model = 0;
  bool operator==(const ProcessCoord&) const = default;
};

class ProcessTopology {
 public:
  // pipe, data and model sizes; each must be positive (InvalidArgument naming
  // the axis and value otherwise).
  static absl::StatusOr<ProcessTopology> Create(int pipe, int data, int model);

  // The grid for `world_size` ranks with `tp_size` tensor-parallel and
  // `pp_size` pipeline-parallel ranks: data = world_size / (tp_size * pp_size).
  // An error when a size is not positive or world_size is not a multiple of
  // tp_size * pp_size (naming all three numbers).
  static absl::StatusOr<ProcessTopology> FromWorld(int world_size, int tp_size, int pp_size);

  int pipe_size() const { return pipe_; }
  int data_size() const { return data_; }
  int model_size() const { return model_; }
  int world_size() const { return pipe_ * data_ * model_; }
  int size(Axis axis) const;

  bool ContainsRank(int rank) const { return rank >= 0 && rank < world_size(); }
  bool ContainsCoord(const ProcessCoord& coord) const;

  // REQUIRES: ContainsRank(rank).
  ProcessCoord Coordinate(int rank) const;
  // REQUIRES: ContainsCoord(coord).
  int RankOf(const ProcessCoord& coord) const;

  // All groups along one axis, as get_axis_comm_lists(axis) returns them.
  std::vector<std::vector<int>> Groups(Axis axis) const;
  // Gradient all-reduce groups: same (pipe, model), data varies.
  std::vector<std::vector<int>> DataParallelGroups() const { return Groups(Axis::kData); }
  // Tensor-slicing groups: same (pipe, data), model varies. DeepSpeed's grid
  // calls these the "slice parallel" groups (get_slice_parallel_group).
  std::vector<std::vector<int>> ModelParallelGroups() const { return Groups(Axis::kModel); }
  // Pipelines: same (data, model), pipe varies (stage order).
  std::vector<std::vector<int>> PipelineGroups() const { return Groups(Axis::kPipe); }

  // Every rank of one data-parallel replica (all stages and tensor slices with
  // the same data index), one group per data index in order. This is what
  // DeepSpeed's PipelineParallelGrid returns from get_model_parallel_group()
  // (its ds_model_proc_group, used for overflow checks and the gradient norm):
  // sorted(get_axis_list('data', d)).
  std::vector<std::vector<int>> ModelPipeGroups() const;

  // The group along `axis` that contains `rank`. REQUIRES: ContainsRank(rank).
  std::vector<int> GroupOf(int rank, Axis axis) const;
  // Position of `rank` in GroupOf(rank, axis), which is its coordinate on
  // `axis` (groups are ordered by that coordinate). REQUIRES: ContainsRank(rank).
  int IndexInGroup(int rank, Axis axis) const;
  // The ModelPipeGroups() entry holding `rank`. REQUIRES: ContainsRank(rank).
  std::vector<int> ModelPipeGroupOf(int rank) const;

  // "pipe=2 data=2 model=2".
  std::string ToString() const;

 private:
  ProcessTopology(int pipe, int data, int model) : pipe_(pipe), data_(data), model_(model) {}

  int pipe_;
  int data_;
  int model_;
};

}  // namespace dslaunch::runtime
