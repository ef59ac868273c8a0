#include <ferry/collectives/shm/shm_ops.h>

#include <ferry/collectives/shm/shm_group.h>
#include <ferry/runtime/object_pool.h>

#include <exception>

namespace ferry::detail::shm {
namespace {

OpRef op_of(const OpContext& ctx) { return OpRef{ctx.op(), ctx.seq(), ctx.deadline()}; }

// An op started in shared memory: whoever tests or waits for its Work advances the group's
// shared-memory ops (shm_group.h); nothing of it is handed to another thread.
class ShmInFlight final : public InFlight, public Pooled {
 public:
  ShmInFlight(std::shared_ptr<GroupShm> shm, uint32_t n, OpRef op)
      : shm_(std::move(shm)), n_(n), op_(op) {}

  bool test() override { return shm_->test(n_); }
  bool poll_until(Clock::time_point deadline) override {
    return shm_->wait(n_, std::min(deadline, op_.deadline), op_);
  }
  void wait_to_the_end(GroupImpl&, const char*, uint64_t, Clock::time_point) override {
    if (!shm_->wait(n_, op_.deadline, op_)) shm_->fail_timeout(n_, op_);
  }
  std::vector<Tensor> finish() override { return {}; }
  // The caller's buffers are read by peers only in an all_to_all, and only until every peer
  // said done; a failed op's peers fail too, so nothing needs keeping for the process's life.
  OnFailure on_failure() const override { return OnFailure::kPoisonTellPeers; }
  // A peer's part arrives within microseconds when it runs: poll before the full wait.
  bool polls_first() const override { return true; }

 private:
  std::shared_ptr<GroupShm> shm_;
  uint32_t n_;
  OpRef op_;
};

// Waits for op n on `shm` under the op's deadline, as a queued body does.
void run_to_the_end(GroupShm& shm, uint32_t n, const OpRef& op) {
  if (!shm.wait(n, op.deadline, op)) shm.fail_timeout(n, op);
}

}  // namespace

std::unique_ptr<InFlight> post_all_reduce(std::unique_ptr<OpContext> ctx, const Tensor& input,
                                          Tensor& output, ReduceOp op) {
  const OpRef ref = op_of(*ctx);
  std::shared_ptr<GroupShm> shm = GroupShm::of(ctx->group(), ref);
  output.bump_version();
  ctx->ran(Collective::AllReduce, Algorithm::SharedMemory);
  const uint32_t n = shm->start_all_reduce(ref, input.raw_data(), output.raw_data(),
                                           static_cast<size_t>(input.numel()), input.dtype(), op);
  return std::make_unique<ShmInFlight>(std::move(shm), n, ref);
}

void all_reduce(OpContext& ctx, const void* in, void* out, size_t count, DType dtype,
                ReduceOp op) {
  const OpRef ref = op_of(ctx);
  std::shared_ptr<GroupShm> shm = GroupShm::of(ctx.group(), ref);
  run_to_the_end(*shm, shm->start_all_reduce(ref, in, out, count, dtype, op), ref);
}

std::unique_ptr<InFlight> post_barrier(std::unique_ptr<OpContext> ctx) {
  const OpRef ref = op_of(*ctx);
  std::shared_ptr<GroupShm> shm = GroupShm::of(ctx->group(), ref);
  ctx->ran(Collective::Barrier, Algorithm::SharedMemory);
  const uint32_t n = shm->start_barrier(ref);
  return std::make_unique<ShmInFlight>(std::move(shm), n, ref);
}

void barrier(OpContext& ctx) {
  const OpRef ref = op_of(ctx);
  std::shared_ptr<GroupShm> shm = GroupShm::of(ctx.group(), ref);
  run_to_the_end(*shm, shm->start_barrier(ref), ref);
}

std::unique_ptr<InFlight> post_all_to_all(std::unique_ptr<OpContext>& ctx, const Block* send,
                                          char* out, const uint64_t* recv_offsets) {
  const OpRef ref = op_of(*ctx);
  std::shared_ptr<GroupShm> shm = GroupShm::of(ctx->group(), ref);
  if (!shm->peers_readable(ref)) return nullptr;
  ctx->ran(Collective::AllToAll, Algorithm::SharedMemory);
  const uint32_t n = shm->start_all_to_all(ref, send, out, recv_offsets);
  return std::make_unique<ShmInFlight>(std::move(shm), n, ref);
}

bool all_to_all(OpContext& ctx, const Block* send, char* out, const uint64_t* recv_offsets) {
  const OpRef ref = op_of(ctx);
  std::shared_ptr<GroupShm> shm = GroupShm::of(ctx.group(), ref);
  if (!shm->peers_readable(ref)) return false;
  ctx.ran(Collective::AllToAll, Algorithm::SharedMemory);
  run_to_the_end(*shm, shm->start_all_to_all(ref, send, out, recv_offsets), ref);
  return true;
}

}  // namespace ferry::detail::shm
