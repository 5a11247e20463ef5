// Asynchronous block reads and writes for NVMe offload (Note [NVMe offload]
// in swapped_shard.h): io_uring where the kernel allows it, pread/pwrite on
// threads where it does not.
//
// A request is split into blocks of `block_bytes` (aio.block_size), at most
// `queue_depth` of them in flight (aio.queue_depth). Requests run on the
// BlockIo's own worker thread, in the order they were submitted, so that the
// caller computes while they run: Submit returns a ticket at once, and
// Wait(ticket) returns when that request and every earlier one are done. A
// short transfer or an I/O error is an error naming the file; after one, every
// later Wait returns it too.
//
// The buffers, offsets and sizes given must suit O_DIRECT (4096-byte
// aligned) whenever the file was opened with it.
//
// Note [Registered buffers]: the swap's long-lived buffers (SwappedShard's
// buffer sets, SwappedPieces' staging buffers) are registered with the ring
// once (io_uring_register_buffers), and every block inside one goes through
// read_fixed/write_fixed: the kernel then maps and pins those pages once
// instead of at every transfer. Registration can be refused (the locked-
// memory limit without CAP_IPC_LOCK, a buffer over the kernel's 1 GiB per
// buffer); the transfers then map their pages each time, and Describe says
// why. pread/pwrite has nothing to register.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dslaunch::runtime {

struct IoRequest {
  enum class Kind { kRead, kWrite };
  Kind kind = Kind::kRead;
  int fd = -1;
  int64_t offset = 0;
  void* buffer = nullptr;
  int64_t bytes = 0;
  std::string file;  // for errors
};

struct BlockIoOptions {
  int64_t block_bytes = 1 << 20;  // aio.block_size
  int queue_depth = 8;            // aio.queue_depth
  int thread_count = 1;           // aio.thread_count / intra_op_parallelism (pread/pwrite only)
  bool use_io_uring = true;       // false: pread/pwrite (tests of the fallback)
};

class BlockIo {
 public:
  virtual ~BlockIo() = default;
  // "io_uring, queue depth 8, 1 MiB blocks" or "pread/pwrite on 1 thread(s), ...".
  virtual std::string Describe() const = 0;
  // Starts `requests` (one batch, one ticket).
  virtual int64_t Submit(std::vector<IoRequest> requests) = 0;
  // Waits for the batch `ticket` and every earlier one.
  virtual absl::Status Wait(int64_t ticket) = 0;
  // Waits for everything submitted.
  virtual absl::Status WaitAll() = 0;
  // Note [Registered buffers]: before the first Submit. Never an error: a
  // refusal leaves the buffers unregistered, and Describe says why.
  struct Buffer {
    void* data = nullptr;
    int64_t bytes = 0;
  };
  virtual void RegisterBuffers(const std::vector<Buffer>& buffers) { (void)buffers; }
  // Blocks moved through registered buffers so far (tests, Describe).
  virtual int64_t registered_transfers() const { return 0; }
};

// io_uring when options.use_io_uring and the kernel lets this process set up
// a ring; otherwise pread/pwrite, with the reason in *fallback_reason (empty
// when io_uring is used).
absl::StatusOr<std::unique_ptr<BlockIo>> OpenBlockIo(const BlockIoOptions& options, std::string* fallback_reason);

}  // namespace dslaunch::runtime
