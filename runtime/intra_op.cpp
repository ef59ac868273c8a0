#include <ferry/runtime/intra_op.h>

#include <ferry/runtime/error.h>
#include <ferry/runtime/wait_policy.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace ferry {

namespace {

std::atomic<int> g_threads{1};

// A helper that found no work spins this long before it sleeps: the kernels of one step follow
// each other within tens of microseconds, and waking a sleeping thread costs about 20 us here.
constexpr auto kHelperSpin = std::chrono::microseconds(50);

// Set while a thread runs a chunk: a parallel_for inside one runs on that thread alone.
thread_local bool t_in_chunk = false;

// The helpers of one calling thread. A job is published as one atomic word (generation << 32 |
// chunks << 16 | next chunk): a thread takes a chunk by advancing the index of the generation
// it saw, so a helper still leaving the previous job can never take (and lose) a chunk of the
// next one, and the job's other fields, written before the word, are read only after a
// successful take, while the job cannot end.
class Helpers {
 public:
  ~Helpers() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  void run(int64_t n, int chunks, detail::ChunkFn fn, void* context) {
    while (static_cast<int>(threads_.size()) < chunks - 1) {
      threads_.emplace_back([this] { helper_loop(); });
    }
    fn_ = fn;
    context_ = context;
    n_ = n;
    error_ = nullptr;
    left_.store(chunks, std::memory_order_relaxed);
    generation_ = (generation_ + 1) & 0xffffffffu;
    state_.store(generation_ << 32 | static_cast<uint64_t>(chunks) << 16,
                 std::memory_order_release);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (sleepers_ > 0) wake_.notify_all();
    }
    work(generation_);
    auto finished = [&] { return left_.load(std::memory_order_acquire) == 0; };
    if (!spin_then_yield(finished)) {
      std::unique_lock<std::mutex> lock(mu_);
      done_.wait(lock, finished);
    }
    if (error_) std::rethrow_exception(error_);
  }

 private:
  // Takes and runs chunks of `generation` until none is left.
  void work(uint64_t generation) {
    for (;;) {
      uint64_t s = state_.load(std::memory_order_acquire);
      int64_t chunk = 0, chunks = 0;
      for (;;) {
        chunk = static_cast<int64_t>(s & 0xffffu);
        chunks = static_cast<int64_t>((s >> 16) & 0xffffu);
        if ((s >> 32) != generation || chunk >= chunks) return;
        if (state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel)) break;
      }
      const int64_t begin = n_ * chunk / chunks, end = n_ * (chunk + 1) / chunks;
      try {
        t_in_chunk = true;
        fn_(context_, begin, end);
        t_in_chunk = false;
      } catch (...) {
        t_in_chunk = false;
        std::lock_guard<std::mutex> lock(mu_);
        if (!error_) error_ = std::current_exception();
      }
      if (left_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard<std::mutex> lock(mu_);
        done_.notify_all();
      }
    }
  }

  void helper_loop() {
    uint64_t seen = 0;
    for (;;) {
      auto published = [&] { return (state_.load(std::memory_order_acquire) >> 32) != seen; };
      const auto until = std::chrono::steady_clock::now() + kHelperSpin;
      while (!published() && std::chrono::steady_clock::now() < until) FERRY_CPU_RELAX();
      if (!published()) {
        std::unique_lock<std::mutex> lock(mu_);
        ++sleepers_;
        wake_.wait(lock, [&] { return stopping_ || published(); });
        --sleepers_;
        if (stopping_) return;
      }
      seen = state_.load(std::memory_order_acquire) >> 32;
      work(seen);
    }
  }

  std::vector<std::thread> threads_;
  std::atomic<uint64_t> state_{0};  // generation << 32 | chunks << 16 | the next chunk to take
  uint64_t generation_ = 0;         // the caller's count of jobs, modulo 2^32
  std::atomic<int> left_{0};        // chunks of the current job not finished
  detail::ChunkFn fn_ = nullptr;
  void* context_ = nullptr;
  int64_t n_ = 0;
  std::exception_ptr error_;
  std::mutex mu_;
  std::condition_variable wake_;  // helpers asleep
  std::condition_variable done_;  // the caller, once it has nothing left to take
  int sleepers_ = 0;
  bool stopping_ = false;
};

Helpers& helpers() {
  thread_local Helpers h;
  return h;
}

}  // namespace

void set_intra_op_threads(int n) {
  FERRY_CHECK(n >= 1 && n <= 256, InvalidArgument,
              "set_intra_op_threads: expected 1 to 256 threads but got ", n);
  g_threads.store(n, std::memory_order_relaxed);
}

int intra_op_threads() { return g_threads.load(std::memory_order_relaxed); }

namespace detail {

void run_chunks(int64_t n, int64_t grain, ChunkFn fn, void* context) {
  const int64_t by_grain = std::max<int64_t>(1, n / std::max<int64_t>(1, grain));
  const int chunks = static_cast<int>(std::min<int64_t>(intra_op_threads(), by_grain));
  if (chunks <= 1 || t_in_chunk) {
    fn(context, 0, n);
    return;
  }
  helpers().run(n, chunks, fn, context);
}

}  // namespace detail
}  // namespace ferry
