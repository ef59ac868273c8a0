// all_to_all of tensor lists (collectives.h): the transport's own call, the pairwise exchange,
// or, where the ranks share a host, single copy through shared memory, as all_to_all_single.
#include <ferry/collectives/algorithm_table.h>
#include <ferry/collectives/algorithms/algorithms.h>
#include <ferry/collectives/engine/engine.h>
#include <ferry/collectives/engine/issue.h>
#include <ferry/collectives/ops/direct_post.h>
#include <ferry/collectives/ops/dispatch.h>
#include <ferry/collectives/shm/shm_ops.h>

#include <vector>

namespace ferry {
namespace {

using detail::data_of;
using detail::OpContext;

// Where each tensor of the lists lies: inputs[j] goes to rank j, outputs[k] comes from rank k.
detail::Exchange exchange_of(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) {
  detail::Exchange x;
  for (size_t k = 0; k < inputs.size(); ++k) {
    x.send.push_back(data_of(inputs[k]));
    x.send_bytes.push_back(inputs[k].nbytes());
    x.recv.push_back(data_of(outputs[k]));
    x.recv_bytes.push_back(outputs[k].nbytes());
  }
  return x;
}

// The lists as the shared-memory all-to-all's blocks: one part, each block a whole tensor.
// Holds the tensors, so that an op started at issue keeps them until it completed.
class ListBlocks final : public detail::shm::AllToAllBlocks {
 public:
  ListBlocks(std::vector<Tensor> inputs, std::vector<Tensor> outputs)
      : inputs_(std::move(inputs)), outputs_(std::move(outputs)) {}
  size_t parts() const override { return 1; }
  detail::shm::BlockRef send(size_t, int r) const override {
    const Tensor& t = inputs_[static_cast<size_t>(r)];
    return {const_cast<char*>(data_of(t)), t.nbytes(), {}};
  }
  detail::shm::BlockRef recv(size_t, int r) const override {
    Tensor& t = outputs_[static_cast<size_t>(r)];
    return {data_of(t), t.nbytes(), {}};
  }

 private:
  std::vector<Tensor> inputs_;
  mutable std::vector<Tensor> outputs_;  // written through the blocks (recv)
};

// What is in flight, whose Work then holds the output list, as the queued form's does.
class WithOutputs final : public detail::InFlight {
 public:
  WithOutputs(std::unique_ptr<detail::InFlight> op, std::vector<Tensor> outputs)
      : op_(std::move(op)), outputs_(std::move(outputs)) {}
  bool test() override { return op_->test(); }
  bool poll_until(Clock::time_point deadline) override {
    return op_->poll_until(deadline);
  }
  void wait_to_the_end(detail::GroupImpl& group, const char* op, uint64_t seq,
                       Clock::time_point deadline) override {
    op_->wait_to_the_end(group, op, seq, deadline);
  }
  std::vector<Tensor> finish() override {
    op_->finish();
    return std::move(outputs_);
  }
  detail::OnFailure on_failure() const override { return op_->on_failure(); }
  bool buffers_kept() const override { return op_->buffers_kept(); }
  bool polls_first() const override { return op_->polls_first(); }

 private:
  std::unique_ptr<detail::InFlight> op_;
  std::vector<Tensor> outputs_;
};

// Single copy through shared memory, started at issue; where the ranks cannot read each
// other's memory (every rank learns the same), the pairwise exchange posted over the same
// context instead. Peers do not write into the outputs (each rank reads what it receives):
// the op could not keep them for the life of the process if it failed while a peer wrote.
std::unique_ptr<detail::InFlight> post_shm_all_to_all(std::unique_ptr<OpContext> ctx,
                                                      const std::vector<Tensor>& inputs,
                                                      std::vector<Tensor>& outputs) {
  for (Tensor& t : outputs) t.bump_version();
  std::unique_ptr<detail::shm::AllToAllBlocks> blocks =
      std::make_unique<ListBlocks>(inputs, outputs);
  if (auto started = detail::shm::post_all_to_all(ctx, blocks, "all_to_all",
                                                   /*let_peers_write=*/false))
    return std::make_unique<WithOutputs>(std::move(started), outputs);
  for (const Tensor& t : inputs) ctx->hold(t);
  for (const Tensor& t : outputs) ctx->hold(t);
  ctx->ran(Collective::AllToAll, Algorithm::Pairwise);
  detail::post_pairwise_all_to_all(*ctx, exchange_of(inputs, outputs));
  return std::make_unique<WithOutputs>(detail::posted_exchange(std::move(ctx)), outputs);
}

}  // namespace

Work all_to_all(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                const Group& group) {
  detail::Validator v("all_to_all", group);
  if (inputs.empty() || !inputs[0].defined())
    v.fail("inputs must hold one defined tensor per rank");
  const DType dtype = inputs[0].dtype();
  v.tensor_list(inputs, "inputs", dtype);
  v.tensor_list(outputs, "outputs", dtype);
  const int me = group.rank();
  if (inputs[me].nbytes() != outputs[me].nbytes())
    v.fail(detail::str("inputs[", me, "] and outputs[", me, "] (the block a rank keeps) must ",
                       "have the same size, given ", shape_str(inputs[me].shape()), " and ",
                       shape_str(outputs[me].shape())));
  for (size_t i = 0; i < outputs.size(); ++i) {
    for (size_t j = 0; j < inputs.size(); ++j)
      v.no_overlap(inputs[j], "an input", outputs[i], "an output");
    for (size_t j = i + 1; j < outputs.size(); ++j)
      v.no_overlap(outputs[i], "an output", outputs[j], "another output");
  }
  // Asked with 0 bytes: the ranks' sizes differ, and the table must answer alike on all.
  const Algorithm algo = detail::algorithm_of(group, Collective::AllToAll, 0);
  std::vector<Tensor> outs = outputs;  // the post bumps their versions
  auto post_shm = [&](std::unique_ptr<OpContext> ctx) {
    return post_shm_all_to_all(std::move(ctx), inputs, outs);
  };
  return detail::issue(group, {
      .name = "all_to_all",
      .what = detail::OpSummary::of_lists(dtype),
      .post = algo == Algorithm::SharedMemory ? detail::OnePost(post_shm) : detail::OnePost(),
      .body = [&] { return detail::OpBody([inputs = std::vector<Tensor>(inputs),
                                           outputs = std::vector<Tensor>(outputs),
                         algo](OpContext& ctx) mutable {
    if (algo == Algorithm::SharedMemory) {
      const ListBlocks blocks(inputs, outputs);
      if (detail::shm::all_to_all(ctx, blocks, "all_to_all")) {
        for (Tensor& t : outputs) t.bump_version();
        return outputs;
      }
    }
    const detail::Exchange x = exchange_of(inputs, outputs);
    if (uses_native_collectives(algo)) {
      std::vector<const void*> send(x.send.begin(), x.send.end());
      std::vector<void*> recv(x.recv.begin(), x.recv.end());
      std::vector<Tensor> keep = inputs;
      keep.insert(keep.end(), outputs.begin(), outputs.end());
      ctx.wait_native(detail::call_native(ctx.group(), Collective::AllToAll, algo,
                                          [&](NativeCollectives& native, NativePath& path) {
                                            return native.all_to_all(send, x.send_bytes, recv,
                                                                     x.recv_bytes, path);
                                          }),
                      std::move(keep));
    } else if (algo == Algorithm::Pairwise || algo == Algorithm::SharedMemory) {
      ctx.ran(Collective::AllToAll, Algorithm::Pairwise);
      detail::pairwise_all_to_all(ctx, x);
    } else {
      detail::no_such_algorithm(Collective::AllToAll, algo);
    }
    for (Tensor& t : outputs) t.bump_version();
    return outputs;
  }); }});
}

}  // namespace ferry
