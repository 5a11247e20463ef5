// Example rank program: every rank meets the others at a barrier in the
// controller's rendezvous store, then they all agree on one value (the one
// rank 0 publishes, as an NCCL unique id would be), and each prints it.
//
//   dslaunch --num_nodes 2 --num_gpus 2 build/tests/programs/store_barrier
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/auth_token.h"
#include "common/store_client.h"

int main() {
  using namespace std::chrono_literals;
  auto store = dslaunch::StoreClient::FromEnvironment();
  if (!store.ok()) {
    std::fprintf(stderr, "store_barrier: %s\n", std::string(store.status().message()).c_str());
    return 1;
  }
  int rank = 0, world = 0;
  if (!absl::SimpleAtoi(std::getenv("RANK") ? std::getenv("RANK") : "", &rank) ||
      !absl::SimpleAtoi(std::getenv("WORLD_SIZE") ? std::getenv("WORLD_SIZE") : "", &world)) {
    std::fprintf(stderr, "store_barrier: RANK and WORLD_SIZE must be set\n");
    return 1;
  }
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);

  absl::Status met = (*store)->Barrier("hello", world, 60s);
  if (!met.ok()) {
    std::fprintf(stderr, "rank %d: barrier failed: %s\n", rank, std::string(met.message()).c_str());
    return 1;
  }
  if (rank == 0) {
    absl::Status set = (*store)->Set("shared_value", dslaunch::GenerateToken().substr(0, 16));
    if (!set.ok()) return 1;
  }
  auto value = (*store)->WaitGet("shared_value", 60s);
  if (!value.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, std::string(value.status().message()).c_str());
    return 1;
  }
  std::printf("rank %d of %d on %s (pid %d): all %d ranks met; agreed value %s\n", rank, world,
              host, static_cast<int>(::getpid()), world, value->c_str());
  return 0;
}
