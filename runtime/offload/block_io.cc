#include "runtime/offload/block_io.h"

#include <liburing.h>
#include <unistd.h>

#include <sys/uio.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dslaunch::runtime {
namespace {

struct Piece {
  const IoRequest* request;
  int64_t offset;  // within the request
  int64_t bytes;
};

std::vector<Piece> SplitIntoBlocks(const std::vector<IoRequest>& batch, int64_t block_bytes) {
  std::vector<Piece> pieces;
  for (const IoRequest& request : batch) {
    for (int64_t done = 0; done < request.bytes; done += block_bytes) {
      pieces.push_back(Piece{&request, done, std::min(block_bytes, request.bytes - done)});
    }
  }
  return pieces;
}

absl::Status TransferError(const Piece& piece, int64_t result) {
  const IoRequest& r = *piece.request;
  const char* verb = r.kind == IoRequest::Kind::kRead ? "read" : "write";
  if (result < 0) {
    return absl::DataLossError(absl::StrCat("swap file ", r.file, ": ", verb, " of ", piece.bytes, " bytes at offset ",
                                            r.offset + piece.offset, " failed: ", std::strerror(static_cast<int>(-result))));
  }
  return absl::DataLossError(absl::StrCat("swap file ", r.file, ": short ", verb, ": ", result, " of ", piece.bytes,
                                          " bytes at offset ", r.offset + piece.offset,
                                          r.kind == IoRequest::Kind::kRead ? " (the file is shorter than it must be)"
                                                                           : " (is the disk full?)"));
}

std::string BlockText(int64_t bytes) {
  if (bytes % (1 << 20) == 0) return absl::StrCat(bytes >> 20, " MiB blocks");
  if (bytes % 1024 == 0) return absl::StrCat(bytes >> 10, " KiB blocks");
  return absl::StrCat(bytes, "-byte blocks");
}

// The worker thread and the ordered queue of batches; a subclass executes a
// batch.
class WorkerBlockIo : public BlockIo {
 public:
  explicit WorkerBlockIo(const BlockIoOptions& options) : options_(options) {}
  ~WorkerBlockIo() override { StopWorker(); }

  void Start() { worker_ = std::thread([this] { Loop(); }); }

  int64_t Submit(std::vector<IoRequest> requests) override {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(requests));
    const int64_t ticket = ++submitted_;
    wake_.notify_all();
    return ticket;
  }

  absl::Status Wait(int64_t ticket) override {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return completed_ >= ticket; });
    return error_;
  }

  absl::Status WaitAll() override {
    int64_t ticket;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ticket = submitted_;
    }
    return Wait(ticket);
  }

 protected:
  virtual absl::Status Execute(const std::vector<IoRequest>& batch) = 0;
  // Runs what was submitted, then ends the worker; a subclass calls it first
  // in its destructor (Execute uses the subclass's state). Idempotent.
  void StopWorker() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (worker_.joinable()) worker_.join();
  }
  const BlockIoOptions options_;

 private:
  void Loop() {
    while (true) {
      std::vector<IoRequest> batch;
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, nothing left
        batch = std::move(queue_.front());
        queue_.pop_front();
      }
      // After an error nothing more runs (its buffers may hold garbage); the
      // batches still count as completed so that waiters return the error.
      absl::Status status = failed_ ? absl::OkStatus() : Execute(batch);
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!status.ok() && error_.ok()) {
          error_ = status;
          failed_ = true;
        }
        ++completed_;
      }
      done_cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable wake_, done_cv_;
  std::deque<std::vector<IoRequest>> queue_;
  int64_t submitted_ = 0, completed_ = 0;
  absl::Status error_;
  bool failed_ = false;  // read by the worker only after it set it
  bool stopping_ = false;
  std::thread worker_;
};

class PosixBlockIo final : public WorkerBlockIo {
 public:
  using WorkerBlockIo::WorkerBlockIo;
  std::string Describe() const override {
    return absl::StrCat("pread/pwrite on ", options_.thread_count, " thread(s), ", BlockText(options_.block_bytes));
  }

 protected:
  absl::Status Execute(const std::vector<IoRequest>& batch) override {
    const std::vector<Piece> pieces = SplitIntoBlocks(batch, options_.block_bytes);
    const int threads = std::max(1, std::min<int>(options_.thread_count, static_cast<int>(pieces.size())));
    std::vector<absl::Status> results(threads);
    auto run = [&](int t) {
      for (size_t i = t; i < pieces.size(); i += threads) {
        const Piece& piece = pieces[i];
        const IoRequest& r = *piece.request;
        char* data = static_cast<char*>(r.buffer) + piece.offset;
        int64_t done = 0;
        while (done < piece.bytes) {
          const ssize_t n = r.kind == IoRequest::Kind::kRead
                                ? ::pread(r.fd, data + done, piece.bytes - done, r.offset + piece.offset + done)
                                : ::pwrite(r.fd, data + done, piece.bytes - done, r.offset + piece.offset + done);
          if (n < 0 && errno == EINTR) continue;
          if (n <= 0) {
            results[t] = TransferError(piece, n < 0 ? -errno : done);
            return;
          }
          done += n;
        }
      }
    };
    if (threads == 1) {
      run(0);
    } else {
      std::vector<std::thread> pool;
      for (int t = 0; t < threads; ++t) pool.emplace_back(run, t);
      for (std::thread& thread : pool) thread.join();
    }
    for (const absl::Status& status : results) {
      if (!status.ok()) return status;
    }
    return absl::OkStatus();
  }
};

class IoUringBlockIo final : public WorkerBlockIo {
 public:
  explicit IoUringBlockIo(const BlockIoOptions& options) : WorkerBlockIo(options) {}
  ~IoUringBlockIo() override {
    StopWorker();  // before the ring goes
    if (initialized_) io_uring_queue_exit(&ring_);
  }

  // 0 or -errno of io_uring_queue_init.
  int Init() {
    const int result = io_uring_queue_init(static_cast<unsigned>(options_.queue_depth), &ring_, 0);
    initialized_ = result == 0;
    return result;
  }

  std::string Describe() const override {
    std::string registered;
    if (!registered_.empty()) {
      int64_t bytes = 0;
      for (const Buffer& buffer : registered_) bytes += buffer.bytes;
      registered = absl::StrFormat(", %d registered buffers (%.2f GiB)", registered_.size(), bytes / 1073741824.0);
    } else if (!registration_refused_.empty()) {
      registered = absl::StrCat(", buffers not registered (", registration_refused_, ")");
    }
    return absl::StrCat("io_uring, queue depth ", options_.queue_depth, ", ", BlockText(options_.block_bytes),
                        registered);
  }

  void RegisterBuffers(const std::vector<Buffer>& buffers) override {
    if (buffers.empty()) return;
    std::vector<iovec> vectors;
    for (const Buffer& buffer : buffers) {
      if (buffer.bytes > kMaxRegisteredBytes) {
        registration_refused_ = absl::StrCat("a buffer of ", buffer.bytes, " bytes is over the kernel's 1 GiB");
        return;
      }
      vectors.push_back(iovec{buffer.data, static_cast<size_t>(buffer.bytes)});
    }
    const int result = io_uring_register_buffers(&ring_, vectors.data(), static_cast<unsigned>(vectors.size()));
    if (result < 0) {
      registration_refused_ = absl::StrCat(
          std::strerror(-result), result == -ENOMEM || result == -EPERM ? ": the locked-memory limit (ulimit -l)" : "");
      return;
    }
    registered_ = buffers;
  }
  int64_t registered_transfers() const override { return registered_transfers_.load(); }

 protected:
  absl::Status Execute(const std::vector<IoRequest>& batch) override {
    if (!broken_.ok()) return broken_;
    const std::vector<Piece> pieces = SplitIntoBlocks(batch, options_.block_bytes);
    size_t next = 0, in_flight = 0;
    absl::Status first_error;
    while (next < pieces.size() || in_flight > 0) {
      // Fill the queue (not after an error: only drain what is in flight).
      while (first_error.ok() && next < pieces.size() && in_flight < static_cast<size_t>(options_.queue_depth)) {
        io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
        if (sqe == nullptr) break;
        const Piece& piece = pieces[next];
        const IoRequest& r = *piece.request;
        char* data = static_cast<char*>(r.buffer) + piece.offset;
        const int fixed = RegisteredIndex(data, piece.bytes);
        const auto bytes = static_cast<unsigned>(piece.bytes);
        const auto at = static_cast<uint64_t>(r.offset + piece.offset);
        if (fixed >= 0) {
          ++registered_transfers_;
          if (r.kind == IoRequest::Kind::kRead) {
            io_uring_prep_read_fixed(sqe, r.fd, data, bytes, at, fixed);
          } else {
            io_uring_prep_write_fixed(sqe, r.fd, data, bytes, at, fixed);
          }
        } else if (r.kind == IoRequest::Kind::kRead) {
          io_uring_prep_read(sqe, r.fd, data, bytes, at);
        } else {
          io_uring_prep_write(sqe, r.fd, data, bytes, at);
        }
        io_uring_sqe_set_data64(sqe, next);
        ++next;
        ++in_flight;
      }
      if (in_flight == 0) break;
      if (broken_.ok()) {
        int submitted = io_uring_submit(&ring_);
        while (submitted == -EINTR) submitted = io_uring_submit(&ring_);
        if (submitted < 0) {
          // The entries the kernel did not take never complete, and a later
          // submit would run them into buffers no longer theirs: they are
          // counted out, and the ring is used no more (every later batch
          // gets this error); what it took is drained.
          in_flight -= std::min<size_t>(in_flight, io_uring_sq_ready(&ring_));
          broken_ = absl::InternalError(absl::StrCat("io_uring_submit: ", std::strerror(-submitted)));
          if (first_error.ok()) first_error = broken_;
          if (in_flight == 0) break;
        }
      }
      io_uring_cqe* cqe = nullptr;
      int waited = io_uring_wait_cqe(&ring_, &cqe);
      while (waited == -EINTR) waited = io_uring_wait_cqe(&ring_, &cqe);
      if (waited < 0) {
        // Transfers may still be in flight into the batch's buffers: the
        // ring is used no more.
        broken_ = absl::InternalError(absl::StrCat("io_uring_wait_cqe: ", std::strerror(-waited)));
        return broken_;
      }
      const Piece& piece = pieces[io_uring_cqe_get_data64(cqe)];
      const int result = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);
      --in_flight;
      if (result != piece.bytes && first_error.ok()) first_error = TransferError(piece, result);
    }
    return first_error;
  }

 private:
  static constexpr int64_t kMaxRegisteredBytes = int64_t{1} << 30;
  // The registered buffer [data, data + bytes) lies in; -1: none.
  int RegisteredIndex(const char* data, int64_t bytes) const {
    for (size_t i = 0; i < registered_.size(); ++i) {
      const char* base = static_cast<const char*>(registered_[i].data);
      if (data >= base && data + bytes <= base + registered_[i].bytes) return static_cast<int>(i);
    }
    return -1;
  }

  io_uring ring_{};
  bool initialized_ = false;
  absl::Status broken_;  // the worker's own: a ring that failed is not used again
  std::vector<Buffer> registered_;  // set before the first Submit, read by the worker after
  std::string registration_refused_;
  std::atomic<int64_t> registered_transfers_{0};
};

}  // namespace

absl::StatusOr<std::unique_ptr<BlockIo>> OpenBlockIo(const BlockIoOptions& options, std::string* fallback_reason) {
  if (options.block_bytes <= 0 || options.block_bytes % 4096 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("aio.block_size=", options.block_bytes,
                                                   ": must be a positive multiple of 4096 (O_DIRECT transfers)"));
  }
  if (options.queue_depth < 1 || options.queue_depth > 4096) {
    return absl::InvalidArgumentError(absl::StrCat("aio.queue_depth=", options.queue_depth, ": 1 to 4096"));
  }
  fallback_reason->clear();
  if (options.use_io_uring) {
    auto uring = std::make_unique<IoUringBlockIo>(options);
    const int init = uring->Init();
    if (init == 0) {
      uring->Start();
      return std::unique_ptr<BlockIo>(std::move(uring));
    }
    *fallback_reason = absl::StrCat("io_uring is not available to this process (", std::strerror(-init),
                                    "; kernel.io_uring_disabled or a seccomp filter can forbid it)");
  } else {
    *fallback_reason = "io_uring not requested";
  }
  auto posix = std::make_unique<PosixBlockIo>(options);
  posix->Start();
  return std::unique_ptr<BlockIo>(std::move(posix));
}

}  // namespace dslaunch::runtime
