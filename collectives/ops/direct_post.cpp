#include <ferry/collectives/ops/direct_post.h>

#include <ferry/collectives/algorithms/algorithms.h>
#include <ferry/collectives/engine/in_flight_work.h>
#include <ferry/collectives/engine/op_context.h>
#include <ferry/collectives/engine/reduce_kernels.h>
#include <ferry/runtime/object_pool.h>

#include <memory>
#include <thread>

namespace ferry::detail {
namespace {

bool poll_posted(OpContext& ctx, Clock::time_point deadline) {
  while (!ctx.test_all()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

// The direct exchange posted at issue: whoever drives its Work completes the exchange and
// combines the payloads. From the object pool (object_pool.h), as every per-op object of the path.
class DirectAllReduceInFlight final : public InFlight, public Pooled {
 public:
  DirectAllReduceInFlight(std::unique_ptr<OpContext> ctx, std::unique_ptr<char[]> gathered,
                          const char* in, char* out, size_t count, ReduceSpec spec)
      : ctx_(std::move(ctx)), gathered_(std::move(gathered)), in_(in), out_(out), count_(count),
        spec_(spec) {}
  ~DirectAllReduceInFlight() override {
    // The receives write into `gathered_`: withdrawn before it goes, and it stays for the rest
    // of the process if one could not be.
    ctx_->withdraw();
    if (ctx_->buffers_kept()) (void)gathered_.release();
  }

  bool test() override { return ctx_->test_all(); }
  bool poll_until(Clock::time_point deadline) override { return poll_posted(*ctx_, deadline); }
  // The context carries the op's deadline, with the diagnosis of absent ranks on expiry.
  void wait_to_the_end(GroupImpl&, const char*, uint64_t, Clock::time_point) override {
    ctx_->wait_all();
  }
  std::vector<Tensor> finish() override {
    finish_direct_all_reduce(ctx_->rank(), ctx_->size(), in_, out_, gathered_.get(), count_,
                             spec_);
    return {};
  }
  OnFailure on_failure() const override { return OnFailure::kPoisonTellPeers; }
  bool buffers_kept() const override { return ctx_->buffers_kept(); }

 private:
  std::unique_ptr<OpContext> ctx_;    // the posted exchange; destroying it withdraws it
  std::unique_ptr<char[]> gathered_;  // every rank's payload
  const char* in_;
  char* out_;
  size_t count_;
  ReduceSpec spec_;
};

// An exchange whose messages carry the result: done when they are.
class PostedExchange final : public InFlight, public Pooled {
 public:
  explicit PostedExchange(std::unique_ptr<OpContext> ctx) : ctx_(std::move(ctx)) {}

  bool test() override { return ctx_->test_all(); }
  bool poll_until(Clock::time_point deadline) override { return poll_posted(*ctx_, deadline); }
  void wait_to_the_end(GroupImpl&, const char*, uint64_t, Clock::time_point) override {
    ctx_->wait_all();
  }
  std::vector<Tensor> finish() override { return {}; }
  OnFailure on_failure() const override { return OnFailure::kPoisonTellPeers; }
  bool buffers_kept() const override { return ctx_->buffers_kept(); }

 private:
  std::unique_ptr<OpContext> ctx_;  // destroying it withdraws what is still posted
};

}  // namespace

std::unique_ptr<InFlight> posted_exchange(std::unique_ptr<OpContext> ctx) {
  return std::make_unique<PostedExchange>(std::move(ctx));
}

std::unique_ptr<InFlight> post_direct_all_reduce_now(std::unique_ptr<OpContext> ctx,
                                                     const Tensor& input, Tensor& output,
                                                     ReduceOp op) {
  const size_t count = static_cast<size_t>(input.numel());
  const ReduceSpec spec{input.dtype(), op};
  const size_t bytes = count * spec.elem_bytes();
  std::unique_ptr<char[]> gathered(new char[bytes * static_cast<size_t>(ctx->size())]);
  const char* in = static_cast<const char*>(input.raw_data());
  char* out = static_cast<char*>(output.raw_data());
  output.bump_version();
  ctx->ran(Collective::AllReduce, Algorithm::Direct);
  post_direct_all_reduce(*ctx, in, gathered.get(), bytes);
  return std::make_unique<DirectAllReduceInFlight>(std::move(ctx), std::move(gathered), in, out,
                                                   count, spec);
}

}  // namespace ferry::detail
