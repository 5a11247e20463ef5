#include "runtime/parallel/parallel_state.h"

#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/comm/flight_recorder.h"
#include "runtime/testing/rank_group.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;
using testing::InProcessStore;

constexpr GroupKind kEveryKind[] = {GroupKind::kWorld,         GroupKind::kData,   GroupKind::kTensor,
                                    GroupKind::kPipeline,      GroupKind::kModelParallel,
                                    GroupKind::kExpert,        GroupKind::kExpertData};

// Runs body(rank, state) on `world` threads, each with its own Gloo
// communicators built through the store.
void RunParallelRanks(InProcessStore& store, int attempt, int world, const ParallelSizes& sizes,
                      const std::function<void(int, const ParallelState&, const FlightRecorder&)>& body) {
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      StoreClient client = store.Client(attempt);
      FlightRecorder recorder;
      auto state = ParallelState::Create(
          world, rank, sizes,
          [&client](const GroupSpec& spec) { return CreateCommunicator(CommBackend::kGloo, client, spec); },
          &recorder);
      ASSERT_TRUE(state.ok()) << state.status();
      body(rank, **state, recorder);
    });
  }
  for (auto& thread : threads) thread.join();
}

Communicator* Of(const ParallelState& state, GroupKind kind) {
  switch (kind) {
    case GroupKind::kWorld: return state.world();
    case GroupKind::kData: return state.data();
    case GroupKind::kTensor: return state.tensor();
    case GroupKind::kPipeline: return state.pipeline();
    case GroupKind::kModelParallel: return state.model_parallel();
    case GroupKind::kExpert: return state.expert();
    case GroupKind::kExpertData: return state.expert_data();
  }
  return nullptr;
}

// Every group's all-reduce sums exactly its members' contributions: rank r
// gives 1 << r, so the sum is the bit set of the members who took part.
void ExpectEveryGroupSumsItsMembers(int world, const ParallelSizes& sizes, int attempt) {
  InProcessStore store;
  RunParallelRanks(store, attempt, world, sizes, [&](int rank, const ParallelState& state, const FlightRecorder&) {
    for (GroupKind kind : kEveryKind) {
      const PlannedGroup& group = state.group(kind);
      int64_t expected = 0;
      for (int member : group.members) expected |= int64_t{1} << member;
      torch::Tensor value = torch::full({3}, static_cast<double>(int64_t{1} << rank), torch::kFloat64);
      Communicator* comm = Of(state, kind);
      if (group.members.size() == 1) {
        EXPECT_EQ(comm, nullptr) << group.name;
      } else {
        ASSERT_NE(comm, nullptr) << group.name;
        EXPECT_EQ(comm->size(), static_cast<int>(group.members.size())) << group.name;
        ASSERT_TRUE(comm->AllReduce(value, ReduceOp::kSum).ok()) << group.name;
      }
      EXPECT_EQ(value[2].item<int64_t>(), expected) << "rank " << rank << " group " << group.name;
    }
  });
}

TEST(ParallelStateTest, WorldEightAsPipeTwoDataTwoModelTwoOnGloo) {
  InProcessStore store;
  RunParallelRanks(store, 0, 8, ParallelSizes{.tensor = 2, .pipeline = 2},
                   [](int rank, const ParallelState& state, const FlightRecorder&) {
                     const ProcessCoord coord = state.coordinate();
                     EXPECT_EQ(rank, (coord.pipe * 2 + coord.data) * 2 + coord.model);
                     // DeepSpeed's PipeModelDataParallelTopology(2, 2, 2) groups of this rank.
                     const std::vector<int> data = {rank % 2 + (rank / 4) * 4, rank % 2 + (rank / 4) * 4 + 2};
                     EXPECT_EQ(state.group(GroupKind::kData).members, data);
                     EXPECT_EQ(state.group(GroupKind::kTensor).members,
                               (std::vector<int>{rank / 2 * 2, rank / 2 * 2 + 1}));
                     EXPECT_EQ(state.group(GroupKind::kPipeline).members, (std::vector<int>{rank % 4, rank % 4 + 4}));
                     const int d = coord.data;
                     EXPECT_EQ(state.group(GroupKind::kModelParallel).members,
                               (std::vector<int>{2 * d, 2 * d + 1, 2 * d + 4, 2 * d + 5}));
                     EXPECT_NE(state.data(), state.world());
                   });
  ExpectEveryGroupSumsItsMembers(8, ParallelSizes{.tensor = 2, .pipeline = 2}, 1);
}

TEST(ParallelStateTest, ExpertGroupsReduceOverTheirMembers) {
  ExpectEveryGroupSumsItsMembers(8, ParallelSizes{.tensor = 2, .expert = 2}, 0);
}

TEST(ParallelStateTest, DataParallelAloneSharesTheWorldsCommunicator) {
  InProcessStore store;
  RunParallelRanks(store, 0, 4, ParallelSizes{}, [](int, const ParallelState& state, const FlightRecorder& recorder) {
    ASSERT_NE(state.world(), nullptr);
    EXPECT_EQ(state.data(), state.world());
    EXPECT_EQ(state.tensor(), nullptr);
    EXPECT_EQ(state.pipeline(), nullptr);
    EXPECT_EQ(state.model_parallel(), nullptr);
    torch::Tensor x = torch::ones({2});
    ASSERT_TRUE(state.data()->AllReduce(x, ReduceOp::kSum).ok());
    EXPECT_EQ(x[0].item<float>(), 4.0f);
    // The flight recorder saw the call, under the world's name.
    google::protobuf::RepeatedPtrField<CollectiveRecord> calls;
    recorder.Snapshot(&calls);
    ASSERT_EQ(calls.size(), 1);
    EXPECT_EQ(calls[0].group(), "world");
    EXPECT_EQ(calls[0].op(), "all_reduce");
    EXPECT_TRUE(calls[0].completed());
  });
}

TEST(ParallelStateTest, RecordsEachGroupByName) {
  InProcessStore store;
  RunParallelRanks(store, 0, 4, ParallelSizes{.tensor = 2},
                   [](int rank, const ParallelState& state, const FlightRecorder& recorder) {
                     torch::Tensor x = torch::ones({2});
                     ASSERT_TRUE(state.tensor()->AllReduce(x, ReduceOp::kSum).ok());
                     ASSERT_TRUE(state.data()->AllReduce(x, ReduceOp::kSum).ok());
                     ASSERT_TRUE(state.tensor()->AllReduce(x, ReduceOp::kSum).ok());
                     google::protobuf::RepeatedPtrField<CollectiveRecord> calls;
                     recorder.Snapshot(&calls);
                     ASSERT_EQ(calls.size(), 3);
                     EXPECT_EQ(calls[0].group(), absl::StrCat("tensor.", rank / 2));
                     EXPECT_EQ(calls[1].group(), absl::StrCat("data.", rank % 2));
                     EXPECT_EQ(calls[2].group(), calls[0].group());
                     // Note [Per-group collective numbers]: each group counts its own calls.
                     EXPECT_EQ(calls[0].seq(), 1);
                     EXPECT_EQ(calls[1].seq(), 1);
                     EXPECT_EQ(calls[2].seq(), 2);
                     for (const auto& call : calls) EXPECT_TRUE(call.completed());
                   });
}

TEST(ParallelStateTest, RefusesSizesThatDoNotDivideTheWorld) {
  auto state = ParallelState::Create(6, 0, ParallelSizes{.tensor = 4},
                                     [](const GroupSpec&) -> absl::StatusOr<std::unique_ptr<Communicator>> {
                                       return absl::InternalError("never called");
                                     },
                                     nullptr);
  ASSERT_FALSE(state.ok());
  EXPECT_EQ(state.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ParallelStateTest, NamesTheGroupThatFailed) {
  auto state = ParallelState::Create(4, 1, ParallelSizes{.tensor = 2},
                                     [](const GroupSpec& spec) -> absl::StatusOr<std::unique_ptr<Communicator>> {
                                       return absl::UnavailableError(absl::StrCat("no peers for ", spec.name));
                                     },
                                     nullptr);
  ASSERT_FALSE(state.ok());
  EXPECT_EQ(state.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(state.status().message(), HasSubstr("process group world: no peers for world"));
}

TEST(ParallelStateTest, DataParallelOnlyWrapsACommunicatorOrNothing) {
  auto single = ParallelState::DataParallelOnly(nullptr);
  EXPECT_EQ(single->world_size(), 1);
  EXPECT_EQ(single->data(), nullptr);
  EXPECT_EQ(single->world(), nullptr);
  InProcessStore store;
  store.RunRanks(2, [](int rank, Communicator& comm) {
    auto state = ParallelState::DataParallelOnly(&comm);
    EXPECT_EQ(state->rank(), rank);
    EXPECT_EQ(state->world_size(), 2);
    EXPECT_EQ(state->data(), &comm);
    EXPECT_EQ(state->world(), &comm);
    EXPECT_EQ(state->tensor(), nullptr);
  });
}

}  // namespace
}  // namespace dslaunch::runtime
