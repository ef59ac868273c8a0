#include <ferry/collectives/torchrec/sharding/weights_dist.h>

#include <ferry/autograd/function.h>
#include <ferry/autograd/node.h>
#include <ferry/collectives/collectives.h>
#include <ferry/collectives/torchrec/utils/format.h>
#include <ferry/runtime/error.h>

#include <memory>
#include <numeric>
#include <string>
#include <vector>

namespace ferry::torchrec::detail {

Tensor value_sources(const KeyedJaggedTensor& kjt,
                     const std::function<KeyedJaggedTensor(const KeyedJaggedTensor&)>& rearrange) {
  const int64_t n = kjt.values().numel();
  std::vector<double> pos(static_cast<size_t>(n));
  std::iota(pos.begin(), pos.end(), 0.0);
  const KeyedJaggedTensor tagged =
      kjt.variable_stride_per_key()
          ? KeyedJaggedTensor::from_lengths_sync(kjt.keys(), kjt.values(), kjt.lengths(),
                                                 from_vector(pos), std::nullopt,
                                                 kjt.stride_per_key_per_rank())
          : KeyedJaggedTensor::from_lengths_sync(kjt.keys(), kjt.values(), kjt.lengths(),
                                                 from_vector(pos), kjt.stride());
  const Tensor moved = rearrange(tagged).weights();
  std::vector<int64_t> out(static_cast<size_t>(moved.numel()));
  for (int64_t i = 0; i < moved.numel(); ++i)
    out[static_cast<size_t>(i)] = static_cast<int64_t>(moved.get_flat(i));
  return from_vector(out);
}

namespace {

// in_pos[o]: where the received value o (recat order: local key, source in stagger order,
// sample, id) sat in the all-to-all's receive buffer (source-major: source, local key, sample,
// id). With a uniform stride per key each source's batch is stride_per_rank; with a variable
// one (VBE) each (key, source) has its own, stride_per_key_per_rank[key] in recat order.
std::vector<int64_t> receive_positions(const KJTAllToAllTensorsAwaitable& ex,
                                       const KeyedJaggedTensor& received, int W, int me) {
  const int64_t n = received.values().numel();
  std::vector<int64_t> in_pos;
  in_pos.reserve(static_cast<size_t>(n));
  if (W == 1) {  // the input came back unchanged
    for (int64_t i = 0; i < n; ++i) in_pos.push_back(i);
    return in_pos;
  }
  const std::vector<int64_t>& sp = ex.stride_per_rank();
  const std::vector<int64_t>& from = ex.output_splits("values");
  const bool vbe = received.variable_stride_per_key();
  FERRY_CHECK((vbe || static_cast<int>(sp.size()) == W) && static_cast<int>(from.size()) == W,
              InvalidArgument,
              "ShardedEmbeddingBagCollection weights gradient on rank ", me,
              ": the input dist has no stride per rank (a variable stride per key is not "
              "supported)");
  const int64_t stagger = ex.stagger(), per = W / stagger;
  std::vector<int> order;  // sources in recat order (get_recat, sparse/kjt_dist.h)
  for (int64_t x = 0; x < per; ++x)
    for (int64_t y = 0; y < stagger; ++y) order.push_back(static_cast<int>(x + per * y));
  std::vector<int64_t> base(static_cast<size_t>(W), 0);  // start of each source's block
  for (size_t s = 1; s < base.size(); ++s) base[s] = base[s - 1] + from[s - 1];
  const Tensor lengths = received.lengths();
  const int64_t L = received.num_keys();
  std::vector<int64_t> done(static_cast<size_t>(W), 0);  // values of each source placed so far
  for (int64_t t = 0; t < L; ++t) {
    int64_t sample = received.lengths_offset_per_key()[static_cast<size_t>(t)];
    for (size_t k = 0; k < order.size(); ++k) {
      const int s = order[k];
      const int64_t batch = vbe ? received.stride_per_key_per_rank()[static_cast<size_t>(t)][k]
                                : sp[static_cast<size_t>(s)];
      int64_t c = 0;
      for (int64_t b = 0; b < batch; ++b) c += static_cast<int64_t>(lengths.get_flat(sample + b));
      sample += batch;
      const int64_t start = base[static_cast<size_t>(s)] + done[static_cast<size_t>(s)];
      for (int64_t i = 0; i < c; ++i) in_pos.push_back(start + i);
      done[static_cast<size_t>(s)] += c;
    }
  }
  for (int s = 0; s < W; ++s)
    FERRY_CHECK(done[static_cast<size_t>(s)] == from[static_cast<size_t>(s)], InvalidArgument,
                "ShardedEmbeddingBagCollection weights gradient: rank ", me,
                " received ", from[static_cast<size_t>(s)], " values from rank ", s,
                " but its lengths account for ", done[static_cast<size_t>(s)]);
  FERRY_CHECK(static_cast<int64_t>(in_pos.size()) == n, InvalidArgument,
              "ShardedEmbeddingBagCollection weights gradient on rank ", me,
              ": the received lengths account for ",
              in_pos.size(), " values, the KJT has ", n);
  return in_pos;
}

class DistWeights : public Function {
 public:
  DistWeights(Tensor received, std::vector<int64_t> in_pos, Tensor send_index,
              std::vector<int64_t> recv_splits, std::vector<int64_t> send_splits, Group group)
      : received_(std::move(received)),
        in_pos_(std::move(in_pos)),
        send_index_(std::move(send_index)),
        recv_splits_(std::move(recv_splits)),
        send_splits_(std::move(send_splits)),
        group_(std::move(group)) {}
  std::string name() const override { return "torchrec_kjt_weights_dist"; }
  bool is_collective() const override { return group_.size() > 1; }

  std::vector<Tensor> forward(Context&, const std::vector<Tensor>& in) override {
    caller_numel_ = in[0].numel();
    return {received_};
  }

  std::vector<Tensor> backward(Context&, const std::vector<Tensor>& g) override {
    const Tensor& grad = g[0];
    const DType dt = received_.dtype();
    // Back into the receive buffer's order (source-major).
    Tensor buf = zeros({received_.numel()}, dt);
    if (grad.defined())
      for (size_t o = 0; o < in_pos_.size(); ++o)
        buf.set_flat(in_pos_[o], grad.get_flat(static_cast<int64_t>(o)));
    Tensor sent = buf;
    if (group_.size() > 1) {
      const int64_t n_sent = detail::sum_of(send_splits_);
      sent = zeros({n_sent}, dt);
      // Each received value's gradient goes back to its source: the forward's splits swapped.
      all_to_all_single(buf, sent, send_splits_, recv_splits_, group_).wait();
    }
    Tensor out = zeros({caller_numel_}, dt);
    for (int64_t j = 0; j < sent.numel(); ++j) {
      const int64_t p = static_cast<int64_t>(send_index_.get_flat(j));
      out.set_flat(p, out.get_flat(p) + sent.get_flat(j));
    }
    return {out};
  }

 private:
  Tensor received_;
  std::vector<int64_t> in_pos_;
  Tensor send_index_;
  std::vector<int64_t> recv_splits_, send_splits_;
  Group group_;
  int64_t caller_numel_ = 0;
};

}  // namespace

Variable dist_weights(const Variable& caller_weights, const Tensor& send_index,
                      const KJTAllToAllTensorsAwaitable& exchange,
                      const KeyedJaggedTensor& received, const Group& group) {
  const int W = group.size();
  std::vector<int64_t> recv_splits, send_splits;
  if (W > 1) {
    recv_splits = exchange.output_splits("values");
    send_splits = exchange.input_splits("values");
  }
  auto fn = std::make_shared<DistWeights>(
      received.weights(), receive_positions(exchange, received, W, group.rank()), send_index,
      std::move(recv_splits), std::move(send_splits), group);
  Variable out = apply(fn, {caller_weights})[0];
  // A rank that looks nothing up drops `out` at once; the node must live to run its half of the
  // backward all-to-all (the peers send it its weights' gradients).
  if (out.impl()->producer) ferry::detail::keep_until_backward(out.impl()->producer);
  return out;
}

}  // namespace ferry::torchrec::detail
