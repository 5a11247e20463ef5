#include "launcher/node_resolution.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dslaunch {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

std::vector<std::string> Hosts(const NodeResolution& resolution) {
  std::vector<std::string> hosts;
  for (const auto& node : resolution.nodes) hosts.push_back(node.host);
  return hosts;
}

class NodeResolutionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern =
        std::filesystem::path(::testing::TempDir()) / "node_resolution_test.XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    context_.local_gpu_count = 0;
    context_.local_hostname = "this-box";
    context_.default_hostfile_exists = false;
  }
  void TearDown() override {
    std::error_code error;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, error);
  }
  std::string WriteHostfile(const std::string& content, const std::string& name = "hostfile") {
    std::string path = dir_ + "/" + name;
    std::ofstream out(path, std::ios::binary);
    out << content;
    return path;
  }
  void UseHostfile(const std::string& content) {
    options_.hostfile = WriteHostfile(content);
    options_.hostfile_given = true;
  }
  void UseAgents(const std::vector<std::string>& hosts, const std::vector<int>& gpus) {
    options_.agents.clear();
    for (size_t i = 0; i < hosts.size(); ++i) {
      options_.agents.push_back(hosts[i] + ":" + std::to_string(7000 + i));
    }
    options_.launcher = LauncherKind::kStatic;
    context_.agent_hosts = hosts;
    context_.agent_gpu_counts = gpus;
  }

  std::string dir_;
  LauncherOptions options_;
  NodeResolutionContext context_;
};

// ---------------------------------------------------------------------------
// No hostfile: nodes on this machine.

TEST_F(NodeResolutionTest, NoHostfileIsOneLocalhostNodeWithOneSlotWithoutGpus) {
  auto resolution = ResolveNodes(options_, context_);
  ASSERT_TRUE(resolution.ok()) << resolution.status();
  ASSERT_EQ(resolution->nodes.size(), 1u);
  EXPECT_EQ(resolution->nodes[0].host, "localhost");
  EXPECT_THAT(resolution->nodes[0].slots, ElementsAre(0));
  EXPECT_EQ(resolution->launcher, LauncherKind::kLocal);
  EXPECT_THAT(resolution->hostfile_used, IsEmpty());
}

TEST_F(NodeResolutionTest, NoHostfileDefaultsToTheLocalGpuCount) {
  context_.local_gpu_count = 4;
  auto resolution = ResolveNodes(options_, context_);
  ASSERT_TRUE(resolution.ok()) << resolution.status();
  ASSERT_EQ(resolution->nodes.size(), 1u);
  EXPECT_THAT(resolution->nodes[0].slots, ElementsAre(0, 1, 2, 3));
}

TEST_F(NodeResolutionTest, NoHostfileNumGpusOverridesTheLocalGpuCount) {
  context_.local_gpu_count = 8;
  options_.num_gpus = 3;
  auto resolution = ResolveNodes(options_, context_);
  ASSERT_TRUE(resolution.ok()) << resolution.status();
  ASSERT_EQ(resolution->nodes.size(), 1u);
  EXPECT_THAT(resolution->nodes[0].slots, ElementsAre(0, 1, 2));
}

TEST_F(NodeResolutionTest, NumNodesMakesNamedLocalNodes) {
  options_.num_nodes = 3;
  options_.num_gpus = 2;
  auto resolution = ResolveNodes(options_, context_);
  ASSERT_TRUE(resolution.ok()) << resolution.status();
  EXPECT_THAT(Hosts(*resolution), ElementsAre("node0", "node1", "node2"));
  for (const auto& node : resolution->nodes) EXPECT_THAT(node.slots, ElementsAre(0, 1));
  EXPECT_EQ(resolution->launcher, LauncherKind::kLocal);
  EXPECT_THAT(resolution->hostfile_used, IsEmpty());
}

// The world size is bounded before any slot list is built (issue 13,
// finding 7: --num_gpus 2147483647 built one, 18 GB, then std::bad_alloc).
TEST_F(NodeResolutionTest, LocalNodesBeyondTheWorldSizeBoundAreRefused) {
  options_.num_nodes = 65536;
  options_.num_gpus = 1024;
  auto resolution = ResolveNodes(options_, context_);
  ASSERT_FALSE(resolution.ok());
  EXPECT_EQ(resolution.status().message(),
            "--num_nodes 65536 x --num_gpus 1024: 67108864 ranks; the most one job may have is 131072");
  options_.num_nodes = 128;
  EXPECT_TRUE(ResolveNodes(options_, context_).ok());
}

TEST_F(NodeResolutionTest, HostfileSelectionBeyondTheWorldSizeBoundIsRefused) {
  std::string hosts;
  for (int i = 0; i < 129; ++i) hosts += "h" + std::to_string(i) + " slots=1024\n";
  UseHostfile(hosts);
  auto resolution = ResolveNodes(options_, context_);
  ASSERT_FALSE(resolution.ok());
  EXPECT_EQ(resolution.status().message(),
            "hostfile " + options_.hostfile +
                " as selected: 132096 ranks; the most one job may have is 131072");
  options_.num_nodes = 128;  // a prefix of a big cluster's hostfile is fine
  EXPECT_TRUE(ResolveNodes(options_, context_).ok());
}

TEST_F(NodeResolutionTest, CountsWithIncludeOrExcludeAreRefusedInEveryMode) {
  // Local nodes.
  options_.num_nodes = 3;
  options_.exclude = "node1";
  auto local = ResolveNodes(options_, context_);
  ASSERT_FALSE(local.ok());
  EXPECT_THAT(std::string(local.status().message()),
              HasSubstr("--exclude 'node1' cannot be used with --num_nodes: the list already says"));
  options_ = LauncherOptions();
  options_.num_gpus = 4;
  options_.include = "localhost:1,3";
  auto gpus = ResolveNodes(options_, context_);
  ASSERT_FALSE(gpus.ok());
  EXPECT_THAT(std::string(gpus.status().message()), HasSubstr("--include 'localhost:1,3' cannot be used with --num_gpus"));
  // Agents.
  UseAgents({"a", "b"}, {2, 2});
  options_.num_gpus = 1;
  options_.exclude = "b";
  auto agents = ResolveNodes(options_, context_);
  ASSERT_FALSE(agents.ok());
  EXPECT_THAT(std::string(agents.status().message()), HasSubstr("cannot be used with --num_gpus"));
}

TEST_F(NodeResolutionTest, IncludeAppliesToLocalSlots) {
  context_.local_gpu_count = 4;
  options_.include = "localhost:1,3";
  auto resolution = ResolveNodes(options_, context_);
  ASSERT_TRUE(resolution.ok()) << resolution.status();
  ASSERT_THAT(Hosts(*resolution), ElementsAre("localhost"));
  EXPECT_THAT(resolution->nodes[0].slots, ElementsAre(1, 3));
}

TEST_F(NodeResolutionTest, CudaVisibleDevicesBecomeTheLocalSlots) {
  context_.local_gpu_count = 8;
  context_.cuda_visible_devices = "2,5,7";
  auto all = ResolveNodes(options_, context_);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_THAT(Hosts(*all), ElementsAre("localhost"));
  EXPECT_THAT(all->nodes[0].slots, ElementsAre(2, 5, 7));
  EXPECT_TRUE(all->visible_devices_used);
  options_.num_gpus = 2;
  auto first_two = ResolveNodes(options_, context_);
  ASSERT_TRUE(first_two.ok()) << first_two.status();
  EXPECT_THAT(first_two->nodes[0].slots, ElementsAre(2, 5));
  options_.num_gpus = 4;
  auto too_many = ResolveNodes(options_, context_);
  ASSERT_FALSE(too_many.ok());
  EXPECT_THAT(std::string(too_many.status().message()),
              HasSubstr("--num_gpus 4: CUDA_VISIBLE_DEVICES='2,5,7' lists only 3 device(s)"));
  // An explicit --include wins over the variable.
  options_ = LauncherOptions();
  options_.include = "localhost:0";
  auto included = ResolveNodes(options_, context_);
  ASSERT_TRUE(included.ok()) << included.status();
  EXPECT_THAT(included->nodes[0].slots, ElementsAre(0));
  EXPECT_FALSE(included->visible_devices_used);
  // Device UUIDs cannot be slots.
  options_ = LauncherOptions();
  context_.cuda_visible_devices = "GPU-1234";
  auto uuid = ResolveNodes(options_, context_);
  ASSERT_FALSE(uuid.ok());
  EXPECT_THAT(std::string(uuid.status().message()),
              HasSubstr("CUDA_VISIBLE_DEVICES='GPU-1234': 'GPU-1234' is not a device index"));
}

TEST_F(NodeResolutionTest, ExcludeSlotOfLocalhost) {
  context_.local_gpu_count = 2;
  options_.exclude = "localhost:0";
  auto resolution = ResolveNodes(options_, context_);
  ASSERT_TRUE(resolution.ok()) << resolution.status();
  ASSERT_EQ(resolution->nodes.size(), 1u);
  EXPECT_THAT(resolution->nodes[0].slots, ElementsAre(1));
}

TEST_F(NodeResolutionTest, IncludeOfUnknownLocalNodeIsAnError) {
  options_.num_nodes = 2;
  options_.include = "node5";
  auto resolution = ResolveNodes(options_, context_);
  ASSERT_FALSE(resolution.ok());
  EXPECT_THAT(std::string(resolution.status().message()), HasSubstr("node5"));
}

TEST_F(NodeResolutionTest, DefaultHostfileIsNotConsultedWhenAbsent) {
  context_.default_hostfile_exists = false;
  auto resolution = ResolveNodes(options_, context_);
  ASSERT_TRUE(resolution.ok()) << resolution.status();
  EXPECT_THAT(resolution->hostfile_used, IsEmpty());
  EXPECT_THAT(Hosts(*resolution), ElementsAre("localhost"));
}

TEST_F(NodeResolutionTest, DefaultHostfileIsConsultedWhenTheContextSaysItExists) {
  if (std::filesystem::exists(kDefaultHostfile)) {
    GTEST_SKIP() << kDefaultHostfile << " exists on this machine";
  }
  // The context claims /job/hostfile exists while it does not: reading it
  // fails, which shows that it was consulted instead of making local nodes.
  context_.default_hostfile_exists = true;
  auto resolution = ResolveNodes(options_, context_);
  ASSERT_FALSE(resolution.ok());
  EXPECT_THAT(std::string(resolution.status().message()), HasSubstr(kDefaultHostfile));
}

// ---------------------------------------------------------------------------
// Hostfile.

TEST_F(NodeResolutionTest, ExplicitMissingHostfileIsAnErrorNamingIt) {
  options_.hostfile = dir_ + "/no-such-hostfile";
  options_.hostfile_given = true;
  for (bool default_exists : {false, true}) {
    SCOPED_TRACE(default_exists);
    context_.default_hostfile_exists = default_exists;
    auto resolution = ResolveNodes(options_, context_);
    ASSERT_FALSE(resolution.ok()) << "fell back to " << ::testing::PrintToString(Hosts(*resolution));
    EXPECT_THAT(std::string(resolution.status().message()), HasSubstr(options_.hostfile));
    EXPECT_THAT(std::string(resolution.status().message()), Not(HasSubstr(kDefaultHostfile)));
  }
}

TEST_F(NodeResolutionTest, HostfileWithRemoteHostsUsesSsh) {
  UseHostfile("worker-0 slots=2\nworker-1 slots=3\n");
  auto resolution = ResolveNodes(options_, context_);
  ASSERT_TRUE(resolution.ok()) << resolution.status();
  ASSERT_THAT(Hosts(*resolution), ElementsAre("worker-0", "worker-1"));
  EXPECT_THAT(resolution->nodes[0].slots, ElementsAre(0, 1));
  EXPECT_THAT(resolution->nodes[1].slots, ElementsAre(0, 1, 2));
  EXPECT_EQ(resolution->launcher, LauncherKind::kSsh);
  EXPECT_EQ(resolution->hostfile_used, options_.hostfile);
}

TEST_F(NodeResolutionTest, OneRemoteHostAmongLocalOnesUsesSsh) {
  UseHostfile("localhost slots=1\nworker-1 slots=1\n");
  auto resolution = ResolveNodes(options_, context_);
  ASSERT_TRUE(resolution.ok()) << resolution.status();
  EXPECT_EQ(resolution->launcher, LauncherKind::kSsh);
}

TEST_F(NodeResolutionTest, AllLocalHostfileUsesTheLocalLauncher) {
  UseHostfile("localhost slots=1\n127.0.0.1 slots=2\nthis-box slots=1\n");
  auto resolution = ResolveNodes(options_, context_);
  ASSERT_TRUE(resolution.ok()) << resolution.status();
  EXPECT_THAT(Hosts(*resolution), ElementsAre("localhost", "127.0.0.1", "this-box"));
  EXPECT_EQ(resolution->launcher, LauncherKind::kLocal);
  EXPECT_EQ(resolution->hostfile_used, options_.hostfile);
}

TEST_F(NodeResolutionTest, HostfileCountsAndFiltersApply) {
  UseHostfile("a slots=4\nb slots=4\nc slots=4\n");
  options_.num_nodes = 2;
  options_.num_gpus = 2;
  auto resolution = ResolveNodes(options_, context_);
  ASSERT_TRUE(resolution.ok()) << resolution.status();
  ASSERT_THAT(Hosts(*resolution), ElementsAre("a", "b"));
  EXPECT_THAT(resolution->nodes[1].slots, ElementsAre(0, 1));

  options_.num_nodes = -1;
  options_.num_gpus = -1;
  options_.exclude = "b@c:0,1";
  resolution = ResolveNodes(options_, context_);
  ASSERT_TRUE(resolution.ok()) << resolution.status();
  ASSERT_THAT(Hosts(*resolution), ElementsAre("a", "c"));
  EXPECT_THAT(resolution->nodes[1].slots, ElementsAre(2, 3));
}

TEST_F(NodeResolutionTest, LauncherKindFollowsTheSelectedHostsOnly) {
  // Only the local host is selected from a mixed hostfile.
  UseHostfile("this-box slots=2\nworker-1 slots=2\n");
  options_.include = "this-box";
  auto resolution = ResolveNodes(options_, context_);
  ASSERT_TRUE(resolution.ok()) << resolution.status();
  EXPECT_THAT(Hosts(*resolution), ElementsAre("this-box"));
  EXPECT_EQ(resolution->launcher, LauncherKind::kLocal);
}

TEST_F(NodeResolutionTest, BadHostfileIsAnErrorNamingIt) {
  UseHostfile("worker-0 slots=two\n");
  auto resolution = ResolveNodes(options_, context_);
  ASSERT_FALSE(resolution.ok());
  EXPECT_THAT(std::string(resolution.status().message()), HasSubstr(options_.hostfile + ":1"));
}

// ---------------------------------------------------------------------------
// --launcher.

TEST_F(NodeResolutionTest, ExplicitLauncherWins) {
  UseHostfile("worker-0 slots=1\n");
  options_.launcher = LauncherKind::kLocal;
  auto resolution = ResolveNodes(options_, context_);
  ASSERT_TRUE(resolution.ok()) << resolution.status();
  EXPECT_EQ(resolution->launcher, LauncherKind::kLocal);

  options_.hostfile = WriteHostfile("localhost slots=1\n", "local-hostfile");
  options_.launcher = LauncherKind::kSsh;
  resolution = ResolveNodes(options_, context_);
  ASSERT_TRUE(resolution.ok()) << resolution.status();
  EXPECT_EQ(resolution->launcher, LauncherKind::kSsh);
}

TEST_F(NodeResolutionTest, ExplicitLocalLauncherWithoutHostfile) {
  options_.launcher = LauncherKind::kLocal;
  options_.num_nodes = 2;
  auto resolution = ResolveNodes(options_, context_);
  ASSERT_TRUE(resolution.ok()) << resolution.status();
  EXPECT_EQ(resolution->launcher, LauncherKind::kLocal);
  EXPECT_THAT(Hosts(*resolution), ElementsAre("node0", "node1"));
}

TEST_F(NodeResolutionTest, SshLauncherWithoutHostfileIsAnError) {
  options_.launcher = LauncherKind::kSsh;
  auto resolution = ResolveNodes(options_, context_);
  ASSERT_FALSE(resolution.ok());
  EXPECT_EQ(resolution.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(resolution.status().message()), HasSubstr("--launcher ssh"));
  EXPECT_THAT(std::string(resolution.status().message()), HasSubstr("--hostfile"));
}

TEST_F(NodeResolutionTest, StaticLauncherWithoutAgentsIsAnError) {
  options_.launcher = LauncherKind::kStatic;
  auto resolution = ResolveNodes(options_, context_);
  ASSERT_FALSE(resolution.ok());
  EXPECT_EQ(resolution.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(resolution.status().message()), HasSubstr("--agents"));

  // Also with a hostfile.
  UseHostfile("worker-0 slots=1\n");
  resolution = ResolveNodes(options_, context_);
  ASSERT_FALSE(resolution.ok());
  EXPECT_THAT(std::string(resolution.status().message()), HasSubstr("--agents"));
}

// ---------------------------------------------------------------------------
// --agents.

TEST_F(NodeResolutionTest, AgentsMakeOneNodePerAgentWithTheirGpuCounts) {
  UseAgents({"h1", "h2", "h3"}, {4, 0, 2});
  auto resolution = ResolveNodes(options_, context_);
  ASSERT_TRUE(resolution.ok()) << resolution.status();
  ASSERT_THAT(Hosts(*resolution), ElementsAre("h1", "h2", "h3"));
  EXPECT_THAT(resolution->nodes[0].slots, ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(resolution->nodes[1].slots, ElementsAre(0));  // no GPU: one slot
  EXPECT_THAT(resolution->nodes[2].slots, ElementsAre(0, 1));
  EXPECT_EQ(resolution->launcher, LauncherKind::kStatic);
  EXPECT_THAT(resolution->hostfile_used, IsEmpty());
}

TEST_F(NodeResolutionTest, AgentsWithoutExplicitLauncherAreStatic) {
  UseAgents({"h1"}, {1});
  options_.launcher = LauncherKind::kAuto;
  auto resolution = ResolveNodes(options_, context_);
  ASSERT_TRUE(resolution.ok()) << resolution.status();
  EXPECT_EQ(resolution->launcher, LauncherKind::kStatic);
}

TEST_F(NodeResolutionTest, AgentsSlotsFromNumGpus) {
  UseAgents({"h1", "h2"}, {8, 0});
  options_.num_gpus = 2;
  auto resolution = ResolveNodes(options_, context_);
  ASSERT_TRUE(resolution.ok()) << resolution.status();
  ASSERT_EQ(resolution->nodes.size(), 2u);
  EXPECT_THAT(resolution->nodes[0].slots, ElementsAre(0, 1));
  EXPECT_THAT(resolution->nodes[1].slots, ElementsAre(0, 1));
}

TEST_F(NodeResolutionTest, AgentReportingMoreGpusThanAHostMayHaveIsAnError) {
  UseAgents({"h1"}, {1 << 30});
  auto resolution = ResolveNodes(options_, context_);
  ASSERT_FALSE(resolution.ok());
  EXPECT_THAT(resolution.status().message(), HasSubstr("the agent on h1 reports 1073741824 GPUs"));
  options_.num_gpus = 2;
  EXPECT_TRUE(ResolveNodes(options_, context_).ok());
}

TEST_F(NodeResolutionTest, AgentsNumNodesTakesTheFirstAgents) {
  UseAgents({"h1", "h2", "h3"}, {1, 1, 1});
  options_.num_nodes = 2;
  auto resolution = ResolveNodes(options_, context_);
  ASSERT_TRUE(resolution.ok()) << resolution.status();
  EXPECT_THAT(Hosts(*resolution), ElementsAre("h1", "h2"));
}

TEST_F(NodeResolutionTest, AgentsNumNodesTooLargeIsAnError) {
  UseAgents({"h1", "h2"}, {1, 1});
  options_.num_nodes = 3;
  auto resolution = ResolveNodes(options_, context_);
  ASSERT_FALSE(resolution.ok());
  EXPECT_EQ(resolution.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(resolution.status().message()), HasSubstr("--num_nodes 3"));
  EXPECT_THAT(std::string(resolution.status().message()), HasSubstr("2 agent"));
}

TEST_F(NodeResolutionTest, AgentsWithHostfileIsAnError) {
  UseAgents({"h1"}, {1});
  options_.hostfile = WriteHostfile("h1 slots=1\n");
  options_.hostfile_given = true;
  auto resolution = ResolveNodes(options_, context_);
  ASSERT_FALSE(resolution.ok());
  EXPECT_EQ(resolution.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(resolution.status().message()), HasSubstr("--hostfile"));
  EXPECT_THAT(std::string(resolution.status().message()), HasSubstr("--agents"));
}

TEST_F(NodeResolutionTest, AgentsExcludeApplies) {
  UseAgents({"h1", "h2", "h3"}, {2, 2, 2});
  options_.exclude = "h2@h3:0";
  auto resolution = ResolveNodes(options_, context_);
  ASSERT_TRUE(resolution.ok()) << resolution.status();
  ASSERT_THAT(Hosts(*resolution), ElementsAre("h1", "h3"));
  EXPECT_THAT(resolution->nodes[1].slots, ElementsAre(1));
}

}  // namespace
// ---------------------------------------------------------------------------
// Note [SLURM]: --launcher slurm takes the allocation's hosts.

TEST_F(NodeResolutionTest, SlurmTakesTheAllocationsHostsAndGpus) {
  options_.launcher = LauncherKind::kSlurm;
  context_.slurm_nodelist = "gpu[01-03]";
  context_.slurm_gpus_per_node = "gpu:h100:4";
  auto resolution = ResolveNodes(options_, context_);
  ASSERT_TRUE(resolution.ok()) << resolution.status();
  ASSERT_EQ(resolution->nodes.size(), 3u);
  EXPECT_EQ(resolution->nodes[2].host, "gpu03");
  EXPECT_THAT(resolution->nodes[0].slots, ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(resolution->launcher, LauncherKind::kSlurm);
  // --num_nodes and --num_gpus select, as from a hostfile.
  options_.num_nodes = 2;
  options_.num_gpus = 2;
  resolution = ResolveNodes(options_, context_);
  ASSERT_TRUE(resolution.ok()) << resolution.status();
  ASSERT_EQ(resolution->nodes.size(), 2u);
  EXPECT_THAT(resolution->nodes[1].slots, ElementsAre(0, 1));
  // --exclude names a host of the allocation.
  options_.num_nodes = -1;
  options_.num_gpus = -1;
  options_.exclude = "gpu02";
  resolution = ResolveNodes(options_, context_);
  ASSERT_TRUE(resolution.ok()) << resolution.status();
  ASSERT_EQ(resolution->nodes.size(), 2u);
  EXPECT_EQ(resolution->nodes[1].host, "gpu03");
}

TEST_F(NodeResolutionTest, SlurmOutsideAnAllocationSaysSo) {
  options_.launcher = LauncherKind::kSlurm;
  auto resolution = ResolveNodes(options_, context_);
  ASSERT_FALSE(resolution.ok());
  EXPECT_THAT(std::string(resolution.status().message()), HasSubstr("SLURM_JOB_NODELIST is not set"));
  context_.slurm_nodelist = "gpu[01-";
  resolution = ResolveNodes(options_, context_);
  ASSERT_FALSE(resolution.ok());
  EXPECT_THAT(std::string(resolution.status().message()), HasSubstr("SLURM_JOB_NODELIST='gpu[01-'"));
  // A hostfile given wins over the allocation's list.
  UseHostfile("worker-0 slots=2\n");
  context_.slurm_nodelist = "gpu[01-02]";
  resolution = ResolveNodes(options_, context_);
  ASSERT_TRUE(resolution.ok()) << resolution.status();
  ASSERT_EQ(resolution->nodes.size(), 1u);
  EXPECT_EQ(resolution->nodes[0].host, "worker-0");
  EXPECT_EQ(resolution->launcher, LauncherKind::kSlurm);
}

}  // namespace dslaunch
