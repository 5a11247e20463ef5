// Note [Shard-only loading] at the partition: parameters built without
// values are filled where they are kept. Each rank reads exactly its own
// pieces (no element twice, none missed), never holds more than one unit
// whole while it builds them, and every unit gathers to the source's
// values, the persistent ones (gathered at once from every rank's pieces)
// included. Deferred parameters need stage 3 and a source.
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/model/deferred_parameters.h"
#include "runtime/testing/rank_group.h"
#include "runtime/zero/zero_partition.h"

namespace dslaunch::runtime {
namespace {

using testing::InProcessStore;

// Three parameters in two units: [a (3x5), b (7)] and [c (6x5)]; unit 0
// (22 elements) is persistent (below the threshold), unit 1 (30) is not.
const std::vector<std::vector<int64_t>> kShapes = {{3, 5}, {7}, {6, 5}};

torch::Tensor ValueOf(size_t parameter) {
  const std::vector<int64_t>& shape = kShapes[parameter];
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return (torch::arange(n, torch::kFloat) + 100.0 * static_cast<double>(parameter + 1)).view(shape);
}

ZeroOptions StageThree() {
  ZeroOptions options;
  options.stage = 3;
  options.units = {ParameterUnit{0, 2, /*layer=*/false}, ParameterUnit{2, 1, /*layer=*/true}};
  options.persistence_threshold = 23;
  return options;
}

TEST(DeferredPartitionTest, EachRankReadsItsPiecesAndEveryUnitGathersTheSourcesValues) {
  for (int world : {1, 2, 3}) {
    InProcessStore store;
    std::mutex mutex;
    std::map<size_t, std::vector<int64_t>> reads;  // parameter -> how often each element was read
    for (size_t i = 0; i < kShapes.size(); ++i) reads[i] = std::vector<int64_t>(ValueOf(i).numel(), 0);
    store.RunRanks(world, [&](int rank, Communicator& comm) {
      std::vector<torch::Tensor> params;
      for (size_t i = 0; i < kShapes.size(); ++i) params.push_back(DeferredTensor(kShapes[i], torch::kFloat));
      DeferredValues values;
      values.read = [&](size_t parameter, int64_t offset, torch::Tensor out) {
        out.copy_(ValueOf(parameter).reshape({-1}).narrow(0, offset, out.numel()));
        std::lock_guard<std::mutex> lock(mutex);
        for (int64_t k = 0; k < out.numel(); ++k) ++reads[parameter][offset + k];
        return absl::OkStatus();
      };
      auto zero = ZeroPartition::Create(StageThree(), params, world > 1 ? &comm : nullptr, &values);
      ASSERT_TRUE(zero.ok()) << zero.status();
      ZeroPartition& partition = **zero;
      // At most one unit was whole at a time while building, and the
      // persistent unit stays whole.
      const int64_t persistent = partition.UnitElements(0);
      EXPECT_EQ(partition.PeakLiveElements(), std::max(persistent, partition.UnitElements(1)))
          << "world " << world << ", rank " << rank;
      EXPECT_EQ(partition.LiveElements(), persistent);
      EXPECT_EQ(params[2].storage().nbytes(), 0u);
      // The persistent unit is whole already, the layer once gathered.
      for (size_t i = 0; i < 2; ++i) EXPECT_TRUE(torch::equal(params[i], ValueOf(i))) << "parameter " << i;
      ASSERT_TRUE(partition.GatherUnit(1).ok());
      EXPECT_TRUE(torch::equal(params[2], ValueOf(2)));
      partition.ReleaseUnit(1);
      // The master shard holds this rank's pieces of the same values.
      torch::Tensor flat = torch::cat({ValueOf(0).reshape({-1}), ValueOf(1).reshape({-1})});
      const int64_t piece0 = partition.UnitElements(0) / world;
      torch::Tensor padded0 = torch::cat({flat, torch::zeros({piece0 * world - flat.numel()})});
      EXPECT_TRUE(torch::equal(partition.master_shard().detach().narrow(0, 0, piece0), padded0.narrow(0, rank * piece0, piece0)));
    });
    for (const auto& [parameter, counts] : reads) {
      for (size_t k = 0; k < counts.size(); ++k) {
        EXPECT_EQ(counts[k], 1) << "world " << world << ": element " << k << " of parameter " << parameter;
      }
    }
  }
}

// A rank whose source fails (a truncated shard on its host) must not leave
// the others in the persistent units' gather: every rank stops, the failing
// one with its source's error, the others saying another rank failed.
TEST(DeferredPartitionTest, ARankWhoseReadFailsStopsEveryRankInsteadOfLeavingThemInTheGather) {
  for (int failing : {0, 1}) {
    InProcessStore store;
    std::vector<absl::Status> results(2);
    store.RunRanks(2, [&](int rank, Communicator& comm) {
      std::vector<torch::Tensor> params;
      for (size_t i = 0; i < kShapes.size(); ++i) params.push_back(DeferredTensor(kShapes[i], torch::kFloat));
      DeferredValues values;
      values.read = [&](size_t parameter, int64_t offset, torch::Tensor out) {
        if (rank == failing && parameter == 2) return absl::DataLossError("model-00002.safetensors: truncated");
        out.copy_(ValueOf(parameter).reshape({-1}).narrow(0, offset, out.numel()));
        return absl::OkStatus();
      };
      results[rank] = ZeroPartition::Create(StageThree(), params, &comm, &values).status();
    });
    EXPECT_EQ(results[failing], absl::DataLossError("model-00002.safetensors: truncated"));
    const absl::Status& other = results[1 - failing];
    EXPECT_EQ(other.code(), absl::StatusCode::kAborted) << other;
    EXPECT_NE(std::string(other.message()).find("another rank of the data-parallel group could not build"),
              std::string::npos)
        << other;
  }
}

TEST(DeferredPartitionTest, DeferredParametersNeedStageThreeAndASource) {
  std::vector<torch::Tensor> params = {torch::ones({4}), DeferredTensor({6}, torch::kFloat)};
  DeferredValues values;
  values.read = [](size_t, int64_t, torch::Tensor out) {
    out.fill_(1);
    return absl::OkStatus();
  };
  ZeroOptions stage2;
  stage2.stage = 2;
  auto refused = ZeroPartition::Create(stage2, params, nullptr, &values);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(std::string(refused.status().message()).find("trainable parameter 1 is deferred"), std::string::npos)
      << refused.status();
  ZeroOptions stage3;
  stage3.stage = 3;
  auto without_source = ZeroPartition::Create(stage3, params, nullptr);
  ASSERT_FALSE(without_source.ok());
  EXPECT_NE(std::string(without_source.status().message()).find("without a source"), std::string::npos)
      << without_source.status();
  // A source's error is the partition's.
  values.read = [](size_t, int64_t, torch::Tensor) { return absl::DataLossError("model.safetensors: truncated"); };
  auto failed = ZeroPartition::Create(stage3, params, nullptr, &values);
  EXPECT_EQ(failed.status(), absl::DataLossError("model.safetensors: truncated"));
}

}  // namespace
}  // namespace dslaunch::runtime
