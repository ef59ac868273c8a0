// index_select and embedding_bag.
#include <ferry/autograd/ops.h>
#include <ferry/autograd/ops_detail.h>

namespace ferry {

namespace {
using Grads = std::vector<Tensor>;
using Needs = std::vector<bool>;
}  // namespace

Variable index_select(const Variable& x, int64_t dim, const Tensor& indices) {
  const Tensor& v = detail::value_of("index_select", x, "x");
  Tensor y = kernels::index_select(v, dim, indices);
  if (!detail::should_record({&x})) return Variable(std::move(y));
  // The indices are read again by backward, so changing them in place must be caught too.
  detail::SavedTensor saved_indices(indices, "the indices of index_select");
  return detail::record("index_select", {&x}, std::move(y),
                        [saved_indices, shape = v.shape(), dim](const Grads& g, const Needs&) {
                          return Grads{kernels::index_add(
                              shape, dim, saved_indices.get("index_select"), g[0])};
                        });
}

Variable embedding_bag(const Variable& weight, const Tensor& indices, const Tensor& offsets,
                       EmbeddingBagMode mode, const Variable& per_sample_weights) {
  constexpr const char* kOp = "embedding_bag";
  const Tensor& w = detail::value_of(kOp, weight, "weight");
  const Tensor psw = per_sample_weights.defined()
                         ? detail::value_of(kOp, per_sample_weights, "per_sample_weights")
                         : Tensor();
  Tensor y = kernels::embedding_bag(w, indices, offsets, mode, psw);
  if (!detail::should_record({&weight, &per_sample_weights})) return Variable(std::move(y));
  const bool psw_grad = per_sample_weights.defined() && per_sample_weights.requires_grad();
  detail::SavedTensor saved_indices(indices, "the indices of embedding_bag");
  detail::SavedTensor saved_offsets(offsets, "the offsets of embedding_bag");
  // The weight's gradient scales rows by the per-sample weights; theirs reads the weight.
  detail::SavedTensor saved_psw =
      per_sample_weights.defined() && weight.requires_grad() ? detail::save(per_sample_weights)
                                                             : detail::SavedTensor();
  detail::SavedTensor saved_weight = detail::save_if(psw_grad, weight);
  return detail::record(
      kOp, {&weight, &per_sample_weights}, std::move(y),
      [=, num_weights = w.size(0)](const Grads& g, const Needs& needs) {
        const Tensor& idx = saved_indices.get(kOp);
        const Tensor& off = saved_offsets.get(kOp);
        Grads out(2);
        if (needs[0]) {
          out[0] = kernels::embedding_bag_weight_grad(g[0], idx, off, mode, saved_psw.get(kOp),
                                                      num_weights);
        }
        if (needs[1]) {
          out[1] = kernels::embedding_bag_per_sample_weights_grad(g[0], saved_weight.get(kOp),
                                                                  idx, off);
        }
        return out;
      });
}

}  // namespace ferry
