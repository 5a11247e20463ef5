#include "launcher/resource_selection.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dslaunch {
namespace {

using ::testing::HasSubstr;

// worker-0 and worker-2 have 8 slots, worker-1 has 4: enough to tell "first
// N hosts" from "all hosts" and to make --num_gpus 8 fail on one host.
Hostfile ThreeHosts() {
  Hostfile hostfile;
  hostfile.path = "hosts";
  hostfile.hosts = {{"worker-0", 8, 1}, {"worker-1", 4, 2}, {"worker-2", 8, 4}};
  return hostfile;
}

// The selection as (host, slots) pairs, which gtest prints readably.
std::vector<std::pair<std::string, std::vector<int>>> Pairs(
    const std::vector<HostSlots>& selection) {
  std::vector<std::pair<std::string, std::vector<int>>> pairs;
  for (const HostSlots& host : selection) pairs.emplace_back(host.host, host.slots);
  return pairs;
}

using Expected = std::vector<std::pair<std::string, std::vector<int>>>;

absl::StatusOr<Expected> Select(const ResourceRequest& request) {
  auto selection = SelectResources(ThreeHosts(), request);
  if (!selection.ok()) return selection.status();
  return Pairs(*selection);
}

ResourceRequest Include(std::string text) {
  ResourceRequest request;
  request.include = std::move(text);
  return request;
}

ResourceRequest Exclude(std::string text) {
  ResourceRequest request;
  request.exclude = std::move(text);
  return request;
}

TEST(ResourceSelection, NoRequestTakesEverySlotOfEveryHost) {
  auto selection = Select({});
  ASSERT_TRUE(selection.ok()) << selection.status();
  EXPECT_EQ(*selection, (Expected{{"worker-0", {0, 1, 2, 3, 4, 5, 6, 7}},
                                  {"worker-1", {0, 1, 2, 3}},
                                  {"worker-2", {0, 1, 2, 3, 4, 5, 6, 7}}}));
}

TEST(ResourceSelection, NumNodesTakesTheFirstHosts) {
  ResourceRequest request;
  request.num_nodes = 2;
  auto selection = Select(request);
  ASSERT_TRUE(selection.ok()) << selection.status();
  EXPECT_EQ(*selection,
            (Expected{{"worker-0", {0, 1, 2, 3, 4, 5, 6, 7}}, {"worker-1", {0, 1, 2, 3}}}));
}

TEST(ResourceSelection, NumGpusTakesTheFirstSlotsOfEachHost) {
  ResourceRequest request;
  request.num_gpus = 2;
  auto selection = Select(request);
  ASSERT_TRUE(selection.ok()) << selection.status();
  EXPECT_EQ(*selection,
            (Expected{{"worker-0", {0, 1}}, {"worker-1", {0, 1}}, {"worker-2", {0, 1}}}));
}

TEST(ResourceSelection, NumNodesAndNumGpusTogether) {
  ResourceRequest request;
  request.num_nodes = 1;
  request.num_gpus = 8;  // worker-1 has only 4, but it is not selected
  auto selection = Select(request);
  ASSERT_TRUE(selection.ok()) << selection.status();
  EXPECT_EQ(*selection, (Expected{{"worker-0", {0, 1, 2, 3, 4, 5, 6, 7}}}));
}

TEST(ResourceSelection, NumNodesOutOfRange) {
  for (int bad : {0, -2}) {
    ResourceRequest request;
    request.num_nodes = bad;
    auto selection = Select(request);
    ASSERT_FALSE(selection.ok()) << bad;
    EXPECT_THAT(selection.status().message(),
                HasSubstr("--num_nodes " + std::to_string(bad) + ": must be at least 1"));
  }
  ResourceRequest request;
  request.num_nodes = 4;
  auto selection = Select(request);
  ASSERT_FALSE(selection.ok());
  EXPECT_THAT(selection.status().message(),
              HasSubstr("--num_nodes 4: hostfile hosts has only 3 hosts"));
}

TEST(ResourceSelection, NumGpusOutOfRangeNamesTheShortHost) {
  ResourceRequest request;
  request.num_gpus = 0;
  auto zero = Select(request);
  ASSERT_FALSE(zero.ok());
  EXPECT_THAT(zero.status().message(), HasSubstr("--num_gpus 0: must be at least 1"));

  request.num_gpus = 5;
  auto too_many = Select(request);
  ASSERT_FALSE(too_many.ok());
  EXPECT_EQ(too_many.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_many.status().message(),
              HasSubstr("--num_gpus 5: host 'worker-1' has only 4 slots (hosts:2)"));
}

TEST(ResourceSelection, IncludeHostWithoutSlotsMeansAllSlots) {
  auto selection = Select(Include("worker-1"));
  ASSERT_TRUE(selection.ok()) << selection.status();
  EXPECT_EQ(*selection, (Expected{{"worker-1", {0, 1, 2, 3}}}));
}

TEST(ResourceSelection, IncludeKeepsHostfileOrderAndSortsAndMergesSlots) {
  auto selection = Select(Include("worker-2:5,1,1@worker-0:0,2@worker-2:3"));
  ASSERT_TRUE(selection.ok()) << selection.status();
  EXPECT_EQ(*selection, (Expected{{"worker-0", {0, 2}}, {"worker-2", {1, 3, 5}}}));
}

TEST(ResourceSelection, IncludeHostAloneWinsOverItsSlots) {
  auto selection = Select(Include("worker-1:1@worker-1"));
  ASSERT_TRUE(selection.ok()) << selection.status();
  EXPECT_EQ(*selection, (Expected{{"worker-1", {0, 1, 2, 3}}}));
}

TEST(ResourceSelection, ExcludeSlotsAndWholeHosts) {
  auto selection = Select(Exclude("worker-0:0,7@worker-2"));
  ASSERT_TRUE(selection.ok()) << selection.status();
  EXPECT_EQ(*selection, (Expected{{"worker-0", {1, 2, 3, 4, 5, 6}}, {"worker-1", {0, 1, 2, 3}}}));
}

TEST(ResourceSelection, ExcludingEverySlotOfAHostDropsIt) {
  auto selection = Select(Exclude("worker-1:0,1,2,3"));
  ASSERT_TRUE(selection.ok()) << selection.status();
  EXPECT_EQ(*selection, (Expected{{"worker-0", {0, 1, 2, 3, 4, 5, 6, 7}},
                                  {"worker-2", {0, 1, 2, 3, 4, 5, 6, 7}}}));
}

TEST(ResourceSelection, IncludeWithExcludeIsAnError) {
  ResourceRequest request = Include("worker-0");
  request.exclude = "worker-1";
  auto selection = Select(request);
  ASSERT_FALSE(selection.ok());
  EXPECT_EQ(selection.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(selection.status().message(), HasSubstr("--include 'worker-0'"));
  EXPECT_THAT(selection.status().message(), HasSubstr("--exclude 'worker-1'"));
  EXPECT_THAT(selection.status().message(), HasSubstr("cannot be used together"));
}

TEST(ResourceSelection, IncludeOrExcludeWithCountsIsAnError) {
  ResourceRequest with_nodes = Include("worker-0");
  with_nodes.num_nodes = 1;
  auto nodes = Select(with_nodes);
  ASSERT_FALSE(nodes.ok());
  EXPECT_THAT(nodes.status().message(),
              HasSubstr("--include 'worker-0' cannot be used with --num_nodes"));

  ResourceRequest with_gpus = Exclude("worker-0:1");
  with_gpus.num_gpus = 1;
  auto gpus = Select(with_gpus);
  ASSERT_FALSE(gpus.ok());
  EXPECT_THAT(gpus.status().message(),
              HasSubstr("--exclude 'worker-0:1' cannot be used with --num_gpus"));
}

TEST(ResourceSelection, UnknownHostIsNotFound) {
  auto include = Select(Include("worker-9:0"));
  ASSERT_FALSE(include.ok());
  EXPECT_EQ(include.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(include.status().message(),
              HasSubstr("--include 'worker-9:0': host 'worker-9' is not in hostfile hosts"));

  auto exclude = Select(Exclude("worker-0@worker-3"));
  ASSERT_FALSE(exclude.ok());
  EXPECT_THAT(exclude.status().message(),
              HasSubstr("--exclude 'worker-0@worker-3': host 'worker-3' is not in hostfile hosts"));
}

TEST(ResourceSelection, SlotOutsideTheHostIsAnError) {
  auto exclude = Select(Exclude("worker-0:8"));
  ASSERT_FALSE(exclude.ok());
  EXPECT_THAT(exclude.status().message(),
              HasSubstr("--exclude 'worker-0:8': slot 8 of 'worker-0' does not exist "
                        "(it has slots 0-7)"));

  Hostfile single;
  single.path = "one";
  single.hosts = {{"solo", 1, 1}};
  ResourceRequest request = Include("solo:1");
  auto include = SelectResources(single, request);
  ASSERT_FALSE(include.ok());
  EXPECT_THAT(include.status().message(),
              HasSubstr("slot 1 of 'solo' does not exist (it has slot 0)"));
}

TEST(ResourceSelection, BadSyntaxNamesTheFlagAndText) {
  struct Case {
    std::string text;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {"worker-0@@worker-1", "--include 'worker-0@@worker-1': empty segment between '@'"},
           {"@worker-0", "--include '@worker-0': empty segment between '@'"},
           {"worker-0@", "--include 'worker-0@': empty segment between '@'"},
           {":0", "--include ':0': empty host name in ':0'"},
           {"worker-0:", "--include 'worker-0:': no slot after ':' in 'worker-0:'"},
           {"worker-0:a", "--include 'worker-0:a': slot 'a' of 'worker-0' is not a non-negative"},
           {"worker-0:0,,1", "--include 'worker-0:0,,1': slot '' of 'worker-0' is not"},
           {"worker-0:-1", "slot '-1' of 'worker-0' is not a non-negative integer"},
           {"worker-0:1:2", "slot '1:2' of 'worker-0' is not a non-negative integer"},
       }) {
    auto selection = Select(Include(c.text));
    ASSERT_FALSE(selection.ok()) << c.text;
    EXPECT_EQ(selection.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(selection.status().message(), HasSubstr(c.message));
  }
}

TEST(ResourceSelection, SelectionWithNoSlotIsAnError) {
  auto selection = Select(Exclude("worker-0@worker-1:0,1,2,3@worker-2"));
  ASSERT_FALSE(selection.ok());
  EXPECT_THAT(selection.status().message(),
              HasSubstr("--exclude 'worker-0@worker-1:0,1,2,3@worker-2': leaves no slot"));

  auto empty = SelectResources(Hostfile{"empty", {}}, ResourceRequest{});
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(empty.status().message(), HasSubstr("hostfile empty has no host"));
}

}  // namespace
}  // namespace dslaunch
